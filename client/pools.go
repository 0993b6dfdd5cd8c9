package client

import (
	"context"
	"fmt"
	"maps"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// Overflow policies of a pool: what a submit beyond its pending bound does.
const (
	// OverflowReject refuses it (ErrOverloaded).
	OverflowReject = "reject"
	// OverflowWait holds the submit until there is room (or its ctx ends).
	OverflowWait = "wait"
	// OverflowPark accepts the task as StatusParked; it is queued when
	// there is room.
	OverflowPark = "park"
)

// Ordering policies of a pool: what an ordering lane (the tasks of one
// Template.OrderingKey) does when its head ends without succeeding.
const (
	// OrderingContinue runs the lane on.
	OrderingContinue = "continue"
	// OrderingBlock makes the lane wait until that task is deleted (see
	// Task.BlocksLane and Client.Delete).
	OrderingBlock = "block"
)

// Pool describes a pool as the leader runs it.
type Pool struct {
	Name string
	// Counts holds its tasks by status name (StatusQueued, ...); statuses
	// without tasks may be absent.
	Counts map[string]int64
	// OldestQueuedAge is the age of the queued task that became ready
	// first; 0 when none is queued.
	OldestQueuedAge time.Duration
	// Workers counts the workers of the pool connected to the leader, and
	// Slots the attempts they can run at once (free and busy).
	Workers int64
	Slots   int64
	// Running and Parked count its running and parked tasks.
	Running int64
	Parked  int64
	// Paused pools accept tasks but dispatch none.
	Paused bool
	// Limits are the settings in force.
	Limits PoolLimits
	// Replicated says an operator set the settings (SetPool); otherwise
	// they are the agent's defaults.
	Replicated bool
	// BlockedLanes are the ordering keys of the lanes that wait for a task
	// to be deleted (ordering policy OrderingBlock).
	BlockedLanes []string
	// Lanes counts the ordering lanes with live tasks.
	Lanes int64
	// Waiting counts the queued tasks held back by their lane or their
	// concurrency key.
	Waiting int64
	// DesiredSlots is the autoscaling signal: the worker slots the pool
	// could use now, its running attempts and its queued tasks ready to
	// run, at most Limits.MaxRunning when it is set. Tasks waiting for
	// their run time, a backoff, dependencies, a lane or a concurrency key
	// are not counted. The leader exports it as cronoq_pool_desired_slots.
	DesiredSlots int64
}

// PoolLimits are the settings of a pool. Zero limits mean none.
type PoolLimits struct {
	// MaxRunning caps the attempts running at once across its workers.
	MaxRunning int64
	// MaxPending bounds its pending tasks (blocked, scheduled, queued or
	// retrying); MaxPendingPerClass bounds them by priority class
	// (PriorityHigh, ...).
	MaxPending         int64
	MaxPendingPerClass map[string]int64
	// Overflow is what a submit beyond the bound does: OverflowReject,
	// OverflowWait or OverflowPark.
	Overflow string
	// Rate limits dispatches to Rate per second, in bursts of up to Burst;
	// KindRates limit the tasks of single kinds too.
	Rate      float64
	Burst     int64
	KindRates []KindRate
	// ConcurrencyLimit caps the running tasks of one concurrency key
	// (Template.ConcurrencyKey); 0 means 1.
	ConcurrencyLimit int64
	// Ordering is OrderingContinue or OrderingBlock.
	Ordering string
	// MaxAttempts and Backoff are the defaults of its tasks (0 and nil:
	// the cluster's).
	MaxAttempts int
	Backoff     *Backoff
	// LeaseGrace is how long the attempts running when a new leader takes
	// over have to report (0: the cluster's).
	LeaseGrace time.Duration
}

// KindRate is a dispatch rate limit on the tasks of one kind of a pool:
// Rate per second, in bursts of up to Burst. In a PoolChange, a Rate of 0
// removes the kind's limit.
type KindRate struct {
	Kind  string
	Rate  float64
	Burst int64
}

// PoolChange is a change of a pool's settings: the fields set (non-nil
// pointers, non-empty maps and slices) replace the current ones, the
// others are kept. See PoolLimits for their meaning.
type PoolChange struct {
	MaxRunning *int64
	MaxPending *int64
	// MaxPendingPerClass sets the bounds of the classes it names (0: none).
	MaxPendingPerClass map[string]int64
	Overflow           *string
	Rate               *float64
	Burst              *int64
	// KindRates sets the limits of the kinds it names; a Rate of 0 removes
	// the kind's limit.
	KindRates        []KindRate
	ConcurrencyLimit *int64
	Ordering         *string
	MaxAttempts      *int
	// Backoff sets the default backoff of the pool's tasks; &Backoff{}
	// restores the cluster's.
	Backoff *Backoff
	// LeaseGrace sets the pool's lease grace; 0 restores the cluster's.
	LeaseGrace *time.Duration
	Paused     *bool
}

// WorkerInfo describes a worker connected to the leader (a Worker of this
// package, or any other client of the worker protocol).
type WorkerInfo struct {
	// ID is the worker's id (WorkerConfig.ID).
	ID   string
	Pool string
	// Labels are the capacity labels it offers.
	Labels map[string]string
	// Slots counts the attempts it can run at once (free and busy), Busy
	// those it runs.
	Slots int64
	Busy  int64
	// Node is the node its stream is connected to.
	Node string
	// LastSeen is when its last message arrived.
	LastSeen time.Time
}

// ListPools describes every pool the leader knows: those with tasks,
// settings or workers, and those of the agent's fixed list.
func (c *Client) ListPools(ctx context.Context) ([]Pool, error) {
	resp, err := unary(ctx, c, "listing pools", read, &cronoqv1.ListPoolsRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListPoolsRequest]) (*connect.Response[cronoqv1.ListPoolsResponse], error) {
			return ep.pools.List
		})
	if err != nil {
		return nil, err
	}
	out := make([]Pool, 0, len(resp.GetPools()))
	for _, p := range resp.GetPools() {
		out = append(out, poolFromProto(p))
	}
	return out, nil
}

// GetPool describes the pool name. A pool without tasks or settings is
// described with the settings it would get; a name outside the agent's
// fixed list of pools is refused (ErrInvalid).
func (c *Client) GetPool(ctx context.Context, name string) (*Pool, error) {
	what := "getting pool " + name
	resp, err := unary(ctx, c, what, read, &cronoqv1.GetPoolRequest{Pool: name},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetPoolRequest]) (*connect.Response[cronoqv1.GetPoolResponse], error) {
			return ep.pools.Get
		})
	if err != nil {
		return nil, err
	}
	return poolAnswer(what, resp.GetPool())
}

// SetPool changes the settings of pool name (see PoolChange) and returns
// the pool after the change. The change is replicated: every later leader
// applies it. A bad value is refused with an *InvalidError naming the field
// (overflow, ordering, rate, ...), and nothing changes. SetPool is
// idempotent and retried like a schedule change.
func (c *Client) SetPool(ctx context.Context, name string, change PoolChange) (*Pool, error) {
	what := "setting pool " + name
	req, err := poolChangeToProto(name, change)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return c.setPool(ctx, what, req)
}

// PausePool pauses pool name: it accepts tasks but dispatches none until
// resumed; attempts already running go on. It returns the pool after the
// change.
func (c *Client) PausePool(ctx context.Context, name string) (*Pool, error) {
	return c.setPool(ctx, "pausing pool "+name, &cronoqv1.SetPoolRequest{Pool: name, Paused: new(true)})
}

// ResumePool resumes a paused pool and returns it after the change.
func (c *Client) ResumePool(ctx context.Context, name string) (*Pool, error) {
	return c.setPool(ctx, "resuming pool "+name, &cronoqv1.SetPoolRequest{Pool: name, Paused: new(false)})
}

func (c *Client) setPool(ctx context.Context, what string, req *cronoqv1.SetPoolRequest) (*Pool, error) {
	resp, err := unary(ctx, c, what, idempotent, req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SetPoolRequest]) (*connect.Response[cronoqv1.SetPoolResponse], error) {
			return ep.pools.Set
		})
	if err != nil {
		return nil, err
	}
	return poolAnswer(what, resp.GetPool())
}

// ListWorkers lists the workers connected to the leader: those of pool, or
// of every pool when pool is "".
func (c *Client) ListWorkers(ctx context.Context, pool string) ([]WorkerInfo, error) {
	resp, err := unary(ctx, c, "listing workers", read, &cronoqv1.ListWorkersRequest{Pool: pool},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListWorkersRequest]) (*connect.Response[cronoqv1.ListWorkersResponse], error) {
			return ep.pools.Workers
		})
	if err != nil {
		return nil, err
	}
	out := make([]WorkerInfo, 0, len(resp.GetWorkers()))
	for _, w := range resp.GetWorkers() {
		out = append(out, workerFromProto(w))
	}
	return out, nil
}

// poolAnswer converts the pool a node answered with.
func poolAnswer(what string, p *cronoqv1.PoolInfo) (*Pool, error) {
	if p == nil {
		return nil, fmt.Errorf("%s: node answered without a pool", what)
	}
	out := poolFromProto(p)
	return &out, nil
}

func poolFromProto(p *cronoqv1.PoolInfo) Pool {
	out := Pool{
		Name:            p.GetPool(),
		Counts:          make(map[string]int64, len(p.GetCounts())),
		OldestQueuedAge: p.GetOldestQueuedAge().AsDuration(),
		Workers:         p.GetWorkers(),
		Slots:           p.GetSlots(),
		Running:         p.GetRunning(),
		Parked:          p.GetParked(),
		Paused:          p.GetPaused(),
		Limits:          poolLimitsFromProto(p.GetLimits()),
		Replicated:      p.GetReplicated(),
		BlockedLanes:    p.GetBlockedLanes(),
		Lanes:           p.GetLanes(),
		Waiting:         p.GetWaiting(),
		DesiredSlots:    p.GetDesiredSlots(),
	}
	maps.Copy(out.Counts, p.GetCounts())
	return out
}

func poolLimitsFromProto(p *cronoqv1.PoolLimits) PoolLimits {
	l := PoolLimits{
		MaxRunning:       p.GetMaxRunning(),
		MaxPending:       p.GetMaxPending(),
		Overflow:         p.GetOverflow(),
		Rate:             p.GetRate(),
		Burst:            p.GetBurst(),
		ConcurrencyLimit: p.GetConcurrencyLimit(),
		Ordering:         p.GetOrdering(),
		MaxAttempts:      int(p.GetMaxAttempts()),
		LeaseGrace:       p.GetLeaseGrace().AsDuration(),
	}
	if m := p.GetMaxPendingPerClass(); len(m) > 0 {
		l.MaxPendingPerClass = maps.Clone(m)
	}
	for _, kr := range p.GetKindRates() {
		l.KindRates = append(l.KindRates, KindRate{Kind: kr.GetKind(), Rate: kr.GetRate(), Burst: kr.GetBurst()})
	}
	if b := p.GetBackoff(); b != nil {
		l.Backoff = &Backoff{Initial: b.GetInitial().AsDuration(), Max: b.GetMax().AsDuration(), Jitter: b.GetJitter()}
	}
	return l
}

// poolChangeToProto converts a change, refusing only what the wire cannot
// carry (the cluster checks the rest).
func poolChangeToProto(name string, ch PoolChange) (*cronoqv1.SetPoolRequest, error) {
	req := &cronoqv1.SetPoolRequest{
		Pool:             name,
		MaxRunning:       ch.MaxRunning,
		MaxPending:       ch.MaxPending,
		Overflow:         ch.Overflow,
		Rate:             ch.Rate,
		Burst:            ch.Burst,
		ConcurrencyLimit: ch.ConcurrencyLimit,
		Ordering:         ch.Ordering,
		Paused:           ch.Paused,
	}
	if len(ch.MaxPendingPerClass) > 0 {
		req.MaxPendingPerClass = maps.Clone(ch.MaxPendingPerClass)
	}
	for _, kr := range ch.KindRates {
		req.KindRates = append(req.KindRates, &cronoqv1.KindRate{Kind: kr.Kind, Rate: kr.Rate, Burst: kr.Burst})
	}
	if n := ch.MaxAttempts; n != nil {
		if *n < 0 || int64(*n) > int64(^uint32(0)) {
			return nil, &InvalidError{Field: "max_attempts", Reason: "out of range"}
		}
		req.MaxAttempts = new(uint32(*n))
	}
	if b := ch.Backoff; b != nil {
		req.Backoff = &cronoqv1.Backoff{Initial: durationToProto(b.Initial), Max: durationToProto(b.Max), Jitter: b.Jitter}
	}
	if g := ch.LeaseGrace; g != nil {
		// Present, even when 0: that restores the cluster's default.
		req.LeaseGrace = durationpb.New(*g)
	}
	return req, nil
}

func workerFromProto(p *cronoqv1.WorkerInfo) WorkerInfo {
	return WorkerInfo{
		ID:       p.GetId(),
		Pool:     p.GetPool(),
		Labels:   kvsFromProto(p.GetLabels()),
		Slots:    p.GetSlots(),
		Busy:     p.GetBusy(),
		Node:     p.GetNode(),
		LastSeen: timeFromProto(p.GetLastSeen()),
	}
}
