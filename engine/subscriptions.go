package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// CreateSubscription creates a durable subscription and returns it as
// recorded, once durable (see core.Core.CreateSubscription).
func (e *Engine) CreateSubscription(ctx context.Context, spec core.SubscriptionSpec) (fsm.Subscription, error) {
	return send[fsm.Subscription](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.CreateSubscription(now, req, spec)
	})
}

// RemoveSubscription removes a subscription and the events it holds;
// removed is false when there was none.
func (e *Engine) RemoveSubscription(ctx context.Context, name string) (removed bool, err error) {
	return send[bool](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.RemoveSubscription(now, req, name)
	})
}

// AckSubscription acks the events of subscription name up to cursor and
// returns the acked cursor once durable (see core.Core.AckSubscription).
func (e *Engine) AckSubscription(ctx context.Context, name string, cursor uint64) (uint64, error) {
	return send[uint64](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.AckSubscription(now, req, name, cursor)
	})
}

// SubscriptionSent reports that the events of subscription name after
// cursor after, up to upTo, are going out to a consumer now.
func (e *Engine) SubscriptionSent(ctx context.Context, name string, after, upTo uint64) error {
	if err := e.ask(ctx, func(c *core.Core, now time.Time) { c.SubscriptionSent(now, name, after, upTo) }); err != nil {
		return err
	}
	return e.ackOnSend(ctx, name, upTo)
}

// Subscription returns the delivery state of subscription name, read on
// the engine's goroutine.
func (e *Engine) Subscription(ctx context.Context, name string) (core.SubscriptionState, bool, error) {
	var (
		st core.SubscriptionState
		ok bool
	)
	err := e.ask(ctx, func(c *core.Core, _ time.Time) { st, ok = c.Subscription(name) })
	return st, ok, err
}

// WatchRedeliveries returns a channel that receives, each time the core
// decides the events of subscription name go out again, the cursor after
// which they do; cancel ends the watch. A watcher that has not taken the
// last one yet is not given another (the one it has goes back at least as
// far: the acked cursor only grows).
func (e *Engine) WatchRedeliveries(name string) (<-chan uint64, func()) {
	return e.redeliveries.watch(name)
}

// redeliveryHub hands the redeliveries of the core to the consumers
// watching them.
type redeliveryHub struct {
	mu       sync.Mutex
	watchers map[string]map[chan uint64]struct{}
}

func (h *redeliveryHub) watch(name string) (<-chan uint64, func()) {
	ch := make(chan uint64, 1)
	h.mu.Lock()
	if h.watchers == nil {
		h.watchers = make(map[string]map[chan uint64]struct{})
	}
	if h.watchers[name] == nil {
		h.watchers[name] = make(map[chan uint64]struct{})
	}
	h.watchers[name][ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.watchers[name], ch)
			if len(h.watchers[name]) == 0 {
				delete(h.watchers, name)
			}
		})
	}
}

func (h *redeliveryHub) publish(r core.Redelivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.watchers[r.Subscription] {
		select {
		case ch <- r.From:
		default:
		}
	}
}

// subscriptionOutputs carries out the redeliveries and notices of a core
// step: they take effect at once.
func (e *Engine) subscriptionOutputs(out *core.Output) {
	for _, r := range out.Redeliveries {
		e.stats.redeliveries.Add(1)
		e.logger.Debug("subscription events go out again", "subscription", r.Subscription, "after", r.From, "deliveries", r.Deliveries)
		e.redeliveries.publish(r)
		if e.cfg.OnRedelivery != nil {
			e.cfg.OnRedelivery(r)
		}
	}
	for _, n := range out.Notices {
		switch n.Kind {
		case core.NoticeStalled:
			e.stats.stalls.Add(1)
			e.logger.Warn("subscription stalled: its events are kept until acked", "subscription", n.Subject, "reason", n.Detail)
		case core.NoticeRetentionCap:
			e.stats.retentionCapPurges.Add(1)
			e.logger.Warn("task purged at the retention cap with events not acked", "task", n.Subject,
				"subscriptions", strings.Join(n.Holders, ","), "cap", e.cfg.Core.RetentionCap)
		default:
			e.logger.Warn("engine notice", "kind", fmt.Sprint(n.Kind), "subject", n.Subject, "detail", n.Detail)
		}
		if e.cfg.OnNotice != nil {
			e.cfg.OnNotice(n)
		}
	}
	out.Redeliveries, out.Notices = nil, nil
}
