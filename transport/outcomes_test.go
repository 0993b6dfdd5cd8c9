package transport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

// TestHandlerOutcomes runs the SDK worker's outcomes against three real
// nodes: a handler that panics has a failed attempt whose error is the
// panic value and a stack excerpt from the panicking call, retried per the
// task's retry policy (a task out of attempts ends failed with it), while
// the worker keeps running; a handler that returns client.Cancel ends its
// task cancelled at once, whatever attempts it had left.
func TestHandlerOutcomes(t *testing.T) {
	c := newTestCluster(t, 3, 3, 2*time.Second)
	_, followers := c.Leader()
	cl := c.Client(followers[0])
	runWorker(t, c.Client(followers[1]), "outcomes", map[string]client.Handler{
		"panic": client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
			if string(job.Task.Payload) == "once" && job.Attempt > 1 {
				return []byte("recovered"), nil
			}
			explode(job.Attempt)
			return nil, nil
		}),
		"cancel": client.HandlerFunc(func(context.Context, *client.Job) ([]byte, error) {
			return nil, client.Cancel("order withdrawn")
		}),
		"ok": client.HandlerFunc(echo),
	})
	backoff := &client.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	submit := func(kind, payload string, attempts int) string {
		t.Helper()
		sub, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{
			Pool: "outcomes", Kind: kind, Payload: []byte(payload), MaxAttempts: attempts, Backoff: backoff}})
		require.NoError(t, err)
		return sub.ID
	}
	wait := func(id string) *client.Task {
		t.Helper()
		task, err := cl.Wait(ctxT(t, 30*time.Second), id)
		require.NoError(t, err)
		return task
	}

	always, once, cancelled := submit("panic", "always", 2), submit("panic", "once", 3), submit("cancel", "", 5)

	task := wait(always)
	require.Equal(t, client.StatusFailed, task.Status)
	require.Equal(t, 2, task.Attempt, "retried per its policy, then failed")
	require.True(t, strings.HasPrefix(task.Error, "panic: attempt 2 exploded\n"), "error %q", task.Error)
	require.Contains(t, strings.Split(task.Error, "\n")[1], "transport_test.explode(", "the excerpt starts at the panicking call: %q", task.Error)
	require.Contains(t, task.Error, "outcomes_test.go:")
	require.NotContains(t, task.Error, "runtime/debug")

	task = wait(once)
	require.Equal(t, client.StatusSucceeded, task.Status)
	require.Equal(t, 2, task.Attempt)
	require.Equal(t, []byte("recovered"), task.Output)

	task = wait(cancelled)
	require.Equal(t, client.StatusCancelled, task.Status)
	require.Equal(t, 1, task.Attempt, "no retry after a cancelled attempt")
	require.Equal(t, "order withdrawn", task.Error)

	// The worker kept running through the panics.
	task = wait(submit("ok", "after", 1))
	require.Equal(t, client.StatusSucceeded, task.Status)
	require.Equal(t, []byte("done:after"), task.Output)
}

// explode panics in a frame of its own.
//
//go:noinline
func explode(attempt int) {
	panic(fmt.Sprintf("attempt %d exploded", attempt))
}
