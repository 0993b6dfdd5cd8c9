package clienttest_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/client/clienttest"
)

// api is the generated clients of one node, for looking at answers as they
// are on the wire (headers included).
type api struct {
	tasks     cronoqv1connect.TaskServiceClient
	schedules cronoqv1connect.ScheduleServiceClient
	workers   cronoqv1connect.WorkerServiceClient
	operator  cronoqv1connect.OperatorServiceClient
	pools     cronoqv1connect.PoolServiceClient
}

func dialNode(t *testing.T, addr string) api {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	httpc := &http.Client{Transport: tr}
	base := "http://" + addr
	return api{
		tasks:     cronoqv1connect.NewTaskServiceClient(httpc, base),
		schedules: cronoqv1connect.NewScheduleServiceClient(httpc, base),
		workers:   cronoqv1connect.NewWorkerServiceClient(httpc, base),
		operator:  cronoqv1connect.NewOperatorServiceClient(httpc, base),
		pools:     cronoqv1connect.NewPoolServiceClient(httpc, base),
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tpl(pool, kind string) *cronoqv1.TaskTemplate {
	return &cronoqv1.TaskTemplate{Pool: pool, Kind: kind}
}

func submit(ctx context.Context, a api, spec *cronoqv1.TaskSpec) (*connect.Response[cronoqv1.SubmitResponse], error) {
	return a.tasks.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitRequest{Spec: spec}))
}

// manualClock is a clock that moves only when told.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (m *manualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *manualClock) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []clienttest.Option
	}{
		{"leader out of range", []clienttest.Option{clienttest.WithNodes(2), clienttest.WithLeader(2)}},
		{"ids for other node count", []clienttest.Option{clienttest.WithNodes(3), clienttest.WithNodeIDs("a", "b")}},
		{"zero window", []clienttest.Option{clienttest.WithHeartbeatWindow(0)}},
		{"zero max attempts", []clienttest.Option{clienttest.WithMaxAttempts(0)}},
		{"bad backoff", []clienttest.Option{clienttest.WithBackoff(time.Second, time.Millisecond, 0)}},
		{"bad jitter", []clienttest.Option{clienttest.WithBackoff(time.Second, time.Second, 1)}},
		{"zero list limit", []clienttest.Option{clienttest.WithMaxListLimit(0)}},
		{"zero page bytes", []clienttest.Option{clienttest.WithMaxPageBytes(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := clienttest.New(tc.opts...)
			require.Error(t, err)
			require.Nil(t, c)
		})
	}
	c, err := clienttest.New(clienttest.WithNodeIDs("a", "b"))
	require.NoError(t, err)
	require.Len(t, c.Addrs(), 2)
	require.Equal(t, "b", c.Node(1).ID())
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
}

// Calls that need the leader: a follower refuses them naming the leader,
// or serves them as forwarded; reads marked stale and operator reads are
// served by any node.
func TestRouting(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	spec := &cronoqv1.TaskSpec{Template: tpl("p", "k")}
	for _, tc := range []struct {
		name    string
		call    func(a api) (http.Header, error)
		anyNode bool
	}{
		{"submit", func(a api) (http.Header, error) {
			r, err := submit(ctx, a, spec)
			return header(r, err)
		}, false},
		{"list", func(a api) (http.Header, error) {
			r, err := a.tasks.List(ctx, connect.NewRequest(&cronoqv1.ListRequest{}))
			return header(r, err)
		}, false},
		{"stale list", func(a api) (http.Header, error) {
			r, err := a.tasks.List(ctx, connect.NewRequest(&cronoqv1.ListRequest{Stale: true}))
			return header(r, err)
		}, true},
		{"counts", func(a api) (http.Header, error) {
			r, err := a.tasks.Counts(ctx, connect.NewRequest(&cronoqv1.CountsRequest{}))
			return header(r, err)
		}, false},
		{"schedules", func(a api) (http.Header, error) {
			r, err := a.schedules.List(ctx, connect.NewRequest(&cronoqv1.ListSchedulesRequest{}))
			return header(r, err)
		}, false},
		{"pools", func(a api) (http.Header, error) {
			r, err := a.pools.List(ctx, connect.NewRequest(&cronoqv1.ListPoolsRequest{}))
			return header(r, err)
		}, false},
		{"workers", func(a api) (http.Header, error) {
			r, err := a.pools.Workers(ctx, connect.NewRequest(&cronoqv1.ListWorkersRequest{}))
			return header(r, err)
		}, false},
		{"peers", func(a api) (http.Header, error) {
			r, err := a.operator.Peers(ctx, connect.NewRequest(&cronoqv1.PeersRequest{}))
			return header(r, err)
		}, true},
		{"health", func(a api) (http.Header, error) {
			r, err := a.operator.Health(ctx, connect.NewRequest(&cronoqv1.HealthRequest{}))
			return header(r, err)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clienttest.NewCluster(t, clienttest.WithNodes(3), clienttest.WithLeader(2))
			leader := c.Node(2)

			// The leader serves it.
			h, err := tc.call(dialNode(t, leader.Addr()))
			require.NoError(t, err)
			require.Empty(t, h.Get(apierr.HeaderLeaderAddr))

			// A follower refuses, naming the leader, unless any node serves it.
			h, err = tc.call(dialNode(t, c.Node(0).Addr()))
			if tc.anyNode {
				require.NoError(t, err)
				require.Empty(t, h.Get(apierr.HeaderLeaderAddr))
			} else {
				require.Equal(t, apierr.KindNotLeader, apierr.Kind(err))
				id, addr := apierr.Leader(err)
				require.Equal(t, leader.ID(), id)
				require.Equal(t, leader.Addr(), addr)
			}

			// With forwarding, the follower serves it and names the leader.
			c.SetForwarding(true)
			h, err = tc.call(dialNode(t, c.Node(0).Addr()))
			require.NoError(t, err)
			if !tc.anyNode {
				require.Equal(t, leader.ID(), h.Get(apierr.HeaderLeader))
				require.Equal(t, leader.Addr(), h.Get(apierr.HeaderLeaderAddr))
			}

			// Without a leader, only what any node serves is served.
			c.SetLeader(-1)
			_, err = tc.call(dialNode(t, leader.Addr()))
			if tc.anyNode {
				require.NoError(t, err)
			} else {
				require.Equal(t, apierr.KindNoLeader, apierr.Kind(err))
			}
		})
	}
}

func header[T any](r *connect.Response[T], err error) (http.Header, error) {
	if err != nil {
		return nil, err
	}
	return r.Header(), nil
}

// Submits are checked as a real cluster checks them, naming the field.
func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	c := clienttest.NewCluster(t, clienttest.WithStartTime(start), clienttest.WithPools("p", "q"), clienttest.WithMaxPayload(8))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	withTpl := func(f func(*cronoqv1.TaskTemplate)) *cronoqv1.TaskSpec {
		s := &cronoqv1.TaskSpec{Template: tpl("p", "k")}
		f(s.Template)
		return s
	}
	for _, tc := range []struct {
		name  string
		spec  *cronoqv1.TaskSpec
		field string
	}{
		{"no template", &cronoqv1.TaskSpec{}, "pool"},
		{"empty pool", &cronoqv1.TaskSpec{Template: tpl("", "k")}, "pool"},
		{"unknown pool", &cronoqv1.TaskSpec{Template: tpl("r", "k")}, "pool"},
		{"empty kind", &cronoqv1.TaskSpec{Template: tpl("p", "")}, "kind"},
		{"unknown priority", withTpl(func(t *cronoqv1.TaskTemplate) { t.Priority = 7 }), "priority"},
		{"payload too large", withTpl(func(t *cronoqv1.TaskTemplate) { t.Payload = []byte("123456789") }), "payload"},
		{"negative timeout", withTpl(func(t *cronoqv1.TaskTemplate) { t.Timeout = durationpb.New(-time.Second) }), "timeout"},
		{"backoff without initial", withTpl(func(t *cronoqv1.TaskTemplate) {
			t.Backoff = &cronoqv1.Backoff{Max: durationpb.New(time.Second)}
		}), "backoff"},
		{"backoff max below initial", withTpl(func(t *cronoqv1.TaskTemplate) {
			t.Backoff = &cronoqv1.Backoff{Initial: durationpb.New(time.Second), Max: durationpb.New(time.Millisecond)}
		}), "backoff"},
		{"backoff jitter", withTpl(func(t *cronoqv1.TaskTemplate) {
			t.Backoff = &cronoqv1.Backoff{Initial: durationpb.New(time.Second), Jitter: 1}
		}), "backoff"},
		{"empty label key", withTpl(func(t *cronoqv1.TaskTemplate) { t.Labels = []*cronoqv1.KV{{Value: "x"}} }), "labels"},
		{"duplicate tag", withTpl(func(t *cronoqv1.TaskTemplate) { t.Tags = []*cronoqv1.KV{{Key: "a"}, {Key: "a"}} }), "tags"},
		{"run_at and delay", &cronoqv1.TaskSpec{Template: tpl("p", "k"), RunAt: timestamppb.New(start.Add(time.Hour)), Delay: durationpb.New(time.Second)}, "run_at"},
		{"negative delay", &cronoqv1.TaskSpec{Template: tpl("p", "k"), Delay: durationpb.New(-time.Second)}, "delay"},
		{"run_at before 1970", &cronoqv1.TaskSpec{Template: tpl("p", "k"), RunAt: timestamppb.New(time.Unix(-5, 0))}, "run_at"},
		{"invalid run_at", &cronoqv1.TaskSpec{Template: tpl("p", "k"), RunAt: &timestamppb.Timestamp{Nanos: -1}}, "run_at"},
		{"deadline passed", &cronoqv1.TaskSpec{Template: tpl("p", "k"), Deadline: timestamppb.New(start.Add(-time.Hour))}, "deadline"},
		{"deadline before run_at", &cronoqv1.TaskSpec{Template: tpl("p", "k"), RunAt: timestamppb.New(start.Add(2 * time.Hour)), Deadline: timestamppb.New(start.Add(time.Hour))}, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := submit(ctx, a, tc.spec)
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
			field, _ := apierr.Field(err)
			require.Equal(t, tc.field, field)
		})
	}
	require.Empty(t, c.Tasks())

	// A batch names the item; enqueue-many refuses items on their own.
	_, err := a.tasks.SubmitBatch(ctx, connect.NewRequest(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "k")}, {Template: tpl("p", "")},
	}}))
	field, _ := apierr.Field(err)
	require.Equal(t, "specs[1].kind", field)
	require.Empty(t, c.Tasks(), "a batch is admitted whole or not at all")
	many, err := a.tasks.EnqueueMany(ctx, connect.NewRequest(&cronoqv1.EnqueueManyRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "k")}, {Template: tpl("p", "")},
	}}))
	require.NoError(t, err)
	require.NotEmpty(t, many.Msg.GetResults()[0].GetSubmitted().GetId())
	require.Equal(t, apierr.KindInvalid, many.Msg.GetResults()[1].GetCode())
	require.Equal(t, "invalid kind: must not be empty", many.Msg.GetResults()[1].GetError())
}

// The same key gives the same task, as a duplicate, in every submit form.
func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)

	first, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "k1"})
	require.NoError(t, err)
	require.False(t, first.Msg.GetResult().GetDuplicate())
	id := first.Msg.GetResult().GetId()
	again, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "other"), Key: "k1"})
	require.NoError(t, err)
	require.Equal(t, id, again.Msg.GetResult().GetId())
	require.True(t, again.Msg.GetResult().GetDuplicate())
	require.Equal(t, "k", c.Task(id).GetTemplate().GetKind(), "a duplicate changes nothing")

	batch, err := a.tasks.SubmitBatch(ctx, connect.NewRequest(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "k"), Key: "k2"}, {Template: tpl("p", "k"), Key: "k2"}, {Template: tpl("p", "k"), Key: "k1"},
	}}))
	require.NoError(t, err)
	res := batch.Msg.GetResults()
	require.False(t, res[0].GetDuplicate())
	require.True(t, res[1].GetDuplicate(), "an earlier spec of the same request")
	require.Equal(t, res[0].GetId(), res[1].GetId())
	require.Equal(t, id, res[2].GetId())

	many, err := a.tasks.EnqueueMany(ctx, connect.NewRequest(&cronoqv1.EnqueueManyRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "k"), Key: "k3"}, {Template: tpl("p", "k"), Key: "k2"},
	}}))
	require.NoError(t, err)
	require.False(t, many.Msg.GetResults()[0].GetSubmitted().GetDuplicate())
	require.Equal(t, res[0].GetId(), many.Msg.GetResults()[1].GetSubmitted().GetId())
	require.Len(t, c.Tasks(), 3)
	require.Equal(t, id, c.TaskByKey("k1").GetId())

	// Defaults are resolved into the stored task.
	task := c.Task(id)
	require.EqualValues(t, clienttest.DefaultMaxAttempts, task.GetTemplate().GetMaxAttempts())
	require.Equal(t, time.Second, task.GetTemplate().GetBackoff().GetInitial().AsDuration())
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, task.GetStatus())
}

func TestPendingLimit(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	c.SetPendingLimit("p", 2)
	_, err := a.tasks.SubmitBatch(ctx, connect.NewRequest(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "k")}, {Template: tpl("p", "k")}, {Template: tpl("p", "k")},
	}}))
	require.Equal(t, apierr.KindOverloaded, apierr.Kind(err))
	require.Empty(t, c.Tasks())
	many, err := a.tasks.EnqueueMany(ctx, connect.NewRequest(&cronoqv1.EnqueueManyRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "k")}, {Template: tpl("q", "k")}, {Template: tpl("p", "k")}, {Template: tpl("p", "k")},
	}}))
	require.NoError(t, err)
	codes := []string{}
	for _, r := range many.Msg.GetResults() {
		codes = append(codes, r.GetCode())
	}
	require.Equal(t, []string{"", "", "", apierr.KindOverloaded}, codes)
	c.SetPendingLimit("p", -1)
	_, err = submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k")})
	require.NoError(t, err)
}

// Scripted faults: refusals, lost answers and held calls.
func TestScriptedFaults(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	const proc = cronoqv1connect.TaskServiceSubmitProcedure

	c.RefuseCalls(proc, 1, apierr.ShuttingDown())
	_, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "a"})
	require.Equal(t, apierr.KindShuttingDown, apierr.Kind(err))
	require.Nil(t, c.TaskByKey("a"), "a refused call does nothing")
	require.Zero(t, c.Calls(proc), "nor is it served")
	require.Equal(t, 1, c.Node(0).Requests(proc))

	c.LoseAnswers(proc, 2, apierr.OutcomeUnknown("lost"))
	_, err = submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "a"})
	require.Equal(t, apierr.KindOutcomeUnknown, apierr.Kind(err))
	require.NotNil(t, c.TaskByKey("a"), "the call took effect")
	_, err = submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", ""), Key: "b"})
	require.Equal(t, apierr.KindInvalid, apierr.Kind(err), "a failing call keeps its own answer")
	_, err = submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "a"})
	require.Equal(t, apierr.KindOutcomeUnknown, apierr.Kind(err))
	r, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "a"})
	require.NoError(t, err)
	require.True(t, r.Msg.GetResult().GetDuplicate())
	require.Equal(t, []string{"a", "b", "a", "a"}, c.SubmitKeys())
	require.Equal(t, 4, c.Calls(proc))
	require.Len(t, c.Requests(proc), 4)

	release := c.Hold(proc)
	done := make(chan error, 1)
	go func() {
		_, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "held"})
		done <- err
	}()
	c.WaitUntil("the submit reached the node", func() bool { return c.Node(0).Requests(proc) == 6 })
	require.Nil(t, c.TaskByKey("held"))
	release()
	release()
	require.NoError(t, <-done)
	require.NotNil(t, c.TaskByKey("held"))

	// A held call whose caller gives up fails, unserved.
	release = c.Hold(proc)
	defer release()
	short, cancel := context.WithCancel(ctx)
	go func() {
		_, err := submit(short, a, &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "gone"})
		done <- err
	}()
	c.WaitUntil("the submit reached the node", func() bool { return c.Node(0).Requests(proc) == 7 })
	cancel()
	require.Error(t, <-done)
	require.Nil(t, c.TaskByKey("gone"))
}

// A task goes through its attempts: retried after a retryable failure with
// the attempts counted against max_attempts, then failed; events follow
// every change.
func TestRetriesCountAttempts(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t, clienttest.WithNodes(2), clienttest.WithLeader(1))
	cl, err := client.New(c.Addrs(), client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx := testCtx(t)
	events, err := cl.Events(ctx, "p")
	require.NoError(t, err)
	c.WaitUntil("subscribed", func() bool { return c.Calls(cronoqv1connect.TaskServiceEventsProcedure) == 1 })

	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "flaky", MaxAttempts: 3}})
	require.NoError(t, err)
	ok, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "fine"}})
	require.NoError(t, err)
	_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "other", Kind: "fine"}})
	require.NoError(t, err)

	w, err := cl.NewWorker(client.WorkerConfig{Pool: "p", Handlers: map[string]client.Handler{
		"flaky": client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
			return nil, client.Retryable(errors.New("try again"), time.Millisecond)
		}),
		"fine": client.HandlerFunc(func(context.Context, *client.Job) ([]byte, error) { return []byte("done"), nil }),
	}})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	task, err := cl.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusFailed, task.Status)
	require.Equal(t, 3, task.Attempt)
	require.Equal(t, "try again", task.Error)
	task, err = cl.Wait(ctx, ok.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, task.Status)
	require.Equal(t, []byte("done"), task.Output)
	stop()
	require.NoError(t, <-done)

	// Each task's events, in order: nine for the flaky one, three for the
	// other, none for the other pool.
	byTask := map[string][]string{}
	attempts := map[string][]int{}
	for range 12 {
		ev := <-events
		require.Equal(t, "p", ev.Pool, "only the pool asked for")
		byTask[ev.TaskID] = append(byTask[ev.TaskID], ev.Status)
		attempts[ev.TaskID] = append(attempts[ev.TaskID], ev.Attempt)
	}
	require.Equal(t, []string{
		client.StatusQueued, client.StatusRunning, client.StatusRetrying, client.StatusQueued,
		client.StatusRunning, client.StatusRetrying, client.StatusQueued, client.StatusRunning, client.StatusFailed,
	}, byTask[sub.ID])
	require.Equal(t, []int{0, 1, 1, 1, 2, 2, 2, 3, 3}, attempts[sub.ID])
	require.Equal(t, []string{client.StatusQueued, client.StatusRunning, client.StatusSucceeded}, byTask[ok.ID])
	wl := c.Workers()
	require.Len(t, wl.Accepted, 4)
	require.Empty(t, wl.Violations)
}

// A raw worker stream: grants follow priority and labels, heartbeats keep
// leases, a lease without heartbeats is lost and its attempt retried.
func TestWorkerStream(t *testing.T) {
	t.Parallel()
	// The clock moves only when told: the leases are lost, or kept, by what
	// the test does, however slowly it runs.
	clock := &manualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := clienttest.NewCluster(t, clienttest.WithHeartbeatWindow(200*time.Millisecond), clienttest.WithClock(clock.Now))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	low := c.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", Priority: cronoqv1.Priority_PRIORITY_LOW}})
	gpu := c.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", Labels: []*cronoqv1.KV{{Key: "gpu", Value: "yes"}}}})
	high := c.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", Priority: cronoqv1.Priority_PRIORITY_HIGH, MaxAttempts: 2}})

	stream := a.workers.Connect(ctx)
	defer func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	}()
	send := func(m *cronoqv1.WorkerMessage) { require.NoError(t, stream.Send(m)) }
	recv := func() *cronoqv1.ServerMessage {
		m, err := stream.Receive()
		require.NoError(t, err)
		return m
	}
	send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "p"}}})
	welcome := recv().GetWelcome()
	require.Equal(t, 200*time.Millisecond, welcome.GetHeartbeatWindow().AsDuration())
	require.EqualValues(t, 1, welcome.GetEpoch())

	// Two slots: high priority first, then low; the gpu task needs a label
	// this worker does not offer.
	send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 2}}})
	grants := recv().GetGrants().GetGrants()
	require.Len(t, grants, 2)
	require.Equal(t, high, grants[0].GetTask().GetId())
	require.Equal(t, low, grants[1].GetTask().GetId())
	require.EqualValues(t, 1, grants[0].GetAttempt())
	require.Equal(t, cronoqv1.Status_STATUS_RUNNING, c.Task(high).GetStatus())
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, c.Task(gpu).GetStatus())

	// The low task's lease is kept alive by heartbeats, as a worker does;
	// the high one's is not, and is lost once the window has passed.
	lowLease, highLease := grants[1].GetLease(), grants[0].GetLease()
	var aborts []*cronoqv1.Abort
	heartbeat := func() {
		send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: []uint64{lowLease}}}})
		for {
			m := recv()
			if ack := m.GetHeartbeatAck(); ack != nil {
				require.Empty(t, ack.GetResults()[0].GetCode(), "heartbeats keep the low task's lease")
				return
			}
			require.NotNil(t, m.GetAbort(), "got %v", m)
			aborts = append(aborts, m.GetAbort())
		}
	}
	for range 3 {
		clock.Advance(80 * time.Millisecond)
		heartbeat()
	}
	c.Refresh()
	if len(aborts) == 0 {
		aborts = append(aborts, recv().GetAbort())
	}
	require.Len(t, aborts, 1)
	abort := aborts[0]
	require.NotNil(t, abort)
	require.Equal(t, highLease, abort.GetLease())
	require.Contains(t, abort.GetReason(), "lease lost")
	require.Equal(t, running, c.Task(low).GetStatus())
	require.NotEqual(t, cronoqv1.Status_STATUS_FAILED, c.Task(high).GetStatus(), "one attempt of two used")
	require.Contains(t, c.Task(high).GetError(), "lease lost")

	// Completing a lost lease is refused; completing the live one succeeds.
	send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: []*cronoqv1.Completion{
		{Lease: highLease, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS},
		{Lease: lowLease, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte("out")},
	}}}})
	var ack *cronoqv1.CompleteAck
	for ack == nil {
		m := recv()
		ack = m.GetCompleteAck()
	}
	require.Equal(t, apierr.KindStaleLease, ack.GetResults()[0].GetCode())
	require.Empty(t, ack.GetResults()[1].GetCode())
	require.Equal(t, cronoqv1.Status_STATUS_SUCCEEDED, c.Task(low).GetStatus())
	require.Equal(t, []byte("out"), c.Task(low).GetOutput())
	require.Equal(t, []byte("out"), c.Accepted(low).GetOutput())
	require.Nil(t, c.Accepted(high))

	wl := c.Workers()
	require.Equal(t, 1, wl.Streams)
	require.Equal(t, []int32{2}, wl.Polls)
	require.Len(t, wl.Received, 2)
	require.Len(t, wl.Accepted, 1)
	require.Empty(t, wl.Violations)
}

// A second Hello and a heartbeat sent while one is unacknowledged are
// violations of the protocol.
func TestWorkerViolations(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	c.DelayHeartbeatAcks(time.Hour)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	stream := a.workers.Connect(ctx)
	defer func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	}()
	hello := &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "p"}}}
	hb := &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: []uint64{9}}}}
	require.NoError(t, stream.Send(hello))
	require.NoError(t, stream.Send(hb))
	require.NoError(t, stream.Send(hb))
	require.NoError(t, stream.Send(hello))
	_, err := stream.Receive() // the welcome
	require.NoError(t, err)
	_, err = stream.Receive()
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	require.Equal(t, []string{
		"stream 1: heartbeat for lease 9 while one is in flight",
		"stream 1: second hello",
	}, c.Workers().Violations)
}

// Time-driven changes follow the clock: scheduled tasks become ready,
// deadlines expire tasks, schedules fire.
func TestClock(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)}
	c := clienttest.NewCluster(t, clienttest.WithClock(clock.Now))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)

	later := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("p", "k"), Delay: durationpb.New(time.Minute)})
	doomed := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("p", "k"), Deadline: timestamppb.New(clock.Now().Add(30 * time.Second))})
	require.Equal(t, cronoqv1.Status_STATUS_SCHEDULED, c.Task(later).GetStatus())
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, c.Task(doomed).GetStatus())

	_, err := a.schedules.Add(ctx, connect.NewRequest(&cronoqv1.AddScheduleRequest{Schedule: &cronoqv1.Schedule{
		Name: "tick", Cron: "@every 20s", Task: tpl("p", "tick"),
	}}))
	require.NoError(t, err)
	require.Equal(t, clock.Now().Add(20*time.Second), c.Schedule("tick").GetNextFire().AsTime())

	clock.Advance(45 * time.Second)
	c.Refresh()
	require.Equal(t, cronoqv1.Status_STATUS_SCHEDULED, c.Task(later).GetStatus())
	require.Equal(t, cronoqv1.Status_STATUS_EXPIRED, c.Task(doomed).GetStatus())
	require.Equal(t, "deadline exceeded", c.Task(doomed).GetError())
	sc := c.Schedule("tick")
	require.EqualValues(t, 1, sc.GetFires(), "one fire for the latest slot")
	require.EqualValues(t, 1, sc.GetSkipped(), "the other missed one is skipped")
	fired := c.Task(sc.GetLastTask())
	require.Equal(t, "tick", fired.GetSchedule())
	require.Equal(t, clock.Now().Add(-5*time.Second), fired.GetSlot().AsTime())
	require.Equal(t, "tick@2030-01-02T12:00:40Z", fired.GetKey())

	// The overlap policy skips a fire while the last task is live.
	clock.Advance(20 * time.Second)
	c.Refresh()
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, c.Task(later).GetStatus())
	sc = c.Schedule("tick")
	require.EqualValues(t, 1, sc.GetFires())
	require.EqualValues(t, 2, sc.GetSkipped())

	// Paused: no next fire; a resume skips what came due meanwhile.
	_, err = a.schedules.Pause(ctx, connect.NewRequest(&cronoqv1.PauseScheduleRequest{Name: "tick", Paused: true}))
	require.NoError(t, err)
	require.Nil(t, c.Schedule("tick").GetNextFire())
	clock.Advance(time.Minute)
	_, err = a.schedules.Pause(ctx, connect.NewRequest(&cronoqv1.PauseScheduleRequest{Name: "tick", Paused: false}))
	require.NoError(t, err)
	sc = c.Schedule("tick")
	require.EqualValues(t, 5, sc.GetSkipped())
	require.Equal(t, time.Date(2030, 1, 2, 12, 2, 20, 0, time.UTC), sc.GetNextFire().AsTime())

	// FireSchedule fires at once, overlap permitting.
	c.Finish(fired.GetId(), cronoqv1.Status_STATUS_SUCCEEDED, nil, "")
	id := c.FireSchedule("tick")
	require.NotEmpty(t, id)
	require.EqualValues(t, 2, c.Schedule("tick").GetFires())
}

func TestLeaderChangeEndsStreams(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t, clienttest.WithNodes(2))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	events, err := a.tasks.Events(ctx, connect.NewRequest(&cronoqv1.EventsRequest{}))
	require.NoError(t, err)
	defer events.Close()
	worker := a.workers.Connect(ctx)
	defer func() {
		_ = worker.CloseRequest()
		_ = worker.CloseResponse()
	}()
	require.NoError(t, worker.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "p"}}}))
	_, err = worker.Receive()
	require.NoError(t, err)
	c.WaitUntil("both streams open", func() bool {
		return c.Calls(cronoqv1connect.TaskServiceEventsProcedure) == 1 && c.Workers().Streams == 1
	})

	c.SetLeader(1)
	require.EqualValues(t, 2, c.Epoch())
	require.Equal(t, 1, c.Leader())
	_, err = worker.Receive()
	require.Equal(t, apierr.KindNotLeader, apierr.Kind(err))
	_, addr := apierr.Leader(err)
	require.Equal(t, c.Node(1).Addr(), addr)
	for events.Receive() {
	}
	require.Equal(t, apierr.KindNotLeader, apierr.Kind(events.Err()))
}

func TestDropWorkerStreams(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	worker := a.workers.Connect(ctx)
	defer func() {
		_ = worker.CloseRequest()
		_ = worker.CloseResponse()
	}()
	require.NoError(t, worker.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "p"}}}))
	_, err := worker.Receive()
	require.NoError(t, err)
	c.DropWorkerStreams()
	_, err = worker.Receive()
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err))
}

func TestOperatorCalls(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t, clienttest.WithNodeIDs("a", "b", "c"), clienttest.WithLeader(0))
	cl, err := client.New(c.Addrs()[1:2], client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx := testCtx(t)
	c.Node(2).SetMember(func(m *cronoqv1.Member) { m.Status, m.Version = "suspect", "v9" })
	c.Node(1).SetHealth("degraded", "disk full")

	members, err := cl.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []client.Member{
		{Name: "a", Status: "alive", HTTPAddr: c.Node(0).Addr()},
		{Name: "b", Status: "alive", HTTPAddr: c.Node(1).Addr()},
		{Name: "c", Status: "suspect", HTTPAddr: c.Node(2).Addr(), Version: "v9"},
	}, members)

	require.NoError(t, cl.RemovePeer(ctx, "a"), "removing the leader")
	require.Equal(t, 1, c.Leader(), "leadership moved to the next peer")
	peers, err := cl.Peers(ctx)
	require.NoError(t, err)
	require.Equal(t, []client.Peer{{ID: "b", Voter: true, Leader: true}, {ID: "c", Voter: true}}, peers)

	leader, err := cl.TransferLeadership(ctx, "")
	require.NoError(t, err)
	require.Equal(t, "c", leader)
	_, err = cl.TransferLeadership(ctx, "a")
	require.ErrorIs(t, err, client.ErrNotFound)

	h, err := cl.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, client.Health{Node: "b", Leader: "c", Epoch: 3, Status: "degraded", Reasons: []string{"disk full"}}, h)
}

// Close ends every call in progress, whatever it waits for, and the
// goroutines of the cluster (TestMain checks for leaks).
func TestCloseEndsCalls(t *testing.T) {
	t.Parallel()
	c, err := clienttest.New()
	require.NoError(t, err)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	id := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("p", "k")})
	c.Hold(cronoqv1connect.TaskServiceSubmitProcedure)

	errs := make(chan error, 4)
	go func() {
		_, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k")})
		errs <- err
	}()
	go func() {
		_, err := a.tasks.Wait(ctx, connect.NewRequest(&cronoqv1.WaitRequest{Ref: &cronoqv1.TaskRef{Id: id}}))
		errs <- err
	}()
	go func() {
		s, err := a.tasks.Events(ctx, connect.NewRequest(&cronoqv1.EventsRequest{}))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
			_ = s.Close()
		}
		errs <- err
	}()
	go func() {
		s := a.workers.Connect(ctx)
		err := s.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "p"}}})
		for err == nil {
			_, err = s.Receive()
		}
		_ = s.CloseRequest()
		_ = s.CloseResponse()
		errs <- err
	}()
	c.WaitUntil("every call is in progress", func() bool {
		return c.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure) == 1 &&
			c.Calls(cronoqv1connect.TaskServiceWaitProcedure) == 1 &&
			c.Calls(cronoqv1connect.TaskServiceEventsProcedure) == 1 &&
			c.Workers().Streams == 1
	})
	require.NoError(t, c.Close())
	for range 4 {
		require.Error(t, <-errs)
	}
	_, err = submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "k")})
	require.Error(t, err)
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.WaitFor(ctx, func() bool { return false }), context.DeadlineExceeded)

	done := make(chan error, 1)
	go func() {
		done <- c.WaitFor(testCtx(t), func() bool { return len(c.Tasks()) == 1 })
	}()
	c.AddTask(&cronoqv1.TaskSpec{Template: tpl("p", "k")})
	require.NoError(t, <-done)
}
