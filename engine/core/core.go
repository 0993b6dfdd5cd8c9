package core

import (
	"container/list"
	"fmt"
	"time"

	"github.com/google/btree"

	"github.com/cronoq/cronoq/fsm"
)

// maxPurgePerTick bounds the retention purges of one call, so that a large
// backlog (after a long leader gap) is spread over several batches.
const maxPurgePerTick = 1000

// Core is the deterministic scheduler. It is not safe for concurrent use: one
// goroutine owns it, calls its methods with the current time and collects
// what they produced with Ready.
//
// The core's state is the durable state after every mutation it has emitted
// (committed or not) plus the in-memory parts that are never logged: lease
// deadlines, open polls, parked submitters, result waiters and timers.
type Core struct {
	cfg   Config
	epoch uint64
	now   fsm.Instant // latest instant seen; time never goes back inside the core

	rng      splitmix64
	ids      idGen
	leaseCtr uint64 // per-epoch lease counter (low 32 bits of a token)

	tasks  map[string]*task // live and retained terminal tasks
	keys   map[string]*task // idempotency key -> task
	leases map[uint64]*task // current lease -> running task

	// pastLeases maps every lease granted to its task; only the stale-lease
	// fault of the self-test builds fills it (see rememberLease).
	pastLeases map[uint64]string

	pools    map[string]*pool
	poolRecs map[string]*fsm.Pool // replicated pool settings, by pool
	nParked  int                  // parked tasks, in every pool
	dirty    []*pool              // pools whose polls may now be served
	global   counts
	timers   timerHeap
	purges   *btree.BTreeG[purgeItem]
	// ends holds the retention purges of the tasks that ended under this
	// core, in the order they are due (see purgeQueue); purges holds the
	// others: tasks recovered, retention put off, workflows.
	ends      purgeQueue
	schedules map[string]*schedule
	schedGen  uint64 // last generation handed to a schedule timer

	polls map[ReqID]*poll

	parked      *list.List // of *unit, FIFO
	parkedByReq map[ReqID][]*list.Element
	parkedPairs map[pairKey]int // (pool, class) -> parked units competing for it
	spaceFreed  bool

	waiting map[ReqID]*task // result waiters

	workflows map[string]*workflow // live and retained ended workflows
	wfKeys    map[string]*workflow // idempotency key -> workflow
	wfWaiting map[ReqID]*workflow  // workflow result waiters
	wfSettle  []*workflow          // workflows whose last live member ended in this step

	acl aclState // the replicated ACL objects, as far as changes to them need

	subs  map[string]*subscription // durable subscriptions, by name
	holds Holds                    // what retention waits for (nil: nothing)

	shutdown bool
	// clockHold: the driver does not trust the clock; heldTimers are the
	// due timers it keeps from running meanwhile (see SetClockHold).
	clockHold  bool
	heldTimers []timer

	out Output
	// Emptied slices of earlier outputs handed back by Recycle, reused by
	// later ones: growing fresh ones for every step was most of what the
	// core allocated.
	spareMutations  spares[fsm.Mutation]
	spareReplies    spares[Reply]
	spareDispatches spares[Dispatch]
	spareEvents     spares[Event]
}

// Bounds of the output slices the core keeps for reuse.
const (
	maxSpareCap = 1024
	maxSpares   = 64
)

// spares is a stack of emptied slices for reuse.
type spares[T any] [][]T

// get returns an empty slice kept for reuse, or nil when none is left:
// most steps append one or two elements, and appending to nil then costs
// less than a fresh slice with room for many (which, holding pointers and
// over 512 bytes, the runtime clears and types at every allocation).
func (s *spares[T]) get() []T {
	if n := len(*s); n > 0 {
		out := (*s)[n-1]
		*s = (*s)[:n-1]
		return out
	}
	return nil
}

// put keeps xs for reuse, if it is worth keeping.
func (s *spares[T]) put(xs []T) {
	if cap(xs) == 0 || cap(xs) > maxSpareCap || len(*s) >= maxSpares {
		return
	}
	clear(xs[:cap(xs)])
	*s = append(*s, xs[:0])
}

// counts are pending tasks by class.
type counts struct {
	total   int
	byClass [fsm.NumPriorities]int
}

func (c *counts) add(p fsm.Priority, n int) {
	c.total += n
	c.byClass[p] += n
}

type pairKey struct {
	pool  string
	class fsm.Priority
}

type purgeItem struct {
	at fsm.Instant
	id string
	wf bool // id names a workflow, purged with its members
}

// purgeQueue is a FIFO of the retention purges of tasks as they end: each
// is due at its end plus the retention, so they come due in the order they
// are pushed, and a queue holds them in less than a B-tree would (filled
// in that order, its nodes stay half empty). A purge is not taken out when
// its task is deleted or retried: it is checked when it comes due. It keeps
// its items in chunks of purgeChunk.
type purgeQueue struct {
	chunks [][]queuedPurge
	head   int // of chunks[0]
	n      int
}

type queuedPurge struct {
	at fsm.Instant
	id string
}

const purgeChunk = 512

// push appends a purge due at at, which is no earlier than any before it.
func (q *purgeQueue) push(at fsm.Instant, id string) {
	if len(q.chunks) == 0 || len(q.chunks[len(q.chunks)-1]) == purgeChunk {
		q.chunks = append(q.chunks, make([]queuedPurge, 0, purgeChunk))
	}
	last := &q.chunks[len(q.chunks)-1]
	*last = append(*last, queuedPurge{at: at, id: id})
	q.n++
}

// last is the due instant of the purge pushed last, if any is queued.
func (q *purgeQueue) last() (fsm.Instant, bool) {
	if q.n == 0 {
		return 0, false
	}
	l := q.chunks[len(q.chunks)-1]
	return l[len(l)-1].at, true
}

// peek is the purge due first.
func (q *purgeQueue) peek() (purgeItem, bool) {
	if q.n == 0 {
		return purgeItem{}, false
	}
	e := q.chunks[0][q.head]
	return purgeItem{at: e.at, id: e.id}, true
}

// pop drops the purge due first.
func (q *purgeQueue) pop() {
	first := q.chunks[0]
	first[q.head] = queuedPurge{}
	q.head++
	q.n--
	if q.head < len(first) {
		return
	}
	q.head = 0
	if len(q.chunks) == 1 && len(first) < purgeChunk {
		q.chunks[0] = first[:0] // empty: reuse it
		return
	}
	q.chunks[0] = nil
	q.chunks = q.chunks[1:]
}

// purgeEnded plans the retention purge of t, which ended now.
func (c *Core) purgeEnded(t *task) {
	at := c.now.Add(c.cfg.Retention)
	if last, ok := c.ends.last(); ok && at < last {
		c.purges.ReplaceOrInsert(purgeItem{at: at, id: t.id}) // never: time does not go back
		return
	}
	c.ends.push(at, t.id)
}

func purgeLess(a, b purgeItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.id < b.id
}

// task is the core's view of one task: what scheduling needs, without
// payload or output. What only a task that may still run needs is in its
// run, which a task that succeeded drops (see retire): the core keeps every
// ended task for its retention, and those are most of what it holds.
type task struct {
	id   string
	kind string
	key  string
	pool *pool

	// flow is its place in the dependency graph and its workflow: nil for
	// a task that has never been part of either, which keeps a plain
	// task's footprint as small as before workflows.
	flow *taskFlow
	keys *fsm.Keys // its ordering and concurrency keys (shared with its record); nil for none
	lane *lane     // its ordering lane while it is a live member or blocks it

	// run is nil once the task succeeded: nothing reads it then (a task
	// that succeeded is never dispatched, timed or retried again).
	*run

	attempt     uint32
	attemptBase uint32 // attempts started before an operator's retry: the budget counts from it
	lastLease   uint64
	finishedAt  fsm.Instant
	gen         uint64 // bumped at every status change (validates ready timers)

	status     fsm.Status
	prio       fsm.Priority
	gate       gate // where it waits while queued
	blocksLane bool // it ended blocking its lane
}

// run is what a task needs while it is live, and to be retried once it
// ended without succeeding.
type run struct {
	labels []fsm.KV
	sig    string

	runAt       fsm.Instant
	deadline    fsm.Instant
	timeout     time.Duration
	maxAttempts uint32
	backoff     fsm.Backoff

	lease      uint64
	worker     string
	startedAt  fsm.Instant
	hbDeadline fsm.Instant

	waiters []ReqID
}

// currentLease is t's current lease token, 0 for none.
func (t *task) currentLease() uint64 {
	if t.run == nil {
		return 0
	}
	return t.lease
}

// retire drops the run of a task that has succeeded, the only end that
// cannot be retried: from then on it is a small record for retention,
// dedup by key, dependencies and lookups.
func retire(t *task) {
	if t.status == fsm.StatusSucceeded && len(t.waiters) == 0 && t.lease == 0 {
		t.run = nil
	}
}

// orderingKey is t's ordering key, or "".
func (t *task) orderingKey() string {
	if t.keys == nil {
		return ""
	}
	return t.keys.Ordering
}

// concKey is t's concurrency key, or "".
func (t *task) concKey() string {
	if t.keys == nil {
		return ""
	}
	return t.keys.Concurrency
}

// taskFlow is what a task in the dependency graph or a workflow carries.
type taskFlow struct {
	deps           []string      // ids of its dependencies (fsm.Task.DependsOn)
	depPolicy      fsm.DepPolicy //
	external       bool
	purgeHeld      bool    // its retention ended while a dependent lived
	waitingOn      int     // dependencies not ended yet, while blocked
	liveDependents int     // dependents that have not ended: while any lives, it is not purged
	dependents     []*task // blocked tasks waiting for this one to end
	wf             *workflow
	step           string
}

// fl returns t's flow, giving t an empty one first.
func (t *task) fl() *taskFlow {
	if t.flow == nil {
		t.flow = &taskFlow{}
	}
	return t.flow
}

// inWorkflow is the workflow t belongs to, or nil.
func (t *task) inWorkflow() *workflow {
	if t.flow == nil {
		return nil
	}
	return t.flow.wf
}

// isExternal reports whether t is completed by an API call.
func (t *task) isExternal() bool { return t.flow != nil && t.flow.external }

// stepName is t's name in its workflow, or "".
func (t *task) stepName() string {
	if t.flow == nil {
		return ""
	}
	return t.flow.step
}

func (t *task) readyItem() readyItem {
	return readyItem{prio: t.prio, runAt: t.runAt, t: t}
}

// Stats is a snapshot of the core's sizes.
type Stats struct {
	Pending     int // blocked, scheduled, queued or retrying
	Queued      int // ready to dispatch
	Running     int
	Parked      int // submit requests (or enqueue-many items) waiting for space
	ParkedTasks int // tasks accepted as parked, waiting for space
	Polls       int // open long polls
	Leases      int // attempts holding a lease
	Waiters     int // result waiters
	Tasks       int // tasks known to the core, terminal ones included
	Schedules   int
	Workflows   int // workflows known to the core, ended ones included
	// Subscriptions are the durable subscriptions.
	Subscriptions int
	// InertSchedules are recovered schedules whose expression no longer
	// parses: they are kept but never fire.
	InertSchedules int
	Timers         int // timer entries, stale ones included
	ShuttingDown   bool
	// ClockHeld: recurring fires and lease expiries wait for the clock
	// (SetClockHold); HeldTimers of them came due meanwhile.
	ClockHeld  bool
	HeldTimers int
}

func newCore(cfg Config, epoch uint64) (*Core, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuring core: %w", err)
	}
	if epoch == 0 || epoch > 1<<32-1 {
		return nil, fmt.Errorf("configuring core: epoch %d out of range [1, 2^32)", epoch)
	}
	return &Core{
		cfg:         cfg,
		epoch:       epoch,
		rng:         splitmix64{s: cfg.Seed},
		ids:         idGen{epoch: uint32(epoch)},
		acl:         newACLState(),
		tasks:       make(map[string]*task),
		keys:        make(map[string]*task),
		leases:      make(map[uint64]*task),
		pools:       make(map[string]*pool),
		poolRecs:    make(map[string]*fsm.Pool),
		purges:      btree.NewG(32, purgeLess),
		schedules:   make(map[string]*schedule),
		polls:       make(map[ReqID]*poll),
		parked:      list.New(),
		parkedByReq: make(map[ReqID][]*list.Element),
		parkedPairs: make(map[pairKey]int),
		waiting:     make(map[ReqID]*task),
		workflows:   make(map[string]*workflow),
		wfKeys:      make(map[string]*workflow),
		wfWaiting:   make(map[ReqID]*workflow),
		subs:        make(map[string]*subscription),
	}, nil
}

// New returns an empty core for epoch (1 <= epoch < 2^32).
func New(cfg Config, epoch uint64, now time.Time) (*Core, error) {
	c, err := newCore(cfg, epoch)
	if err != nil {
		return nil, err
	}
	c.now = fsm.InstantOf(now)
	return c, nil
}

// Epoch returns the epoch the core stamps into ids and lease tokens.
func (c *Core) Epoch() uint64 { return c.epoch }

// Ready takes everything produced since the last call. The driver must
// commit the mutations of one Output in one log entry (outputs may be merged,
// never split: a recurring fire and the task it inserts must be durable
// together), in order after those of earlier outputs, and release the held
// replies, dispatches and events only once that entry is applied. Aborts
// take effect at once.
func (c *Core) Ready() Output {
	o := c.out
	c.out = Output{}
	return o
}

// Recycle hands back the slices of an Output whose mutations are encoded
// and whose actions have all been carried out, for the core to reuse. The
// caller must not touch them afterwards.
func (c *Core) Recycle(o *Output) {
	c.spareMutations.put(o.Mutations)
	o.Mutations = nil
	c.spareReplies.put(o.Replies)
	c.spareDispatches.put(o.Dispatches)
	c.spareEvents.put(o.Events)
	o.Replies, o.Dispatches, o.Events = nil, nil, nil
}

// SetLogVersion sets the newest log format every server of the cluster
// understands (see Config.LogVersion).
func (c *Core) SetLogVersion(v uint16) {
	c.cfg.LogVersion = min(max(v, 1), fsm.LogVersion)
}

// requireVersion refuses what with a *VersionError when it needs a log
// format newer than the cluster's.
func (c *Core) requireVersion(what string, need uint16) error {
	if need > c.cfg.LogVersion {
		return &VersionError{What: what, Need: need, Have: c.cfg.LogVersion}
	}
	return nil
}

// Stats returns the current sizes.
func (c *Core) Stats() Stats {
	s := Stats{
		Pending:       c.global.total,
		Parked:        c.parked.Len(),
		ParkedTasks:   c.nParked,
		Polls:         len(c.polls),
		Leases:        len(c.leases),
		Waiters:       len(c.waiting),
		Tasks:         len(c.tasks),
		Schedules:     len(c.schedules),
		Workflows:     len(c.workflows),
		Subscriptions: len(c.subs),
		Timers:        len(c.timers) + c.purges.Len() + c.ends.n + len(c.heldTimers),
		ShuttingDown:  c.shutdown,
		ClockHeld:     c.clockHold,
		HeldTimers:    len(c.heldTimers),
	}
	for _, p := range c.pools {
		s.Running += p.running
		s.Queued += p.queued
	}
	for _, sc := range c.schedules {
		if sc.expr == nil {
			s.InertSchedules++
		}
	}
	return s
}

// ---------------------------------------------------------------------------
// Output helpers
// ---------------------------------------------------------------------------

func (c *Core) mutate(m fsm.Mutation) {
	if c.out.Mutations == nil {
		c.out.Mutations = c.spareMutations.get()
	}
	c.out.Mutations = append(c.out.Mutations, m)
}

func (c *Core) abort(t *task, reason string) {
	c.out.Aborts = append(c.out.Aborts, Abort{Worker: t.worker, Lease: t.lease, Reason: reason})
}

// reply answers req with v (held).
func (c *Core) reply(req ReqID, v any) {
	if c.out.Replies == nil {
		c.out.Replies = c.spareReplies.get()
	}
	c.out.Replies = append(c.out.Replies, Reply{Req: req, Value: v})
}

// fail answers req with err (held).
func (c *Core) fail(req ReqID, err error) {
	if c.out.Replies == nil {
		c.out.Replies = c.spareReplies.get()
	}
	c.out.Replies = append(c.out.Replies, Reply{Req: req, Err: err})
}

// dispatch answers poll req with grants, or err (held).
func (c *Core) dispatch(req ReqID, grants []Grant, err error) {
	if c.out.Dispatches == nil {
		c.out.Dispatches = c.spareDispatches.get()
	}
	c.out.Dispatches = append(c.out.Dispatches, Dispatch{Req: req, Grants: grants, Err: err})
}

// event publishes t's current status (held).
func (c *Core) event(t *task, msg string) {
	if c.out.Events == nil {
		c.out.Events = c.spareEvents.get()
	}
	ev := Event{
		TaskID:  t.id,
		Pool:    t.pool.name,
		Kind:    t.kind,
		Status:  t.status,
		Attempt: t.attempt,
		Message: msg,
		At:      c.now,
		Step:    t.stepName(),
	}
	if w := t.inWorkflow(); w != nil {
		ev.Workflow = w.rec.ID
	}
	c.out.Events = append(c.out.Events, ev)
}

// wfEvent publishes w's current status (held).
func (c *Core) wfEvent(w *workflow, msg string) {
	if c.out.Events == nil {
		c.out.Events = c.spareEvents.get()
	}
	c.out.Events = append(c.out.Events, Event{
		Workflow:       w.rec.ID,
		Kind:           w.rec.Name,
		WorkflowStatus: w.rec.Status,
		Message:        msg,
		At:             c.now,
	})
}

// ---------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------

// begin moves the core's clock to now (never backwards) and runs every timer
// due by then, so that no command acts on a lease, deadline or run time that
// has already passed.
func (c *Core) begin(now time.Time) {
	if at := fsm.InstantOf(now); at > c.now {
		c.now = at
	}
	c.runTimers()
}

// Tick runs every timer due at or before now (at most maxPurgePerTick
// retention purges per call; NextWake then reports the rest as due).
func (c *Core) Tick(now time.Time) {
	c.begin(now)
	c.serve()
}

// NextWake returns the earliest pending timer, if any. It may be at or
// before the last now (more work due: call Tick again).
func (c *Core) NextWake() (time.Time, bool) {
	c.settleTop()
	var when fsm.Instant
	ok := false
	if len(c.timers) > 0 {
		when, ok = c.timers.top().when, true
	}
	if p, _, found := c.nextPurge(); found && (!ok || p.at < when) {
		when, ok = p.at, true
	}
	if !ok {
		return time.Time{}, false
	}
	return when.Time(), true
}

// settleTop drops obsolete timers from the top of the heap and moves lease
// timers whose deadline was extended by heartbeats, so that the top is a
// timer that will do something when it comes due.
func (c *Core) settleTop() {
	for len(c.timers) > 0 {
		tm := c.timers.top()
		if !c.timerValid(tm) {
			c.timers.pop()
			continue
		}
		if tm.kind == tmLease {
			t := c.tasks[tm.id]
			if t.hbDeadline > tm.when {
				c.timers.pop()
				c.timers.push(timer{when: t.hbDeadline, kind: tmLease, id: tm.id, gen: tm.gen})
				continue
			}
		}
		return
	}
}

func (c *Core) timerValid(tm timer) bool {
	switch tm.kind {
	case tmFire:
		s, ok := c.schedules[tm.id]
		return ok && s.gen == tm.gen && !s.rec.Paused && s.expr != nil
	case tmRate:
		return c.rateTimerValid(tm)
	case tmRedeliver:
		s, ok := c.subs[tm.id]
		return ok && s.gen == tm.gen
	}
	t, ok := c.tasks[tm.id]
	if !ok {
		return false
	}
	switch tm.kind {
	case tmDeadline:
		return !t.status.Terminal()
	case tmTimeout, tmLease:
		return t.status == fsm.StatusRunning && t.lease == tm.gen
	case tmReady:
		return (t.status == fsm.StatusScheduled || t.status == fsm.StatusRetrying) && t.gen == tm.gen
	}
	return false
}

// rateTimerValid reports whether a rate wake is still the pool's.
func (c *Core) rateTimerValid(tm timer) bool {
	p, ok := c.pools[tm.id]
	return ok && p.rateWake == tm.when
}

func (c *Core) runTimers() {
	for {
		c.settleTop()
		if len(c.timers) == 0 || c.timers.top().when > c.now {
			break
		}
		tm := c.timers.pop()
		if c.clockHold && heldByClock(tm.kind) {
			c.heldTimers = append(c.heldTimers, tm)
			continue
		}
		if tm.kind == tmRate {
			p := c.pools[tm.id]
			p.rateWake = 0
			c.markDirty(p)
			continue
		}
		if tm.kind == tmRedeliver {
			c.redeliver(c.subs[tm.id])
			continue
		}
		t := c.tasks[tm.id]
		switch tm.kind {
		case tmDeadline:
			c.expire(t)
		case tmTimeout:
			msg := fmt.Sprintf("attempt timed out after %s", t.timeout)
			c.abort(t, msg)
			c.failAttempt(t, msg, 0, fsm.AttemptTimeout)
		case tmLease:
			msg := fmt.Sprintf("lease lost: no heartbeat within %s", c.cfg.HeartbeatWindow)
			c.abort(t, msg)
			c.failAttempt(t, msg, 0, fsm.AttemptLost)
		case tmReady:
			c.mutate(fsm.Mutation{Ready: &fsm.Ready{ID: t.id, At: c.now}})
			c.setStatus(t, fsm.StatusQueued)
			c.enqueue(t)
		case tmFire:
			if !c.shutdown {
				c.fireSchedule(c.schedules[tm.id])
			}
		}
	}
	for n := 0; n < maxPurgePerTick; n++ {
		p, ended, ok := c.nextPurge()
		if !ok || p.at > c.now {
			break
		}
		if ended {
			c.ends.pop()
		} else {
			c.purges.DeleteMin()
		}
		if p.wf {
			if w := c.workflows[p.id]; w != nil { // a purge put off may meet another
				c.purgeWorkflow(w)
			}
			continue
		}
		// An operator may have deleted it, or retried it (and then it may
		// have ended again, with a purge of that end).
		t := c.tasks[p.id]
		if t != nil && t.status.Terminal() && (!ended || t.finishedAt.Add(c.cfg.Retention) == p.at) {
			c.purge(t)
		}
	}
}

// nextPurge is the retention purge due first, of ends or purges (ended:
// of ends).
func (c *Core) nextPurge() (p purgeItem, ended, ok bool) {
	p, ok = c.purges.Min()
	if e, found := c.ends.peek(); found && (!ok || purgeLess(e, p)) {
		return e, true, true
	}
	return p, false, ok
}

// serve ends the workflows whose members all ended and serves waiting polls
// and parked submitters, until none of them can make progress. Every
// command ends with it.
func (c *Core) serve() {
	for len(c.dirty) > 0 || c.spaceFreed || len(c.wfSettle) > 0 {
		c.settleWorkflows()
		c.dispatchDirty()
		if c.spaceFreed {
			c.spaceFreed = false
			c.admitParked()
			c.retryParked()
		}
	}
}

// ---------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------

// Shutdown stops admitting work: later submits, polls and schedule changes
// are refused with ErrShuttingDown, parked submitters and open polls are
// answered ErrShuttingDown now, and recurring schedules stop firing. Running
// attempts may still heartbeat and complete, and timers keep running.
func (c *Core) Shutdown(now time.Time) {
	c.begin(now)
	if c.shutdown {
		return
	}
	c.shutdown = true
	for e := c.parked.Front(); e != nil; e = e.Next() {
		u := e.Value.(*unit)
		c.answer(u, nil, ErrShuttingDown)
	}
	c.parked.Init()
	clear(c.parkedByReq)
	clear(c.parkedPairs)
	for _, p := range c.sortedPools() {
		for e := p.polls.Front(); e != nil; e = e.Next() {
			pl := e.Value.(*poll)
			c.dispatch(pl.req, nil, ErrShuttingDown)
			delete(c.polls, pl.req)
		}
		p.polls.Init()
	}
	c.dirty = c.dirty[:0]
}
