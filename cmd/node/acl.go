package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cronoq/cronoq/client"
)

// The acl commands: the one bootstrap, policies and tokens.

func init() {
	register("acl", command{Summary: "Manage access control: bootstrap, policy, token", Run: runACL})
}

var aclCommands = map[string]command{
	"bootstrap": {Summary: "Make the first management token (once)", Run: runACLBootstrap},
	"policy":    {Summary: "Manage policies: apply, list, show, delete", Run: runACLPolicy},
	"token":     {Summary: "Manage tokens: create, list, revoke, self", Run: runACLToken},
}

var aclPolicyCommands = map[string]command{
	"apply":  {Summary: "Create or replace a policy from a rules file", Run: runACLPolicyApply},
	"list":   {Summary: "List the policies", Run: runACLPolicyList},
	"show":   {Summary: "Show a policy and its rules", Run: runACLPolicyShow},
	"delete": {Summary: "Delete a policy", Run: runACLPolicyDelete},
}

var aclTokenCommands = map[string]command{
	"create": {Summary: "Create a token with policies", Run: runACLTokenCreate},
	"list":   {Summary: "List the tokens (accessors, never secrets)", Run: runACLTokenList},
	"revoke": {Summary: "Revoke a token by accessor", Run: runACLTokenRevoke},
	"self":   {Summary: "Show the token the calls carry", Run: runACLTokenSelf},
}

func runACL(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq acl", aclCommands, args)
}

func runACLPolicy(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq acl policy", aclPolicyCommands, args)
}

func runACLToken(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq acl token", aclTokenCommands, args)
}

// aclTokenJSON is a token as the acl commands print it.
type aclTokenJSON struct {
	Accessor   string   `json:"accessor"`
	Secret     string   `json:"secret,omitempty"`
	Name       string   `json:"name,omitempty"`
	Policies   []string `json:"policies"`
	Management bool     `json:"management,omitempty"`
	CreatedAt  *string  `json:"created_at,omitempty"`
}

func newACLTokenJSON(t client.ACLToken) aclTokenJSON {
	return aclTokenJSON{Accessor: t.Accessor, Secret: t.Secret, Name: t.Name, Policies: nonNilSlice(t.Policies),
		Management: t.Management, CreatedAt: jsonTime(t.CreatedAt)}
}

func runACLBootstrap(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl bootstrap", "cronoq acl bootstrap", `
Make the cluster's first management token. It can be done once: keep the
secret it prints (it is stored hashed and never shown again), make tokens
with narrower policies for everyday use, and keep this one for emergencies.
Agents must run with -acl.

Output (always JSON): {"accessor": "...", "secret": "..."}
`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	tok, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.ACLToken, error) { return cl.ACLBootstrap(ctx) })
	if err != nil {
		return err
	}
	return writeJSON(s.Stdout, struct {
		Accessor string `json:"accessor"`
		Secret   string `json:"secret"`
	}{tok.Accessor, tok.Secret})
}

func runACLPolicyApply(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl policy apply", "cronoq acl policy apply NAME -rules FILE", `
Create the policy NAME, or replace its rules. FILE holds HCL rules ("-" reads
standard input):

  pool "etl"   { policy = "submit" }   # read < submit < work < write; deny
  pool "etl-*" { policy = "read" }     # a prefix
  pool "*"     { policy = "read" }     # every pool
  operator = "read"                    # members, peers; write: change them
  acl      = "write"                   # policies and tokens

For a pool the most specific rule applies over all of a token's policies.
The policy named "anonymous" governs calls made without a token.

JSON output: {"name", "description", "rules", "create_index", "modify_index"}
`)
	cf := c.clientFlags()
	rules := c.fs.String("rules", "", "read the rules from `FILE` (- for standard input)")
	desc := c.fs.String("description", "", "a `TEXT` describing the policy")
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	name := c.args[0]
	if name == "" {
		return c.usageErr("empty NAME")
	}
	if *rules == "" {
		return c.usageErr("-rules FILE is required")
	}
	var (
		data []byte
		err  error
	)
	if *rules == "-" {
		data, err = io.ReadAll(s.Stdin)
	} else {
		data, err = os.ReadFile(*rules)
	}
	if err != nil {
		return fmt.Errorf("reading -rules: %w", err)
	}
	p, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.ACLPolicy, error) {
		return cl.ACLPolicyApply(ctx, client.ACLPolicy{Name: name, Description: *desc, Rules: string(data)})
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, p)
	}
	_, err = fmt.Fprintf(s.Stdout, "applied policy %s (index %d)\n", p.Name, p.ModifyIndex)
	return err
}

func runACLPolicyList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl policy list", "cronoq acl policy list", `
List the policies.

JSON output: [{"name", "description", "rules", "create_index", "modify_index"}...]
`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	ps, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]client.ACLPolicy, error) { return cl.ACLPolicies(ctx) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		if ps == nil {
			ps = []client.ACLPolicy{}
		}
		return writeJSON(s.Stdout, ps)
	}
	if len(ps) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no policies")
		return err
	}
	tb := newTable(s.Stdout, "NAME", "DESCRIPTION", "MODIFY INDEX")
	for _, p := range ps {
		tb.row(p.Name, p.Description, fmt.Sprint(p.ModifyIndex))
	}
	return tb.flush()
}

func runACLPolicyShow(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl policy show", "cronoq acl policy show NAME", `
Show a policy and its rules.

JSON output: {"name", "description", "rules", "create_index", "modify_index"}
`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	name := c.args[0]
	p, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.ACLPolicy, error) { return cl.ACLPolicy(ctx, name) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, p)
	}
	_, err = fmt.Fprintf(s.Stdout, "name: %s\ndescription: %s\nmodify index: %d\nrules:\n%s\n", p.Name, p.Description, p.ModifyIndex, strings.TrimRight(p.Rules, "\n"))
	return err
}

func runACLPolicyDelete(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl policy delete", "cronoq acl policy delete NAME", `
Delete a policy. Tokens that name it keep the name, which grants nothing.
`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	name := c.args[0]
	if _, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (struct{}, error) {
		return struct{}{}, cl.ACLPolicyDelete(ctx, name)
	}); err != nil {
		return err
	}
	_, err := fmt.Fprintf(s.Stdout, "deleted policy %s\n", name)
	return err
}

func runACLTokenCreate(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl token create", "cronoq acl token create -policy NAME... [-name N]", `
Create a token with the policies named. Its secret is printed this once (the
cluster keeps its hash); give it to a client as -token or CRONOQ_TOKEN.
-management makes a token that may do everything (a management token is
needed to make one).

Output (always JSON): {"accessor", "secret", "policies"}
`)
	cf := c.clientFlags()
	var policies []string
	c.fs.Var(listValue{&policies}, "policy", "grant the policy `NAME` (repeatable, or comma-separated)")
	name := c.fs.String("name", "", "a `TEXT` describing the token")
	mgmt := c.fs.Bool("management", false, "make a management token")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	if len(policies) == 0 && !*mgmt {
		return c.usageErr("give -policy NAME (or -management)")
	}
	tok, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.ACLToken, error) {
		return cl.ACLTokenCreate(ctx, *name, policies, *mgmt)
	})
	if err != nil {
		return err
	}
	return writeJSON(s.Stdout, struct {
		Accessor   string   `json:"accessor"`
		Secret     string   `json:"secret"`
		Policies   []string `json:"policies"`
		Management bool     `json:"management,omitempty"`
	}{tok.Accessor, tok.Secret, nonNilSlice(tok.Policies), tok.Management})
}

func runACLTokenList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl token list", "cronoq acl token list", `
List the tokens: accessors, names and policies (secrets are never shown).

JSON output: [{"accessor", "name", "policies", "management", "created_at"}...]
`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	ts, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]client.ACLToken, error) { return cl.ACLTokens(ctx) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		out := make([]aclTokenJSON, 0, len(ts))
		for _, t := range ts {
			out = append(out, newACLTokenJSON(t))
		}
		return writeJSON(s.Stdout, out)
	}
	if len(ts) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no tokens")
		return err
	}
	tb := newTable(s.Stdout, "ACCESSOR", "NAME", "POLICIES")
	for _, t := range ts {
		pol := strings.Join(t.Policies, ",")
		if t.Management {
			pol = "(management)"
		}
		tb.row(t.Accessor, t.Name, pol)
	}
	return tb.flush()
}

func runACLTokenRevoke(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl token revoke", "cronoq acl token revoke ACCESSOR", `
Revoke the token with ACCESSOR: every node refuses its calls from then on.
`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	accessor := c.args[0]
	if _, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (struct{}, error) {
		return struct{}{}, cl.ACLTokenRevoke(ctx, accessor)
	}); err != nil {
		return err
	}
	_, err := fmt.Fprintf(s.Stdout, "revoked token %s\n", accessor)
	return err
}

func runACLTokenSelf(ctx context.Context, s stdio, args []string) error {
	c := newCmd("acl token self", "cronoq acl token self", `
Show the token the calls carry (-token or CRONOQ_TOKEN), as a node resolves
it.

JSON output: {"enabled": BOOL, "anonymous": BOOL, "token": {...}}
`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	type self struct {
		Enabled   bool          `json:"enabled"`
		Anonymous bool          `json:"anonymous"`
		Token     *aclTokenJSON `json:"token,omitempty"`
	}
	out, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (self, error) {
		tok, anon, enabled, err := cl.ACLSelf(ctx)
		out := self{Enabled: enabled, Anonymous: anon}
		if tok.Accessor != "" {
			j := newACLTokenJSON(tok)
			out.Token = &j
		}
		return out, err
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, out)
	}
	switch {
	case !out.Enabled:
		_, err = fmt.Fprintln(s.Stdout, "ACLs are not enabled")
	case out.Anonymous:
		_, err = fmt.Fprintln(s.Stdout, "anonymous (no token)")
	default:
		_, err = fmt.Fprintf(s.Stdout, "accessor: %s\nname: %s\npolicies: %s\nmanagement: %v\n",
			out.Token.Accessor, out.Token.Name, strings.Join(out.Token.Policies, ","), out.Token.Management)
	}
	return err
}
