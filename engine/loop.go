package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// loopState is everything the loop goroutine owns.
type loopState struct {
	core    *core.Core
	waiter  *waiter
	reqs    map[core.ReqID]*request // requests not answered yet
	nextReq core.ReqID

	// order holds every unreleased group in production order; unsent the
	// groups with mutations not yet appended; inflight the appended entries
	// not yet resolved, in append order.
	order    []*group
	unsent   []*group
	inflight []*batch

	seq      uint64 // of the last appended entry
	lastTime int64  // batch time of the last entry: batch times never go back
	stopping bool
}

// group is the output of one or more core steps: its mutations commit in
// one entry and its held actions are released once that entry (and every
// entry before it) is applied.
type group struct {
	muts  []fsm.Mutation
	held  []core.Action
	size  int    // estimated encoded size of muts
	batch *batch // the entry it went into; nil until appended
}

// batch is one appended entry.
type batch struct {
	seq      uint64
	muts     int
	bytes    int
	applied  bool
	rejected bool // definitely not applied (fenced or refused by the FSM)
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
		case r := <-e.in:
			e.handle(r)
		drain:
			for i := 1; i < maxDrain; i++ {
				select {
				case r = <-e.in:
					e.handle(r)
				default:
					break drain
				}
			}
		case res := <-l.waiter.results:
			if cause = e.resolved(res); cause != nil {
				break loop
			}
		case <-timer.C:
			if !l.stopping {
				l.core.Tick(e.cfg.Now())
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
			if cause = e.flush(); cause != nil {
				break loop
			}
		}
		e.arm(timer)
		e.stats.requests.Store(int64(len(l.reqs)))
	}
	e.finish(cause)
}

// handle runs one request through the core and collects its output: each
// step forms its own group, so that entries can be cut between steps.
func (e *Engine) handle(r *request) {
	if r.op == opMany {
		for _, p := range r.parts {
			e.handle(p)
		}
		return
	}
	e.step(r)
	if !e.loop.stopping {
		e.collect()
	}
}

func (e *Engine) step(r *request) {
	l := &e.loop
	if r.op == opDetach {
		e.detach(r.target, r.cause)
		return
	}
	if l.stopping {
		r.reply <- response{err: ErrStopped}
		return
	}
	now := e.cfg.Now()
	switch r.op {
	case opHeartbeat:
		errs := make([]error, len(r.leases))
		for i, lease := range r.leases {
			errs[i] = l.core.Heartbeat(now, lease)
		}
		r.reply <- response{errs: errs}
		return
	case opCoreStats:
		st := l.core.Stats()
		r.reply <- response{stats: &st}
		return
	}
	l.nextReq++
	r.id = l.nextReq
	l.reqs[r.id] = r
	switch r.op {
	case opSubmit:
		l.core.Submit(now, r.id, r.mode, r.specs)
	case opPoll:
		l.core.Poll(now, r.id, r.offer)
	case opComplete:
		l.core.Complete(now, r.id, r.lease, r.outcome)
	case opCancel:
		l.core.Cancel(now, r.id, r.ref)
	case opWait:
		l.core.Attach(now, r.id, r.ref)
	case opAddSchedule:
		l.core.AddSchedule(now, r.id, r.sched)
	case opRemoveSchedule:
		l.core.RemoveSchedule(now, r.id, r.name)
	case opPauseSchedule:
		l.core.PauseSchedule(now, r.id, r.name, r.paused)
	default:
		delete(l.reqs, r.id)
		r.reply <- response{err: fmt.Errorf("engine: unknown request kind %d", r.op)}
	}
}

// detach drops a request whose caller went away. If its answer is already
// held with a group, the request has taken effect (or will, or may): a
// mutating request learns that its outcome is unknown. Otherwise the core
// forgets it (a parked submitter, an open poll, a waiter).
func (e *Engine) detach(r *request, cause error) {
	l := &e.loop
	if r.id == 0 || l.reqs[r.id] != r {
		return // answered already
	}
	delete(l.reqs, r.id)
	err := cause
	switch {
	case r.held && r.op.mutates():
		err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)
	case r.held || l.stopping:
	case r.op == opPoll:
		l.core.CancelPoll(r.id)
	default:
		l.core.Detach(r.id)
	}
	r.reply <- response{err: err}
}

// collect takes the core's output: immediate actions run now; mutations and
// held actions form a group, released at once when it has no mutations and
// nothing is ahead of it.
func (e *Engine) collect() {
	l := &e.loop
	out := l.core.Ready()
	for _, a := range out.Immediate {
		e.perform(a)
	}
	if len(out.Mutations) == 0 && len(out.Held) == 0 {
		return
	}
	if len(out.Mutations) == 0 && len(l.order) == 0 {
		for _, a := range out.Held {
			e.perform(a)
		}
		l.core.Recycle(out.Held)
		return
	}
	g := &group{muts: out.Mutations, held: out.Held}
	e.ackEarly(g)
	for _, a := range out.Held {
		if a.Kind != core.ActReply && a.Kind != core.ActDispatch {
			continue
		}
		if r := l.reqs[a.Req]; r != nil {
			r.held = true
		}
	}
	l.order = append(l.order, g)
	if len(g.muts) > 0 {
		g.size = mutationsSize(g.muts)
		l.unsent = append(l.unsent, g)
		e.stats.queued.Add(1)
	}
}

// perform carries out one action.
func (e *Engine) perform(a core.Action) {
	l := &e.loop
	switch a.Kind {
	case core.ActReply, core.ActDispatch:
		r := l.reqs[a.Req]
		if r == nil {
			if len(a.Grants) > 0 {
				e.stats.droppedDispatches.Add(uint64(len(a.Grants)))
				e.logger.Debug("dispatch dropped: the poller went away", "grants", len(a.Grants))
			}
			return
		}
		delete(l.reqs, a.Req)
		e.stats.count(r.op, &a)
		a.Err = stoppedIfShuttingDown(a.Err)
		if len(a.Errs) > 0 {
			errs := make([]error, len(a.Errs))
			for i, err := range a.Errs {
				errs[i] = stoppedIfShuttingDown(err)
			}
			a.Errs = errs
		}
		r.reply <- response{act: a, err: a.Err}
	case core.ActAbort:
		if e.cfg.OnAbort != nil {
			e.cfg.OnAbort(a.Worker, a.Lease, a.Reason)
		}
	case core.ActEvent:
		e.hub.publish(a.Event)
	}
}

// stoppedIfShuttingDown makes the core's "shutting down" an ErrStopped as
// well, so callers test one error for "retry elsewhere".
func stoppedIfShuttingDown(err error) error {
	if errors.Is(err, core.ErrShuttingDown) && !errors.Is(err, ErrStopped) {
		return fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return err
}

// release performs the held actions of every group at the front whose
// entry is applied (or that has no mutations), in order.
func (e *Engine) release() {
	l := &e.loop
	for len(l.order) > 0 {
		g := l.order[0]
		if len(g.muts) > 0 && (g.batch == nil || !g.batch.applied) {
			return
		}
		l.order[0] = nil
		l.order = l.order[1:]
		for _, a := range g.held {
			e.perform(a)
		}
		l.core.Recycle(g.held)
		g.held = nil
	}
}

// flush appends entries while there are groups to commit and room in flight.
func (e *Engine) flush() error {
	l := &e.loop
	for len(l.unsent) > 0 && len(l.inflight) < e.cfg.MaxInFlight {
		if err := e.appendBatch(); err != nil {
			return err
		}
	}
	return nil
}

// appendBatch cuts one entry from the front of unsent and appends it. Groups
// are taken whole while the entry stays under MaxBatchBytes; a group larger
// than that goes alone.
func (e *Engine) appendBatch() error {
	l := &e.loop
	limit := e.cfg.MaxBatchBytes
	n, size := 0, batchOverhead
	for n < len(l.unsent) {
		s := l.unsent[n].size
		if n > 0 && size+s > limit {
			break
		}
		size += s
		n++
	}
	t := fsm.Nanos(e.cfg.Now())
	if t < l.lastTime {
		t = l.lastTime
	}
	var (
		data  []byte
		nmuts int
	)
	for {
		muts := l.unsent[0].muts
		if n > 1 {
			muts = nil
			for _, g := range l.unsent[:n] {
				muts = append(muts, g.muts...)
			}
		}
		var err error
		data, err = fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: l.core.Epoch(), Time: t, Mutations: muts})
		if err != nil {
			return fmt.Errorf("encoding batch %d: %w", l.seq+1, err)
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
		return fmt.Errorf("appending batch %d: %w", l.seq+1, err)
	}
	l.seq++
	l.lastTime = t
	b := &batch{seq: l.seq, muts: nmuts, bytes: len(data)}
	for i, g := range l.unsent[:n] {
		g.batch = b
		l.unsent[i] = nil
	}
	l.unsent = l.unsent[n:]
	l.inflight = append(l.inflight, b)
	e.stats.queued.Add(-int64(n))
	e.stats.inFlight.Add(1)
	e.stats.batches.Add(1)
	e.stats.mutations.Add(uint64(nmuts))
	e.stats.batchBytes.Add(uint64(len(data)))
	l.waiter.items <- waitItem{seq: b.seq, pending: p, at: time.Now()}
	return nil
}

// resolved takes the outcome of the oldest entry in flight. A failure is
// returned: it stops the engine.
func (e *Engine) resolved(res waitResult) error {
	l := &e.loop
	if len(l.inflight) == 0 || l.inflight[0].seq != res.seq {
		return fmt.Errorf("engine: outcome of batch %d out of order", res.seq)
	}
	b := l.inflight[0]
	l.inflight[0] = nil
	l.inflight = l.inflight[1:]
	e.stats.inFlight.Add(-1)
	if e.cfg.OnCommit != nil {
		e.cfg.OnCommit(CommitInfo{Mutations: b.muts, Bytes: b.bytes, Latency: res.latency, Err: res.err})
	}
	if res.err == nil {
		b.applied = true
		e.stats.committed.Add(1)
		e.stats.commitNanos.Add(int64(res.latency))
		e.release()
		return nil
	}
	var rejected *fsm.RejectedError
	switch {
	case errors.Is(res.err, fsm.ErrStaleEpoch):
		// Epochs only grow: every later entry of this engine is fenced too.
		b.rejected = true
		for _, o := range l.inflight {
			o.rejected = true
		}
		return fmt.Errorf("batch %d fenced: %w", b.seq, res.err)
	case errors.As(res.err, &rejected):
		b.rejected = true
		return fmt.Errorf("batch %d rejected: %w", b.seq, res.err)
	default:
		return fmt.Errorf("committing batch %d: %w", b.seq, res.err)
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
// unreleased groups are dropped.
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
	for _, g := range l.order {
		err := stopped
		if len(g.muts) > 0 && g.batch != nil && !g.batch.rejected {
			err = unknown
		}
		for _, a := range g.held {
			if a.Kind != core.ActReply && a.Kind != core.ActDispatch {
				continue
			}
			if r := l.reqs[a.Req]; r != nil {
				delete(l.reqs, a.Req)
				r.reply <- response{err: err}
			}
		}
	}
	for id, r := range l.reqs {
		delete(l.reqs, id)
		r.reply <- response{err: stopped}
	}
	l.order, l.unsent, l.inflight = nil, nil, nil
	e.stats.requests.Store(0)
	e.stats.queued.Store(0)
	e.stats.inFlight.Store(0)

	l.waiter.stop()
	e.hub.close()
	close(e.done)
}
