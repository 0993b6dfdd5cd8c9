package core

import (
	"container/list"
	"fmt"
	"slices"
	"time"

	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/units"
)

// unit is what admission handles as a whole: a single submit, an atomic
// batch, or one item of an enqueue-many request.
type unit struct {
	req   ReqID
	specs []*fsm.Task // validated templates (no id, times of submission or status yet)
	batch bool        // errors are reported for the whole request
	many  *manyReply  // set for an enqueue-many item
	slot  int         // the item's index in its request
	pairs []pairKey   // distinct (pool, class) of specs, in order of appearance
	elem  *list.Element

	// Dependencies of each spec (nil when no spec has any): references to
	// tasks, and indexes of earlier specs of the unit (workflow steps).
	refs     [][]TaskRef
	stepDeps [][]int
	// wf is set for a workflow submit: the unit's specs are its steps.
	wf *wfUnit
	// parking: its tasks are being inserted parked.
	parking bool

	// Room for the common case of one spec and for the answer, so that a
	// submit costs no allocations beyond its unit, its record and its id.
	one     [1]*fsm.Task
	onePair [1]pairKey
	res     SubmitResult
}

// single returns a unit of one spec.
func single(req ReqID, rec *fsm.Task, refs []TaskRef) *unit {
	u := &unit{req: req}
	u.one[0] = rec
	u.specs = u.one[:]
	if len(refs) > 0 {
		u.refs = [][]TaskRef{refs}
	}
	return u
}

// field is the prefix naming spec i in the unit's errors.
func (u *unit) field(i int) string {
	switch {
	case u.wf != nil:
		return fmt.Sprintf("steps[%d].", i)
	case u.batch:
		return fmt.Sprintf("specs[%d].", i)
	}
	return ""
}

// manyReply collects the per-item results of an enqueue-many request, which
// is answered once every item is admitted or refused.
type manyReply struct {
	req       ReqID
	res       *SubmitResult
	remaining int
}

func (c *Core) checkPool(name string) error {
	switch name {
	case "":
		return Invalid("pool", "must not be empty")
	case GlobalPool:
		return Invalid("pool", "%q names the cluster-wide settings, not a pool", GlobalPool)
	}
	if c.cfg.FixedPools {
		if _, ok := c.cfg.Pools[name]; !ok {
			return Invalid("pool", "unknown pool %q", name)
		}
	}
	return nil
}

// checkTemplate validates a template, as a submit or a schedule gives it,
// and returns it normalised (labels and tags sorted, payload copied). Zero
// fields stay zero: they mean "the default", resolved by resolve.
func (c *Core) checkTemplate(tpl *fsm.Template) (fsm.Template, error) {
	out := *tpl
	if err := c.checkPool(tpl.Pool); err != nil {
		return out, err
	}
	switch {
	case tpl.Kind == "":
		return out, Invalid("kind", "must not be empty")
	case len(tpl.Kind) > c.cfg.MaxKindLen:
		return out, Invalid("kind", "%s", units.TooBig(len(tpl.Kind), c.cfg.MaxKindLen))
	case tpl.Priority >= fsm.NumPriorities:
		return out, Invalid("priority", "unknown class %d", tpl.Priority)
	case len(tpl.Payload) > c.cfg.MaxPayload:
		return out, Invalid("payload", "%s", units.TooBig(len(tpl.Payload), c.cfg.MaxPayload))
	case tpl.Timeout < 0:
		return out, Invalid("timeout", "must not be negative")
	}
	if err := checkBackoff(tpl.Backoff); err != nil {
		return out, err
	}
	var err error
	if out.Labels, err = normalizeKVs("labels", tpl.Labels); err != nil {
		return out, err
	}
	if out.Tags, err = normalizeKVs("tags", tpl.Tags); err != nil {
		return out, err
	}
	if len(tpl.Payload) == 0 {
		out.Payload = nil
	} else {
		out.Payload = slices.Clone(tpl.Payload)
	}
	if !out.Keys.IsZero() {
		k := *out.Keys
		out.Keys = &k
	} else {
		out.Keys = nil
	}
	if err := c.checkPayload(&out); err != nil {
		return out, err
	}
	return out, nil
}

// resolve fills the zero fields of a checked template that have a default
// (max attempts, backoff), as a task record holds them.
func (c *Core) resolve(tpl fsm.Template) fsm.Template {
	// Defaults: the kind's, else the pool's, else the engine's.
	maxAttempts, backoff := c.cfg.MaxAttempts, c.cfg.Backoff
	pc := c.poolConfig(tpl.Pool)
	ks := pc.Kinds[tpl.Kind]
	for _, d := range []struct {
		attempts uint32
		bo       fsm.Backoff
	}{{pc.MaxAttempts, pc.Backoff}, {ks.MaxAttempts, ks.Backoff}} {
		if d.attempts > 0 {
			maxAttempts = d.attempts
		}
		if d.bo != (fsm.Backoff{}) {
			backoff = d.bo
			if backoff.Max == 0 {
				backoff.Max = max(c.cfg.Backoff.Max, backoff.Initial)
			}
		}
	}
	if tpl.Timeout == 0 {
		tpl.Timeout = ks.Timeout
	}
	if tpl.MaxAttempts == 0 {
		tpl.MaxAttempts = maxAttempts
	}
	if tpl.Backoff == (fsm.Backoff{}) {
		tpl.Backoff = backoff
	} else if tpl.Backoff.Max == 0 {
		tpl.Backoff.Max = max(backoff.Max, tpl.Backoff.Initial)
	}
	return tpl
}

// poolConfig is the configuration pool name runs with, without creating
// the pool.
func (c *Core) poolConfig(name string) PoolConfig {
	if p, ok := c.pools[name]; ok {
		return p.cfg
	}
	if rec := c.poolRecs[name]; rec != nil {
		return poolConfigOf(rec)
	}
	return c.agentPoolConfig(name)
}

// prepare validates a spec and resolves its defaults into a task template.
func (c *Core) prepare(s *Spec) (*fsm.Task, error) {
	tpl, err := c.checkTemplate(&s.Template)
	if err != nil {
		return nil, err
	}
	rec := &fsm.Task{Template: c.resolve(tpl), Key: s.Key}
	if s.External || s.DepPolicy != fsm.DepSucceeded {
		rec.Flow = &fsm.Flow{External: s.External, DepPolicy: s.DepPolicy}
	}
	if s.DepPolicy > fsm.DepDone {
		return nil, Invalid("dependency_policy", "unknown policy %d", s.DepPolicy)
	}
	for i, ref := range s.DependsOn {
		if err := ref.Check(); err != nil {
			return nil, prefixed(fmt.Sprintf("depends_on[%d].", i), err)
		}
	}
	need := rec.Version()
	if len(s.DependsOn) > 0 {
		need = max(need, 3)
	}
	if err := c.requireVersion("this task", need); err != nil {
		return nil, err
	}
	var runAt fsm.Instant
	switch {
	case s.RunAt != 0 && s.Delay != 0:
		return nil, Invalid("run_at", "run_at and delay are exclusive")
	case s.Delay < 0:
		return nil, Invalid("delay", "must not be negative")
	case s.RunAt < 0:
		return nil, Invalid("run_at", "must be after 1970-01-01")
	case s.RunAt != 0:
		runAt = s.RunAt
	default:
		runAt = c.now.Add(s.Delay)
	}
	if dl := s.Deadline; dl != 0 {
		switch {
		case dl <= c.now:
			return nil, Invalid("deadline", "already passed")
		case dl <= runAt:
			return nil, Invalid("deadline", "must be after the run-at time")
		}
		rec.Deadline = dl
	}
	rec.RunAt = runAt
	return rec, nil
}

func indexed(i int, err error) error { return prefixed(fmt.Sprintf("specs[%d].", i), err) }

// Submit admits tasks. The reply (held) is a *SubmitResult with, per mode:
//   - SubmitOne (exactly one spec): Tasks[0], or Err.
//   - SubmitBatch: Tasks for every spec, or Err for the whole batch (an
//     *InvalidError names the item as specs[i].field); nothing is admitted
//     then.
//   - SubmitMany: Tasks and Errs, one per spec (Tasks[i] is zero where
//     Errs[i] is set).
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
	defer c.serve()
	if c.shutdown {
		c.fail(req, ErrShuttingDown)
		return
	}
	switch mode {
	case SubmitOne:
		if len(specs) != 1 {
			c.fail(req, Invalid("specs", "exactly one spec expected, got %d", len(specs)))
			return
		}
		rec, err := c.prepare(&specs[0])
		if err != nil {
			c.fail(req, err)
			return
		}
		c.submitUnit(single(req, rec, specs[0].DependsOn))
	case SubmitBatch:
		if len(specs) == 0 {
			c.fail(req, Invalid("specs", "at least one spec is required"))
			return
		}
		u := &unit{req: req, specs: make([]*fsm.Task, len(specs)), batch: true}
		for i := range specs {
			rec, err := c.prepare(&specs[i])
			if err != nil {
				c.fail(req, indexed(i, err))
				return
			}
			u.specs[i] = rec
			if len(specs[i].DependsOn) > 0 {
				if u.refs == nil {
					u.refs = make([][]TaskRef, len(specs))
				}
				u.refs[i] = specs[i].DependsOn
			}
		}
		c.submitUnit(u)
	case SubmitMany:
		if len(specs) == 0 {
			c.fail(req, Invalid("specs", "at least one spec is required"))
			return
		}
		g := &manyReply{req: req, res: &SubmitResult{Tasks: make([]Submitted, len(specs)), Errs: make([]error, len(specs))}, remaining: len(specs)}
		for i := range specs {
			rec, err := c.prepare(&specs[i])
			if err != nil {
				c.answer(&unit{req: req, many: g, slot: i}, nil, err)
				continue
			}
			u := single(req, rec, specs[i].DependsOn)
			u.many, u.slot = g, i
			c.submitUnit(u)
		}
	default:
		c.fail(req, Invalid("mode", "unknown submit mode %d", mode))
	}
}

// submitUnit admits u now, parks its tasks or its submitter, or refuses it,
// as its pools' overflow policy says (see overflowOf).
func (c *Core) submitUnit(u *unit) {
	if err := c.checkRefs(u); err != nil {
		c.answer(u, nil, err)
		return
	}
	u.pairs = unitPairs(u.onePair[:0], u.specs)
	if _, d := c.plan(u); len(d) == 0 {
		// Only duplicates: nothing to admit, no reason to wait in line.
		subs, _ := c.tryAdmit(u)
		c.answer(u, subs, nil)
		return
	}
	policy := c.overflowOf(u)
	switch {
	case policy == OverflowPark && c.parkedBehind(u):
		// Parked tasks of its (pool, class) go first.
		c.answer(u, c.admitUnit(u, true), nil)
		return
	case policy == OverflowWait && c.queuesBehind(u, c.parkedPairs):
		if !c.fitsWhenEmpty(u) {
			c.answer(u, nil, ErrOverloaded)
			return
		}
		c.park(u)
		return
	}
	if subs, ok := c.tryAdmit(u); ok {
		c.answer(u, subs, nil)
		return
	}
	switch {
	case policy == OverflowPark:
		c.answer(u, c.admitUnit(u, true), nil)
	case policy == OverflowReject || !c.fitsWhenEmpty(u):
		c.answer(u, nil, ErrOverloaded)
	default:
		c.park(u)
	}
}

// unitPairs appends the distinct (pool, class) pairs of specs to ps.
func unitPairs(ps []pairKey, specs []*fsm.Task) []pairKey {
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

// answer answers u: with subs when admitted, else with err.
func (c *Core) answer(u *unit, subs []Submitted, err error) {
	if u.wf != nil {
		c.answerWorkflow(u, subs, err)
		return
	}
	if g := u.many; g != nil {
		if err != nil {
			g.res.Errs[u.slot] = err
		} else {
			g.res.Tasks[u.slot] = subs[0]
		}
		g.remaining--
		if g.remaining == 0 {
			// Released with the last item's batch, so every admitted item is durable.
			c.reply(g.req, g.res)
		}
		return
	}
	if err != nil {
		c.fail(u.req, err)
		return
	}
	u.res.Tasks = subs
	c.reply(u.req, &u.res)
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
	gb := c.globalBounds()
	if !within(cur.total, global.total, gb.MaxPending) {
		return false
	}
	for cl := range global.byClass {
		if !within(cur.byClass[cl], global.byClass[cl], gb.MaxPendingPerClass[cl]) {
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

// checkRefs checks that the dependencies of u name tasks that exist: by
// id, or by key an earlier spec of u or an existing task.
func (c *Core) checkRefs(u *unit) error {
	for i, refs := range u.refs {
		for j, ref := range refs {
			if _, err := c.resolveDep(u, i, ref); err != nil {
				return prefixed(fmt.Sprintf("%sdepends_on[%d].", u.field(i), j), err)
			}
		}
	}
	return nil
}

// resolveDep finds the task (or earlier spec of u: its index) that ref, a
// dependency of spec i of u, names. It returns -1 and no error for an
// existing task, which resolveDepTask then looks up.
func (c *Core) resolveDep(u *unit, i int, ref TaskRef) (int, error) {
	if ref.ID != "" {
		if _, ok := c.tasks[ref.ID]; !ok {
			return -1, Invalid("id", "task %s does not exist (unknown, or purged)", ref.ID)
		}
		return -1, nil
	}
	for j := i - 1; j >= 0; j-- {
		if u.specs[j].Key == ref.Key {
			return j, nil
		}
	}
	if _, ok := c.keys[ref.Key]; !ok {
		return -1, Invalid("key", "no task has the key %q (unknown, or purged)", ref.Key)
	}
	return -1, nil
}

// tryAdmit inserts the tasks of u if they all fit the bounds.
func (c *Core) tryAdmit(u *unit) ([]Submitted, bool) {
	if u.wf != nil && u.wf.key != "" {
		if w := c.wfKeys[u.wf.key]; w != nil {
			// Submitted with the same key while this one waited for room.
			u.wf.dup = w
			return nil, true
		}
	}
	_, d := c.plan(u)
	if !c.fits(d, false) {
		return nil, false
	}
	return c.admitUnit(u, false), true
}

// admitUnit inserts the tasks of u (parked when park is set) and returns
// what each spec became.
func (c *Core) admitUnit(u *unit, park bool) []Submitted {
	if u.wf != nil && u.wf.key != "" && u.wf.dup == nil {
		if w := c.wfKeys[u.wf.key]; w != nil {
			u.wf.dup = w
			return nil
		}
	}
	ps, _ := c.plan(u)
	if u.wf != nil {
		u.wf.w = c.createWorkflow(u.wf.name, u.wf.key, "", 0, "")
	}
	u.parking = park
	subs := make([]Submitted, len(u.specs))
	for i, s := range u.specs {
		switch {
		case ps == nil:
			subs[i] = Submitted{ID: c.insertDeps(u, i, s, subs).id}
		case ps[i].existing != "":
			subs[i] = Submitted{ID: ps[i].existing, Duplicate: true}
		case ps[i].sameAs >= 0:
			subs[i] = Submitted{ID: subs[ps[i].sameAs].ID, Duplicate: true}
		default:
			subs[i] = Submitted{ID: c.insertDeps(u, i, s, subs).id}
		}
	}
	return subs
}

// insertDeps inserts spec i of u with its dependencies resolved (subs holds
// the ids of the specs before it).
func (c *Core) insertDeps(u *unit, i int, s *fsm.Task, subs []Submitted) *task {
	var deps []*task
	if u.refs != nil {
		for _, ref := range u.refs[i] {
			j, _ := c.resolveDep(u, i, ref) // checked by checkRefs in this step
			switch {
			case j >= 0:
				deps = append(deps, c.tasks[subs[j].ID])
			case ref.ID != "":
				deps = append(deps, c.tasks[ref.ID])
			default:
				deps = append(deps, c.keys[ref.Key])
			}
		}
	}
	if u.stepDeps != nil {
		for _, j := range u.stepDeps[i] {
			deps = append(deps, c.tasks[subs[j].ID])
		}
	}
	if u.wf != nil {
		return c.insertTask(s, deps, u.wf.w, "", u.parking)
	}
	return c.insertTask(s, deps, nil, "", u.parking)
}

// insert creates a task from a validated template.
func (c *Core) insert(tmpl *fsm.Task) *task {
	return c.insertMember(tmpl, nil, nil, "")
}

// insertMember creates a task from a validated template, waiting for deps,
// as a member of workflow w (nil: none), spawned by parent ("" = none). A
// task whose dependencies have not all ended is inserted blocked; one that
// can never run (a dependency that did not succeed, under policy
// succeeded) ends cancelled in the same commit.
func (c *Core) insertMember(tmpl *fsm.Task, deps []*task, w *workflow, parent string) *task {
	return c.insertTask(tmpl, deps, w, parent, false)
}

// insertTask is insertMember; with park, the task is inserted parked
// instead, and what its dependencies say is decided at its admission.
func (c *Core) insertTask(tmpl *fsm.Task, deps []*task, w *workflow, parent string, park bool) *task {
	rec := *tmpl
	rec.ID = c.ids.next(uint64(int64(c.now) / int64(time.Millisecond)))
	rec.SubmittedAt = c.now
	rec.UpdatedAt = c.now
	// The template's flow is shared with whoever holds the template: this
	// record gets its own, and none when it carries nothing.
	rec.Flow = nil
	flow := new(fsm.Flow) // on the stack unless kept
	if tmpl.Flow != nil {
		*flow = *tmpl.Flow
	}
	flow.Parent = parent
	if w != nil {
		flow.Workflow = w.rec.ID
	}
	var doomed *task // a dependency that ended without success, under policy succeeded
	waiting := false
	if len(deps) > 0 {
		flow.DependsOn = make([]string, 0, len(deps))
		// A fan-in continuation may name tens of thousands of children:
		// duplicates are found through a set once a scan would cost more.
		var seen map[string]struct{}
		if len(deps) > 16 {
			seen = make(map[string]struct{}, len(deps))
		}
		for _, d := range deps {
			if seen != nil {
				if _, dup := seen[d.id]; dup {
					continue
				}
				seen[d.id] = struct{}{}
			} else if slices.Contains(flow.DependsOn, d.id) {
				continue
			}
			flow.DependsOn = append(flow.DependsOn, d.id)
			switch {
			case !d.status.Terminal():
				waiting = true
			case d.status != fsm.StatusSucceeded && flow.DepPolicy == fsm.DepSucceeded && doomed == nil:
				doomed = d
			}
		}
	}
	if !flow.IsZero() {
		kept := *flow
		rec.Flow = &kept
	}
	switch {
	case park:
		rec.Status = fsm.StatusParked
		doomed = nil
	case waiting || doomed != nil:
		rec.Status = fsm.StatusBlocked
	case rec.RunAt > c.now:
		rec.Status = fsm.StatusScheduled
	default:
		rec.Status = fsm.StatusQueued
	}
	c.mutate(fsm.Mutation{Insert: &rec})
	t := c.track(&rec)
	c.event(t, "")
	switch {
	case doomed != nil:
		c.finish(t, fsm.StatusCancelled, nil, depMessage(doomed))
	case rec.Deadline != 0 && rec.Deadline <= c.now && !park:
		// Admitted after waiting for room past its deadline: it ends now,
		// before any poll can take it.
		c.expire(t)
	}
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
		prio:        rec.Priority,
		attempt:     rec.Attempt,
		attemptBase: rec.AttemptBase,
		lastLease:   rec.LastLease,
		finishedAt:  rec.FinishedAt,
		run: &run{
			labels:      rec.Labels,
			sig:         labelSig(rec.Labels),
			runAt:       rec.RunAt,
			deadline:    rec.Deadline,
			timeout:     rec.Timeout,
			maxAttempts: rec.MaxAttempts,
			backoff:     rec.Backoff,
			worker:      rec.Worker,
			startedAt:   rec.StartedAt,
		},
	}
	if f := rec.Flow; f != nil {
		t.flow = &taskFlow{deps: f.DependsOn, depPolicy: f.DepPolicy, external: f.External, step: f.Step}
	}
	if !rec.Keys.IsZero() {
		t.keys = rec.Keys
	}
	c.tasks[t.id] = t
	if t.key != "" {
		c.keys[t.key] = t
	}
	switch {
	case rec.Status == fsm.StatusParked:
	case !rec.Status.Terminal(), rec.BlocksLane:
		t.status = rec.Status // as a lane member (joinLane reads it)
		c.joinLane(t)
		t.status = fsm.StatusUnknown
	}
	switch rec.Status {
	case fsm.StatusQueued:
		c.setStatus(t, fsm.StatusQueued)
		c.enqueue(t)
	case fsm.StatusScheduled, fsm.StatusRetrying:
		c.setStatus(t, rec.Status)
		c.timers.push(timer{when: t.runAt, kind: tmReady, id: t.id, gen: t.gen})
	case fsm.StatusParked:
		c.setStatus(t, fsm.StatusParked)
		c.fileParked(t)
	case fsm.StatusRunning:
		t.lease = rec.Lease
		c.setStatus(t, fsm.StatusRunning)
		c.leases[t.lease] = t
		if k := t.concKey(); k != "" {
			t.pool.concGroup(k).running++
		}
		grace := c.cfg.LeaseGrace
		if g := t.pool.cfg.LeaseGrace; g > 0 {
			grace = g
		}
		t.hbDeadline = c.now.Add(grace)
		c.timers.push(timer{when: t.hbDeadline, kind: tmLease, id: t.id, gen: t.lease})
		if t.timeout > 0 {
			c.timers.push(timer{when: t.startedAt.Add(t.timeout), kind: tmTimeout, id: t.id, gen: t.lease})
		}
	case fsm.StatusBlocked:
		c.setStatus(t, fsm.StatusBlocked)
	default: // terminal
		t.status = rec.Status
		t.blocksLane = rec.BlocksLane
	}
	if wf := rec.Workflow(); wf != "" {
		c.join(t, c.workflows[wf])
	}
	if t.inWorkflow() == nil && t.status.Terminal() {
		c.purges.ReplaceOrInsert(purgeItem{at: t.finishedAt.Add(c.cfg.Retention), id: t.id})
	}
	c.linkDeps(t)
	if t.deadline != 0 && !t.status.Terminal() {
		c.timers.push(timer{when: t.deadline, kind: tmDeadline, id: t.id})
	}
	retire(t)
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
		if err := c.checkRefs(u); err != nil {
			// A dependency was purged while the submit waited.
			c.unpark(e)
			c.dropParkedRef(u)
			c.answer(u, nil, err)
			e = next
			continue
		}
		if !c.queuesBehind(u, blocked) {
			if subs, ok := c.tryAdmit(u); ok {
				c.unpark(e)
				c.dropParkedRef(u)
				c.answer(u, subs, nil)
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
