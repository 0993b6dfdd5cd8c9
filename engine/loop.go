package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// entryOverhead bounds what an entry adds around its mutations: the type
// byte, the batch's map and array headers, its epoch, time and version.
const entryOverhead = 64

// loopState is everything the loop goroutine owns.
type loopState struct {
	core       *core.Core
	resolver   *resolver
	calls      map[core.ReqID]*call // requests not answered yet
	nextReq    core.ReqID
	logVersion uint16 // no entry may need a newer log format

	// held holds every step not released yet, in production order; unsent
	// the steps whose mutations are not appended yet; inflight the appended
	// entries not resolved yet, in append order.
	held     []*pendingStep
	unsent   []*pendingStep
	inflight []*entry

	seq      uint64      // of the last appended entry
	lastTime fsm.Instant // time of the last entry: entry times never go back
	stopping bool

	// merged is reused to gather the mutations of several steps into one
	// entry: they are only read by the encoder.
	merged []fsm.Mutation
}

// pendingStep is the output of one core call waiting for its entry: its
// mutations commit in one entry and its held actions are released once
// that entry (and every entry before it) is applied.
type pendingStep struct {
	out   core.Output
	size  int    // upper bound of the encoded size of out.Mutations
	entry *entry // the entry it went into; nil until appended
	// queued is when the step was produced, read only when one of its
	// calls observes its commit (see WithCommitObserver).
	queued time.Time
}

// entry is one appended log entry.
type entry struct {
	seq      uint64
	muts     int
	bytes    int
	applied  bool
	rejected bool // definitely not applied (fenced or refused by the FSM)

	// For the calls that observe their commit: when the entry was
	// appended and applied, and its raft index (when the log tells).
	appendedAt, appliedAt time.Time
	index                 uint64
}

func (e *Engine) run(ctx context.Context) {
	l := &e.loop
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var grace <-chan time.Time
	stopCh, ctxDone := e.stopCh, ctx.Done()
	e.logger.Debug("engine started", "epoch", l.core.Epoch())

	var cause error
loop:
	for !l.stopping || len(l.inflight) > 0 {
		select {
		case m := <-e.in:
			e.handle(m)
		drain:
			for i := 1; i < maxDrain; i++ {
				select {
				case m = <-e.in:
					e.handle(m)
				default:
					break drain
				}
			}
		case res := <-l.resolver.results:
			if cause = e.resolved(res); cause != nil {
				break loop
			}
		case <-timer.C:
			if !l.stopping {
				l.core.Tick(e.stepNow())
				e.collect()
			}
		case <-stopCh:
			stopCh, ctxDone = nil, nil
			grace = e.beginStop()
		case <-ctxDone:
			stopCh, ctxDone = nil, nil
			grace = e.beginStop()
		case <-grace:
			break loop
		}
		if !l.stopping {
			if cause = e.appendEntries(); cause != nil {
				break loop
			}
		}
		e.arm(timer)
		e.stats.requests.Store(int64(len(l.calls)))
	}
	e.finish(cause)
}

// handle runs one message. Each request's core step forms its own pending
// step, so that entries can be cut between steps.
func (e *Engine) handle(m message) {
	l := &e.loop
	switch m := m.(type) {
	case *call:
		e.start(m)
	case calls:
		for _, c := range m {
			e.start(c)
		}
	case query:
		if l.stopping {
			m.done <- ErrStopped
			return
		}
		m.run(l.core, e.stepNow())
		e.collect()
		m.done <- nil
	case detach:
		e.detach(m.target, m.cause)
	}
}

// start runs c against the core and collects the step's output.
func (e *Engine) start(c *call) {
	l := &e.loop
	if l.stopping {
		c.reply <- answer{slot: c.slot, err: ErrStopped}
		return
	}
	l.nextReq++
	c.id = l.nextReq
	l.calls[c.id] = c
	c.step(l.core, e.stepNow(), c.id)
	e.collect()
}

// detach drops a request whose caller went away. If its answer is already
// held with a step, the request has taken effect (or will, or may): a
// mutating request learns that its outcome is unknown. Otherwise the core
// forgets it (a parked submitter, an open poll, a waiter).
func (e *Engine) detach(c *call, cause error) {
	l := &e.loop
	if c.id == 0 || l.calls[c.id] != c {
		return // answered already
	}
	delete(l.calls, c.id)
	err := cause
	switch {
	case c.held && c.mutates:
		err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)
	case c.held || l.stopping:
	default:
		l.core.Detach(c.id)
		e.collect()
	}
	c.reply <- answer{slot: c.slot, err: err}
}

// collect takes the core's output: aborts go out now; mutations and held
// actions form a pending step, released at once when it has no mutations
// and nothing is ahead of it.
func (e *Engine) collect() {
	l := &e.loop
	out := l.core.Ready()
	for _, a := range out.Aborts {
		if e.cfg.OnAbort != nil {
			e.cfg.OnAbort(a.Worker, a.Lease, a.Reason)
		}
	}
	if len(out.Redeliveries) > 0 || len(out.Notices) > 0 {
		e.subscriptionOutputs(&out)
	}
	if len(out.Mutations) == 0 && !out.Holds() {
		return
	}
	if len(out.Mutations) == 0 && len(l.held) == 0 {
		e.release(&out, nil)
		return
	}
	s := &pendingStep{out: out}
	e.ackEarly(s)
	observed := false
	for _, r := range out.Replies {
		if c := l.calls[r.Req]; c != nil {
			c.held = true
			observed = observed || c.observe != nil
		}
	}
	for _, d := range out.Dispatches {
		if c := l.calls[d.Req]; c != nil {
			c.held = true
			observed = observed || c.observe != nil
		}
	}
	if observed {
		s.queued = time.Now()
	}
	l.held = append(l.held, s)
	if len(out.Mutations) > 0 {
		for i := range out.Mutations {
			s.size += out.Mutations[i].Msgsize()
		}
		l.unsent = append(l.unsent, s)
		e.stats.queued.Add(1)
		e.queuedBytes(s.size)
	}
}

// queuedBytes adds delta to the bytes waiting for the log and sets or
// clears the write path's saturation: set past Config.MaxQueuedBytes,
// cleared below half of it.
func (e *Engine) queuedBytes(delta int) {
	n := e.stats.queuedBytes.Add(int64(delta))
	limit := int64(e.cfg.MaxQueuedBytes)
	if limit < 0 {
		return
	}
	switch sat := e.saturated.Load(); {
	case !sat && n > limit:
		e.saturated.Store(true)
		e.logger.Warn("write path saturated: submits are refused until it drains", "queued_bytes", n, "limit", limit)
	case sat && n <= limit/2:
		e.saturated.Store(false)
		e.logger.Info("write path drained: submits are admitted again", "queued_bytes", n)
	}
}

// release carries out the held actions of out, then hands its slices back
// to the core. s is the pending step out was held with (nil when it was
// never held): the observers of its calls are told of its entry, when it
// had one of its own.
func (e *Engine) release(out *core.Output, s *pendingStep) {
	for _, r := range out.Replies {
		if res, ok := r.Value.(*core.SubmitResult); ok {
			for i, err := range res.Errs {
				res.Errs[i] = stoppedIfShuttingDown(err)
			}
		}
		e.observe(r.Req, s)
		e.answer(r.Req, r.Value, r.Err)
	}
	for _, d := range out.Dispatches {
		if e.loop.calls[d.Req] == nil && len(d.Grants) > 0 {
			e.stats.droppedDispatches.Add(uint64(len(d.Grants)))
			e.logger.Debug("dispatch dropped: the poller went away", "grants", len(d.Grants))
			continue
		}
		e.observe(d.Req, s)
		e.answer(d.Req, d.Grants, d.Err)
	}
	for _, ev := range out.Events {
		e.hub.publish(ev)
	}
	e.loop.core.Recycle(out)
}

// observe tells the observer of request req, if any, of the entry of s.
func (e *Engine) observe(req core.ReqID, s *pendingStep) {
	if s == nil || s.entry == nil {
		return
	}
	if c := e.loop.calls[req]; c != nil && c.observe != nil {
		c.observe(c.slot, s.entry.trace(s))
	}
}

// answer sends the answer of request req to its caller, if it still waits.
func (e *Engine) answer(req core.ReqID, v any, err error) {
	c := e.loop.calls[req]
	if c == nil {
		return
	}
	delete(e.loop.calls, req)
	c.reply <- answer{slot: c.slot, value: v, err: stoppedIfShuttingDown(err)}
}

// stoppedIfShuttingDown makes the core's "shutting down" an ErrStopped as
// well, so callers test one error for "retry elsewhere". Per-item errors
// of an enqueue-many answer are converted the same way.
func stoppedIfShuttingDown(err error) error {
	if errors.Is(err, core.ErrShuttingDown) && !errors.Is(err, ErrStopped) {
		return fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return err
}

// releaseApplied releases, in order, every pending step at the front whose
// entry is applied (or that has no mutations).
func (e *Engine) releaseApplied() {
	l := &e.loop
	for len(l.held) > 0 {
		s := l.held[0]
		if len(s.out.Mutations) > 0 && (s.entry == nil || !s.entry.applied) {
			return
		}
		l.held[0] = nil
		l.held = l.held[1:]
		e.release(&s.out, s)
	}
}

// appendEntries appends entries while there are steps to commit and room in
// flight.
func (e *Engine) appendEntries() error {
	l := &e.loop
	for len(l.unsent) > 0 && len(l.inflight) < e.cfg.MaxInFlight {
		if err := e.appendEntry(); err != nil {
			return err
		}
	}
	return nil
}

// maxMergedCap bounds the merge slice kept between entries.
const maxMergedCap = 1 << 14

// appendEntry cuts one entry from the front of unsent and appends it. Steps
// are taken whole while the entry stays under MaxBatchBytes; a step larger
// than that goes alone.
func (e *Engine) appendEntry() error {
	l := &e.loop
	limit := e.cfg.MaxBatchBytes
	n, size := 0, entryOverhead
	for n < len(l.unsent) {
		s := l.unsent[n].size
		if n > 0 && size+s > limit {
			break
		}
		size += s
		n++
	}
	t := fsm.InstantOf(e.cfg.Now())
	if t < l.lastTime {
		t = l.lastTime
	}
	var (
		data  []byte
		nmuts int
	)
	for {
		muts := l.unsent[0].out.Mutations
		if n > 1 {
			muts = l.merged[:0]
			for _, s := range l.unsent[:n] {
				muts = append(muts, s.out.Mutations...)
			}
		}
		b := &fsm.CommitBatch{Epoch: l.core.Epoch(), Time: t, Mutations: muts}
		var err error
		data, err = fsm.EncodeCommitBatch(b)
		if n > 1 {
			clear(muts) // drop the records it points to
			if cap(muts) <= maxMergedCap {
				l.merged = muts[:0]
			}
		}
		if err != nil {
			return fmt.Errorf("encoding entry %d: %w", l.seq+1, err)
		}
		if b.Version > l.logVersion {
			// The core refuses what needs a newer format than the cluster
			// understands; reaching here is a bug, and appending would stop
			// the servers that cannot apply it.
			return fmt.Errorf("entry %d needs log format version %d, the cluster understands %d", l.seq+1, b.Version, l.logVersion)
		}
		nmuts = len(muts)
		if len(data) <= limit || n == 1 {
			break
		}
		// The estimate was short: cut smaller.
		n /= 2
	}
	if len(data) > limit {
		e.logger.Debug("oversized entry goes alone", "bytes", len(data), "mutations", nmuts)
	}
	p, err := e.log.Append(data)
	if err != nil {
		return fmt.Errorf("appending entry %d: %w", l.seq+1, err)
	}
	l.seq++
	l.lastTime = t
	now := time.Now()
	ent := &entry{seq: l.seq, muts: nmuts, bytes: len(data), appendedAt: now}
	sent := 0
	for i, s := range l.unsent[:n] {
		s.entry = ent
		sent += s.size
		l.unsent[i] = nil
	}
	e.queuedBytes(-sent)
	l.unsent = l.unsent[n:]
	l.inflight = append(l.inflight, ent)
	e.stats.queued.Add(-int64(n))
	e.stats.inFlight.Add(1)
	e.stats.batches.Add(1)
	e.stats.mutations.Add(uint64(nmuts))
	e.stats.batchBytes.Add(uint64(len(data)))
	l.resolver.items <- resolveItem{seq: ent.seq, pending: p, at: now}
	return nil
}

// resolved takes the outcome of the oldest entry in flight. A failure is
// returned: it stops the engine.
func (e *Engine) resolved(res resolveResult) error {
	l := &e.loop
	if len(l.inflight) == 0 || l.inflight[0].seq != res.seq {
		return fmt.Errorf("engine: outcome of entry %d out of order", res.seq)
	}
	ent := l.inflight[0]
	l.inflight[0] = nil
	l.inflight = l.inflight[1:]
	e.stats.inFlight.Add(-1)
	if e.cfg.OnCommit != nil {
		e.cfg.OnCommit(CommitInfo{Mutations: ent.muts, Bytes: ent.bytes, Latency: res.latency, Err: res.err})
	}
	if res.err == nil {
		ent.applied = true
		ent.appliedAt, ent.index = ent.appendedAt.Add(res.latency), res.index
		e.stats.committed.Add(1)
		e.stats.commitNanos.Add(int64(res.latency))
		e.releaseApplied()
		return nil
	}
	var rejected *fsm.RejectedError
	switch {
	case errors.Is(res.err, fsm.ErrStaleEpoch):
		// Epochs only grow: every later entry of this engine is fenced too.
		ent.rejected = true
		for _, o := range l.inflight {
			o.rejected = true
		}
		return fmt.Errorf("entry %d fenced: %w", ent.seq, res.err)
	case errors.As(res.err, &rejected):
		ent.rejected = true
		return fmt.Errorf("entry %d rejected: %w", ent.seq, res.err)
	default:
		return fmt.Errorf("committing entry %d: %w", ent.seq, res.err)
	}
}

// beginStop stops admitting: the core fails parked submitters and polls,
// nothing more is appended, and the loop waits for the entries in flight
// until the returned grace period ends.
func (e *Engine) beginStop() <-chan time.Time {
	l := &e.loop
	e.logger.Debug("engine stopping", "in_flight", len(l.inflight))
	l.core.Shutdown(e.cfg.Now())
	e.collect()
	l.stopping = true
	return time.After(e.cfg.StopGrace)
}

// arm sets the timer to the core's next wake.
func (e *Engine) arm(t *time.Timer) {
	l := &e.loop
	if l.stopping {
		t.Stop()
		return
	}
	wake, ok := l.core.NextWake()
	if !ok {
		t.Stop()
		return
	}
	d := wake.Sub(e.cfg.Now())
	if d < 0 {
		d = 0
	}
	t.Reset(d)
}

// finish fails everything still held or waiting and ends the engine: held
// answers of entries that were appended and may still commit get
// ErrOutcomeUnknown, everything else ErrStopped; dispatches and events of
// unreleased steps are dropped.
func (e *Engine) finish(cause error) {
	l := &e.loop
	l.stopping = true
	if cause != nil {
		e.logger.Warn("engine stopped by a commit failure", "error", cause)
	} else {
		e.logger.Debug("engine stopped")
	}
	e.setErr(cause)
	e.running.Store(false)

	stopped := ErrStopped
	if cause != nil {
		stopped = fmt.Errorf("%w: %w", ErrStopped, cause)
	}
	unresolved := cause
	if unresolved == nil {
		unresolved = errUnresolved
	}
	unknown := fmt.Errorf("%w: %w", ErrOutcomeUnknown, unresolved)
	for _, s := range l.held {
		err := stopped
		if len(s.out.Mutations) > 0 && s.entry != nil && !s.entry.rejected {
			err = unknown
		}
		for _, r := range s.out.Replies {
			e.answer(r.Req, nil, err)
		}
		for _, d := range s.out.Dispatches {
			e.answer(d.Req, nil, err)
		}
	}
	for id, c := range l.calls {
		delete(l.calls, id)
		c.reply <- answer{slot: c.slot, err: stopped}
	}
	l.held, l.unsent, l.inflight = nil, nil, nil
	e.stats.requests.Store(0)
	e.stats.queued.Store(0)
	e.stats.queuedBytes.Store(0)
	e.saturated.Store(false)
	e.stats.inFlight.Store(0)

	l.resolver.stop()
	e.hub.close()
	close(e.done)
}
