package e2e

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFollowerRouting submits through one follower, waits and reads through
// the other, and runs the tasks with a worker that is given one follower's
// address only: any node serves any call.
func TestFollowerRouting(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	leader, followers := c.followers()
	require.Len(t, followers, 2)
	f1, f2 := followers[0], followers[1]
	t.Logf("leader %s, submitting through %s, waiting through %s", leader.id, f1.id, f2.id)

	c.startWorker(t, "worker-on-follower", f1.httpAddr, "-pool", "routed",
		"-handler", `job=printf 'out-%s-' "$CRONOQ_TASK_ID"; cat`)

	ids := map[string]string{}
	for i := range 5 {
		key := fmt.Sprintf("routed-%d", i)
		out := cliAt(t, f1.httpAddr, "submit", "-pool", "routed", "-kind", "job", "-key", key, "-payload", key, "-o", "json").ok(t)
		s := decodeStrict[submitJSON](t, out)
		require.False(t, s.Duplicate)
		ids[key] = s.ID
	}
	for key, id := range ids {
		task := decodeStrict[taskJSON](t, cliAt(t, f2.httpAddr, "wait", id, "-timeout", "30s", "-o", "json").ok(t))
		checkTask(t, task)
		require.Equal(t, "succeeded", task.Status)
		require.Equal(t, "out-"+id+"-"+key, *task.Output)
		byKey := decodeStrict[taskJSON](t, cliAt(t, f2.httpAddr, "status", "-key", key, "-o", "json").ok(t))
		require.Equal(t, task, byKey)
	}

	// A duplicate through the other follower is the same task.
	again := decodeStrict[submitJSON](t, cliAt(t, f2.httpAddr, "submit", "-pool", "routed", "-kind", "job", "-key", "routed-0", "-payload", "routed-0", "-o", "json").ok(t))
	require.Equal(t, submitJSON{ID: ids["routed-0"], Duplicate: true}, again)

	// Submit and wait in one call through a follower.
	task := decodeStrict[taskJSON](t, cliAt(t, f2.httpAddr, "submit", "-pool", "routed", "-kind", "job", "-payload", "w", "-wait", "-o", "json").ok(t))
	require.Equal(t, "succeeded", task.Status)
	require.Equal(t, "out-"+task.ID+"-w", *task.Output)

	// Cancel and schedule changes through followers.
	later := decodeStrict[submitJSON](t, cliAt(t, f1.httpAddr, "submit", "-pool", "routed", "-kind", "job", "-delay", "1h", "-o", "json").ok(t)).ID
	require.True(t, decodeStrict[cancelJSON](t, cliAt(t, f2.httpAddr, "cancel", later, "-o", "json").ok(t)).Cancelled)
	require.Equal(t, "cancelled", decodeStrict[taskJSON](t, cliAt(t, f1.httpAddr, "status", later, "-o", "json").ok(t)).Status)
	decodeStrict[scheduleAddJSON](t, cliAt(t, f1.httpAddr, "recurring", "add", "s", "-cron", "@hourly", "-pool", "routed", "-kind", "job", "-o", "json").ok(t))
	require.Len(t, decodeStrict[[]scheduleJSON](t, cliAt(t, f2.httpAddr, "recurring", "list", "-o", "json").ok(t)), 1)
	require.True(t, decodeStrict[scheduleRmJSON](t, cliAt(t, f2.httpAddr, "recurring", "rm", "s", "-o", "json").ok(t)).Removed)

	// A list through a follower sees everything the leader committed.
	tasks := decodeStrict[listJSON](t, cliAt(t, f2.httpAddr, "list", "-pool", "routed", "-o", "json").ok(t)).Tasks
	require.Len(t, tasks, 7)

	// The leader did not move while this ran: the worker was given a
	// follower's address while another node led.
	for _, n := range []*node{f1, f2} {
		h := decodeStrict[healthJSON](t, cliAt(t, n.httpAddr, "health", "-o", "json").ok(t))
		require.Equal(t, leader.id, h.Leader, "asked %s", n.id)
	}
}
