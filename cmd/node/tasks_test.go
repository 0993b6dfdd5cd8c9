package main

import (
	"encoding/json"
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

func TestSubmitSendsSpec(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	payloadFile := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(payloadFile, []byte(`{"n":1}`), 0o600))

	r := runCLI(t, "", "submit", "-pool", "p", "-kind", "k", "-o", "json", "-addr", addr,
		"-payload", "@"+payloadFile, "-label", "zone=eu", "-label", "gpu=", "-tag", "traceparent=00-1",
		"-priority", "high", "-run-at", "2030-01-02T15:04:05+01:00", "-deadline", "2030-01-03T00:00:00Z",
		"-timeout", "30s", "-max-attempts", "3", "-key", "K1")
	requireOK(t, r)
	id := f.TaskByKey("K1").GetId()
	require.NotEmpty(t, id)
	require.JSONEq(t, fmt.Sprintf(`{"id": %q, "duplicate": false}`, id), r.stdout)

	spec := f.Submits()[0]
	tpl := spec.GetTemplate()
	require.Equal(t, "p", tpl.GetPool())
	require.Equal(t, "k", tpl.GetKind())
	require.Equal(t, "K1", spec.GetKey())
	require.Equal(t, cronoqv1.Priority_PRIORITY_HIGH, tpl.GetPriority())
	require.Equal(t, `{"n":1}`, string(tpl.GetPayload()))
	require.ElementsMatch(t, []*cronoqv1.KV{{Key: "zone", Value: "eu"}, {Key: "gpu", Value: ""}}, kvs(tpl.GetLabels()))
	require.Equal(t, []*cronoqv1.KV{{Key: "traceparent", Value: "00-1"}}, kvs(tpl.GetTags()))
	require.Equal(t, time.Date(2030, 1, 2, 14, 4, 5, 0, time.UTC), spec.GetRunAt().AsTime())
	require.Nil(t, spec.GetDelay())
	require.Equal(t, time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC), spec.GetDeadline().AsTime())
	require.Equal(t, 30*time.Second, tpl.GetTimeout().AsDuration())
	require.Equal(t, uint32(3), tpl.GetMaxAttempts())
	require.Equal(t, cronoqv1.Status_STATUS_SCHEDULED, f.Task(id).GetStatus(), "it runs at its run-at time")

	// Same key again: the existing task, reported as a duplicate.
	r = runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "k", "-key", "K1", "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, fmt.Sprintf(`{"id": %q, "duplicate": true}`, id), r.stdout)

	// Text output: the id alone, from stdin payload and a delay.
	r = runCLI(t, "from stdin", "submit", "-addr", addr, "-pool", "p", "-kind", "k", "-payload", "@-", "-delay", "1m30s")
	requireOK(t, r)
	spec = f.Submits()[2]
	require.Equal(t, f.TaskByKey(spec.GetKey()).GetId()+"\n", r.stdout)
	require.NotEqual(t, id+"\n", r.stdout)
	require.Equal(t, "from stdin", string(spec.GetTemplate().GetPayload()))
	require.Equal(t, 90*time.Second, spec.GetDelay().AsDuration())
	require.NotEmpty(t, spec.GetKey(), "the SDK makes every submit idempotent")
	require.Equal(t, cronoqv1.Priority_PRIORITY_NORMAL, spec.GetTemplate().GetPriority())
}

func TestSubmitRefusedByNode(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t, clienttest.WithPools("p"))
	r := runCLI(t, "", "submit", "-addr", addr, "-pool", "nope", "-kind", "k")
	requireFailure(t, r, exitUsage, `invalid -pool: unknown pool "nope"`)

	f.SetPendingLimit("p", 0)
	r = runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "k")
	requireFailure(t, r, exitError, "pool p is at its pending bound")
	require.Empty(t, f.Tasks())
}

func TestSubmitWait(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.PutTask(doneTask("T1", cronoqv1.Status_STATUS_SUCCEEDED, "result", ""))
	f.PutTask(doneTask("T2", cronoqv1.Status_STATUS_FAILED, "", "exit status 1: boom\nmore"))

	// The key names an existing, finished task: submit is a duplicate and
	// -wait shows that task.
	r := runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "echo", "-key", "key-T1", "-wait", "-o", "json")
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, "T1", m["id"])
	require.Equal(t, "succeeded", m["status"])
	require.Equal(t, "result", m["output"])

	r = runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "echo", "-key", "key-T2", "-wait", "-o", "json")
	require.Equal(t, exitTaskFailed, r.code)
	m = decodeObject(t, r.stdout)
	require.Equal(t, "failed", m["status"])
	require.Equal(t, "cronoq: task T2 failed: exit status 1: boom | more\n", r.stderr)
}

func TestStatus(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.PutTask(doneTask("T1", cronoqv1.Status_STATUS_SUCCEEDED, "result\n", ""))

	for _, args := range [][]string{
		{"status", "T1", "-o", "json", "-addr", addr},
		{"status", "-o", "json", "T1", "-addr", addr},
		{"status", "-addr", addr, "-o", "json", "-key", "key-T1"},
	} {
		r := runCLI(t, "", args...)
		requireOK(t, r)
		require.JSONEq(t, `{
			"id": "T1", "pool": "p", "kind": "echo", "key": "key-T1", "status": "succeeded",
			"attempt": 1, "max_attempts": 5, "priority": "normal",
			"labels": {"zone": "eu"}, "tags": {}, "payload": "in", "output": "result\n", "error": "",
			"submitted_at": "2030-01-02T14:04:05Z", "run_at": "2030-01-02T14:04:05Z", "started_at": null,
			"finished_at": "2030-01-02T14:04:08Z", "updated_at": null, "deadline": null, "timeout_ms": 0,
			"lease": 0, "schedule": "", "slot": null,
			"depends_on": [], "dependency_policy": "succeeded", "external": false, "workflow": "", "step": "", "parent": ""
		}`, r.stdout, "args %v", args)
	}

	r := runCLI(t, "", "status", "T1", "-addr", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "id:           T1\nstatus:       succeeded\n")
	require.Contains(t, r.stdout, "output:       result\n")

	r = runCLI(t, "", "status", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
	r = runCLI(t, "", "status", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no task with key "nokey"`)
}

func TestWait(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.PutTask(doneTask("T1", cronoqv1.Status_STATUS_SUCCEEDED, "ok", ""))
	f.PutTask(doneTask("T2", cronoqv1.Status_STATUS_CANCELLED, "", ""))
	f.PutTask(doneTask("T3", cronoqv1.Status_STATUS_EXPIRED, "", "deadline passed"))
	f.PutTask(&cronoqv1.Task{Id: "T4", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, Status: cronoqv1.Status_STATUS_RUNNING})

	r := runCLI(t, "", "wait", "T1", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.Equal(t, "succeeded", decodeObject(t, r.stdout)["status"])

	r = runCLI(t, "", "wait", "-addr", addr, "T2", "-o", "json")
	require.Equal(t, exitTaskFailed, r.code)
	require.Equal(t, "cancelled", decodeObject(t, r.stdout)["status"])
	require.Equal(t, "cronoq: task T2 cancelled\n", r.stderr)

	r = runCLI(t, "", "wait", "-key", "key-T3", "-addr", addr)
	require.Equal(t, exitTaskFailed, r.code)
	require.Contains(t, r.stdout, "status:       expired\n")
	require.Equal(t, "cronoq: task T3 expired: deadline passed\n", r.stderr)

	r = runCLI(t, "", "wait", "T4", "-timeout", "300ms", "-addr", addr)
	requireFailure(t, r, exitError, "task T4 did not end within -timeout 300ms")

	r = runCLI(t, "", "wait", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.PutTask(&cronoqv1.Task{Id: "T1", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, Status: cronoqv1.Status_STATUS_QUEUED})

	r := runCLI(t, "", "cancel", "T1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "cancelled": true}`, r.stdout)
	require.Equal(t, cronoqv1.Status_STATUS_CANCELLED, f.Task("T1").GetStatus())

	r = runCLI(t, "", "cancel", "-o", "json", "-addr", addr, "T1")
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "cancelled": false}`, r.stdout)

	r = runCLI(t, "", "cancel", "T1", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "task T1 had already ended; nothing cancelled\n", r.stdout)

	r = runCLI(t, "", "cancel", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
}

func TestList(t *testing.T) {
	t.Parallel()
	// Pages of at most two tasks, whatever the limit asked for.
	f, addr := startFake(t, clienttest.WithMaxListLimit(2))
	inPool := func(task *cronoqv1.Task, pool string) *cronoqv1.Task {
		task.Template.Pool = pool
		return task
	}
	f.PutTask(inPool(doneTask("T1", cronoqv1.Status_STATUS_QUEUED, "", ""), "a"))
	f.PutTask(inPool(doneTask("T2", cronoqv1.Status_STATUS_FAILED, "", "exit status 2: it broke"), "b"))
	f.PutTask(inPool(doneTask("T3", cronoqv1.Status_STATUS_RUNNING, "", ""), "c"))
	f.PutTask(inPool(doneTask("T4", cronoqv1.Status_STATUS_SUCCEEDED, "", ""), "a"))

	r := runCLI(t, "", "list", "-pool", "a", "-pool", "b,c", "-status", "queued,failed", "-status", "running",
		"-limit", "2", "-after", "T0", "-o", "json", "-addr", addr)
	requireOK(t, r)
	var out struct {
		Tasks []map[string]any `json:"tasks"`
		Next  string           `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Tasks, 2)
	require.Equal(t, "T1", out.Tasks[0]["id"])
	require.Equal(t, "failed", out.Tasks[1]["status"])
	require.Equal(t, "T2", out.Next)
	reqs := f.Requests(cronoqv1connect.TaskServiceListProcedure)
	req := reqs[0].(*cronoqv1.ListRequest)
	require.Equal(t, []string{"a", "b", "c"}, req.GetPools())
	require.Equal(t, []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_FAILED, cronoqv1.Status_STATUS_RUNNING}, req.GetStatuses())
	require.Equal(t, int32(2), req.GetLimit())
	require.Equal(t, "T0", req.GetAfter())
	require.False(t, req.GetStale())

	r = runCLI(t, "", "list", "-addr", addr, "-stale")
	requireOK(t, r)
	require.Equal(t, ""+
		"ID  POOL  KIND  STATUS  ATTEMPT  PRIORITY  SUBMITTED             ERROR\n"+
		"T1  a     echo  queued  1        normal    2030-01-02T14:04:05Z  -\n"+
		"T2  b     echo  failed  1        normal    2030-01-02T14:04:05Z  exit status 2: it broke\n"+
		"more: cronoq list -after T2\n", r.stdout)
	reqs = f.Requests(cronoqv1connect.TaskServiceListProcedure)
	req = reqs[1].(*cronoqv1.ListRequest)
	require.Equal(t, int32(defaultListLimit), req.GetLimit())
	require.True(t, req.GetStale())
}
