package transport_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/internal/grpcstubs"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// A plain gRPC client (gRPC-Go with stubs generated from the proto, none of
// the SDK's logic: no leader hints, no retries) talks to one follower of a
// real cluster only: it streams the events, submits tasks, and runs a
// worker over the raw stream. The follower serves the events from its
// replica and relays the worker stream to the leader; when the leader is
// stopped, the worker's stream ends with UNAVAILABLE and connecting again
// through the same follower works, the lease of the running attempt kept.
func TestPlainGRPCClientThroughFollower(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Configure(func(_ int, cfg *cluster.Config) {
		// Long enough for a lease to outlive the failover.
		cfg.Engine.Core = core.Config{HeartbeatWindow: 15 * time.Second}
	}))
	leader, followers := c.Leader()
	f := followers[0]
	conn, err := grpc.NewClient(f.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	require.NoError(t, err)
	defer func() { require.NoError(t, conn.Close()) }()
	tasks := grpcstubs.NewTaskServiceClient(conn)
	workers := grpcstubs.NewWorkerServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const pool = "plain"
	events := subscribe(ctx, t, tasks, &cronoqv1.EventsRequest{Pools: []string{pool}})
	submit := func() string {
		t.Helper()
		res, err := tasks.Submit(ctx, &cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{
			Template: &cronoqv1.TaskTemplate{Pool: pool, Kind: "k", Payload: []byte("in")},
		}})
		require.NoError(t, err)
		return res.GetResult().GetId()
	}

	// One task from submit to success, over the raw worker stream.
	id1 := submit()
	w := connectWorker(ctx, t, workers, pool)
	require.Equal(t, leader.ID, w.welcome.GetNode(), "the follower relays the stream to the leader")
	lease1 := w.poll(id1)
	w.heartbeat(lease1)
	w.complete(lease1, "out1")
	events.await(id1, cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_RUNNING, cronoqv1.Status_STATUS_SUCCEEDED)

	// A task running when the leader stops: the stream ends with a code to
	// retry on, and the worker connects again through the same follower.
	id2 := submit()
	lease2 := w.poll(id2)
	events.await(id2, cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_RUNNING)
	c.Stop(leader.ID)
	_, err = w.stream.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.NoError(t, w.stream.CloseSend())

	w = connectWorker(ctx, t, workers, pool)
	require.NotEqual(t, leader.ID, w.welcome.GetNode())
	w.heartbeat(lease2)
	w.complete(lease2, "out2")
	events.await(id2, cronoqv1.Status_STATUS_SUCCEEDED)
	require.NoError(t, w.stream.CloseSend())
	_, err = w.stream.Recv()
	require.ErrorIs(t, err, io.EOF, "closing its side ends the worker's stream cleanly")

	// The follower's event stream went on across the leader change, every
	// event with a cursor, in order, with no gap.
	require.Zero(t, events.lagged)
	var last uint64
	for _, ev := range events.seen {
		require.Greater(t, ev.GetCursor(), last, "cursors grow: %v", ev)
		last = ev.GetCursor()
	}

	// A subscriber resuming after a cursor gets the events after it.
	running1 := events.of(id1)[1]
	require.Equal(t, cronoqv1.Status_STATUS_RUNNING, running1.GetStatus())
	resumed := subscribe(ctx, t, tasks, &cronoqv1.EventsRequest{Pools: []string{pool}, AfterCursor: running1.GetCursor()})
	resumed.await(id2, cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_RUNNING, cronoqv1.Status_STATUS_SUCCEEDED)
	require.Zero(t, resumed.lagged)
	require.Equal(t, events.seen[2:], resumed.seen, "the same events, with the same cursors")
}

// eventStream is a plain gRPC event stream read into seen.
type eventStream struct {
	t      *testing.T
	ch     chan *cronoqv1.Event
	seen   []*cronoqv1.Event // in order, markers left out
	lagged int
}

// subscribe opens an event stream and waits for its headers (the node
// sends them once the subscription is in place).
func subscribe(ctx context.Context, t *testing.T, tasks grpcstubs.TaskServiceClient, req *cronoqv1.EventsRequest) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	stream, err := tasks.Events(ctx, req)
	require.NoError(t, err)
	_, err = stream.Header()
	require.NoError(t, err)
	es := &eventStream{t: t, ch: make(chan *cronoqv1.Event, 256)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(es.ch)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			es.ch <- ev
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return es
}

// await reads events until task id has had the statuses (in order, among
// its events), failing after a while.
func (es *eventStream) await(id string, statuses ...cronoqv1.Status) {
	es.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		var got []cronoqv1.Status
		for _, ev := range es.of(id) {
			got = append(got, ev.GetStatus())
		}
		if containsInOrder(got, statuses) {
			return
		}
		select {
		case ev, ok := <-es.ch:
			require.True(es.t, ok, "the event stream ended; events of %s: %v", id, got)
			if ev.GetLagged() {
				es.lagged++
				continue
			}
			es.seen = append(es.seen, ev)
		case <-timeout:
			es.t.Fatalf("events of %s: %v, want %v", id, got, statuses)
		}
	}
}

// of returns the events of task id seen so far.
func (es *eventStream) of(id string) []*cronoqv1.Event {
	var out []*cronoqv1.Event
	for _, ev := range es.seen {
		if ev.GetTaskId() == id {
			out = append(out, ev)
		}
	}
	return out
}

func containsInOrder(got, want []cronoqv1.Status) bool {
	i := 0
	for _, s := range got {
		if i < len(want) && s == want[i] {
			i++
		}
	}
	return i == len(want)
}

// grpcWorker is a worker stream driven message by message.
type grpcWorker struct {
	t       *testing.T
	stream  grpc.BidiStreamingClient[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]
	welcome *cronoqv1.Welcome
}

// connectWorker opens a worker stream and says hello.
func connectWorker(ctx context.Context, t *testing.T, workers grpcstubs.WorkerServiceClient, pool string) *grpcWorker {
	t.Helper()
	stream, err := workers.Connect(ctx)
	require.NoError(t, err)
	w := &grpcWorker{t: t, stream: stream}
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "plain-1", Pool: pool}}})
	w.welcome = w.recv().GetWelcome()
	require.NotNil(t, w.welcome, "the first answer is the Welcome")
	require.NotZero(t, w.welcome.GetEpoch())
	return w
}

func (w *grpcWorker) send(m *cronoqv1.WorkerMessage) {
	w.t.Helper()
	require.NoError(w.t, w.stream.Send(m))
}

func (w *grpcWorker) recv() *cronoqv1.ServerMessage {
	w.t.Helper()
	m, err := w.stream.Recv()
	require.NoError(w.t, err)
	return m
}

// poll offers one slot and returns the lease of the attempt of task id it
// is granted.
func (w *grpcWorker) poll(id string) uint64 {
	w.t.Helper()
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 1}}})
	grants := w.recv().GetGrants().GetGrants()
	require.Len(w.t, grants, 1)
	require.Equal(w.t, id, grants[0].GetTask().GetId())
	require.Equal(w.t, []byte("in"), grants[0].GetTask().GetTemplate().GetPayload())
	require.NotZero(w.t, grants[0].GetLease())
	return grants[0].GetLease()
}

func (w *grpcWorker) heartbeat(lease uint64) {
	w.t.Helper()
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: []uint64{lease}}}})
	res := w.recv().GetHeartbeatAck().GetResults()
	require.Len(w.t, res, 1)
	require.Equal(w.t, lease, res[0].GetLease())
	require.Empty(w.t, res[0].GetCode(), "%s", res[0].GetError())
}

func (w *grpcWorker) complete(lease uint64, output string) {
	w.t.Helper()
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: []*cronoqv1.Completion{{
		Lease: lease, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte(output),
	}}}}})
	res := w.recv().GetCompleteAck().GetResults()
	require.Len(w.t, res, 1)
	require.Empty(w.t, res[0].GetCode(), "%s", res[0].GetError())
}
