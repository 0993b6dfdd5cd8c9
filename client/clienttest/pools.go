package clienttest

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// Pool policies, as a real node names them.
const (
	overflowReject   = "reject"
	orderingContinue = "continue"
)

var (
	overflowPolicies = []string{overflowReject, "wait", "park"}
	orderingPolicies = []string{orderingContinue, "block"}
	priorityClasses  = []string{"high", "normal", "low"}
)

// Bounds of rate limits, as on a real node.
const (
	minRate  = 0.001
	maxRate  = 1e9
	maxBurst = 1 << 20
)

// poolState is what PoolService.Set and SetKind made of a pool: the
// settings in force. Of them the fake applies paused (a paused pool's tasks
// are not granted), the defaults of max attempts and backoff (after the
// kind's) and the kinds' settings; the limits are kept and reported, not
// enforced.
type poolState struct {
	limits *cronoqv1.PoolLimits
	paused bool
	kinds  map[string]*kindState // set through PoolService.SetKind
}

// defaultLimits are the settings of a pool nobody set: no limits, overflow
// reject, ordering continue.
func defaultLimits() *cronoqv1.PoolLimits {
	return &cronoqv1.PoolLimits{Overflow: overflowReject, Ordering: orderingContinue}
}

// pausedLocked reports whether pool is paused.
func (c *Cluster) pausedLocked(pool string) bool {
	st := c.pools[pool]
	return st != nil && st.paused
}

type poolService struct{ n *Node }

// List describes every pool the cluster knows: those with tasks, settings
// or connected workers, and those of a fixed list (WithPools), by name.
func (p *poolService) List(ctx context.Context, req *connect.Request[cronoqv1.ListPoolsRequest]) (*connect.Response[cronoqv1.ListPoolsResponse], error) {
	return unary(ctx, p.n, req, leaderCall, func(*served) (*cronoqv1.ListPoolsResponse, error) {
		c := p.n.c
		names := map[string]bool{}
		for _, name := range c.cfg.pools {
			names[name] = true
		}
		for name := range c.pools {
			names[name] = true
		}
		for _, t := range c.tasks {
			names[t.pool()] = true
		}
		for s := range c.streams {
			if !s.ended {
				names[s.pool] = true
			}
		}
		out := &cronoqv1.ListPoolsResponse{}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			out.Pools = append(out.Pools, c.poolInfoLocked(name))
		}
		return out, nil
	})
}

// Get describes one pool; a pool the cluster has not seen is described
// with the settings it would get.
func (p *poolService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetPoolRequest]) (*connect.Response[cronoqv1.GetPoolResponse], error) {
	return unary(ctx, p.n, req, leaderCall, func(*served) (*cronoqv1.GetPoolResponse, error) {
		c := p.n.c
		if err := c.checkPool(req.Msg.GetPool()); err != nil {
			return nil, err
		}
		return &cronoqv1.GetPoolResponse{Pool: c.poolInfoLocked(req.Msg.GetPool())}, nil
	})
}

// Set changes the settings of a pool (the fields present), checked as a
// real node checks them, and describes the pool after the change.
func (p *poolService) Set(ctx context.Context, req *connect.Request[cronoqv1.SetPoolRequest]) (*connect.Response[cronoqv1.SetPoolResponse], error) {
	return unary(ctx, p.n, req, leaderCall, func(*served) (*cronoqv1.SetPoolResponse, error) {
		c := p.n.c
		st, err := c.poolChangeLocked(req.Msg)
		if err != nil {
			return nil, err
		}
		c.pools[req.Msg.GetPool()] = st
		c.applied++
		return &cronoqv1.SetPoolResponse{Pool: c.poolInfoLocked(req.Msg.GetPool())}, nil
	})
}

// Workers lists the worker streams connected to the leader (of one pool,
// or of every pool), by worker id as a node does (two streams of one
// worker in the order they opened).
func (p *poolService) Workers(ctx context.Context, req *connect.Request[cronoqv1.ListWorkersRequest]) (*connect.Response[cronoqv1.ListWorkersResponse], error) {
	return unary(ctx, p.n, req, leaderCall, func(*served) (*cronoqv1.ListWorkersResponse, error) {
		c := p.n.c
		out := &cronoqv1.ListWorkersResponse{}
		streams := c.liveStreamsLocked(req.Msg.GetPool())
		slices.SortStableFunc(streams, func(a, b *workerStream) int { return strings.Compare(a.worker, b.worker) })
		for _, s := range streams {
			busy := c.busyLocked(s)
			w := &cronoqv1.WorkerInfo{
				Id:       s.worker,
				Pool:     s.pool,
				Slots:    int64(s.credit) + busy,
				Busy:     busy,
				Node:     s.node,
				LastSeen: ts(s.lastSeen),
			}
			for _, k := range slices.Sorted(maps.Keys(s.labels)) {
				w.Labels = append(w.Labels, &cronoqv1.KV{Key: k, Value: s.labels[k]})
			}
			out.Workers = append(out.Workers, w)
		}
		return out, nil
	})
}

// liveStreamsLocked returns the open worker streams of pool (every pool
// when ""), in the order they opened.
func (c *Cluster) liveStreamsLocked(pool string) []*workerStream {
	var out []*workerStream
	for s := range c.streams {
		if !s.ended && (pool == "" || s.pool == pool) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *workerStream) int { return a.id - b.id })
	return out
}

// busyLocked counts the attempts the worker of stream s runs.
func (c *Cluster) busyLocked(s *workerStream) int64 {
	var n int64
	for _, t := range c.leases {
		if t.stream == s {
			n++
		}
	}
	return n
}

// poolInfoLocked describes pool as a node does: its counts by status, the
// age of its oldest queued task, its workers and the slots they offer
// (free and busy), its settings, and its ordering lanes (those of its live
// tasks; blocked: those of its ended tasks that block their lane), and its
// desired slots. The fake holds no queued task back: waiting is always 0.
func (c *Cluster) poolInfoLocked(name string) *cronoqv1.PoolInfo {
	st := c.pools[name]
	limits := defaultLimits()
	if st != nil {
		limits = proto.Clone(st.limits).(*cronoqv1.PoolLimits)
	}
	info := &cronoqv1.PoolInfo{
		Pool:       name,
		Counts:     map[string]int64{},
		Paused:     st != nil && st.paused,
		Limits:     limits,
		Replicated: st != nil,
	}
	now := c.now()
	var oldest time.Time
	queued := false
	lanes, blocked := map[string]bool{}, map[string]bool{}
	for _, t := range c.tasks {
		if t.pool() != name {
			continue
		}
		s := t.p.GetStatus()
		info.Counts[statusName(s)]++
		switch s {
		case cronoqv1.Status_STATUS_RUNNING:
			info.Running++
		case cronoqv1.Status_STATUS_PARKED:
			info.Parked++
		case cronoqv1.Status_STATUS_QUEUED:
			since := tsTime(t.p.GetSubmittedAt())
			if at := tsTime(t.p.GetRunAt()); at.After(since) {
				since = at
			}
			if !queued || since.Before(oldest) {
				oldest, queued = since, true
			}
		}
		if k := t.p.GetTemplate().GetOrderingKey(); k != "" {
			switch {
			case !terminal(s):
				lanes[k] = true
			case t.p.GetBlocksLane():
				lanes[k], blocked[k] = true, true
			}
		}
	}
	if queued {
		info.OldestQueuedAge = durationpb.New(max(now.Sub(oldest), 0))
	}
	info.Lanes = int64(len(lanes))
	info.BlockedLanes = slices.Sorted(maps.Keys(blocked))
	for _, s := range c.liveStreamsLocked(name) {
		info.Workers++
		info.Slots += int64(s.credit) + c.busyLocked(s)
	}
	// As a node: running and queued, at most the running cap.
	info.DesiredSlots = info.Running + info.Counts[statusName(cronoqv1.Status_STATUS_QUEUED)]
	if m := limits.GetMaxRunning(); m > 0 {
		info.DesiredSlots = min(info.DesiredSlots, m)
	}
	return info
}

// poolChangeLocked checks a change of a pool's settings as a real node
// does (a refusal names the field) and returns the pool's settings with it
// applied. Nothing changes until the whole change is checked.
func (c *Cluster) poolChangeLocked(req *cronoqv1.SetPoolRequest) (*poolState, error) {
	name := req.GetPool()
	if err := c.checkPool(name); err != nil {
		return nil, err
	}
	st := &poolState{limits: defaultLimits()}
	if cur := c.pools[name]; cur != nil {
		st = &poolState{limits: proto.Clone(cur.limits).(*cronoqv1.PoolLimits), paused: cur.paused, kinds: cur.kinds}
	}
	l := st.limits
	count := func(field string, v int64) error {
		switch {
		case v < math.MinInt32 || v > math.MaxInt32:
			return invalid(field, "out of range")
		case v < 0:
			return invalid(field, "must not be negative")
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    *int64
		dst  *int64
	}{
		{"max_running", req.MaxRunning, &l.MaxRunning},
		{"max_pending", req.MaxPending, &l.MaxPending},
		{"burst", req.Burst, &l.Burst},
		{"concurrency_limit", req.ConcurrencyLimit, &l.ConcurrencyLimit},
	} {
		if f.v == nil {
			continue
		}
		if err := count(f.name, *f.v); err != nil {
			return nil, err
		}
		*f.dst = *f.v
	}
	perClass := req.GetMaxPendingPerClass()
	for _, cl := range slices.Sorted(maps.Keys(perClass)) {
		n := perClass[cl]
		if !slices.Contains(priorityClasses, cl) {
			return nil, invalid("max_pending_per_class", "unknown class %s: want high, normal or low", cl)
		}
		if err := count("max_pending_per_class", n); err != nil {
			return nil, err
		}
		if n == 0 {
			delete(l.MaxPendingPerClass, cl)
			continue
		}
		if l.MaxPendingPerClass == nil {
			l.MaxPendingPerClass = map[string]int64{}
		}
		l.MaxPendingPerClass[cl] = n
	}
	if len(l.MaxPendingPerClass) == 0 {
		l.MaxPendingPerClass = nil
	}
	if req.Overflow != nil {
		if !slices.Contains(overflowPolicies, req.GetOverflow()) {
			return nil, invalid("overflow", "unknown policy %s: want reject, wait or park", req.GetOverflow())
		}
		l.Overflow = req.GetOverflow()
	}
	if req.Rate != nil {
		l.Rate = req.GetRate()
	}
	if err := checkRate("rate", l.Rate, l.Burst); err != nil {
		return nil, err
	}
	if len(req.GetKindRates()) > 0 {
		rates := map[string]*cronoqv1.KindRate{}
		for _, kr := range l.KindRates {
			rates[kr.GetKind()] = kr
		}
		for _, kr := range req.GetKindRates() {
			k := kr.GetKind()
			if kr.GetBurst() < math.MinInt32 || kr.GetBurst() > math.MaxInt32 {
				return nil, invalid("kind_rates.burst", "out of range")
			}
			if k == "" {
				return nil, invalid("kind_rates", "empty kind")
			}
			if err := checkRate("kind_rates["+k+"]", kr.GetRate(), kr.GetBurst()); err != nil {
				return nil, err
			}
			if kr.GetRate() == 0 {
				delete(rates, k)
			} else {
				rates[k] = &cronoqv1.KindRate{Kind: k, Rate: kr.GetRate(), Burst: kr.GetBurst()}
			}
		}
		l.KindRates = nil
		for _, k := range slices.Sorted(maps.Keys(rates)) {
			l.KindRates = append(l.KindRates, rates[k])
		}
	}
	if req.Ordering != nil {
		if !slices.Contains(orderingPolicies, req.GetOrdering()) {
			return nil, invalid("ordering", "unknown policy %s: want continue or block", req.GetOrdering())
		}
		l.Ordering = req.GetOrdering()
	}
	if req.MaxAttempts != nil {
		l.MaxAttempts = req.GetMaxAttempts()
	}
	if b := req.GetBackoff(); b != nil {
		bo, err := checkBackoff(b)
		if err != nil {
			return nil, err
		}
		l.Backoff = bo
	}
	if g := req.GetLeaseGrace(); g != nil {
		d, err := durationOf("lease_grace", g)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, invalid("lease_grace", "must not be negative")
		}
		l.LeaseGrace = dur(d)
	}
	if req.Paused != nil {
		st.paused = req.GetPaused()
	}
	return st, nil
}

// checkBackoff checks the default backoff of a change of settings as a
// real node does and returns it normalised: nil for the empty backoff,
// which restores the defaults.
func checkBackoff(b *cronoqv1.Backoff) (*cronoqv1.Backoff, error) {
	initial, err := durationOf("backoff.initial", b.GetInitial())
	if err != nil {
		return nil, err
	}
	maxDelay, err := durationOf("backoff.max", b.GetMax())
	if err != nil {
		return nil, err
	}
	if initial == 0 && maxDelay == 0 && b.GetJitter() == 0 {
		return nil, nil
	}
	switch {
	case initial <= 0:
		return nil, invalid("backoff", "initial delay must be positive")
	case maxDelay != 0 && maxDelay < initial:
		return nil, invalid("backoff", "max delay must be at least the initial delay")
	case b.GetJitter() < 0 || b.GetJitter() >= 1:
		return nil, invalid("backoff", "jitter must be in [0, 1)")
	}
	return &cronoqv1.Backoff{Initial: dur(initial), Max: dur(maxDelay), Jitter: b.GetJitter()}, nil
}

// checkRate refuses a rate limit a real node refuses.
func checkRate(field string, per float64, burst int64) error {
	switch {
	case math.IsNaN(per) || per < 0 || (per > 0 && per < minRate) || per > maxRate:
		return invalid(field, "%v: want 0 (none) or a rate in [%v, %v] per second", per, minRate, maxRate)
	case burst < 0 || burst > maxBurst:
		return invalid(field, "burst %d: want 0 to %d", burst, maxBurst)
	}
	return nil
}
