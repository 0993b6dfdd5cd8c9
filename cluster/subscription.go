package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// Durable subscriptions: the leader's operations, and reads of the
// replica (every node holds the subscriptions and their events).

// SubscriptionSpec creates a subscription (see the engine core).
type SubscriptionSpec = core.SubscriptionSpec

// Defaults of a subscription.
const (
	DefaultAckTimeout    = core.DefaultAckTimeout
	DefaultMaxDeliveries = core.DefaultMaxDeliveries
)

// SubscriptionReader reads the subscriptions of a replica (implemented by
// *fsm.State).
type SubscriptionReader interface {
	AppliedIndex() uint64
	Subscription(name string) (*fsm.Subscription, bool)
	Subscriptions() []*fsm.Subscription
	SubscriptionEvents(name string, after uint64, limit int) []fsm.Event
	SubscriptionPending(name string) int
	SubscriptionWatch() <-chan struct{}
}

// Subscriptions reads the subscriptions of this node's replica.
func (n *Node) Subscriptions() SubscriptionReader { return n.state }

// CreateSubscription creates a durable subscription.
func (n *Node) CreateSubscription(ctx context.Context, spec SubscriptionSpec) (fsm.Subscription, error) {
	return lead(n, func(e *engine.Engine) (fsm.Subscription, error) { return e.CreateSubscription(ctx, spec) })
}

// RemoveSubscription removes a subscription and its events; false when
// there was none.
func (n *Node) RemoveSubscription(ctx context.Context, name string) (bool, error) {
	return lead(n, func(e *engine.Engine) (bool, error) { return e.RemoveSubscription(ctx, name) })
}

// AckSubscription acks the events of subscription name up to cursor and
// returns the acked cursor. A cursor past the end of the log is refused:
// no event has it yet.
func (n *Node) AckSubscription(ctx context.Context, name string, cursor uint64) (uint64, error) {
	return lead(n, func(e *engine.Engine) (uint64, error) {
		if applied := n.state.AppliedIndex(); fsm.CursorIndex(cursor) > applied {
			return 0, Invalid("cursor", "%d is past the end of the log (entry %d; %d applied)", cursor, fsm.CursorIndex(cursor), applied)
		}
		return e.AckSubscription(ctx, name, cursor)
	})
}

// SubscriptionFeed is what the consumer of a subscription on the leader
// needs from the current term: where to report its sends, the redeliveries
// the engine decides (the cursor after which the events go out again), and
// the end of the term (the consumer then reconnects to the next leader).
type SubscriptionFeed interface {
	// Sent reports that the events after cursor after, up to upTo, go out
	// to the consumer now.
	Sent(ctx context.Context, after, upTo uint64) error
	Redeliveries() <-chan uint64
	Done() <-chan struct{}
	// Close ends the feed.
	Close()
}

type subFeed struct {
	eng    *engine.Engine
	name   string
	redel  <-chan uint64
	cancel func()
}

func (f *subFeed) Sent(ctx context.Context, after, upTo uint64) error {
	if err := f.eng.SubscriptionSent(ctx, f.name, after, upTo); err != nil {
		return fmt.Errorf("reporting the send of subscription %q: %w", f.name, err)
	}
	return nil
}

func (f *subFeed) Redeliveries() <-chan uint64 { return f.redel }
func (f *subFeed) Done() <-chan struct{}       { return f.eng.Done() }
func (f *subFeed) Close()                      { f.cancel() }

// FeedSubscription returns the feed of the current term for a consumer of
// subscription name (leader only: else a *NotLeaderError).
func (n *Node) FeedSubscription(name string) (SubscriptionFeed, error) {
	return lead(n, func(e *engine.Engine) (SubscriptionFeed, error) {
		ch, cancel := e.WatchRedeliveries(name)
		return &subFeed{eng: e, name: name, redel: ch, cancel: cancel}, nil
	})
}

// stalledReasons lists the stalled subscriptions of the replica, for
// Health.
func (n *Node) stalledReasons() []string {
	var out []string
	for _, s := range n.state.Subscriptions() {
		if s.Stalled {
			out = append(out, fmt.Sprintf("subscription %s stalled since %s, pending events: %d; %s; its events are kept until acked",
				s.Name, s.StalledAt.Time().Format(time.RFC3339), n.state.SubscriptionPending(s.Name), s.StallReason))
		}
	}
	return out
}
