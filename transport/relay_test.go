package transport_test

import (
	"bytes"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

// A backup is saved and restored through a follower, which relays both
// streams to the leader; the answers name the leader.
func TestSnapshotThroughFollower(t *testing.T) {
	c := newTestCluster(t, 3, 3, 5*time.Second)
	leader, followers := c.Leader()
	ctx := ctxT(t, time.Minute)
	res, err := taskClient(t, leader).Submit(ctx, connect.NewRequest(&cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{
		Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"},
	}}))
	require.NoError(t, err)
	c.Converged()

	op := cronoqv1connect.NewOperatorServiceClient(h2c(t), "http://"+followers[0].Addr())
	save, err := op.SnapshotSave(ctx, connect.NewRequest(&cronoqv1.SnapshotSaveRequest{}))
	require.NoError(t, err)
	var file bytes.Buffer
	for save.Receive() {
		file.Write(save.Msg().GetData())
	}
	require.NoError(t, save.Err())
	require.Equal(t, leader.ID, save.ResponseHeader().Get(apierr.HeaderLeader))
	require.NoError(t, save.Close())
	require.Greater(t, file.Len(), 0)

	restore := op.SnapshotRestore(ctx)
	data := file.Bytes()
	for len(data) > 0 {
		n := min(len(data), 64<<10)
		require.NoError(t, restore.Send(&cronoqv1.SnapshotChunk{Data: data[:n]}))
		data = data[n:]
	}
	out, err := restore.CloseAndReceive()
	require.NoError(t, err)
	require.EqualValues(t, 1, out.Msg.GetTasks())
	require.Equal(t, leader.ID, out.Header().Get(apierr.HeaderLeader))

	got, err := taskClient(t, followers[1]).Get(ctx, connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: res.Msg.GetResult().GetId()}}))
	require.NoError(t, err)
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, got.Msg.GetTask().GetStatus())
}
