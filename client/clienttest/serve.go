package clienttest

import (
	"context"
	"errors"
	"io"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cronoq/cronoq/api/apierr"
)

// callMode says which nodes serve a call.
type callMode int

const (
	// anyNode calls are served by the node asked (stale reads, operator
	// reads).
	anyNode callMode = iota
	// leaderCall calls need the leader; a follower answers not_leader, or
	// serves them as forwarded when forwarding is on.
	leaderCall
	// leaderStream calls (worker and event streams) need the leader itself.
	leaderStream
)

// served says how a call is served: by which node's state, and whether it
// was forwarded from the node asked.
type served struct {
	node      *Node // the node whose view answers (the leader for leader calls)
	fwdID     string
	fwdAddr   string
	procedure string
}

// begin runs what comes before serving a call on node n: the scripted
// refusals, the routing to the leader and the holds; then it records the
// call. It returns with the cluster's lock held unless it fails.
func (n *Node) begin(ctx context.Context, procedure string, msg proto.Message, mode callMode) (*served, error) {
	c := n.c
	c.mu.Lock()
	if err := c.refuse[procedure].take(); err != nil {
		c.notifyLocked()
		c.mu.Unlock()
		return nil, err
	}
	sv := &served{node: n, procedure: procedure}
	if mode != anyNode {
		switch {
		case c.leader < 0:
			c.mu.Unlock()
			return nil, apierr.NoLeader()
		case c.nodes[c.leader] == n:
		case mode == leaderCall && c.forward:
			l := c.nodes[c.leader]
			sv.node, sv.fwdID, sv.fwdAddr = l, l.id, l.advertise
		default:
			err := c.notLeaderLocked()
			c.mu.Unlock()
			return nil, err
		}
	}
	if hold := c.holds[procedure]; hold != nil {
		c.mu.Unlock()
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctxError(ctx)
		case <-c.done:
			return nil, apierr.ShuttingDown()
		}
		c.mu.Lock()
	}
	if c.closed {
		c.mu.Unlock()
		return nil, apierr.ShuttingDown()
	}
	c.calls[procedure]++
	if msg != nil {
		c.requests[procedure] = append(c.requests[procedure], proto.Clone(msg))
	}
	c.advanceLocked()
	return sv, nil
}

// respond ends a call begun with begin (the lock held): the scripted lost
// answers, and the leader named in a forwarded answer. It releases the
// lock.
func respond[Res any](c *Cluster, sv *served, res *Res, err error) (*connect.Response[Res], error) {
	defer c.mu.Unlock()
	c.settleLocked()
	if err != nil {
		return nil, apiError(err)
	}
	if lost := c.lose[sv.procedure].take(); lost != nil {
		return nil, lost
	}
	resp := connect.NewResponse(res)
	if sv.fwdID != "" {
		resp.Header().Set(apierr.HeaderLeader, sv.fwdID)
		resp.Header().Set(apierr.HeaderLeaderAddr, sv.fwdAddr)
	}
	return resp, nil
}

// unary serves a unary call on node n: fn runs with the cluster's lock
// held.
func unary[Req, Res any](ctx context.Context, n *Node, req *connect.Request[Req], mode callMode, fn func(*served) (*Res, error)) (*connect.Response[Res], error) {
	var msg proto.Message
	if m, ok := any(req.Msg).(proto.Message); ok {
		msg = m
	}
	sv, err := n.begin(ctx, req.Spec().Procedure, msg, mode)
	if err != nil {
		return nil, err
	}
	res, err := fn(sv)
	return respond(n.c, sv, res, err)
}

// longPoll serves a Wait call on node n: it holds until answer reports the
// thing waited for ended, the requested hold passes (then answer's value as
// it is is sent), or the call ends. answer runs with the cluster's lock held.
func longPoll[Req, Res any](ctx context.Context, n *Node, req *connect.Request[Req], timeout *durationpb.Duration, answer func() (res *Res, ended bool, err error)) (*connect.Response[Res], error) {
	c := n.c
	hold, err := durationOf("timeout", timeout)
	if err == nil && hold < 0 {
		err = invalid("timeout", "must not be negative")
	}
	if err != nil {
		return nil, apiError(err)
	}
	var msg proto.Message
	if m, ok := any(req.Msg).(proto.Message); ok {
		msg = m
	}
	sv, err := n.begin(ctx, req.Spec().Procedure, msg, leaderCall)
	if err != nil {
		return nil, err
	}
	c.settleLocked() // the call is counted: let waiters see it
	var holdC <-chan time.Time
	if hold > 0 {
		timer := time.NewTimer(hold)
		defer timer.Stop()
		holdC = timer.C
	}
	for {
		res, ended, err := answer()
		if err != nil || ended {
			return respond(c, sv, res, err)
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
			c.mu.Lock()
		case <-holdC:
			c.mu.Lock()
			res, _, err := answer()
			return respond(c, sv, res, err)
		case <-ctx.Done():
			return nil, ctxError(ctx)
		case <-c.done:
			return nil, apierr.ShuttingDown()
		}
	}
}

// interrupt closes the request body of a streaming call, so that a Receive
// pending on it returns.
func interrupt(ctx context.Context) {
	if b, ok := ctx.Value(bodyKey{}).(io.Closer); ok {
		_ = b.Close()
	}
}

// ctxError is the answer to a call whose context ended while it was
// served: deadline exceeded when its deadline passed (the caller's, which
// the call carries), canceled otherwise.
func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}

// errDropped ends a stream the fake was told to drop.
var errDropped = connect.NewError(connect.CodeUnavailable, errors.New("stream dropped by the fake cluster"))
