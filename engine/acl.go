package engine

import (
	"context"
	"time"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// ACLBootstrap records the cluster's first management token, once (see
// core.Core.ACLBootstrap).
func (e *Engine) ACLBootstrap(ctx context.Context, tok fsm.ACLToken) (fsm.ACLToken, error) {
	return send[fsm.ACLToken](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.ACLBootstrap(now, req, tok)
	})
}

// PutACLPolicy creates or replaces an ACL policy.
func (e *Engine) PutACLPolicy(ctx context.Context, p fsm.ACLPolicy) (fsm.ACLPolicy, error) {
	return send[fsm.ACLPolicy](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.PutACLPolicy(now, req, p)
	})
}

// PutACLToken creates an ACL token.
func (e *Engine) PutACLToken(ctx context.Context, tok fsm.ACLToken) (fsm.ACLToken, error) {
	return send[fsm.ACLToken](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.PutACLToken(now, req, tok)
	})
}

// DeleteACL deletes an ACL policy or token.
func (e *Engine) DeleteACL(ctx context.Context, d fsm.DelACL) error {
	_, err := send[bool](ctx, e, true, func(c *core.Core, now time.Time, req core.ReqID) {
		c.DeleteACL(now, req, d)
	})
	return err
}
