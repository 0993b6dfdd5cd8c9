package client

import (
	"context"
	"time"

	"connectrpc.com/connect"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// HeaderToken is the header that carries an ACL token's secret.
const HeaderToken = "X-Cronoq-Token"

// WithToken makes every call carry the ACL token secret (as `-token` and
// CRONOQ_TOKEN do for the command line). Without one, calls are made as the
// anonymous caller, which the cluster's "anonymous" policy governs.
func WithToken(secret string) Option { return func(o *options) { o.token = secret } }

// tokenInterceptor sets the token header on every call and stream.
type tokenInterceptor string

func (t tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(HeaderToken, string(t))
		return next(ctx, req)
	}
}

func (t tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set(HeaderToken, string(t))
		return conn
	}
}

func (t tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// ACLPolicy is a named set of rules (see docs/security.md for the rules).
type ACLPolicy struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Rules       string `json:"rules"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// ACLToken is a token. Secret is set only in the answer that made it: the
// cluster keeps its hash.
type ACLToken struct {
	Accessor    string    `json:"accessor"`
	Secret      string    `json:"secret,omitempty"`
	Name        string    `json:"name,omitempty"`
	Policies    []string  `json:"policies"`
	Management  bool      `json:"management,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	CreateIndex uint64    `json:"create_index"`
}

func aclTokenFromProto(t *cronoqv1.AclToken) ACLToken {
	out := ACLToken{
		Accessor: t.GetAccessor(), Secret: t.GetSecret(), Name: t.GetName(), Policies: t.GetPolicies(),
		Management: t.GetManagement(), CreateIndex: t.GetCreateIndex(),
	}
	if out.Policies == nil {
		out.Policies = []string{}
	}
	if ts := t.GetCreatedAt(); ts != nil {
		out.CreatedAt = ts.AsTime()
	}
	return out
}

func aclPolicyFromProto(p *cronoqv1.AclPolicy) ACLPolicy {
	return ACLPolicy{Name: p.GetName(), Description: p.GetDescription(), Rules: p.GetRules(), CreateIndex: p.GetCreateIndex(), ModifyIndex: p.GetModifyIndex()}
}

// ACLBootstrap makes the cluster's first management token, once: a second
// call fails with ErrACLBootstrapped. It is not retried after a failure in
// transit (the token may have been made; its secret would be lost).
func (c *Client) ACLBootstrap(ctx context.Context) (ACLToken, error) {
	resp, err := unary(ctx, c, "bootstrapping ACLs", once, &cronoqv1.AclBootstrapRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclBootstrapRequest]) (*connect.Response[cronoqv1.AclBootstrapResponse], error) {
			return ep.acl.Bootstrap
		})
	if err != nil {
		return ACLToken{}, err
	}
	return aclTokenFromProto(resp.GetToken()), nil
}

// ACLPolicyApply creates or replaces the policy p.Name with p.Rules.
func (c *Client) ACLPolicyApply(ctx context.Context, p ACLPolicy) (ACLPolicy, error) {
	resp, err := unary(ctx, c, "applying ACL policy "+p.Name, idempotent,
		&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: p.Name, Description: p.Description, Rules: p.Rules}},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclPolicyApplyRequest]) (*connect.Response[cronoqv1.AclPolicyApplyResponse], error) {
			return ep.acl.PolicyApply
		})
	if err != nil {
		return ACLPolicy{}, err
	}
	return aclPolicyFromProto(resp.GetPolicy()), nil
}

// ACLPolicies lists the policies.
func (c *Client) ACLPolicies(ctx context.Context) ([]ACLPolicy, error) {
	resp, err := unaryTo(ctx, c, "listing ACL policies", read, true, &cronoqv1.AclPolicyListRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclPolicyListRequest]) (*connect.Response[cronoqv1.AclPolicyListResponse], error) {
			return ep.acl.PolicyList
		})
	if err != nil {
		return nil, err
	}
	out := make([]ACLPolicy, 0, len(resp.GetPolicies()))
	for _, p := range resp.GetPolicies() {
		out = append(out, aclPolicyFromProto(p))
	}
	return out, nil
}

// ACLPolicy returns the policy named name.
func (c *Client) ACLPolicy(ctx context.Context, name string) (ACLPolicy, error) {
	resp, err := unaryTo(ctx, c, "reading ACL policy "+name, read, true, &cronoqv1.AclPolicyGetRequest{Name: name},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclPolicyGetRequest]) (*connect.Response[cronoqv1.AclPolicyGetResponse], error) {
			return ep.acl.PolicyGet
		})
	if err != nil {
		return ACLPolicy{}, err
	}
	return aclPolicyFromProto(resp.GetPolicy()), nil
}

// ACLPolicyDelete deletes the policy named name.
func (c *Client) ACLPolicyDelete(ctx context.Context, name string) error {
	_, err := unary(ctx, c, "deleting ACL policy "+name, idempotent, &cronoqv1.AclPolicyDeleteRequest{Name: name},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclPolicyDeleteRequest]) (*connect.Response[cronoqv1.AclPolicyDeleteResponse], error) {
			return ep.acl.PolicyDelete
		})
	return err
}

// ACLTokenCreate makes a token with policies (or a management token); the
// answer holds its secret, which is shown only this once. It is not
// retried after a failure in transit.
func (c *Client) ACLTokenCreate(ctx context.Context, name string, policies []string, management bool) (ACLToken, error) {
	resp, err := unary(ctx, c, "creating ACL token", once,
		&cronoqv1.AclTokenCreateRequest{Name: name, Policies: policies, Management: management},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclTokenCreateRequest]) (*connect.Response[cronoqv1.AclTokenCreateResponse], error) {
			return ep.acl.TokenCreate
		})
	if err != nil {
		return ACLToken{}, err
	}
	return aclTokenFromProto(resp.GetToken()), nil
}

// ACLTokens lists the tokens (without secrets).
func (c *Client) ACLTokens(ctx context.Context) ([]ACLToken, error) {
	resp, err := unaryTo(ctx, c, "listing ACL tokens", read, true, &cronoqv1.AclTokenListRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclTokenListRequest]) (*connect.Response[cronoqv1.AclTokenListResponse], error) {
			return ep.acl.TokenList
		})
	if err != nil {
		return nil, err
	}
	out := make([]ACLToken, 0, len(resp.GetTokens()))
	for _, t := range resp.GetTokens() {
		out = append(out, aclTokenFromProto(t))
	}
	return out, nil
}

// ACLTokenRevoke deletes the token with accessor: calls made with it are
// refused from then on.
func (c *Client) ACLTokenRevoke(ctx context.Context, accessor string) error {
	_, err := unary(ctx, c, "revoking ACL token "+accessor, idempotent, &cronoqv1.AclTokenRevokeRequest{Accessor: accessor},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclTokenRevokeRequest]) (*connect.Response[cronoqv1.AclTokenRevokeResponse], error) {
			return ep.acl.TokenRevoke
		})
	return err
}

// ACLSelf describes the token calls are made with: anonymous when none is
// set; enabled is false when the node does not check calls.
func (c *Client) ACLSelf(ctx context.Context) (tok ACLToken, anonymous, enabled bool, err error) {
	resp, err := unaryTo(ctx, c, "reading the ACL token", read, true, &cronoqv1.AclTokenSelfRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AclTokenSelfRequest]) (*connect.Response[cronoqv1.AclTokenSelfResponse], error) {
			return ep.acl.TokenSelf
		})
	if err != nil {
		return ACLToken{}, false, false, err
	}
	if resp.GetToken() != nil {
		tok = aclTokenFromProto(resp.GetToken())
	}
	return tok, resp.GetAnonymous(), resp.GetEnabled(), nil
}
