package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// runOnce polls one attempt of pool on the leader and ends it with kind.
func runOnce(ctx context.Context, t *testing.T, c *testcluster.Cluster, pool string, kind cluster.OutcomeKind) {
	t.Helper()
	l, _ := c.Leader()
	grants, err := l.Node.Poll(ctx, cluster.Offer{Worker: "w", Pool: pool, Slots: 1})
	require.NoError(t, err)
	require.Len(t, grants, 1)
	errs := l.Node.Complete(ctx, []cluster.Completion{{Lease: grants[0].Lease, Outcome: cluster.Outcome{Kind: kind, Message: "no"}}})
	require.NoError(t, errs[0])
}

// TestHistoryWaitsForFormat6 plays a cluster with one server of log format
// 5: attempts end without history on every replica (nothing the old server
// cannot apply is written, and it stays healthy), a retry is refused as
// needing format 6, and a cancel by filter (format 1 ends) works. Once the
// server is upgraded, a retry works and the attempts that end from then on
// are recorded, alike on every replica.
func TestHistoryWaitsForFormat6(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Configure(func(i int, cfg *cluster.Config) {
		if i == 2 {
			cfg.LogVersion = 5 // n3 plays the release before format 6
		}
	}))
	leader, _ := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	res, err := leader.Node.Submit(ctx, cluster.SubmitOne, []cluster.Spec{{Template: fsm.Template{Pool: "h", Kind: "k", MaxAttempts: 1}}})
	require.NoError(t, err)
	id := res.Tasks[0].ID
	runOnce(ctx, t, c, "h", cluster.OutcomePermanent)
	c.Converged()
	for _, n := range c.Live() {
		task, ok := n.Node.FSM().Get(id)
		require.True(t, ok)
		require.Equal(t, fsm.StatusFailed, task.Status, n.ID)
		require.Empty(t, task.Attempts, "no history while a server is of format 5 (%s)", n.ID)
		require.Equal(t, cluster.HealthOK, n.Node.Health().Status, "%s: %v", n.ID, n.Node.Health().Reasons)
	}
	l, _ := c.Leader()
	_, err = l.Node.Retry(ctx, cluster.TaskRef{ID: id})
	var ve *cluster.VersionError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, uint16(6), ve.Need)
	require.Equal(t, uint16(5), ve.Have)

	_, err = l.Node.Submit(ctx, cluster.SubmitOne, []cluster.Spec{{Template: fsm.Template{Pool: "idle", Kind: "k"}}})
	require.NoError(t, err)
	n, err := l.Node.CancelMany(ctx, cluster.TaskFilter{Pool: "idle", Statuses: []fsm.Status{fsm.StatusQueued}})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Upgrade n3.
	c.Stop("n3")
	cfg := c.Node("n3").Config
	cfg.LogVersion = 0
	c.Start(cfg)
	var last error
	require.Eventually(t, func() bool {
		l, _ := c.Leader()
		_, last = l.Node.Retry(ctx, cluster.TaskRef{ID: id})
		return last == nil || !errors.As(last, &ve)
	}, 30*time.Second, 50*time.Millisecond, "the upgraded cluster never took the retry")
	require.NoError(t, last)
	runOnce(ctx, t, c, "h", cluster.OutcomeRetryable) // the budget is one attempt: it fails again
	c.Converged()
	for _, n := range c.Live() {
		task, ok := n.Node.FSM().Get(id)
		require.True(t, ok)
		require.Equal(t, fsm.StatusFailed, task.Status, n.ID)
		require.Equal(t, uint32(2), task.Attempt, n.ID)
		require.Equal(t, uint32(1), task.AttemptBase, n.ID)
		require.Len(t, task.Attempts, 1, n.ID)
		require.Equal(t, uint32(2), task.Attempts[0].Attempt, n.ID)
		require.Equal(t, fsm.AttemptFailed, task.Attempts[0].Outcome, n.ID)
		require.Equal(t, cluster.HealthOK, n.Node.Health().Status, "%s: %v", n.ID, n.Node.Health().Reasons)
	}
}
