package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// SubscriptionSpec creates a durable subscription: from its creation on,
// every task status event its filter takes is kept by the cluster, in log
// order, until acked (Ack) or the subscription is removed.
type SubscriptionSpec struct {
	Name string
	// The filter: task events of these pools, statuses and kinds only
	// (each empty: any).
	Pools    []string
	Statuses []string
	Kinds    []string
	// Webhook is the URL the leader posts the events to, signed with
	// Secret (none when empty).
	Webhook string
	Secret  string
	// AckTimeout is how long events sent to a reader wait for their ack
	// before they are sent again (0: 30s); MaxDeliveries how many times
	// the first unacked event is sent before the subscription stalls (0:
	// 10).
	AckTimeout    time.Duration
	MaxDeliveries int
}

// Subscription is a durable subscription as the cluster holds it.
type Subscription struct {
	Name          string
	Pools         []string
	Statuses      []string
	Kinds         []string
	Webhook       string
	HasSecret     bool // the secret itself is never returned
	AckTimeout    time.Duration
	MaxDeliveries int

	// Acked is the cursor up to which (inclusive) its events were acked
	// (0: none); Pending how many events it holds, not acked.
	Acked   uint64
	Pending int
	// Stalled: its first unacked event was sent MaxDeliveries times
	// without an ack. Its events are kept; the next ack clears it.
	Stalled     bool
	StallReason string
	StalledAt   time.Time

	CreatedAt   time.Time
	CreateIndex uint64
	ModifyIndex uint64
}

func subscriptionFromProto(p *cronoqv1.Subscription) *Subscription {
	s := &Subscription{
		Name: p.GetName(), Pools: p.GetPools(), Kinds: p.GetKinds(), Webhook: p.GetWebhook(), HasSecret: p.GetHasSecret(),
		AckTimeout: p.GetAckTimeout().AsDuration(), MaxDeliveries: int(p.GetMaxDeliveries()), Acked: p.GetAcked(),
		Pending: int(p.GetPending()), Stalled: p.GetStalled(), StallReason: p.GetStallReason(),
		StalledAt: timeFromProto(p.GetStalledAt()), CreatedAt: timeFromProto(p.GetCreatedAt()),
		CreateIndex: p.GetCreateIndex(), ModifyIndex: p.GetModifyIndex(),
	}
	for _, st := range p.GetStatuses() {
		s.Statuses = append(s.Statuses, statusFromProto(st))
	}
	return s
}

// CreateSubscription creates a durable subscription and returns it.
// Creating one that exists with the same settings returns it; with other
// settings it fails with ErrInvalid (remove it first).
func (c *Client) CreateSubscription(ctx context.Context, spec SubscriptionSpec) (*Subscription, error) {
	what := "creating subscription " + spec.Name
	p := &cronoqv1.Subscription{Name: spec.Name, Pools: spec.Pools, Kinds: spec.Kinds, Webhook: spec.Webhook}
	for _, s := range spec.Statuses {
		st, err := statusToProto(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		p.Statuses = append(p.Statuses, st)
	}
	switch {
	case spec.AckTimeout < 0:
		return nil, fmt.Errorf("%s: %w", what, &InvalidError{Field: "ack_timeout", Reason: "must not be negative"})
	case spec.AckTimeout > 0:
		p.AckTimeout = durationpb.New(spec.AckTimeout)
	}
	if spec.MaxDeliveries < 0 || spec.MaxDeliveries > 1<<32-1 {
		return nil, fmt.Errorf("%s: %w", what, &InvalidError{Field: "max_deliveries", Reason: "out of range"})
	}
	p.MaxDeliveries = uint32(spec.MaxDeliveries)
	resp, err := unary(ctx, c, what, idempotent, &cronoqv1.CreateSubscriptionRequest{Subscription: p, Secret: spec.Secret},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CreateSubscriptionRequest]) (*connect.Response[cronoqv1.CreateSubscriptionResponse], error) {
			return ep.subscriptions.Create
		})
	if err != nil {
		return nil, err
	}
	return subscriptionFromProto(resp.GetSubscription()), nil
}

// ListSubscriptions returns the subscriptions the caller may read, by
// name.
func (c *Client) ListSubscriptions(ctx context.Context) ([]*Subscription, error) {
	resp, err := unary(ctx, c, "listing subscriptions", read, &cronoqv1.ListSubscriptionsRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListSubscriptionsRequest]) (*connect.Response[cronoqv1.ListSubscriptionsResponse], error) {
			return ep.subscriptions.List
		})
	if err != nil {
		return nil, err
	}
	out := make([]*Subscription, 0, len(resp.GetSubscriptions()))
	for _, p := range resp.GetSubscriptions() {
		out = append(out, subscriptionFromProto(p))
	}
	return out, nil
}

// GetSubscription returns a subscription (ErrNotFound when there is none).
func (c *Client) GetSubscription(ctx context.Context, name string) (*Subscription, error) {
	resp, err := unary(ctx, c, "reading subscription "+name, read, &cronoqv1.GetSubscriptionRequest{Name: name},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetSubscriptionRequest]) (*connect.Response[cronoqv1.GetSubscriptionResponse], error) {
			return ep.subscriptions.Get
		})
	if err != nil {
		return nil, err
	}
	return subscriptionFromProto(resp.GetSubscription()), nil
}

// RemoveSubscription removes a subscription and the events it holds;
// removed is false when there was none.
func (c *Client) RemoveSubscription(ctx context.Context, name string) (removed bool, err error) {
	resp, err := unary(ctx, c, "removing subscription "+name, idempotent, &cronoqv1.RemoveSubscriptionRequest{Name: name},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RemoveSubscriptionRequest]) (*connect.Response[cronoqv1.RemoveSubscriptionResponse], error) {
			return ep.subscriptions.Remove
		})
	if err != nil {
		return false, err
	}
	return resp.GetRemoved(), nil
}

// Ack acks the events of subscription up to cursor (inclusive): the
// cluster drops them, and they are not sent again. It returns the
// subscription's acked cursor, which never goes back (acking an older
// cursor changes nothing). Acks are safe to repeat.
func (c *Client) Ack(ctx context.Context, subscription string, cursor uint64) (uint64, error) {
	resp, err := unary(ctx, c, "acking subscription "+subscription, idempotent, &cronoqv1.AckSubscriptionRequest{Name: subscription, Cursor: cursor},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AckSubscriptionRequest]) (*connect.Response[cronoqv1.AckSubscriptionResponse], error) {
			return ep.subscriptions.Ack
		})
	if err != nil {
		return 0, err
	}
	return resp.GetAcked(), nil
}

// ReadSubscription reads the events of a durable subscription, each with
// its Cursor, in log order: those it holds after cursor after (0: after
// its acked cursor), then the later ones as they come. Delivery is at
// least once: events not acked (Ack) within the subscription's ack timeout
// come again, from the first one not acked. A lost stream (a node going
// away, a new leader) is read again, through the addresses with backoff,
// after the last event the channel delivered; the new leader sends again
// whatever stays unacked past its ack timeout. The channel closes when ctx
// ends or the Client is closed; if the read fails in a way retrying cannot
// fix (no such subscription, permission denied), a last event carries Err.
func (c *Client) ReadSubscription(ctx context.Context, name string, after uint64) (<-chan Event, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("reading subscription %s: %w", name, ErrClosed)
	}
	c.wg.Add(1)
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.base, cancel)
	ch := make(chan Event, eventsBuffer)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		defer cancel()
		defer stop()
		c.runRead(ctx, name, after, ch)
	}()
	return ch, nil
}

// runRead feeds ch until ctx ends or a final error.
func (c *Client) runRead(ctx context.Context, name string, after uint64, ch chan<- Event) {
	emit := func(ev Event) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for n := 0; ; {
		addr, err := c.pick(false)
		if err != nil {
			return
		}
		stream, err := c.endpointFor(addr).subscriptions.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: name, After: after}))
		if err == nil {
			for stream.Receive() {
				n = 0
				c.succeeded(addr)
				ev := eventFromProto(stream.Msg())
				if !emit(ev) {
					_ = stream.Close()
					return
				}
				after = ev.Cursor
			}
			err = stream.Err()
			_ = stream.Close()
			if err == nil {
				err = connect.NewError(connect.CodeUnavailable, errors.New("subscription stream ended"))
			}
		}
		if ctx.Err() != nil {
			return
		}
		err = decodeError(err)
		if !resubscribable(err) {
			emit(Event{Err: fmt.Errorf("reading subscription %s: %w", name, err)})
			return
		}
		hint := ""
		var ae *APIError
		if errors.As(err, &ae) && ae.Kind == apierr.KindNotLeader {
			hint = ae.LeaderAddr
		}
		c.failed(addr, hint, false)
		c.log.Debug("subscription stream lost, reading again", "subscription", name, "addr", addr, "after", after, "error", err)
		n++
		if sleep(ctx, c.backoff(n)) != nil {
			return
		}
	}
}
