package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// Worker defaults.
const (
	DefaultConcurrency     = 4
	DefaultCompletionBatch = 64
	// defaultWindow is the heartbeat window assumed until a node's Welcome
	// says otherwise.
	defaultWindow = 10 * time.Second
	// maxBatchBytes caps the outputs sharing one Complete message; a larger
	// output goes alone, whole (the node enforces the output limit).
	maxBatchBytes = 1 << 20
	// bigOutput is the size above which an output refused with a
	// message-size error is replaced by a permanent failure.
	bigOutput = 64 << 10
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Pool the worker takes tasks from. Required.
	Pool string
	// Labels of the capacity it offers (tasks with labels run only where
	// the labels match).
	Labels map[string]string
	// Concurrency is the number of attempts run at once (default 4).
	Concurrency int
	// Handlers by task kind. Required. A task of a kind without a handler
	// fails retryably (another worker of the pool may have one).
	Handlers map[string]Handler
	// ID names the worker to the cluster (default host-pid-random).
	ID string
	// Logger (default: the Client's).
	Logger hclog.Logger
	// HeartbeatEvery is the heartbeat period (default: a third of the
	// heartbeat window the node announces).
	HeartbeatEvery time.Duration
	// CompletionBatch is the most completions sent in one message
	// (default 64).
	CompletionBatch int
	// CompletionDelay is how long a completion may wait for others to share
	// its message. By default (0) it waits for none: it goes out as soon as
	// the stream can take it, and the completions that finish while the
	// stream is busy share the next message.
	CompletionDelay time.Duration
	// TracerProvider makes the spans of the attempts of traced tasks
	// (those whose tags carry a traceparent): one span per attempt,
	// "cronoq.attempt", a child of the node's dispatch span (else of the
	// task's traceparent), around the handler, whose ctx carries it; the
	// completion carries its context back to the node. Default: the
	// global provider of go.opentelemetry.io/otel, which makes no spans
	// until the program sets one.
	TracerProvider trace.TracerProvider
}

// withDefaults returns a copy of cfg with defaults filled in.
func (cfg WorkerConfig) withDefaults(c *Client) WorkerConfig {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "worker"
		}
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if cfg.Logger == nil {
		cfg.Logger = c.log
	}
	if cfg.CompletionBatch == 0 {
		cfg.CompletionBatch = DefaultCompletionBatch
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	cfg.Handlers = maps.Clone(cfg.Handlers)
	cfg.Labels = maps.Clone(cfg.Labels)
	return cfg
}

func (cfg WorkerConfig) validate() error {
	switch {
	case cfg.Pool == "":
		return errors.New("field Pool is required")
	case len(cfg.Handlers) == 0:
		return errors.New("field Handlers must name at least one kind")
	case cfg.Concurrency < 0 || cfg.Concurrency > 1<<20:
		return fmt.Errorf("field Concurrency: %d is out of range", cfg.Concurrency)
	case cfg.HeartbeatEvery < 0:
		return errors.New("field HeartbeatEvery must not be negative")
	case cfg.CompletionBatch < 0:
		return errors.New("field CompletionBatch must not be negative")
	case cfg.CompletionDelay < 0:
		return errors.New("field CompletionDelay must not be negative")
	}
	for kind, h := range cfg.Handlers {
		if h == nil {
			return fmt.Errorf("field Handlers[%q] is nil", kind)
		}
	}
	return nil
}

// Worker takes tasks of one pool from the cluster's leader and runs them
// with its handlers. Create it with Client.NewWorker; run it with Start and
// Stop (Done and Err tell when and why it stopped), or with Run.
type Worker struct {
	c   *Client
	cfg WorkerConfig
	log hclog.Logger

	mu      sync.Mutex
	running bool
	stop    context.CancelFunc // ends the current run
	done    chan struct{}      // closed when the current run has ended
	err     error              // why the last run ended
}

// NewWorker returns a Worker for cfg, which it copies.
func (c *Client) NewWorker(cfg WorkerConfig) (*Worker, error) {
	cfg = cfg.withDefaults(c)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("creating worker: %w", err)
	}
	return &Worker{c: c, cfg: cfg, log: cfg.Logger.Named("worker").With("worker", cfg.ID, "pool", cfg.Pool)}, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Start connects to the leader and runs tasks until Stop is called or ctx
// ends. Then the worker stops asking for tasks, lets running ones finish
// (their ctx is not cancelled) and delivers their completions, and is done
// once nothing is left in hand. Results that can no longer be delivered are
// dropped once their lease is lost (no acknowledged heartbeat for one
// heartbeat window). A Worker runs once at a time; it may start again once
// done.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return errors.New("starting worker: already running")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	w.running, w.stop, w.done, w.err = true, stop, make(chan struct{}), nil
	done := w.done
	go func() {
		err := newWorkerRun(w).run(runCtx)
		stop()
		w.mu.Lock()
		w.running, w.err = false, err
		w.mu.Unlock()
		close(done)
	}()
	return nil
}

// Stop stops the worker as described at Start and waits until it is done,
// or returns ctx's error if ctx ends first (the worker then finishes
// stopping on its own). It is idempotent, and does nothing to a worker that
// is not running.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.mu.Unlock()
	if done == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping worker: %w", ctx.Err())
	}
}

// Done is closed once the current (or last) run has ended; nil before the
// first Start.
func (w *Worker) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// Err returns why the last run ended: nil after a clean stop, the error
// that ended it otherwise; nil while it runs.
func (w *Worker) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Run is Start followed by waiting until the worker is done: it runs tasks
// until ctx ends, stops as Start describes, joins every goroutine of the
// run, and returns Err.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("running worker: %w", err)
	}
	<-w.Done()
	return w.Err()
}

var (
	errAborted        = errors.New("attempt aborted by the cluster")
	errLeaseLost      = errors.New("lease lost: no acknowledged heartbeat within the heartbeat window")
	errAttemptTimeout = errors.New("attempt timed out")
	errStalled        = errors.New("stream stalled: no acknowledgement within the heartbeat window")
	errNoWelcome      = errors.New("no welcome from node")
)

// lease is one attempt in the worker's hands, from its grant until its
// completion is acknowledged (or its result is dropped).
type lease struct {
	id      uint64
	job     *Job
	cancel  context.CancelCauseFunc
	running bool // the handler has not returned
	dropped bool // aborted or lost: the result is dropped
	// lastAck is the send time of the last acknowledged heartbeat (the
	// grant's arrival before any).
	lastAck    time.Time
	hbInFlight bool
	hbSentAt   time.Time
	// done is the completion to deliver, once the handler returned.
	done         *cronoqv1.Completion
	compInFlight bool
	compSentAt   time.Time
}

// live reports whether the lease is still to be heartbeated.
func (l *lease) live() bool { return !l.dropped }

// unsent reports whether the lease has a completion waiting to be sent.
func (l *lease) unsent() bool { return l.done != nil && !l.compInFlight && !l.dropped }

// workerConn is one WorkerService.Connect stream.
type workerConn struct {
	gen      int
	addr     string
	cancel   context.CancelFunc
	out      chan *cronoqv1.WorkerMessage
	wg       sync.WaitGroup
	hello    bool // Hello handed to the sender
	welcomed bool
}

type connEvent struct {
	gen int
	msg *cronoqv1.ServerMessage
	err error
	// leader is the leader's address a node that relays the stream named
	// (with the first message).
	leader string
}

type taskResult struct {
	lease  uint64
	output []byte
	err    error
	span   trace.Span // the attempt's, when traced
}

// workerRun is the state of one Run; only the Run goroutine touches it.
type workerRun struct {
	w      *Worker
	cfg    WorkerConfig
	log    hclog.Logger
	tracer trace.Tracer

	leases   map[uint64]*lease
	runningN int
	stopping bool
	fatal    error

	conn     *workerConn
	gen      int
	failures int
	lastHint string
	// downSince is when the worker last lost (or first sought) a stream
	// and has had none welcomed since; zero while connected. lastWarn
	// rate-limits the warnings of warnDown.
	downSince time.Time
	lastWarn  time.Time
	offered   int // slots announced on the current stream, not yet granted
	hbDue     map[uint64]bool
	// unsentQ holds, oldest first, the leases whose completion waits to be
	// sent; entries whose lease no longer waits (dropped, or gone) are
	// skipped where they are met.
	unsentQ  []uint64
	flushNow bool
	window   time.Duration
	hbEvery  time.Duration

	// base is the parent of attempt contexts: the Run ctx's values
	// without its cancellation.
	base    context.Context
	events  chan connEvent
	results chan taskResult
	tasks   sync.WaitGroup

	ticker     *time.Ticker
	flushT     *time.Timer
	flushArmed bool
	reconnectT *time.Timer
	welcomeT   *time.Timer
}

func newWorkerRun(w *Worker) *workerRun {
	stopped := func() *time.Timer {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
	r := &workerRun{
		w:          w,
		cfg:        w.cfg,
		log:        w.log,
		tracer:     w.cfg.TracerProvider.Tracer(tracerName),
		leases:     make(map[uint64]*lease),
		hbDue:      make(map[uint64]bool),
		window:     defaultWindow,
		events:     make(chan connEvent),
		results:    make(chan taskResult),
		flushT:     stopped(),
		reconnectT: stopped(),
		welcomeT:   stopped(),
	}
	r.hbEvery = r.heartbeatPeriod()
	return r
}

func (r *workerRun) heartbeatPeriod() time.Duration {
	if r.cfg.HeartbeatEvery > 0 {
		return r.cfg.HeartbeatEvery
	}
	return max(r.window/3, time.Millisecond)
}

func (r *workerRun) run(ctx context.Context) error {
	// life outlives ctx: streams and handlers go on after a stop until
	// everything in hand is delivered.
	r.base = context.WithoutCancel(ctx)
	life, endLife := context.WithCancel(r.base)
	r.ticker = time.NewTicker(r.hbEvery)
	defer func() {
		r.closeConn()
		endLife()
		r.tasks.Wait()
		r.ticker.Stop()
		r.flushT.Stop()
		r.reconnectT.Stop()
		r.welcomeT.Stop()
	}()

	r.downSince = time.Now()
	r.connect(life)
	stop := ctx.Done()
	for {
		if r.stopping && r.runningN == 0 && len(r.leases) == 0 {
			r.log.Debug("stopped")
			return r.fatal
		}
		var out chan<- *cronoqv1.WorkerMessage
		next := r.nextMessage()
		if next != nil {
			out = r.conn.out
		}
		select {
		case <-stop:
			stop = nil
			r.stopping = true
			r.flushNow = r.hasUnsent()
			r.log.Debug("stopping: no more tasks taken", "running", r.runningN, "in_hand", len(r.leases))
		case ev := <-r.events:
			r.onConnEvent(ev)
		case res := <-r.results:
			r.onResult(res)
		case out <- next:
			r.sent(next)
		case now := <-r.ticker.C:
			r.onTick(now)
		case <-r.flushT.C:
			r.flushArmed = false
			r.flushNow = true
		case <-r.reconnectT.C:
			r.connect(life)
		case <-r.welcomeT.C:
			if r.conn != nil && !r.conn.welcomed {
				r.connFailed(errNoWelcome)
			}
		}
	}
}

// connect opens a stream to the preferred address (leader hint first).
func (r *workerRun) connect(life context.Context) {
	c := r.w.c
	addr, err := c.pick(false)
	if err != nil {
		r.abandon(fmt.Errorf("running worker: %w", err))
		return
	}
	r.gen++
	cctx, cancel := context.WithCancel(life)
	conn := &workerConn{gen: r.gen, addr: addr, cancel: cancel, out: make(chan *cronoqv1.WorkerMessage)}
	stream := c.endpointFor(addr).workers.Connect(cctx)
	conn.wg.Add(2)
	go func() {
		defer conn.wg.Done()
		defer func() { _ = stream.CloseRequest() }()
		for {
			select {
			case msg, ok := <-conn.out:
				if !ok {
					return
				}
				if err := stream.Send(msg); err != nil {
					// The receiver reports the stream's error.
					return
				}
			case <-cctx.Done():
				return
			}
		}
	}()
	go func() {
		defer conn.wg.Done()
		defer func() { _ = stream.CloseResponse() }()
		for first := true; ; first = false {
			msg, err := stream.Receive()
			ev := connEvent{gen: conn.gen, msg: msg, err: err}
			if first && err == nil {
				ev.leader = stream.ResponseHeader().Get(apierr.HeaderLeaderAddr)
			}
			select {
			case r.events <- ev:
			case <-cctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	r.conn = conn
	r.offered = 0
	r.welcomeT.Reset(c.opts.timeout)
	r.log.Debug("connecting", "addr", addr)
}

// closeConn ends the current stream and joins its goroutines.
func (r *workerRun) closeConn() {
	if r.conn == nil {
		return
	}
	r.conn.cancel()
	close(r.conn.out)
	r.conn.wg.Wait()
	r.conn = nil
	r.welcomeT.Stop()
}

// abandon gives up on delivering anything (the Client was closed): running
// attempts are cancelled and their results dropped.
func (r *workerRun) abandon(err error) {
	if r.fatal == nil {
		r.fatal = err
	}
	r.stopping = true
	for _, l := range r.sortedLeases() {
		r.lose(l, err)
	}
}

// connFailed handles the loss of the current stream: everything in flight
// on it is to be sent again on the next one.
func (r *workerRun) connFailed(err error) {
	if r.conn == nil {
		return
	}
	addr, welcomed := r.conn.addr, r.conn.welcomed
	err = decodeError(err)
	hint := ""
	var ae *APIError
	if errors.As(err, &ae) && ae.Kind == apierr.KindNotLeader {
		hint = normalizeAddr(ae.LeaderAddr)
	}
	// On the worker stream, resource exhausted is the node refusing a
	// message larger than it reads.
	tooBig := connect.CodeOf(err) == connect.CodeResourceExhausted
	r.closeConn()
	var resend []uint64
	for _, l := range r.leases {
		if l.compInFlight {
			resend = append(resend, l.id)
		}
		if l.compInFlight && tooBig && completionSize(l.done) > bigOutput {
			what := fmt.Sprintf("output of %d bytes", len(l.done.GetOutput()))
			if spawns(l.done) {
				what = fmt.Sprintf("completion of %d bytes (output and children)", proto.Size(l.done))
			}
			l.done = &cronoqv1.Completion{
				Lease:   l.id,
				Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT,
				Message: fmt.Sprintf("%s refused by the node: %v", what, err),
			}
		}
		l.hbInFlight = false
		l.compInFlight = false
	}
	// Completions that were in flight are older than the ones waiting:
	// they go first on the next stream.
	slices.Sort(resend)
	r.unsentQ = append(resend, r.unsentQ...)
	clear(r.hbDue)
	r.offered = 0
	// An address that did not answer is not followed again as a leader
	// hint until it answers (a relaying node names the leader).
	r.w.c.failed(addr, hint, !answered(err))
	if !welcomed {
		r.w.c.noteAttempt(addr, err)
	}
	r.failures++
	if r.downSince.IsZero() {
		r.downSince = time.Now()
	}
	var wait time.Duration
	if hint == "" || hint == r.lastHint {
		wait = r.w.c.backoff(r.failures)
	}
	wait, _ = r.w.c.checkReach(wait, false)
	if r.lastWarn.IsZero() {
		// Be back in time for the first warning.
		wait = max(min(wait, time.Until(r.downSince.Add(warnAfter))), 0)
	}
	r.lastHint = hint
	r.log.Debug("stream lost, reconnecting", "addr", addr, "error", err, "leader_hint", hint, "in", wait)
	r.warnDown(addr, err)
	r.reconnectT.Reset(wait)
}

func (r *workerRun) onConnEvent(ev connEvent) {
	if r.conn == nil || ev.gen != r.conn.gen {
		return
	}
	if ev.err != nil {
		r.connFailed(ev.err)
		return
	}
	switch m := ev.msg.GetMsg().(type) {
	case *cronoqv1.ServerMessage_Welcome:
		r.onWelcome(m.Welcome, ev.leader)
	case *cronoqv1.ServerMessage_Grants:
		for _, g := range m.Grants.GetGrants() {
			r.onGrant(g)
		}
	case *cronoqv1.ServerMessage_HeartbeatAck:
		r.onHeartbeatAck(m.HeartbeatAck)
	case *cronoqv1.ServerMessage_CompleteAck:
		r.onCompleteAck(m.CompleteAck)
	case *cronoqv1.ServerMessage_Abort:
		if l := r.leases[m.Abort.GetLease()]; l != nil {
			r.log.Debug("attempt aborted", "lease", l.id, "reason", m.Abort.GetReason())
			r.lose(l, fmt.Errorf("%w: %s", errAborted, m.Abort.GetReason()))
		}
	}
}

// Warnings that the worker cannot connect start once it has been without a
// stream for warnAfter, and repeat every warnEvery while that lasts.
const (
	warnAfter = 2 * time.Second
	warnEvery = 30 * time.Second
)

// warnDown logs at WARN, rate-limited, that the worker has been without a
// stream for a while, with the last error.
func (r *workerRun) warnDown(addr string, err error) {
	now := time.Now()
	down := now.Sub(r.downSince)
	if down < warnAfter || (!r.lastWarn.IsZero() && now.Sub(r.lastWarn) < warnEvery) {
		return
	}
	r.lastWarn = now
	msg := err.Error()
	if isDialError(err) {
		msg = DescribeDialError(err)
	}
	r.log.Warn("cannot connect to the cluster, still trying", "addr", addr, "error", msg,
		"for", down.Round(100*time.Millisecond))
}

// onWelcome starts using a stream the node at r.conn.addr welcomed; leader
// is the leader's address when that node relays the stream to it (the next
// stream goes straight there, saving the relay).
func (r *workerRun) onWelcome(wl *cronoqv1.Welcome, leader string) {
	r.conn.welcomed = true
	r.welcomeT.Stop()
	r.failures, r.lastHint = 0, ""
	r.w.c.succeededVia(r.conn.addr, leader)
	r.w.c.noteAttempt(r.conn.addr, nil)
	if w := wl.GetHeartbeatWindow().AsDuration(); w > 0 {
		r.window = w
	}
	if p := r.heartbeatPeriod(); p != r.hbEvery {
		r.hbEvery = p
		r.ticker.Reset(p)
	}
	// Keep every lease in hand alive on this stream at once, and re-send
	// what was never acknowledged.
	for id, l := range r.leases {
		if l.live() {
			r.hbDue[id] = true
		}
	}
	if r.hasUnsent() {
		r.flushNow = true
	}
	// A node that relays the stream names the leader; one that does not
	// leads itself.
	args := []any{"addr", r.conn.addr, "node", wl.GetNode(), "leader", "this node"}
	if leader = normalizeAddr(leader); leader != "" && leader != r.conn.addr {
		args = []any{"addr", r.conn.addr, "node", wl.GetNode(), "leader", leader, "relayed", true}
	}
	args = append(args, "epoch", wl.GetEpoch())
	if !r.lastWarn.IsZero() {
		args = append(args, "after", time.Since(r.downSince).Round(100*time.Millisecond))
	}
	r.downSince, r.lastWarn = time.Time{}, time.Time{}
	r.log.Info("connected", args...)
	r.log.Debug("connection settings", "window", r.window, "in_hand", len(r.leases))
}

func (r *workerRun) onGrant(g *cronoqv1.Grant) {
	r.offered = max(r.offered-1, 0)
	if _, ok := r.leases[g.GetLease()]; ok || g.GetLease() == 0 {
		return
	}
	job := jobFromGrant(g, r.w.c)
	l := &lease{id: g.GetLease(), job: job, running: true, lastAck: time.Now()}
	r.leases[l.id] = l
	r.runningN++

	tctx, cancel := context.WithCancelCause(r.base)
	l.cancel = cancel
	tctx, span := r.startAttempt(tctx, g, job)
	handler := r.cfg.Handlers[job.Task.Kind]
	r.tasks.Add(1)
	go func() {
		defer r.tasks.Done()
		out, err := r.execute(tctx, handler, job)
		if cause := context.Cause(tctx); cause != nil && span != nil {
			span.AddEvent("aborted", trace.WithAttributes(attribute.String("cronoq.abort.reason", cause.Error())))
		}
		endAttempt(span, err)
		cancel(nil)
		r.results <- taskResult{lease: job.Lease, output: out, err: err, span: span}
	}()
}

// execute runs the handler for one attempt, turning a panic into a failure
// and applying the task's per-attempt timeout.
func (r *workerRun) execute(ctx context.Context, h Handler, job *Job) (out []byte, err error) {
	if h == nil {
		return nil, fmt.Errorf("no handler for kind %q on worker %s", job.Task.Kind, r.cfg.ID)
	}
	if d := job.Task.Timeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, errAttemptTimeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			pe := &PanicError{Value: p, Stack: debug.Stack()}
			r.log.Error("handler panicked", "kind", job.Task.Kind, "task", job.Task.ID, "lease", job.Lease,
				"panic", p, "stack", string(pe.Stack))
			out, err = nil, pe
		}
	}()
	out, err = h.Work(ctx, job)
	if err != nil && errors.Is(context.Cause(ctx), errAttemptTimeout) {
		err = fmt.Errorf("attempt timed out after %s: %w", job.Task.Timeout, err)
	}
	return out, err
}

func (r *workerRun) onResult(res taskResult) {
	r.runningN--
	l := r.leases[res.lease]
	if l == nil {
		return
	}
	l.running = false
	if l.dropped {
		delete(r.leases, l.id)
		delete(r.hbDue, l.id)
		return
	}
	// The handler has returned (its result came through r.results): what
	// it spawned is settled.
	var children []Step
	var then *Step
	if l.job != nil {
		children, then = l.job.children, l.job.then
	}
	l.done = completionToProto(l.id, res.output, res.err, children, then)
	traceCompletion(res.span, l.done)
	r.unsentQ = append(r.unsentQ, l.id)
	if len(r.unsentQ) >= r.cfg.CompletionBatch || r.stopping || r.cfg.CompletionDelay == 0 {
		r.flushNow = true
	} else {
		r.armFlush(r.cfg.CompletionDelay)
	}
}

func (r *workerRun) armFlush(d time.Duration) {
	if r.flushArmed || r.flushNow {
		return
	}
	r.flushArmed = true
	r.flushT.Reset(d)
}

// hasUnsent reports whether a completion waits to be sent, dropping the
// entries at the front of the queue that no longer wait.
func (r *workerRun) hasUnsent() bool {
	for len(r.unsentQ) > 0 {
		if l := r.leases[r.unsentQ[0]]; l != nil && l.unsent() {
			return true
		}
		r.unsentQ = r.unsentQ[1:]
	}
	r.unsentQ = nil
	return false
}

// lose drops a lease: its attempt's ctx is cancelled and its result (or
// pending completion) dropped.
func (r *workerRun) lose(l *lease, cause error) {
	l.dropped = true
	if l.cancel != nil {
		l.cancel(cause)
	}
	delete(r.hbDue, l.id)
	if !l.running {
		delete(r.leases, l.id)
	}
}

func (r *workerRun) onHeartbeatAck(ack *cronoqv1.HeartbeatAck) {
	var retry error
	for _, res := range ack.GetResults() {
		l := r.leases[res.GetLease()]
		if l == nil || !l.hbInFlight {
			continue
		}
		l.hbInFlight = false
		err := itemError(res.GetCode(), res.GetError())
		switch {
		case err == nil:
			l.lastAck = l.hbSentAt
		case leaseGone(err):
			r.log.Debug("lease refused on heartbeat", "lease", l.id, "error", err)
			r.lose(l, fmt.Errorf("heartbeat refused: %w", err))
		case transient(err):
			retry = err
		}
	}
	if retry != nil {
		// The node cannot take heartbeats now (not the leader any more,
		// shutting down): move on to another.
		r.connFailed(fmt.Errorf("heartbeat not taken: %w", retry))
	}
}

func (r *workerRun) onCompleteAck(ack *cronoqv1.CompleteAck) {
	var retry error
	for _, res := range ack.GetResults() {
		l := r.leases[res.GetLease()]
		if l == nil || !l.compInFlight {
			continue
		}
		l.compInFlight = false
		err := itemError(res.GetCode(), res.GetError())
		switch {
		case err == nil:
			delete(r.leases, l.id)
		case transient(err):
			// Sent again on the next stream.
			retry = err
		case errors.Is(err, ErrInvalid) && spawns(l.done):
			// The node refused the children (a name the workflow has, a
			// dependency on no step) and kept the lease: the attempt fails
			// for good, rather than run again to spawn the same.
			r.log.Warn("children refused by the node, failing the attempt", "lease", l.id, "task", l.job.Task.ID, "error", err)
			l.done = &cronoqv1.Completion{
				Lease:   l.id,
				Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT,
				Message: "children refused: " + invalidMessage(err),
			}
			r.unsentQ = append(r.unsentQ, l.id)
			r.flushNow = true
		default:
			// stale_lease: another attempt owns the task (or it ended);
			// anything else is a definitive refusal.
			r.log.Debug("completion refused, dropped", "lease", l.id, "error", err)
			delete(r.leases, l.id)
		}
	}
	if retry != nil {
		r.connFailed(fmt.Errorf("completion not taken: %w", retry))
	}
}

// completionSize is about what a completion takes on the wire: its output
// and message, and only when it spawns, the whole encoded size (measuring
// every completion would cost the hot path more than the rest of it).
func completionSize(c *cronoqv1.Completion) int {
	if spawns(c) {
		return proto.Size(c)
	}
	return len(c.GetOutput()) + len(c.GetMessage())
}

// spawns reports whether a completion carries children or a continuation.
func spawns(c *cronoqv1.Completion) bool { return len(c.GetChildren()) > 0 || c.GetThen() != nil }

// invalidMessage is the text of a refusal: "invalid FIELD: reason" for an
// invalid argument.
func invalidMessage(err error) string {
	var inv *InvalidError
	if errors.As(err, &inv) {
		return inv.Error()
	}
	return err.Error()
}

// leaseGone reports whether a per-lease error means the lease is no longer
// ours.
func leaseGone(err error) bool {
	return errors.Is(err, ErrStaleLease) || errors.Is(err, ErrNotFound)
}

// transient reports whether a per-lease error may go away on a resend.
func transient(err error) bool {
	for _, e := range []error{ErrNotLeader, ErrNoLeader, ErrShuttingDown, ErrOutcomeUnknown, ErrOverloaded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// onTick heartbeats, drops leases whose heartbeats have failed for longer
// than the window, and detects a stalled stream.
func (r *workerRun) onTick(now time.Time) {
	for _, l := range r.sortedLeases() {
		if l.dropped || l.compInFlight {
			continue
		}
		if now.Sub(l.lastAck) > r.window {
			r.log.Warn("lease lost", "lease", l.id, "task", l.job.Task.ID, "last_ack", l.lastAck)
			r.lose(l, errLeaseLost)
		}
	}
	if r.conn == nil || !r.conn.welcomed {
		return
	}
	for id, l := range r.leases {
		if l.hbInFlight && now.Sub(l.hbSentAt) > r.window || l.compInFlight && now.Sub(l.compSentAt) > r.window {
			r.connFailed(errStalled)
			return
		}
		if l.live() && !l.hbInFlight && !l.compInFlight {
			r.hbDue[id] = true
		}
	}
}

func (r *workerRun) sortedLeases() []*lease {
	out := make([]*lease, 0, len(r.leases))
	for _, l := range r.leases {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *lease) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return out
}

// nextMessage is what the stream should carry next, or nil: Hello first;
// after the Welcome, completions (once batched), heartbeats, then a poll for
// the free slots. It has no effect until sent reports the send.
func (r *workerRun) nextMessage() *cronoqv1.WorkerMessage {
	if r.conn == nil {
		return nil
	}
	if !r.conn.hello {
		return &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{
			Worker: r.cfg.ID, Pool: r.cfg.Pool, Labels: kvsToProto(r.cfg.Labels),
		}}}
	}
	if !r.conn.welcomed {
		return nil
	}
	if r.flushNow && r.hasUnsent() {
		var batch []*cronoqv1.Completion
		size := 0
		for _, id := range r.unsentQ {
			l := r.leases[id]
			if l == nil || !l.unsent() {
				continue
			}
			n := completionSize(l.done)
			if len(batch) > 0 && (len(batch) >= r.cfg.CompletionBatch || size+n > maxBatchBytes) {
				break
			}
			batch = append(batch, l.done)
			size += n
		}
		if len(batch) > 0 {
			return &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: batch}}}
		}
	}
	if len(r.hbDue) > 0 {
		leases := make([]uint64, 0, len(r.hbDue))
		for id := range r.hbDue {
			leases = append(leases, id)
		}
		slices.Sort(leases)
		return &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: leases}}}
	}
	if !r.stopping {
		if free := r.cfg.Concurrency - r.runningN - r.offered; free > 0 {
			return &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: int32(free)}}}
		}
	}
	return nil
}

// sent applies the effects of handing msg to the stream.
func (r *workerRun) sent(msg *cronoqv1.WorkerMessage) {
	now := time.Now()
	switch m := msg.GetMsg().(type) {
	case *cronoqv1.WorkerMessage_Hello:
		r.conn.hello = true
	case *cronoqv1.WorkerMessage_Complete:
		for _, c := range m.Complete.GetCompletions() {
			if l := r.leases[c.GetLease()]; l != nil {
				l.compInFlight, l.compSentAt = true, now
				delete(r.hbDue, l.id)
			}
		}
		// The batch was taken from the front of the queue, skipping only
		// entries that no longer wait: everything up to its last lease is
		// sent or stale.
		comps := m.Complete.GetCompletions()
		last := comps[len(comps)-1].GetLease()
		if i := slices.Index(r.unsentQ, last); i >= 0 {
			r.unsentQ = r.unsentQ[i+1:]
		}
		if !r.hasUnsent() {
			r.flushNow = false
		}
	case *cronoqv1.WorkerMessage_Heartbeat:
		for _, id := range m.Heartbeat.GetLeases() {
			if l := r.leases[id]; l != nil {
				l.hbInFlight, l.hbSentAt = true, now
			}
			delete(r.hbDue, id)
		}
	case *cronoqv1.WorkerMessage_Poll:
		r.offered += int(m.Poll.GetSlots())
	}
}
