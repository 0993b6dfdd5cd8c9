package cluster

import (
	"context"
	"crypto/sha256"
	"errors"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// ErrACLBootstrapped refuses a second ACL bootstrap.
var ErrACLBootstrapped = core.ErrACLBootstrapped

// ACLBootstrap records the cluster's first management token, once.
func (n *Node) ACLBootstrap(ctx context.Context, tok fsm.ACLToken) (fsm.ACLToken, error) {
	return lead(n, func(e *engine.Engine) (fsm.ACLToken, error) { return e.ACLBootstrap(ctx, tok) })
}

// PutACLPolicy creates or replaces an ACL policy.
func (n *Node) PutACLPolicy(ctx context.Context, p fsm.ACLPolicy) (fsm.ACLPolicy, error) {
	return lead(n, func(e *engine.Engine) (fsm.ACLPolicy, error) { return e.PutACLPolicy(ctx, p) })
}

// PutACLToken creates an ACL token.
func (n *Node) PutACLToken(ctx context.Context, tok fsm.ACLToken) (fsm.ACLToken, error) {
	return lead(n, func(e *engine.Engine) (fsm.ACLToken, error) { return e.PutACLToken(ctx, tok) })
}

// DeleteACL deletes an ACL policy or token.
func (n *Node) DeleteACL(ctx context.Context, d fsm.DelACL) error {
	_, err := lead(n, func(e *engine.Engine) (struct{}, error) { return struct{}{}, e.DeleteACL(ctx, d) })
	return err
}

// ACLs reads the replicated ACL objects of this node's replica (every node
// checks calls against its own).
func (n *Node) ACLs() ACLReader { return n.state }

// ACLReader reads the replicated ACL objects.
type ACLReader interface {
	ACLBootstrapIndex() uint64
	ACLPolicy(name string) (*fsm.ACLPolicy, bool)
	ACLPolicies() []*fsm.ACLPolicy
	ACLToken(accessor string) (*fsm.ACLToken, bool)
	ACLTokenBySecret(hash [32]byte) (*fsm.ACLToken, bool)
	ACLTokens() []*fsm.ACLToken
}

// initialManagement bootstraps ACLs with the configured initial management
// token while the replicated state says they never were. A failure (a
// server too old for ACLs, a lost term) is logged and tried again on a
// later round of the leader loop, once its backoff has passed.
func (n *Node) initialManagement(ctx context.Context, eng *engine.Engine) {
	l := n.loops.aclInit
	secret := n.cfg.ACLInitialManagement
	if secret == "" || eng == nil || n.state.ACLBootstrapIndex() != 0 || !l.Ready() {
		return
	}
	accessor, err := generateNodeID()
	if err == nil {
		err = l.Injected()
	}
	if err == nil {
		h := sha256.Sum256([]byte(secret))
		tok := fsm.ACLToken{Accessor: accessor, SecretHash: h[:], Name: "initial management token"}
		_, err = eng.ACLBootstrap(ctx, tok)
		switch {
		case errors.Is(err, core.ErrACLBootstrapped):
			l.Succeeded() // someone bootstrapped them meanwhile
			return
		case err != nil && (ctx.Err() != nil || errors.Is(err, engine.ErrStopped)):
			return // the term or its engine ended: no attempt
		}
	}
	if err != nil {
		wait := l.Failed(err)
		n.logger.Warn("making the initial management token", "error", err, "retry_in", wait)
		return
	}
	l.Succeeded()
	n.logger.Info("ACLs bootstrapped with the initial management token", "accessor", accessor)
}
