package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// placeholderStyle is the one style of flag placeholders: upper case
// metavariables (ADDRS, POOL, DUR, N, KEY=VALUE, INITIAL[:MAX[:JITTER]]).
var placeholderStyle = regexp.MustCompile(`^[A-Z][A-Z0-9_]*(?:[=:,.|\[\]-]+[A-Z0-9_]*)*\]*$`)

// Every command's help gives its flags' placeholders in one style, and
// only the commands that wait for an end say that -rpc-timeout does not
// bound the wait.
func TestHelpPlaceholders(t *testing.T) {
	t.Parallel()
	waits := map[string]bool{"submit": true, "wait": true, "workflow submit": true, "workflow wait": true}
	leaves := 0
	var walk func(n *cmdNode)
	walk = func(n *cmdNode) {
		name := strings.Join(n.path, " ")
		if len(n.subs) > 0 {
			for _, s := range n.subs {
				walk(s)
			}
			return
		}
		leaves++
		for _, f := range n.flags {
			if f.placeholder != "" {
				require.Regexp(t, placeholderStyle, f.placeholder, "cronoq %s -%s", name, f.name)
			}
		}
		help := runCLI(t, "", append(n.path, "-h")...).stdout
		require.Equal(t, waits[name], strings.Contains(help, "waiting for the end excepted"), "cronoq %s -h:\n%s", name, help)
	}
	for _, n := range commandTree() {
		walk(n)
	}
	require.Greater(t, leaves, 50, "every command was walked")
}

// The worker's -max-output and -max-spawn take sizes as the agent's
// -max-output does.
func TestWorkerSizeFlags(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1MiB", "64k", "1000"} {
		r := runCLI(t, "", "worker", "-pool", "p", "-handler", "k=cat", "-max-output", v, "-max-spawn", v, "-addr", "bad")
		requireFailure(t, r, exitUsage, `invalid -addr "bad"`)
	}
	r := runCLI(t, "", "worker", "-pool", "p", "-handler", "k=cat", "-max-output", "1 parsec")
	requireFailure(t, r, exitUsage, "flag -max-output")
}
