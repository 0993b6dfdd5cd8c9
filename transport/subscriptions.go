package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
)

// Durable subscriptions. Access: creating or removing a subscription needs
// write on every pool of its filter, reading its events (and acking them,
// getting or listing it) read on every pool of its filter; a subscription
// of every pool (no pool in its filter) needs the level on "*".

// readBatch bounds the events of one read of a subscription's replica.
const readBatch = 256

type subscriptionService struct{ s *Server }

// subPools are the pools a caller needs a level on to act on sub.
func subPools(pools []string) []string {
	if len(pools) == 0 {
		return []string{"*"}
	}
	return pools
}

// needSubscription refuses the call of ctx unless its caller may act at
// level on the pools of subscription name, as this node's replica has it.
// A subscription the replica does not hold is left to the operation.
func (s *Server) needSubscription(ctx context.Context, level acl.Level, name string) error {
	if authorizer(ctx).Management() {
		return nil
	}
	sub, ok := s.node.Subscriptions().Subscription(name)
	if !ok {
		return nil
	}
	return needPool(ctx, level, subPools(sub.Pools)...)
}

func (h *subscriptionService) Create(ctx context.Context, req *connect.Request[cronoqv1.CreateSubscriptionRequest]) (*connect.Response[cronoqv1.CreateSubscriptionResponse], error) {
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.CreateSubscriptionResponse, error) {
		spec, err := subscriptionSpecFromProto(req.Msg.GetSubscription(), req.Msg.GetSecret())
		if err != nil {
			return nil, err
		}
		if err := needPool(ctx, acl.Write, subPools(spec.Pools)...); err != nil {
			return nil, err
		}
		rec, err := h.s.node.CreateSubscription(ctx, spec)
		if err != nil {
			return nil, err
		}
		// The answer comes once the record is applied here: show it as
		// recorded, indexes included.
		r := h.s.node.Subscriptions()
		if applied, ok := r.Subscription(rec.Name); ok {
			rec = *applied
		}
		return &cronoqv1.CreateSubscriptionResponse{Subscription: subscriptionToProto(&rec, r.SubscriptionPending(rec.Name))}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CreateSubscriptionRequest]) (*connect.Response[cronoqv1.CreateSubscriptionResponse], error) {
		return ep.subscriptions.Create
	})
}

func (h *subscriptionService) Remove(ctx context.Context, req *connect.Request[cronoqv1.RemoveSubscriptionRequest]) (*connect.Response[cronoqv1.RemoveSubscriptionResponse], error) {
	name := req.Msg.GetName()
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.RemoveSubscriptionResponse, error) {
		if err := h.s.needSubscription(ctx, acl.Write, name); err != nil {
			return nil, err
		}
		removed, err := h.s.node.RemoveSubscription(ctx, name)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.RemoveSubscriptionResponse{Name: name, Removed: removed}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RemoveSubscriptionRequest]) (*connect.Response[cronoqv1.RemoveSubscriptionResponse], error) {
		return ep.subscriptions.Remove
	})
}

// List and Get read the leader's replica (a linearizable read): a
// subscription created a moment ago shows.

func (h *subscriptionService) List(ctx context.Context, req *connect.Request[cronoqv1.ListSubscriptionsRequest]) (*connect.Response[cronoqv1.ListSubscriptionsResponse], error) {
	return route(ctx, h.s, readCall, req, func(ctx context.Context) (*cronoqv1.ListSubscriptionsResponse, error) {
		if _, err := h.s.node.ConsistentRead(ctx); err != nil {
			return nil, err
		}
		r := h.s.node.Subscriptions()
		a := authorizer(ctx)
		out := &cronoqv1.ListSubscriptionsResponse{}
		for _, sub := range r.Subscriptions() {
			if !a.Management() && !readsAll(a, subPools(sub.Pools)) {
				continue
			}
			out.Subscriptions = append(out.Subscriptions, subscriptionToProto(sub, r.SubscriptionPending(sub.Name)))
		}
		return out, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListSubscriptionsRequest]) (*connect.Response[cronoqv1.ListSubscriptionsResponse], error) {
		return ep.subscriptions.List
	})
}

func (h *subscriptionService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetSubscriptionRequest]) (*connect.Response[cronoqv1.GetSubscriptionResponse], error) {
	name := req.Msg.GetName()
	return route(ctx, h.s, readCall, req, func(ctx context.Context) (*cronoqv1.GetSubscriptionResponse, error) {
		if _, err := h.s.node.ConsistentRead(ctx); err != nil {
			return nil, err
		}
		r := h.s.node.Subscriptions()
		sub, ok := r.Subscription(name)
		if !ok {
			return nil, fmt.Errorf("subscription %q: %w", name, cluster.ErrNotFound)
		}
		if err := needPool(ctx, acl.Read, subPools(sub.Pools)...); err != nil {
			return nil, err
		}
		return &cronoqv1.GetSubscriptionResponse{Subscription: subscriptionToProto(sub, r.SubscriptionPending(name))}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetSubscriptionRequest]) (*connect.Response[cronoqv1.GetSubscriptionResponse], error) {
		return ep.subscriptions.Get
	})
}

// Ack is safe to send again: acking a cursor twice changes nothing.
func (h *subscriptionService) Ack(ctx context.Context, req *connect.Request[cronoqv1.AckSubscriptionRequest]) (*connect.Response[cronoqv1.AckSubscriptionResponse], error) {
	name, cursor := req.Msg.GetName(), req.Msg.GetCursor()
	return route(ctx, h.s, readCall, req, func(ctx context.Context) (*cronoqv1.AckSubscriptionResponse, error) {
		if cursor == 0 {
			return nil, invalidf("cursor", "must be set")
		}
		if err := h.s.needSubscription(ctx, acl.Read, name); err != nil {
			return nil, err
		}
		acked, err := h.s.node.AckSubscription(ctx, name, cursor)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.AckSubscriptionResponse{Name: name, Acked: acked}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AckSubscriptionRequest]) (*connect.Response[cronoqv1.AckSubscriptionResponse], error) {
		return ep.subscriptions.Ack
	})
}

// Read streams the events of a subscription: served by the leader, which
// counts the sends against the ack timeout, relayed by any other node.
func (h *subscriptionService) Read(ctx context.Context, req *connect.Request[cronoqv1.ReadSubscriptionRequest], stream *connect.ServerStream[cronoqv1.Event]) error {
	name := req.Msg.GetName()
	if err := h.s.needSubscription(ctx, acl.Read, name); err != nil {
		return err
	}
	return relayStream(ctx, h.s, req, stream, func(ctx context.Context) error {
		return h.readLocal(ctx, name, req.Msg.GetAfter(), stream)
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ReadSubscriptionRequest]) (*connect.ServerStreamForClient[cronoqv1.Event], error) {
		return ep.subscriptions.Read
	})
}

// readLocal serves a read on the leader: the events held after the
// start, then the later ones as they are applied; a redelivery moves the
// reader back to the acked cursor. It ends with the term.
func (h *subscriptionService) readLocal(ctx context.Context, name string, after uint64, stream *connect.ServerStream[cronoqv1.Event]) error {
	s := h.s
	feed, err := s.node.FeedSubscription(name)
	if err != nil {
		return err // not leading: routed again
	}
	defer feed.Close()
	state := s.node.Subscriptions()
	sub, ok := state.Subscription(name)
	if !ok {
		return apierr.NotFound(fmt.Sprintf("subscription %q: no such subscription", name))
	}
	if err := needPool(ctx, acl.Read, subPools(sub.Pools)...); err != nil {
		return err
	}
	pos := max(after, sub.Acked)
	// Headers go out at once, so the reader knows it is reading.
	if err := stream.Send(nil); err != nil {
		return nil
	}
	for {
		select {
		case from := <-feed.Redeliveries():
			pos = min(pos, from)
		default:
		}
		watch := state.SubscriptionWatch()
		if _, ok := state.Subscription(name); !ok {
			return apierr.NotFound(fmt.Sprintf("subscription %q was removed", name))
		}
		if evs := state.SubscriptionEvents(name, pos, readBatch); len(evs) > 0 {
			last := evs[len(evs)-1].Cursor
			// Reported before it goes out, so that the reader's ack never
			// comes before the send it acks.
			if err := feed.Sent(ctx, pos, last); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return s.apiError(err)
			}
			for i := range evs {
				if err := stream.Send(fsmEventToProto(&evs[i])); err != nil {
					return nil
				}
			}
			pos = last
			continue
		}
		select {
		case <-watch:
		case from := <-feed.Redeliveries():
			pos = min(pos, from)
		case <-feed.Done():
			if s.stopping() {
				return apierr.ShuttingDown()
			}
			return s.apiError(cluster.ErrStopped) // the term ended: read from the next leader
		case <-ctx.Done():
			if s.stopping() {
				return apierr.ShuttingDown()
			}
			return nil
		}
	}
}

// relayStream serves a server stream that needs the leader: locally when
// this node leads (local returns a *cluster.NotLeaderError or
// cluster.ErrStopped, with nothing sent, when it turns out it cannot), else
// by relaying the leader's stream, opened with remote. A forwarded request
// is never relayed again (one hop at most). While no leader is known, or
// the one named refuses the stream before any message, it holds and routes
// again until the hold timeout; a relayed stream that ends after messages
// went out ends the reader's stream with its error (the reader reconnects).
func relayStream[Req, Res any](ctx context.Context, s *Server, req *connect.Request[Req], stream *connect.ServerStream[Res],
	local func(context.Context) error,
	remote func(*endpoint) func(context.Context, *connect.Request[Req]) (*connect.ServerStreamForClient[Res], error),
) error {
	if s.stopping() {
		return apierr.ShuttingDown()
	}
	procedure := req.Spec().Procedure
	hold := time.NewTimer(s.cfg.HoldTimeout)
	defer hold.Stop()
	var (
		last    error // why the last round could not serve
		flushed bool  // the reader has its headers
	)
	for {
		if _, err := s.node.Leading(); err == nil {
			err := local(ctx)
			if err == nil || !notServed(err) || ctx.Err() != nil {
				return s.apiError(err)
			}
			last = err
		}
		id, addr := s.node.Leader()
		switch {
		case forwarded(req.Header()):
			if last != nil {
				return s.apiError(last)
			}
			return s.leaderHint(id, addr)
		case id != "" && id != s.node.ID() && addr != "":
			s.m.Forwarded(procedure)
			fwd := connect.NewRequest(req.Msg)
			fwd.Header().Set(HeaderForwarded, s.node.ID())
			if tok := tokenSecret(req.Header()); tok != "" {
				fwd.Header().Set(HeaderToken, tok)
			}
			n, err := relay(ctx, remote(s.fwd.endpoint(addr)), fwd, stream, &flushed)
			switch {
			case err == nil || ctx.Err() != nil:
				return nil // the reader went away
			case n > 0:
				return serverStreamEnd(err)
			case connect.IsWireError(err):
				switch apierr.Kind(err) {
				case apierr.KindNotLeader, apierr.KindNoLeader, apierr.KindShuttingDown:
					last = apierr.Relay(err)
				default:
					return apierr.Relay(err)
				}
			default:
				s.log.Debug("relayed stream not taken, routing again", "procedure", procedure, "leader", id, "error", err)
				last = apierr.NotLeader(id, addr)
			}
		default:
			last = s.leaderHint(id, addr)
		}
		if !pause(ctx, hold.C, s.baseCtx.Done()) {
			if ctx.Err() != nil {
				return nil
			}
			if s.stopping() {
				return apierr.ShuttingDown()
			}
			return last
		}
	}
}

// errStreamEnded: the leader ended a relayed stream without an error.
var errStreamEnded = errors.New("the leader ended the stream")

// serverStreamEnd is the error that ends a reader's stream whose relayed stream
// ended after messages went out.
func serverStreamEnd(err error) error {
	if connect.IsWireError(err) {
		return apierr.Relay(err)
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("relaying the leader's stream: %w", err))
}

// relay copies the stream open opens to out, flushing out's headers once
// (flushed), until it ends or out's reader goes away. It returns how many
// messages went out, and the stream's end: nil when out's reader went
// away, else the stream's error (errStreamEnded when it has none).
func relay[Req, Res any](ctx context.Context, open func(context.Context, *connect.Request[Req]) (*connect.ServerStreamForClient[Res], error),
	req *connect.Request[Req], out *connect.ServerStream[Res], flushed *bool) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in, err := open(ctx, req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = in.Close() }()
	if !*flushed {
		if err := out.Send(nil); err != nil {
			return 0, nil
		}
		*flushed = true
	}
	n := 0
	for in.Receive() {
		if err := out.Send(in.Msg()); err != nil {
			return n, nil
		}
		n++
	}
	if err := in.Err(); err != nil {
		return n, err
	}
	return n, errStreamEnded
}
