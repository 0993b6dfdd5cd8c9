package clienttest_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/client/clienttest"
)

// The SDK's failed-task operations against the fake: attempt history as a
// worker's attempts end (bounded errors), a retry with a new attempt
// budget, its refusals, and a cancel by filter.
func TestRetryAndHistory(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	cl, err := client.New(c.Addrs(), client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx := testCtx(t)

	long := strings.Repeat("é", 1000)
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "flaky", MaxAttempts: 2}})
	require.NoError(t, err)
	var fail atomic.Bool
	fail.Store(true)
	w, err := cl.NewWorker(client.WorkerConfig{Pool: "p", Handlers: map[string]client.Handler{
		"flaky": client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
			if fail.Load() {
				return nil, client.Retryable(errors.New(long), time.Millisecond)
			}
			return []byte("ok"), nil
		}),
	}})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()

	task, err := cl.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusFailed, task.Status)
	require.Len(t, task.Attempts, 2)
	for i, a := range task.Attempts {
		require.Equal(t, i+1, a.Attempt)
		require.NotEmpty(t, a.Worker)
		require.NotZero(t, a.Lease)
		require.Equal(t, a.Lease>>32, a.Epoch)
		require.False(t, a.StartedAt.IsZero())
		require.False(t, a.FinishedAt.Before(a.StartedAt))
		require.LessOrEqual(t, len(a.Error), 1024)
		require.True(t, utf8.ValidString(a.Error))
		require.True(t, strings.HasSuffix(a.Error, "… (truncated)"))
	}
	require.Equal(t, []string{client.AttemptRetry, client.AttemptFailed}, []string{task.Attempts[0].Outcome, task.Attempts[1].Outcome})
	require.Equal(t, long, task.Error, "the task's own error is whole")

	// Retried: a new budget, the attempts counted on.
	fail.Store(false)
	task, err = cl.RetryTask(ctx, client.ByID(sub.ID))
	require.NoError(t, err)
	require.Equal(t, client.StatusQueued, task.Status)
	require.Equal(t, 2, task.AttemptBase)
	task, err = cl.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, task.Status)
	require.Equal(t, 3, task.Attempt)
	require.Len(t, task.Attempts, 3)
	require.Equal(t, client.AttemptSucceeded, task.Attempts[2].Outcome)

	_, err = cl.RetryTask(ctx, client.ByID(sub.ID))
	require.ErrorIs(t, err, client.ErrNotRetryable)
	_, err = cl.RetryTask(ctx, client.ByID("nope"))
	require.ErrorIs(t, err, client.ErrNotFound)
}

func TestCancelMany(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	cl, err := client.New(c.Addrs(), client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx := testCtx(t)
	var ids []string
	for _, kind := range []string{"a", "a", "b", "a"} {
		sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: kind}})
		require.NoError(t, err)
		ids = append(ids, sub.ID)
	}
	_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "q", Kind: "a"}})
	require.NoError(t, err)
	n, err := cl.CancelMany(ctx, client.CancelFilter{Pool: "p", Statuses: []string{client.StatusQueued}, Kinds: []string{"a"}})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	for i, id := range ids {
		task, err := cl.Get(ctx, id)
		require.NoError(t, err)
		want := client.StatusCancelled
		if i == 2 {
			want = client.StatusQueued
		}
		require.Equal(t, want, task.Status)
	}
	_, err = cl.CancelMany(ctx, client.CancelFilter{Pool: "p"})
	var ie *client.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "statuses", ie.Field)
	_, err = cl.CancelMany(ctx, client.CancelFilter{Pool: "p", Statuses: []string{client.StatusFailed}})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "statuses", ie.Field)
}
