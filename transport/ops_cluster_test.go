package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/client"
)

// On a real three-node cluster, through followers only: a task that failed
// keeps the history of its attempts, is retried by a raw call to a
// follower (forwarded to the leader), runs again with a new attempt
// budget and succeeds; a live one is refused as not retryable; a cancel by
// filter through the other follower cancels what matches; the replicas
// converge.
func TestRetryAndCancelManyThroughFollowers(t *testing.T) {
	c := newTestCluster(t, 3, 3, 2*time.Second)
	_, followers := c.Leader()
	f1, f2 := followers[0], followers[1]
	cl := c.Client(f1)
	ctx := ctxT(t, time.Minute)

	healed := make(chan struct{})
	runWorker(t, c.Client(f2), "ops", map[string]client.Handler{
		"fragile": client.HandlerFunc(func(ctx context.Context, job *client.Job) ([]byte, error) {
			select {
			case <-healed:
				return []byte("healed"), nil
			default:
				return nil, client.Retryable(errors.New("not yet"), time.Millisecond)
			}
		}),
	})
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "ops", Kind: "fragile", MaxAttempts: 2}})
	require.NoError(t, err)
	task, err := cl.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusFailed, task.Status)
	require.Len(t, task.Attempts, 2)
	require.Equal(t, []string{client.AttemptRetry, client.AttemptFailed}, []string{task.Attempts[0].Outcome, task.Attempts[1].Outcome})
	require.Equal(t, "not yet", task.Attempts[1].Error)
	require.NotEmpty(t, task.Attempts[0].Worker)

	close(healed)
	resp, err := taskClient(t, f1).Retry(ctx, connect.NewRequest(&cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: sub.ID}}))
	require.NoError(t, err)
	require.Equal(t, sub.ID, resp.Msg.GetTask().GetId())
	require.Equal(t, uint32(2), resp.Msg.GetTask().GetAttemptBase())
	require.Len(t, resp.Msg.GetTask().GetAttempts(), 2)
	task, err = c.Client(f2).Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, task.Status)
	require.Equal(t, "healed", string(task.Output))
	require.Equal(t, 3, task.Attempt)
	require.Len(t, task.Attempts, 3)
	require.Equal(t, client.AttemptSucceeded, task.Attempts[2].Outcome)

	_, err = taskClient(t, f2).Retry(ctx, connect.NewRequest(&cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: sub.ID}}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Equal(t, apierr.KindNotRetryable, apierr.Kind(err))

	// A cancel by filter, through the other follower.
	var ids []string
	for range 3 {
		s, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "idle", Kind: "k"}})
		require.NoError(t, err)
		ids = append(ids, s.ID)
	}
	n, err := c.Client(f2).CancelMany(ctx, client.CancelFilter{Pool: "idle", Statuses: []string{client.StatusQueued}})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	for _, id := range ids {
		got, err := cl.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, client.StatusCancelled, got.Status)
	}
	c.Converged()
}
