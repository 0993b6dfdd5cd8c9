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
// server too old for ACLs, a lost term) is logged and tried again on the
// next round of the leader loop.
func (n *Node) initialManagement(ctx context.Context, eng *engine.Engine) {
	secret := n.cfg.ACLInitialManagement
	if secret == "" || eng == nil || n.state.ACLBootstrapIndex() != 0 {
		return
	}
	accessor, err := generateNodeID()
	if err != nil {
		n.logger.Warn("making the initial management token", "error", err)
		return
	}
	h := sha256.Sum256([]byte(secret))
	tok := fsm.ACLToken{Accessor: accessor, SecretHash: h[:], Name: "initial management token"}
	if _, err := eng.ACLBootstrap(ctx, tok); err != nil {
		if !errors.Is(err, core.ErrACLBootstrapped) {
			n.logger.Warn("making the initial management token", "error", err)
		}
		return
	}
	n.logger.Info("ACLs bootstrapped with the initial management token", "accessor", accessor)
}
