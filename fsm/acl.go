package fsm

import (
	"errors"
	"fmt"
	"slices"
)

// ---------------------------------------------------------------------------
// Access control (log format 5)
// ---------------------------------------------------------------------------

// AnonymousPolicy is the name of the policy that governs calls made without
// a token: anonymous access is a policy like any other, absent (no access)
// until an operator writes it.
const AnonymousPolicy = "anonymous"

// Check reports what is wrong with p as a record.
func (p *ACLPolicy) Check() error {
	if p.Name == "" {
		return errors.New("empty policy name")
	}
	return nil
}

// Check reports what is wrong with t as a record.
func (t *ACLToken) Check() error {
	switch {
	case t.Accessor == "":
		return errors.New("empty accessor")
	case len(t.SecretHash) != 32:
		return fmt.Errorf("token %s: secret hash of %d bytes, want 32", t.Accessor, len(t.SecretHash))
	case t.Bootstrap && !t.Management:
		return fmt.Errorf("token %s: a bootstrap token must be a management token", t.Accessor)
	}
	for i, p := range t.Policies {
		if p == "" || i > 0 && t.Policies[i-1] >= p {
			return fmt.Errorf("token %s: policies must be sorted, unique and named", t.Accessor)
		}
	}
	return nil
}

// aclTables holds the ACL objects. ACL changes are rare, so the tables are
// immutable: a change builds a new one, which makes clones and undo free.
type aclTables struct {
	policies map[string]*ACLPolicy
	tokens   map[string]*ACLToken // by accessor
	bySecret map[[32]byte]*ACLToken
	// bootstrapIndex is the log index of the bootstrap (0: not yet).
	bootstrapIndex uint64
}

var emptyACL = &aclTables{}

func (a *aclTables) empty() bool {
	return len(a.policies) == 0 && len(a.tokens) == 0 && a.bootstrapIndex == 0
}

// copy returns a copy of a, to change.
func (a *aclTables) copy() *aclTables {
	c := &aclTables{
		policies:       make(map[string]*ACLPolicy, len(a.policies)+1),
		tokens:         make(map[string]*ACLToken, len(a.tokens)+1),
		bySecret:       make(map[[32]byte]*ACLToken, len(a.tokens)+1),
		bootstrapIndex: a.bootstrapIndex,
	}
	for k, v := range a.policies {
		c.policies[k] = v
	}
	for k, v := range a.tokens {
		c.tokens[k] = v
	}
	for k, v := range a.bySecret {
		c.bySecret[k] = v
	}
	return c
}

func (a *aclTables) putToken(t *ACLToken) {
	if old, ok := a.tokens[t.Accessor]; ok {
		delete(a.bySecret, [32]byte(old.SecretHash))
	}
	a.tokens[t.Accessor] = t
	a.bySecret[[32]byte(t.SecretHash)] = t
}

// aclWritable returns t's ACL tables, made private to t first if they are
// the shared empty ones (for a snapshot being restored, which nothing else
// sees yet).
func (t *tables) aclWritable() *aclTables {
	if t.acl == emptyACL {
		t.acl = emptyACL.copy()
	}
	return t.acl
}

// setACL replaces the ACL tables, recording the change for rollback.
func (s *State) setACL(new *aclTables) {
	s.undo = append(s.undo, undo{kind: undoACL, oldA: s.t.acl})
	s.t.acl = new
}

func (s *State) putACLPolicy(index uint64, p *ACLPolicy) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("put acl policy: %w", err)
	}
	a := s.t.acl.copy()
	if old, ok := a.policies[p.Name]; ok {
		p.CreateIndex = old.CreateIndex
	} else {
		p.CreateIndex = index
	}
	p.ModifyIndex = index
	a.policies[p.Name] = p
	s.setACL(a)
	return nil
}

func (s *State) putACLToken(index uint64, t *ACLToken) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("put acl token: %w", err)
	}
	if t.Bootstrap && s.t.acl.bootstrapIndex != 0 {
		return fmt.Errorf("put acl token %s: ACLs were bootstrapped at index %d", t.Accessor, s.t.acl.bootstrapIndex)
	}
	if other, ok := s.t.acl.bySecret[[32]byte(t.SecretHash)]; ok && other.Accessor != t.Accessor {
		return fmt.Errorf("put acl token %s: secret in use", t.Accessor)
	}
	a := s.t.acl.copy()
	if old, ok := a.tokens[t.Accessor]; ok {
		t.CreateIndex = old.CreateIndex
	} else {
		t.CreateIndex = index
	}
	if t.Bootstrap {
		a.bootstrapIndex = index
	}
	a.putToken(t)
	s.setACL(a)
	return nil
}

func (s *State) delACL(m *DelACL) error {
	a := s.t.acl
	switch {
	case (m.Policy == "") == (m.Token == ""):
		return errors.New("delete acl: name exactly one of a policy and a token")
	case m.Policy != "":
		if _, ok := a.policies[m.Policy]; !ok {
			return fmt.Errorf("delete acl policy %q: no such policy", m.Policy)
		}
		a = a.copy()
		delete(a.policies, m.Policy)
	default:
		t, ok := a.tokens[m.Token]
		if !ok {
			return fmt.Errorf("delete acl token %s: no such token", m.Token)
		}
		a = a.copy()
		delete(a.tokens, m.Token)
		delete(a.bySecret, [32]byte(t.SecretHash))
	}
	s.setACL(a)
	return nil
}

// ACL reads: see Reader.

func (t *tables) aclPolicy(name string) (*ACLPolicy, bool) {
	p, ok := t.acl.policies[name]
	return p, ok
}

func (t *tables) aclPolicies() []*ACLPolicy {
	out := make([]*ACLPolicy, 0, len(t.acl.policies))
	for _, p := range t.acl.policies {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *ACLPolicy) int { return cmpString(a.Name, b.Name) })
	return out
}

func (t *tables) aclToken(accessor string) (*ACLToken, bool) {
	tk, ok := t.acl.tokens[accessor]
	return tk, ok
}

func (t *tables) aclTokenBySecret(hash [32]byte) (*ACLToken, bool) {
	tk, ok := t.acl.bySecret[hash]
	return tk, ok
}

func (t *tables) aclTokens() []*ACLToken {
	out := make([]*ACLToken, 0, len(t.acl.tokens))
	for _, tk := range t.acl.tokens {
		out = append(out, tk)
	}
	slices.SortFunc(out, func(a, b *ACLToken) int { return cmpString(a.Accessor, b.Accessor) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ACLPolicy returns the policy named name.
func (s *State) ACLPolicy(name string) (*ACLPolicy, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.aclPolicy(name)
}

// ACLPolicies returns every policy, by name.
func (s *State) ACLPolicies() []*ACLPolicy {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.aclPolicies()
}

// ACLToken returns the token with accessor.
func (s *State) ACLToken(accessor string) (*ACLToken, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.aclToken(accessor)
}

// ACLTokenBySecret returns the token whose secret has SHA-256 hash.
func (s *State) ACLTokenBySecret(hash [32]byte) (*ACLToken, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.aclTokenBySecret(hash)
}

// ACLTokens returns every token, by accessor.
func (s *State) ACLTokens() []*ACLToken {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.aclTokens()
}

// ACLBootstrapIndex returns the log index of the ACL bootstrap, 0 before it.
func (s *State) ACLBootstrapIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.acl.bootstrapIndex
}

// ACLPolicy returns the policy named name.
func (v *View) ACLPolicy(name string) (*ACLPolicy, bool) { return v.t.aclPolicy(name) }

// ACLPolicies returns every policy, by name.
func (v *View) ACLPolicies() []*ACLPolicy { return v.t.aclPolicies() }

// ACLToken returns the token with accessor.
func (v *View) ACLToken(accessor string) (*ACLToken, bool) { return v.t.aclToken(accessor) }

// ACLTokenBySecret returns the token whose secret has SHA-256 hash.
func (v *View) ACLTokenBySecret(hash [32]byte) (*ACLToken, bool) { return v.t.aclTokenBySecret(hash) }

// ACLTokens returns every token, by accessor.
func (v *View) ACLTokens() []*ACLToken { return v.t.aclTokens() }

// ACLBootstrapIndex returns the log index of the ACL bootstrap, 0 before it.
func (v *View) ACLBootstrapIndex() uint64 { return v.t.acl.bootstrapIndex }
