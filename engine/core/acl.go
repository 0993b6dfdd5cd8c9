package core

import (
	"errors"
	"slices"
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// ErrACLBootstrapped refuses a second ACL bootstrap.
var ErrACLBootstrapped = errors.New("ACL bootstrap already done")

// aclState is what the core knows of the replicated ACL objects: enough to
// refuse, before they reach the log, the changes the state would reject
// (a second bootstrap, a secret in use, a token naming an unknown policy).
// Checking calls against them is the edge's work, not the core's.
type aclState struct {
	bootstrapped bool
	policies     map[string]struct{}
	tokens       map[string][32]byte // accessor -> secret hash
	secrets      map[[32]byte]string // secret hash -> accessor
}

func newACLState() aclState {
	return aclState{
		policies: make(map[string]struct{}),
		tokens:   make(map[string][32]byte),
		secrets:  make(map[[32]byte]string),
	}
}

func (a *aclState) putToken(t *fsm.ACLToken) {
	if old, ok := a.tokens[t.Accessor]; ok {
		delete(a.secrets, old)
	}
	a.tokens[t.Accessor] = [32]byte(t.SecretHash)
	a.secrets[[32]byte(t.SecretHash)] = t.Accessor
}

// ACLSource is the replicated ACL state a core is rebuilt from (implemented
// by *fsm.View).
type ACLSource interface {
	ACLBootstrapIndex() uint64
	ACLPolicies() []*fsm.ACLPolicy
	ACLTokens() []*fsm.ACLToken
}

func (c *Core) recoverACL(src ACLSource) {
	c.acl.bootstrapped = src.ACLBootstrapIndex() != 0
	for _, p := range src.ACLPolicies() {
		c.acl.policies[p.Name] = struct{}{}
	}
	for _, t := range src.ACLTokens() {
		c.acl.putToken(t)
	}
}

// ACLBootstrap makes tok the cluster's first management token, once: a
// second bootstrap is refused with ErrACLBootstrapped. The reply (held) is
// the token as recorded.
func (c *Core) ACLBootstrap(now time.Time, req ReqID, tok fsm.ACLToken) {
	c.begin(now)
	defer c.serve()
	if err := c.requireVersion("ACLs", 5); err != nil {
		c.fail(req, err)
		return
	}
	if c.acl.bootstrapped {
		c.fail(req, ErrACLBootstrapped)
		return
	}
	tok.Management, tok.Bootstrap, tok.Policies = true, true, nil
	if err := c.checkToken(&tok); err != nil {
		c.fail(req, err)
		return
	}
	tok.CreatedAt = c.now
	rec := tok
	c.mutate(fsm.Mutation{PutACLToken: &rec})
	c.acl.bootstrapped = true
	c.acl.putToken(&tok)
	c.reply(req, tok)
}

// PutACLPolicy creates or replaces a policy. The edge has parsed its rules.
func (c *Core) PutACLPolicy(now time.Time, req ReqID, p fsm.ACLPolicy) {
	c.begin(now)
	defer c.serve()
	if err := c.requireVersion("ACLs", 5); err != nil {
		c.fail(req, err)
		return
	}
	if err := p.Check(); err != nil {
		c.fail(req, Invalid("name", "%v", err))
		return
	}
	rec := p
	c.mutate(fsm.Mutation{PutACLPolicy: &rec})
	c.acl.policies[p.Name] = struct{}{}
	c.reply(req, p)
}

// PutACLToken creates a token (or replaces one with the same accessor).
// Its policies must exist and its secret must be new.
func (c *Core) PutACLToken(now time.Time, req ReqID, tok fsm.ACLToken) {
	c.begin(now)
	defer c.serve()
	if err := c.requireVersion("ACLs", 5); err != nil {
		c.fail(req, err)
		return
	}
	tok.Bootstrap = false
	slices.Sort(tok.Policies)
	tok.Policies = slices.Compact(tok.Policies)
	if err := c.checkToken(&tok); err != nil {
		c.fail(req, err)
		return
	}
	for _, p := range tok.Policies {
		if _, ok := c.acl.policies[p]; !ok {
			c.fail(req, Invalid("policies", "no policy named %q", p))
			return
		}
	}
	tok.CreatedAt = c.now
	rec := tok
	c.mutate(fsm.Mutation{PutACLToken: &rec})
	c.acl.putToken(&tok)
	c.reply(req, tok)
}

// checkToken refuses a token the state would reject.
func (c *Core) checkToken(tok *fsm.ACLToken) error {
	if err := tok.Check(); err != nil {
		return Invalid("token", "%v", err)
	}
	if other, ok := c.acl.secrets[[32]byte(tok.SecretHash)]; ok && other != tok.Accessor {
		return Invalid("secret", "in use by another token")
	}
	return nil
}

// DeleteACL deletes a policy or a token (ErrNotFound when there is none).
// Tokens naming a deleted policy keep the name, which grants nothing.
func (c *Core) DeleteACL(now time.Time, req ReqID, d fsm.DelACL) {
	c.begin(now)
	defer c.serve()
	if err := c.requireVersion("ACLs", 5); err != nil {
		c.fail(req, err)
		return
	}
	switch {
	case (d.Policy == "") == (d.Token == ""):
		c.fail(req, Invalid("ref", "name exactly one of a policy and a token"))
		return
	case d.Policy != "":
		if _, ok := c.acl.policies[d.Policy]; !ok {
			c.fail(req, ErrNotFound)
			return
		}
		delete(c.acl.policies, d.Policy)
	default:
		h, ok := c.acl.tokens[d.Token]
		if !ok {
			c.fail(req, ErrNotFound)
			return
		}
		delete(c.acl.tokens, d.Token)
		delete(c.acl.secrets, h)
	}
	rec := d
	c.mutate(fsm.Mutation{DelACL: &rec})
	c.reply(req, true)
}
