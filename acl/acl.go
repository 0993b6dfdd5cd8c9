// Package acl is cronoq's access control language: policies written in HCL,
// and the authorizer a token's policies compile to. It is pure: the edge of
// every node (the API server) resolves a call's token against the
// replicated state and asks the authorizer.
//
// A policy grants capabilities on pools and on the cluster:
//
//	pool "etl"   { policy = "submit" }   # one pool
//	pool "etl-*" { policy = "read" }     # pools whose name starts with "etl-"
//	pool "*"     { policy = "read" }     # every pool
//	operator = "read"                    # members, peers, health; "write": change them
//	acl      = "write"                   # manage policies and tokens
//
// Pool levels are ordered: read < submit < work < write, each granting the
// ones before it ("deny" grants nothing and overrides). For a pool the most
// specific rule applies, over all of a token's policies: an exact name, then
// the longest prefix pattern, then "*"; among rules equally specific, deny
// wins, else the highest level.
package acl

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Level is a capability level.
type Level uint8

// Levels, in increasing order of what they allow. Operator and acl rules
// use Read and Write only.
const (
	None Level = iota
	Read
	Submit
	Work
	Write
	// Deny is a rule that refuses everything, whatever else grants.
	Deny Level = 255
)

var levelNames = map[string]Level{"deny": Deny, "read": Read, "submit": Submit, "work": Work, "write": Write}

// String returns the level's name in policies.
func (l Level) String() string {
	for name, v := range levelNames {
		if v == l {
			return name
		}
	}
	return "none"
}

// ParseLevel parses a level name.
func ParseLevel(s string) (Level, error) {
	if l, ok := levelNames[s]; ok {
		return l, nil
	}
	return None, fmt.Errorf("unknown policy %q (want deny, read, submit, work or write)", s)
}

// Policy is a parsed policy.
type Policy struct {
	Pools    []PoolRule
	Operator Level
	ACL      Level
}

// PoolRule grants Level on the pools Pattern names: a name, a prefix ending
// in "*", or "*" for every pool.
type PoolRule struct {
	Pattern string
	Level   Level
}

// The HCL shape of a policy.
type policyHCL struct {
	Pools    []poolHCL `hcl:"pool,block"`
	Operator string    `hcl:"operator,optional"`
	ACL      string    `hcl:"acl,optional"`
}

type poolHCL struct {
	Name   string `hcl:"name,label"`
	Policy string `hcl:"policy"`
}

// Parse parses the HCL rules of a policy. Unknown blocks and attributes, a
// pattern with "*" other than at its end, an unknown level and a pool named
// twice are errors.
func Parse(rules string) (*Policy, error) {
	f, diags := hclsyntax.ParseConfig([]byte(rules), "rules.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("parsing policy rules: %s", diags.Error())
	}
	var raw policyHCL
	if diags := gohcl.DecodeBody(f.Body, nil, &raw); diags.HasErrors() {
		return nil, fmt.Errorf("parsing policy rules: %s", diags.Error())
	}
	p := &Policy{}
	seen := make(map[string]bool)
	for _, pr := range raw.Pools {
		if pr.Name == "" {
			return nil, errors.New("parsing policy rules: a pool rule needs a pool name or pattern")
		}
		if i := strings.IndexByte(pr.Name, '*'); i >= 0 && i != len(pr.Name)-1 {
			return nil, fmt.Errorf("parsing policy rules: pool %q: \"*\" may only end a pattern", pr.Name)
		}
		if seen[pr.Name] {
			return nil, fmt.Errorf("parsing policy rules: pool %q named twice", pr.Name)
		}
		seen[pr.Name] = true
		l, err := ParseLevel(pr.Policy)
		if err != nil {
			return nil, fmt.Errorf("parsing policy rules: pool %q: %w", pr.Name, err)
		}
		p.Pools = append(p.Pools, PoolRule{Pattern: pr.Name, Level: l})
	}
	var err error
	if p.Operator, err = parseCoarse("operator", raw.Operator); err != nil {
		return nil, err
	}
	if p.ACL, err = parseCoarse("acl", raw.ACL); err != nil {
		return nil, err
	}
	return p, nil
}

func parseCoarse(name, v string) (Level, error) {
	switch v {
	case "":
		return None, nil
	case "deny":
		return Deny, nil
	case "read":
		return Read, nil
	case "write":
		return Write, nil
	}
	return None, fmt.Errorf("parsing policy rules: %s = %q: want deny, read or write", name, v)
}

// Authorizer answers what one caller may do. The zero value allows
// nothing; Manage allows everything.
type Authorizer struct {
	// Accessor names the token (empty for anonymous calls).
	Accessor string
	// Name is the token's description.
	Name       string
	management bool
	// rules sorted most specific first: exact names, then prefixes by
	// decreasing length, then "*".
	rules    []PoolRule
	operator Level
	acl      Level
}

// Manage returns an authorizer that allows everything (a management token,
// or a node whose ACLs are off).
func Manage(accessor, name string) *Authorizer {
	return &Authorizer{Accessor: accessor, Name: name, management: true}
}

// Compile merges policies into an authorizer.
func Compile(accessor, name string, policies []*Policy) *Authorizer {
	a := &Authorizer{Accessor: accessor, Name: name}
	merged := make(map[string]Level)
	for _, p := range policies {
		for _, r := range p.Pools {
			merged[r.Pattern] = merge(merged[r.Pattern], r.Level)
		}
		a.operator = merge(a.operator, p.Operator)
		a.acl = merge(a.acl, p.ACL)
	}
	for pat, l := range merged {
		a.rules = append(a.rules, PoolRule{Pattern: pat, Level: l})
	}
	sort.Slice(a.rules, func(i, j int) bool {
		si, sj := specificity(a.rules[i].Pattern), specificity(a.rules[j].Pattern)
		if si != sj {
			return si > sj
		}
		return a.rules[i].Pattern < a.rules[j].Pattern
	})
	return a
}

// merge combines two rules of equal specificity: deny wins, else the
// higher level.
func merge(a, b Level) Level {
	if a == Deny || b == Deny {
		return Deny
	}
	return max(a, b)
}

// specificity orders patterns: an exact name above every prefix, a longer
// prefix above a shorter one, "*" last.
func specificity(pattern string) int {
	if !strings.HasSuffix(pattern, "*") {
		return 1 << 30
	}
	return len(pattern) - 1
}

func matches(pattern, pool string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(pool, prefix)
	}
	return pattern == pool
}

// Management reports whether the caller may do everything.
func (a *Authorizer) Management() bool { return a.management }

// PoolLevel returns the level the caller has on pool.
func (a *Authorizer) PoolLevel(pool string) Level {
	if a.management {
		return Write
	}
	for _, r := range a.rules {
		if matches(r.Pattern, pool) {
			if r.Level == Deny {
				return None
			}
			return r.Level
		}
	}
	return None
}

// Pool reports whether the caller may act at level need on pool.
func (a *Authorizer) Pool(pool string, need Level) bool { return a.PoolLevel(pool) >= need }

// AnyPool reports whether some pool grants need (a rule at that level
// exists): false means every call at that level is refused, whatever pool
// it names.
func (a *Authorizer) AnyPool(need Level) bool {
	if a.management {
		return true
	}
	for _, r := range a.rules {
		if r.Level != Deny && r.Level >= need {
			return true
		}
	}
	return false
}

// Operator reports whether the caller may act at level need (Read or Write)
// on the cluster.
func (a *Authorizer) Operator(need Level) bool {
	return a.management || a.operator != Deny && a.operator >= need
}

// ACL reports whether the caller may act at level need (Read or Write) on
// policies and tokens.
func (a *Authorizer) ACL(need Level) bool {
	return a.management || a.acl != Deny && a.acl >= need
}

// DeniedError is a call the caller's policies do not allow.
type DeniedError struct {
	Accessor string // empty: anonymous
	Need     string // what was missing, e.g. `submit on pool "etl"`
}

func (e *DeniedError) Error() string {
	who := "anonymous caller"
	if e.Accessor != "" {
		who = "token " + e.Accessor
	}
	return fmt.Sprintf("permission denied: %s lacks %s", who, e.Need)
}

// Denied returns a *DeniedError for a.
func (a *Authorizer) Denied(format string, args ...any) error {
	return &DeniedError{Accessor: a.Accessor, Need: fmt.Sprintf(format, args...)}
}
