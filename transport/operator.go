package transport

import (
	"context"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

type operatorService struct{ s *Server }

// Members lists the gossip view of this node (not forwarded: every node has
// its own view, also without a leader).
func (o *operatorService) Members(context.Context, *connect.Request[cronoqv1.MembersRequest]) (*connect.Response[cronoqv1.MembersResponse], error) {
	out := &cronoqv1.MembersResponse{}
	for _, m := range o.s.node.Members() {
		out.Members = append(out.Members, &cronoqv1.Member{
			Name:     m.Name,
			Addr:     m.Addr,
			Status:   string(m.Status),
			RaftAddr: m.RaftAddr,
			HttpAddr: m.HTTPAddr,
			Version:  m.Version,
		})
	}
	return connect.NewResponse(out), nil
}

// Peers lists the raft configuration as this node knows it (not forwarded,
// so that it can be read while the cluster has no leader).
func (o *operatorService) Peers(context.Context, *connect.Request[cronoqv1.PeersRequest]) (*connect.Response[cronoqv1.PeersResponse], error) {
	peers, err := o.s.node.Peers()
	if err != nil {
		return nil, o.s.apiError(err)
	}
	out := &cronoqv1.PeersResponse{}
	for _, p := range peers {
		out.Peers = append(out.Peers, &cronoqv1.Peer{Id: p.ID, Address: p.Address, Voter: p.Voter, Leader: p.Leader})
	}
	return connect.NewResponse(out), nil
}

func (o *operatorService) RemovePeer(ctx context.Context, req *connect.Request[cronoqv1.RemovePeerRequest]) (*connect.Response[cronoqv1.RemovePeerResponse], error) {
	s := o.s
	id := req.Msg.GetId()
	if id == "" {
		return nil, apierr.Invalid("id", "must not be empty")
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.RemovePeerResponse, error) {
		if err := s.node.RemovePeer(ctx, id); err != nil {
			return nil, err
		}
		return &cronoqv1.RemovePeerResponse{Removed: id}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RemovePeerRequest]) (*connect.Response[cronoqv1.RemovePeerResponse], error) {
		return ep.operator.RemovePeer
	})
}

func (o *operatorService) TransferLeadership(ctx context.Context, req *connect.Request[cronoqv1.TransferLeadershipRequest]) (*connect.Response[cronoqv1.TransferLeadershipResponse], error) {
	s := o.s
	id := req.Msg.GetId()
	return route(ctx, s, handoverCall, req, func(ctx context.Context) (*cronoqv1.TransferLeadershipResponse, error) {
		leader, err := s.node.TransferLeadership(ctx, id)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.TransferLeadershipResponse{Leader: leader}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.TransferLeadershipRequest]) (*connect.Response[cronoqv1.TransferLeadershipResponse], error) {
		return ep.operator.TransferLeadership
	})
}

// Health reports this node's own view (never forwarded).
func (o *operatorService) Health(context.Context, *connect.Request[cronoqv1.HealthRequest]) (*connect.Response[cronoqv1.HealthResponse], error) {
	h := o.s.health()
	return connect.NewResponse(&cronoqv1.HealthResponse{
		Node: h.Node, Leader: h.Leader, Epoch: h.Epoch, Status: h.Status, Reasons: h.Reasons,
	}), nil
}
