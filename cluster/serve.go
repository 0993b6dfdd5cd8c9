package cluster

import (
	"context"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/engine/core/cron"
	"github.com/cronoq/cronoq/fsm"
)

// This file is what a Node serves to the API server: the leader's
// operations, each run on the engine of the current term (or answered with
// a *NotLeaderError while this node does not serve as leader), and reads of
// its replica. The API server reaches the engine through these and nothing
// else, so the vocabulary of the operations is named here too: the engine
// core defines these types, and the aliases below let the server import
// this package alone.

// The vocabulary of the leader's operations.
type (
	Spec         = core.Spec
	SubmitMode   = core.SubmitMode
	SubmitResult = core.SubmitResult
	Submitted    = core.Submitted
	TaskRef      = core.TaskRef
	Offer        = core.Offer
	Grant        = core.Grant
	Outcome      = core.Outcome
	OutcomeKind  = core.OutcomeKind
	Completion   = engine.Completion
	Cancelled    = core.Cancelled
	ScheduleSpec = core.ScheduleSpec
	InvalidError = core.InvalidError
	VersionError = core.VersionError

	StepSpec          = core.StepSpec
	WorkflowSpec      = core.WorkflowSpec
	WorkflowSubmitted = core.WorkflowSubmitted
	StepTask          = core.StepTask
	WorkflowRef       = core.WorkflowRef
	CancelledWorkflow = core.CancelledWorkflow

	PoolChange = core.PoolChange
	PoolInfo   = core.PoolInfo
	PoolConfig = core.PoolConfig
	Rate       = core.Rate
	Deleted    = core.Deleted
	KindChange = core.KindChange
)

// Submit modes and outcome kinds (see the engine core).
const (
	// GlobalPool names the cluster-wide settings of SetPool.
	GlobalPool = core.GlobalPool

	SubmitOne   = core.SubmitOne
	SubmitBatch = core.SubmitBatch
	SubmitMany  = core.SubmitMany

	OutcomeSuccess   = core.OutcomeSuccess
	OutcomeRetryable = core.OutcomeRetryable
	OutcomePermanent = core.OutcomePermanent
	OutcomeCancelled = core.OutcomeCancelled
)

// Errors of the leader's operations, besides *NotLeaderError,
// *InvalidError and *VersionError.
var (
	ErrOverloaded = core.ErrOverloaded
	// ErrWritePathSaturated is an ErrOverloaded refusing a submit while the
	// log does not keep up; retry after a short while.
	ErrWritePathSaturated = engine.ErrWritePathSaturated
	ErrNotFound           = core.ErrNotFound
	ErrStaleLease         = core.ErrStaleLease
	ErrShuttingDown       = core.ErrShuttingDown
	ErrNotWaiting         = core.ErrNotWaiting
	ErrStopped            = engine.ErrStopped
	ErrOutcomeUnknown     = engine.ErrOutcomeUnknown
)

// The tracing of the leader's operations: see WithCommitObserver.
type (
	EntryTrace     = engine.EntryTrace
	CommitObserver = engine.CommitObserver
)

// WithCommitObserver returns a copy of ctx whose leader operations report
// to fn the log entry that made their answer durable (for tracing; see
// engine.WithCommitObserver).
func WithCommitObserver(ctx context.Context, fn CommitObserver) context.Context {
	return engine.WithCommitObserver(ctx, fn)
}

// Invalid returns an *InvalidError naming field.
func Invalid(field, format string, args ...any) error { return core.Invalid(field, format, args...) }

// Term is this node's current term of leadership: the epoch its engine
// writes with, and a channel closed when the term ends (its engine stopped).
type Term struct {
	Epoch uint64
	Done  <-chan struct{}
}

// Leading returns the current term while this node leads and serves, else
// a *NotLeaderError naming the leader.
func (n *Node) Leading() (Term, error) {
	n.mu.Lock()
	eng, ready, epoch := n.eng, n.ready, n.epoch
	n.mu.Unlock()
	if eng == nil || !ready || !n.IsLeader() {
		return Term{}, n.notLeader(nil)
	}
	return Term{Epoch: epoch, Done: eng.Done()}, nil
}

// engine returns the engine of the current term while this node leads and
// serves, else a *NotLeaderError naming the leader.
func (n *Node) engine() (*engine.Engine, error) {
	n.mu.Lock()
	eng, ready := n.eng, n.ready
	n.mu.Unlock()
	if eng != nil && ready && n.IsLeader() {
		return eng, nil
	}
	return nil, n.notLeader(nil)
}

// lead runs op on the engine of the current term.
func lead[T any](n *Node, op func(*engine.Engine) (T, error)) (T, error) {
	eng, err := n.engine()
	if err != nil {
		var zero T
		return zero, err
	}
	return op(eng)
}

// Submit admits tasks in one of the three submit forms.
func (n *Node) Submit(ctx context.Context, mode SubmitMode, specs []Spec) (*SubmitResult, error) {
	return lead(n, func(e *engine.Engine) (*SubmitResult, error) { return e.Submit(ctx, mode, specs) })
}

// Poll offers a worker's capacity and waits until attempts are granted.
func (n *Node) Poll(ctx context.Context, offer Offer) ([]Grant, error) {
	return lead(n, func(e *engine.Engine) ([]Grant, error) { return e.Poll(ctx, offer) })
}

// Heartbeat extends leases: one error per lease, nil or ErrStaleLease.
func (n *Node) Heartbeat(ctx context.Context, leases []uint64) ([]error, error) {
	return lead(n, func(e *engine.Engine) ([]error, error) { return e.Heartbeat(ctx, leases) })
}

// Complete reports the outcomes of attempts, one error per completion.
func (n *Node) Complete(ctx context.Context, cs []Completion) []error {
	errs, err := lead(n, func(e *engine.Engine) ([]error, error) { return e.CompleteMany(ctx, cs), nil })
	if err != nil {
		errs = make([]error, len(cs))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// Cancel cancels a task.
func (n *Node) Cancel(ctx context.Context, ref TaskRef) (Cancelled, error) {
	return lead(n, func(e *engine.Engine) (Cancelled, error) { return e.Cancel(ctx, ref) })
}

// Wait returns the id of the task once it has ended and that is durable.
func (n *Node) Wait(ctx context.Context, ref TaskRef) (string, error) {
	return lead(n, func(e *engine.Engine) (string, error) { return e.Wait(ctx, ref) })
}

// CompleteExternal ends an external task waiting for its completion and
// returns its id once that is durable.
func (n *Node) CompleteExternal(ctx context.Context, ref TaskRef, out Outcome) (string, error) {
	return lead(n, func(e *engine.Engine) (string, error) { return e.CompleteExternal(ctx, ref, out) })
}

// SubmitWorkflow admits a workflow, its steps atomically.
func (n *Node) SubmitWorkflow(ctx context.Context, spec WorkflowSpec) (*WorkflowSubmitted, error) {
	return lead(n, func(e *engine.Engine) (*WorkflowSubmitted, error) { return e.SubmitWorkflow(ctx, spec) })
}

// CancelWorkflow cancels every live member of a workflow, in one commit.
func (n *Node) CancelWorkflow(ctx context.Context, ref WorkflowRef) (CancelledWorkflow, error) {
	return lead(n, func(e *engine.Engine) (CancelledWorkflow, error) { return e.CancelWorkflow(ctx, ref) })
}

// WaitWorkflow returns the id of the workflow once it has ended and that
// is durable.
func (n *Node) WaitWorkflow(ctx context.Context, ref WorkflowRef) (string, error) {
	return lead(n, func(e *engine.Engine) (string, error) { return e.WaitWorkflow(ctx, ref) })
}

// AddSchedule creates or replaces a recurring schedule and returns its next
// fire instant (0 while paused).
func (n *Node) AddSchedule(ctx context.Context, spec ScheduleSpec) (fsm.Instant, error) {
	return lead(n, func(e *engine.Engine) (fsm.Instant, error) { return e.AddSchedule(ctx, spec) })
}

// RemoveSchedule removes a recurring schedule; false when there was none.
func (n *Node) RemoveSchedule(ctx context.Context, name string) (bool, error) {
	return lead(n, func(e *engine.Engine) (bool, error) { return e.RemoveSchedule(ctx, name) })
}

// PauseSchedule pauses or resumes a recurring schedule and returns its new
// state.
func (n *Node) PauseSchedule(ctx context.Context, name string, paused bool) (bool, error) {
	return lead(n, func(e *engine.Engine) (bool, error) { return e.PauseSchedule(ctx, name, paused) })
}

// SetPool changes a pool's settings through the log.
func (n *Node) SetPool(ctx context.Context, ch PoolChange) (PoolInfo, error) {
	return lead(n, func(e *engine.Engine) (PoolInfo, error) { return e.SetPool(ctx, ch) })
}

// Pools describes the pools the leader knows.
func (n *Node) Pools(ctx context.Context) ([]PoolInfo, error) {
	return lead(n, func(e *engine.Engine) ([]PoolInfo, error) { return e.Pools(ctx) })
}

// Pool describes one pool, as the leader runs it.
func (n *Node) Pool(ctx context.Context, name string) (PoolInfo, error) {
	return lead(n, func(e *engine.Engine) (PoolInfo, error) { return e.Pool(ctx, name) })
}

// SetKind changes a kind's settings through the log.
func (n *Node) SetKind(ctx context.Context, ch KindChange) (fsm.KindSettings, error) {
	return lead(n, func(e *engine.Engine) (fsm.KindSettings, error) { return e.SetKind(ctx, ch) })
}

// Kind returns a kind's settings, as the leader has them.
func (n *Node) Kind(ctx context.Context, pool, kind string) (fsm.KindSettings, error) {
	return lead(n, func(e *engine.Engine) (fsm.KindSettings, error) { return e.Kind(ctx, pool, kind) })
}

// Delete removes an ended task now.
func (n *Node) Delete(ctx context.Context, ref TaskRef) (Deleted, error) {
	return lead(n, func(e *engine.Engine) (Deleted, error) { return e.Delete(ctx, ref) })
}

// NextFire is the next fire instant of a stored schedule after its
// committed cursor (0 while paused, or when its expression no longer
// parses).
func NextFire(s *fsm.Schedule) fsm.Instant {
	if s.Paused {
		return 0
	}
	expr, err := cron.Parse(s.Cron, s.TZ)
	if err != nil {
		return 0
	}
	cursor := s.LastFire
	if cursor == 0 {
		cursor = s.CreatedAt
	}
	return fsm.InstantOf(cron.NextAfter(expr, cursor.Time()))
}

// ConsistentRead returns the replicated state for a linearizable read:
// this node must lead, be ready (its barrier passed) and still hold a
// quorum (VerifyLeader). Otherwise a *NotLeaderError.
func (n *Node) ConsistentRead(ctx context.Context) (fsm.Reader, error) {
	return n.consistentState(ctx)
}

// StaleRead returns the local replicated state, which may lag the leader,
// with how stale it may be.
func (n *Node) StaleRead() (fsm.Reader, Staleness) {
	return n.staleState()
}
