package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// unusedAddr returns a loopback address nothing listens on.
func unusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// A command pointed at addresses where nothing listens, or that do not
// resolve, fails within a second or two, saying so, rather than waiting out
// -rpc-timeout.
func TestUnreachableAddressFailsFast(t *testing.T) {
	t.Parallel()
	dead := unusedAddr(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"list", "-addr", dead}, []string{"no node reachable at " + dead + ": connection refused"}},
		{[]string{"status", "-addr", "nonexistent.invalid:1", "some-id"}, []string{"nonexistent.invalid:1: cannot resolve host nonexistent.invalid"}},
		{[]string{"submit", "-addr", dead + ",nonexistent.invalid:1", "-pool", "p", "-kind", "k"},
			[]string{dead + ": connection refused", "nonexistent.invalid:1: cannot resolve host"}},
		{[]string{"health", "-addr", dead}, []string{"no node reachable at " + dead + ": connection refused"}},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			start := time.Now()
			r := runCLI(t, "", tc.args...)
			require.Less(t, time.Since(start), 2*time.Second, "the default -rpc-timeout is 30s")
			requireFailure(t, r, exitError, tc.want...)
		})
	}
}

// A command that waits says after about two seconds that it cannot reach
// the cluster, and keeps trying.
func TestUnreachableAddressWaitingCommandSaysSo(t *testing.T) {
	t.Parallel()
	dead := unusedAddr(t)
	for _, args := range [][]string{
		{"wait", "-addr", dead, "some-id"},
		{"events", "-addr", dead},
		{"submit", "-addr", dead, "-pool", "p", "-kind", "k", "-wait"},
	} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
			defer cancel()
			start := time.Now()
			r := runCLIContext(ctx, "", args...)
			require.GreaterOrEqual(t, time.Since(start), 3*time.Second, "it kept trying: %s", r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			require.Contains(t, lines[0], "cronoq: no node reachable at "+dead+": connection refused")
			require.Contains(t, lines[0], "still trying")
		})
	}
}
