package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/internal/testcluster"
)

// The acl commands against a real node with ACLs on: policies, tokens,
// and calls refused with "permission denied" and exit status 1.
func TestACLCommands(t *testing.T) {
	const root = "aaaaaaaa-0000-4000-8000-000000000001"
	c := testcluster.New(t, 1, testcluster.ACLs(root))
	c.Leader()
	addr := "-addr=" + c.Live()[0].Addr()

	// The management token makes itself known once the leader made it.
	require.Eventually(t, func() bool {
		r := runCLI(t, "", "acl", "token", "self", addr, "-token", root, "-o", "json")
		return r.code == exitOK && decodeObject(t, r.stdout)["token"] != nil
	}, 20*time.Second, 50*time.Millisecond)

	// Without a token nothing is allowed (no anonymous policy).
	requireFailure(t, runCLI(t, "", "submit", addr, "-pool", "etl", "-kind", "k"), exitError, "permission denied")
	// A second bootstrap is refused.
	requireFailure(t, runCLI(t, "", "acl", "bootstrap", addr), exitError, "bootstrap already done")

	rules := filepath.Join(t.TempDir(), "etl.hcl")
	require.NoError(t, os.WriteFile(rules, []byte(`pool "etl" { policy = "submit" }`), 0o600))
	r := runCLI(t, "", "acl", "policy", "apply", "etl", "-rules", rules, addr, "-token", root)
	require.Equal(t, exitOK, r.code, r.stderr)
	// Bad rules are refused as input.
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	require.NoError(t, os.WriteFile(bad, []byte(`pool "etl" { policy = "own" }`), 0o600))
	requireFailure(t, runCLI(t, "", "acl", "policy", "apply", "bad", "-rules", bad, addr, "-token", root), exitUsage, "own")
	requireFailure(t, runCLI(t, "", "acl", "token", "create", addr, "-token", root), exitUsage, "-policy")

	r = runCLI(t, "", "acl", "token", "create", "-policy", "etl", "-name", "etl", addr, "-token", root)
	require.Equal(t, exitOK, r.code, r.stderr)
	var tok struct {
		Accessor, Secret string
		Policies         []string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tok))
	require.Equal(t, []string{"etl"}, tok.Policies)

	// The etl token submits to etl, recorded as its principal, and nowhere
	// else.
	r = runCLI(t, "", "submit", addr, "-token", tok.Secret, "-pool", "etl", "-kind", "k")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireFailure(t, runCLI(t, "", "submit", addr, "-token", tok.Secret, "-pool", "billing", "-kind", "k"), exitError, "permission denied")
	requireFailure(t, runCLI(t, "", "members", addr, "-token", tok.Secret), exitError, "permission denied")

	r = runCLI(t, "", "acl", "token", "list", addr, "-token", root, "-o", "json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, tok.Accessor)
	require.NotContains(t, r.stdout, tok.Secret, "secrets are never listed")

	r = runCLI(t, "", "acl", "token", "revoke", tok.Accessor, addr, "-token", root)
	require.Equal(t, exitOK, r.code, r.stderr)
	requireFailure(t, runCLI(t, "", "submit", addr, "-token", tok.Secret, "-pool", "etl", "-kind", "k"), exitError, "permission denied")
}
