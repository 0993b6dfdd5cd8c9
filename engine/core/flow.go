package core

import (
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/google/btree"

	"github.com/cronoq/cronoq/fsm"
)

// Flow control: what decides whether a queued task may be dispatched now,
// beyond a worker's capacity.
//
// A queued task passes three gates in turn before it enters its pool's
// ready queues (where take finds it):
//
//   - its ordering lane (tasks of a pool with the same ordering key run one
//     at a time, in id order): only the lane's head passes, and none while
//     the lane is blocked;
//   - its concurrency key: at most the pool's limit of tasks with the same
//     key are running or ready at once;
//   - nothing else: rate limits and a paused pool act at take, on the
//     ready queues as a whole.
//
// Every gate is rebuilt from the tasks' records at recovery, so a new
// leader keeps the lanes' order, the keys' counts and the blocked lanes.

// gate says where a queued task waits.
type gate uint8

const (
	gateNone  gate = iota // not queued, or external
	gateReady             // in its pool's ready queues
	gateLane              // behind its lane's head, or in a blocked lane
	gateConc              // its concurrency key is at the pool's limit
)

// lane is the ordering lane of one key in one pool: its live members, and
// the one that started.
type lane struct {
	pool    *pool
	key     string
	members *btree.BTreeG[*task] // admitted live members, by id
	// active is the member that started (attempt > 0) and has not ended:
	// the head while it lives, whatever its id.
	active *task
	// blockedBy is the member that ended without success under policy
	// block; nil when the lane runs.
	blockedBy *task
}

func taskLess(a, b *task) bool { return a.id < b.id }

// setGate records where queued task t waits, keeping its pool's count of
// queued tasks held back by a gate.
func setGate(t *task, g gate) {
	held := func(g gate) bool { return g == gateLane || g == gateConc }
	if held(t.gate) && !held(g) {
		t.pool.held--
	} else if !held(t.gate) && held(g) {
		t.pool.held++
	}
	t.gate = g
}

// head is the task the lane lets run next: its active member, else the
// member with the smallest id; nil for an empty lane.
func (l *lane) head() *task {
	if l.active != nil {
		return l.active
	}
	h, _ := l.members.Min()
	return h
}

// concGroup counts the tasks of one concurrency key of a pool. The ones in
// the ready queues are the best of its queued tasks in dispatch order:
// a better one that arrives takes the place of the worst.
type concGroup struct {
	running int
	ready   *btree.BTreeG[readyItem] // in the ready queues
	waiting *btree.BTreeG[readyItem] // queued, held back by the limit
}

// bucket is a token bucket in the GCRA form: tat is the theoretical
// arrival time of the next dispatch; up to burst dispatches may be ahead
// of it. Time is passed in, so it replays alike.
type bucket struct {
	interval time.Duration // between two dispatches at the steady rate
	tau      time.Duration // how far ahead of the rate a burst may go
	tat      fsm.Instant
}

func newBucket(r Rate) *bucket {
	if r.Per <= 0 {
		return nil
	}
	interval := time.Duration(math.Ceil(float64(time.Second) / r.Per))
	burst := max(r.Burst, 1)
	return &bucket{interval: max(interval, 1), tau: time.Duration(burst-1) * max(interval, 1)}
}

// available is how many dispatches the bucket allows at now.
func (b *bucket) available(now fsm.Instant) int {
	if b == nil {
		return math.MaxInt
	}
	t := max(b.tat, now)
	ahead := now.Add(b.tau) - t // room left, in ns
	if ahead < 0 {
		return 0
	}
	return int(int64(ahead)/int64(b.interval)) + 1
}

// take records n dispatches at now.
func (b *bucket) take(now fsm.Instant, n int) {
	if b == nil || n == 0 {
		return
	}
	b.tat = max(b.tat, now).Add(time.Duration(n) * b.interval)
}

// next is when the bucket allows one more dispatch.
func (b *bucket) next() fsm.Instant { return b.tat.Add(-b.tau) }

// ---------------------------------------------------------------------------
// Pool settings
// ---------------------------------------------------------------------------

// agentPoolConfig is the configuration a pool without replicated settings
// runs with.
func (c *Core) agentPoolConfig(name string) PoolConfig {
	if cfg, ok := c.cfg.Pools[name]; ok {
		return cfg
	}
	return c.cfg.DefaultPool
}

// poolConfigOf is the configuration replicated settings give.
func poolConfigOf(rec *fsm.Pool) PoolConfig {
	cfg := PoolConfig{
		MaxRunning:       int(rec.MaxRunning),
		Overflow:         rec.Overflow,
		Rate:             rec.Rate,
		Burst:            int(rec.Burst),
		ConcurrencyLimit: int(rec.ConcurrencyLimit),
		Ordering:         rec.Ordering,
		MaxAttempts:      rec.MaxAttempts,
		Backoff:          rec.Backoff,
		LeaseGrace:       rec.LeaseGrace,
		Paused:           rec.Paused,
	}
	cfg.Bounds.MaxPending = int(rec.MaxPending)
	for i, n := range rec.MaxPendingPerClass {
		cfg.Bounds.MaxPendingPerClass[i] = int(n)
	}
	if len(rec.KindRates) > 0 {
		cfg.KindRates = make(map[string]Rate, len(rec.KindRates))
		for _, kr := range rec.KindRates {
			cfg.KindRates[kr.Kind] = Rate{Per: kr.Rate, Burst: int(kr.Burst)}
		}
	}
	if len(rec.Kinds) > 0 {
		cfg.Kinds = make(map[string]fsm.KindSettings, len(rec.Kinds))
		for _, k := range rec.Kinds {
			cfg.Kinds[k.Kind] = k
		}
	}
	return cfg
}

// poolRecord is the replicated record of cfg for pool name.
func poolRecord(name string, cfg PoolConfig) *fsm.Pool {
	rec := &fsm.Pool{
		Name:             name,
		MaxRunning:       int64(cfg.MaxRunning),
		MaxPending:       int64(cfg.Bounds.MaxPending),
		Overflow:         cfg.Overflow,
		Rate:             cfg.Rate,
		Burst:            int64(cfg.Burst),
		ConcurrencyLimit: int64(cfg.ConcurrencyLimit),
		Ordering:         cfg.Ordering,
		MaxAttempts:      cfg.MaxAttempts,
		Backoff:          cfg.Backoff,
		LeaseGrace:       cfg.LeaseGrace,
		Paused:           cfg.Paused,
	}
	if cfg.Bounds.MaxPendingPerClass != ([fsm.NumPriorities]int{}) {
		rec.MaxPendingPerClass = make([]int64, fsm.NumPriorities)
		for i, n := range cfg.Bounds.MaxPendingPerClass {
			rec.MaxPendingPerClass[i] = int64(n)
		}
	}
	for _, k := range sortedKeys(cfg.KindRates) {
		r := cfg.KindRates[k]
		rec.KindRates = append(rec.KindRates, fsm.KindRate{Kind: k, Rate: r.Per, Burst: int64(r.Burst)})
	}
	for _, k := range sortedKeys(cfg.Kinds) {
		rec.Kinds = append(rec.Kinds, cfg.Kinds[k])
	}
	return rec
}

// GlobalPool names the cluster-wide settings in SetPool and Pool: its
// pending bounds are the global ones (Config.Global until an operator sets
// them); no task may use it as its pool.
const GlobalPool = "*"

// globalBounds are the bounds on pending tasks across all pools in force:
// the replicated ones if an operator set them, else the agent's.
func (c *Core) globalBounds() Bounds {
	if rec := c.poolRecs[GlobalPool]; rec != nil {
		return poolConfigOf(rec).Bounds
	}
	return c.cfg.Global
}

// setGlobal applies a change of the cluster-wide settings: the global
// pending bounds, and nothing else.
func (c *Core) setGlobal(req ReqID, ch PoolChange) {
	if ch.MaxRunning != nil || ch.Overflow != nil || ch.Rate != nil || ch.Burst != nil || len(ch.KindRates) > 0 ||
		ch.ConcurrencyLimit != nil || ch.Ordering != nil || ch.MaxAttempts != nil || ch.Backoff != nil ||
		ch.LeaseGrace != nil || ch.Paused != nil {
		c.fail(req, Invalid("pool", "%q holds the global pending bounds only (max_pending, max_pending_per_class)", GlobalPool))
		return
	}
	cfg, err := applyChange(PoolConfig{Bounds: c.globalBounds()}, ch)
	if err != nil {
		c.fail(req, err)
		return
	}
	rec := poolRecord(GlobalPool, PoolConfig{Bounds: cfg.Bounds})
	rec.UpdatedAt = c.now
	c.mutate(fsm.Mutation{PutPool: rec})
	c.poolRecs[GlobalPool] = rec
	if c.parked.Len() > 0 || c.nParked > 0 {
		c.spaceFreed = true
	}
	c.reply(req, c.globalInfo())
}

// globalInfo describes the cluster-wide settings as a PoolInfo: the
// global bounds, and the pending tasks they count.
func (c *Core) globalInfo() PoolInfo {
	info := PoolInfo{Pool: GlobalPool, Config: PoolConfig{Bounds: c.globalBounds()}, Replicated: c.poolRecs[GlobalPool] != nil,
		Pending: c.global.total, Parked: c.nParked}
	for _, p := range c.pools {
		info.Queued += p.queued
		info.Running += p.running
		info.Waiting += p.held
	}
	return info
}

// concLimit is how many tasks of one concurrency key may run at once.
func (p *pool) concLimit() int { return max(p.cfg.ConcurrencyLimit, 1) }

// configure sets p's configuration and what follows from it: its rate
// buckets, and the ready queues regrouped when the kinds with a rate
// changed. Capacity, bounds or a resume may let more through.
func (c *Core) configure(p *pool, cfg PoolConfig) {
	old := p.cfg
	p.cfg = cfg
	p.compiled = nil // schemas are compiled again when first needed
	if cfg.Rate != old.Rate || cfg.Burst != old.Burst {
		p.rate = newBucket(Rate{Per: cfg.Rate, Burst: cfg.Burst})
	}
	if !maps.Equal(cfg.KindRates, old.KindRates) {
		p.kindRates = make(map[string]*bucket, len(cfg.KindRates))
		for k, r := range cfg.KindRates {
			p.kindRates[k] = newBucket(r)
		}
		c.regroup(p)
	}
	if cfg.ConcurrencyLimit != old.ConcurrencyLimit {
		c.balanceConc(p)
	}
	c.markDirty(p)
	if c.parked.Len() > 0 || p.nParked > 0 {
		c.spaceFreed = true
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// regroup files the ready tasks of p again, after the kinds with a rate
// limit changed (a rate-limited kind has groups of its own).
func (c *Core) regroup(p *pool) {
	var ready []*task
	for _, g := range p.groupOrder {
		g.ready.Ascend(func(it readyItem) bool {
			ready = append(ready, it.t)
			return true
		})
	}
	p.groups = make(map[string]*group)
	p.groupOrder = nil
	p.queued -= len(ready)
	for _, t := range ready {
		c.enqueueReady(t)
	}
}

// groupKey is the ready group of t: its label set, and its kind when the
// kind has a rate limit.
func (p *pool) groupKey(t *task) (string, *bucket) {
	if b := p.kindRates[t.kind]; b != nil {
		return t.sig + "\x00" + t.kind, b
	}
	return t.sig, nil
}

// PoolChange is an operator's change of a pool's settings: the fields set
// replace the pool's current settings, the others stay.
type PoolChange struct {
	Pool               string
	MaxRunning         *int
	MaxPending         *int
	MaxPendingPerClass map[fsm.Priority]int
	Overflow           *OverflowPolicy
	Rate               *float64
	Burst              *int
	// KindRates sets (a positive Per) or removes (zero) the rate of each
	// kind named.
	KindRates        map[string]Rate
	ConcurrencyLimit *int
	Ordering         *fsm.OrderingPolicy
	MaxAttempts      *uint32
	Backoff          *fsm.Backoff
	LeaseGrace       *time.Duration
	Paused           *bool
}

// Limits of pool settings.
const (
	minRate  = 0.001 // dispatches per second: one every 1000 s
	maxRate  = 1e9
	maxBurst = 1 << 20
)

func checkRate(field string, per float64, burst int) error {
	switch {
	case math.IsNaN(per) || per < 0 || (per > 0 && per < minRate) || per > maxRate:
		return Invalid(field, "%v: want 0 (none) or a rate in [%v, %v] per second", per, minRate, maxRate)
	case burst < 0 || burst > maxBurst:
		return Invalid(field, "burst %d: want 0 to %d", burst, maxBurst)
	}
	return nil
}

// applyChange returns cfg with ch applied, or an error naming the field.
func applyChange(cfg PoolConfig, ch PoolChange) (PoolConfig, error) {
	nonNeg := func(field string, v *int, dst *int) error {
		if v == nil {
			return nil
		}
		if *v < 0 {
			return Invalid(field, "must not be negative")
		}
		*dst = *v
		return nil
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"max_running", ch.MaxRunning, &cfg.MaxRunning},
		{"max_pending", ch.MaxPending, &cfg.Bounds.MaxPending},
		{"burst", ch.Burst, &cfg.Burst},
		{"concurrency_limit", ch.ConcurrencyLimit, &cfg.ConcurrencyLimit},
	} {
		if err := nonNeg(f.name, f.v, f.dst); err != nil {
			return cfg, err
		}
	}
	for _, cl := range slices.Sorted(maps.Keys(ch.MaxPendingPerClass)) {
		n := ch.MaxPendingPerClass[cl]
		if cl >= fsm.NumPriorities {
			return cfg, Invalid("max_pending_per_class", "unknown class %d", cl)
		}
		if n < 0 {
			return cfg, Invalid("max_pending_per_class", "must not be negative")
		}
		cfg.Bounds.MaxPendingPerClass[cl] = n
	}
	if ch.Overflow != nil {
		if !ch.Overflow.Valid() {
			return cfg, Invalid("overflow", "unknown policy %d", *ch.Overflow)
		}
		cfg.Overflow = *ch.Overflow
	}
	if ch.Rate != nil {
		cfg.Rate = *ch.Rate
	}
	if err := checkRate("rate", cfg.Rate, cfg.Burst); err != nil {
		return cfg, err
	}
	if len(ch.KindRates) > 0 {
		rates := make(map[string]Rate, len(cfg.KindRates)+len(ch.KindRates))
		for k, r := range cfg.KindRates {
			rates[k] = r
		}
		for _, k := range sortedKeys(ch.KindRates) {
			r := ch.KindRates[k]
			if k == "" {
				return cfg, Invalid("kind_rates", "empty kind")
			}
			if err := checkRate("kind_rates["+k+"]", r.Per, r.Burst); err != nil {
				return cfg, err
			}
			if r.Per == 0 {
				delete(rates, k)
			} else {
				rates[k] = r
			}
		}
		cfg.KindRates = rates
		if len(rates) == 0 {
			cfg.KindRates = nil
		}
	}
	if ch.Ordering != nil {
		if !ch.Ordering.Valid() {
			return cfg, Invalid("ordering", "unknown policy %d", *ch.Ordering)
		}
		cfg.Ordering = *ch.Ordering
	}
	if ch.MaxAttempts != nil {
		cfg.MaxAttempts = *ch.MaxAttempts
	}
	if ch.Backoff != nil {
		if err := checkBackoff(*ch.Backoff); err != nil {
			return cfg, err
		}
		cfg.Backoff = *ch.Backoff
	}
	if ch.LeaseGrace != nil {
		if *ch.LeaseGrace < 0 {
			return cfg, Invalid("lease_grace", "must not be negative")
		}
		cfg.LeaseGrace = *ch.LeaseGrace
	}
	if ch.Paused != nil {
		cfg.Paused = *ch.Paused
	}
	return cfg, nil
}

// SetPool changes a pool's settings through the log: every node keeps
// them, and every later leader applies them. The reply (held) is the
// pool's PoolInfo after the change. Refused: an unknown pool of a fixed
// list, a bad setting (*InvalidError), or a cluster that does not
// understand pool settings yet (*VersionError).
func (c *Core) SetPool(now time.Time, req ReqID, ch PoolChange) {
	c.begin(now)
	defer c.serve()
	if err := c.requireVersion("pool settings", 4); err != nil {
		c.fail(req, err)
		return
	}
	if ch.Pool == GlobalPool {
		c.setGlobal(req, ch)
		return
	}
	if err := c.checkPool(ch.Pool); err != nil {
		c.fail(req, err)
		return
	}
	p := c.getPool(ch.Pool)
	cfg, err := applyChange(p.cfg, ch)
	if err != nil {
		c.fail(req, err)
		return
	}
	rec := poolRecord(ch.Pool, cfg)
	rec.UpdatedAt = c.now
	c.mutate(fsm.Mutation{PutPool: rec})
	p.rec = rec
	c.configure(p, poolConfigOf(rec))
	c.reply(req, c.poolInfo(p))
}

// ---------------------------------------------------------------------------
// The gates
// ---------------------------------------------------------------------------

// enqueue makes a queued task dispatchable, through its gates (an external
// task waits for its completion instead).
func (c *Core) enqueue(t *task) {
	if l := t.lane; l != nil && (l.blockedBy != nil || l.head() != t) && !(bugLaneOverlap && l.active != nil && l.active != t) {
		setGate(t, gateLane)
		return
	}
	c.enqueueConc(t)
}

// enqueueConc passes t through its concurrency key (an external task, its
// lane's head, waits for its completion instead).
func (c *Core) enqueueConc(t *task) {
	if t.isExternal() {
		setGate(t, gateNone)
		return
	}
	if k := t.concKey(); k != "" {
		p := t.pool
		g := p.concGroup(k)
		it := t.readyItem()
		if g.running+g.ready.Len() >= p.concLimit() {
			worst, ok := g.ready.Max()
			if !ok || !readyLess(it, worst) {
				g.waiting.ReplaceOrInsert(it)
				setGate(t, gateConc)
				return
			}
			// t goes before the worst of the key's ready tasks, which
			// waits instead.
			c.unready(worst.t)
			g.ready.Delete(worst)
			g.waiting.ReplaceOrInsert(worst)
			setGate(worst.t, gateConc)
		}
		g.ready.ReplaceOrInsert(it)
	}
	c.enqueueReady(t)
}

// enqueueReady files t in its pool's ready queues.
func (c *Core) enqueueReady(t *task) {
	p := t.pool
	key, b := p.groupKey(t)
	g, ok := p.groups[key]
	if !ok {
		g = &group{sig: key, labels: t.labels, ready: btree.NewG(16, readyLess), rate: b}
		p.groups[key] = g
		i := sort.Search(len(p.groupOrder), func(i int) bool { return p.groupOrder[i].sig >= key })
		p.groupOrder = slices.Insert(p.groupOrder, i, g)
	}
	g.ready.ReplaceOrInsert(t.readyItem())
	setGate(t, gateReady)
	p.queued++
	c.markDirty(p)
}

// dequeue takes a queued task out of wherever it waits (it is being ended
// or moved).
func (c *Core) dequeue(t *task) {
	p := t.pool
	switch t.gate {
	case gateReady:
		c.unready(t)
		if k := t.concKey(); k != "" {
			cg := p.conc[k]
			cg.ready.Delete(t.readyItem())
			c.promoteConc(p, cg)
		}
	case gateConc:
		p.conc[t.concKey()].waiting.Delete(t.readyItem())
	}
	setGate(t, gateNone)
}

// unready takes t out of its pool's ready queues.
func (c *Core) unready(t *task) {
	p := t.pool
	key, _ := p.groupKey(t)
	g := p.groups[key]
	if _, ok := g.ready.Delete(t.readyItem()); ok {
		p.queued--
	}
	if g.ready.Len() == 0 {
		c.dropGroup(p, g)
	}
	setGate(t, gateNone)
}

// concGroup returns the group of key k, creating it.
func (p *pool) concGroup(k string) *concGroup {
	g := p.conc[k]
	if g == nil {
		if p.conc == nil {
			p.conc = make(map[string]*concGroup)
		}
		g = &concGroup{ready: btree.NewG(8, readyLess), waiting: btree.NewG(16, readyLess)}
		p.conc[k] = g
	}
	return g
}

// promoteConc moves tasks of a concurrency key that has room from waiting
// to the ready queues.
func (c *Core) promoteConc(p *pool, g *concGroup) {
	for g.running+g.ready.Len() < p.concLimit() {
		it, ok := g.waiting.DeleteMin()
		if !ok {
			return
		}
		g.ready.ReplaceOrInsert(it)
		c.enqueueReady(it.t)
	}
}

// balanceConc makes every concurrency key of p hold the limit again: the
// worst of its ready tasks wait when the limit went down (or when a
// recovered running task was counted after them), the best waiting ones
// go when it went up.
func (c *Core) balanceConc(p *pool) {
	for _, k := range sortedKeys(p.conc) {
		g := p.conc[k]
		for g.running+g.ready.Len() > p.concLimit() && g.ready.Len() > 0 {
			worst, _ := g.ready.DeleteMax()
			c.unready(worst.t)
			g.waiting.ReplaceOrInsert(worst)
			setGate(worst.t, gateConc)
		}
		c.promoteConc(p, g)
	}
}

// concStarted and concStopped keep the running count of t's key.
func (c *Core) concStarted(t *task) {
	if k := t.concKey(); k != "" {
		g := t.pool.conc[k]
		g.ready.Delete(t.readyItem())
		g.running++
	}
}

func (c *Core) concStopped(t *task) {
	if k := t.concKey(); k != "" {
		g := t.pool.concGroup(k)
		g.running--
		c.promoteConc(t.pool, g)
	}
}

// ---------------------------------------------------------------------------
// Lanes
// ---------------------------------------------------------------------------

// joinLane files a live, admitted task in its lane (inserted, admitted or
// recovered). A recovered task that started is the lane's active member;
// one that ended blocking its lane blocks it.
func (c *Core) joinLane(t *task) {
	k := t.orderingKey()
	if k == "" {
		return
	}
	p := t.pool
	l := p.lanes[k]
	if l == nil {
		if p.lanes == nil {
			p.lanes = make(map[string]*lane)
		}
		l = &lane{pool: p, key: k, members: btree.NewG(8, taskLess)}
		p.lanes[k] = l
	}
	t.lane = l
	if t.status.Terminal() {
		// Only a task that blocks its lane is filed when ended (at
		// recovery, in id order: a member filed before it waits again).
		l.blockedBy = t
		if h := l.head(); h != nil && h.status == fsm.StatusQueued && h.gate != gateLane {
			c.dequeue(h)
			setGate(h, gateLane)
		}
		return
	}
	before := l.head()
	l.members.ReplaceOrInsert(t)
	if t.attempt > 0 && l.active == nil {
		l.active = t
	}
	if h := l.head(); h != before && before != nil && before.gate != gateLane && before.status == fsm.StatusQueued {
		// An admitted parked task with an earlier id goes first: the
		// former head, not started, waits again.
		c.dequeue(before)
		setGate(before, gateLane)
	}
}

// leaveLane takes an ended task out of its lane, and lets the next head
// through unless the lane is now blocked by it.
func (c *Core) leaveLane(t *task) {
	l := t.lane
	if l == nil {
		return
	}
	wasHead := l.head() == t
	l.members.Delete(t)
	if l.active == t {
		l.active = nil
	}
	if wasHead && t.status != fsm.StatusSucceeded && t.pool.cfg.Ordering == fsm.OrderingBlock && l.blockedBy == nil {
		l.blockedBy = t
		t.blocksLane = true
		return
	}
	t.lane = nil
	c.advanceLane(l)
}

// advanceLane lets the head of l through its remaining gates, if it waits
// for its turn; an empty lane that nothing blocks is dropped.
func (c *Core) advanceLane(l *lane) {
	if l.blockedBy != nil {
		return
	}
	h := l.head()
	if h == nil {
		delete(l.pool.lanes, l.key)
		return
	}
	if h.status == fsm.StatusQueued && h.gate == gateLane {
		c.enqueueConc(h)
	}
}

// bugReleaseNext is the lane-overlap fault (bugLaneOverlap): the next
// waiting member of l goes while its head runs.
func (c *Core) bugReleaseNext(l *lane) {
	l.members.Ascend(func(m *task) bool {
		if m != l.active && m.status == fsm.StatusQueued && m.gate == gateLane {
			c.enqueueConc(m)
			return false
		}
		return true
	})
}

// unblockLane releases a lane whose blocking task is gone or runs again.
func (c *Core) unblockLane(t *task) {
	l := t.lane
	if l == nil || l.blockedBy != t {
		return
	}
	l.blockedBy = nil
	t.blocksLane = false
	t.lane = nil
	p := t.pool
	if l.head() == nil {
		delete(p.lanes, l.key)
		return
	}
	c.advanceLane(l)
}

// ---------------------------------------------------------------------------
// Parking
// ---------------------------------------------------------------------------

// overflowOf is the policy for a unit: park only when every pool of it
// parks; otherwise reject if any pool rejects, else wait.
func (c *Core) overflowOf(u *unit) OverflowPolicy {
	park, reject := true, false
	for _, k := range u.pairs {
		switch c.poolOverflow(k.pool) {
		case OverflowReject:
			park, reject = false, true
		case OverflowWait:
			park = false
		}
	}
	switch {
	case park && len(u.pairs) > 0 && c.cfg.LogVersion >= 4:
		return OverflowPark
	case park:
		// Parked tasks need log format 4: until every server has it, the
		// submitter waits instead.
		return OverflowWait
	case reject:
		return OverflowReject
	}
	return OverflowWait
}

func (c *Core) poolOverflow(name string) OverflowPolicy {
	if p, ok := c.pools[name]; ok {
		return p.cfg.Overflow
	}
	return c.agentPoolConfig(name).Overflow
}

// parkedBehind reports whether a (pool, class) of u has parked tasks,
// which a new task of it may not overtake.
func (c *Core) parkedBehind(u *unit) bool {
	for _, k := range u.pairs {
		if p, ok := c.pools[k.pool]; ok && p.parked[k.class] != nil && p.parked[k.class].Len() > 0 {
			return true
		}
	}
	return false
}

// fileParked files a parked task in its (pool, class) line.
func (c *Core) fileParked(t *task) {
	p := t.pool
	if p.parked[t.prio] == nil {
		p.parked[t.prio] = btree.NewG(16, taskLess)
	}
	p.parked[t.prio].ReplaceOrInsert(t)
	p.nParked++
	c.nParked++
}

// unfileParked takes a parked task out of its line.
func (c *Core) unfileParked(t *task) {
	p := t.pool
	if _, ok := p.parked[t.prio].Delete(t); ok {
		p.nParked--
		c.nParked--
	}
}

// admitParked admits parked tasks, oldest first in each (pool, class),
// while they fit the bounds.
func (c *Core) admitParked() {
	if c.nParked == 0 {
		return
	}
	for _, p := range c.sortedPools() {
		if p.nParked == 0 {
			continue
		}
		for cl := range p.parked {
			line := p.parked[cl]
			for line != nil && line.Len() > 0 {
				t, _ := line.Min()
				if !c.fits(delta{{pair: pairKey{p.name, t.prio}, n: 1}}, false) {
					break
				}
				c.admit(t)
			}
		}
	}
}

// admit takes a parked task in: it becomes what a submit would have made
// it now (blocked on live dependencies, scheduled, or queued), or it ends
// at once when a dependency failed or its deadline passed.
func (c *Core) admit(t *task) {
	c.unfileParked(t)
	var doomed *task
	waiting := 0
	if t.flow != nil {
		for _, id := range t.flow.deps {
			d := c.tasks[id]
			switch {
			case d == nil: // purged: it ended, and it succeeded or we would not have waited
			case !d.status.Terminal():
				waiting++
			case d.status != fsm.StatusSucceeded && t.flow.depPolicy == fsm.DepSucceeded && doomed == nil:
				doomed = d
			}
		}
	}
	status := fsm.StatusQueued
	switch {
	case waiting > 0 || doomed != nil:
		status = fsm.StatusBlocked
	case t.runAt > c.now:
		status = fsm.StatusScheduled
	}
	c.mutate(fsm.Mutation{Admit: &fsm.Admit{ID: t.id, Status: status, At: c.now}})
	c.setStatus(t, status)
	c.joinLane(t)
	switch status {
	case fsm.StatusQueued:
		c.enqueue(t)
	case fsm.StatusScheduled:
		c.timers.push(timer{when: t.runAt, kind: tmReady, id: t.id, gen: t.gen})
	case fsm.StatusBlocked:
		if doomed == nil {
			for _, id := range t.flow.deps {
				if d := c.tasks[id]; d != nil && !d.status.Terminal() {
					df := d.fl()
					df.dependents = append(df.dependents, t)
				}
			}
			t.flow.waitingOn = waiting
		}
	}
	c.event(t, "")
	switch {
	case doomed != nil:
		c.finish(t, fsm.StatusCancelled, nil, depMessage(doomed))
	case t.deadline != 0 && t.deadline <= c.now:
		c.expire(t)
	}
}

// ---------------------------------------------------------------------------
// Rate limits
// ---------------------------------------------------------------------------

// armRate wakes the pool's dispatch when its bucket allows more at when.
func (c *Core) armRate(p *pool, when fsm.Instant) {
	if p.rateWake != 0 && p.rateWake <= when && p.rateWake > c.now {
		return // an earlier wake is pending
	}
	p.rateWake = when
	c.timers.push(timer{when: when, kind: tmRate, id: p.name})
}

// ---------------------------------------------------------------------------
// Visibility
// ---------------------------------------------------------------------------

// PoolInfo is what the core knows of a pool: its settings in force, and
// its queues.
type PoolInfo struct {
	Pool       string
	Config     PoolConfig
	Replicated bool // set by an operator (else the agent's defaults)
	Pending    int  // blocked, scheduled, queued or retrying
	Queued     int  // in the ready queues
	Waiting    int  // queued, held back by a lane or a concurrency key
	Running    int
	Parked     int
	Lanes      int      // ordering lanes with live tasks
	Blocked    []string // ordering keys of blocked lanes, sorted
	Polls      int      // open polls (idle workers' offers)
	PollSlots  int      // slots those polls offer
	// DesiredSlots is the autoscaling signal: see DesiredSlots.
	DesiredSlots int
}

// DesiredSlots is how many worker slots a pool could use now: its
// attempts that run and its queued tasks ready to be dispatched, at most
// its running cap (maxRunning, when positive). Tasks that wait for their
// run time, a backoff, their dependencies, a lane or a concurrency key
// are not counted: more slots would not start them sooner.
func DesiredSlots(queued, running, maxRunning int) int {
	n := queued + running
	if maxRunning > 0 {
		n = min(n, maxRunning)
	}
	return n
}

// PoolSlots is the autoscaling signal of one pool.
type PoolSlots struct {
	Pool    string
	Desired int
}

// DesiredSlotsByPool returns the DesiredSlots of every pool the core
// knows, by name, as Pools describes them.
func (c *Core) DesiredSlotsByPool() []PoolSlots {
	for name := range c.cfg.Pools {
		c.getPool(name)
	}
	ps := c.sortedPools()
	out := make([]PoolSlots, len(ps))
	for i, p := range ps {
		out[i] = PoolSlots{Pool: p.name, Desired: p.desiredSlots()}
	}
	return out
}

func (p *pool) desiredSlots() int { return DesiredSlots(p.queued, p.running, p.cfg.MaxRunning) }

func (c *Core) poolInfo(p *pool) PoolInfo {
	info := PoolInfo{
		Pool: p.name, Config: p.cfg, Replicated: p.rec != nil,
		Pending: p.pending.total, Queued: p.queued, Running: p.running,
		Parked: p.nParked, Lanes: len(p.lanes), DesiredSlots: p.desiredSlots(),
	}
	for _, k := range sortedKeys(p.lanes) {
		if p.lanes[k].blockedBy != nil {
			info.Blocked = append(info.Blocked, k)
		}
	}
	for e := p.polls.Front(); e != nil; e = e.Next() {
		info.Polls++
		info.PollSlots += e.Value.(*poll).slots
	}
	info.Waiting = p.held
	return info
}

// Pools describes every pool the core knows (by name): those with tasks,
// settings or polls, and those of the agent's fixed list.
func (c *Core) Pools() []PoolInfo {
	for name := range c.cfg.Pools {
		c.getPool(name)
	}
	ps := c.sortedPools()
	out := make([]PoolInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, c.poolInfo(p))
	}
	return out
}

// Pool describes one pool; a pool the core has not seen is described with
// the settings it would get.
func (c *Core) Pool(name string) (PoolInfo, error) {
	if name == GlobalPool {
		return c.globalInfo(), nil
	}
	if err := c.checkPool(name); err != nil {
		return PoolInfo{}, err
	}
	if p, ok := c.pools[name]; ok {
		return c.poolInfo(p), nil
	}
	return PoolInfo{Pool: name, Config: c.agentPoolConfig(name)}, nil
}
