package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

func TestWorkerRunsCommands(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	grant := func(id, kind, payload string, lease uint64, attempt uint32) *cronoqv1.Grant {
		return &cronoqv1.Grant{
			Task:    &cronoqv1.Task{Id: id, Pool: "p", Kind: kind, Payload: []byte(payload), Status: cronoqv1.Status_STATUS_RUNNING},
			Lease:   lease,
			Attempt: attempt,
		}
	}
	f.mu.Lock()
	f.grants = []*cronoqv1.Grant{
		grant("T1", "echo", "hello", 101, 1),
		grant("T2", "fail", "", 102, 2),
		grant("T3", "later", "", 103, 1),
		grant("T4", "big", "", 104, 1),
		grant("T5", "nobody", "", 105, 1),
	}
	f.mu.Unlock()

	root := filepath.Join(t.TempDir(), "work")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan cliResult, 1)
	go func() {
		done <- runCLIContext(ctx, "", "worker", "-pool", "p", "-addr", addr, "-workdir", root,
			"-label", "zone=eu", "-concurrency", "8", "-max-output", "100", "-id", "w1",
			"-handler", `echo=printf '%s|%s|%s|%s|%s|%s|%s' "$(cat)" "$CRONOQ_TASK_ID" "$CRONOQ_ATTEMPT" "$CRONOQ_LEASE" "$CRONOQ_POOL" "$CRONOQ_KIND" "$(basename "$PWD")"`,
			"-handler", "fail=echo broken >&2; exit 1",
			"-handler", "later=exit 75",
			"-handler", "big=head -c 101 /dev/zero")
	}()

	completions := func() map[uint64]*cronoqv1.Completion {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := map[uint64]*cronoqv1.Completion{}
		for k, v := range f.completions {
			out[k] = v
		}
		return out
	}
	require.Eventually(t, func() bool { return len(completions()) == 5 }, 20*time.Second, 10*time.Millisecond)
	cancel()
	var r cliResult
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop after its context ended")
	}
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "worker started")
	require.Contains(t, r.stderr, "worker stopped")

	c := completions()
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_SUCCESS, c[101].GetOutcome())
	require.Equal(t, "hello|T1|1|101|p|echo|T1", string(c[101].GetOutput()))
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, c[102].GetOutcome())
	require.Equal(t, "exit status 1: broken", c[102].GetMessage())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, c[103].GetOutcome())
	require.Equal(t, "exit status 75", c[103].GetMessage())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, c[104].GetOutcome())
	require.Equal(t, "output too large: stdout exceeded 100 bytes", c[104].GetMessage())
	require.Empty(t, c[104].GetOutput())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, c[105].GetOutcome())
	require.Contains(t, c[105].GetMessage(), `no handler for kind "nobody"`)

	f.mu.Lock()
	hello := f.hellos[0]
	f.mu.Unlock()
	require.Equal(t, "w1", hello.GetWorker())
	require.Equal(t, "p", hello.GetPool())
	require.Equal(t, []*cronoqv1.KV{{Key: "zone", Value: "eu"}}, kvs(hello.GetLabels()))

	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, entries, "work directories are removed")
	info, err := os.Stat(root)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())
}
