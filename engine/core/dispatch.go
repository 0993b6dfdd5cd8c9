package core

import (
	"container/list"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/cronoq/cronoq/fsm"
)

// pool is the runtime state of one pool.
type pool struct {
	name    string
	cfg     PoolConfig // in force: rec's, or the agent's defaults
	rec     *fsm.Pool  // replicated settings; nil when an operator set none
	pending counts
	queued  int // in the ready queues
	held    int // queued, held back by a lane or a concurrency key
	running int
	dirty   bool

	groups     map[string]*group // group key (labels, and a rate-limited kind) -> group with ready tasks
	groupOrder []*group          // the same groups, by key
	polls      *list.List        // of *poll, FIFO

	lanes     map[string]*lane      // ordering key -> lane with live or blocking tasks
	conc      map[string]*concGroup // concurrency key -> its counts
	rate      *bucket               // nil: no rate limit
	kindRates map[string]*bucket    // by kind
	rateWake  fsm.Instant           // a tmRate timer is pending for then

	parked  [fsm.NumPriorities]*btree.BTreeG[*task] // parked tasks by class, oldest first
	nParked int

	compiled map[string]*kindSchemas // the kinds' compiled schemas, by kind
}

// group holds the ready tasks of one pool that share a label set (a
// capacity group) and, for a kind with a rate limit, a kind, in dispatch
// order.
type group struct {
	sig    string
	labels []fsm.KV
	ready  *btree.BTreeG[readyItem]
	rate   *bucket // the kind's, when it has a rate limit
}

// readyItem orders ready tasks: priority class, then run-at, then id
// (submit order). It takes the id from its task, so that an item is 24
// bytes: a ready queue holds one per queued task, and B-tree nodes filled
// in submit order stay half empty. The task's priority and run-at do not
// change while it is in a queue (Delete finds it by them).
type readyItem struct {
	runAt fsm.Instant
	t     *task
	prio  fsm.Priority
}

func readyLess(a, b readyItem) bool {
	if a.prio != b.prio {
		return a.prio < b.prio
	}
	if a.runAt != b.runAt {
		return a.runAt < b.runAt
	}
	return a.t.id < b.t.id
}

// poll is an open long poll.
type poll struct {
	req    ReqID
	worker string
	pool   *pool
	labels []fsm.KV
	slots  int
	elem   *list.Element
}

func (c *Core) getPool(name string) *pool {
	if p, ok := c.pools[name]; ok {
		return p
	}
	p := &pool{name: name, groups: make(map[string]*group), polls: list.New()}
	cfg := c.agentPoolConfig(name)
	if rec := c.poolRecs[name]; rec != nil {
		p.rec = rec
		cfg = poolConfigOf(rec)
	}
	p.cfg = cfg
	p.rate = newBucket(Rate{Per: cfg.Rate, Burst: cfg.Burst})
	if len(cfg.KindRates) > 0 {
		p.kindRates = make(map[string]*bucket, len(cfg.KindRates))
		for k, r := range cfg.KindRates {
			p.kindRates[k] = newBucket(r)
		}
	}
	c.pools[name] = p
	return p
}

func (c *Core) sortedPools() []*pool {
	ps := make([]*pool, 0, len(c.pools))
	for _, p := range c.pools {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	return ps
}

func (c *Core) markDirty(p *pool) {
	if !p.dirty {
		p.dirty = true
		c.dirty = append(c.dirty, p)
	}
}

// labelSig is an injective encoding of a normalised label list.
func labelSig(kvs []fsm.KV) string {
	if len(kvs) == 0 {
		return ""
	}
	var b strings.Builder
	for _, kv := range kvs {
		b.WriteString(strconv.Itoa(len(kv.K)))
		b.WriteByte(':')
		b.WriteString(kv.K)
		b.WriteString(strconv.Itoa(len(kv.V)))
		b.WriteByte(':')
		b.WriteString(kv.V)
	}
	return b.String()
}

// labelsSubset reports whether every label of need is in have with the same
// value. Both lists are sorted by key with unique keys.
func labelsSubset(need, have []fsm.KV) bool {
	j := 0
	for _, kv := range need {
		for j < len(have) && have[j].K < kv.K {
			j++
		}
		if j == len(have) || have[j].K != kv.K || have[j].V != kv.V {
			return false
		}
		j++
	}
	return true
}

// normalizeKVs returns a sorted copy of kvs, or an error naming field for an
// empty or repeated key.
func normalizeKVs(field string, kvs []fsm.KV) ([]fsm.KV, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := slices.Clone(kvs)
	slices.SortStableFunc(out, func(a, b fsm.KV) int { return strings.Compare(a.K, b.K) })
	for i, kv := range out {
		if kv.K == "" {
			return nil, Invalid(field, "empty key")
		}
		if i > 0 && out[i-1].K == kv.K {
			return nil, Invalid(field, "duplicate key %q", kv.K)
		}
	}
	return out, nil
}

func (c *Core) dropGroup(p *pool, g *group) {
	delete(p.groups, g.sig)
	i := sort.Search(len(p.groupOrder), func(i int) bool { return p.groupOrder[i].sig >= g.sig })
	p.groupOrder = slices.Delete(p.groupOrder, i, i+1)
}

// room is how many more attempts the pool's hard cap allows.
func (p *pool) room() int {
	if p.cfg.MaxRunning <= 0 {
		return int(^uint(0) >> 1)
	}
	return max(0, p.cfg.MaxRunning-p.running)
}

// take leases up to slots ready tasks that capacity with labels can run, in
// dispatch order, and returns their grants. A paused pool grants nothing;
// rate limits grant what their buckets allow, and wake the pool's dispatch
// when they allow more.
func (c *Core) take(p *pool, worker string, labels []fsm.KV, slots int) []Grant {
	if p.cfg.Paused {
		return nil
	}
	n := min(slots, p.room(), p.queued)
	if n <= 0 {
		return nil
	}
	if a := p.rate.available(c.now); a < n {
		n = a
		if n == 0 {
			c.armRate(p, p.rate.next())
			return nil
		}
	}
	var usable []*group
	for _, g := range p.groupOrder {
		if !labelsSubset(g.labels, labels) {
			continue
		}
		if g.rate != nil && g.rate.available(c.now) == 0 {
			c.armRate(p, g.rate.next())
			continue
		}
		usable = append(usable, g)
	}
	var grants []Grant
	for len(grants) < n && len(usable) > 0 {
		best := -1
		var head readyItem
		for i, g := range usable {
			it, _ := g.ready.Min()
			if best < 0 || readyLess(it, head) {
				best, head = i, it
			}
		}
		g := usable[best]
		g.ready.DeleteMin()
		p.queued--
		setGate(head.t, gateNone)
		g.rate.take(c.now, 1)
		grants = append(grants, c.start(head.t, worker))
		switch {
		case g.ready.Len() == 0:
			c.dropGroup(p, g)
			usable = slices.Delete(usable, best, best+1)
		case g.rate != nil && g.rate.available(c.now) == 0:
			c.armRate(p, g.rate.next())
			usable = slices.Delete(usable, best, best+1)
		}
	}
	p.rate.take(c.now, len(grants))
	if p.rate != nil && p.queued > 0 && p.rate.available(c.now) == 0 {
		c.armRate(p, p.rate.next())
	}
	return grants
}

// start grants a lease on a queued task (already out of its ready queue).
func (c *Core) start(t *task, worker string) Grant {
	c.leaseCtr++
	lease := c.epoch<<32 | c.leaseCtr
	t.attempt++
	t.lease = lease
	t.lastLease = lease
	t.worker = worker
	t.startedAt = c.now
	t.hbDeadline = c.now.Add(c.cfg.HeartbeatWindow)
	c.concStarted(t)
	if l := t.lane; l != nil {
		l.active = t
		if bugLaneOverlap {
			c.bugReleaseNext(l)
		}
	}
	c.mutate(fsm.Mutation{Start: &fsm.Start{ID: t.id, Attempt: t.attempt, Lease: lease, Worker: worker, At: c.now}})
	c.setStatus(t, fsm.StatusRunning)
	c.leases[lease] = t
	c.rememberLease(lease, t.id)
	c.timers.push(timer{when: t.hbDeadline, kind: tmLease, id: t.id, gen: lease})
	if t.timeout > 0 {
		c.timers.push(timer{when: c.now.Add(t.timeout), kind: tmTimeout, id: t.id, gen: lease})
	}
	c.event(t, "")
	return Grant{ID: t.id, Lease: lease, Attempt: t.attempt}
}

// dispatchDirty serves the open polls of every pool that got ready tasks or
// free capacity, oldest poll first.
func (c *Core) dispatchDirty() {
	if len(c.dirty) == 0 {
		return
	}
	ps := c.dirty
	c.dirty = nil
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	for _, p := range ps {
		p.dirty = false
		for e := p.polls.Front(); e != nil && p.queued > 0 && p.room() > 0 && !p.cfg.Paused; {
			next := e.Next()
			pl := e.Value.(*poll)
			if grants := c.take(p, pl.worker, pl.labels, pl.slots); len(grants) > 0 {
				p.polls.Remove(e)
				delete(c.polls, pl.req)
				c.dispatch(pl.req, grants, nil)
			}
			e = next
		}
	}
}

// Poll offers capacity: worker can run up to offer.Slots more attempts of
// offer.Pool on capacity with offer.Labels. The poll is answered (held) by a
// Dispatch with between 1 and Slots grants as soon as a task can be leased;
// until then it stays open (a long poll) unless withdrawn with Detach. A
// refused poll is answered by a Dispatch with Err set (*InvalidError or
// ErrShuttingDown).
func (c *Core) Poll(now time.Time, req ReqID, offer Offer) {
	c.begin(now)
	defer c.serve()
	fail := func(err error) { c.dispatch(req, nil, err) }
	if c.shutdown {
		fail(ErrShuttingDown)
		return
	}
	if err := c.checkPool(offer.Pool); err != nil {
		fail(err)
		return
	}
	if offer.Slots <= 0 {
		fail(Invalid("slots", "must be positive"))
		return
	}
	labels, err := normalizeKVs("labels", offer.Labels)
	if err != nil {
		fail(err)
		return
	}
	if old, ok := c.polls[req]; ok {
		// A request id names one poll: a repeat replaces the open one.
		old.pool.polls.Remove(old.elem)
		delete(c.polls, req)
	}
	p := c.getPool(offer.Pool)
	if grants := c.take(p, offer.Worker, labels, offer.Slots); len(grants) > 0 {
		c.dispatch(req, grants, nil)
		return
	}
	pl := &poll{req: req, worker: offer.Worker, pool: p, labels: labels, slots: offer.Slots}
	pl.elem = p.polls.PushBack(pl)
	c.polls[req] = pl
}

// Heartbeat extends the heartbeat window of the attempt under lease to now +
// HeartbeatWindow (never shortening it). It returns ErrStaleLease if lease is not a current lease
// (never granted, already ended, revoked, or lost). Heartbeats are not
// logged.
func (c *Core) Heartbeat(now time.Time, lease uint64) error {
	c.begin(now)
	defer c.serve()
	t, ok := c.leases[lease]
	if !ok {
		return ErrStaleLease
	}
	// A heartbeat never shortens a window (a recovered lease's grace may
	// be longer than one heartbeat window).
	t.hbDeadline = max(t.hbDeadline, c.now.Add(c.cfg.HeartbeatWindow))
	return nil
}
