package transport_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
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

// A worker whose connection to the relaying follower dies (the process was
// killed: no stream close, no reset) is seen gone by the leader, which
// must not keep granting tasks to its outstanding polls.
func TestRelayedWorkerThatDiesIsDropped(t *testing.T) {
	c := newTestCluster(t, 3, 3, 5*time.Second)
	leader, followers := c.Leader()
	ctx := ctxT(t, time.Minute)

	// The worker's own connection, which the test cuts as a kill would.
	var conns []net.Conn
	var mu sync.Mutex
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
		return conn, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	stream := cronoqv1connect.NewWorkerServiceClient(&http.Client{Transport: tr}, "http://"+followers[0].Addr()).Connect(wctx)
	require.NoError(t, stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "doomed", Pool: "p"}}}))
	welcome, err := stream.Receive()
	require.NoError(t, err)
	require.NotNil(t, welcome.GetWelcome())
	require.NoError(t, stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 4}}}))

	pools := cronoqv1connect.NewPoolServiceClient(h2c(t), "http://"+leader.Addr())
	workers := func() []*cronoqv1.WorkerInfo {
		res, err := pools.Workers(ctx, connect.NewRequest(&cronoqv1.ListWorkersRequest{Pool: "p"}))
		require.NoError(t, err)
		return res.Msg.GetWorkers()
	}
	require.Eventually(t, func() bool { return len(workers()) == 1 }, 10*time.Second, 10*time.Millisecond)

	mu.Lock()
	for _, conn := range conns {
		_ = conn.Close()
	}
	mu.Unlock()
	require.Eventually(t, func() bool { return len(workers()) == 0 }, 10*time.Second, 10*time.Millisecond,
		"the leader still serves the dead worker's relayed stream")

	// Its poll is gone with it: a new task stays queued.
	res, err := taskClient(t, leader).Submit(ctx, connect.NewRequest(&cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{
		Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"},
	}}))
	require.NoError(t, err)
	got, err := taskClient(t, leader).Get(ctx, connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: res.Msg.GetResult().GetId()}}))
	require.NoError(t, err)
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, got.Msg.GetTask().GetStatus())
}
