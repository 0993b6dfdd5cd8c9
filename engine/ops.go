package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/engine/core"
)

// CancelBatch is how many tasks one commit of CancelMatching cancels at
// most.
const CancelBatch = 500

// Retry puts a task that ended failed, expired or cancelled back in the
// queue (see core.Core.Retry). It returns once that is durable.
func (e *Engine) Retry(ctx context.Context, ref core.TaskRef) (core.Retried, error) {
	return send[core.Retried](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.Retry(now, req, ref)
	})
}

// CancelMatching cancels the live tasks f selects when it begins, batch
// (CancelBatch when <= 0) at a time: each batch is its own commit, and the
// next is sent once the previous one is durable, so a large cancel never
// makes one huge entry and other work goes on between its batches. A task
// that no longer matches when its batch comes (it ended, or moved to
// another status) is left alone, and tasks that start matching meanwhile
// are not looked for. It returns how many it cancelled; on an error, how
// many it had cancelled before it (the rest of the cancel did not happen,
// and calling again cancels what still matches).
func (e *Engine) CancelMatching(ctx context.Context, f core.TaskFilter, batch int) (int, error) {
	if batch <= 0 {
		batch = CancelBatch
	}
	var (
		ids  []string
		ferr error
	)
	if err := e.ask(ctx, func(c *core.Core, _ time.Time) { ids, ferr = c.Matching(f) }); err != nil {
		return 0, err
	}
	if ferr != nil {
		return 0, ferr
	}
	n := 0
	for len(ids) > 0 {
		chunk := ids[:min(batch, len(ids))]
		ids = ids[len(chunk):]
		got, err := send[core.CancelledMany](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
			c.CancelTasks(now, req, chunk, f)
		})
		if err != nil {
			return n, fmt.Errorf("cancelling tasks of pool %s after %d: %w", f.Pool, n, err)
		}
		n += got.Cancelled
	}
	return n, nil
}
