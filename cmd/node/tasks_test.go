package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
			"depends_on": [], "dependency_policy": "succeeded", "external": false, "workflow": "", "step": "", "parent": "",
			"attempts": []
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
	f.PutTask(inPool(doneTask("T1", cronoqv1.Status_STATUS_QUEUED, "", ""), "a", ""))
	f.PutTask(inPool(doneTask("T2", cronoqv1.Status_STATUS_FAILED, "", "exit status 2: it broke"), "b", ""))
	f.PutTask(inPool(doneTask("T3", cronoqv1.Status_STATUS_RUNNING, "", ""), "c", ""))
	f.PutTask(inPool(doneTask("T4", cronoqv1.Status_STATUS_SUCCEEDED, "", ""), "a", ""))

	r := runCLI(t, "", "list", "-pool", "a", "-pool", "b,c", "-status", "queued,failed", "-status", "running",
		"-limit", "2", "-after", "T0", "-order", "asc", "-o", "json", "-addr", addr)
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
	require.Empty(t, req.GetKinds())
	require.Equal(t, int32(2), req.GetLimit())
	require.Equal(t, "T0", req.GetAfter())
	require.False(t, req.GetStale())
	require.False(t, req.GetNewestFirst())

	// Newest first by default.
	r = runCLI(t, "", "list", "-addr", addr, "-stale")
	requireOK(t, r)
	require.Equal(t, ""+
		"ID  POOL  KIND  STATUS     ATTEMPT  PRIORITY  SUBMITTED             ERROR\n"+
		"T4  a     echo  succeeded  1        normal    2030-01-02T14:04:05Z  -\n"+
		"T3  c     echo  running    1        normal    2030-01-02T14:04:05Z  -\n"+
		"more: cronoq list -stale -addr "+addr+" -after T3\n", r.stdout)
	reqs = f.Requests(cronoqv1connect.TaskServiceListProcedure)
	req = reqs[1].(*cronoqv1.ListRequest)
	require.Equal(t, int32(defaultListLimit), req.GetLimit())
	require.True(t, req.GetStale())
	require.True(t, req.GetNewestFirst())
	require.Empty(t, req.GetAfter())

	// The hint's command line lists the next page.
	r = runCLI(t, "", hintArgs(t, r.stdout, addr)...)
	requireOK(t, r)
	require.Equal(t, ""+
		"ID  POOL  KIND  STATUS  ATTEMPT  PRIORITY  SUBMITTED             ERROR\n"+
		"T2  b     echo  failed  1        normal    2030-01-02T14:04:05Z  exit status 2: it broke\n"+
		"T1  a     echo  queued  1        normal    2030-01-02T14:04:05Z  -\n", r.stdout)
	req = f.Requests(cronoqv1connect.TaskServiceListProcedure)[2].(*cronoqv1.ListRequest)
	require.Equal(t, "T3", req.GetAfter())
	require.True(t, req.GetNewestFirst())
	require.True(t, req.GetStale())
}

// inPool sets the pool of task, and its kind unless kind is "".
func inPool(task *cronoqv1.Task, pool, kind string) *cronoqv1.Task {
	task.Template.Pool = pool
	if kind != "" {
		task.Template.Kind = kind
	}
	return task
}

// hintArgs returns the arguments of the command line that the last line of
// stdout ("more: cronoq ...") gives for the next page, with -addr addr.
func hintArgs(t *testing.T, stdout, addr string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	hint, ok := strings.CutPrefix(lines[len(lines)-1], "more: ")
	require.True(t, ok, "no hint in %q", stdout)
	words := shellWords(t, hint)
	require.Equal(t, "cronoq", words[0])
	return append(words[1:], "-addr", addr)
}

// shellWords splits a command line as a POSIX shell does, for the quoting
// shellQuote does.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	inWord, quoted, escaped := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			word.WriteRune(r)
			escaped = false
		case quoted && r == '\'':
			quoted = false
		case quoted:
			word.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case r == '\\':
			escaped, inWord = true, true
		case r == '"' || r == '$' || r == '`':
			t.Fatalf("unexpected %q outside quotes in %q", r, line)
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	require.False(t, quoted || escaped, "unterminated quote in %q", line)
	if inWord {
		words = append(words, word.String())
	}
	return words
}

func TestListKindsAndHint(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	queued := cronoqv1.Status_STATUS_QUEUED
	f.PutTask(inPool(doneTask("T1", queued, "", ""), "a b", "x y"))
	f.PutTask(inPool(doneTask("T2", queued, "", ""), "a b", "k"))
	f.PutTask(inPool(doneTask("T3", queued, "", ""), "a b", "other"))
	f.PutTask(inPool(doneTask("T4", cronoqv1.Status_STATUS_FAILED, "", ""), "a b", "k"))
	f.PutTask(inPool(doneTask("T5", queued, "", ""), "c", "k"))
	f.PutTask(inPool(doneTask("T6", queued, "", ""), "a b", "it's"))
	f.PutTask(inPool(doneTask("T7", queued, "", ""), "a b", "x y"))

	ids := func(stdout string) []string {
		var out []string
		for _, line := range strings.Split(stdout, "\n")[1:] {
			if strings.HasPrefix(line, "T") {
				out = append(out, strings.Fields(line)[0])
			}
		}
		return out
	}
	for _, tc := range []struct {
		order      []string // the -order flag, if any
		first, end []string // the ids of the two pages
		hint       string
	}{
		{nil, []string{"T7", "T6"}, []string{"T2", "T1"},
			"more: cronoq list -pool 'a b' -status queued -kind 'x y,k,it'\\''s' -limit 2 -addr ADDR -after T6\n"},
		{[]string{"-order", "desc"}, []string{"T7", "T6"}, []string{"T2", "T1"},
			"more: cronoq list -pool 'a b' -status queued -kind 'x y,k,it'\\''s' -order desc -limit 2 -addr ADDR -after T6\n"},
		{[]string{"-order", "asc"}, []string{"T1", "T2"}, []string{"T6", "T7"},
			"more: cronoq list -pool 'a b' -status queued -kind 'x y,k,it'\\''s' -order asc -limit 2 -addr ADDR -after T2\n"},
		{[]string{"-order", "oldest"}, []string{"T1", "T2"}, []string{"T6", "T7"},
			"more: cronoq list -pool 'a b' -status queued -kind 'x y,k,it'\\''s' -order oldest -limit 2 -addr ADDR -after T2\n"},
		{[]string{"-order", "newest"}, []string{"T7", "T6"}, []string{"T2", "T1"},
			"more: cronoq list -pool 'a b' -status queued -kind 'x y,k,it'\\''s' -order newest -limit 2 -addr ADDR -after T6\n"},
	} {
		args := append([]string{"list", "-addr", addr, "-limit", "2", "-kind", "x y", "-pool", "a b", "-status", "queued", "-kind", "k,it's"}, tc.order...)
		r := runCLI(t, "", args...)
		requireOK(t, r)
		require.Equal(t, tc.first, ids(r.stdout), "order %v", tc.order)
		hint := strings.ReplaceAll(tc.hint, "ADDR", addr)
		require.True(t, strings.HasSuffix(r.stdout, hint), "order %v: %q", tc.order, r.stdout)
		reqs := f.Requests(cronoqv1connect.TaskServiceListProcedure)
		req := reqs[len(reqs)-1].(*cronoqv1.ListRequest)
		require.Equal(t, []string{"x y", "k", "it's"}, req.GetKinds())
		require.Equal(t, len(tc.order) == 0 || tc.order[1] == "desc" || tc.order[1] == "newest", req.GetNewestFirst())

		// The hint's command line lists the rest, with the same filters.
		next := runCLI(t, "", hintArgs(t, r.stdout, addr)...)
		requireOK(t, next)
		require.Equal(t, tc.end, ids(next.stdout), "order %v", tc.order)
		require.NotContains(t, next.stdout, "more:")
		reqs = f.Requests(cronoqv1connect.TaskServiceListProcedure)
		require.Equal(t, req.GetKinds(), reqs[len(reqs)-1].(*cronoqv1.ListRequest).GetKinds())
	}

	r := runCLI(t, "", "list", "-addr", addr, "-kind", "k", "-o", "json")
	requireOK(t, r)
	var out struct {
		Tasks []struct {
			ID string `json:"id"`
		} `json:"tasks"`
		Next string `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Tasks, 3)
	require.Equal(t, []string{"T5", "T4", "T2"}, []string{out.Tasks[0].ID, out.Tasks[1].ID, out.Tasks[2].ID})
	require.Empty(t, out.Next)
}
