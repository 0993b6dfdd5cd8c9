package client

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// Members lists the nodes gossip knows of.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	resp, err := unary(ctx, c, "listing members", read, &cronoqv1.MembersRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.MembersRequest]) (*connect.Response[cronoqv1.MembersResponse], error) {
			return ep.operator.Members
		})
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(resp.GetMembers()))
	for _, m := range resp.GetMembers() {
		out = append(out, memberFromProto(m))
	}
	return out, nil
}

// Peers lists the servers of the Raft configuration.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	resp, err := unary(ctx, c, "listing peers", read, &cronoqv1.PeersRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.PeersRequest]) (*connect.Response[cronoqv1.PeersResponse], error) {
			return ep.operator.Peers
		})
	if err != nil {
		return nil, err
	}
	out := make([]Peer, 0, len(resp.GetPeers()))
	for _, p := range resp.GetPeers() {
		out = append(out, peerFromProto(p))
	}
	return out, nil
}

// RemovePeer removes server id from the Raft configuration. It is retried
// only when a node refused it unexecuted (not the leader, no leader).
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	_, err := unary(ctx, c, "removing peer "+id, once, &cronoqv1.RemovePeerRequest{Id: id},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RemovePeerRequest]) (*connect.Response[cronoqv1.RemovePeerResponse], error) {
			return ep.operator.RemovePeer
		})
	return err
}

// TransferLeadership hands leadership to server id (any suitable voter when
// id is "") and returns the new leader's id. It is retried only when a node
// refused it unexecuted.
func (c *Client) TransferLeadership(ctx context.Context, id string) (string, error) {
	resp, err := unary(ctx, c, "transferring leadership", once, &cronoqv1.TransferLeadershipRequest{Id: id},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.TransferLeadershipRequest]) (*connect.Response[cronoqv1.TransferLeadershipResponse], error) {
			return ep.operator.TransferLeadership
		})
	if err != nil {
		return "", err
	}
	return resp.GetLeader(), nil
}

// Health asks the nodes in the order they were given and returns the answer
// of the first that answers; it does not retry beyond one round.
func (c *Client) Health(ctx context.Context) (Health, error) {
	c.mu.Lock()
	closed := c.closed
	addrs := append([]string(nil), c.addrs...)
	c.mu.Unlock()
	if closed {
		return Health{}, fmt.Errorf("checking health: %w", ErrClosed)
	}
	var errs []error
	ue := &UnreachableError{}
	for _, addr := range addrs {
		actx, cancel := context.WithTimeout(ctx, c.opts.timeout)
		resp, err := c.endpointFor(addr).operator.Health(actx, connect.NewRequest(&cronoqv1.HealthRequest{}))
		cancel()
		if err == nil {
			return healthFromProto(resp.Msg), nil
		}
		err = decodeError(err)
		if isDialError(err) {
			ue.Addrs, ue.Errs = append(ue.Addrs, addr), append(ue.Errs, err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, described(err)))
		if ctx.Err() != nil {
			break
		}
	}
	if len(ue.Addrs) == len(addrs) {
		// No node accepted a connection: say so plainly.
		return Health{}, fmt.Errorf("checking health: %w", ue)
	}
	return Health{}, fmt.Errorf("checking health: %w", errors.Join(errs...))
}
