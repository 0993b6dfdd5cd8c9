package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	require.Equal(t, string(want), string(got), "golden file %s (run go test -update to rewrite)", path)
}

var t0 = time.Date(2030, 1, 2, 15, 4, 5, 123456789, time.FixedZone("CET", 3600))

// fullTask has every field set.
func fullTask() *client.Task {
	return &client.Task{
		ID: "01JD3ZQ8Y6A5B4C3D2E1F0G9H8",
		Template: client.Template{
			Pool:        "billing",
			Kind:        "invoice",
			Priority:    client.PriorityHigh,
			MaxAttempts: 5,
			Labels:      map[string]string{"zone": "eu-1", "gpu": "yes"},
			Tags:        map[string]string{"traceparent": "00-abc-def-01"},
			Payload:     []byte(`{"customer":42,"note":"<b>&</b>"}`),
			Timeout:     90 * time.Second,

			OrderingKey:    "customer-42",
			ConcurrencyKey: "tenant-7",
		},
		Key:         "invoice-2030-01",
		Status:      client.StatusSucceeded,
		Attempt:     2,
		Lease:       3<<32 | 17,
		Output:      []byte("line one\nline two\n"),
		Error:       "",
		SubmittedAt: t0,
		RunAt:       t0.Add(time.Minute),
		StartedAt:   t0.Add(2 * time.Minute),
		FinishedAt:  t0.Add(3 * time.Minute),
		UpdatedAt:   t0.Add(3 * time.Minute),
		Deadline:    t0.Add(time.Hour),
		Schedule:    "monthly-invoices",
		Slot:        time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),

		DependsOn:        []string{"01JD3ZQ8Y6A5B4C3D2E1F0G9H1", "01JD3ZQ8Y6A5B4C3D2E1F0G9H2"},
		DependencyPolicy: client.DependencyPolicyDone,
		External:         true,
		Workflow:         "01JD3ZQ8Y6A5B4C3D2E1F0G9W1",
		Step:             "invoice",
		Parent:           "01JD3ZQ8Y6A5B4C3D2E1F0G9H0",

		AttemptBase: 1,
		Attempts: []client.Attempt{
			{Attempt: 1, Worker: "w-eu-1", Lease: 3<<32 | 9, Epoch: 3, StartedAt: t0.Add(time.Minute), FinishedAt: t0.Add(time.Minute + 1500*time.Millisecond),
				Outcome: client.AttemptTimeout, Error: "attempt timed out after 1.5s\nsecond line of a long error that the text output cuts short"},
			{Attempt: 2, Worker: "w-eu-2", Lease: 3<<32 | 17, Epoch: 3, StartedAt: t0.Add(2 * time.Minute), FinishedAt: t0.Add(3 * time.Minute),
				Outcome: client.AttemptSucceeded},
		},
	}
}

// queuedTask is a fresh task: most fields unset.
func queuedTask() *client.Task {
	return &client.Task{
		ID:          "01JD3ZQ8Y6A5B4C3D2E1F0G9H9",
		Template:    client.Template{Pool: "default", Kind: "echo"},
		Status:      client.StatusQueued,
		SubmittedAt: t0,
		RunAt:       t0,
	}
}

// binaryTask failed, with payload and output that are not UTF-8.
func binaryTask() *client.Task {
	return &client.Task{
		ID: "01JD3ZQ8Y6A5B4C3D2E1F0G9HA",
		Template: client.Template{
			Pool:        "images",
			Kind:        "resize",
			Priority:    client.PriorityLow,
			MaxAttempts: 5,
			Payload:     []byte{0x89, 'P', 'N', 'G', 0, 0xff},
			OrderingKey: "album-9",
		},
		Key:         "k",
		Status:      client.StatusFailed,
		Attempt:     5,
		Output:      []byte{0xfe, 0xfd},
		Error:       "exit status 1: convert: no decode delegate\nfor this image format",
		SubmittedAt: t0,
		RunAt:       t0,
		StartedAt:   t0.Add(time.Second),
		FinishedAt:  t0.Add(2 * time.Second),
		UpdatedAt:   t0.Add(2 * time.Second),
		BlocksLane:  true,
	}
}

func renderJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, writeJSON(&buf, v))
	return buf.Bytes()
}

func TestTaskJSONGolden(t *testing.T) {
	t.Parallel()
	golden(t, "task_full.json", renderJSON(t, newTaskJSON(fullTask())))
	golden(t, "task_queued.json", renderJSON(t, newTaskJSON(queuedTask())))
	golden(t, "task_binary.json", renderJSON(t, newTaskJSON(binaryTask())))
	golden(t, "list.json", renderJSON(t, newListJSON([]*client.Task{queuedTask(), binaryTask()}, "01JD3ZQ8Y6A5B4C3D2E1F0G9HA")))
	golden(t, "list_empty.json", renderJSON(t, newListJSON(nil, "")))
}

// TestTaskJSONShape checks the contract on the decoded object, independently
// of the golden files.
func TestTaskJSONShape(t *testing.T) {
	t.Parallel()
	decode := func(task *client.Task) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(renderJSON(t, newTaskJSON(task)), &m))
		return m
	}
	for _, task := range []*client.Task{fullTask(), queuedTask(), binaryTask()} {
		m := decode(task)
		for _, f := range []string{"id", "pool", "kind", "key", "status", "attempt", "priority", "labels", "error",
			"submitted_at", "run_at", "finished_at"} {
			require.Contains(t, m, f, "task %s", task.ID)
		}
		require.IsType(t, map[string]any{}, m["labels"])
	}

	full := decode(fullTask())
	require.Equal(t, `{"customer":42,"note":"<b>&</b>"}`, full["payload"])
	require.Equal(t, "line one\nline two\n", full["output"])
	require.NotContains(t, full, "payload_base64")
	require.Equal(t, "2030-01-02T14:04:05.123456789Z", full["submitted_at"], "RFC 3339 in UTC")
	require.Equal(t, "2030-01-02T14:07:05.123456789Z", full["finished_at"])
	require.Equal(t, "high", full["priority"])
	require.EqualValues(t, 3<<32|17, full["lease"])

	queued := decode(queuedTask())
	require.Nil(t, queued["finished_at"])
	require.Contains(t, queued, "finished_at")
	require.Equal(t, "", queued["payload"])
	require.Equal(t, "", queued["output"])
	require.Equal(t, "normal", queued["priority"])
	require.Equal(t, map[string]any{}, queued["labels"])

	bin := decode(binaryTask())
	require.NotContains(t, bin, "payload")
	require.NotContains(t, bin, "output")
	require.Equal(t, "iVBORwD/", bin["payload_base64"])
	require.Equal(t, "/v0=", bin["output_base64"])

	// The keys and blocks_lane appear when set.
	require.Equal(t, "customer-42", full["ordering_key"])
	require.Equal(t, "tenant-7", full["concurrency_key"])
	require.NotContains(t, full, "blocks_lane")
	require.Equal(t, "album-9", bin["ordering_key"])
	require.NotContains(t, bin, "concurrency_key")
	require.Equal(t, true, bin["blocks_lane"])
	for _, f := range []string{"ordering_key", "concurrency_key", "blocks_lane"} {
		require.NotContains(t, queued, f)
	}
}

func TestScheduleJSONGolden(t *testing.T) {
	t.Parallel()
	scheds := []scheduleJSON{
		newScheduleJSON(client.Schedule{
			Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Paris",
			Task:    client.Template{Pool: "ops", Kind: "backup", ConcurrencyKey: "db-1"},
			Overlap: client.OverlapAllow, CatchUp: client.CatchUpAll, CatchUpLimit: 3,
			NextFire: time.Date(2030, 1, 3, 2, 0, 0, 0, time.UTC), LastFire: time.Date(2030, 1, 2, 2, 0, 0, 0, time.UTC),
			Fires: 12, Skipped: 1, LastTask: "01JD3ZQ8Y6A5B4C3D2E1F0G9H8",
		}),
		newScheduleJSON(client.Schedule{
			Name: "every-30s", Cron: "@every 30s", Task: client.Template{Pool: "p", Kind: "tick"}, Paused: true,
		}),
		newScheduleJSON(client.Schedule{
			Name: "etl", Cron: "@daily", Workflow: "nightly",
			Steps:    []client.Step{{Name: "extract"}, {Name: "load", DependsOn: []string{"extract"}}},
			NextFire: time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC), LastTask: "01JD3ZQ8Y6A5B4C3D2E1F0G9W1",
		}),
	}
	golden(t, "schedules.json", renderJSON(t, scheds))
}

// fullWorkflow is a failed workflow with its members.
func fullWorkflow() *client.Workflow {
	extract := queuedTask()
	extract.ID, extract.Workflow, extract.Step = "01JD3ZQ8Y6A5B4C3D2E1F0G9H1", "01JD3ZQ8Y6A5B4C3D2E1F0G9W1", "extract"
	extract.Status, extract.Attempt, extract.Output, extract.FinishedAt = client.StatusSucceeded, 1, []byte("rows"), t0.Add(time.Minute)
	load := binaryTask()
	load.ID, load.Workflow, load.Step = "01JD3ZQ8Y6A5B4C3D2E1F0G9H2", "01JD3ZQ8Y6A5B4C3D2E1F0G9W1", "load"
	load.DependsOn = []string{extract.ID, "01JD3ZQ8Y6A5B4C3D2E1F0G9X9"}
	report := queuedTask()
	report.ID, report.Workflow, report.Step = "01JD3ZQ8Y6A5B4C3D2E1F0G9H3", "01JD3ZQ8Y6A5B4C3D2E1F0G9W1", "report"
	report.DependsOn = []string{load.ID}
	report.Status, report.Error, report.FinishedAt = client.StatusCancelled, "dependency load failed", t0.Add(2*time.Second)
	return &client.Workflow{
		ID: "01JD3ZQ8Y6A5B4C3D2E1F0G9W1", Name: "nightly", Key: "nightly:2030-01-02", Status: client.WorkflowFailed,
		SubmittedAt: t0, UpdatedAt: t0.Add(2 * time.Second), FinishedAt: t0.Add(2 * time.Second),
		Schedule: "etl", Slot: time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC),
		Tasks: []*client.Task{extract, load, report},
	}
}

func TestWorkflowGolden(t *testing.T) {
	t.Parallel()
	w := fullWorkflow()
	golden(t, "workflow.json", renderJSON(t, newWorkflowObjectJSON(w)))
	running := &client.Workflow{ID: "01JD3ZQ8Y6A5B4C3D2E1F0G9W2", Name: "adhoc", Status: client.WorkflowRunning, SubmittedAt: t0}
	golden(t, "workflow_running.json", renderJSON(t, newWorkflowObjectJSON(running)))
	golden(t, "workflow_list.json", renderJSON(t, newWorkflowListJSON([]*client.Workflow{w, running}, "01JD3ZQ8Y6A5B4C3D2E1F0G9W2")))
	var buf bytes.Buffer
	require.NoError(t, writeWorkflowText(&buf, w))
	golden(t, "workflow.txt", buf.Bytes())
}

// TestWorkflowJSONShape checks the contract on the decoded objects,
// independently of the golden files.
func TestWorkflowJSONShape(t *testing.T) {
	t.Parallel()
	var obj map[string]any
	require.NoError(t, json.Unmarshal(renderJSON(t, newWorkflowObjectJSON(fullWorkflow())), &obj))
	for _, f := range []string{"id", "name", "key", "status", "submitted_at", "finished_at", "tasks", "schedule", "slot", "parent", "updated_at"} {
		require.Contains(t, obj, f)
	}
	require.Equal(t, "failed", obj["status"])
	tasks := obj["tasks"].([]any)
	require.Len(t, tasks, 3)
	load := tasks[1].(map[string]any)
	require.Equal(t, "load", load["step"])
	require.Equal(t, "01JD3ZQ8Y6A5B4C3D2E1F0G9W1", load["workflow"])
	require.Equal(t, []any{"01JD3ZQ8Y6A5B4C3D2E1F0G9H1", "01JD3ZQ8Y6A5B4C3D2E1F0G9X9"}, load["depends_on"])

	var empty map[string]any
	require.NoError(t, json.Unmarshal(renderJSON(t, newWorkflowObjectJSON(&client.Workflow{ID: "W"})), &empty))
	require.Equal(t, []any{}, empty["tasks"], "tasks is [] when there are none")
	require.Nil(t, empty["finished_at"])

	var list map[string]any
	require.NoError(t, json.Unmarshal(renderJSON(t, newWorkflowListJSON([]*client.Workflow{fullWorkflow()}, "")), &list))
	require.NotContains(t, list["workflows"].([]any)[0], "tasks", "a list omits the members")
	require.Equal(t, "", list["next"])

	var task map[string]any
	require.NoError(t, json.Unmarshal(renderJSON(t, newTaskJSON(queuedTask())), &task))
	require.Equal(t, []any{}, task["depends_on"])
	require.Equal(t, false, task["external"])
	require.Equal(t, "", task["workflow"])
	require.Equal(t, "", task["step"])
}

func TestTaskTextGolden(t *testing.T) {
	t.Parallel()
	for name, task := range map[string]*client.Task{
		"task_full.txt":   fullTask(),
		"task_queued.txt": queuedTask(),
		"task_binary.txt": binaryTask(),
	} {
		var buf bytes.Buffer
		require.NoError(t, writeTaskText(&buf, task))
		golden(t, name, buf.Bytes())
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tb := newTable(&buf, "ID", "ADDRESS", "VOTER")
	tb.row("node-1", "127.0.0.1:8651", "true")
	tb.row("n2", "", "false")
	require.NoError(t, tb.flush())
	require.Equal(t, ""+
		"ID      ADDRESS         VOTER\n"+
		"node-1  127.0.0.1:8651  true\n"+
		"n2      -               false\n", buf.String())
	require.Equal(t, "abcd…", truncate("abcdefgh", 5))
	require.Equal(t, "abc", truncate("abc", 5))
}
