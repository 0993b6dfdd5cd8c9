package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/jepsen/history"
)

// Grant is a lease a worker received.
type Grant struct {
	TaskID   string
	Key      string
	Pool     string
	Payload  string
	Token    uint64
	Attempt  int
	Schedule string
	Slot     int64
	// Workflow and Step name the task's workflow and step; Policy is its
	// dependency policy and Deps its dependencies as the grant reported
	// them.
	Workflow string
	Step     string
	Policy   string
	Deps     []history.DepState
	// OrderingKey is the task's ordering key (its lane).
	OrderingKey string
	Received    time.Time
}

// ChildStep is a task a successful completion spawns.
type ChildStep struct {
	Name      string
	Payload   string
	DependsOn []string
}

// Behavior is what a worker does with one grant.
type Behavior struct {
	// Exec is how long the attempt "runs" before its completion is sent.
	Exec time.Duration
	// Outlive: never heartbeat this lease and run past the lease's TTL.
	Outlive bool
	// Outcome: "success", "retryable" or "permanent".
	Outcome string
	// Children and Then are spawned with a successful completion (Then
	// depends on every child).
	Children []ChildStep
	Then     *ChildStep
}

// WorkerConfig configures a harness worker.
type WorkerConfig struct {
	Name  string // process name, also the worker id
	IP    string
	Pool  string
	Slots int
	// Choose decides the behaviour for a grant.
	Choose func(r *rand.Rand, g Grant) Behavior
	// OnGrant, when set, sees every grant (after it is recorded).
	OnGrant func(g Grant)
	// BeforeComplete, when set, runs just before a completion is first
	// sent (a racing cancel starts there).
	BeforeComplete func(g Grant, b Behavior)
}

// Worker is a harness worker speaking the worker stream protocol directly,
// so that it controls lease timing: it can stop heartbeating a lease, pause
// as a whole (zombie) and still complete late, and it records every grant
// and every completion with its acknowledgement.
type Worker struct {
	cfg   WorkerConfig
	env   *Env
	httpc *http.Client

	rmu sync.Mutex
	rng *rand.Rand

	zombieUntil atomic.Int64 // unix ns
	allowed     atomic.Pointer[[]string]
	slow        atomic.Int64 // ns: when set, every attempt runs this long (heartbeated)
	idle        atomic.Bool  // when set, the worker asks for no new tasks

	mu        sync.Mutex
	leases    map[uint64]*wlease
	sess      *session
	sessCh    chan struct{} // closed and replaced when sess changes
	free      int
	waiters   map[uint64]chan ackResult
	preferred string
	next      int
	pollCh    chan int
	kick      chan struct{}

	tasks sync.WaitGroup
}

type wlease struct {
	g    Grant
	noHB bool
	lost bool
}

type ackResult struct {
	code string
	msg  string
}

type session struct {
	addr     string
	node     string
	out      chan *cronoqv1.WorkerMessage
	done     chan struct{}
	welcomed bool
}

func (s *session) send(msg *cronoqv1.WorkerMessage) bool {
	select {
	case s.out <- msg:
		return true
	case <-s.done:
		return false
	}
}

// NewWorker returns a worker; Run starts it.
func NewWorker(env *Env, cfg WorkerConfig) *Worker {
	w := &Worker{
		cfg:     cfg,
		env:     env,
		httpc:   env.httpClient(cfg.IP),
		rng:     env.Rand(),
		leases:  make(map[uint64]*wlease),
		waiters: make(map[uint64]chan ackResult),
		sessCh:  make(chan struct{}),
		free:    cfg.Slots,
		pollCh:  make(chan int, 1024),
		kick:    make(chan struct{}, 1),
	}
	return w
}

// Name is the worker's process name.
func (w *Worker) Name() string { return w.cfg.Name }

// IP is the worker's source address.
func (w *Worker) IP() string { return w.cfg.IP }

// Zombie pauses the worker for d: it stops reading its stream, sending
// heartbeats, polls and completions; running attempts go on and complete
// late, once the pause ends.
func (w *Worker) Zombie(d time.Duration) {
	w.zombieUntil.Store(time.Now().Add(d).UnixNano())
}

// SetSlow makes every new attempt run for d, heartbeated, and succeed
// (0 restores the normal mix).
func (w *Worker) SetSlow(d time.Duration) { w.slow.Store(int64(d)) }

// SetIdle stops (true) or resumes (false) asking for new tasks; attempts
// in hand go on.
//
// Going idle also reconnects the worker's stream, which withdraws the
// capacity it offered earlier (the node holds an offer open until tasks
// come).
func (w *Worker) SetIdle(idle bool) {
	w.idle.Store(idle)
	if idle {
		select {
		case w.kick <- struct{}{}:
		default:
		}
		return
	}
	select {
	case w.pollCh <- 0:
	default:
	}
}

// Free returns how many of the worker's slots hold no attempt.
func (w *Worker) Free() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.free
}

// Slots is the worker's capacity.
func (w *Worker) Slots() int { return w.cfg.Slots }

var errKicked = errors.New("stream closed by the harness")

// Restrict limits the nodes the worker connects to (nil: any), as a worker
// that can reach only some of them would.
func (w *Worker) Restrict(addrs []string) {
	if addrs == nil {
		w.allowed.Store(nil)
		return
	}
	a := append([]string(nil), addrs...)
	w.allowed.Store(&a)
}

func (w *Worker) zombieWait(ctx context.Context) bool {
	for {
		until := w.zombieUntil.Load()
		d := time.Until(time.Unix(0, until))
		if d <= 0 {
			return ctx.Err() == nil
		}
		if !sleepCtx(ctx, d) {
			return false
		}
	}
}

func (w *Worker) zombie() bool { return time.Now().UnixNano() < w.zombieUntil.Load() }

func (w *Worker) pick() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var allowed []string
	if p := w.allowed.Load(); p != nil {
		allowed = *p
	} else {
		for _, n := range w.env.Nodes {
			allowed = append(allowed, n.Addr)
		}
	}
	if w.preferred != "" {
		for _, a := range allowed {
			if a == w.preferred {
				return a
			}
		}
	}
	w.preferred = ""
	if len(allowed) == 0 {
		return ""
	}
	w.next++
	return allowed[w.next%len(allowed)]
}

// Run works until ctx ends, then waits for the attempts in hand.
func (w *Worker) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if !w.zombieWait(ctx) {
			break
		}
		addr := w.pick()
		if addr == "" {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		err := w.session(ctx, addr)
		w.mu.Lock()
		if h := leaderHint(err); h != "" && h != addr {
			w.preferred = h
		} else {
			w.preferred = ""
		}
		w.mu.Unlock()
		w.rmu.Lock()
		d := time.Duration(50+w.rng.IntN(150)) * time.Millisecond
		w.rmu.Unlock()
		sleepCtx(ctx, d)
	}
	w.tasks.Wait()
}

func (w *Worker) setSession(s *session) {
	w.mu.Lock()
	w.sess = s
	close(w.sessCh)
	w.sessCh = make(chan struct{})
	w.mu.Unlock()
}

// currentSession waits up to d for a welcomed session.
func (w *Worker) currentSession(ctx context.Context, d time.Duration) *session {
	deadline := time.Now().Add(d)
	for {
		w.mu.Lock()
		s, ch := w.sess, w.sessCh
		w.mu.Unlock()
		if s != nil {
			return s
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		t.Stop()
	}
}

type recvEvent struct {
	msg *cronoqv1.ServerMessage
	err error
}

var errNoWelcome = errors.New("no welcome within 3s")

func (w *Worker) session(ctx context.Context, addr string) error {
	sctx, cancel := context.WithCancel(ctx)
	node, _ := w.env.NodeByAddr(addr)
	s := &session{addr: addr, node: node.ID, out: make(chan *cronoqv1.WorkerMessage, 256), done: make(chan struct{})}
	stream := cronoqv1connect.NewWorkerServiceClient(w.httpc, "http://"+addr).Connect(sctx)
	var wg sync.WaitGroup
	defer func() {
		w.mu.Lock()
		if w.sess == s {
			w.sess = nil
		}
		w.mu.Unlock()
		close(s.done)
		cancel()
		wg.Wait()
	}()
	sendErr := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer func() { _ = stream.CloseRequest() }()
		for {
			select {
			case msg := <-s.out:
				if err := stream.Send(msg); err != nil {
					sendErr <- err
					cancel()
					return
				}
			case <-sctx.Done():
				return
			}
		}
	}()
	in := make(chan recvEvent, 64)
	go func() {
		defer wg.Done()
		defer func() { _ = stream.CloseResponse() }()
		for {
			msg, err := stream.Receive()
			select {
			case in <- recvEvent{msg, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	s.out <- &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: w.cfg.Name, Pool: w.cfg.Pool}}}

	welcome := time.NewTimer(3 * time.Second)
	defer welcome.Stop()
	hb := time.NewTicker(max(w.env.TTL/3, 100*time.Millisecond))
	defer hb.Stop()
	for {
		select {
		case <-sctx.Done():
			select {
			case err := <-sendErr:
				return err
			default:
			}
			return sctx.Err()
		case <-welcome.C:
			if !s.welcomed {
				return errNoWelcome
			}
		case ev := <-in:
			if !w.zombieWait(sctx) {
				return sctx.Err()
			}
			if ev.err != nil {
				return ev.err
			}
			w.handle(sctx, s, ev.msg)
		case <-hb.C:
			if s.welcomed && !w.zombie() {
				w.heartbeat(s)
			}
		case <-w.kick:
			return errKicked
		case n := <-w.pollCh:
			if n == 0 {
				// Resumed from idle: offer every free slot.
				w.mu.Lock()
				n = w.free
				w.mu.Unlock()
			}
			if s.welcomed && !w.zombie() && !w.idle.Load() && n > 0 {
				s.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: int32(n)}}})
			}
		}
	}
}

func (w *Worker) heartbeat(s *session) {
	w.mu.Lock()
	var ls []uint64
	for tok, l := range w.leases {
		if !l.noHB && !l.lost {
			ls = append(ls, tok)
		}
	}
	w.mu.Unlock()
	if len(ls) > 0 {
		s.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: ls}}})
	}
}

func (w *Worker) handle(ctx context.Context, s *session, msg *cronoqv1.ServerMessage) {
	switch m := msg.GetMsg().(type) {
	case *cronoqv1.ServerMessage_Welcome:
		s.welcomed = true
		w.setSession(s)
		w.mu.Lock()
		free := w.free
		w.mu.Unlock()
		// Drain stale poll requests: this offer covers them.
		for len(w.pollCh) > 0 {
			<-w.pollCh
		}
		if free > 0 && !w.idle.Load() {
			s.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: int32(free)}}})
		}
		w.heartbeat(s)
	case *cronoqv1.ServerMessage_Grants:
		for _, g := range m.Grants.GetGrants() {
			w.grant(ctx, s, g)
		}
	case *cronoqv1.ServerMessage_HeartbeatAck:
		for _, r := range m.HeartbeatAck.GetResults() {
			if r.GetCode() == "" && r.GetError() == "" {
				continue
			}
			w.mu.Lock()
			l := w.leases[r.GetLease()]
			first := l != nil && !l.lost
			if first {
				l.lost = true
			}
			w.mu.Unlock()
			if first {
				w.env.Rec.Add(history.Op{Process: w.cfg.Name, Type: history.OK, F: "lease-lost", Node: s.node,
					Value: &history.Value{Pool: w.cfg.Pool, ID: l.g.TaskID, Token: r.GetLease(), Code: r.GetCode(), Detail: r.GetError()}})
			}
		}
	case *cronoqv1.ServerMessage_CompleteAck:
		for _, r := range m.CompleteAck.GetResults() {
			w.mu.Lock()
			ch := w.waiters[r.GetLease()]
			delete(w.waiters, r.GetLease())
			w.mu.Unlock()
			if ch != nil {
				ch <- ackResult{code: r.GetCode(), msg: r.GetError()}
			}
		}
	case *cronoqv1.ServerMessage_Abort:
		w.mu.Lock()
		l := w.leases[m.Abort.GetLease()]
		w.mu.Unlock()
		v := &history.Value{Pool: w.cfg.Pool, Token: m.Abort.GetLease(), Detail: m.Abort.GetReason()}
		if l != nil {
			v.ID = l.g.TaskID
		}
		w.env.Rec.Add(history.Op{Process: w.cfg.Name, Type: history.OK, F: "abort", Node: s.node, Value: v})
	}
}

func (w *Worker) grant(ctx context.Context, s *session, pg *cronoqv1.Grant) {
	t := pg.GetTask()
	g := Grant{
		TaskID: t.GetId(), Key: t.GetKey(), Pool: t.GetTemplate().GetPool(), Payload: string(t.GetTemplate().GetPayload()),
		Token: pg.GetLease(), Attempt: int(pg.GetAttempt()), Schedule: t.GetSchedule(),
		Workflow: t.GetWorkflow(), Step: t.GetStep(), OrderingKey: t.GetTemplate().GetOrderingKey(),
		Received: time.Now(),
	}
	if g.Pool == "" {
		// The node could not read the task back (it sends the id alone).
		g.Pool = w.cfg.Pool
	}
	if slot := t.GetSlot(); slot != nil {
		g.Slot = slot.AsTime().UnixNano()
	}
	if len(t.GetDependsOn()) > 0 {
		g.Policy = PolicyName(t.GetDependencyPolicy())
		for _, d := range pg.GetDependencies() {
			g.Deps = append(g.Deps, history.DepState{ID: d.GetId(), Step: d.GetStep(), Status: StatusName(d.GetStatus())})
		}
	}
	w.env.Rec.Add(history.Op{Process: w.cfg.Name, Type: history.OK, F: "grant", Node: s.node, Value: &history.Value{
		Pool: g.Pool, ID: g.TaskID, Key: g.Key, Payload: g.Payload, Token: g.Token, Attempt: g.Attempt,
		Schedule: g.Schedule, Slot: g.Slot, Worker: w.cfg.Name,
		Workflow: g.Workflow, Step: g.Step, Policy: g.Policy, Deps: g.Deps, OrderingKey: g.OrderingKey,
	}})
	w.mu.Lock()
	if _, dup := w.leases[g.Token]; dup || g.Token == 0 {
		w.mu.Unlock()
		return
	}
	w.rmu.Lock()
	b := w.cfg.Choose(w.rng, g)
	w.rmu.Unlock()
	if slow := time.Duration(w.slow.Load()); slow > 0 {
		b = Behavior{Exec: slow, Outcome: "success"}
	}
	w.leases[g.Token] = &wlease{g: g, noHB: b.Outlive}
	w.free--
	w.mu.Unlock()
	if w.cfg.OnGrant != nil {
		w.cfg.OnGrant(g)
	}
	w.tasks.Add(1)
	go func() {
		defer w.tasks.Done()
		w.attempt(ctx, g, b)
	}()
}

// attempt "runs" one grant and delivers its completion.
func (w *Worker) attempt(sessCtx context.Context, g Grant, b Behavior) {
	// The attempt outlives the session it came from.
	ctx := context.WithoutCancel(sessCtx)
	defer func() {
		w.mu.Lock()
		delete(w.leases, g.Token)
		w.free++
		w.mu.Unlock()
		select {
		case w.pollCh <- 1:
		default:
		}
	}()
	time.Sleep(b.Exec)
	w.zombieWait(ctx)
	if w.cfg.BeforeComplete != nil {
		w.cfg.BeforeComplete(g, b)
	}
	comp := &cronoqv1.Completion{Lease: g.Token}
	v := &history.Value{Pool: g.Pool, ID: g.TaskID, Key: g.Key, Token: g.Token, Attempt: g.Attempt, Outcome: b.Outcome, Worker: w.cfg.Name,
		Workflow: g.Workflow, Step: g.Step, OrderingKey: g.OrderingKey}
	switch b.Outcome {
	case "retryable":
		comp.Outcome = cronoqv1.OutcomeKind_OUTCOME_RETRYABLE
		comp.Message = ErrorFor(g.Token)
		comp.RetryAfter = durationpb.New(200 * time.Millisecond)
	case "permanent":
		comp.Outcome = cronoqv1.OutcomeKind_OUTCOME_PERMANENT
		comp.Message = ErrorFor(g.Token)
	default:
		comp.Outcome = cronoqv1.OutcomeKind_OUTCOME_SUCCESS
		comp.Output = []byte(ResultFor(g.Payload, g.Token))
		v.Output = string(comp.Output)
		for _, c := range b.Children {
			comp.Children = append(comp.Children, childProto(g.Pool, c))
			v.Children = append(v.Children, c.Name)
		}
		if b.Then != nil {
			comp.Then = childProto(g.Pool, *b.Then)
			v.Then = b.Then.Name
		}
	}
	proc := w.cfg.Name + "/" + strconv.FormatUint(g.Token, 10)
	for try := 0; try < 3; try++ {
		w.zombieWait(ctx)
		s := w.currentSession(ctx, 3*time.Second)
		if s == nil {
			continue
		}
		ch := make(chan ackResult, 1)
		w.mu.Lock()
		w.waiters[g.Token] = ch
		w.mu.Unlock()
		done := w.env.Rec.Invoke(proc, "complete", s.node, v)
		msg := &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: []*cronoqv1.Completion{comp}}}}
		if !s.send(msg) {
			done(history.Info, nil, errors.New("stream lost before the completion was sent"))
			continue
		}
		t := time.NewTimer(4 * time.Second)
		var res ackResult
		got := false
		select {
		case res = <-ch:
			got = true
		case <-s.done:
		case <-t.C:
		}
		t.Stop()
		w.mu.Lock()
		delete(w.waiters, g.Token)
		w.mu.Unlock()
		if !got {
			// The stream may have delivered the completion before breaking.
			select {
			case res = <-ch:
				got = true
			default:
			}
		}
		switch {
		case !got:
			done(history.Info, nil, errors.New("no acknowledgement (stream lost or timeout)"))
			continue
		case res.code == "" && res.msg == "":
			done(history.OK, nil, nil)
			return
		case res.code == "stale_lease" || res.code == "not_found" || res.code == "invalid":
			done(history.Fail, &history.Value{Code: res.code}, fmt.Errorf("%s: %s", res.code, res.msg))
			return
		default:
			done(history.Info, &history.Value{Code: res.code}, fmt.Errorf("%s: %s", res.code, res.msg))
			if res.code == "not_leader" || res.code == "no_leader" || res.code == "shutting_down" {
				// Nothing was done: try again on the next stream.
				sleepCtx(ctx, 300*time.Millisecond)
			}
			continue
		}
	}
}

// QueueBehavior is the queue workers' mix: 0-500ms attempts, 5% outlive
// the lease, 10% retryable failures.
func QueueBehavior(ttl time.Duration) func(r *rand.Rand, g Grant) Behavior {
	return func(r *rand.Rand, g Grant) Behavior {
		b := Behavior{Exec: time.Duration(r.IntN(500)) * time.Millisecond, Outcome: "success"}
		x := r.Float64()
		switch {
		case x < 0.05:
			b.Outlive = true
			b.Exec = ttl + 1500*time.Millisecond + time.Duration(r.IntN(1000))*time.Millisecond
		case x < 0.15:
			b.Outcome = "retryable"
		}
		return b
	}
}

// childProto is the step of a spawned task in pool.
func childProto(pool string, c ChildStep) *cronoqv1.WorkflowStep {
	return &cronoqv1.WorkflowStep{
		Name: c.Name,
		Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{
			Pool: pool, Kind: "wf-child", Payload: []byte(c.Payload), MaxAttempts: WorkflowMaxAttempts,
		}},
		DependsOn: c.DependsOn,
	}
}

// StatusName is the SDK's name of a task status.
func StatusName(s cronoqv1.Status) string {
	if s == cronoqv1.Status_STATUS_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_"))
}

// PolicyName is the SDK's name of a dependency policy.
func PolicyName(p cronoqv1.DependencyPolicy) string {
	if p == cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE {
		return "done"
	}
	return "succeeded"
}
