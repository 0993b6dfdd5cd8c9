package clienttest

import (
	"context"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

type operatorService struct{ n *Node }

// Members lists every node as gossip would, from any node.
func (o *operatorService) Members(ctx context.Context, req *connect.Request[cronoqv1.MembersRequest]) (*connect.Response[cronoqv1.MembersResponse], error) {
	return unary(ctx, o.n, req, anyNode, func(*served) (*cronoqv1.MembersResponse, error) {
		out := &cronoqv1.MembersResponse{}
		for _, n := range o.n.c.nodes {
			out.Members = append(out.Members, n.memberLocked())
		}
		return out, nil
	})
}

// Peers lists the Raft configuration (the nodes not removed), from any
// node.
func (o *operatorService) Peers(ctx context.Context, req *connect.Request[cronoqv1.PeersRequest]) (*connect.Response[cronoqv1.PeersResponse], error) {
	return unary(ctx, o.n, req, anyNode, func(*served) (*cronoqv1.PeersResponse, error) {
		c := o.n.c
		out := &cronoqv1.PeersResponse{}
		for i, n := range c.nodes {
			if n.removed {
				continue
			}
			out.Peers = append(out.Peers, &cronoqv1.Peer{
				Id: n.id, Address: n.memberLocked().GetRaftAddr(), Voter: true, Leader: i == c.leader,
			})
		}
		return out, nil
	})
}

// peerLocked returns the index of the peer named id, -1 when it is not in
// the Raft configuration.
func (c *Cluster) peerLocked(id string) int {
	for i, n := range c.nodes {
		if n.id == id && !n.removed {
			return i
		}
	}
	return -1
}

// RemovePeer removes a node from the Raft configuration. The node keeps
// serving the API (as a real one does until it is stopped); removing the
// leader hands leadership to the next peer.
func (o *operatorService) RemovePeer(ctx context.Context, req *connect.Request[cronoqv1.RemovePeerRequest]) (*connect.Response[cronoqv1.RemovePeerResponse], error) {
	id := req.Msg.GetId()
	if id == "" {
		return nil, apierr.Invalid("id", "must not be empty")
	}
	return unary(ctx, o.n, req, leaderCall, func(*served) (*cronoqv1.RemovePeerResponse, error) {
		c := o.n.c
		i := c.peerLocked(id)
		if i < 0 {
			return nil, apierr.NotFound("unknown peer " + id)
		}
		c.nodes[i].removed = true
		c.applied++
		if i == c.leader {
			c.setLeaderLocked(c.nextVoterLocked(i))
		}
		return &cronoqv1.RemovePeerResponse{Removed: id}, nil
	})
}

// nextVoterLocked is the first peer after node i (wrapping), -1 when there
// is none.
func (c *Cluster) nextVoterLocked(i int) int {
	for k := 1; k < len(c.nodes); k++ {
		j := (i + k) % len(c.nodes)
		if !c.nodes[j].removed {
			return j
		}
	}
	return -1
}

// TransferLeadership hands leadership to the peer named (to the next peer
// after the leader when none is named).
func (o *operatorService) TransferLeadership(ctx context.Context, req *connect.Request[cronoqv1.TransferLeadershipRequest]) (*connect.Response[cronoqv1.TransferLeadershipResponse], error) {
	return unary(ctx, o.n, req, leaderCall, func(*served) (*cronoqv1.TransferLeadershipResponse, error) {
		c := o.n.c
		id := req.Msg.GetId()
		to := c.peerLocked(id)
		switch {
		case id == "":
			if to = c.nextVoterLocked(c.leader); to < 0 {
				return nil, invalid("id", "no other voter to transfer leadership to")
			}
		case to < 0:
			return nil, apierr.NotFound("unknown peer " + id)
		}
		c.setLeaderLocked(to)
		return &cronoqv1.TransferLeadershipResponse{Leader: c.nodes[to].id}, nil
	})
}

// Health answers with the node's own view, from any node.
func (o *operatorService) Health(ctx context.Context, req *connect.Request[cronoqv1.HealthRequest]) (*connect.Response[cronoqv1.HealthResponse], error) {
	return unary(ctx, o.n, req, anyNode, func(*served) (*cronoqv1.HealthResponse, error) {
		c, n := o.n.c, o.n
		out := &cronoqv1.HealthResponse{Node: n.id, Epoch: c.epoch, Status: "ok"}
		if c.leader >= 0 {
			out.Leader = c.nodes[c.leader].id
		}
		if n.healthStatus != "" {
			out.Status = n.healthStatus
			out.Reasons = append([]string(nil), n.healthReasons...)
		}
		return out, nil
	})
}
