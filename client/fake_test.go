package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

// fakeCluster models a small cronoq cluster in memory: nodes that serve the
// generated ConnectRPC handlers over h2c, one of which leads. Followers answer
// calls that need the leader with not_leader and the leader's address.
// Scripted faults: outcome-unknown submits, dropped connections, dropped
// worker streams, delayed heartbeat acks, refused heartbeats.
type fakeCluster struct {
	t *testing.T

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every state change
	nodes   []*fakeNode
	leader  int
	forward bool // followers serve Submit as if forwarded to the leader, naming it

	tasks map[string]*cronoqv1.Task
	byKey map[string]string
	seq   int

	submitUnknown int           // next submits commit, then answer outcome_unknown
	submitHold    chan struct{} // when set, submits block until it is closed or the call ends
	submitKeys    []string      // key of every Submit the leader handled
	waitCalls     int
	schedules     map[string]*cronoqv1.Schedule

	eventStreams int
	eventScript  func(n int, send func(*cronoqv1.Event) error) error

	wk fakeWorkers
}

type fakeNode struct {
	c    *fakeCluster
	id   string
	addr string
	srv  *http.Server
	ln   *trackingListener
	done chan struct{}
	reqs sync.WaitGroup

	mu       sync.Mutex
	remotes  []string
	requests map[string]int
}

// newFakeCluster starts n nodes on 127.0.0.1; node leader leads. workerOpts
// configure the WorkerService handlers.
func newFakeCluster(t *testing.T, n, leader int, workerOpts ...connect.HandlerOption) *fakeCluster {
	c := &fakeCluster{
		t:         t,
		changed:   make(chan struct{}),
		leader:    leader,
		tasks:     make(map[string]*cronoqv1.Task),
		byKey:     make(map[string]string),
		schedules: make(map[string]*cronoqv1.Schedule),
	}
	c.wk.init()
	for i := range n {
		c.nodes = append(c.nodes, c.startNode(fmt.Sprintf("node%d", i), workerOpts))
	}
	return c
}

func (c *fakeCluster) startNode(id string, workerOpts []connect.HandlerOption) *fakeNode {
	t := c.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n := &fakeNode{c: c, id: id, addr: ln.Addr().String(), done: make(chan struct{}),
		requests: make(map[string]int), ln: &trackingListener{Listener: ln, conns: make(map[net.Conn]struct{})}}
	mux := http.NewServeMux()
	mux.Handle(cronoqv1connect.NewTaskServiceHandler(&fakeTasks{n}))
	mux.Handle(cronoqv1connect.NewScheduleServiceHandler(&fakeSchedules{n}))
	mux.Handle(cronoqv1connect.NewWorkerServiceHandler(&fakeWorkerSvc{n}, workerOpts...))
	mux.Handle(cronoqv1connect.NewOperatorServiceHandler(&fakeOperator{n}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	n.srv = &http.Server{Handler: n.record(mux), Protocols: &p}
	go func() {
		defer close(n.done)
		_ = n.srv.Serve(n.ln)
	}()
	t.Cleanup(func() {
		_ = n.srv.Close()
		<-n.done
		n.reqs.Wait()
	})
	return n
}

// record counts requests per procedure and remembers their source address.
func (n *fakeNode) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.reqs.Add(1)
		defer n.reqs.Done()
		n.mu.Lock()
		n.remotes = append(n.remotes, r.RemoteAddr)
		n.requests[r.URL.Path]++
		n.mu.Unlock()
		n.c.notify()
		h.ServeHTTP(w, r)
	})
}

func (n *fakeNode) count(procedure string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.requests[procedure]
}

func (n *fakeNode) remoteHosts() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, r := range n.remotes {
		h, _, err := net.SplitHostPort(r)
		if err == nil {
			out = append(out, h)
		}
	}
	return out
}

// dropConns closes every TCP connection the node accepted.
func (n *fakeNode) dropConns() { n.ln.closeAll() }

// leaderOnly answers not_leader with the leader's id and address on
// followers.
func (n *fakeNode) leaderOnly() error {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.nodes[c.leader]; l != n {
		return apierr.NotLeader(l.id, l.addr)
	}
	return nil
}

// leaderOrForward is leaderOnly for a call that a follower of a forwarding
// cluster serves as if it had forwarded it: it then returns the leader's
// address for the answer to name.
func (n *fakeNode) leaderOrForward() (string, error) {
	c := n.c
	c.mu.Lock()
	fwd := c.forward
	l := c.nodes[c.leader]
	leaderAddr := l.addr
	c.mu.Unlock()
	if fwd && l != n {
		return leaderAddr, nil
	}
	return "", n.leaderOnly()
}

type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns[conn] = struct{}{}
	l.mu.Unlock()
	return &trackedConn{Conn: conn, l: l}, nil
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for conn := range l.conns {
		_ = conn.Close()
		delete(l.conns, conn)
	}
}

type trackedConn struct {
	net.Conn
	l *trackingListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c.Conn)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// notify wakes waitUntil callers; c.mu need not be held.
func (c *fakeCluster) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notifyLocked()
}

func (c *fakeCluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitUntil blocks until cond (called with c.mu held) holds, failing the test
// after a generous timeout.
func (c *fakeCluster) waitUntil(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func (c *fakeCluster) addrs(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, c.nodes[i].addr)
	}
	return out
}

// addTask stores a task directly (as if submitted) and returns its id.
func (c *fakeCluster) addTask(pool, kind, key string, payload []byte) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addTaskLocked(&cronoqv1.TaskSpec{Pool: pool, Kind: kind, Key: key, Payload: payload}).GetId()
}

func (c *fakeCluster) addTaskLocked(s *cronoqv1.TaskSpec) *cronoqv1.Task {
	c.seq++
	now := time.Now().UnixNano()
	t := &cronoqv1.Task{
		Id: fmt.Sprintf("T%04d", c.seq), Pool: s.GetPool(), Kind: s.GetKind(), Key: s.GetKey(),
		Priority: s.GetPriority(), Payload: s.GetPayload(), Labels: s.GetLabels(), Tags: s.GetTags(),
		Status: cronoqv1.Status_STATUS_QUEUED, MaxAttempts: s.GetMaxAttempts(), TimeoutMs: s.GetTimeoutMs(),
		SubmittedAt: now, RunAt: now, UpdatedAt: now,
	}
	if t.Key == "" {
		t.Key = t.Id
	}
	c.tasks[t.Id] = t
	c.byKey[t.Key] = t.Id
	c.notifyLocked()
	return t
}

func (c *fakeCluster) finish(id string, st cronoqv1.Status, output string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tasks[id]
	t.Status = st
	t.Output = []byte(output)
	t.FinishedAt = time.Now().UnixNano()
	c.notifyLocked()
}

func terminal(s cronoqv1.Status) bool {
	switch s {
	case cronoqv1.Status_STATUS_SUCCEEDED, cronoqv1.Status_STATUS_FAILED,
		cronoqv1.Status_STATUS_CANCELLED, cronoqv1.Status_STATUS_EXPIRED:
		return true
	}
	return false
}

func (c *fakeCluster) lookupLocked(ref *cronoqv1.TaskRef) (*cronoqv1.Task, error) {
	id := ref.GetId()
	if id == "" {
		id = c.byKey[ref.GetKey()]
	}
	t, ok := c.tasks[id]
	if !ok {
		return nil, apierr.NotFound("no task " + ref.GetId() + ref.GetKey())
	}
	return t, nil
}

// ---------------------------------------------------------------------------
// TaskService

type fakeTasks struct{ n *fakeNode }

func (s *fakeTasks) admitLocked(spec *cronoqv1.TaskSpec) (*cronoqv1.Submitted, error) {
	c := s.n.c
	if spec.GetKind() == "" {
		return nil, apierr.Invalid("kind", "must not be empty")
	}
	if spec.GetPool() == "full" {
		return nil, apierr.Overloaded("pool full is at its pending bound")
	}
	if id, ok := c.byKey[spec.GetKey()]; ok && spec.GetKey() != "" {
		return &cronoqv1.Submitted{Id: id, Duplicate: true}, nil
	}
	return &cronoqv1.Submitted{Id: c.addTaskLocked(spec).GetId()}, nil
}

func (s *fakeTasks) Submit(ctx context.Context, req *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
	leaderAddr, err := s.n.leaderOrForward()
	if err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	hold := c.submitHold
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.submitKeys = append(c.submitKeys, req.Msg.GetSpec().GetKey())
	c.notifyLocked()
	sub, err := s.admitLocked(req.Msg.GetSpec())
	if err != nil {
		return nil, err
	}
	if c.submitUnknown > 0 {
		c.submitUnknown--
		return nil, apierr.OutcomeUnknown("leadership lost while committing")
	}
	resp := connect.NewResponse(&cronoqv1.SubmitResponse{Result: sub})
	if leaderAddr != "" {
		resp.Header().Set(apierr.HeaderLeaderAddr, leaderAddr)
	}
	return resp, nil
}

func (s *fakeTasks) SubmitBatch(_ context.Context, req *connect.Request[cronoqv1.SubmitBatchRequest]) (*connect.Response[cronoqv1.SubmitBatchResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, spec := range req.Msg.GetSpecs() {
		if spec.GetKind() == "" {
			return nil, apierr.Invalid("kind", "must not be empty")
		}
	}
	resp := &cronoqv1.SubmitBatchResponse{}
	for _, spec := range req.Msg.GetSpecs() {
		sub, err := s.admitLocked(spec)
		if err != nil {
			return nil, err
		}
		resp.Results = append(resp.Results, sub)
	}
	return connect.NewResponse(resp), nil
}

func (s *fakeTasks) EnqueueMany(_ context.Context, req *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &cronoqv1.EnqueueManyResponse{}
	for _, spec := range req.Msg.GetSpecs() {
		sub, err := s.admitLocked(spec)
		if err != nil {
			resp.Results = append(resp.Results, &cronoqv1.ItemResult{Error: connectMessage(err), Code: apierr.Kind(err)})
			continue
		}
		resp.Results = append(resp.Results, &cronoqv1.ItemResult{Submitted: sub})
	}
	return connect.NewResponse(resp), nil
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

func (s *fakeTasks) Get(_ context.Context, req *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
	if !req.Msg.GetStale() {
		if err := s.n.leaderOnly(); err != nil {
			return nil, err
		}
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.lookupLocked(req.Msg.GetRef())
	if err != nil {
		return nil, err
	}
	meta := &cronoqv1.ReadMeta{Stale: req.Msg.GetStale(), Node: s.n.id, KnownLeader: true, LastContactMs: 7, AppliedIndex: 42}
	return connect.NewResponse(&cronoqv1.GetResponse{Task: cloneTask(t), Meta: meta}), nil
}

func (s *fakeTasks) Wait(ctx context.Context, req *connect.Request[cronoqv1.WaitRequest]) (*connect.Response[cronoqv1.WaitResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	c.waitCalls++
	c.notifyLocked()
	c.mu.Unlock()
	hold := time.NewTimer(time.Duration(req.Msg.GetTimeoutMs()) * time.Millisecond)
	defer hold.Stop()
	for {
		c.mu.Lock()
		t, err := c.lookupLocked(req.Msg.GetRef())
		ch := c.changed
		done := err == nil && terminal(t.GetStatus())
		if err == nil {
			t = cloneTask(t)
		}
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if done {
			return connect.NewResponse(&cronoqv1.WaitResponse{Task: t}), nil
		}
		select {
		case <-ch:
		case <-hold.C:
			return connect.NewResponse(&cronoqv1.WaitResponse{Task: t}), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *fakeTasks) Cancel(_ context.Context, req *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.lookupLocked(req.Msg.GetRef())
	if err != nil {
		return nil, err
	}
	if terminal(t.GetStatus()) {
		return connect.NewResponse(&cronoqv1.CancelResponse{Id: t.GetId()}), nil
	}
	t.Status = cronoqv1.Status_STATUS_CANCELLED
	c.notifyLocked()
	return connect.NewResponse(&cronoqv1.CancelResponse{Id: t.GetId(), Cancelled: true}), nil
}

func (s *fakeTasks) List(_ context.Context, req *connect.Request[cronoqv1.ListRequest]) (*connect.Response[cronoqv1.ListResponse], error) {
	if !req.Msg.GetStale() {
		if err := s.n.leaderOnly(); err != nil {
			return nil, err
		}
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, t := range c.tasks {
		if len(req.Msg.GetPools()) > 0 && !slices.Contains(req.Msg.GetPools(), t.GetPool()) {
			continue
		}
		if len(req.Msg.GetStatuses()) > 0 && !slices.Contains(req.Msg.GetStatuses(), t.GetStatus()) {
			continue
		}
		if id > req.Msg.GetAfter() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	resp := &cronoqv1.ListResponse{}
	limit := int(req.Msg.GetLimit())
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
		resp.Next = ids[limit-1]
	}
	for _, id := range ids {
		resp.Tasks = append(resp.Tasks, cloneTask(c.tasks[id]))
	}
	return connect.NewResponse(resp), nil
}

func (s *fakeTasks) Counts(context.Context, *connect.Request[cronoqv1.CountsRequest]) (*connect.Response[cronoqv1.CountsResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	by := map[string]map[string]int64{}
	for _, t := range c.tasks {
		if by[t.GetPool()] == nil {
			by[t.GetPool()] = map[string]int64{}
		}
		by[t.GetPool()][statusFromProto(t.GetStatus())]++
	}
	resp := &cronoqv1.CountsResponse{}
	for pool, m := range by {
		resp.Pools = append(resp.Pools, &cronoqv1.PoolCounts{Pool: pool, ByStatus: m})
	}
	return connect.NewResponse(resp), nil
}

func (s *fakeTasks) Events(ctx context.Context, _ *connect.Request[cronoqv1.EventsRequest], stream *connect.ServerStream[cronoqv1.Event]) error {
	if err := s.n.leaderOnly(); err != nil {
		return err
	}
	c := s.n.c
	c.mu.Lock()
	c.eventStreams++
	n := c.eventStreams
	script := c.eventScript
	c.notifyLocked()
	c.mu.Unlock()
	if script == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	if err := script(n, stream.Send); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// ---------------------------------------------------------------------------
// ScheduleService

type fakeSchedules struct{ n *fakeNode }

func (s *fakeSchedules) Add(_ context.Context, req *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	sc := req.Msg.GetSchedule()
	if !strings.HasPrefix(sc.GetCron(), "@") && len(strings.Fields(sc.GetCron())) < 5 {
		return nil, apierr.Invalid("cron", "expected five fields or a descriptor")
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	sc.NextFire = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	c.schedules[sc.GetName()] = sc
	return connect.NewResponse(&cronoqv1.AddScheduleResponse{Name: sc.GetName(), NextFire: sc.GetNextFire()}), nil
}

func (s *fakeSchedules) List(context.Context, *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &cronoqv1.ListSchedulesResponse{}
	for _, name := range slices.Sorted(mapsKeys(c.schedules)) {
		resp.Schedules = append(resp.Schedules, proto.Clone(c.schedules[name]).(*cronoqv1.Schedule))
	}
	return connect.NewResponse(resp), nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (s *fakeSchedules) Remove(_ context.Context, req *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.schedules[req.Msg.GetName()]
	delete(c.schedules, req.Msg.GetName())
	return connect.NewResponse(&cronoqv1.RemoveScheduleResponse{Name: req.Msg.GetName(), Removed: ok}), nil
}

func (s *fakeSchedules) Pause(_ context.Context, req *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.schedules[req.Msg.GetName()]
	if !ok {
		return nil, apierr.NotFound("no schedule " + req.Msg.GetName())
	}
	sc.Paused = req.Msg.GetPaused()
	return connect.NewResponse(&cronoqv1.PauseScheduleResponse{Name: sc.GetName(), Paused: sc.GetPaused()}), nil
}

// ---------------------------------------------------------------------------
// OperatorService

type fakeOperator struct{ n *fakeNode }

func (s *fakeOperator) Members(context.Context, *connect.Request[cronoqv1.MembersRequest]) (*connect.Response[cronoqv1.MembersResponse], error) {
	resp := &cronoqv1.MembersResponse{}
	for _, n := range s.n.c.nodes {
		resp.Members = append(resp.Members, &cronoqv1.Member{Name: n.id, Status: "alive", HttpAddr: n.addr})
	}
	return connect.NewResponse(resp), nil
}

func (s *fakeOperator) Peers(context.Context, *connect.Request[cronoqv1.PeersRequest]) (*connect.Response[cronoqv1.PeersResponse], error) {
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &cronoqv1.PeersResponse{}
	for i, n := range c.nodes {
		resp.Peers = append(resp.Peers, &cronoqv1.Peer{Id: n.id, Address: n.addr, Voter: true, Leader: i == c.leader})
	}
	return connect.NewResponse(resp), nil
}

func (s *fakeOperator) RemovePeer(_ context.Context, req *connect.Request[cronoqv1.RemovePeerRequest]) (*connect.Response[cronoqv1.RemovePeerResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&cronoqv1.RemovePeerResponse{Removed: req.Msg.GetId()}), nil
}

func (s *fakeOperator) TransferLeadership(_ context.Context, req *connect.Request[cronoqv1.TransferLeadershipRequest]) (*connect.Response[cronoqv1.TransferLeadershipResponse], error) {
	if err := s.n.leaderOnly(); err != nil {
		return nil, err
	}
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n.id == req.Msg.GetId() {
			c.leader = i
			return connect.NewResponse(&cronoqv1.TransferLeadershipResponse{Leader: n.id}), nil
		}
	}
	return nil, apierr.NotFound("no peer " + req.Msg.GetId())
}

func (s *fakeOperator) Health(context.Context, *connect.Request[cronoqv1.HealthRequest]) (*connect.Response[cronoqv1.HealthResponse], error) {
	c := s.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return connect.NewResponse(&cronoqv1.HealthResponse{
		Node: s.n.id, Leader: c.nodes[c.leader].id, Epoch: 3, Status: "ok",
	}), nil
}
