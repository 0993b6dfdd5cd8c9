// Package engine drives cronoq's scheduler on the raft leader. One goroutine
// owns a core.Core and runs the commit pipeline: the mutations of one or more
// core steps form a commit batch, each batch is one log entry, and everything
// that depends on durability (replies, dispatches, status events) is held with
// its batch and released, strictly in log order, once the entry is applied.
//
// Several entries may be in flight at once. Any commit failure stops the
// engine: a replicated log cannot retry an entry in place because later
// entries may already be ahead of it. Whoever owns the engine (the cluster's
// leadership loop) then re-establishes with a new epoch and a fresh core,
// after a backoff while engines keep failing (the "engine" loop of the
// node's loop health, which Config.OnCommit and Done/Err feed).
//
// Words used below: a step is the output of one core call (its mutations
// and the actions they hold); an entry is one appended log entry, the commit
// batch of one or more steps; the resolver is the goroutine that waits for
// entries in append order.
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// Log is where the engine commits its entries.
type Log interface {
	// Append hands one encoded entry to the log without waiting for commit.
	// Entries are applied in the order of Append calls. An error means the
	// entry was NOT appended.
	Append(data []byte) (Pending, error)
}

// Pending is an appended entry whose outcome is not known yet.
type Pending interface {
	// Wait returns once the entry is applied on this node: nil, the FSM's
	// error response (fenced / rejected), or an error that may leave the
	// outcome unknown.
	Wait(ctx context.Context) error
}

var (
	// ErrStopped means the engine is not running: the request had no effect
	// and may be retried (elsewhere: the cluster maps it to "not leader").
	ErrStopped = errors.New("engine stopped")
	// ErrOutcomeUnknown means the request's entry may or may not commit:
	// retry with the same idempotency key.
	ErrOutcomeUnknown = errors.New("outcome unknown: the entry may or may not commit")

	// errUnresolved is the cause given to entries still in flight when a
	// stop's grace period ends.
	errUnresolved = errors.New("stopped before the commit resolved")
)

// Defaults of Config.
const (
	DefaultMaxBatchBytes      = 512 << 10
	DefaultMaxInFlight        = 2
	DefaultStopGrace          = 5 * time.Second
	DefaultSubscriptionBuffer = 256
	// DefaultMaxQueuedBytes: 64 MiB of mutations waiting for the log is
	// 128 full entries, far more than a healthy disk ever lets pile up.
	DefaultMaxQueuedBytes = 64 << 20
)

// ErrWritePathSaturated refuses a submit while more is waiting for the log
// than Config.MaxQueuedBytes: the log cannot keep up (a slow disk, a slow
// follower). It wraps core.ErrOverloaded, so callers that retry an
// overloaded submit retry it too. Nothing already acknowledged is
// affected.
var ErrWritePathSaturated = fmt.Errorf("%w: write path saturated (the log is not keeping up)", core.ErrOverloaded)

// maxDrain bounds the messages handled per loop iteration, so that commit
// results and timers stay responsive under a flood of requests.
const maxDrain = 256

// Config configures an Engine. Zero fields take the defaults.
type Config struct {
	// Core is the configuration the core was built with (core.New or
	// core.Recover). The driver reads its LogVersion; the rest travels here
	// so that whoever builds engines keeps one configuration.
	Core core.Config
	// MaxBatchBytes caps the encoded size of one entry (512 KiB). The
	// mutations of one core step are never split: a step larger than the
	// cap goes alone in its own entry.
	MaxBatchBytes int
	// MaxInFlight caps the entries appended and not yet applied (2). Two
	// keep raft's pipeline full: the leader writes one entry to its log
	// while a follower writes the other. More would only cut the same
	// commands into smaller entries, each of which costs a log write (two
	// fsyncs with raft-boltdb) on every node; with two, whatever arrives
	// while they commit goes into the next entry, so entries grow with the
	// load (group commit).
	MaxInFlight int
	// StopGrace bounds how long stopping waits for entries in flight (5s).
	StopGrace time.Duration
	// MaxQueuedBytes is the write path's threshold: while the mutations
	// waiting for a log entry (not yet appended) exceed it, new submits
	// are refused with ErrWritePathSaturated, until they drain below half
	// of it (64 MiB). Negative: no threshold.
	MaxQueuedBytes int
	// Logger receives the engine's logs (none by default).
	Logger hclog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// ClockHold, when set, is read before every step of the core: while
	// it reports true the core holds the timers that act on the clock
	// alone (recurring fires, lease expiries, attempt timeouts; see
	// core.Core.SetClockHold), and when it turns false again they run.
	// Call RecheckClock after changing what it reports. It must not block.
	ClockHold func() bool
	// OnAbort tells a worker to stop the attempt under lease. It must not
	// block: it runs on the engine's goroutine.
	OnAbort func(worker string, lease uint64, reason string)
	// OnCommit, when set, observes every resolved entry (for metrics). It
	// must not block: it runs on the engine's goroutine.
	OnCommit func(CommitInfo)
	// OnRedelivery and OnNotice, when set, observe the redeliveries of
	// subscriptions and the notices (stalls, purges at the retention cap)
	// the core decides, for metrics; the engine logs them itself. They
	// must not block: they run on the engine's goroutine.
	OnRedelivery func(core.Redelivery)
	OnNotice     func(core.Notice)
}

// CommitInfo describes one resolved log entry.
type CommitInfo struct {
	Mutations int
	Bytes     int
	Latency   time.Duration // from Append to the end of Wait
	Err       error         // nil when the entry applied
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.StopGrace <= 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.MaxQueuedBytes == 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Core = c.Core.WithDefaults()
	return c
}

// Engine drives one core.Core. Its methods are safe for concurrent use. Its
// lifecycle is New, Start, Stop: Start runs it until Stop, the context of
// Start, or a commit failure ends it; Done and Err tell when and why.
type Engine struct {
	cfg    Config
	logger hclog.Logger
	log    Log

	in     chan message
	stopCh chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	started bool
	stopped bool // Stop was called
	err     error

	stopOnce sync.Once
	running  atomic.Bool // accepting calls: started and not finished

	hub          hub
	redeliveries redeliveryHub
	stats        counters
	// saturated: the write path is past Config.MaxQueuedBytes (set and
	// cleared by the loop, read by submitters).
	saturated atomic.Bool

	// Owned by the loop goroutine.
	loop loopState
}

// New returns an engine that drives c and commits to log. c must not be
// touched by anyone else from now on.
func New(cfg Config, c *core.Core, log Log) *Engine {
	cfg = cfg.WithDefaults()
	e := &Engine{
		cfg:    cfg,
		logger: cfg.Logger,
		log:    log,
		in:     make(chan message, maxDrain),
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
	}
	e.loop.core = c
	e.loop.calls = make(map[core.ReqID]*call)
	e.loop.logVersion = cfg.Core.LogVersion
	return e
}

// Start runs the engine until Stop is called, ctx ends or a commit fails.
// It may be called once.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.started:
		return errors.New("engine already started")
	case e.stopped:
		return ErrStopped
	case e.loop.core == nil:
		return errors.New("starting engine: no core")
	case e.log == nil:
		return errors.New("starting engine: no log")
	}
	e.started = true
	r := newResolver(e.cfg.MaxInFlight)
	e.loop.resolver = r
	e.running.Store(true)
	go r.run()
	go e.run(ctx)
	return nil
}

// Stop stops admitting work, lets the entries in flight resolve (up to
// Config.StopGrace), fails whatever is left, and returns once every
// goroutine of the engine has exited, or ctx's error if ctx ends first (the
// engine then finishes stopping on its own). It is idempotent.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	e.stopped = true
	started := e.started
	e.mu.Unlock()
	e.stopOnce.Do(func() {
		close(e.stopCh)
		if !started {
			e.hub.close()
			close(e.done)
		}
	})
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping engine: %w", ctx.Err())
	}
}

// Done is closed once the engine has stopped and its goroutines exited.
func (e *Engine) Done() <-chan struct{} { return e.done }

// Err reports why the engine stopped: nil while it runs and after a clean
// Stop, the commit failure otherwise.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *Engine) setErr(err error) {
	e.mu.Lock()
	e.err = err
	e.mu.Unlock()
}

// stoppedErr is the error of a call that found the engine not running.
func (e *Engine) stoppedErr() error {
	if err := e.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return ErrStopped
}

// ---------------------------------------------------------------------------
// Calls: what a method hands to the loop.
// ---------------------------------------------------------------------------

// message is what the loop receives: a *call, a batch of calls, a query, or
// a detach.
type message interface{ isMessage() }

// step runs one request against the core on the loop goroutine. The core
// answers req in its output (a Reply or a Dispatch).
type step func(c *core.Core, now time.Time, req core.ReqID)

// call is one request whose answer the core holds until its entry is
// durable.
type call struct {
	step    step
	mutates bool // a caller who leaves while the answer is held learns its outcome is unknown
	slot    int  // which answer of its caller this is (calls handed over together)
	reply   chan answer
	observe CommitObserver // told of the entry that made the answer durable; may be nil

	// Owned by the loop.
	id   core.ReqID
	held bool // its answer is held with a step
}

// answer is the outcome of a call: the value of the core's Reply (the
// grants of a Dispatch), or an error.
type answer struct {
	slot  int
	value any
	err   error
}

// calls are requests handed over in one message, each handled as if it
// came alone.
type calls []*call

// query runs at once on the loop goroutine, between two requests; done
// gets nil once it ran, ErrStopped when the engine was stopping instead.
type query struct {
	run  func(c *core.Core, now time.Time)
	done chan error
}

// detach tells the loop that target's caller went away.
type detach struct {
	target *call
	cause  error
}

func (*call) isMessage()  {}
func (calls) isMessage()  {}
func (query) isMessage()  {}
func (detach) isMessage() {}

// send hands a request to the loop and waits for its answer, of type T.
// When ctx ends first the loop is told to drop the request, and the caller
// gets the answer if it was already sent, else ctx's error (or "outcome
// unknown" for a mutating request whose answer was held).
func send[T any](ctx context.Context, e *Engine, mutates bool, s step) (T, error) {
	var zero T
	c := &call{step: s, mutates: mutates, reply: make(chan answer, 1), observe: commitObserver(ctx)}
	if err := e.handOver(ctx, c); err != nil {
		return zero, err
	}
	a := e.await(ctx, c)
	if a.err != nil {
		return zero, a.err
	}
	v, _ := a.value.(T)
	return v, nil
}

// ask runs q on the loop goroutine and waits until it ran.
func (e *Engine) ask(ctx context.Context, q func(c *core.Core, now time.Time)) error {
	done := make(chan error, 1)
	if err := e.handOver(ctx, query{run: q, done: done}); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-e.done:
		select {
		case err := <-done:
			return err
		default:
			return e.stoppedErr()
		}
	}
}

// handOver puts m in the loop's queue.
func (e *Engine) handOver(ctx context.Context, m message) error {
	if !e.running.Load() {
		return e.stoppedErr()
	}
	select {
	case e.in <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.done:
		return e.stoppedErr()
	}
}

// await waits for the answer of c, which the loop has.
func (e *Engine) await(ctx context.Context, c *call) answer {
	select {
	case a := <-c.reply:
		return a
	case <-e.done:
		return e.late(c)
	case <-ctx.Done():
	}
	select {
	case e.in <- detach{target: c, cause: ctx.Err()}:
	case a := <-c.reply:
		return a
	case <-e.done:
		return e.late(c)
	}
	select {
	case a := <-c.reply:
		return a
	case <-e.done:
		return e.late(c)
	}
}

// late answers a caller that saw the engine finish: the loop answers every
// request it knew before it finishes, so an answer may be waiting.
func (e *Engine) late(c *call) answer {
	select {
	case a := <-c.reply:
		return a
	default:
		return answer{slot: c.slot, err: e.stoppedErr()}
	}
}

// ---------------------------------------------------------------------------
// The operations of the leader
// ---------------------------------------------------------------------------

// Submit submits specs in one of the three forms (see core.Core.Submit);
// with SubmitMany the result holds an error per refused item.
func (e *Engine) Submit(ctx context.Context, mode core.SubmitMode, specs []core.Spec) (*core.SubmitResult, error) {
	if e.saturated.Load() {
		e.stats.saturatedRefusals.Add(1)
		return nil, ErrWritePathSaturated
	}
	res, err := send[*core.SubmitResult](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.Submit(now, req, mode, specs)
	})
	if err == nil {
		e.stats.countSubmitted(res)
	}
	return res, err
}

// Poll offers a worker's capacity and waits until at least one attempt is
// granted or ctx ends.
func (e *Engine) Poll(ctx context.Context, offer core.Offer) ([]core.Grant, error) {
	grants, err := send[[]core.Grant](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.Poll(now, req, offer)
	})
	e.stats.dispatched.Add(uint64(len(grants)))
	return grants, err
}

// Heartbeat extends leases. It is answered at once (heartbeats are not
// logged): one error per lease, nil or core.ErrStaleLease.
func (e *Engine) Heartbeat(ctx context.Context, leases []uint64) ([]error, error) {
	errs := make([]error, len(leases))
	err := e.ask(ctx, func(c *core.Core, now time.Time) {
		for i, lease := range leases {
			errs[i] = c.Heartbeat(now, lease)
		}
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// Complete reports the outcome of the attempt under lease. It returns once
// the outcome is durable.
func (e *Engine) Complete(ctx context.Context, lease uint64, out core.Outcome) error {
	return e.CompleteMany(ctx, []Completion{{Lease: lease, Outcome: out}})[0]
}

// Completion is the outcome of the attempt under Lease.
type Completion struct {
	Lease   uint64
	Outcome core.Outcome
}

// CompleteMany reports several outcomes, as Complete does for each, in one
// hand-over to the loop (so they usually share an entry). It returns once
// every outcome is durable, with one error per completion.
func (e *Engine) CompleteMany(ctx context.Context, cs []Completion) []error {
	errs := make([]error, len(cs))
	all := make([]call, len(cs)) // one allocation for all of them
	msg := make(calls, len(cs))
	reply := make(chan answer, len(cs)) // shared: answers carry their slot
	observe := commitObserver(ctx)
	for i, cp := range cs {
		all[i] = call{slot: i, mutates: true, reply: reply, observe: observe, step: func(c *core.Core, now time.Time, req core.ReqID) {
			c.Complete(now, req, cp.Lease, cp.Outcome)
		}}
		msg[i] = &all[i]
	}
	if err := e.handOver(ctx, msg); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	// Each call is answered exactly once: by the core, by its detach, or
	// by the loop as it finishes.
	got := make([]bool, len(cs))
	take := func(a answer) {
		got[a.slot] = true
		errs[a.slot] = a.err
		if a.err == nil {
			e.stats.completed.Add(1)
		}
	}
	ctxDone := ctx.Done()
	for pending := len(msg); pending > 0; {
		select {
		case a := <-reply:
			take(a)
			pending--
		case <-ctxDone:
			ctxDone = nil
			for _, c := range msg {
				select {
				case e.in <- detach{target: c, cause: ctx.Err()}:
				case <-e.done:
				}
			}
		case <-e.done:
			// The loop answered every call it knew before it finished.
			for ; pending > 0; pending-- {
				select {
				case a := <-reply:
					take(a)
				default:
					err := e.stoppedErr()
					for i := range errs {
						if !got[i] {
							errs[i] = err
						}
					}
					return errs
				}
			}
		}
	}
	return errs
}

// Cancel cancels a task (see core.Cancelled).
func (e *Engine) Cancel(ctx context.Context, ref core.TaskRef) (core.Cancelled, error) {
	return send[core.Cancelled](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.Cancel(now, req, ref)
	})
}

// Wait returns the id of the task once it is terminal and durable; the
// caller reads the task from the FSM.
func (e *Engine) Wait(ctx context.Context, ref core.TaskRef) (string, error) {
	return send[string](ctx, e, false, func(c *core.Core, now time.Time, req core.ReqID) {
		c.Attach(now, req, ref)
	})
}

// SubmitWorkflow admits a workflow: its steps, atomically (see
// core.Core.SubmitWorkflow).
func (e *Engine) SubmitWorkflow(ctx context.Context, spec core.WorkflowSpec) (*core.WorkflowSubmitted, error) {
	if e.saturated.Load() {
		e.stats.saturatedRefusals.Add(1)
		return nil, ErrWritePathSaturated
	}
	res, err := send[*core.WorkflowSubmitted](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.SubmitWorkflow(now, req, spec)
	})
	if err == nil {
		if res.Duplicate {
			e.stats.duplicates.Add(1)
		} else {
			e.stats.submitted.Add(uint64(len(res.Tasks)))
		}
	}
	return res, err
}

// CancelWorkflow cancels every live member of a workflow, in one commit.
func (e *Engine) CancelWorkflow(ctx context.Context, ref core.WorkflowRef) (core.CancelledWorkflow, error) {
	return send[core.CancelledWorkflow](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.CancelWorkflow(now, req, ref)
	})
}

// WaitWorkflow returns the id of the workflow once it has ended and its end
// is durable; the caller reads it from the FSM.
func (e *Engine) WaitWorkflow(ctx context.Context, ref core.WorkflowRef) (string, error) {
	return send[string](ctx, e, false, func(c *core.Core, now time.Time, req core.ReqID) {
		c.AttachWorkflow(now, req, ref)
	})
}

// CompleteExternal ends an external task waiting for its completion, and
// returns its id once the end is durable.
func (e *Engine) CompleteExternal(ctx context.Context, ref core.TaskRef, out core.Outcome) (string, error) {
	id, err := send[string](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.CompleteExternal(now, req, ref, out)
	})
	if err == nil {
		e.stats.completed.Add(1)
	}
	return id, err
}

// AddSchedule creates or replaces a recurring schedule and returns its next
// fire instant (0 while paused).
func (e *Engine) AddSchedule(ctx context.Context, spec core.ScheduleSpec) (fsm.Instant, error) {
	return send[fsm.Instant](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.AddSchedule(now, req, spec)
	})
}

// RemoveSchedule removes a recurring schedule; removed is false when there
// was none.
func (e *Engine) RemoveSchedule(ctx context.Context, name string) (removed bool, err error) {
	return send[bool](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.RemoveSchedule(now, req, name)
	})
}

// PauseSchedule pauses or resumes a recurring schedule and returns its new
// state.
func (e *Engine) PauseSchedule(ctx context.Context, name string, paused bool) (bool, error) {
	return send[bool](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.PauseSchedule(now, req, name, paused)
	})
}

// Config returns the engine's configuration, defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// SetPool changes a pool's settings through the log and returns the pool
// once the change is durable (see core.Core.SetPool).
func (e *Engine) SetPool(ctx context.Context, ch core.PoolChange) (core.PoolInfo, error) {
	return send[core.PoolInfo](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.SetPool(now, req, ch)
	})
}

// Pools describes the pools the core knows, read on the engine's
// goroutine.
func (e *Engine) Pools(ctx context.Context) ([]core.PoolInfo, error) {
	var out []core.PoolInfo
	err := e.ask(ctx, func(c *core.Core, _ time.Time) { out = c.Pools() })
	return out, err
}

// DesiredSlots returns the autoscaling signal of every pool (see
// core.DesiredSlots), read on the engine's goroutine.
func (e *Engine) DesiredSlots(ctx context.Context) ([]core.PoolSlots, error) {
	var out []core.PoolSlots
	err := e.ask(ctx, func(c *core.Core, _ time.Time) { out = c.DesiredSlotsByPool() })
	return out, err
}

// Pool describes one pool.
func (e *Engine) Pool(ctx context.Context, name string) (core.PoolInfo, error) {
	var (
		out  core.PoolInfo
		perr error
	)
	if err := e.ask(ctx, func(c *core.Core, _ time.Time) { out, perr = c.Pool(name) }); err != nil {
		return out, err
	}
	return out, perr
}

// SetKind changes a kind's settings through the log (see
// core.Core.SetKind).
func (e *Engine) SetKind(ctx context.Context, ch core.KindChange) (fsm.KindSettings, error) {
	return send[fsm.KindSettings](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.SetKind(now, req, ch)
	})
}

// Kind returns a kind's settings.
func (e *Engine) Kind(ctx context.Context, pool, kind string) (fsm.KindSettings, error) {
	var (
		out  fsm.KindSettings
		kerr error
	)
	if err := e.ask(ctx, func(c *core.Core, _ time.Time) { out, kerr = c.Kind(pool, kind) }); err != nil {
		return out, err
	}
	return out, kerr
}

// Delete removes an ended task now (see core.Core.Delete).
func (e *Engine) Delete(ctx context.Context, ref core.TaskRef) (core.Deleted, error) {
	return send[core.Deleted](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.Delete(now, req, ref)
	})
}

// CoreStats returns the core's gauges (pending, running, parked, polls...),
// read on the engine's goroutine.
func (e *Engine) CoreStats(ctx context.Context) (core.Stats, error) {
	var st core.Stats
	err := e.ask(ctx, func(c *core.Core, _ time.Time) { st = c.Stats() })
	return st, err
}

// SetLogVersion sets the newest log format every server of the cluster
// understands: operations that need a newer one are refused, and the engine
// never appends an entry that needs one.
func (e *Engine) SetLogVersion(ctx context.Context, v uint16) error {
	return e.ask(ctx, func(c *core.Core, _ time.Time) {
		c.SetLogVersion(v)
		e.loop.logVersion = min(max(v, 1), fsm.LogVersion)
	})
}
