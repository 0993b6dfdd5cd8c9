package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// fakeBackend is a Backend in memory: a node that leads (or names another
// leader), with a replica and the leader's operations as functions the
// tests set.
type fakeBackend struct {
	mu      sync.Mutex
	leading bool
	leader  string // id of the leader when this node does not lead
	// leaderAddr is the leader's address when this node does not lead
	// (default 127.0.0.9:8650).
	leaderAddr string
	addr       string
	state      *fsm.State
	term       chan struct{}

	submit           func(mode cluster.SubmitMode, specs []cluster.Spec) (*cluster.SubmitResult, error)
	cancel           func(ref cluster.TaskRef) (cluster.Cancelled, error)
	add              func(spec cluster.ScheduleSpec) (fsm.Instant, error)
	completeExternal func(ref cluster.TaskRef, out cluster.Outcome) (string, error)
	setPool          func(ch cluster.PoolChange) (cluster.PoolInfo, error)
	submitWorkflow   func(spec cluster.WorkflowSpec) (*cluster.WorkflowSubmitted, error)
	cancelWorkflow   func(ref cluster.WorkflowRef) (cluster.CancelledWorkflow, error)
	retry            func(ref cluster.TaskRef) (cluster.Retried, error)
	cancelMany       func(f cluster.TaskFilter) (int, error)
	transfer         func(id string) (string, error)
	// waitWorkflow runs under the call's context (nil: wait for it to end).
	waitWorkflow func(ctx context.Context, ref cluster.WorkflowRef) (string, error)
	// poll answers a worker's offer (nil: nothing is ever granted).
	poll func(ctx context.Context, offer cluster.Offer) ([]cluster.Grant, error)
	// events are the events of the replica (and whatever a test
	// publishes); subscribed, when set, is told of each subscription.
	events     *cluster.EventHub
	subscribed chan struct{}
	// completions receives the completions the worker streams report.
	completions chan []cluster.Completion
	// feeds receives the feed of each subscription reader (nil: feeding
	// one fails).
	feeds chan *fakeFeed

	calls []string

	// index is the log index of the last entry applied to state.
	index uint64
}

func newFakeBackend() *fakeBackend {
	f := &fakeBackend{leading: true, state: fsm.New(), term: make(chan struct{}), events: cluster.NewEventHub(0)}
	f.state.SetEventSink(f.events.Publish)
	return f
}

// apply commits ms to the fake's replica as one batch at leader time at,
// as raft would.
func (f *fakeBackend) apply(t *testing.T, at fsm.Instant, ms ...fsm.Mutation) {
	t.Helper()
	require.NoError(t, f.applyErr(at, ms...))
}

// applyErr is apply for the fake's operations, which run on the server's
// goroutines.
func (f *fakeBackend) applyErr(at fsm.Instant, ms ...fsm.Mutation) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.index == 0 {
		bump, err := fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: 1, Leader: "n1", Time: at})
		if err != nil {
			return err
		}
		f.index++
		if resp := f.state.Apply(f.index, 1, bump); resp != uint64(1) {
			return fmt.Errorf("epoch bump: %v", resp)
		}
	}
	data, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: 1, Time: at, Mutations: ms})
	if err != nil {
		return err
	}
	f.index++
	if resp := f.state.Apply(f.index, 1, data); resp != nil {
		return fmt.Errorf("batch rejected: %v", resp)
	}
	return nil
}

func (f *fakeBackend) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

func (f *fakeBackend) notLeader() error {
	return &cluster.NotLeaderError{LeaderID: f.leader, LeaderHTTPAddr: "127.0.0.9:8650", Err: raft.ErrNotLeader}
}

func (f *fakeBackend) ID() string { return "n1" }
func (f *fakeBackend) Leader() (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leading {
		return "n1", f.addr
	}
	if f.leaderAddr != "" {
		return f.leader, f.leaderAddr
	}
	return f.leader, "127.0.0.9:8650"
}
func (f *fakeBackend) Leading() (cluster.Term, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leading {
		return cluster.Term{}, f.notLeader()
	}
	return cluster.Term{Epoch: 3, Done: f.term}, nil
}
func (f *fakeBackend) Health() cluster.Health {
	return cluster.Health{Node: "n1", Leader: "n1", Epoch: 3, Status: cluster.HealthOK, Ready: true}
}
func (f *fakeBackend) Submit(_ context.Context, mode cluster.SubmitMode, specs []cluster.Spec) (*cluster.SubmitResult, error) {
	f.record("submit")
	return f.submit(mode, specs)
}
func (f *fakeBackend) Poll(ctx context.Context, offer cluster.Offer) ([]cluster.Grant, error) {
	if f.poll != nil {
		return f.poll(ctx, offer)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (f *fakeBackend) Heartbeat(context.Context, []uint64) ([]error, error) {
	return nil, errors.New("not used")
}
func (f *fakeBackend) Complete(_ context.Context, cs []cluster.Completion) []error {
	if f.completions != nil {
		f.completions <- cs
	}
	return make([]error, len(cs))
}
func (f *fakeBackend) Cancel(_ context.Context, ref cluster.TaskRef) (cluster.Cancelled, error) {
	f.record("cancel")
	return f.cancel(ref)
}
func (f *fakeBackend) Wait(context.Context, cluster.TaskRef) (string, error) {
	return "", errors.New("not used")
}
func (f *fakeBackend) CompleteExternal(_ context.Context, ref cluster.TaskRef, out cluster.Outcome) (string, error) {
	f.record("complete-external")
	return f.completeExternal(ref, out)
}
func (f *fakeBackend) SubmitWorkflow(_ context.Context, spec cluster.WorkflowSpec) (*cluster.WorkflowSubmitted, error) {
	f.record("submit-workflow")
	return f.submitWorkflow(spec)
}
func (f *fakeBackend) CancelWorkflow(_ context.Context, ref cluster.WorkflowRef) (cluster.CancelledWorkflow, error) {
	f.record("cancel-workflow")
	return f.cancelWorkflow(ref)
}
func (f *fakeBackend) WaitWorkflow(ctx context.Context, ref cluster.WorkflowRef) (string, error) {
	if f.waitWorkflow != nil {
		return f.waitWorkflow(ctx, ref)
	}
	<-ctx.Done()
	return "", ctx.Err()
}
func (f *fakeBackend) AddSchedule(_ context.Context, spec cluster.ScheduleSpec) (fsm.Instant, error) {
	f.record("add-schedule")
	return f.add(spec)
}
func (f *fakeBackend) RemoveSchedule(context.Context, string) (bool, error) { return false, nil }
func (f *fakeBackend) PauseSchedule(context.Context, string, bool) (bool, error) {
	return false, nil
}
func (f *fakeBackend) SetPool(_ context.Context, ch cluster.PoolChange) (cluster.PoolInfo, error) {
	f.record("set-pool")
	return f.setPool(ch)
}
func (f *fakeBackend) Pools(context.Context) ([]cluster.PoolInfo, error) {
	return nil, errors.New("not used")
}
func (f *fakeBackend) Pool(context.Context, string) (cluster.PoolInfo, error) {
	return cluster.PoolInfo{}, errors.New("not used")
}
func (f *fakeBackend) Delete(context.Context, cluster.TaskRef) (cluster.Deleted, error) {
	return cluster.Deleted{}, errors.New("not used")
}
func (f *fakeBackend) Retry(_ context.Context, ref cluster.TaskRef) (cluster.Retried, error) {
	f.record("retry")
	if f.retry == nil {
		return cluster.Retried{}, errors.New("not used")
	}
	return f.retry(ref)
}
func (f *fakeBackend) CancelMany(_ context.Context, tf cluster.TaskFilter) (int, error) {
	f.record("cancel-many")
	if f.cancelMany == nil {
		return 0, errors.New("not used")
	}
	return f.cancelMany(tf)
}
func (f *fakeBackend) SetKind(context.Context, cluster.KindChange) (fsm.KindSettings, error) {
	return fsm.KindSettings{}, errors.New("not used")
}
func (f *fakeBackend) Kind(context.Context, string, string) (fsm.KindSettings, error) {
	return fsm.KindSettings{}, errors.New("not used")
}
func (f *fakeBackend) Subscribe(after uint64) *cluster.EventSub {
	sub := f.events.Subscribe(after)
	if f.subscribed != nil {
		f.subscribed <- struct{}{}
	}
	return sub
}
func (f *fakeBackend) ConsistentRead(context.Context) (fsm.Reader, error) {
	if _, err := f.Leading(); err != nil {
		return nil, err
	}
	return f.state, nil
}
func (f *fakeBackend) StaleRead() (fsm.Reader, cluster.Staleness) {
	return f.state, cluster.Staleness{KnownLeader: true, LastContact: 3 * time.Millisecond, AppliedIndex: f.state.AppliedIndex()}
}
func (f *fakeBackend) Members() []cluster.Member                { return nil }
func (f *fakeBackend) Peers() ([]cluster.Peer, error)           { return nil, nil }
func (f *fakeBackend) RemovePeer(context.Context, string) error { return nil }
func (f *fakeBackend) TransferLeadership(_ context.Context, id string) (string, error) {
	if f.transfer != nil {
		return f.transfer(id)
	}
	return "", nil
}

func (f *fakeBackend) GossipKeyring() (cluster.GossipKeyring, error) {
	return cluster.GossipKeyring{}, cluster.ErrGossipEncryptionDisabled
}
func (f *fakeBackend) InstallGossipKey(string) (cluster.GossipKeyring, error) {
	return cluster.GossipKeyring{}, cluster.ErrGossipEncryptionDisabled
}
func (f *fakeBackend) UseGossipKey(string) (cluster.GossipKeyring, error) {
	return cluster.GossipKeyring{}, cluster.ErrGossipEncryptionDisabled
}
func (f *fakeBackend) RemoveGossipKey(string) (cluster.GossipKeyring, error) {
	return cluster.GossipKeyring{}, cluster.ErrGossipEncryptionDisabled
}

var _ Backend = (*fakeBackend)(nil)

// serveFake runs a Server over b on 127.0.0.1 and returns a task client.
func serveFake(t *testing.T, b *fakeBackend) (cronoqv1connect.TaskServiceClient, cronoqv1connect.ScheduleServiceClient) {
	t.Helper()
	hc, base := startFake(t, b, nil)
	return cronoqv1connect.NewTaskServiceClient(hc, base), cronoqv1connect.NewScheduleServiceClient(hc, base)
}

// startFake runs a Server over b on 127.0.0.1, adjusted by tweak (when set)
// before it starts, and returns an h2c client and the server's base URL.
func startFake(t *testing.T, b *fakeBackend, tweak func(*Server)) (*http.Client, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b.addr = ln.Addr().String()
	srv, err := New(Config{Backend: b, Listener: ln, HoldTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	if tweak != nil {
		tweak(srv)
	}
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(ctx))
	})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	t.Cleanup(hc.CloseIdleConnections)
	return hc, "http://" + b.addr
}

func spec(pool string) *cronoqv1.TaskSpec {
	return &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: pool, Kind: "k"}}
}

// The three submit forms share one path: a spec that does not convert is
// the whole request's error for Submit and SubmitBatch (named specs[i] in a
// batch), and that item's error for EnqueueMany, whose other items reach
// the leader in their order.
func TestSubmitFormsShareOnePath(t *testing.T) {
	b := newFakeBackend()
	var modes []cluster.SubmitMode
	b.submit = func(mode cluster.SubmitMode, specs []cluster.Spec) (*cluster.SubmitResult, error) {
		modes = append(modes, mode)
		res := &cluster.SubmitResult{Tasks: make([]cluster.Submitted, len(specs))}
		if mode == cluster.SubmitMany {
			res.Errs = make([]error, len(specs))
		}
		for i, s := range specs {
			if s.Pool == "full" {
				res.Errs[i] = cluster.ErrOverloaded
				continue
			}
			res.Tasks[i] = cluster.Submitted{ID: "id-" + s.Pool, Duplicate: s.Key != ""}
		}
		return res, nil
	}
	tasks, _ := serveFake(t, b)
	ctx := context.Background()

	one, err := tasks.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitRequest{Spec: spec("a")}))
	require.NoError(t, err)
	require.Equal(t, "id-a", one.Msg.GetResult().GetId())

	batch, err := tasks.SubmitBatch(ctx, connect.NewRequest(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{spec("a"), spec("b")}}))
	require.NoError(t, err)
	require.Len(t, batch.Msg.GetResults(), 2)
	require.Equal(t, "id-b", batch.Msg.GetResults()[1].GetId())

	bad := &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "x", Priority: 9}}
	_, err = tasks.SubmitBatch(ctx, connect.NewRequest(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{spec("a"), bad}}))
	require.Equal(t, apierr.KindInvalid, apierr.Kind(err))
	field, _ := apierr.Field(err)
	require.Equal(t, "specs[1].priority", field)
	_, err = tasks.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitRequest{Spec: bad}))
	field, _ = apierr.Field(err)
	require.Equal(t, "priority", field)

	many, err := tasks.EnqueueMany(ctx, connect.NewRequest(&cronoqv1.EnqueueManyRequest{Specs: []*cronoqv1.TaskSpec{spec("a"), bad, spec("full"), spec("c")}}))
	require.NoError(t, err)
	rs := many.Msg.GetResults()
	require.Len(t, rs, 4)
	require.Equal(t, "id-a", rs[0].GetSubmitted().GetId())
	require.Equal(t, apierr.KindInvalid, rs[1].GetCode())
	require.Equal(t, apierr.KindOverloaded, rs[2].GetCode())
	require.Equal(t, "id-c", rs[3].GetSubmitted().GetId())

	require.Equal(t, []cluster.SubmitMode{cluster.SubmitOne, cluster.SubmitBatch, cluster.SubmitMany}, modes,
		"refused requests never reached the leader")
}

// Errors of the leader's operations map to the wire convention.
func TestBackendErrorsOnTheWire(t *testing.T) {
	b := newFakeBackend()
	b.add = func(cluster.ScheduleSpec) (fsm.Instant, error) {
		return 0, &cluster.VersionError{What: "a schedule with a backoff", Need: 2, Have: 1}
	}
	b.cancel = func(ref cluster.TaskRef) (cluster.Cancelled, error) {
		return cluster.Cancelled{}, errors.Join(errors.New("task "+ref.ID), cluster.ErrNotFound)
	}
	tasks, schedules := serveFake(t, b)
	ctx := context.Background()

	_, err := schedules.Add(ctx, connect.NewRequest(&cronoqv1.AddScheduleRequest{Schedule: &cronoqv1.Schedule{Name: "s", Task: &cronoqv1.TaskTemplate{Pool: "p"}}}))
	require.Equal(t, apierr.KindUpgradeRequired, apierr.Kind(err), "%v", err)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Contains(t, err.Error(), "needs log format version 2")

	_, err = tasks.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelRequest{Ref: &cronoqv1.TaskRef{Id: "nope"}}))
	require.Equal(t, apierr.KindNotFound, apierr.Kind(err))

	// Reads: a missing task, and the metadata of a stale read.
	_, err = tasks.Get(ctx, connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Key: "nope"}}))
	require.Equal(t, apierr.KindNotFound, apierr.Kind(err))
	_, err = tasks.Get(ctx, connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "a", Key: "b"}}))
	require.Equal(t, apierr.KindInvalid, apierr.Kind(err))
	list, err := tasks.List(ctx, connect.NewRequest(&cronoqv1.ListRequest{Stale: true}))
	require.NoError(t, err)
	require.True(t, list.Msg.GetMeta().GetStale())
	require.Equal(t, 3*time.Millisecond, list.Msg.GetMeta().GetLastContact().AsDuration())

	// A node that does not lead, with a forwarded request, names the leader
	// (one hop at most).
	b.mu.Lock()
	b.leading, b.leader = false, "n2"
	b.mu.Unlock()
	req := connect.NewRequest(&cronoqv1.CancelRequest{Ref: &cronoqv1.TaskRef{Id: "t"}})
	req.Header().Set(HeaderForwarded, "n3")
	_, err = tasks.Cancel(ctx, req)
	require.Equal(t, apierr.KindNotLeader, apierr.Kind(err), "%v", err)
	id, addr := apierr.Leader(err)
	require.Equal(t, "n2", id)
	require.Equal(t, "127.0.0.9:8650", addr)
	require.Equal(t, []string{"add-schedule", "cancel"}, b.calls, "nothing ran on a node that does not lead")
}

// The fake's ACL operations apply their mutation to its replica, refusing
// a second bootstrap as the core does.
func (f *fakeBackend) ACLs() cluster.ACLReader { return f.state }
func (f *fakeBackend) ACLBootstrap(_ context.Context, tok fsm.ACLToken) (fsm.ACLToken, error) {
	if f.state.ACLBootstrapIndex() != 0 {
		return tok, cluster.ErrACLBootstrapped
	}
	tok.Management, tok.Bootstrap = true, true
	return tok, f.applyErr(0, fsm.Mutation{PutACLToken: &tok})
}
func (f *fakeBackend) PutACLPolicy(_ context.Context, p fsm.ACLPolicy) (fsm.ACLPolicy, error) {
	return p, f.applyErr(0, fsm.Mutation{PutACLPolicy: &p})
}
func (f *fakeBackend) PutACLToken(_ context.Context, tok fsm.ACLToken) (fsm.ACLToken, error) {
	return tok, f.applyErr(0, fsm.Mutation{PutACLToken: &tok})
}
func (f *fakeBackend) DeleteACL(_ context.Context, d fsm.DelACL) error {
	return f.applyErr(0, fsm.Mutation{DelACL: &d})
}
