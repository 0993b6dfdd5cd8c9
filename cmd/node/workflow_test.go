package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

// nightlySpec is CONTRACT's example workflow, for the fake.
func nightlySpec(key string) *cronoqv1.WorkflowSpec {
	step := func(name, kind string, deps ...string) *cronoqv1.WorkflowStep {
		return &cronoqv1.WorkflowStep{Name: name, DependsOn: deps, Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "etl", Kind: kind}}}
	}
	return &cronoqv1.WorkflowSpec{Name: "nightly", Key: key, Steps: []*cronoqv1.WorkflowStep{
		step("extract", "extract"), step("clean", "clean", "extract"), step("load", "load", "clean"),
	}}
}

// memberIDs maps the step names of workflow w to their task ids.
func memberIDs(w *cronoqv1.Workflow) map[string]string {
	out := map[string]string{}
	for _, t := range w.GetTasks() {
		out[t.GetStep()] = t.GetId()
	}
	return out
}

func TestWorkflowSubmit(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	file := filepath.Join("testdata", "nightly.json")

	r := runCLI(t, "", "workflow", "submit", "-f", file, "-key", "K1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	var out struct {
		ID        string            `json:"id"`
		Duplicate bool              `json:"duplicate"`
		Key       string            `json:"key"`
		Tasks     map[string]string `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.NotEmpty(t, out.ID)
	require.False(t, out.Duplicate)
	require.Equal(t, "K1", out.Key)
	w := f.Workflow(out.ID)
	require.NotNil(t, w)
	require.Equal(t, "nightly", w.GetName())
	require.Equal(t, memberIDs(w), out.Tasks)
	require.Len(t, out.Tasks, 3)
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, f.Task(out.Tasks["extract"]).GetStatus())
	require.Equal(t, cronoqv1.Status_STATUS_BLOCKED, f.Task(out.Tasks["clean"]).GetStatus())
	require.Equal(t, []string{out.Tasks["clean"]}, f.Task(out.Tasks["load"]).GetDependsOn())

	req := f.Requests(cronoqv1connect.WorkflowServiceSubmitProcedure)[0].(*cronoqv1.SubmitWorkflowRequest)
	steps := req.GetSpec().GetSteps()
	require.Len(t, steps, 3)
	require.Equal(t, "extract", steps[0].GetName())
	require.Equal(t, "s3://x", string(steps[0].GetSpec().GetTemplate().GetPayload()))
	require.Equal(t, []string{"clean"}, steps[2].GetDependsOn())
	require.Empty(t, steps[2].GetSpec().GetKey(), "steps take no key")

	// The same key again: the existing workflow.
	r = runCLI(t, "", "workflow", "submit", "-f", filepath.Join("testdata", "nightly.hcl"), "-key", "K1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, fmt.Sprintf(`{"id": %q, "duplicate": true, "key": "K1", "tasks": %s}`, out.ID, mustJSON(t, out.Tasks)), r.stdout)
	r = runCLI(t, "", "workflow", "submit", "-f", file, "-key", "K1", "-addr", addr)
	require.Equal(t, exitOK, r.code)
	require.Equal(t, out.ID+"\n", r.stdout)
	require.Equal(t, fmt.Sprintf("cronoq: key \"K1\" already names workflow %s; nothing submitted\n", out.ID), r.stderr)

	// Text output: the id alone; HCL from stdin.
	r = runCLI(t, string(readTestdata(t, "nightly.hcl")), "workflow", "submit", "-addr", addr, "-f", "-")
	requireOK(t, r)
	id := strings.TrimSpace(r.stdout)
	require.NotEqual(t, out.ID, id)
	require.Len(t, f.Workflow(id).GetTasks(), 3)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestWorkflowSubmitRefused covers what the cluster refuses in a workflow
// file: the message names the step by its name in the file.
func TestWorkflowSubmitRefused(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t, clienttest.WithPools("etl"))
	dir := t.TempDir()
	tests := []struct {
		name, file, data string
		want             string
	}{
		{"later dependency", "w.json",
			`{"steps": [{"name": "a", "pool": "etl", "kind": "k", "depends_on": ["b"]}, {"name": "b", "pool": "etl", "kind": "k"}]}`,
			`step "a": depends_on: "b" is not an earlier step of the workflow`},
		{"unknown pool", "w.hcl", "step \"x\" {\n  pool = \"nope\"\n  kind = \"k\"\n}\n", `step "x": pool: unknown pool "nope"`},
		{"name twice", "w.json", `{"steps": [{"name": "a", "pool": "etl", "kind": "k"}, {"name": "a", "pool": "etl", "kind": "k"}]}`,
			`step "a": name: step "a" is named twice`},
		{"bad step name", "w.json", `{"steps": [{"name": "a/b", "pool": "etl", "kind": "k"}]}`, `step "a/b": name:`},
		{"deadline passed", "w.json", `{"steps": [{"name": "a", "pool": "etl", "kind": "k", "deadline": "2000-01-01T00:00:00Z"}]}`,
			`step "a": deadline: already passed`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+"-"+tc.file)
			require.NoError(t, os.WriteFile(path, []byte(tc.data), 0o600))
			r := runCLI(t, "", "workflow", "submit", "-f", path, "-addr", addr)
			requireFailure(t, r, exitUsage, "invalid -f "+path+": "+tc.want)
		})
	}
	require.Empty(t, f.Workflows(), "nothing was submitted")
	require.Empty(t, f.Tasks())
}

func TestWorkflowSubmitWait(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	file := filepath.Join("testdata", "nightly.json")

	// The test ends the steps one after the other while the CLI waits.
	run := func(key string, finish func(ids map[string]string)) cliResult {
		done := make(chan cliResult, 1)
		go func() {
			done <- runCLI(t, "", "workflow", "submit", "-f", file, "-key", key, "-wait", "-o", "json", "-addr", addr)
		}()
		f.WaitUntil("the workflow is submitted", func() bool { return f.WorkflowByKey(key) != nil })
		finish(memberIDs(f.WorkflowByKey(key)))
		select {
		case r := <-done:
			return r
		case <-time.After(20 * time.Second):
			t.Fatal("workflow submit -wait did not return once the workflow ended")
			return cliResult{}
		}
	}

	r := run("ok", func(ids map[string]string) {
		for _, step := range []string{"extract", "clean", "load"} {
			f.Finish(ids[step], cronoqv1.Status_STATUS_SUCCEEDED, []byte(step+" done"), "")
		}
	})
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, "succeeded", m["status"])
	require.Equal(t, "nightly", m["name"])
	require.Equal(t, "ok", m["key"])
	require.NotNil(t, m["finished_at"])
	tasks := m["tasks"].([]any)
	require.Len(t, tasks, 3)
	for _, task := range tasks {
		require.Equal(t, "succeeded", task.(map[string]any)["status"])
		require.Equal(t, m["id"], task.(map[string]any)["workflow"])
	}

	r = run("bad", func(ids map[string]string) {
		f.Finish(ids["extract"], cronoqv1.Status_STATUS_FAILED, nil, "exit status 1: boom")
	})
	require.Equal(t, exitTaskFailed, r.code, "stderr: %s", r.stderr)
	m = decodeObject(t, r.stdout)
	require.Equal(t, "failed", m["status"])
	require.Equal(t, fmt.Sprintf("cronoq: workflow %s failed: step extract failed: exit status 1: boom\n", m["id"]), r.stderr)
	ids := memberIDs(f.WorkflowByKey("bad"))
	require.Equal(t, cronoqv1.Status_STATUS_CANCELLED, f.Task(ids["load"]).GetStatus(), "its dependents were cancelled")

	// wait on a workflow that does not end in time.
	id := f.AddWorkflow(nightlySpec("slow"))
	r = runCLI(t, "", "workflow", "wait", id, "-timeout", "300ms", "-addr", addr)
	requireFailure(t, r, exitError, "workflow "+id+" did not end within -timeout 300ms")
	r = runCLI(t, "", "workflow", "submit", "-f", file, "-key", "slow", "-wait", "-wait-timeout", "300ms", "-addr", addr)
	requireFailure(t, r, exitError, "workflow "+id+" did not end within -wait-timeout 300ms")
	r = runCLI(t, "", "workflow", "wait", "-key", "ok", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "succeeded", decodeObject(t, r.stdout)["status"])
	r = runCLI(t, "", "workflow", "wait", "-key", "bad", "-addr", addr)
	require.Equal(t, exitTaskFailed, r.code)
	require.Contains(t, r.stdout, "status:       failed\n")
	r = runCLI(t, "", "workflow", "wait", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no workflow with key "nokey"`)
	r = runCLI(t, "", "workflow", "wait", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "workflow NOPE not found")
}

func TestWorkflowStatus(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	id := f.AddWorkflow(nightlySpec("K"))
	ids := memberIDs(f.Workflow(id))
	f.Finish(ids["extract"], cronoqv1.Status_STATUS_SUCCEEDED, []byte("rows"), "")

	for _, args := range [][]string{
		{"workflow", "status", id, "-o", "json", "-addr", addr},
		{"workflow", "status", "-o", "json", "-key", "K", "-addr", addr},
	} {
		r := runCLI(t, "", args...)
		requireOK(t, r)
		m := decodeObject(t, r.stdout)
		require.Equal(t, id, m["id"])
		require.Equal(t, "nightly", m["name"])
		require.Equal(t, "K", m["key"])
		require.Equal(t, "running", m["status"])
		require.Nil(t, m["finished_at"])
		require.NotNil(t, m["submitted_at"])
		for _, k := range []string{"updated_at", "schedule", "slot", "parent"} {
			require.Contains(t, m, k)
		}
		tasks := m["tasks"].([]any)
		require.Len(t, tasks, 3)
		byStep := map[string]map[string]any{}
		for _, task := range tasks {
			byStep[task.(map[string]any)["step"].(string)] = task.(map[string]any)
		}
		require.Equal(t, "succeeded", byStep["extract"]["status"])
		require.Equal(t, "rows", byStep["extract"]["output"])
		require.Equal(t, "queued", byStep["clean"]["status"])
		require.Equal(t, "blocked", byStep["load"]["status"])
		require.Equal(t, []any{ids["clean"]}, byStep["load"]["depends_on"])
	}

	r := runCLI(t, "", "workflow", "status", id, "-addr", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "id:           "+id+"\nname:         nightly\nkey:          K\nstatus:       running\n")
	require.Regexp(t, `(?m)^STEP +ID +POOL +KIND +STATUS +ATTEMPT +DEPENDS ON +ERROR$`, r.stdout)
	require.Regexp(t, `(?m)^load +`+ids["load"]+` +etl +load +blocked +0 +clean +-$`, r.stdout)

	r = runCLI(t, "", "workflow", "status", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "workflow NOPE not found")
	r = runCLI(t, "", "workflow", "status", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no workflow with key "nokey"`)
}

func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	id := f.AddWorkflow(nightlySpec(""))

	r := runCLI(t, "", "workflow", "cancel", id, "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, fmt.Sprintf(`{"id": %q, "cancelled": 3}`, id), r.stdout)
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED, f.Workflow(id).GetStatus())

	r = runCLI(t, "", "workflow", "cancel", id, "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, fmt.Sprintf(`{"id": %q, "cancelled": 0}`, id), r.stdout)
	r = runCLI(t, "", "workflow", "cancel", id, "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "workflow "+id+": no live task; nothing cancelled\n", r.stdout)

	id2 := f.AddWorkflow(nightlySpec(""))
	r = runCLI(t, "", "workflow", "cancel", "-addr", addr, id2)
	requireOK(t, r)
	require.Equal(t, "workflow "+id2+" cancelled: 3 tasks ended\n", r.stdout)

	r = runCLI(t, "", "workflow", "cancel", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "workflow NOPE not found")
}

func TestWorkflowList(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t, clienttest.WithMaxListLimit(2))
	w1 := f.AddWorkflow(nightlySpec("a"))
	w2 := f.AddWorkflow(nightlySpec("b"))
	w3 := f.AddWorkflow(nightlySpec("c"))
	r := runCLI(t, "", "workflow", "cancel", w2, "-addr", addr)
	requireOK(t, r)

	r = runCLI(t, "", "workflow", "list", "-status", "running,cancelled", "-limit", "5", "-after", "W0", "-o", "json", "-addr", addr)
	requireOK(t, r)
	var out struct {
		Workflows []map[string]any `json:"workflows"`
		Next      string           `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Workflows, 2)
	require.Equal(t, w1, out.Workflows[0]["id"])
	require.Equal(t, "cancelled", out.Workflows[1]["status"])
	require.NotContains(t, out.Workflows[0], "tasks", "members are omitted")
	require.Equal(t, w2, out.Next)
	req := f.Requests(cronoqv1connect.WorkflowServiceListProcedure)[0].(*cronoqv1.ListWorkflowsRequest)
	require.Equal(t, []cronoqv1.WorkflowStatus{cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED}, req.GetStatuses())
	require.Equal(t, int32(5), req.GetLimit())
	require.Equal(t, "W0", req.GetAfter())

	r = runCLI(t, "", "workflow", "list", "-after", w2, "-addr", addr)
	requireOK(t, r)
	require.Regexp(t, `^ID +NAME +STATUS +SUBMITTED +FINISHED +SCHEDULE\n`+w3+` +nightly +running +\S+ +- +-\n$`, r.stdout)

	r = runCLI(t, "", "workflow", "list", "-status", "succeeded", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "no workflows\n", r.stdout)

	// The hint for the next page repeats the filters.
	r = runCLI(t, "", "workflow", "list", "-status", "running", "-status", "cancelled", "-limit", "1", "-stale", "-addr", addr)
	requireOK(t, r)
	require.Regexp(t, `\n`+w1+` .*\nmore: cronoq workflow list -status running,cancelled -limit 1 -stale -addr `+regexp.QuoteMeta(addr)+` -after `+w1+`\n$`, r.stdout)
	r = runCLI(t, "", hintArgs(t, r.stdout, addr)...)
	requireOK(t, r)
	require.Regexp(t, `\n`+w2+` .*\nmore: cronoq workflow list -status running,cancelled -limit 1 -stale -addr `+regexp.QuoteMeta(addr)+` -after `+w2+`\n$`, r.stdout)
	reqs := f.Requests(cronoqv1connect.WorkflowServiceListProcedure)
	req = reqs[len(reqs)-1].(*cronoqv1.ListWorkflowsRequest)
	require.Equal(t, w1, req.GetAfter())
	require.True(t, req.GetStale())
	require.Equal(t, int32(1), req.GetLimit())
}

func TestSubmitDependsOn(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	first := f.AddTask(&cronoqv1.TaskSpec{Key: "first", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}})
	second := f.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}})

	r := runCLI(t, "", "submit", "-pool", "p", "-kind", "k", "-depends-on", second, "-depends-on", "key:first",
		"-dependency-policy", "done", "-external", "-key", "third", "-o", "json", "-addr", addr)
	requireOK(t, r)
	spec := f.Submits()[len(f.Submits())-1]
	require.Len(t, spec.GetDependsOn(), 2)
	require.Equal(t, second, spec.GetDependsOn()[0].GetId())
	require.Equal(t, "first", spec.GetDependsOn()[1].GetKey())
	require.Equal(t, cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE, spec.GetDependencyPolicy())
	require.True(t, spec.GetExternal())
	third := f.TaskByKey("third")
	require.Equal(t, cronoqv1.Status_STATUS_BLOCKED, third.GetStatus())

	r = runCLI(t, "", "status", "-key", "third", "-o", "json", "-addr", addr)
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, "blocked", m["status"])
	require.Equal(t, []any{second, first}, m["depends_on"])
	require.Equal(t, "done", m["dependency_policy"])
	require.Equal(t, true, m["external"])

	r = runCLI(t, "", "list", "-status", "blocked", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, third.GetId())

	// Unknown dependencies are refused, naming the flag.
	r = runCLI(t, "", "submit", "-pool", "p", "-kind", "k", "-depends-on", "key:nope", "-addr", addr)
	requireFailure(t, r, exitUsage, "invalid -depends-on:", `"nope"`)
	r = runCLI(t, "", "submit", "-pool", "p", "-kind", "k", "-depends-on", first, "-depends-on", "01NOPE", "-addr", addr)
	requireFailure(t, r, exitUsage, "invalid -depends-on:", "01NOPE")
}

func TestComplete(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	external := func(key string) string {
		return f.AddTask(&cronoqv1.TaskSpec{Key: key, External: true, Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "approval"}})
	}
	a, b, c := external("a"), external("b"), external("c")
	plain := f.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}})
	outFile := filepath.Join(t.TempDir(), "out.txt")
	require.NoError(t, os.WriteFile(outFile, []byte("approved by ops\n"), 0o600))

	r := runCLI(t, "", "complete", a, "-output", "@"+outFile, "-o", "json", "-addr", addr)
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, a, m["id"])
	require.Equal(t, "succeeded", m["status"])
	require.Equal(t, "approved by ops\n", m["output"])
	require.Equal(t, true, m["external"])

	r = runCLI(t, "", "complete", "-key", "b", "-fail", "rejected", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "task "+b+" failed: rejected\n", r.stdout)
	require.Equal(t, cronoqv1.Status_STATUS_FAILED, f.Task(b).GetStatus())

	r = runCLI(t, "", "complete", c, "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "task "+c+" succeeded\n", r.stdout)

	// Not waiting: ended already, or not external.
	r = runCLI(t, "", "complete", a, "-addr", addr)
	requireFailure(t, r, exitError, "task "+a+" is not an external task waiting for completion")
	r = runCLI(t, "", "complete", plain, "-output", "x", "-addr", addr)
	requireFailure(t, r, exitError, "task "+plain+" is not an external task waiting for completion")
	r = runCLI(t, "", "complete", "-key", "b", "-addr", addr)
	requireFailure(t, r, exitError, `task with key "b" is not an external task waiting for completion`)
	r = runCLI(t, "", "complete", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
	r = runCLI(t, "", "complete", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no task with key "nokey"`)
}

func TestRecurringWorkflow(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	r := runCLI(t, "", "recurring", "add", "etl", "-cron", "@daily", "-workflow", filepath.Join("testdata", "nightly.hcl"),
		"-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "etl", "next_fire": "2030-01-03T00:00:00Z"}`, r.stdout)
	sc := f.Schedule("etl")
	require.Equal(t, "nightly", sc.GetWorkflow())
	require.Len(t, sc.GetSteps(), 3)
	require.Equal(t, []string{"extract"}, sc.GetSteps()[1].GetDependsOn())
	require.Equal(t, "s3://x", string(sc.GetSteps()[0].GetSpec().GetTemplate().GetPayload()))
	require.Empty(t, sc.GetTask().GetPool(), "no task template")

	r = runCLI(t, "", "recurring", "list", "-o", "json", "-addr", addr)
	requireOK(t, r)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 1)
	require.Equal(t, "nightly", list[0]["workflow"])
	require.Equal(t, float64(3), list[0]["steps"])
	require.Equal(t, "", list[0]["pool"])
	require.Equal(t, "", list[0]["kind"])
	require.Equal(t, "@daily", list[0]["cron"])

	r = runCLI(t, "", "recurring", "list", "-addr", addr)
	requireOK(t, r)
	require.Regexp(t, `(?m)^etl +@daily +UTC +- +- +nightly \(3 steps\) +2030-01-03T00:00:00Z +- +0 +no$`, r.stdout)

	wid := f.FireSchedule("etl")
	w := f.Workflow(wid)
	require.NotNil(t, w)
	require.Equal(t, "nightly", w.GetName())
	require.Equal(t, "etl", w.GetSchedule())
	require.Len(t, w.GetTasks(), 3)

	// Refused by the cluster: the step is named.
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"steps": [{"name": "a", "pool": "p", "kind": "k", "depends_on": ["z"]}]}`), 0o600))
	r = runCLI(t, "", "recurring", "add", "bad", "-cron", "@daily", "-workflow", bad, "-addr", addr)
	requireFailure(t, r, exitUsage, "invalid -workflow "+bad+`: step "a": depends_on:`, `"z"`)
	require.Nil(t, f.Schedule("bad"))
}

func TestWorkflowLocalValidation(t *testing.T) {
	// A command that wrongly passed validation must not reach a node.
	t.Setenv("CRONOQ_ADDR", closedAddr)
	dir := t.TempDir()
	delayed := filepath.Join(dir, "delayed.json")
	require.NoError(t, os.WriteFile(delayed, []byte(`{"steps": [{"name": "a", "pool": "p", "kind": "k", "delay": "5m"}]}`), 0o600))
	nightly := filepath.Join("testdata", "nightly.json")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"workflow submit without file", []string{"workflow", "submit"}, []string{"-f FILE is required"}},
		{"workflow submit missing file", []string{"workflow", "submit", "-f", filepath.Join(dir, "nope.hcl")}, []string{"reading -f file", "nope.hcl"}},
		{"workflow submit positional", []string{"workflow", "submit", "-f", nightly, "x"}, []string{`unexpected argument "x"`}},
		{"workflow submit wait-timeout without wait", []string{"workflow", "submit", "-f", nightly, "-wait-timeout", "1s"}, []string{"-wait-timeout needs -wait"}},
		{"workflow submit bad file", []string{"workflow", "submit", "-f", delayed + "x"}, []string{"reading -f file"}},
		{"workflow status without id", []string{"workflow", "status"}, []string{"missing workflow ID (or -key KEY)"}},
		{"workflow status id and key", []string{"workflow", "status", "W", "-key", "k"}, []string{"give a workflow ID or -key, not both"}},
		{"workflow wait without id", []string{"workflow", "wait"}, []string{"missing workflow ID"}},
		{"workflow cancel without id", []string{"workflow", "cancel"}, []string{"missing argument (usage: cronoq workflow cancel ID)"}},
		{"workflow list bad status", []string{"workflow", "list", "-status", "blocked"}, []string{`flag -status: unknown status "blocked": must be one of running, succeeded, failed, cancelled`}},
		{"workflow list zero limit", []string{"workflow", "list", "-limit", "0"}, []string{"flag -limit: must be at least 1"}},
		{"workflow unknown", []string{"workflow", "run"}, []string{`unknown command "workflow run"`}},

		{"submit bad depends-on", []string{"submit", "-pool", "p", "-kind", "k", "-depends-on", "key:"}, []string{"flag -depends-on: key: needs a KEY"}},
		{"submit policy without depends-on", []string{"submit", "-pool", "p", "-kind", "k", "-dependency-policy", "done"}, []string{"-dependency-policy needs -depends-on"}},
		{"submit bad policy", []string{"submit", "-pool", "p", "-kind", "k", "-depends-on", "A", "-dependency-policy", "any"}, []string{"flag -dependency-policy: must be one of succeeded, done"}},

		{"complete without id", []string{"complete"}, []string{"missing task ID (or -key KEY)"}},
		{"complete fail and output", []string{"complete", "T", "-fail", "no", "-output", "x"}, []string{"-fail and -output exclude each other"}},
		{"complete empty reason", []string{"complete", "T", "-fail", " "}, []string{"-fail needs a reason"}},
		{"complete missing output file", []string{"complete", "T", "-output", "@" + filepath.Join(dir, "nope")}, []string{"reading -output file"}},
		{"complete bad output", []string{"complete", "T", "-output", "@"}, []string{"invalid -output \"@\": @ needs a file name"}},

		{"recurring workflow and pool", []string{"recurring", "add", "n", "-cron", "@daily", "-workflow", nightly, "-pool", "p"}, []string{"-workflow and -pool exclude each other"}},
		{"recurring workflow and label", []string{"recurring", "add", "n", "-cron", "@daily", "-label", "a=b", "-workflow", nightly}, []string{"-workflow and -label exclude each other"}},
		{"recurring workflow empty", []string{"recurring", "add", "n", "-cron", "@daily", "-workflow", ""}, []string{"empty -workflow FILE"}},
		{"recurring workflow with delay", []string{"recurring", "add", "n", "-cron", "@daily", "-workflow", delayed}, []string{"invalid -workflow " + delayed + `: step "a": delay: not for a recurring workflow`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requireFailure(t, runCLI(t, "", tc.args...), exitUsage, tc.want...)
		})
	}
}

func TestWorkflowHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"workflow"}, {"workflow", "-h"}, {"help", "workflow"}} {
		r := runCLI(t, "", args...)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r.stderr)
		require.Empty(t, r.stderr)
		require.True(t, strings.HasPrefix(r.stdout, "Usage: cronoq workflow <command>"), "%v: %q", args, r.stdout)
		for name := range workflowCommands {
			require.Contains(t, r.stdout, "\n  "+name+" ")
		}
	}

	// The HCL example of the help is CONTRACT's JSON example.
	r := runCLI(t, "", "workflow", "submit", "-h")
	requireOK(t, r)
	start := strings.Index(r.stdout, `  name = "nightly"`)
	require.Positive(t, start)
	end := strings.Index(r.stdout[start:], "\nStep names")
	require.Positive(t, end)
	var hcl strings.Builder
	for _, line := range strings.Split(r.stdout[start:start+end], "\n") {
		hcl.WriteString(strings.TrimPrefix(line, "  ") + "\n")
	}
	name, fromHelp, err := parseWorkflowFile("help.hcl", []byte(hcl.String()))
	require.NoError(t, err)
	_, fromContract, err := parseWorkflowFile("nightly.json", readTestdata(t, "nightly.json"))
	require.NoError(t, err)
	require.Equal(t, "nightly", name)
	require.Equal(t, fromContract, fromHelp)
}

// TestWorkflowSubmitInterrupted checks that -wait gives up on an interrupt
// with a plain error.
func TestWorkflowSubmitInterrupted(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan cliResult, 1)
	go func() {
		done <- runCLIContext(ctx, "", "workflow", "submit", "-f", filepath.Join("testdata", "nightly.json"), "-key", "K", "-wait", "-addr", addr)
	}()
	f.WaitUntil("the workflow is submitted", func() bool { return f.WorkflowByKey("K") != nil })
	cancel()
	select {
	case r := <-done:
		requireFailure(t, r, exitError, "interrupted")
	case <-time.After(20 * time.Second):
		t.Fatal("workflow submit -wait did not return after its context ended")
	}
}
