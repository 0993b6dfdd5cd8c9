package main

import (
	"context"
	"fmt"
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
	add := func(kind, payload string) string {
		return f.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: kind, Payload: []byte(payload)}})
	}
	ids := map[string]string{}
	for _, k := range []struct{ kind, payload string }{
		{"echo", "hello"}, {"fail", ""}, {"later", ""}, {"big", ""}, {"nobody", ""},
	} {
		ids[k.kind] = add(k.kind, k.payload)
	}

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

	f.WaitUntil("every task's first attempt completed", func() bool {
		for _, id := range ids {
			if f.Accepted(id) == nil {
				return false
			}
		}
		return true
	})
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

	c := func(kind string) *cronoqv1.Completion { return f.Accepted(ids[kind]) }
	echo := ids["echo"]
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_SUCCESS, c("echo").GetOutcome())
	require.Equal(t, fmt.Sprintf("hello|%s|1|%d|p|echo|%s", echo, f.LeaseOf(echo), echo), string(c("echo").GetOutput()))
	require.Equal(t, cronoqv1.Status_STATUS_SUCCEEDED, f.Task(echo).GetStatus())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, c("fail").GetOutcome())
	require.Equal(t, "exit status 1: broken", c("fail").GetMessage())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, c("later").GetOutcome())
	require.Equal(t, "exit status 75", c("later").GetMessage())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, c("big").GetOutcome())
	require.Equal(t, "output too large: stdout exceeded 100 bytes", c("big").GetMessage())
	require.Empty(t, c("big").GetOutput())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, c("nobody").GetOutcome())
	require.Contains(t, c("nobody").GetMessage(), `no handler for kind "nobody"`)

	hello := f.Workers().Hellos[0]
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
