package checker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// clean is a valid queue history: two tasks, one retried after a lease
// lost to a paused worker whose late completion was refused.
func clean() *hb {
	h := &hb{}
	h.submit("c1", "p-c1-1", "A")
	h.submit("c2", "p-c2-1", "B")
	h.grant("w1", "A", "p-c1-1", 10, 1)
	h.grant("w2", "B", "p-c2-1", 11, 1)
	h.completeOK("w1", "A", "p-c1-1", 10, "success")
	h.grant("w3", "B", "p-c2-1", 12, 2)
	h.completeStale("w2", "B", "p-c2-1", 11)
	h.completeOK("w3", "B", "p-c2-1", 12, "success")
	return h
}

func TestQueueCleanHistoryIsValid(t *testing.T) {
	h := clean()
	h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2))
	r := Queue(h.ops, Params{})
	require.Equal(t, Valid, r.Valid, "%+v", r.Anomalies)
	require.EqualValues(t, 2, r.Counts["acked_keys"])
	require.EqualValues(t, 1, r.Counts["completions_stale"])
}

func TestQueueWithoutFinalReadIsUnknown(t *testing.T) {
	r := Queue(clean().ops, Params{})
	require.Equal(t, Unknown, r.Valid)
}

func TestQueueAnomalies(t *testing.T) {
	tests := []struct {
		name  string
		build func(h *hb)
		inv   string
	}{
		{"lost acked submit", func(h *hb) {
			h.final(succeeded("A", "p-c1-1", 10, 1))
		}, "Q1"},
		{"acked task not terminal after the drain", func(h *hb) {
			h.call("final", workload.DrainOp, &history.Value{Detail: "[q cron]"}, history.OK, nil)
			b := succeeded("B", "p-c2-1", 12, 2)
			b.Status, b.Output = "running", ""
			h.final(succeeded("A", "p-c1-1", 10, 1), b)
		}, "Q1"},
		{"unexpected task", func(h *hb) {
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2),
				history.TaskState{ID: "Z", Pool: q, Key: "p-zz-1", Status: "queued"})
		}, "Q2"},
		{"task in a pool nobody uses", func(h *hb) {
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2),
				history.TaskState{ID: "Y", Pool: "other", Key: "x", Status: "queued"})
		}, "Q2"},
		{"phantom from a definitely failed submit", func(h *hb) {
			h.call("c3", "submit", &history.Value{Pool: q, Key: "p-c3-1"}, history.Fail, &history.Value{Key: "p-c3-1"})
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2),
				history.TaskState{ID: "C", Pool: q, Key: "p-c3-1", Status: "cancelled"})
		}, "Q3"},
		{"two ids for one key", func(h *hb) {
			h.submit("c1", "p-c1-1", "A2")
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2))
		}, "Q4"},
		{"two tasks for one key", func(h *hb) {
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2), succeeded("A3", "p-c1-1", 13, 1))
		}, "Q4"},
		{"two accepted completions", func(h *hb) {
			h.completeOK("w2", "B", "p-c2-1", 11, "success")
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2))
		}, "Q5"},
		{"stale completion accepted after a newer grant", func(h *hb) {
			h.submit("c1", "p-c1-9", "D")
			h.grant("w1", "D", "p-c1-9", 20, 1)
			h.grant("w2", "D", "p-c1-9", 21, 2)
			h.completeOK("w1", "D", "p-c1-9", 20, "success")
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2), succeeded("D", "p-c1-9", 20, 2))
		}, "Q6"},
		{"two leases for one attempt", func(h *hb) {
			h.grant("w2", "A", "p-c1-1", 30, 1)
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2))
		}, "Q6"},
		{"lease granted after completion", func(h *hb) {
			h.grant("w2", "A", "p-c1-1", 31, 2)
			h.final(succeeded("A", "p-c1-1", 10, 2), succeeded("B", "p-c2-1", 12, 2))
		}, "Q6"},
		{"lease granted after cancel", func(h *hb) {
			h.submit("c1", "p-c1-7", "E")
			h.call("c4", "cancel", &history.Value{Pool: q, ID: "E", Key: "p-c1-7"}, history.OK, &history.Value{ID: "E", Cancelled: ptr(true)})
			h.grant("w2", "E", "p-c1-7", 40, 1)
			e := succeeded("E", "p-c1-7", 0, 0)
			e.Status, e.Output = "cancelled", ""
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2), e)
		}, "Q6"},
		{"accepted completion not recorded", func(h *hb) {
			h.final(succeeded("A", "p-c1-1", 99, 1), succeeded("B", "p-c2-1", 12, 2))
		}, "Q7"},
		{"stale-refused completion recorded", func(h *hb) {
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 11, 2))
		}, "Q7"},
		{"cancel and completion both acked", func(h *hb) {
			h.call("c4", "cancel", &history.Value{Pool: q, ID: "A", Key: "p-c1-1"}, history.OK, &history.Value{ID: "A", Cancelled: ptr(true)})
			h.final(succeeded("A", "p-c1-1", 10, 1), succeeded("B", "p-c2-1", 12, 2))
		}, "Q8"},
		{"cancelled without a cancel", func(h *hb) {
			a := succeeded("A", "p-c1-1", 10, 1)
			a.Status, a.Output = "cancelled", ""
			h.final(a, succeeded("B", "p-c2-1", 12, 2))
		}, "Q8"},
		{"too many attempts", func(h *hb) {
			b := succeeded("B", "p-c2-1", 12, 2)
			b.Attempt, b.MaxAttempts = 5, 4
			h.final(succeeded("A", "p-c1-1", 10, 1), b)
		}, "Q9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.build(h)
			r := Queue(h.ops, Params{})
			require.Equal(t, Invalid, r.Valid)
			require.True(t, hasInvariant(r, tc.inv), "want %s, got %v: %+v", tc.inv, r.AnomalyCount, r.Anomalies)
		})
	}
}

// A completion re-sent after an unknown outcome is judged from its first
// sending: a grant between the two sendings does not make it stale.
func TestQueueRetriedCompletionCountsFromFirstSend(t *testing.T) {
	h := &hb{}
	h.submit("c1", "p-c1-1", "A")
	h.grant("w1", "A", "p-c1-1", 10, 1)
	v := &history.Value{Pool: q, ID: "A", Key: "p-c1-1", Token: 10, Outcome: "retryable"}
	h.call("w1/10", "complete", v, history.Info, nil)
	h.grant("w2", "A", "p-c1-1", 11, 2)
	h.call("w1/10", "complete", v, history.OK, nil)
	h.completeOK("w2", "A", "p-c1-1", 11, "success")
	h.final(succeeded("A", "p-c1-1", 11, 2))
	r := Queue(h.ops, Params{})
	require.Equal(t, Valid, r.Valid, "%+v", r.Anomalies)
}

func TestQueueUndrainedIsUnknown(t *testing.T) {
	h := &hb{}
	h.submit("c1", "p-c1-1", "A")
	h.grant("w1", "A", "p-c1-1", 10, 1)
	h.call("final", workload.DrainOp, &history.Value{Detail: "[q cron]"}, history.Info, nil)
	a := succeeded("A", "p-c1-1", 10, 1)
	a.Status, a.Output = "running", ""
	h.final(a)
	r := Queue(h.ops, Params{})
	require.Equal(t, Unknown, r.Valid, "%+v", r)
}

func ptr[T any](v T) *T { return &v }

// A grant issued before a task ended but read by its (paused) worker only
// afterwards is no anomaly: its token dates it.
func TestQueueLateReadGrantIsValid(t *testing.T) {
	h := &hb{}
	h.submit("c1", "p-c1-1", "A")
	h.submit("c2", "p-c2-1", "B")
	h.submit("c3", "p-c3-1", "C")
	h.submit("c4", "p-c4-1", "D")
	h.grant("w2", "B", "p-c2-1", 11, 1)
	h.grant("w2", "C", "p-c3-1", 13, 1)
	// w1 was paused with lease 10 of A in its socket; A was retried under
	// 12 and completed; C was cancelled while lease 14 waited for w1 too.
	h.grant("w3", "A", "p-c1-1", 12, 2)
	h.completeOK("w3", "A", "p-c1-1", 12, "success")
	h.completeOK("w2", "B", "p-c2-1", 11, "success")
	h.grant("w3", "C", "p-c3-1", 14, 2)
	h.grant("w2", "D", "p-c4-1", 15, 1) // another task's grant, read before the cancel
	h.completeOK("w2", "D", "p-c4-1", 15, "success")
	h.call("c4", "cancel", &history.Value{Pool: q, ID: "C", Key: "p-c3-1"}, history.OK, &history.Value{ID: "C", Cancelled: ptr(true)})
	h.grant("w1", "A", "p-c1-1", 10, 1)
	h.grant("w1", "C", "p-c3-1", 14, 2)
	c := succeeded("C", "p-c3-1", 0, 2)
	c.Status, c.Output = "cancelled", ""
	h.final(succeeded("A", "p-c1-1", 12, 2), succeeded("B", "p-c2-1", 11, 1), c, succeeded("D", "p-c4-1", 15, 1))
	r := Queue(h.ops, Params{})
	for _, a := range r.Anomalies {
		require.NotEqual(t, "Q6", a.Invariant, "%+v", a)
	}
	require.NotEqual(t, Invalid, r.Valid, "%+v", r.Anomalies)
}

// A grant that raced a cancel (issued while the cancel was in flight, read
// after its answer) is within the last lease the cancel answered; one
// above it was granted after the cancel took effect.
func TestQueueCancelAnswersTheLastLease(t *testing.T) {
	build := func(lastLease, granted uint64) *Result {
		h := &hb{}
		h.submit("c1", "p-c1-1", "A")
		h.grant("w2", "Z", "p-zz-1", 10, 1) // read before the cancel was sent
		h.invoke("c1", "cancel", &history.Value{Pool: q, ID: "A", Key: "p-c1-1"})
		h.complete("c1", "cancel", history.OK, &history.Value{ID: "A", Cancelled: ptr(true), LastLease: &lastLease})
		h.grant("w1", "A", "p-c1-1", granted, 1)
		a := succeeded("A", "p-c1-1", 0, 1)
		a.Status, a.Output = "cancelled", ""
		h.final(a, succeeded("Z", "p-zz-1", 10, 1))
		return Queue(h.ops, Params{})
	}
	q6 := func(r *Result) bool {
		for _, a := range r.Anomalies {
			if a.Invariant == "Q6" {
				return true
			}
		}
		return false
	}
	require.False(t, q6(build(11, 11)), "lease 11 was granted before the cancel took effect")
	require.True(t, q6(build(0, 11)), "the task had no lease when cancelled: lease 11 came after")
	require.True(t, q6(build(11, 12)), "lease 12 is above the last lease the cancel answered")
}
