package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/client/clienttest"
)

// rawRPC matches what errors for people must not show: a connect code
// prefix ("unavailable: ", "failed_precondition: "), the program's name
// twice, or a limit as a bare byte count.
var rawRPC = regexp.MustCompile(`cronoq: .*cronoq: |\b(unavailable|unknown|internal|invalid_argument|failed_precondition|resource_exhausted|deadline_exceeded|not_found|permission_denied|aborted|canceled): |limit of \d+\s*$`)

// With no leader, a command says that the cluster has no leader (and why
// that may be), once, with no RPC codes.
func TestNoLeaderError(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.SetLeader(-1)
	for _, args := range [][]string{
		{"submit", "-pool", "p", "-kind", "k"},
		{"list"},
		{"cancel", "T1"},
	} {
		r := runCLI(t, "", append(args, "-addr", addr, "-rpc-timeout", "2s")...)
		requireFailure(t, r, exitError, "the cluster has no leader", "gave up after -rpc-timeout 2s", "cronoq health")
		require.NotRegexp(t, rawRPC, r.stderr)
	}
}

// Errors for people: one "cronoq:" prefix, sizes in units, the flag that
// was given.
func TestErrorWording(t *testing.T) {
	t.Parallel()
	_, addr := startFake(t, clienttest.WithMaxPayload(1<<20))
	big := filepath.Join(t.TempDir(), "big")
	require.NoError(t, os.WriteFile(big, []byte(strings.Repeat("a", 1100000)), 0o600))
	r := runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "k", "-payload", "@"+big)
	requireFailure(t, r, exitUsage, "invalid -payload: 1.05 MiB exceeds the limit of 1 MiB")
	require.NotRegexp(t, rawRPC, r.stderr)

	r = runCLI(t, "", "status", "-addr", addr, "NOPE")
	requireFailure(t, r, exitError, "task NOPE not found")
	require.NotRegexp(t, rawRPC, r.stderr)

	// submit -wait names -wait-timeout, the flag given, when it runs out.
	r = runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "k", "-wait", "-wait-timeout", "300ms")
	requireFailure(t, r, exitError, "did not end within -wait-timeout 300ms")
	require.NotContains(t, r.stderr, "rpc-timeout")
}

// A call that found no leader after an attempt whose outcome is unknown
// says both: the caller must not take it as not done.
func TestNoLeaderAfterUnknownOutcome(t *testing.T) {
	cf := &clientFlags{rpcTimeout: 2 * time.Second}
	unsure := fmt.Errorf("submitting task: %w: %w (last error: %w)", context.DeadlineExceeded, client.ErrOutcomeUnknown, client.ErrNoLeader)
	msg := cf.callError(context.Background(), nil, unsure).Error()
	require.Contains(t, msg, "outcome unknown")
	require.Contains(t, msg, "the cluster has no leader")
	require.Contains(t, msg, "gave up after -rpc-timeout 2s")

	refused := fmt.Errorf("submitting task: %w (last error: %w)", context.DeadlineExceeded, client.ErrNoLeader)
	require.NotContains(t, cf.callError(context.Background(), nil, refused).Error(), "outcome unknown")
}
