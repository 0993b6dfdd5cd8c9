package clienttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

// Defaults of a fake cluster, the same as a real one's unless said
// otherwise.
const (
	// DefaultHeartbeatWindow is how long a lease lives without a heartbeat.
	DefaultHeartbeatWindow = 10 * time.Second
	// DefaultMaxAttempts is the attempts a task gets when its template says
	// none.
	DefaultMaxAttempts = 5
	// DefaultMaxPayload and DefaultMaxOutput bound payloads and outputs.
	DefaultMaxPayload = 1 << 20
	DefaultMaxOutput  = 1 << 20
	// DefaultMaxListLimit caps the page size of List; a List that asks for
	// no limit gets DefaultListLimit.
	DefaultMaxListLimit = 10000
	DefaultListLimit    = 1000
	// DefaultMaxPageBytes bounds the tasks of one page of List, and the
	// members of one page of a workflow (at least one is always answered).
	DefaultMaxPageBytes = 32 << 20
	// DefaultWaitTimeout bounds WaitUntil.
	DefaultWaitTimeout = 20 * time.Second
	// eventBuffer is how many events a subscriber may fall behind before
	// events are dropped (and a lagged marker sent).
	eventBuffer = 1024
	// maxKindLen bounds a task's kind.
	maxKindLen = 256
)

// defaultBackoff is the retry backoff of a template that gives none.
var defaultBackoff = backoff{initial: time.Second, max: 5 * time.Minute, jitter: 0.2}

type backoff struct {
	initial, max time.Duration
	jitter       float64
}

type config struct {
	nodes        int
	leader       int
	ids          []string
	forward      bool
	handlerOpts  []connect.HandlerOption
	clock        func() time.Time
	window       time.Duration
	maxAttempts  int
	backoff      backoff
	pools        []string
	maxPayload   int
	maxOutput    int
	maxListLimit int
	waitTimeout  time.Duration
	grantBudget  int
	maxPageBytes int
	gossipKeys   []string
}

// Option configures a Cluster.
type Option func(*config)

// WithNodes sets the number of nodes (default 1).
func WithNodes(n int) Option { return func(c *config) { c.nodes = n } }

// WithLeader makes node i the leader (default 0); -1 starts without a
// leader.
func WithLeader(i int) Option { return func(c *config) { c.leader = i } }

// WithNodeIDs names the nodes (default node0, node1, ...); it also sets
// their number when WithNodes is not given.
func WithNodeIDs(ids ...string) Option { return func(c *config) { c.ids = ids } }

// WithForwarding makes followers serve the calls that need the leader as if
// they had forwarded them to it: the answer names the leader in the
// apierr.HeaderLeader and apierr.HeaderLeaderAddr headers, as a real node's
// does. Without it, followers answer such calls with not_leader naming the
// leader. Streams (worker streams, events) always need the leader itself in
// the fake, as with nodes of older releases (a real node serves the events
// from its replica and relays worker streams to the leader): the SDK's
// leader hints are tested against it.
func WithForwarding() Option { return func(c *config) { c.forward = true } }

// WithHandlerOptions adds connect handler options to every service of
// every node (for instance connect.WithReadMaxBytes).
func WithHandlerOptions(opts ...connect.HandlerOption) Option {
	return func(c *config) { c.handlerOpts = append(c.handlerOpts, opts...) }
}

// WithClock sets the clock the cluster reads for every instant it records
// and decides on (submission and run times, deadlines, leases, schedule
// fires). Time-driven changes are applied on every call and by a timer that
// assumes the clock moves with real time; after moving a clock by hand,
// call Refresh.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithStartTime sets a clock that reads start when the cluster is made and
// moves with real time from there: instants are predictable and timers
// still work.
func WithStartTime(start time.Time) Option {
	return func(c *config) {
		began := time.Now()
		c.clock = func() time.Time { return start.Add(time.Since(began)) }
	}
}

// WithHeartbeatWindow sets how long a lease lives without a heartbeat
// (default DefaultHeartbeatWindow); workers learn it in their Welcome.
func WithHeartbeatWindow(d time.Duration) Option { return func(c *config) { c.window = d } }

// WithMaxAttempts sets the attempts of a task whose template gives none
// (default DefaultMaxAttempts).
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithBackoff sets the retry backoff of a task whose template gives none
// (default 1s doubling up to 5m, ±20 %).
func WithBackoff(initial, max time.Duration, jitter float64) Option {
	return func(c *config) { c.backoff = backoff{initial: initial, max: max, jitter: jitter} }
}

// WithPools fixes the pool list: submits, schedules and workers naming
// another pool are refused as invalid. By default any pool exists.
func WithPools(pools ...string) Option { return func(c *config) { c.pools = pools } }

// WithMaxPayload and WithMaxOutput bound payloads and outputs (default
// 1 MiB each). A larger payload is refused as invalid; a larger output
// fails its task.
func WithMaxPayload(n int) Option { return func(c *config) { c.maxPayload = n } }

// WithMaxOutput: see WithMaxPayload.
func WithMaxOutput(n int) Option { return func(c *config) { c.maxOutput = n } }

// WithMaxListLimit caps the page size of List (default
// DefaultMaxListLimit): a List asking for more gets this many tasks and a
// cursor.
func WithMaxListLimit(n int) Option { return func(c *config) { c.maxListLimit = n } }

// WithMaxPageBytes bounds the bytes of the tasks one page of List, or of
// a workflow's members, holds (default DefaultMaxPageBytes): the page ends
// before the task that would pass it, with a cursor.
func WithMaxPageBytes(n int) Option { return func(c *config) { c.maxPageBytes = n } }

// WithGrantOutputBudget bounds the bytes of dependency outputs one grant
// carries, as a real cluster's budget does: past it, outputs are left out
// of the grant (output_omitted) and the worker reads them with Get. By
// default the fake inlines every output; n < 0 restores that.
func WithGrantOutputBudget(n int) Option { return func(c *config) { c.grantBudget = n } }

// WithWaitTimeout sets how long WaitUntil waits before failing the test
// (default DefaultWaitTimeout).
func WithWaitTimeout(d time.Duration) Option { return func(c *config) { c.waitTimeout = d } }

// Cluster is a fake cronoq cluster: nodes that serve the cronoq API over
// h2c on 127.0.0.1, one of which leads, sharing one in-memory state. It is
// safe for concurrent use.
type Cluster struct {
	t   testing.TB
	cfg config

	done     chan struct{} // closed by Close
	loopDone chan struct{}
	wake     chan struct{} // pokes the timer loop
	rng      *rand.Rand

	mu      sync.Mutex
	started bool          // the timer loop runs
	changed chan struct{} // closed and replaced on every change
	closed  bool
	nodes   []*Node
	leader  int
	epoch   uint64
	forward bool
	applied uint64

	tasks    map[string]*task
	byKey    map[string]*task
	seq      int
	readySeq uint64
	ready    map[string]*readyQueue
	leases   map[uint64]*task
	leaseCtr uint64
	timed    map[*task]struct{} // tasks the clock may change
	limits   map[string]int
	pools    map[string]*poolState // settings set through PoolService.Set

	schedules map[string]*schedule

	workflows map[string]*workflow
	wfByKey   map[string]*workflow
	wfSeq     int
	wfSettle  []*workflow // workflows whose last live member ended

	refuse map[string]*fault
	lose   map[string]*fault
	holds  map[string]chan struct{}

	calls    map[string]int
	requests map[string][]proto.Message

	subs        map[*subscriber]struct{}
	eventScript func(n int, send func(*cronoqv1.Event) error) error

	streams          map[*workerStream]struct{}
	wlog             WorkerLog
	accepted         map[string]*cronoqv1.Completion
	lastLease        map[string]uint64
	dropOnCompletion map[string]bool
	refuseHB         map[string]string
	ackDelay         time.Duration
}

// fault is a scripted error for the next n calls of a procedure (every call
// when n < 0).
type fault struct {
	n   int
	err error
}

// take reports the error of the next call, if any, counting it.
func (f *fault) take() error {
	if f == nil || f.n == 0 {
		return nil
	}
	if f.n > 0 {
		f.n--
	}
	return f.err
}

// Node is one node of a Cluster.
type Node struct {
	c    *Cluster
	id   string
	addr string
	srv  *http.Server
	ln   *trackingListener
	reqs sync.WaitGroup

	serveDone chan struct{}

	// Guarded by c.mu.
	advertise     string
	requests      map[string]int
	remotes       []string
	member        *cronoqv1.Member
	healthStatus  string
	healthReasons []string
	lastContact   time.Duration
	removed       bool
	gossipKeys    []string // primary first; nil: no gossip encryption
}

// NewCluster starts a fake cluster for a test and closes it when the test
// ends. It fails the test if the cluster cannot start.
func NewCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := New(opts...)
	if err != nil {
		t.Fatalf("starting fake cronoq cluster: %v", err)
	}
	c.t = t
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// New starts a fake cluster; Close stops it. NewCluster is the usual way in
// tests.
func New(opts ...Option) (*Cluster, error) {
	cfg := config{
		nodes:        0,
		window:       DefaultHeartbeatWindow,
		maxAttempts:  DefaultMaxAttempts,
		backoff:      defaultBackoff,
		maxPayload:   DefaultMaxPayload,
		maxOutput:    DefaultMaxOutput,
		maxListLimit: DefaultMaxListLimit,
		waitTimeout:  DefaultWaitTimeout,
		clock:        time.Now,
		grantBudget:  -1,
		maxPageBytes: DefaultMaxPageBytes,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.nodes == 0 {
		cfg.nodes = max(len(cfg.ids), 1)
	}
	switch {
	case cfg.nodes < 0:
		return nil, errors.New("the number of nodes must be positive")
	case len(cfg.ids) > 0 && len(cfg.ids) != cfg.nodes:
		return nil, fmt.Errorf("%d node ids for %d nodes", len(cfg.ids), cfg.nodes)
	case cfg.leader < -1 || cfg.leader >= cfg.nodes:
		return nil, fmt.Errorf("leader %d is not a node", cfg.leader)
	case cfg.window <= 0:
		return nil, errors.New("the heartbeat window must be positive")
	case cfg.maxAttempts <= 0:
		return nil, errors.New("the default max attempts must be positive")
	case cfg.backoff.initial <= 0 || cfg.backoff.max < cfg.backoff.initial || cfg.backoff.jitter < 0 || cfg.backoff.jitter >= 1:
		return nil, errors.New("the default backoff needs 0 < initial <= max and jitter in [0, 1)")
	case cfg.maxListLimit <= 0:
		return nil, errors.New("the list limit must be positive")
	case cfg.maxPageBytes <= 0:
		return nil, errors.New("the page size in bytes must be positive")
	}
	for _, k := range cfg.gossipKeys {
		if err := checkGossipKey(k); err != nil {
			return nil, fmt.Errorf("gossip key %q: %w", k, err)
		}
	}
	if len(cfg.ids) == 0 {
		for i := range cfg.nodes {
			cfg.ids = append(cfg.ids, fmt.Sprintf("node%d", i))
		}
	}
	c := &Cluster{
		cfg:              cfg,
		done:             make(chan struct{}),
		loopDone:         make(chan struct{}),
		wake:             make(chan struct{}, 1),
		rng:              rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		changed:          make(chan struct{}),
		leader:           cfg.leader,
		epoch:            1,
		forward:          cfg.forward,
		tasks:            make(map[string]*task),
		byKey:            make(map[string]*task),
		ready:            make(map[string]*readyQueue),
		leases:           make(map[uint64]*task),
		timed:            make(map[*task]struct{}),
		limits:           make(map[string]int),
		pools:            make(map[string]*poolState),
		schedules:        make(map[string]*schedule),
		workflows:        make(map[string]*workflow),
		wfByKey:          make(map[string]*workflow),
		refuse:           make(map[string]*fault),
		lose:             make(map[string]*fault),
		holds:            make(map[string]chan struct{}),
		calls:            make(map[string]int),
		requests:         make(map[string][]proto.Message),
		subs:             make(map[*subscriber]struct{}),
		streams:          make(map[*workerStream]struct{}),
		accepted:         make(map[string]*cronoqv1.Completion),
		lastLease:        make(map[string]uint64),
		dropOnCompletion: make(map[string]bool),
		refuseHB:         make(map[string]string),
	}
	for _, id := range cfg.ids {
		n, err := c.startNode(id)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		n.gossipKeys = append([]string(nil), cfg.gossipKeys...)
		c.nodes = append(c.nodes, n)
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	go c.timerLoop()
	return c, nil
}

func (c *Cluster) startNode(id string) (*Node, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for node %s: %w", id, err)
	}
	n := &Node{
		c:         c,
		id:        id,
		addr:      ln.Addr().String(),
		ln:        &trackingListener{Listener: ln, conns: make(map[net.Conn]struct{})},
		serveDone: make(chan struct{}),
		requests:  make(map[string]int),
	}
	n.advertise = n.addr
	opts := c.cfg.handlerOpts
	mux := http.NewServeMux()
	mux.Handle(cronoqv1connect.NewTaskServiceHandler(&taskService{n}, opts...))
	mux.Handle(cronoqv1connect.NewScheduleServiceHandler(&scheduleService{n}, opts...))
	mux.Handle(cronoqv1connect.NewWorkflowServiceHandler(&workflowService{n}, opts...))
	mux.Handle(cronoqv1connect.NewWorkerServiceHandler(&workerService{n}, opts...))
	mux.Handle(cronoqv1connect.NewOperatorServiceHandler(&operatorService{n}, opts...))
	mux.Handle(cronoqv1connect.NewPoolServiceHandler(&poolService{n}, opts...))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	n.srv = &http.Server{Handler: n.middleware(mux), Protocols: &p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(n.serveDone)
		_ = n.srv.Serve(n.ln)
	}()
	return n, nil
}

// bodyKey records a request's body in its context, so that the fake can
// end a worker stream by closing it (which unblocks a pending Receive).
type bodyKey struct{}

// middleware counts requests per procedure, remembers where they came from
// and tracks the handlers so that Close can wait for them.
func (n *Node) middleware(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := n.c
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			http.Error(w, "fake cluster closed", http.StatusServiceUnavailable)
			return
		}
		n.reqs.Add(1)
		n.remotes = append(n.remotes, r.RemoteAddr)
		n.requests[r.URL.Path]++
		c.notifyLocked()
		c.mu.Unlock()
		defer n.reqs.Done()
		if r.Body != nil {
			r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, r.Body))
		}
		h.ServeHTTP(w, r)
	})
}

// Close stops every node, ends every call in progress and waits for the
// goroutines of the cluster. It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	for s := range c.streams {
		s.endLocked(apierr.ShuttingDown())
	}
	for sub := range c.subs {
		sub.endLocked(apierr.ShuttingDown())
	}
	c.notifyLocked()
	nodes, started := c.nodes, c.started
	c.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		if err := n.srv.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range nodes {
		<-n.serveDone
		n.reqs.Wait()
	}
	if started {
		<-c.loopDone
	}
	return errors.Join(errs...)
}

// Addrs returns the HTTP API addresses of the nodes, in node order: what
// client.New takes.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Leader returns the index of the leader, -1 when there is none.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// Epoch returns the leadership epoch: 1 at the start, one more at each
// change of leader.
func (c *Cluster) Epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// SetLeader makes node i the leader (-1: no leader). As when a real leader
// steps down, the worker and event streams of the old leader end with
// not_leader (or no_leader) and clients move on. Running attempts keep
// their leases: their workers reconnect to the new leader and heartbeat
// them.
func (c *Cluster) SetLeader(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < -1 || i >= len(c.nodes) {
		panic(fmt.Sprintf("clienttest: SetLeader(%d): no such node", i))
	}
	c.setLeaderLocked(i)
}

func (c *Cluster) setLeaderLocked(i int) {
	if i == c.leader {
		return
	}
	c.leader = i
	c.epoch++
	c.applied++
	end := c.notLeaderLocked()
	for s := range c.streams {
		s.endLocked(end)
	}
	for sub := range c.subs {
		sub.endLocked(end)
	}
	c.notifyLocked()
}

// SetForwarding turns forwarding on or off (see WithForwarding).
func (c *Cluster) SetForwarding(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forward = on
}

// notLeaderLocked is the answer of a follower for a call that needs the
// leader.
func (c *Cluster) notLeaderLocked() error {
	if c.leader < 0 {
		return apierr.NoLeader()
	}
	l := c.nodes[c.leader]
	return apierr.NotLeader(l.id, l.advertise)
}

// Changed returns a channel closed at the next change of the cluster's
// state (a call arriving, a task changing, a stream message, ...). Read
// the state, then wait on the channel taken before reading, to wait for a
// condition without sleeping.
func (c *Cluster) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// WaitFor blocks until cond returns true or ctx ends; cond is called again
// after every change of the cluster's state. It must not block.
func (c *Cluster) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		ch := c.Changed()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitUntil blocks until cond returns true, and fails the test (from the
// test's goroutine) if it does not within the wait timeout. what names the
// condition in the failure. Clusters made by New have no test to fail:
// WaitUntil panics then.
func (c *Cluster) WaitUntil(what string, cond func() bool) {
	if c.t != nil {
		c.t.Helper()
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.waitTimeout)
	defer cancel()
	if err := c.WaitFor(ctx, cond); err != nil {
		msg := fmt.Sprintf("timed out after %s waiting until %s", c.cfg.waitTimeout, what)
		if c.t == nil {
			panic("clienttest: " + msg)
		}
		c.t.Fatal(msg)
	}
}

// notifyLocked wakes WaitFor callers and the timer loop.
func (c *Cluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// now reads the cluster's clock.
func (c *Cluster) now() time.Time { return c.cfg.clock() }

// Refresh applies the changes the clock has made due (tasks becoming
// ready, retries, deadlines, lost leases, attempt timeouts, schedule
// fires). The cluster does this by itself on every call and by timer; call
// it after moving a clock given with WithClock.
func (c *Cluster) Refresh() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.advanceLocked() {
		c.settleLocked()
	}
}

// timerLoop applies time-driven changes when they come due, until Close.
func (c *Cluster) timerLoop() {
	defer close(c.loopDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if c.advanceLocked() {
			c.settleLocked()
		}
		due := c.nextDueLocked()
		c.mu.Unlock()
		var tc <-chan time.Time
		if !due.IsZero() {
			// A clock that does not move with real time is re-read at least
			// every millisecond while something is due.
			timer.Reset(max(due.Sub(c.now()), time.Millisecond))
			tc = timer.C
		}
		select {
		case <-tc:
		case <-c.wake:
		case <-c.done:
			return
		}
	}
}

// ID returns the node's id.
func (n *Node) ID() string { return n.id }

// Addr returns the node's HTTP API address.
func (n *Node) Addr() string { return n.addr }

// Advertise changes the address the other nodes give for this one (in
// not_leader answers, forwarded answers and Members), by default Addr. An
// address nobody listens on makes a leader that clients cannot reach.
func (n *Node) Advertise(addr string) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.advertise = addr
}

// Requests returns how many requests of procedure (for instance
// cronoqv1connect.TaskServiceSubmitProcedure) reached the node, whatever
// their answer.
func (n *Node) Requests(procedure string) int {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.requests[procedure]
}

// RemoteHosts returns the source IP of every request the node got, in
// order.
func (n *Node) RemoteHosts() []string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	var out []string
	for _, r := range n.remotes {
		if h, _, err := net.SplitHostPort(r); err == nil {
			out = append(out, h)
		}
	}
	return out
}

// DropConns closes every connection the node accepted, as a network
// failure would: the calls in progress on them fail.
func (n *Node) DropConns() { n.ln.closeAll() }

// SetMember changes what Members says about the node: fn edits its record
// (by default name, status "alive" and HTTP address).
func (n *Node) SetMember(fn func(m *cronoqv1.Member)) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	m := n.memberLocked()
	fn(m)
	n.member = m
}

func (n *Node) memberLocked() *cronoqv1.Member {
	if n.member != nil {
		return proto.Clone(n.member).(*cronoqv1.Member)
	}
	return &cronoqv1.Member{Name: n.id, Status: "alive", HttpAddr: n.advertise}
}

// SetHealth sets the status and reasons the node's Health answers with
// (by default "ok" and none).
func (n *Node) SetHealth(status string, reasons ...string) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.healthStatus, n.healthReasons = status, reasons
}

// SetLastContact sets the time since the node last heard from the leader,
// as its stale reads report it (negative: never).
func (n *Node) SetLastContact(d time.Duration) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.lastContact = d
}

// trackingListener remembers the connections it accepted, so that they can
// be dropped.
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
