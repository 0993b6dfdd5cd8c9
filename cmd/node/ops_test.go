package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

// failedWithHistory is a task that failed after two attempts.
func failedWithHistory(id string) *cronoqv1.Task {
	t := doneTask(id, cronoqv1.Status_STATUS_FAILED, "", "boom")
	t.Attempt = 2
	t.Attempts = []*cronoqv1.Attempt{
		{Attempt: 1, Worker: "w1", Lease: 2<<32 | 5, Epoch: 2, StartedAt: timestamppb.New(submittedAt), FinishedAt: timestamppb.New(submittedAt.Add(1e9)),
			Outcome: cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_LOST, Error: "lease lost: no heartbeat within 10s"},
		{Attempt: 2, Worker: "w2", Lease: 2<<32 | 6, Epoch: 2, StartedAt: timestamppb.New(submittedAt.Add(2e9)), FinishedAt: timestamppb.New(finishedAt),
			Outcome: cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED, Error: "boom"},
	}
	return t
}

func TestRetry(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.PutTask(failedWithHistory("T1"))
	f.PutTask(doneTask("T2", cronoqv1.Status_STATUS_SUCCEEDED, "ok", ""))
	f.PutTask(doneTask("T3", cronoqv1.Status_STATUS_CANCELLED, "", ""))

	r := runCLI(t, "", "retry", "T1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, "T1", m["id"])
	require.Equal(t, "queued", m["status"])
	require.EqualValues(t, 2, m["attempt"])
	require.EqualValues(t, 2, m["attempt_base"])
	require.Nil(t, m["finished_at"])
	attempts := m["attempts"].([]any)
	require.Len(t, attempts, 2)
	require.Equal(t, map[string]any{
		"attempt": 1.0, "worker": "w1", "lease": float64(2<<32 | 5), "epoch": 2.0,
		"started_at": "2030-01-02T14:04:05Z", "finished_at": "2030-01-02T14:04:06Z",
		"outcome": "lost", "error": "lease lost: no heartbeat within 10s",
	}, attempts[0])
	require.Equal(t, "failed", attempts[1].(map[string]any)["outcome"])
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, f.Task("T1").GetStatus())

	// The same task again: it is live now.
	r = runCLI(t, "", "retry", "T1", "-addr", addr)
	requireFailure(t, r, exitError, "task T1 is queued, not retryable: only a task that ended failed, expired or cancelled can be retried")

	// By key, text output: the task as status shows it.
	r = runCLI(t, "", "retry", "-key", "key-T3", "-addr", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "id:           T3\nstatus:       queued\n")
	require.Contains(t, r.stdout, "attempt:      1 (0 of 5 since it was retried)\n")

	r = runCLI(t, "", "retry", "T2", "-addr", addr)
	requireFailure(t, r, exitError, "task T2 is succeeded, not retryable")
	r = runCLI(t, "", "retry", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
	r = runCLI(t, "", "retry", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no task with key "nokey"`)
}

// TestStatusShowsAttempts: the text of status lists the attempt history,
// the JSON has it whole.
func TestStatusShowsAttempts(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.PutTask(failedWithHistory("T1"))
	r := runCLI(t, "", "status", "T1", "-addr", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "attempts:\n"+
		"  #  OUTCOME  WORKER  LEASE  STARTED               TOOK  ERROR\n"+
		"  1  lost     w1      2.5    2030-01-02T14:04:05Z  1s    lease lost: no heartbeat within 10s\n"+
		"  2  failed   w2      2.6    2030-01-02T14:04:07Z  1s    boom\n")
	r = runCLI(t, "", "status", "T1", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.Len(t, decodeObject(t, r.stdout)["attempts"], 2)
}

func TestCancelByKeyAndFilter(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	queued := func(id, pool, kind string) *cronoqv1.Task {
		return &cronoqv1.Task{Id: id, Key: "key-" + id, Template: &cronoqv1.TaskTemplate{Pool: pool, Kind: kind}, Status: cronoqv1.Status_STATUS_QUEUED}
	}
	f.PutTask(queued("T1", "p", "a"))
	f.PutTask(queued("T2", "p", "a"))
	f.PutTask(queued("T3", "p", "b"))
	f.PutTask(queued("T4", "q", "a"))
	f.PutTask(&cronoqv1.Task{Id: "T5", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "a"}, Status: cronoqv1.Status_STATUS_SCHEDULED,
		RunAt: timestamppb.New(fakeNow.Add(24 * 3600e9))})

	r := runCLI(t, "", "cancel", "-key", "key-T1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "cancelled": 1}`, r.stdout)
	r = runCLI(t, "", "cancel", "-key", "key-T1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "cancelled": 0}`, r.stdout)
	r = runCLI(t, "", "cancel", "-key", "key-T1", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "task T1 had already ended; nothing cancelled\n", r.stdout)
	r = runCLI(t, "", "cancel", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no task with key "nokey"`)

	r = runCLI(t, "", "cancel", "-pool", "p", "-status", "queued", "-kind", "a", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"cancelled": 1}`, r.stdout)
	req := f.Requests(cronoqv1connect.TaskServiceCancelManyProcedure)
	got := req[len(req)-1].(*cronoqv1.CancelManyRequest)
	require.Equal(t, "p", got.GetPool())
	require.Equal(t, []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED}, got.GetStatuses())
	require.Equal(t, []string{"a"}, got.GetKinds())
	require.Equal(t, cronoqv1.Status_STATUS_CANCELLED, f.Task("T2").GetStatus())
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, f.Task("T3").GetStatus(), "another kind")
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, f.Task("T4").GetStatus(), "another pool")

	r = runCLI(t, "", "cancel", "-pool", "p", "-status", "queued,scheduled", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "2 tasks cancelled\n", r.stdout)
	r = runCLI(t, "", "cancel", "-pool", "p", "-status", "queued", "-status", "scheduled", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"cancelled": 0}`, r.stdout)
}
