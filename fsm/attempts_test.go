package fsm

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func retryAs(id string, l uint64, o AttemptOutcome, msg string) Mutation {
	return Mutation{Retry: &Retry{ID: id, Lease: l, Error: msg, RetryAt: baseTime, At: baseTime + 10, Outcome: o}}
}

func finishAs(id string, l uint64, st Status, o AttemptOutcome, msg string) Mutation {
	return Mutation{Finish: &Finish{ID: id, Lease: l, Status: st, Error: msg, At: baseTime + 20, Outcome: o}}
}

func requeue(id string, deadline Instant) Mutation {
	return Mutation{Requeue: &Requeue{ID: id, At: baseTime + 30, Deadline: deadline}}
}

// TestAttemptHistory holds the history to what the ending mutations and
// the task say: one record per ended attempt that carries an outcome, its
// number, worker, lease, times, outcome and error.
func TestAttemptHistory(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"), start("a", 1, lease(1, 1)))
	h.ok(retryAs("a", lease(1, 1), AttemptTimeout, "attempt timed out after 1s"))
	a := h.task("a")
	require.Equal(t, []Attempt{{
		Attempt: 1, Worker: "w1", Lease: lease(1, 1), StartedAt: baseTime + 2, FinishedAt: baseTime + 10,
		Outcome: AttemptTimeout, Error: "attempt timed out after 1s",
	}}, a.Attempts)
	require.Equal(t, uint64(1), a.Attempts[0].Epoch())
	require.Equal(t, StatusQueued, a.Status)
	require.Equal(t, uint16(6), a.Version())

	h.ok(start("a", 2, lease(1, 2)), finishAs("a", lease(1, 2), StatusSucceeded, AttemptSucceeded, ""))
	a = h.task("a")
	require.Len(t, a.Attempts, 2)
	require.Equal(t, Attempt{Attempt: 2, Worker: "w1", Lease: lease(1, 2), StartedAt: baseTime + 2, FinishedAt: baseTime + 20, Outcome: AttemptSucceeded}, a.Attempts[1])

	// Without an outcome (a leader of an older format) nothing is recorded.
	h.ok(insert("b", "p", ""), start("b", 1, lease(1, 3)), retry("b", lease(1, 3), baseTime), start("b", 2, lease(1, 4)),
		finish("b", lease(1, 4), StatusFailed))
	require.Empty(t, h.task("b").Attempts)
	require.Equal(t, uint16(1), h.task("b").Version())
	checkIndexes(t, h.s.View())
}

// TestAttemptHistoryIsBounded holds a task to its last MaxAttemptHistory
// attempts, oldest dropped first, and every error to MaxAttemptError
// bytes, cut at a character boundary and marked; the task's own error is
// kept whole.
func TestAttemptHistoryIsBounded(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", ""))
	long := strings.Repeat("é", 2000) // 4000 bytes, two per character
	for n := uint32(1); n <= 14; n++ {
		h.ok(start("a", n, lease(1, uint64(n))), retryAs("a", lease(1, uint64(n)), AttemptRetry, long))
		before := h.task("a").Attempts
		require.Len(t, before, min(int(n), MaxAttemptHistory))
		require.Equal(t, n, before[len(before)-1].Attempt)
	}
	a := h.task("a")
	require.Equal(t, long, a.Error, "the task's error is whole")
	for i, at := range a.Attempts {
		require.Equal(t, uint32(5+i), at.Attempt, "the oldest went first")
		require.LessOrEqual(t, len(at.Error), MaxAttemptError)
		require.True(t, strings.HasSuffix(at.Error, TruncatedMark))
		require.True(t, utf8.ValidString(at.Error))
		require.True(t, strings.HasPrefix(long, strings.TrimSuffix(at.Error, TruncatedMark)))
	}

	// Records are replaced, never written into: a view taken before keeps
	// what it saw.
	v := h.s.View()
	old, _ := v.Get("a")
	h.ok(start("a", 15, lease(1, 15)), finishAs("a", lease(1, 15), StatusFailed, AttemptLost, "lease lost"))
	require.Equal(t, uint32(14), old.Attempts[len(old.Attempts)-1].Attempt)
	require.Equal(t, AttemptRetry, old.Attempts[len(old.Attempts)-1].Outcome)
	now := h.task("a").Attempts
	require.Equal(t, Attempt{Attempt: 15, Worker: "w1", Lease: lease(1, 15), StartedAt: baseTime + 2, FinishedAt: baseTime + 20, Outcome: AttemptLost, Error: "lease lost"}, now[len(now)-1])
}

func TestCutError(t *testing.T) {
	require.Equal(t, "", CutError(""))
	exact := strings.Repeat("x", MaxAttemptError)
	require.Equal(t, exact, CutError(exact))
	cut := CutError(exact + "y")
	require.Len(t, cut, MaxAttemptError)
	require.True(t, strings.HasSuffix(cut, TruncatedMark))
	// A three-byte character straddling the cut goes whole.
	s := strings.Repeat("x", MaxAttemptError-len(TruncatedMark)-1) + "€" + strings.Repeat("x", 100)
	cut = CutError(s)
	require.True(t, utf8.ValidString(cut))
	require.Equal(t, strings.Repeat("x", MaxAttemptError-len(TruncatedMark)-1)+TruncatedMark, cut)
}

// TestAttemptOutcomePreconditions holds the outcome a mutation carries to
// the way it ends the attempt, and to an attempt that runs.
func TestAttemptOutcomePreconditions(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", ""), start("a", 1, lease(1, 1)), insert("q", "p", ""))
	for _, tc := range []struct {
		name string
		m    Mutation
		want string
	}{
		{"retry as succeeded", retryAs("a", lease(1, 1), AttemptSucceeded, ""), "attempt outcome succeeded does not fit"},
		{"retry as failed", retryAs("a", lease(1, 1), AttemptFailed, ""), "attempt outcome failed does not fit"},
		{"retry of an unknown outcome", retryAs("a", lease(1, 1), 99, ""), "attempt outcome unknown does not fit"},
		{"succeeded as failed", finishAs("a", lease(1, 1), StatusSucceeded, AttemptFailed, ""), "attempt outcome failed does not fit"},
		{"failed as a retry", finishAs("a", lease(1, 1), StatusFailed, AttemptRetry, ""), "attempt outcome retry does not fit"},
		{"cancelled as expired", finishAs("a", lease(1, 1), StatusCancelled, AttemptExpired, ""), "attempt outcome expired does not fit"},
		{"an outcome without a lease", finishAs("q", 0, StatusCancelled, AttemptCancelled, ""), "an attempt outcome without a lease"},
	} {
		rej := h.reject(0, tc.m)
		require.Contains(t, rej.Reason, tc.want, tc.name)
	}
	require.Empty(t, h.task("a").Attempts)
	for _, st := range []Status{StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired} {
		require.Contains(t, finishOutcomes(st), OutcomeOf(st), st.String())
	}
	require.Equal(t, []AttemptOutcome{AttemptFailed, AttemptTimeout, AttemptLost}, finishOutcomes(StatusFailed))
	// A new task has no history.
	m := insert("n", "p", "")
	m.Insert.Attempts = []Attempt{{Attempt: 1}}
	require.Contains(t, h.reject(0, m).Reason, "a new task has no attempt history")
	m = insert("n", "p", "")
	m.Insert.AttemptBase = 1
	require.Contains(t, h.reject(0, m).Reason, "a new task has no attempt history")
}

// TestRequeue holds an operator's retry to its precondition (a task that
// ended failed, expired or cancelled, outside any workflow) and to what it
// does: queued again under the same id and key, a new attempt budget from
// its attempts so far, its history kept, its output and end cleared, its
// lane no longer blocked, the deadline the mutation gives.
func TestRequeue(t *testing.T) {
	h := newHarness(t)
	blocker := insert("a", "p", "ka")
	blocker.Insert.Keys = &Keys{Ordering: "o"}
	h.ok(blocker, start("a", 1, lease(1, 1)))
	fin := finishAs("a", lease(1, 1), StatusFailed, AttemptFailed, "broken")
	fin.Finish.BlocksLane = true
	fin.Finish.Output = []byte("partial")
	h.ok(fin)
	before := h.task("a")
	require.True(t, before.BlocksLane)

	h.ok(requeue("a", baseTime+1e12))
	a := h.task("a")
	require.Equal(t, StatusQueued, a.Status)
	require.Equal(t, uint32(1), a.Attempt, "the attempts started stay counted")
	require.Equal(t, uint32(1), a.AttemptBase, "the budget counts from here")
	require.Equal(t, before.Attempts, a.Attempts)
	require.False(t, a.BlocksLane)
	require.Nil(t, a.Output)
	require.Zero(t, a.FinishedAt)
	require.Equal(t, "broken", a.Error, "the last error stays until the next attempt")
	require.Equal(t, baseTime+30, a.RunAt)
	require.Equal(t, baseTime+1e12, a.Deadline)
	require.Equal(t, baseTime+30, a.UpdatedAt)
	require.Equal(t, h.index, a.ModifyIndex)
	byKey, ok := h.s.GetByKey("ka")
	require.True(t, ok)
	require.Same(t, a, byKey)
	require.Equal(t, int64(1), h.s.View().Counts()[0].ByStatus[StatusQueued])
	require.Zero(t, h.s.View().Counts()[0].ByStatus[StatusFailed])

	// It runs again as attempt 2, and the lease must still rise.
	h.reject(0, start("a", 1, lease(1, 2)))
	h.reject(0, start("a", 2, lease(1, 1)))
	h.ok(start("a", 2, lease(1, 2)), finishAs("a", lease(1, 2), StatusSucceeded, AttemptSucceeded, ""))
	require.Len(t, h.task("a").Attempts, 2)

	h.ok(insert("x", "p", ""), finish("x", 0, StatusExpired), requeue("x", 0))
	require.Zero(t, h.task("x").Deadline)
	require.Zero(t, h.task("x").AttemptBase, "it never ran")
	h.ok(insert("c", "p", ""), finish("c", 0, StatusCancelled), requeue("c", 0))

	h.ok(putWorkflow("w", ""), insertInto("m", "", "w"), finish("m", 0, StatusCancelled))
	for _, tc := range []struct {
		name string
		m    Mutation
		want string
	}{
		{"succeeded", requeue("a", 0), "task is succeeded, want failed, expired or cancelled"},
		{"queued", requeue("x", 0), "task is queued, want failed, expired or cancelled"},
		{"unknown", requeue("zz", 0), "no such task"},
		{"a workflow member", requeue("m", 0), "is a member of workflow w"},
	} {
		rej := h.reject(0, tc.m)
		require.Contains(t, rej.Reason, tc.want, tc.name)
	}
	checkIndexes(t, h.s.View())
}

// TestRejectedRequeueRollsBack holds a batch whose later mutation is
// refused to leave a requeue and a recorded attempt of it undone.
func TestRejectedRequeueRollsBack(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", ""), start("a", 1, lease(1, 1)), insert("b", "p", ""), finish("b", 0, StatusCancelled))
	good := snapshotBytes(t, h.s)
	h.reject(2, retryAs("a", lease(1, 1), AttemptLost, "gone"), requeue("b", 0), purge("zz"))
	require.Equal(t, good, snapshotBytes(t, h.s))
	require.Empty(t, h.task("a").Attempts)
	require.Equal(t, StatusCancelled, h.task("b").Status)
}

// TestSnapshotKeepsHistory holds a snapshot to carry the history and the
// attempt base, under a header of format 6 while a task has them.
func TestSnapshotKeepsHistory(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", ""), start("a", 1, lease(1, 1)), retryAs("a", lease(1, 1), AttemptRetry, "again"))
	h.ok(insert("b", "p", ""), finish("b", 0, StatusCancelled), requeue("b", 0))
	snap := snapshotBytes(t, h.s)
	require.Equal(t, uint16(6), uint16(snap[4])<<8|uint16(snap[5]))
	s := New()
	require.NoError(t, s.Restore(strings.NewReader(string(snap))))
	got, _ := s.Get("a")
	require.Equal(t, h.task("a"), got)
	require.ErrorIs(t, NewVersion(5).Restore(strings.NewReader(string(snap))), ErrNewerVersion)
}
