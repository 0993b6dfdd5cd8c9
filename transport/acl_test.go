package transport

import (
	"context"
	"crypto/sha256"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// Every procedure of every service has a gate: a call added without one
// would be refused, and this test names it.
func TestGatesCoverEveryProcedure(t *testing.T) {
	services := cronoqv1.File_cronoq_v1_cronoq_proto.Services()
	n := 0
	for i := range services.Len() {
		sd := services.Get(i)
		for j := range sd.Methods().Len() {
			m := sd.Methods().Get(j)
			proc := "/" + string(sd.FullName()) + "/" + string(m.Name())
			_, ok := gates[proc]
			require.True(t, ok, "procedure %s has no ACL gate", proc)
			n++
		}
	}
	require.Len(t, gates, n, "gates for procedures that do not exist")
}

// withToken returns a request carrying secret.
func withToken[T any](msg *T, secret string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if secret != "" {
		req.Header().Set(HeaderToken, secret)
	}
	return req
}

func requireDenied(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), msgAndArgs...)
	require.Equal(t, apierr.KindPermissionDenied, apierr.Kind(err), msgAndArgs...)
	require.Contains(t, err.Error(), "permission denied", msgAndArgs...)
}

// ACLs through a server: bootstrap once, policies per pool, a submit
// records its token's accessor, lists are filtered to the pools a token
// reads, and a denied call changes nothing.
func TestACLs(t *testing.T) {
	b := newFakeBackend()
	var submitted []cluster.Spec
	b.submit = func(mode cluster.SubmitMode, specs []cluster.Spec) (*cluster.SubmitResult, error) {
		submitted = append(submitted, specs...)
		res := &cluster.SubmitResult{Tasks: make([]cluster.Submitted, len(specs))}
		for i := range specs {
			res.Tasks[i] = cluster.Submitted{ID: "id"}
		}
		return res, nil
	}
	hc, base := startFake(t, b, func(s *Server) {
		s.cfg.ACLs = true
		s.acl.enabled = true
	})
	acls := cronoqv1connect.NewAclServiceClient(hc, base)
	tasks := cronoqv1connect.NewTaskServiceClient(hc, base)
	ops := cronoqv1connect.NewOperatorServiceClient(hc, base)
	ctx := context.Background()

	// Before the bootstrap nothing but the bootstrap (and health) is
	// allowed.
	_, err := tasks.Submit(ctx, withToken(&cronoqv1.SubmitRequest{Spec: spec("etl")}, ""))
	requireDenied(t, err)
	_, err = ops.Health(ctx, withToken(&cronoqv1.HealthRequest{}, ""))
	require.NoError(t, err)
	boot, err := acls.Bootstrap(ctx, withToken(&cronoqv1.AclBootstrapRequest{}, ""))
	require.NoError(t, err)
	root := boot.Msg.GetToken().GetSecret()
	require.NotEmpty(t, root)
	_, err = acls.Bootstrap(ctx, withToken(&cronoqv1.AclBootstrapRequest{}, ""))
	require.Equal(t, apierr.KindACLBootstrapped, apierr.Kind(err))

	// The secret is stored hashed.
	tok, ok := b.state.ACLTokenBySecret(sha256.Sum256([]byte(root)))
	require.True(t, ok)
	require.True(t, tok.Management)
	for _, tk := range b.state.ACLTokens() {
		require.NotContains(t, string(tk.SecretHash), root)
	}

	// A policy with bad rules is refused, naming the field.
	_, err = acls.PolicyApply(ctx, withToken(&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: "x", Rules: `pool "a" { policy = "own" }`}}, root))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, err = acls.PolicyApply(ctx, withToken(&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: "etl",
		Rules: `pool "etl" { policy = "submit" }`}}, root))
	require.NoError(t, err)
	// A token naming a policy that does not exist is refused by the core;
	// the fake applies what it is given, so only the real cluster shows
	// it (see the end-to-end tests).
	created, err := acls.TokenCreate(ctx, withToken(&cronoqv1.AclTokenCreateRequest{Name: "etl", Policies: []string{"etl"}}, root))
	require.NoError(t, err)
	etl := created.Msg.GetToken().GetSecret()
	accessor := created.Msg.GetToken().GetAccessor()

	// The etl token submits to etl, as itself, and nowhere else.
	_, err = tasks.Submit(ctx, withToken(&cronoqv1.SubmitRequest{Spec: spec("etl")}, etl))
	require.NoError(t, err)
	require.Equal(t, accessor, submitted[len(submitted)-1].Principal)
	before := b.state.Hash()
	_, err = tasks.Submit(ctx, withToken(&cronoqv1.SubmitRequest{Spec: spec("billing")}, etl))
	requireDenied(t, err)
	_, err = tasks.SubmitBatch(ctx, withToken(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{spec("etl"), spec("billing")}}, etl))
	requireDenied(t, err)
	_, err = acls.TokenCreate(ctx, withToken(&cronoqv1.AclTokenCreateRequest{Policies: []string{"etl"}}, etl))
	requireDenied(t, err)
	_, err = acls.TokenCreate(ctx, withToken(&cronoqv1.AclTokenCreateRequest{Management: true}, etl))
	requireDenied(t, err)
	_, err = ops.Members(ctx, withToken(&cronoqv1.MembersRequest{}, etl))
	requireDenied(t, err)
	_, err = tasks.Submit(ctx, withToken(&cronoqv1.SubmitRequest{Spec: spec("etl")}, "not-a-token"))
	requireDenied(t, err)
	require.Len(t, submitted, 1, "no denied submit reached the leader")
	require.Equal(t, before, b.state.Hash(), "no denied call changed the state")

	// Reads: a task of a pool it may not read is denied; lists leave such
	// tasks out.
	b.apply(t, 0, fsm.Mutation{Insert: &fsm.Task{ID: "t1", Template: fsm.Template{Pool: "etl", Kind: "k"}, Status: fsm.StatusQueued}},
		fsm.Mutation{Insert: &fsm.Task{ID: "t2", Template: fsm.Template{Pool: "billing", Kind: "k"}, Status: fsm.StatusQueued}})
	_, err = tasks.Get(ctx, withToken(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "t1"}, Stale: true}, etl))
	require.NoError(t, err)
	_, err = tasks.Get(ctx, withToken(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "t2"}, Stale: true}, etl))
	requireDenied(t, err)
	list, err := tasks.List(ctx, withToken(&cronoqv1.ListRequest{Stale: true}, etl))
	require.NoError(t, err)
	require.Len(t, list.Msg.GetTasks(), 1)
	require.Equal(t, "t1", list.Msg.GetTasks()[0].GetId())
	_, err = tasks.List(ctx, withToken(&cronoqv1.ListRequest{Stale: true, Pools: []string{"billing"}}, etl))
	requireDenied(t, err)
	counts, err := tasks.Counts(ctx, withToken(&cronoqv1.CountsRequest{Stale: true}, etl))
	require.NoError(t, err)
	require.Len(t, counts.Msg.GetPools(), 1)

	// Anonymous access is the "anonymous" policy.
	_, err = tasks.Get(ctx, withToken(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "t2"}, Stale: true}, ""))
	requireDenied(t, err)
	_, err = acls.PolicyApply(ctx, withToken(&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: fsm.AnonymousPolicy,
		Rules: `pool "*" { policy = "read" }`}}, root))
	require.NoError(t, err)
	_, err = tasks.Get(ctx, withToken(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "t2"}, Stale: true}, ""))
	require.NoError(t, err)
	_, err = tasks.Submit(ctx, withToken(&cronoqv1.SubmitRequest{Spec: spec("etl")}, ""))
	requireDenied(t, err)

	// A policy change applies to the next call; a revoked token is refused.
	_, err = acls.PolicyApply(ctx, withToken(&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: "etl",
		Rules: `pool "etl" { policy = "read" }`}}, root))
	require.NoError(t, err)
	_, err = tasks.Submit(ctx, withToken(&cronoqv1.SubmitRequest{Spec: spec("etl")}, etl))
	requireDenied(t, err)
	_, err = acls.TokenRevoke(ctx, withToken(&cronoqv1.AclTokenRevokeRequest{Accessor: accessor}, root))
	require.NoError(t, err)
	_, err = tasks.Get(ctx, withToken(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "t1"}, Stale: true}, etl))
	requireDenied(t, err)

	// The bearer form of the header works too.
	req := connect.NewRequest(&cronoqv1.AclTokenSelfRequest{})
	req.Header().Set("Authorization", "Bearer "+root)
	self, err := acls.TokenSelf(ctx, req)
	require.NoError(t, err)
	require.True(t, self.Msg.GetToken().GetManagement())
	require.True(t, self.Msg.GetEnabled())
}
