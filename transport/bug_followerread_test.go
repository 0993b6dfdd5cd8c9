//go:build jepsenbug_followerread

package transport_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/client"
)

// With the follower-read fault, a read that does not ask for staleness is
// answered by whichever node gets it from its own replica: a node cut off
// from the cluster still shows a task as pending after its cancel was
// acknowledged.
func TestBugFollowerReadServesStaleState(t *testing.T) {
	c := newTestCluster(t, 3, 3, 500*time.Millisecond)
	leader, followers := c.Leader()
	lagging := followers[0]
	cl := c.Client(leader)
	res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}, Key: "x"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, _ := lagging.Node.StaleRead()
		_, ok := st.Get(res.ID)
		return ok
	}, 10*time.Second, 5*time.Millisecond)

	// The follower's raft stops (its API server stays up); the other two
	// still form a majority and commit the cancel.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, lagging.Node.Stop(ctx))
	_, err = cl.Cancel(ctxT(t, 10*time.Second), res.ID)
	require.NoError(t, err)
	task, err := cl.Get(ctxT(t, 10*time.Second), res.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, task.Status)

	resp, err := taskClient(t, lagging).Get(ctxT(t, 10*time.Second),
		connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: res.ID}}))
	require.NoError(t, err, "a linearizable read on a node without a leader")
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, resp.Msg.GetTask().GetStatus(), "the cancel is not visible")
	require.Equal(t, lagging.ID, resp.Msg.GetMeta().GetNode())
}
