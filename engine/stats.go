package engine

import (
	"sync/atomic"
	"time"

	"github.com/cronoq/cronoq/engine/core"
)

// Stats are the engine's counters (totals since Start) and gauges.
type Stats struct {
	Submitted  uint64 // tasks admitted, acknowledged to their submitter
	Duplicates uint64 // submits answered with an existing task (idempotency key)
	Dispatched uint64 // attempts granted and released to a worker
	Completed  uint64 // completions accepted and durable

	Batches       uint64        // entries appended
	Committed     uint64        // entries applied
	Mutations     uint64        // mutations appended
	BatchBytes    uint64        // encoded bytes appended
	CommitLatency time.Duration // total Append-to-applied time of the committed entries

	InFlight    int // entries appended and not resolved
	Queued      int // pending steps waiting for an entry slot
	QueuedBytes int // encoded size (an upper bound) of their mutations
	Requests    int // calls taken by the core and not answered yet (parked, polling, held)
	Inbox       int // calls handed to the engine and not taken by its goroutine yet

	// Saturated: the write path is past its threshold, and submits are
	// refused (SaturatedRefusals of them so far).
	Saturated         bool
	SaturatedRefusals uint64

	DroppedDispatches uint64 // grants whose poller had gone away (their leases expire)
	DroppedEvents     uint64 // events a lagging subscriber missed

	// Durable subscriptions: the times events went out again after their
	// ack timeout, the stalls, and the tasks purged at the retention cap
	// with events not acked.
	Redeliveries       uint64
	Stalls             uint64
	RetentionCapPurges uint64
}

type counters struct {
	submitted, duplicates, dispatched, completed atomic.Uint64
	batches, committed, mutations, batchBytes    atomic.Uint64
	commitNanos                                  atomic.Int64
	inFlight, queued, queuedBytes, requests      atomic.Int64
	droppedDispatches, saturatedRefusals         atomic.Uint64
	redeliveries, stalls, retentionCapPurges     atomic.Uint64
}

// countSubmitted records the tasks an answered submit admitted.
func (c *counters) countSubmitted(res *core.SubmitResult) {
	for _, s := range res.Tasks {
		switch {
		case s.ID == "":
		case s.Duplicate:
			c.duplicates.Add(1)
		default:
			c.submitted.Add(1)
		}
	}
}

// Stats returns the engine's counters. It may be called at any time, also
// after the engine stopped.
func (e *Engine) Stats() Stats {
	c := &e.stats
	return Stats{
		Submitted:         c.submitted.Load(),
		Duplicates:        c.duplicates.Load(),
		Dispatched:        c.dispatched.Load(),
		Completed:         c.completed.Load(),
		Batches:           c.batches.Load(),
		Committed:         c.committed.Load(),
		Mutations:         c.mutations.Load(),
		BatchBytes:        c.batchBytes.Load(),
		CommitLatency:     time.Duration(c.commitNanos.Load()),
		InFlight:          int(c.inFlight.Load()),
		Queued:            int(c.queued.Load()),
		QueuedBytes:       int(c.queuedBytes.Load()),
		Requests:          int(c.requests.Load()),
		Inbox:             len(e.in),
		Saturated:         e.saturated.Load(),
		SaturatedRefusals: c.saturatedRefusals.Load(),
		DroppedDispatches: c.droppedDispatches.Load(),
		DroppedEvents:     e.hub.dropped.Load(),

		Redeliveries:       c.redeliveries.Load(),
		Stalls:             c.stalls.Load(),
		RetentionCapPurges: c.retentionCapPurges.Load(),
	}
}
