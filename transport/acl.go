package transport

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	"github.com/cronoq/cronoq/api/apierr"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// HeaderToken carries a call's ACL token secret (as does "Authorization:
// Bearer SECRET").
const HeaderToken = "X-Cronoq-Token"

// tokenWait bounds how long a node waits for a token it does not know to
// reach its replica: a token created a moment ago through the leader may
// not have been applied here yet.
const tokenWait = time.Second

// gate is the access check a procedure needs before its handler runs.
// Handlers of pool gates check the pools the call names; the interceptor
// refuses the call at once when no pool grants the level.
type gate struct {
	kind  gateKind
	level acl.Level
}

type gateKind uint8

const (
	gatePool gateKind = iota + 1
	gateOperator
	gateACL
	// gateOpen: anyone (ACL bootstrap, which succeeds once; the caller's
	// own token; health).
	gateOpen
)

// gates lists every procedure of the API with its check. A procedure not
// listed is refused, so a new call cannot go unchecked (a test holds this
// list to the services).
var gates = map[string]gate{
	cronoqv1connect.TaskServiceSubmitProcedure:      {gatePool, acl.Submit},
	cronoqv1connect.TaskServiceSubmitBatchProcedure: {gatePool, acl.Submit},
	cronoqv1connect.TaskServiceEnqueueManyProcedure: {gatePool, acl.Submit},
	cronoqv1connect.TaskServiceGetProcedure:         {gatePool, acl.Read},
	cronoqv1connect.TaskServiceWaitProcedure:        {gatePool, acl.Read},
	cronoqv1connect.TaskServiceCancelProcedure:      {gatePool, acl.Write},
	cronoqv1connect.TaskServiceCompleteProcedure:    {gatePool, acl.Work},
	cronoqv1connect.TaskServiceListProcedure:        {gatePool, acl.Read},
	cronoqv1connect.TaskServiceCountsProcedure:      {gatePool, acl.Read},
	cronoqv1connect.TaskServiceEventsProcedure:      {gatePool, acl.Read},
	cronoqv1connect.TaskServiceDeleteProcedure:      {gatePool, acl.Write},
	cronoqv1connect.TaskServiceRetryProcedure:       {gatePool, acl.Write},
	cronoqv1connect.TaskServiceCancelManyProcedure:  {gatePool, acl.Write},

	cronoqv1connect.PoolServiceListProcedure:    {gatePool, acl.Read},
	cronoqv1connect.PoolServiceGetProcedure:     {gatePool, acl.Read},
	cronoqv1connect.PoolServiceSetProcedure:     {gatePool, acl.Write},
	cronoqv1connect.PoolServiceWorkersProcedure: {gatePool, acl.Read},
	cronoqv1connect.PoolServiceSetKindProcedure: {gatePool, acl.Write},
	cronoqv1connect.PoolServiceGetKindProcedure: {gatePool, acl.Read},

	cronoqv1connect.WorkflowServiceSubmitProcedure: {gatePool, acl.Submit},
	cronoqv1connect.WorkflowServiceGetProcedure:    {gatePool, acl.Read},
	cronoqv1connect.WorkflowServiceWaitProcedure:   {gatePool, acl.Read},
	cronoqv1connect.WorkflowServiceCancelProcedure: {gatePool, acl.Write},
	cronoqv1connect.WorkflowServiceListProcedure:   {gatePool, acl.Read},

	cronoqv1connect.ScheduleServiceAddProcedure:    {gatePool, acl.Submit},
	cronoqv1connect.ScheduleServiceListProcedure:   {gatePool, acl.Read},
	cronoqv1connect.ScheduleServiceRemoveProcedure: {gatePool, acl.Write},
	cronoqv1connect.ScheduleServicePauseProcedure:  {gatePool, acl.Write},

	cronoqv1connect.WorkerServiceConnectProcedure: {gatePool, acl.Work},

	// A subscription's own pools are checked by its handlers: write on
	// every pool of its filter to create or remove it, read to read, ack,
	// get or list it ("*" for a subscription of every pool).
	cronoqv1connect.SubscriptionServiceCreateProcedure: {gatePool, acl.Write},
	cronoqv1connect.SubscriptionServiceRemoveProcedure: {gatePool, acl.Write},
	cronoqv1connect.SubscriptionServiceListProcedure:   {gatePool, acl.Read},
	cronoqv1connect.SubscriptionServiceGetProcedure:    {gatePool, acl.Read},
	cronoqv1connect.SubscriptionServiceReadProcedure:   {gatePool, acl.Read},
	cronoqv1connect.SubscriptionServiceAckProcedure:    {gatePool, acl.Read},

	cronoqv1connect.OperatorServiceMembersProcedure: {gateOperator, acl.Read},
	cronoqv1connect.OperatorServicePeersProcedure:   {gateOperator, acl.Read},
	// Health says what GET /v1/health says, which needs no token.
	cronoqv1connect.OperatorServiceHealthProcedure:             {gateOpen, acl.None},
	cronoqv1connect.OperatorServiceRemovePeerProcedure:         {gateOperator, acl.Write},
	cronoqv1connect.OperatorServiceTransferLeadershipProcedure: {gateOperator, acl.Write},
	// A backup holds every pool's payloads and outputs and the ACL state:
	// saving one needs operator write, as restoring does.
	cronoqv1connect.OperatorServiceSnapshotSaveProcedure:    {gateOperator, acl.Write},
	cronoqv1connect.OperatorServiceSnapshotRestoreProcedure: {gateOperator, acl.Write},
	cronoqv1connect.OperatorServiceKeyringListProcedure:     {gateOperator, acl.Read},
	cronoqv1connect.OperatorServiceKeyringInstallProcedure:  {gateOperator, acl.Write},
	cronoqv1connect.OperatorServiceKeyringUseProcedure:      {gateOperator, acl.Write},
	cronoqv1connect.OperatorServiceKeyringRemoveProcedure:   {gateOperator, acl.Write},

	cronoqv1connect.AclServiceBootstrapProcedure:    {gateOpen, acl.None},
	cronoqv1connect.AclServiceTokenSelfProcedure:    {gateOpen, acl.None},
	cronoqv1connect.AclServicePolicyApplyProcedure:  {gateACL, acl.Write},
	cronoqv1connect.AclServicePolicyDeleteProcedure: {gateACL, acl.Write},
	cronoqv1connect.AclServiceTokenCreateProcedure:  {gateACL, acl.Write},
	cronoqv1connect.AclServiceTokenRevokeProcedure:  {gateACL, acl.Write},
	cronoqv1connect.AclServicePolicyListProcedure:   {gateACL, acl.Read},
	cronoqv1connect.AclServicePolicyGetProcedure:    {gateACL, acl.Read},
	cronoqv1connect.AclServiceTokenListProcedure:    {gateACL, acl.Read},
}

// caller is who makes a call, as the interceptor resolved it.
type caller struct {
	authz *acl.Authorizer
	token *fsm.ACLToken // nil: anonymous
}

type callerKey struct{}

// authorizer returns the authorizer of the call of ctx. Without ACLs (and
// for calls that did not pass the interceptor, which only tests make) it
// allows everything.
func authorizer(ctx context.Context) *acl.Authorizer {
	if c, ok := ctx.Value(callerKey{}).(*caller); ok {
		return c.authz
	}
	return allowAll
}

var allowAll = acl.Manage("", "")

// principal is the accessor a submit records: the caller's token's.
func principal(ctx context.Context) string {
	if c, ok := ctx.Value(callerKey{}).(*caller); ok && c.token != nil {
		return c.token.Accessor
	}
	return ""
}

// needPool refuses the call of ctx unless its caller may act at level on
// every pool named.
func needPool(ctx context.Context, level acl.Level, pools ...string) error {
	a := authorizer(ctx)
	for _, p := range pools {
		if !a.Pool(p, level) {
			return permissionDenied(a.Denied("%s on pool %q", level, p))
		}
	}
	return nil
}

// needOperator refuses the call of ctx unless its caller has operator at
// level.
func needOperator(ctx context.Context, level acl.Level) error {
	a := authorizer(ctx)
	if !a.Operator(level) {
		return permissionDenied(a.Denied("operator %s", level))
	}
	return nil
}

func permissionDenied(err error) error {
	return apierr.PermissionDenied(err.Error())
}

// tokenSecret returns the secret a request carries, if any.
func tokenSecret(h http.Header) string {
	if t := h.Get(HeaderToken); t != "" {
		return t
	}
	if v, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	return ""
}

// aclChecker resolves tokens against this node's replica and caches the
// authorizers their policies compile to.
type aclChecker struct {
	enabled bool
	state   cluster.ACLReader
	stop    <-chan struct{}

	mu    sync.Mutex
	cache map[string]cachedAuthz // by accessor ("" for anonymous)
}

type cachedAuthz struct {
	stamp uint64
	authz *acl.Authorizer
}

// maxCachedAuthorizers bounds the cache (it is cleared when full).
const maxCachedAuthorizers = 4096

// resolve returns the caller of a call carrying secret ("" = anonymous).
func (c *aclChecker) resolve(ctx context.Context, secret string) (*caller, error) {
	if secret == "" {
		p, _ := c.state.ACLPolicy(fsm.AnonymousPolicy)
		var ps []*fsm.ACLPolicy
		if p != nil {
			ps = []*fsm.ACLPolicy{p}
		}
		return &caller{authz: c.compile("", "anonymous", ps, 0)}, nil
	}
	hash := sha256.Sum256([]byte(secret))
	tok, ok := c.state.ACLTokenBySecret(hash)
	if !ok {
		// It may have been created a moment ago through another node.
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		deadline := time.NewTimer(tokenWait)
		defer deadline.Stop()
		for !ok {
			select {
			case <-t.C:
				tok, ok = c.state.ACLTokenBySecret(hash)
			case <-deadline.C:
				return nil, permissionDenied(errors.New("permission denied: ACL token not found"))
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-c.stop:
				return nil, permissionDenied(errors.New("permission denied: ACL token not found"))
			}
		}
	}
	if tok.Management {
		return &caller{authz: acl.Manage(tok.Accessor, tok.Name), token: tok}, nil
	}
	ps := make([]*fsm.ACLPolicy, 0, len(tok.Policies))
	for _, name := range tok.Policies {
		if p, ok := c.state.ACLPolicy(name); ok {
			ps = append(ps, p)
		}
	}
	return &caller{authz: c.compile(tok.Accessor, tok.Name, ps, tok.CreateIndex), token: tok}, nil
}

// compile returns the authorizer of policies ps, from the cache when none
// of them changed since it was compiled. A policy whose rules do not parse
// (which the API refuses to write) grants nothing.
func (c *aclChecker) compile(accessor, name string, ps []*fsm.ACLPolicy, createIndex uint64) *acl.Authorizer {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d", createIndex)
	for _, p := range ps {
		fmt.Fprintf(h, "|%s:%d", p.Name, p.ModifyIndex)
	}
	stamp := h.Sum64()
	c.mu.Lock()
	if e, ok := c.cache[accessor]; ok && e.stamp == stamp {
		c.mu.Unlock()
		return e.authz
	}
	c.mu.Unlock()
	parsed := make([]*acl.Policy, 0, len(ps))
	for _, p := range ps {
		if pp, err := acl.Parse(p.Rules); err == nil {
			parsed = append(parsed, pp)
		}
	}
	a := acl.Compile(accessor, name, parsed)
	c.mu.Lock()
	if len(c.cache) >= maxCachedAuthorizers {
		clear(c.cache)
	}
	c.cache[accessor] = cachedAuthz{stamp: stamp, authz: a}
	c.mu.Unlock()
	return a
}

// check resolves the caller of a call to procedure and applies the
// procedure's gate; it returns the context the handler runs with.
func (c *aclChecker) check(ctx context.Context, procedure string, h http.Header) (context.Context, error) {
	if !c.enabled {
		return ctx, nil
	}
	g, ok := gates[procedure]
	if !ok {
		return ctx, permissionDenied(fmt.Errorf("permission denied: %s is not open to ACL tokens", procedure))
	}
	who, err := c.resolve(ctx, tokenSecret(h))
	if err != nil {
		return ctx, err
	}
	ctx = context.WithValue(ctx, callerKey{}, who)
	a := who.authz
	switch g.kind {
	case gatePool:
		if !a.AnyPool(g.level) {
			return ctx, permissionDenied(a.Denied("%s on any pool", g.level))
		}
	case gateOperator:
		if !a.Operator(g.level) {
			return ctx, permissionDenied(a.Denied("operator %s", g.level))
		}
	case gateACL:
		if !a.ACL(g.level) {
			return ctx, permissionDenied(a.Denied("acl %s", g.level))
		}
	}
	return ctx, nil
}

// aclInterceptor applies the ACL check to every call.
type aclInterceptor struct{ c *aclChecker }

func (i *aclInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := i.c.check(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i *aclInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *aclInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.c.check(ctx, conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
