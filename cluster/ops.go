package cluster

import (
	"context"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
)

// Operations on ended and live tasks by an operator: a retry, and cancels
// by filter.
type (
	Retried    = core.Retried
	TaskFilter = core.TaskFilter
)

// ErrNotRetryable refuses the retry of a task that is live or succeeded.
var ErrNotRetryable = core.ErrNotRetryable

// Retry puts a task that ended failed, expired or cancelled back in the
// queue with a new attempt budget.
func (n *Node) Retry(ctx context.Context, ref TaskRef) (Retried, error) {
	return lead(n, func(e *engine.Engine) (Retried, error) { return e.Retry(ctx, ref) })
}

// CancelMany cancels the live tasks f selects, in batches of
// engine.CancelBatch, and returns how many it cancelled.
func (n *Node) CancelMany(ctx context.Context, f TaskFilter) (int, error) {
	return lead(n, func(e *engine.Engine) (int, error) { return e.CancelMatching(ctx, f, 0) })
}
