package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The bash script completes commands, subcommands and flags from the
// command table, as bash itself runs it.
func TestCompletionBash(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "completion", "bash")
	requireOK(t, r)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script := filepath.Join(t.TempDir(), "cronoq.bash")
	require.NoError(t, os.WriteFile(script, []byte(r.stdout), 0o600))
	run := func(words ...string) []string {
		t.Helper()
		args := append([]string{"--norc", "-c", `source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); __cronoq_complete; printf '%s\n' "${COMPREPLY[@]}"`, script}, words...)
		out, err := exec.Command(bash, args...).Output()
		require.NoError(t, err)
		return strings.Fields(string(out))
	}
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	require.Equal(t, names, run("cronoq", ""), "every command of the table")
	require.Equal(t, []string{"submit", "subscription"}, run("cronoq", "su"))
	require.Equal(t, []string{"list-peers", "remove-peer", "transfer-leadership"}, run("cronoq", "operator", "raft", ""))
	require.Equal(t, []string{"-pool"}, run("cronoq", "submit", "-poo"))
	require.Contains(t, run("cronoq", "list", "-pool", "p", "-o"), "-order")
	require.Contains(t, run("cronoq", "recurring", "add", "nightly", "-"), "-cron")
	require.Contains(t, run("cronoq", "worker", "-"), "-max-output")
}

// The zsh script is valid zsh (checked when zsh is installed).
func TestCompletionZsh(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "completion", "zsh")
	requireOK(t, r)
	require.True(t, strings.HasPrefix(r.stdout, "#compdef cronoq\n"))
	require.Contains(t, r.stdout, `"operator raft") echo "list-peers remove-peer transfer-leadership" ;;`)
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh to check the syntax with")
	}
	script := filepath.Join(t.TempDir(), "_cronoq")
	require.NoError(t, os.WriteFile(script, []byte(r.stdout), 0o600))
	out, err := exec.Command(zsh, "-n", script).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func TestCompletionUsage(t *testing.T) {
	t.Parallel()
	requireFailure(t, runCLI(t, "", "completion", "fish"), exitUsage, `unknown shell "fish": want bash or zsh`)
	requireFailure(t, runCLI(t, "", "completion"), exitUsage, "missing argument")
}
