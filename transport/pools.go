package transport

import (
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// poolService describes pools and their workers, and changes a pool's
// settings. Every call runs on the leader: the settings in force, the
// queues and the worker streams are the leader's.
type poolService struct{ s *Server }

func (h *poolService) List(ctx context.Context, req *connect.Request[cronoqv1.ListPoolsRequest]) (*connect.Response[cronoqv1.ListPoolsResponse], error) {
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.ListPoolsResponse, error) {
		infos, err := h.s.node.Pools(ctx)
		if err != nil {
			return nil, err
		}
		state, err := h.s.node.ConsistentRead(ctx)
		if err != nil {
			return nil, err
		}
		counts := make(map[string]*fsm.PoolCounts)
		for _, pc := range state.Counts() {
			counts[pc.Pool] = &pc
		}
		out := &cronoqv1.ListPoolsResponse{}
		a := authorizer(ctx)
		for _, info := range infos {
			if !a.Pool(info.Pool, acl.Read) {
				continue
			}
			out.Pools = append(out.Pools, h.poolToProto(info, state, counts[info.Pool]))
		}
		return out, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListPoolsRequest]) (*connect.Response[cronoqv1.ListPoolsResponse], error) {
		return ep.pools.List
	})
}

func (h *poolService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetPoolRequest]) (*connect.Response[cronoqv1.GetPoolResponse], error) {
	name := req.Msg.GetPool()
	if err := needPool(ctx, acl.Read, name); err != nil {
		return nil, err
	}
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.GetPoolResponse, error) {
		info, err := h.s.node.Pool(ctx, name)
		if err != nil {
			return nil, err
		}
		p, err := h.describe(ctx, info)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.GetPoolResponse{Pool: p}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetPoolRequest]) (*connect.Response[cronoqv1.GetPoolResponse], error) {
		return ep.pools.Get
	})
}

func (h *poolService) Set(ctx context.Context, req *connect.Request[cronoqv1.SetPoolRequest]) (*connect.Response[cronoqv1.SetPoolResponse], error) {
	ch, err := poolChangeFromProto(req.Msg)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	if err := needPoolWrite(ctx, ch.Pool); err != nil {
		return nil, err
	}
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.SetPoolResponse, error) {
		info, err := h.s.node.SetPool(ctx, ch)
		if err != nil {
			return nil, err
		}
		p, err := h.describe(ctx, info)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.SetPoolResponse{Pool: p}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SetPoolRequest]) (*connect.Response[cronoqv1.SetPoolResponse], error) {
		return ep.pools.Set
	})
}

// Workers lists the worker streams connected to the leader.
func (h *poolService) Workers(ctx context.Context, req *connect.Request[cronoqv1.ListWorkersRequest]) (*connect.Response[cronoqv1.ListWorkersResponse], error) {
	pool := req.Msg.GetPool()
	if pool != "" {
		if err := needPool(ctx, acl.Read, pool); err != nil {
			return nil, err
		}
	}
	a := authorizer(ctx)
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.ListWorkersResponse, error) {
		if _, err := h.s.node.Leading(); err != nil {
			return nil, err
		}
		state, _ := h.s.node.StaleRead() // the leader's replica
		busy := busyByWorker(state, pool)
		out := &cronoqv1.ListWorkersResponse{}
		for _, ws := range h.s.workers.list(pool) {
			if !a.Pool(ws.pool, acl.Read) {
				continue
			}
			b := busy[[2]string{ws.pool, ws.worker}]
			w := &cronoqv1.WorkerInfo{
				Id:     ws.worker,
				Pool:   ws.pool,
				Labels: kvsToProto(ws.labels),
				Slots:  max(ws.free.Load(), 0) + b,
				Busy:   b,
				Node:   h.s.node.ID(),
			}
			if at := ws.lastSeen.Load(); at != 0 {
				w.LastSeen = instantToProto(fsm.Instant(at))
			}
			out.Workers = append(out.Workers, w)
		}
		return out, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListWorkersRequest]) (*connect.Response[cronoqv1.ListWorkersResponse], error) {
		return ep.pools.Workers
	})
}

// busyByWorker counts the running attempts of each (pool, worker) in
// pool (every pool when empty).
func busyByWorker(state fsm.Reader, pool string) map[[2]string]int64 {
	q := fsm.ListQuery{Statuses: []fsm.Status{fsm.StatusRunning}}
	if pool != "" {
		q.Pools = []string{pool}
	}
	busy := make(map[[2]string]int64)
	for {
		tasks, next := state.List(q)
		for _, t := range tasks {
			busy[[2]string{t.Pool, t.Worker}]++
		}
		if next == "" {
			return busy
		}
		q.After = next
	}
}

// describe completes what the engine says of a pool with its counts and
// its workers.
func (h *poolService) describe(ctx context.Context, info cluster.PoolInfo) (*cronoqv1.PoolInfo, error) {
	state, err := h.s.node.ConsistentRead(ctx)
	if err != nil {
		return nil, err
	}
	var pc *fsm.PoolCounts
	for _, c := range state.Counts() {
		if c.Pool == info.Pool {
			pc = &c
			break
		}
	}
	return h.poolToProto(info, state, pc), nil
}

func (h *poolService) poolToProto(info cluster.PoolInfo, state fsm.Reader, pc *fsm.PoolCounts) *cronoqv1.PoolInfo {
	out := &cronoqv1.PoolInfo{
		Pool:         info.Pool,
		Counts:       make(map[string]int64),
		Running:      int64(info.Running),
		Parked:       int64(info.Parked),
		Paused:       info.Config.Paused,
		Limits:       poolLimitsToProto(info.Config),
		Replicated:   info.Replicated,
		BlockedLanes: info.Blocked,
		Lanes:        int64(info.Lanes),
		Waiting:      int64(info.Waiting),
		DesiredSlots: int64(info.DesiredSlots),
	}
	if pc != nil {
		for _, st := range fsm.AllStatuses {
			if n := pc.ByStatus[st]; n > 0 {
				out.Counts[st.String()] = n
			}
		}
	}
	if t, ok := state.OldestQueued(info.Pool); ok {
		since := max(t.SubmittedAt, t.RunAt)
		out.OldestQueuedAge = durationToProto(max(time.Since(since.Time()), 0))
	}
	for _, ws := range h.s.workers.list(info.Pool) {
		out.Workers++
		out.Slots += max(ws.free.Load(), 0)
	}
	out.Slots += int64(info.Running)
	return out
}

func poolLimitsToProto(cfg cluster.PoolConfig) *cronoqv1.PoolLimits {
	l := &cronoqv1.PoolLimits{
		MaxRunning:       int64(cfg.MaxRunning),
		MaxPending:       int64(cfg.Bounds.MaxPending),
		Overflow:         cfg.Overflow.String(),
		Rate:             cfg.Rate,
		Burst:            int64(cfg.Burst),
		ConcurrencyLimit: int64(cfg.ConcurrencyLimit),
		Ordering:         cfg.Ordering.String(),
		MaxAttempts:      cfg.MaxAttempts,
		LeaseGrace:       durationToProto(cfg.LeaseGrace),
	}
	for cl, n := range cfg.Bounds.MaxPendingPerClass {
		if n > 0 {
			if l.MaxPendingPerClass == nil {
				l.MaxPendingPerClass = make(map[string]int64)
			}
			l.MaxPendingPerClass[fsm.Priority(cl).String()] = int64(n)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.KindRates)) {
		r := cfg.KindRates[k]
		l.KindRates = append(l.KindRates, &cronoqv1.KindRate{Kind: k, Rate: r.Per, Burst: int64(r.Burst)})
	}
	if cfg.Backoff != (fsm.Backoff{}) {
		l.Backoff = &cronoqv1.Backoff{
			Initial: durationToProto(cfg.Backoff.Initial),
			Max:     durationToProto(cfg.Backoff.Max),
			Jitter:  cfg.Backoff.Jitter,
		}
	}
	return l
}

// poolChangeFromProto converts a change of pool settings; the engine
// checks the values.
func poolChangeFromProto(p *cronoqv1.SetPoolRequest) (cluster.PoolChange, error) {
	ch := cluster.PoolChange{Pool: p.GetPool()}
	asInt := func(field string, v int64) (*int, error) {
		if v < math.MinInt32 || v > math.MaxInt32 {
			return nil, apierr.Invalid(field, "out of range")
		}
		n := int(v)
		return &n, nil
	}
	var err error
	for _, f := range []struct {
		name string
		set  bool
		v    int64
		dst  **int
	}{
		{"max_running", p.MaxRunning != nil, p.GetMaxRunning(), &ch.MaxRunning},
		{"max_pending", p.MaxPending != nil, p.GetMaxPending(), &ch.MaxPending},
		{"burst", p.Burst != nil, p.GetBurst(), &ch.Burst},
		{"concurrency_limit", p.ConcurrencyLimit != nil, p.GetConcurrencyLimit(), &ch.ConcurrencyLimit},
	} {
		if f.set {
			if *f.dst, err = asInt(f.name, f.v); err != nil {
				return ch, err
			}
		}
	}
	for name, n := range p.GetMaxPendingPerClass() {
		cl, ok := fsm.ParsePriority(name)
		if !ok {
			return ch, apierr.Invalid("max_pending_per_class", "unknown class "+name+": want high, normal or low")
		}
		v, err := asInt("max_pending_per_class", n)
		if err != nil {
			return ch, err
		}
		if ch.MaxPendingPerClass == nil {
			ch.MaxPendingPerClass = make(map[fsm.Priority]int)
		}
		ch.MaxPendingPerClass[cl] = *v
	}
	if p.Overflow != nil {
		o, ok := fsm.ParseOverflow(p.GetOverflow())
		if !ok {
			return ch, apierr.Invalid("overflow", "unknown policy "+p.GetOverflow()+": want reject, wait or park")
		}
		ch.Overflow = &o
	}
	if p.Rate != nil {
		r := p.GetRate()
		ch.Rate = &r
	}
	for _, kr := range p.GetKindRates() {
		if ch.KindRates == nil {
			ch.KindRates = make(map[string]cluster.Rate)
		}
		b, err := asInt("kind_rates.burst", kr.GetBurst())
		if err != nil {
			return ch, err
		}
		ch.KindRates[kr.GetKind()] = cluster.Rate{Per: kr.GetRate(), Burst: *b}
	}
	if p.Ordering != nil {
		o, ok := fsm.ParseOrderingPolicy(p.GetOrdering())
		if !ok {
			return ch, apierr.Invalid("ordering", "unknown policy "+p.GetOrdering()+": want continue or block")
		}
		ch.Ordering = &o
	}
	if p.MaxAttempts != nil {
		n := p.GetMaxAttempts()
		ch.MaxAttempts = &n
	}
	if b := p.GetBackoff(); b != nil {
		bo, err := backoffFromProto(b)
		if err != nil {
			return ch, err
		}
		ch.Backoff = &bo
	}
	if g := p.GetLeaseGrace(); g != nil {
		d, err := durationFromProto("lease_grace", g)
		if err != nil {
			return ch, err
		}
		ch.LeaseGrace = &d
	}
	if p.Paused != nil {
		v := p.GetPaused()
		ch.Paused = &v
	}
	return ch, nil
}

// SetKind changes the settings of a kind of a pool.
func (h *poolService) SetKind(ctx context.Context, req *connect.Request[cronoqv1.SetKindRequest]) (*connect.Response[cronoqv1.SetKindResponse], error) {
	m := req.Msg
	ch := cluster.KindChange{Pool: m.GetPool(), Kind: m.GetKind()}
	if m.PayloadSchema != nil {
		doc := m.GetPayloadSchema()
		ch.PayloadSchema = &doc
	}
	if m.OutputSchema != nil {
		doc := m.GetOutputSchema()
		ch.OutputSchema = &doc
	}
	if m.GetTimeout() != nil {
		d, err := durationFromProto("timeout", m.GetTimeout())
		if err != nil {
			return nil, h.s.apiError(err)
		}
		ch.Timeout = &d
	}
	if m.MaxAttempts != nil {
		n := m.GetMaxAttempts()
		ch.MaxAttempts = &n
	}
	if b := m.GetBackoff(); b != nil {
		bo, err := backoffFromProto(b)
		if err != nil {
			return nil, h.s.apiError(err)
		}
		ch.Backoff = &bo
	}
	if err := needPoolWrite(ctx, ch.Pool); err != nil {
		return nil, err
	}
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.SetKindResponse, error) {
		ks, err := h.s.node.SetKind(ctx, ch)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.SetKindResponse{Kind: kindToProto(ch.Pool, ks)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SetKindRequest]) (*connect.Response[cronoqv1.SetKindResponse], error) {
		return ep.pools.SetKind
	})
}

// GetKind returns the settings of a kind of a pool.
func (h *poolService) GetKind(ctx context.Context, req *connect.Request[cronoqv1.GetKindRequest]) (*connect.Response[cronoqv1.GetKindResponse], error) {
	pool, kind := req.Msg.GetPool(), req.Msg.GetKind()
	if err := needPool(ctx, acl.Read, pool); err != nil {
		return nil, err
	}
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.GetKindResponse, error) {
		ks, err := h.s.node.Kind(ctx, pool, kind)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.GetKindResponse{Kind: kindToProto(pool, ks)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetKindRequest]) (*connect.Response[cronoqv1.GetKindResponse], error) {
		return ep.pools.GetKind
	})
}

func kindToProto(pool string, ks fsm.KindSettings) *cronoqv1.KindSettings {
	out := &cronoqv1.KindSettings{
		Pool: pool, Kind: ks.Kind,
		PayloadSchema: ks.PayloadSchema, OutputSchema: ks.OutputSchema,
		Timeout: durationToProto(ks.Timeout), MaxAttempts: ks.MaxAttempts,
	}
	if ks.Backoff != (fsm.Backoff{}) {
		out.Backoff = &cronoqv1.Backoff{
			Initial: durationToProto(ks.Backoff.Initial),
			Max:     durationToProto(ks.Backoff.Max),
			Jitter:  ks.Backoff.Jitter,
		}
	}
	return out
}

// needPoolWrite refuses a change to pool's settings unless the caller may
// write the pool; the cluster-wide settings (pool "*") need operator
// write.
func needPoolWrite(ctx context.Context, pool string) error {
	if pool == cluster.GlobalPool {
		return needOperator(ctx, acl.Write)
	}
	return needPool(ctx, acl.Write, pool)
}
