// Package engine drives cronoq's scheduler on the raft leader. One goroutine
// owns a core.Core and runs the commit pipeline: the mutations of one or more
// core steps form a commit batch, each batch is one log entry, and everything
// that depends on durability (replies, dispatches, status events) is held with
// its batch and released, strictly in log order, once the entry is applied.
//
// Several batches may be in flight at once. Any commit failure stops the
// engine: a replicated log cannot retry an entry in place because later
// entries may already be ahead of it. Whoever owns the engine (the cluster's
// leadership loop) then re-establishes with a new epoch and a fresh core.
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
)

// Log is where the engine commits its batches.
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

	// errUnresolved is the cause given to batches still in flight when a
	// stop's grace period ends.
	errUnresolved = errors.New("stopped before the commit resolved")
)

// Defaults of Config.
const (
	DefaultMaxBatchBytes      = 512 << 10
	DefaultMaxInFlight        = 2
	DefaultStopGrace          = 5 * time.Second
	DefaultSubscriptionBuffer = 256
)

// maxDrain bounds the commands handled per loop iteration, so that commit
// results and timers stay responsive under a flood of requests.
const maxDrain = 256

// Config configures an Engine. Zero fields take the defaults.
type Config struct {
	// Core is the configuration the core was built with (core.New or
	// core.Recover). The driver itself reads none of it; it travels here so
	// that whoever builds engines keeps one configuration.
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
	// StopGrace bounds how long Stop waits for entries in flight (5s).
	StopGrace time.Duration
	// Logger receives the engine's logs (none by default).
	Logger hclog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// OnAbort tells a worker to stop the attempt under lease. It must not
	// block: it runs on the engine's goroutine.
	OnAbort func(worker string, lease uint64, reason string)
	// OnCommit, when set, observes every resolved entry (for metrics). It
	// must not block: it runs on the engine's goroutine.
	OnCommit func(CommitInfo)
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
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Engine drives one core.Core. Its methods are safe for concurrent use.
type Engine struct {
	cfg    Config
	logger hclog.Logger
	log    Log

	in     chan *request
	stopCh chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	started bool
	stopped bool // Stop was called
	err     error

	stopOnce sync.Once
	running  atomic.Bool // accepting calls: started and not finished

	hub   hub
	stats counters

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
		in:     make(chan *request, maxDrain),
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
	}
	e.loop.core = c
	e.loop.reqs = make(map[core.ReqID]*request)
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
	w := newWaiter(e.cfg.MaxInFlight)
	e.loop.waiter = w
	e.running.Store(true)
	go w.run()
	go e.run(ctx)
	return nil
}

// Stop stops admitting work, waits (up to Config.StopGrace) for the entries
// in flight, fails whatever is left, and returns once every goroutine of the
// engine has exited. It is idempotent.
func (e *Engine) Stop() {
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
	<-e.done
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
// Calls
// ---------------------------------------------------------------------------

type opKind uint8

const (
	opSubmit opKind = iota + 1
	opPoll
	opHeartbeat
	opComplete
	opCancel
	opWait
	opAddSchedule
	opRemoveSchedule
	opPauseSchedule
	opCoreStats
	opDetach
	opMany // several requests handed over at once: parts
)

// mutates reports whether a request of this kind changes durable state, so
// that a caller who leaves while its answer is held learns that the outcome
// is unknown.
func (o opKind) mutates() bool {
	return o != opWait && o != opHeartbeat && o != opCoreStats
}

// request is one call handed to the loop.
type request struct {
	op opKind

	mode    core.SubmitMode
	specs   []core.Spec
	offer   core.Offer
	leases  []uint64
	lease   uint64
	outcome core.Outcome
	ref     core.TaskRef
	sched   core.ScheduleSpec
	name    string
	paused  bool

	// opDetach: the request whose caller went away, and why.
	target *request
	cause  error

	// opMany: the requests, each answered on its own reply channel.
	parts []*request

	reply chan response // buffered: the loop never blocks on it

	// Owned by the loop.
	id   core.ReqID
	held bool // its answer is held with a group
}

type response struct {
	act   core.Action
	errs  []error
	stats *core.Stats // opCoreStats
	err   error
}

// call hands r to the loop and waits for its answer. When ctx ends first the
// loop is told to drop the request (Detach / CancelPoll), and the caller gets
// the answer if it was already sent, ctx's error otherwise.
func (e *Engine) call(ctx context.Context, r *request) response {
	if !e.running.Load() {
		return response{err: e.stoppedErr()}
	}
	r.reply = make(chan response, 1)
	select {
	case e.in <- r:
	case <-ctx.Done():
		return response{err: ctx.Err()}
	case <-e.done:
		return response{err: e.stoppedErr()}
	}
	return e.await(ctx, r)
}

// callMany hands rs to the loop in one message, where they are handled one
// after the other as if each came alone, and waits for each answer as call
// does.
func (e *Engine) callMany(ctx context.Context, rs []*request) []response {
	out := make([]response, len(rs))
	fail := func(err error) []response {
		for i := range out {
			out[i] = response{err: err}
		}
		return out
	}
	if !e.running.Load() {
		return fail(e.stoppedErr())
	}
	for _, r := range rs {
		r.reply = make(chan response, 1)
	}
	select {
	case e.in <- &request{op: opMany, parts: rs}:
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-e.done:
		return fail(e.stoppedErr())
	}
	for i, r := range rs {
		out[i] = e.await(ctx, r)
	}
	return out
}

// await waits for the answer of r, which the loop has.
func (e *Engine) await(ctx context.Context, r *request) response {
	select {
	case resp := <-r.reply:
		return resp
	case <-e.done:
		return e.late(r)
	case <-ctx.Done():
	}
	detach := &request{op: opDetach, target: r, cause: ctx.Err()}
	select {
	case e.in <- detach:
	case resp := <-r.reply:
		return resp
	case <-e.done:
		return e.late(r)
	}
	select {
	case resp := <-r.reply:
		return resp
	case <-e.done:
		return e.late(r)
	}
}

// late answers a caller that saw the engine finish: the loop answers every
// request it knew before it finishes, so an answer may be waiting.
func (e *Engine) late(r *request) response {
	select {
	case resp := <-r.reply:
		return resp
	default:
		return response{err: e.stoppedErr()}
	}
}

// Submit submits specs in one of the three forms. With SubmitMany the
// per-item errors come back in the second result (nil where admitted); the
// third result is an error of the whole call.
func (e *Engine) Submit(ctx context.Context, mode core.SubmitMode, specs []core.Spec) ([]core.Submitted, []error, error) {
	resp := e.call(ctx, &request{op: opSubmit, mode: mode, specs: specs})
	if resp.err != nil {
		return nil, nil, resp.err
	}
	return resp.act.Submitted, resp.act.Errs, nil
}

// Poll offers a worker's capacity and waits until at least one attempt is
// granted or ctx ends.
func (e *Engine) Poll(ctx context.Context, offer core.Offer) ([]core.Grant, error) {
	resp := e.call(ctx, &request{op: opPoll, offer: offer})
	if resp.err != nil {
		return nil, resp.err
	}
	return resp.act.Grants, nil
}

// Heartbeat extends leases. It is answered at once (heartbeats are not
// logged): one error per lease, nil or core.ErrStaleLease.
func (e *Engine) Heartbeat(ctx context.Context, leases []uint64) ([]error, error) {
	resp := e.call(ctx, &request{op: opHeartbeat, leases: leases})
	if resp.err != nil {
		return nil, resp.err
	}
	return resp.errs, nil
}

// Complete reports the outcome of the attempt under lease. It returns once
// the outcome is durable.
func (e *Engine) Complete(ctx context.Context, lease uint64, out core.Outcome) error {
	resp := e.call(ctx, &request{op: opComplete, lease: lease, outcome: out})
	return resp.err
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
	reqs := make([]request, len(cs)) // one allocation for all of them
	rs := make([]*request, len(cs))
	for i, c := range cs {
		reqs[i] = request{op: opComplete, lease: c.Lease, outcome: c.Outcome}
		rs[i] = &reqs[i]
	}
	errs := make([]error, len(cs))
	for i, resp := range e.callMany(ctx, rs) {
		errs[i] = resp.err
	}
	return errs
}

// Cancel cancels a task. cancelled is true when this call cancelled it,
// false when it had already ended.
func (e *Engine) Cancel(ctx context.Context, ref core.TaskRef) (id string, cancelled bool, err error) {
	resp := e.call(ctx, &request{op: opCancel, ref: ref})
	if resp.err != nil {
		return "", false, resp.err
	}
	return resp.act.TaskID, resp.act.Cancelled, nil
}

// Wait returns the id of the task once it is terminal and durable; the
// caller reads the task from the FSM.
func (e *Engine) Wait(ctx context.Context, ref core.TaskRef) (id string, err error) {
	resp := e.call(ctx, &request{op: opWait, ref: ref})
	if resp.err != nil {
		return "", resp.err
	}
	return resp.act.TaskID, nil
}

// AddSchedule creates or replaces a recurring schedule and returns its next
// fire instant.
func (e *Engine) AddSchedule(ctx context.Context, spec core.ScheduleSpec) (time.Time, error) {
	resp := e.call(ctx, &request{op: opAddSchedule, sched: spec})
	if resp.err != nil {
		return time.Time{}, resp.err
	}
	return resp.act.NextFire, nil
}

// RemoveSchedule removes a recurring schedule; removed is false when there
// was none.
func (e *Engine) RemoveSchedule(ctx context.Context, name string) (removed bool, err error) {
	resp := e.call(ctx, &request{op: opRemoveSchedule, name: name})
	if resp.err != nil {
		return false, resp.err
	}
	return resp.act.Removed, nil
}

// PauseSchedule pauses or resumes a recurring schedule and returns its new
// state.
func (e *Engine) PauseSchedule(ctx context.Context, name string, paused bool) (bool, error) {
	resp := e.call(ctx, &request{op: opPauseSchedule, name: name, paused: paused})
	if resp.err != nil {
		return false, resp.err
	}
	return resp.act.Paused, nil
}

// CoreStats returns the core's gauges (pending, running, parked, polls...),
// read on the engine's goroutine.
func (e *Engine) CoreStats(ctx context.Context) (core.Stats, error) {
	resp := e.call(ctx, &request{op: opCoreStats})
	if resp.err != nil {
		return core.Stats{}, resp.err
	}
	return *resp.stats, nil
}
