package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

type submitResult struct {
	i   int
	sub Submitted
	err error
}

// coalescingClient is a Client of one fake node with a single Submit slot,
// already taken by a submit the node holds until release is called; first
// gets that submit's result.
func coalescingClient(t *testing.T) (fc *clienttest.Cluster, c *Client, ctx context.Context, release func(), first <-chan submitResult) {
	fc = newFakeCluster(t, 1, 0)
	c = newTestClient(t, addrs(fc, 0), WithSubmitConcurrency(1))
	ctx = testCtx(t)
	release, first = occupySubmitSlot(ctx, fc, c)
	t.Cleanup(release)
	return fc, c, ctx, release, first
}

// occupySubmitSlot makes the fake node hold submits (until release is
// called) and starts one, which takes the Client's only slot.
func occupySubmitSlot(ctx context.Context, fc *clienttest.Cluster, c *Client) (release func(), first <-chan submitResult) {
	release = fc.Hold(cronoqv1connect.TaskServiceSubmitProcedure)
	out := make(chan submitResult, 1)
	go func() {
		sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
		out <- submitResult{sub: sub, err: err}
	}()
	fc.WaitUntil("the first submit to reach the node", func() bool {
		return fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure) == 1
	})
	return release, out
}

// waitQueued waits until n submits wait in the Client's queue.
func waitQueued(t *testing.T, c *Client, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.coalesce.mu.Lock()
		defer c.coalesce.mu.Unlock()
		return len(c.coalesce.queue) == n
	}, 10*time.Second, time.Millisecond)
}

// Submits made while the limit is in flight wait, then go out together in
// one EnqueueMany call; each gets its own answer.
func TestSubmitsCoalesceWhileTheLimitIsInFlight(t *testing.T) {
	t.Parallel()
	fc, c, ctx, release, first := coalescingClient(t)
	fc.SetPendingLimit("full", 0)

	// Five more queue behind it; one of them is refused by the node.
	const n = 5
	out := make(chan submitResult, n)
	for i := range n {
		spec := TaskSpec{Template: Template{Pool: "p", Kind: "k", Payload: []byte{byte(i)}}}
		if i == 3 {
			spec.Pool = "full" // the fake node's pool at its pending bound
		}
		go func() {
			sub, err := c.Submit(ctx, spec)
			out <- submitResult{i: i, sub: sub, err: err}
		}()
	}
	waitQueued(t, c, n)
	release()

	r := <-first
	require.NoError(t, r.err)
	ids := map[string]bool{r.sub.ID: true}
	for range n {
		r := <-out
		if r.i == 3 {
			require.ErrorIs(t, r.err, ErrOverloaded)
			continue
		}
		require.NoError(t, r.err, "spec %d", r.i)
		require.NotEmpty(t, r.sub.ID)
		require.Len(t, r.sub.Key, 32)
		ids[r.sub.ID] = true
	}
	require.Len(t, ids, n, "one task each (the refused one has none)")
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceEnqueueManyProcedure), "the queued submits went out in one call")

	c.coalesce.mu.Lock()
	require.Zero(t, c.coalesce.inflight)
	c.coalesce.mu.Unlock()
}

// A queued submit whose caller gives up before it is sent has no effect;
// one that is in a call in flight may have.
func TestQueuedSubmitCallerGivesUp(t *testing.T) {
	t.Parallel()
	fc, c, ctx, release, first := coalescingClient(t)
	short, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := c.Submit(short, TaskSpec{Template: Template{Pool: "p", Kind: "k"}, Key: "gone"})
		gone <- err
	}()
	waitQueued(t, c, 1)
	cancel()
	err := <-gone
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, ErrOutcomeUnknown), "it was never sent: %v", err)

	release()
	require.NoError(t, (<-first).err)
	require.Zero(t, fc.Node(0).Requests(cronoqv1connect.TaskServiceEnqueueManyProcedure))
	require.Nil(t, fc.TaskByKey("gone"), "never sent")
}

// Without coalescing every Submit is its own call; with it, a light load
// never waits.
func TestSubmitConcurrencyLimit(t *testing.T) {
	t.Parallel()
	for _, conc := range []int{0, 4} {
		t.Run(fmt.Sprint(conc), func(t *testing.T) {
			fc := newFakeCluster(t, 1, 0)
			c := newTestClient(t, addrs(fc, 0), WithSubmitConcurrency(conc))
			ctx := testCtx(t)
			for range 3 {
				_, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
				require.NoError(t, err)
			}
			require.Equal(t, 3, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))
			require.Zero(t, fc.Node(0).Requests(cronoqv1connect.TaskServiceEnqueueManyProcedure))
			require.Equal(t, conc == 0, c.coalesce == nil)
		})
	}
}
