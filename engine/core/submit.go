package core

import (
	"container/list"
	"fmt"
	"slices"
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// unit is what admission handles as a whole: a single submit, an atomic
// batch, or one item of an enqueue-many request.
type unit struct {
	req   ReqID
	specs []*fsm.Task // validated templates (no id, times of submission or status yet)
	batch bool        // errors are reported for the whole request
	group *manyGroup  // set for an enqueue-many item
	slot  int         // the item's index in its group
	pairs []pairKey   // distinct (pool, class) of specs, sorted
	elem  *list.Element
}

// manyGroup collects the per-item results of an enqueue-many request, which
// is answered once every item is admitted or refused.
type manyGroup struct {
	req       ReqID
	subs      []Submitted
	errs      []error
	remaining int
}

func (c *Core) checkPool(name string) error {
	if name == "" {
		return Invalid("pool", "must not be empty")
	}
	if c.cfg.FixedPools {
		if _, ok := c.cfg.Pools[name]; !ok {
			return Invalid("pool", "unknown pool %q", name)
		}
	}
	return nil
}

// checkTemplate validates what a submit and a schedule template share and
// fills rec with the normalised values.
func (c *Core) checkTemplate(s *Spec, rec *fsm.Task) error {
	if err := c.checkPool(s.Pool); err != nil {
		return err
	}
	switch {
	case s.Kind == "":
		return Invalid("kind", "must not be empty")
	case len(s.Kind) > c.cfg.MaxKindLen:
		return Invalid("kind", "%d bytes exceeds the limit of %d", len(s.Kind), c.cfg.MaxKindLen)
	case s.Priority >= fsm.NumPriorities:
		return Invalid("priority", "unknown class %d", s.Priority)
	case len(s.Payload) > c.cfg.MaxPayload:
		return Invalid("payload", "%d bytes exceeds the limit of %d", len(s.Payload), c.cfg.MaxPayload)
	case s.Timeout < 0:
		return Invalid("timeout", "must not be negative")
	}
	labels, err := normalizeKVs("labels", s.Labels)
	if err != nil {
		return err
	}
	tags, err := normalizeKVs("tags", s.Tags)
	if err != nil {
		return err
	}
	rec.Pool = s.Pool
	rec.Kind = s.Kind
	rec.Priority = s.Priority
	rec.Payload = slices.Clone(s.Payload)
	rec.Labels = labels
	rec.Tags = tags
	rec.Timeout = int64(s.Timeout)
	rec.MaxAttempts = s.MaxAttempts
	if rec.MaxAttempts == 0 {
		rec.MaxAttempts = c.cfg.MaxAttempts
	}
	return nil
}

// prepare validates a spec and resolves its defaults into a task template.
func (c *Core) prepare(s *Spec) (*fsm.Task, error) {
	rec := &fsm.Task{Key: s.Key}
	if err := c.checkTemplate(s, rec); err != nil {
		return nil, err
	}
	var runAt int64
	switch {
	case !s.RunAt.IsZero() && s.Delay != 0:
		return nil, Invalid("run_at", "run_at and delay are exclusive")
	case s.Delay < 0:
		return nil, Invalid("delay", "must not be negative")
	case !s.RunAt.IsZero():
		runAt = fsm.Nanos(s.RunAt)
	default:
		runAt = addSat(c.now, int64(s.Delay))
	}
	if !s.Deadline.IsZero() {
		dl := fsm.Nanos(s.Deadline)
		switch {
		case dl <= c.now:
			return nil, Invalid("deadline", "already passed")
		case dl <= runAt:
			return nil, Invalid("deadline", "must be after the run-at time")
		}
		rec.Deadline = dl
	}
	rec.RunAt = runAt
	bo := c.cfg.Backoff
	if s.Backoff != nil {
		bo = *s.Backoff
		if bo.Max == 0 {
			bo.Max = max(c.cfg.Backoff.Max, bo.Initial)
		}
		switch {
		case bo.Initial <= 0:
			return nil, Invalid("backoff", "initial delay must be positive")
		case bo.Max < bo.Initial:
			return nil, Invalid("backoff", "max delay must be at least the initial delay")
		case bo.Jitter < 0 || bo.Jitter >= 1:
			return nil, Invalid("backoff", "jitter must be in [0, 1)")
		}
	}
	rec.Backoff = bo
	return rec, nil
}

func indexed(i int, err error) error {
	if ie, ok := err.(*InvalidError); ok {
		return &InvalidError{Field: fmt.Sprintf("specs[%d].%s", i, ie.Field), Reason: ie.Reason}
	}
	return err
}

// Submit admits tasks. The reply (held) is an ActReply with, per mode:
//   - SubmitOne (exactly one spec): Submitted[0], or Err.
//   - SubmitBatch: Submitted for every spec, or Err for the whole batch
//     (an *InvalidError names the item as specs[i].field); nothing is
//     admitted then.
//   - SubmitMany: Submitted and Errs, one per spec (Submitted[i] is zero
//     where Errs[i] is set).
//
// Err is ErrShuttingDown for every form once Shutdown was called. A spec
// whose idempotency key names a live or retained task (or an earlier spec of
// the same request) is answered with that task's id and Duplicate, and
// changes nothing. When the pending bounds are full, OverflowReject answers
// ErrOverloaded; OverflowWait parks the request in FIFO order per (pool,
// class) until space frees, or answers ErrOverloaded at once if it could
// never fit even into empty queues. A parked request is dropped by Detach.
func (c *Core) Submit(now time.Time, req ReqID, mode SubmitMode, specs []Spec) {
	c.begin(now)
	defer c.flush()
	if c.shutdown {
		c.reply(req, Action{Err: ErrShuttingDown})
		return
	}
	switch mode {
	case SubmitOne:
		if len(specs) != 1 {
			c.reply(req, Action{Err: Invalid("specs", "exactly one spec expected, got %d", len(specs))})
			return
		}
		rec, err := c.prepare(&specs[0])
		if err != nil {
			c.reply(req, Action{Err: err})
			return
		}
		c.submitUnit(&unit{req: req, specs: []*fsm.Task{rec}})
	case SubmitBatch:
		recs := make([]*fsm.Task, len(specs))
		for i := range specs {
			rec, err := c.prepare(&specs[i])
			if err != nil {
				c.reply(req, Action{Err: indexed(i, err)})
				return
			}
			recs[i] = rec
		}
		c.submitUnit(&unit{req: req, specs: recs, batch: true})
	case SubmitMany:
		g := &manyGroup{req: req, subs: make([]Submitted, len(specs)), errs: make([]error, len(specs)), remaining: len(specs)}
		if len(specs) == 0 {
			c.reply(req, Action{Submitted: g.subs, Errs: g.errs})
			return
		}
		for i := range specs {
			u := &unit{req: req, group: g, slot: i}
			rec, err := c.prepare(&specs[i])
			if err != nil {
				c.resolve(u, nil, err)
				continue
			}
			u.specs = []*fsm.Task{rec}
			c.submitUnit(u)
		}
	default:
		c.reply(req, Action{Err: Invalid("mode", "unknown submit mode %d", mode)})
	}
}

// submitUnit admits u now, parks it, or refuses it.
func (c *Core) submitUnit(u *unit) {
	u.pairs = unitPairs(u.specs)
	if _, d := c.plan(u); len(d) == 0 {
		// Only duplicates: nothing to admit, no reason to wait in line.
		subs, _ := c.tryAdmit(u)
		c.resolve(u, subs, nil)
		return
	}
	if c.cfg.Overflow == OverflowWait && c.queuesBehind(u, c.parkedPairs) {
		if !c.fitsWhenEmpty(u) {
			c.resolve(u, nil, ErrOverloaded)
			return
		}
		c.park(u)
		return
	}
	if subs, ok := c.tryAdmit(u); ok {
		c.resolve(u, subs, nil)
		return
	}
	if c.cfg.Overflow == OverflowReject || !c.fitsWhenEmpty(u) {
		c.resolve(u, nil, ErrOverloaded)
		return
	}
	c.park(u)
}

func unitPairs(specs []*fsm.Task) []pairKey {
	var ps []pairKey
	for _, s := range specs {
		k := pairKey{s.Pool, s.Priority}
		if !slices.Contains(ps, k) {
			ps = append(ps, k)
		}
	}
	return ps
}

func (c *Core) queuesBehind(u *unit, blocked map[pairKey]int) bool {
	for _, k := range u.pairs {
		if blocked[k] > 0 {
			return true
		}
	}
	return false
}

// resolve answers u: with subs when admitted, else with err.
func (c *Core) resolve(u *unit, subs []Submitted, err error) {
	if g := u.group; g != nil {
		if err != nil {
			g.errs[u.slot] = err
		} else {
			g.subs[u.slot] = subs[0]
		}
		g.remaining--
		if g.remaining == 0 {
			// Released with the last item's batch, so every admitted item is durable.
			c.reply(g.req, Action{Submitted: g.subs, Errs: g.errs})
		}
		return
	}
	if err != nil {
		c.reply(u.req, Action{Err: err})
		return
	}
	c.reply(u.req, Action{Submitted: subs})
}

// delta is the number of new tasks per (pool, class) a unit would add, one
// entry per pair in order of appearance. It is a slice, not a map: a unit
// nearly always adds to a single pair, and admission runs for every submit.
type delta []pairCount

type pairCount struct {
	pair pairKey
	n    int
}

// add counts one more new task of pair.
func (d *delta) add(pair pairKey) {
	for i := range *d {
		if (*d)[i].pair == pair {
			(*d)[i].n++
			return
		}
	}
	*d = append(*d, pairCount{pair, 1})
}

// fits reports whether adding d to the current pending counts (or to empty
// queues) stays within every bound.
func (c *Core) fits(d delta, empty bool) bool {
	var global counts
	for _, pc := range d {
		global.add(pc.pair.class, pc.n)
	}
	within := func(cur, add, limit int) bool { return limit <= 0 || add == 0 || cur+add <= limit }
	cur := c.global
	if empty {
		cur = counts{}
	}
	if !within(cur.total, global.total, c.cfg.Global.MaxPending) {
		return false
	}
	for cl := range global.byClass {
		if !within(cur.byClass[cl], global.byClass[cl], c.cfg.Global.MaxPendingPerClass[cl]) {
			return false
		}
	}
	for i, first := range d {
		name := first.pair.pool
		if slices.ContainsFunc(d[:i], func(o pairCount) bool { return o.pair.pool == name }) {
			continue // counted with the pool's first pair
		}
		var add counts
		for _, pc := range d[i:] {
			if pc.pair.pool == name {
				add.add(pc.pair.class, pc.n)
			}
		}
		var pc counts
		var b Bounds
		if p, ok := c.pools[name]; ok {
			pc, b = p.pending, p.cfg.Bounds
		} else if pcfg, ok := c.cfg.Pools[name]; ok {
			b = pcfg.Bounds
		} else {
			b = c.cfg.DefaultPool.Bounds
		}
		if empty {
			pc = counts{}
		}
		if !within(pc.total, add.total, b.MaxPending) {
			return false
		}
		for cl := range add.byClass {
			if !within(pc.byClass[cl], add.byClass[cl], b.MaxPendingPerClass[cl]) {
				return false
			}
		}
	}
	return true
}

// planned says what admission does with one spec of a unit.
type planned struct {
	existing string // the key names this task already
	sameAs   int    // the key repeats that of this earlier spec of the unit (-1: no)
}

// plan sorts the specs of u into duplicates and new tasks, and counts the
// new ones per (pool, class). The plan is nil when every spec is new.
func (c *Core) plan(u *unit) ([]planned, delta) {
	var ps []planned
	dup := func(i int, p planned) {
		if ps == nil {
			ps = make([]planned, len(u.specs))
			for j := range ps {
				ps[j].sameAs = -1
			}
		}
		ps[i] = p
	}
	var d delta
	var seen map[string]int
	for i, s := range u.specs {
		if s.Key != "" {
			if t, ok := c.keys[s.Key]; ok {
				dup(i, planned{existing: t.id, sameAs: -1})
				continue
			}
			if j, ok := seen[s.Key]; ok {
				dup(i, planned{sameAs: j})
				continue
			}
			if len(u.specs) > 1 {
				if seen == nil {
					seen = make(map[string]int)
				}
				seen[s.Key] = i
			}
		}
		d.add(pairKey{s.Pool, s.Priority})
	}
	return ps, d
}

func (c *Core) fitsWhenEmpty(u *unit) bool {
	_, d := c.plan(u)
	return c.fits(d, true)
}

// tryAdmit inserts the tasks of u if they all fit the bounds.
func (c *Core) tryAdmit(u *unit) ([]Submitted, bool) {
	ps, d := c.plan(u)
	if !c.fits(d, false) {
		return nil, false
	}
	subs := make([]Submitted, len(u.specs))
	for i, s := range u.specs {
		switch {
		case ps == nil:
			subs[i] = Submitted{ID: c.insert(s).id}
		case ps[i].existing != "":
			subs[i] = Submitted{ID: ps[i].existing, Duplicate: true}
		case ps[i].sameAs >= 0:
			subs[i] = Submitted{ID: subs[ps[i].sameAs].ID, Duplicate: true}
		default:
			subs[i] = Submitted{ID: c.insert(s).id}
		}
	}
	return subs, true
}

// insert creates a task from a validated template.
func (c *Core) insert(tmpl *fsm.Task) *task {
	rec := *tmpl
	rec.ID = c.ids.next(uint64(c.now / int64(time.Millisecond)))
	rec.SubmittedAt = c.now
	rec.UpdatedAt = c.now
	rec.Status = fsm.StatusQueued
	if rec.RunAt > c.now {
		rec.Status = fsm.StatusScheduled
	}
	c.mutate(fsm.Mutation{Insert: &rec})
	t := c.track(&rec)
	c.event(t, "")
	return t
}

// track builds the in-memory task for a record (inserted now or recovered)
// and files it in the indexes, queues and timers its status needs.
func (c *Core) track(rec *fsm.Task) *task {
	t := &task{
		id:          rec.ID,
		pool:        c.getPool(rec.Pool),
		kind:        rec.Kind,
		key:         rec.Key,
		schedule:    rec.Schedule,
		prio:        rec.Priority,
		labels:      rec.Labels,
		sig:         labelSig(rec.Labels),
		runAt:       rec.RunAt,
		deadline:    rec.Deadline,
		timeout:     rec.Timeout,
		maxAttempts: rec.MaxAttempts,
		backoff:     rec.Backoff,
		attempt:     rec.Attempt,
		lastLease:   rec.LastLease,
		worker:      rec.Worker,
		startedAt:   rec.StartedAt,
		finishedAt:  rec.FinishedAt,
	}
	c.tasks[t.id] = t
	if t.key != "" {
		c.keys[t.key] = t
	}
	switch rec.Status {
	case fsm.StatusQueued:
		c.setStatus(t, fsm.StatusQueued)
		c.enqueue(t)
	case fsm.StatusScheduled, fsm.StatusRetrying:
		c.setStatus(t, rec.Status)
		c.timers.push(timer{when: t.runAt, kind: tmReady, id: t.id, gen: t.gen})
	case fsm.StatusRunning:
		t.lease = rec.Lease
		c.setStatus(t, fsm.StatusRunning)
		c.leases[t.lease] = t
		t.hbDeadline = addSat(c.now, int64(c.cfg.LeaseGrace))
		c.timers.push(timer{when: t.hbDeadline, kind: tmLease, id: t.id, gen: t.lease})
		if t.timeout > 0 {
			c.timers.push(timer{when: addSat(t.startedAt, t.timeout), kind: tmTimeout, id: t.id, gen: t.lease})
		}
	default: // terminal
		t.status = rec.Status
		c.purges.ReplaceOrInsert(purgeItem{at: addSat(t.finishedAt, int64(c.cfg.Retention)), id: t.id})
	}
	if t.deadline != 0 && !t.status.Terminal() {
		c.timers.push(timer{when: t.deadline, kind: tmDeadline, id: t.id})
	}
	return t
}

// park puts u at the end of the line of waiting submitters.
func (c *Core) park(u *unit) {
	u.elem = c.parked.PushBack(u)
	c.parkedByReq[u.req] = append(c.parkedByReq[u.req], u.elem)
	for _, k := range u.pairs {
		c.parkedPairs[k]++
	}
}

// unpark takes u out of the line (the caller fixes parkedByReq).
func (c *Core) unpark(e *list.Element) {
	u := c.parked.Remove(e).(*unit)
	for _, k := range u.pairs {
		if c.parkedPairs[k]--; c.parkedPairs[k] == 0 {
			delete(c.parkedPairs, k)
		}
	}
}

// retryParked admits waiting submitters in order while they fit. A unit
// never overtakes an earlier one still waiting on a (pool, class) it
// shares.
func (c *Core) retryParked() {
	blocked := make(map[pairKey]int)
	for e := c.parked.Front(); e != nil; {
		if len(blocked) == len(c.parkedPairs) {
			break // every (pool, class) still waited on is blocked: nobody else can go
		}
		next := e.Next()
		u := e.Value.(*unit)
		if !c.queuesBehind(u, blocked) {
			if subs, ok := c.tryAdmit(u); ok {
				c.unpark(e)
				c.dropParkedRef(u)
				c.resolve(u, subs, nil)
				e = next
				continue
			}
		}
		for _, k := range u.pairs {
			blocked[k]++
		}
		e = next
	}
}

func (c *Core) dropParkedRef(u *unit) {
	els := slices.DeleteFunc(c.parkedByReq[u.req], func(x *list.Element) bool { return x == u.elem })
	if len(els) == 0 {
		delete(c.parkedByReq, u.req)
	} else {
		c.parkedByReq[u.req] = els
	}
}
