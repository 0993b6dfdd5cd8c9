package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An agent whose raft log database is corrupt exits non-zero with one line
// naming the file and the way out, not a panic.
func TestAgentCorruptLogDatabase(t *testing.T) {
	flags, _ := agentPorts(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "raft", "raft.db")
	require.NoError(t, os.MkdirAll(filepath.Dir(db), 0o700))
	garbage := make([]byte, 3*4096)
	for i := range garbage {
		garbage[i] = byte(i*7 + 3)
	}
	require.NoError(t, os.WriteFile(db, garbage, 0o600))

	out := &syncWriter{}
	code := run(context.Background(), append([]string{"agent", "-node-id", "n1", "-data-dir", dir,
		"-bootstrap-expect", "1", "-log-level", "error"}, flags...),
		stdio{Stdin: strings.NewReader(""), Stdout: out, Stderr: out})
	require.Equal(t, exitError, code, "output: %s", out.String())
	require.Contains(t, out.String(), "cronoq: starting node: raft log database "+db+" is corrupt")
	require.Contains(t, out.String(), "move the file aside")
	require.NotContains(t, out.String(), "panic")
}
