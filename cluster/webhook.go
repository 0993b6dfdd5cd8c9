package cluster

import (
	"context"
	"fmt"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/loophealth"
	"github.com/cronoq/cronoq/webhook"
)

// Webhooks: while a node leads, a webhook.Deliverer of its term posts the
// events of every subscription with a webhook, reading them from this
// node's replica and acknowledging them through the term's engine. It
// starts once the term is established (so it resumes from the durable
// cursors) and stops before the engine does. Each subscription's delivery
// is a loop of the node (WebhookLoop): its failures back off and, in a
// row, degrade the node's health; it is reset when the term ends and
// removed with its subscription.

// webhookSource is the deliverer's view of one term: the replica and the
// term's engine.
type webhookSource struct {
	state *fsm.State
	eng   *engine.Engine
}

var _ webhook.Source = webhookSource{}

func toWebhookSub(s *fsm.Subscription) webhook.Subscription {
	return webhook.Subscription{Name: s.Name, URL: s.Webhook, Secret: s.Secret, Acked: s.Acked, Stalled: s.Stalled}
}

// Webhooks implements webhook.Source.
func (w webhookSource) Webhooks() ([]webhook.Subscription, error) {
	var out []webhook.Subscription
	for _, s := range w.state.Subscriptions() {
		if s.Webhook != "" {
			out = append(out, toWebhookSub(s))
		}
	}
	return out, nil
}

// Lookup implements webhook.Source.
func (w webhookSource) Lookup(name string) (webhook.Subscription, bool) {
	s, ok := w.state.Subscription(name)
	if !ok {
		return webhook.Subscription{}, false
	}
	return toWebhookSub(s), true
}

// Events implements webhook.Source.
func (w webhookSource) Events(name string, after uint64, limit int) ([]webhook.Event, error) {
	evs := w.state.SubscriptionEvents(name, after, limit)
	out := make([]webhook.Event, len(evs))
	for i, e := range evs {
		out[i] = WebhookEvent(e)
	}
	return out, nil
}

// Sent implements webhook.Source: the attempt counts as a delivery of the
// subscription's first unacked event (its delivery limit stalls it).
func (w webhookSource) Sent(ctx context.Context, name string, after, upTo uint64) error {
	if err := w.eng.SubscriptionSent(ctx, name, after, upTo); err != nil {
		return fmt.Errorf("reporting the send to the engine: %w", err)
	}
	return nil
}

// Ack implements webhook.Source.
func (w webhookSource) Ack(ctx context.Context, name string, cursor uint64) error {
	if _, err := w.eng.AckSubscription(ctx, name, cursor); err != nil {
		return fmt.Errorf("acknowledging through the log: %w", err)
	}
	return nil
}

// Changed implements webhook.Source.
func (w webhookSource) Changed() <-chan struct{} { return w.state.SubscriptionWatch() }

// WebhookEvent is the wire form of a status event.
func WebhookEvent(e fsm.Event) webhook.Event {
	ev := webhook.Event{
		TaskID: e.TaskID, Pool: e.Pool, Kind: e.Kind, Status: e.Status.String(), Attempt: e.Attempt,
		At: e.At.Time().UTC(), Cursor: e.Cursor, Message: e.Message, Workflow: e.Workflow, Step: e.Step,
	}
	if e.TaskID == "" {
		ev.Status = ""
		ev.WorkflowStatus = e.WorkflowStatus.String()
	}
	return ev
}

// WebhookLoop is the name of the loop of subscription sub's webhook in
// the node's health (Loops).
func WebhookLoop(sub string) string { return "webhook:" + sub }

// startWebhooks starts the webhook deliveries of a term whose engine is
// eng; they end with ctx or stopWebhooks.
func (n *Node) startWebhooks(ctx context.Context, eng *engine.Engine) (*webhook.Deliverer, error) {
	cfg := n.cfg.Webhook
	if cfg.Logger == nil {
		cfg.Logger = n.logger.Named("webhook")
	}
	if m := n.cfg.Metrics; m != nil {
		observe, delivered := cfg.Observe, cfg.Delivered
		cfg.Observe = func(a webhook.Attempt) {
			result := "ok"
			switch {
			case a.Err != nil && a.Status != 0:
				result = "http_error"
			case a.Err != nil:
				result = "transport_error"
			}
			m.WebhookAttempt(a.Subscription, result, a.Duration)
			if observe != nil {
				observe(a)
			}
		}
		cfg.Delivered = func(sub string, events int) {
			m.WebhookDelivered(sub, events)
			if delivered != nil {
				delivered(sub, events)
			}
		}
	}
	if cfg.Loop == nil {
		pol := cfg.WithDefaults()
		cfg.Loop = func(sub string) webhook.Loop {
			return n.loops.set.Register(WebhookLoop(sub), loophealth.Policy{Min: pol.MinBackoff, Max: pol.MaxBackoff})
		}
	}
	d := webhook.New(cfg, webhookSource{state: n.state, eng: eng})
	if err := d.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the webhook deliveries: %w", err)
	}
	return d, nil
}
