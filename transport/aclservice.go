package transport

import (
	"context"
	"crypto/sha256"
	"fmt"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/cronoq/cronoq/acl"
	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// aclService serves the policies and tokens. Changes go through the
// leader's log; reads are of this node's replica, which is what every node
// checks calls against.
type aclService struct{ s *Server }

// newSecret returns a fresh UUID-shaped random string.
func newSecret() (string, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("making a token: %w", err)
	}
	return u.String(), nil
}

// newToken returns a token record with a fresh accessor and secret (the
// record keeps the secret's hash only).
func newToken() (fsm.ACLToken, string, error) {
	accessor, err := newSecret()
	if err != nil {
		return fsm.ACLToken{}, "", err
	}
	secret, err := newSecret()
	if err != nil {
		return fsm.ACLToken{}, "", err
	}
	h := sha256.Sum256([]byte(secret))
	return fsm.ACLToken{Accessor: accessor, SecretHash: h[:]}, secret, nil
}

func tokenToProto(t *fsm.ACLToken, secret string) *cronoqv1.AclToken {
	return &cronoqv1.AclToken{
		Accessor: t.Accessor, Secret: secret, Name: t.Name, Policies: t.Policies,
		Management: t.Management, CreatedAt: instantToProto(t.CreatedAt), CreateIndex: t.CreateIndex,
	}
}

func policyToProto(p *fsm.ACLPolicy) *cronoqv1.AclPolicy {
	return &cronoqv1.AclPolicy{Name: p.Name, Description: p.Description, Rules: p.Rules, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex}
}

func (h *aclService) Bootstrap(ctx context.Context, req *connect.Request[cronoqv1.AclBootstrapRequest]) (*connect.Response[cronoqv1.AclBootstrapResponse], error) {
	s := h.s
	if !s.cfg.ACLs {
		return nil, apierr.New(apierr.KindACLDisabled, "ACLs are not enabled on this node (start the agents with -acl)")
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.AclBootstrapResponse, error) {
		tok, secret, err := newToken()
		if err != nil {
			return nil, err
		}
		tok.Name = "bootstrap token"
		rec, err := s.node.ACLBootstrap(ctx, tok)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.AclBootstrapResponse{Token: tokenToProto(&rec, secret)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclBootstrapRequest]) (*connect.Response[cronoqv1.AclBootstrapResponse], error) {
		return ep.acl.Bootstrap
	})
}

func (h *aclService) PolicyApply(ctx context.Context, req *connect.Request[cronoqv1.AclPolicyApplyRequest]) (*connect.Response[cronoqv1.AclPolicyApplyResponse], error) {
	s := h.s
	p := req.Msg.GetPolicy()
	if p.GetName() == "" {
		return nil, apierr.Invalid("policy.name", "must not be empty")
	}
	if _, err := acl.Parse(p.GetRules()); err != nil {
		return nil, apierr.Invalid("policy.rules", err.Error())
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.AclPolicyApplyResponse, error) {
		rec, err := s.node.PutACLPolicy(ctx, fsm.ACLPolicy{Name: p.GetName(), Description: p.GetDescription(), Rules: p.GetRules()})
		if err != nil {
			return nil, err
		}
		// The record as applied carries its indexes.
		if got, ok := s.node.ACLs().ACLPolicy(rec.Name); ok {
			rec = *got
		}
		return &cronoqv1.AclPolicyApplyResponse{Policy: policyToProto(&rec)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclPolicyApplyRequest]) (*connect.Response[cronoqv1.AclPolicyApplyResponse], error) {
		return ep.acl.PolicyApply
	})
}

func (h *aclService) PolicyList(ctx context.Context, req *connect.Request[cronoqv1.AclPolicyListRequest]) (*connect.Response[cronoqv1.AclPolicyListResponse], error) {
	out := &cronoqv1.AclPolicyListResponse{}
	for _, p := range h.s.node.ACLs().ACLPolicies() {
		out.Policies = append(out.Policies, policyToProto(p))
	}
	return connect.NewResponse(out), nil
}

func (h *aclService) PolicyGet(ctx context.Context, req *connect.Request[cronoqv1.AclPolicyGetRequest]) (*connect.Response[cronoqv1.AclPolicyGetResponse], error) {
	p, ok := h.s.node.ACLs().ACLPolicy(req.Msg.GetName())
	if !ok {
		return nil, h.s.apiError(fmt.Errorf("acl policy %q: %w", req.Msg.GetName(), cluster.ErrNotFound))
	}
	return connect.NewResponse(&cronoqv1.AclPolicyGetResponse{Policy: policyToProto(p)}), nil
}

func (h *aclService) PolicyDelete(ctx context.Context, req *connect.Request[cronoqv1.AclPolicyDeleteRequest]) (*connect.Response[cronoqv1.AclPolicyDeleteResponse], error) {
	s := h.s
	name := req.Msg.GetName()
	if name == "" {
		return nil, apierr.Invalid("name", "must not be empty")
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.AclPolicyDeleteResponse, error) {
		if err := s.node.DeleteACL(ctx, fsm.DelACL{Policy: name}); err != nil {
			return nil, fmt.Errorf("acl policy %q: %w", name, err)
		}
		return &cronoqv1.AclPolicyDeleteResponse{}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclPolicyDeleteRequest]) (*connect.Response[cronoqv1.AclPolicyDeleteResponse], error) {
		return ep.acl.PolicyDelete
	})
}

func (h *aclService) TokenCreate(ctx context.Context, req *connect.Request[cronoqv1.AclTokenCreateRequest]) (*connect.Response[cronoqv1.AclTokenCreateResponse], error) {
	s := h.s
	m := req.Msg
	if !m.GetManagement() && len(m.GetPolicies()) == 0 {
		return nil, apierr.Invalid("policies", "a token needs at least one policy (or management)")
	}
	if m.GetManagement() && !authorizer(ctx).Management() {
		return nil, permissionDenied(authorizer(ctx).Denied("management, to make a management token"))
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.AclTokenCreateResponse, error) {
		tok, secret, err := newToken()
		if err != nil {
			return nil, err
		}
		tok.Name, tok.Policies, tok.Management = m.GetName(), append([]string(nil), m.GetPolicies()...), m.GetManagement()
		rec, err := s.node.PutACLToken(ctx, tok)
		if err != nil {
			return nil, err
		}
		if got, ok := s.node.ACLs().ACLToken(rec.Accessor); ok {
			rec = *got
		}
		return &cronoqv1.AclTokenCreateResponse{Token: tokenToProto(&rec, secret)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclTokenCreateRequest]) (*connect.Response[cronoqv1.AclTokenCreateResponse], error) {
		return ep.acl.TokenCreate
	})
}

func (h *aclService) TokenList(ctx context.Context, req *connect.Request[cronoqv1.AclTokenListRequest]) (*connect.Response[cronoqv1.AclTokenListResponse], error) {
	out := &cronoqv1.AclTokenListResponse{}
	for _, t := range h.s.node.ACLs().ACLTokens() {
		out.Tokens = append(out.Tokens, tokenToProto(t, ""))
	}
	return connect.NewResponse(out), nil
}

func (h *aclService) TokenRevoke(ctx context.Context, req *connect.Request[cronoqv1.AclTokenRevokeRequest]) (*connect.Response[cronoqv1.AclTokenRevokeResponse], error) {
	s := h.s
	accessor := req.Msg.GetAccessor()
	if accessor == "" {
		return nil, apierr.Invalid("accessor", "must not be empty")
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.AclTokenRevokeResponse, error) {
		if err := s.node.DeleteACL(ctx, fsm.DelACL{Token: accessor}); err != nil {
			return nil, fmt.Errorf("acl token %s: %w", accessor, err)
		}
		return &cronoqv1.AclTokenRevokeResponse{}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclTokenRevokeRequest]) (*connect.Response[cronoqv1.AclTokenRevokeResponse], error) {
		return ep.acl.TokenRevoke
	})
}

func (h *aclService) TokenSelf(ctx context.Context, req *connect.Request[cronoqv1.AclTokenSelfRequest]) (*connect.Response[cronoqv1.AclTokenSelfResponse], error) {
	out := &cronoqv1.AclTokenSelfResponse{Enabled: h.s.cfg.ACLs}
	if !h.s.cfg.ACLs {
		return connect.NewResponse(out), nil
	}
	c, _ := ctx.Value(callerKey{}).(*caller)
	if c == nil || c.token == nil {
		out.Anonymous = true
		return connect.NewResponse(out), nil
	}
	out.Token = tokenToProto(c.token, "")
	return connect.NewResponse(out), nil
}
