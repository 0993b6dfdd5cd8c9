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
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
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

// TestWorkerDependenciesAndSpawn runs a workflow through `cronoq worker`:
// dependencies' outputs arrive as files (those left out of the grant read
// from the cluster), and a command spawns children and a continuation.
func TestWorkerDependenciesAndSpawn(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t, clienttest.WithGrantOutputBudget(8))
	step := func(name, kind, payload string, deps ...string) *cronoqv1.WorkflowStep {
		return &cronoqv1.WorkflowStep{Name: name, DependsOn: deps, Spec: &cronoqv1.TaskSpec{
			Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: kind, Payload: []byte(payload)},
		}}
	}
	wid := f.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "fan", Steps: []*cronoqv1.WorkflowStep{
		step("a", "produce", "out-a"),
		step("b", "produce", "a longer output, past the grant's budget"),
		step("c", "consume", "", "a", "b"),
	}})
	bad := f.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "badspawn"}})

	const list = `for f in "$CRONOQ_DEPS_DIR"/*; do printf '%s=%s;' "$(basename "$f")" "$(cat "$f")"; done`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan cliResult, 1)
	go func() {
		done <- runCLIContext(ctx, "", "worker", "-pool", "p", "-addr", addr, "-workdir", filepath.Join(t.TempDir(), "work"),
			"-handler", "produce=cat",
			"-handler", "consume="+list+`
printf '%s\n' '{"name": "part-1", "pool": "p", "kind": "part", "payload": "1"}' '{"name": "part-2", "pool": "p", "kind": "part", "payload": "2"}' '{"name": "merge", "pool": "p", "kind": "merge", "then": true}' >"$CRONOQ_SPAWN"`,
			"-handler", `part=printf 'part%s' "$(cat)"`,
			"-handler", "merge="+list,
			"-handler", `badspawn=echo '{"pool": "p", "kind": "x", "colour": 1}' >"$CRONOQ_SPAWN"`)
	}()
	f.WaitUntil("the workflow and the bad task ended", func() bool {
		w := f.Workflow(wid)
		return w.GetStatus() != cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING && f.Task(bad).GetStatus() == cronoqv1.Status_STATUS_FAILED
	})
	cancel()
	select {
	case r := <-done:
		require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop after its context ended")
	}

	w := f.Workflow(wid)
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED, w.GetStatus())
	tasks := map[string]*cronoqv1.Task{}
	for _, task := range w.GetTasks() {
		tasks[task.GetStep()] = task
	}
	require.Len(t, tasks, 6)
	require.Equal(t, "a=out-a;b=a longer output, past the grant's budget;", string(tasks["c"].GetOutput()))
	require.Positive(t, f.Calls(cronoqv1connect.TaskServiceGetProcedure), "the output left out of the grant was read")
	require.Equal(t, "part1", string(tasks["part-1"].GetOutput()))
	require.Equal(t, tasks["c"].GetId(), tasks["part-1"].GetParent())
	require.ElementsMatch(t, []string{tasks["part-1"].GetId(), tasks["part-2"].GetId()}, tasks["merge"].GetDependsOn())
	require.Equal(t, "part-1=part1;part-2=part2;", string(tasks["merge"].GetOutput()))

	comp := f.Accepted(bad)
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, comp.GetOutcome())
	require.Equal(t, `spawn file line 1: unknown field "colour"`, comp.GetMessage())
	require.Empty(t, comp.GetChildren())
}
