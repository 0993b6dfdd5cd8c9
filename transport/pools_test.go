package transport_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
)

func poolClient(t *testing.T, n *testNode) cronoqv1connect.PoolServiceClient {
	return cronoqv1connect.NewPoolServiceClient(h2c(t), "http://"+n.Addr())
}

// TestPools drives the pool service on three real nodes, through a
// follower: a pool with queued tasks and no worker shows its oldest queued
// age; a paused pool keeps its tasks while a worker waits, and resumes in
// order; settings survive on every node as replicated state; workers are
// listed with their slots; an ordering lane runs one task at a time; and
// a task is deleted once it has ended.
func TestPools(t *testing.T) {
	c := newTestCluster(t, 3, 3, 2*time.Second)
	leader, followers := c.Leader()
	pc := poolClient(t, followers[0])
	cl := c.Client(followers[1])

	// A pool nobody serves: its queue and the age of its oldest task.
	for i := 0; i < 3; i++ {
		_, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "lonely", Kind: "k"}})
		require.NoError(t, err)
	}
	var lonely *cronoqv1.PoolInfo
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := pc.Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetPoolRequest{Pool: "lonely"}))
		if !assert.NoError(ct, err) {
			return
		}
		lonely = resp.Msg.GetPool()
		assert.True(ct, lonely.GetOldestQueuedAge().AsDuration() >= 100*time.Millisecond, "age %v", lonely.GetOldestQueuedAge())
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(3), lonely.GetCounts()["queued"])
	require.Zero(t, lonely.GetWorkers())
	require.Equal(t, "reject", lonely.GetLimits().GetOverflow())
	require.Equal(t, int64(1_000_000), lonely.GetLimits().GetMaxPending())
	require.False(t, lonely.GetReplicated())

	// Pause the pool before a worker comes: nothing is dispatched.
	set, err := pc.Set(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetPoolRequest{Pool: "lonely", Paused: proto.Bool(true), ConcurrencyLimit: proto.Int64(2)}))
	require.NoError(t, err)
	require.True(t, set.Msg.GetPool().GetPaused())
	require.True(t, set.Msg.GetPool().GetReplicated())
	require.Equal(t, int64(2), set.Msg.GetPool().GetLimits().GetConcurrencyLimit())
	ran := make(chan string, 16)
	runWorker(t, c.Client(leader), "lonely", map[string]client.Handler{
		"k": client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
			ran <- job.Task.ID
			return nil, nil
		}),
	})
	var workers *cronoqv1.ListWorkersResponse
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := pc.Workers(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.ListWorkersRequest{Pool: "lonely"}))
		if assert.NoError(ct, err) {
			workers = resp.Msg
			assert.True(ct, len(workers.GetWorkers()) == 1 && workers.GetWorkers()[0].GetSlots() == 4, "workers %v", workers)
		}
	}, 10*time.Second, 20*time.Millisecond)
	w := workers.GetWorkers()[0]
	require.Equal(t, "lonely", w.GetPool())
	require.Equal(t, leader.ID, w.GetNode())
	require.Zero(t, w.GetBusy())
	require.WithinDuration(t, time.Now(), w.GetLastSeen().AsTime(), time.Minute)
	select {
	case id := <-ran:
		t.Fatalf("task %s of a paused pool ran", id)
	case <-time.After(300 * time.Millisecond):
	}

	// The settings are replicated: every node holds them, and a read of
	// the pool through another follower shows the worker.
	for _, n := range c.Live() {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			state, _ := n.Node.StaleRead()
			rec, found := state.PoolSettings("lonely")
			assert.True(ct, found && rec.Paused && rec.ConcurrencyLimit == 2, "node %s: %+v", n.ID, rec)
		}, 10*time.Second, 20*time.Millisecond)
	}
	got, err := poolClient(t, followers[1]).Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetPoolRequest{Pool: "lonely"}))
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Msg.GetPool().GetWorkers())
	require.Equal(t, int64(4), got.Msg.GetPool().GetSlots())

	// Resume: the queue drains.
	_, err = pc.Set(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetPoolRequest{Pool: "lonely", Paused: proto.Bool(false)}))
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the resumed pool does not drain")
		}
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := pc.Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetPoolRequest{Pool: "lonely"}))
		if assert.NoError(ct, err) {
			assert.True(ct, resp.Msg.GetPool().GetCounts()["succeeded"] == 3 && resp.Msg.GetPool().GetOldestQueuedAge() == nil, "%v", resp.Msg.GetPool())
		}
	}, 10*time.Second, 20*time.Millisecond)

	// A bad setting is refused, naming the field; nothing changes.
	_, err = pc.Set(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetPoolRequest{Pool: "lonely", Overflow: proto.String("drop")}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	field, _ := apierr.Field(err)
	require.Equal(t, "overflow", field)
	_, err = pc.Set(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetPoolRequest{Pool: "lonely", Rate: proto.Float64(-2)}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))

	// A lane: three tasks with one ordering key run one after the other,
	// in submit order.
	lane := make(chan string, 8)
	release := make(chan struct{})
	runWorker(t, c.Client(followers[0]), "lanes", map[string]client.Handler{
		"step": client.HandlerFunc(func(ctx context.Context, job *client.Job) ([]byte, error) {
			lane <- job.Task.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		}),
	})
	res, err := cl.SubmitBatch(ctxT(t, 10*time.Second), []client.TaskSpec{
		{Template: client.Template{Pool: "lanes", Kind: "step", OrderingKey: "acct-1"}},
		{Template: client.Template{Pool: "lanes", Kind: "step", OrderingKey: "acct-1"}},
		{Template: client.Template{Pool: "lanes", Kind: "step", OrderingKey: "acct-1"}},
	})
	require.NoError(t, err)
	for i, sub := range res {
		select {
		case id := <-lane:
			require.Equal(t, sub.ID, id, "lane task %d", i)
		case <-time.After(10 * time.Second):
			t.Fatalf("lane task %d does not run", i)
		}
		select {
		case id := <-lane:
			t.Fatalf("%s runs while %s runs", id, sub.ID)
		case <-time.After(100 * time.Millisecond):
		}
		if i == 0 {
			resp, err := pc.Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetPoolRequest{Pool: "lanes"}))
			require.NoError(t, err)
			require.Equal(t, int64(2), resp.Msg.GetPool().GetWaiting(), "two tasks wait behind the head")
			require.Equal(t, int64(1), resp.Msg.GetPool().GetLanes())
		}
		release <- struct{}{}
	}

	// Delete: refused for a live task, done for an ended one.
	tc := taskClient(t, followers[1])
	live, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "nobody", Kind: "k"}})
	require.NoError(t, err)
	_, err = tc.Delete(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.DeleteRequest{Ref: &cronoqv1.TaskRef{Id: live.ID}}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	del, err := tc.Delete(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.DeleteRequest{Ref: &cronoqv1.TaskRef{Id: res[0].ID}}))
	require.NoError(t, err)
	require.True(t, del.Msg.GetDeleted())
	_, err = cl.Get(ctxT(t, 10*time.Second), res[0].ID)
	require.ErrorIs(t, err, client.ErrNotFound)
	_, err = tc.Delete(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.DeleteRequest{Ref: &cronoqv1.TaskRef{Id: res[0].ID}}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))

	// A kind's schema: a payload that fails it is refused, naming the
	// failing JSON path, and the settings read back from another node.
	schema := []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	sk, err := pc.SetKind(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetKindRequest{
		Pool: "typed", Kind: "calc", PayloadSchema: schema, MaxAttempts: proto.Uint32(2),
	}))
	require.NoError(t, err)
	require.Equal(t, schema, sk.Msg.GetKind().GetPayloadSchema())
	_, err = cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "typed", Kind: "calc", Payload: []byte(`{"n":"seven"}`)}})
	require.ErrorIs(t, err, client.ErrInvalid)
	require.Contains(t, err.Error(), "/n")
	ok, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "typed", Kind: "calc", Payload: []byte(`{"n":7}`)}})
	require.NoError(t, err)
	okTask, err := cl.Get(ctxT(t, 10*time.Second), ok.ID)
	require.NoError(t, err)
	require.Equal(t, 2, okTask.MaxAttempts, "the kind's default")
	gk, err := poolClient(t, followers[1]).GetKind(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetKindRequest{Pool: "typed", Kind: "calc"}))
	require.NoError(t, err)
	require.Equal(t, uint32(2), gk.Msg.GetKind().GetMaxAttempts())
	_, err = pc.SetKind(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetKindRequest{Pool: "typed", Kind: "calc", OutputSchema: []byte(`{"type":7}`)}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))

	// Tasks list newest first, of one kind.
	lst, err := tc.List(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.ListRequest{Pools: []string{"lonely"}, NewestFirst: true, Limit: 2}))
	require.NoError(t, err)
	require.Len(t, lst.Msg.GetTasks(), 2)
	require.Greater(t, lst.Msg.GetTasks()[0].GetId(), lst.Msg.GetTasks()[1].GetId())
	byKind, err := tc.List(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.ListRequest{Kinds: []string{"calc"}}))
	require.NoError(t, err)
	require.Len(t, byKind.Msg.GetTasks(), 1)
	require.Equal(t, ok.ID, byKind.Msg.GetTasks()[0].GetId())

	// The list holds every pool the leader knows, with its counts.
	list, err := pc.List(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.ListPoolsRequest{}))
	require.NoError(t, err)
	names := map[string]*cronoqv1.PoolInfo{}
	for _, p := range list.Msg.GetPools() {
		names[p.GetPool()] = p
	}
	require.Contains(t, names, "lonely")
	require.Contains(t, names, "lanes")
	require.Contains(t, names, "nobody")
	require.Equal(t, int64(1), names["nobody"].GetCounts()["queued"])
}
