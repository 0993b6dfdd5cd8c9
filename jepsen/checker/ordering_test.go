package checker

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

const lp = workload.LanesPool

// ordHist is an ordering history under construction: tasks by id with
// their idempotency and ordering keys, and the final state to record.
type ordHist struct {
	h     *hb
	keys  map[string]string // id -> idempotency key
	okeys map[string]string // id -> ordering key
	final map[string]history.TaskState
	order []string
}

func newOrdHist() *ordHist {
	return &ordHist{h: &hb{}, keys: map[string]string{}, okeys: map[string]string{}, final: map[string]history.TaskState{}}
}

// submit records an acknowledged submit of ids (one task, or an atomic
// batch in this order) on lane okey.
func (o *ordHist) submit(p, okey string, ids ...string) {
	keys := o.note(okey, ids)
	o.h.call(p, workload.OrdSubmit, &history.Value{Pool: lp, OrderingKey: okey, Keys: keys}, history.OK,
		&history.Value{Pool: lp, OrderingKey: okey, Keys: keys, IDs: ids})
}

// submitUnknown records a submit of ids whose outcome is unknown.
func (o *ordHist) submitUnknown(p, okey string, ids ...string) {
	keys := o.note(okey, ids)
	o.h.call(p, workload.OrdSubmit, &history.Value{Pool: lp, OrderingKey: okey, Keys: keys}, history.Info,
		&history.Value{Pool: lp, OrderingKey: okey, Keys: keys})
}

// submitInvoke and submitAck split an acknowledged submit, so that other
// things happen in between.
func (o *ordHist) submitInvoke(p, okey string, ids ...string) {
	keys := o.note(okey, ids)
	o.h.invoke(p, workload.OrdSubmit, &history.Value{Pool: lp, OrderingKey: okey, Keys: keys})
}

func (o *ordHist) submitAck(p, okey string, ids ...string) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = o.keys[id]
	}
	o.h.complete(p, workload.OrdSubmit, history.OK, &history.Value{Pool: lp, OrderingKey: okey, Keys: keys, IDs: ids})
}

func (o *ordHist) note(okey string, ids []string) []string {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = "o-" + id
		o.keys[id], o.okeys[id] = keys[i], okey
		o.order = append(o.order, id)
	}
	return keys
}

func (o *ordHist) payload(id string) string { return workload.LanePayload(o.okeys[id], o.keys[id]) }

// grant records worker w reading lease tok (attempt) of task id.
func (o *ordHist) grant(w, id string, tok uint64, attempt int) {
	o.h.add(w, history.OK, "grant", &history.Value{Pool: lp, ID: id, Key: o.keys[id], Payload: o.payload(id), Token: tok, Attempt: attempt,
		Worker: w, OrderingKey: o.okeys[id]})
}

func (o *ordHist) compValue(id string, tok uint64, outcome string) *history.Value {
	v := &history.Value{Pool: lp, ID: id, Key: o.keys[id], Token: tok, Outcome: outcome, OrderingKey: o.okeys[id]}
	if outcome == "success" {
		v.Output = workload.ResultFor(o.payload(id), tok)
	}
	return v
}

func proc(w string, tok uint64) string { return w + "/" + strconv.FormatUint(tok, 10) }

// send records the sending of a completion; ack its answer.
func (o *ordHist) send(w, id string, tok uint64, outcome string) {
	o.h.invoke(proc(w, tok), "complete", o.compValue(id, tok, outcome))
}

func (o *ordHist) ack(w string, tok uint64, typ history.Type, code string) {
	o.h.complete(proc(w, tok), "complete", typ, &history.Value{Code: code})
}

// done records a completion sent and answered at once.
func (o *ordHist) done(w, id string, tok uint64, outcome string, typ history.Type, code string) {
	o.send(w, id, tok, outcome)
	o.ack(w, tok, typ, code)
}

// end sets a task's final state: a success or failure names its lease.
func (o *ordHist) end(id, status string, tok uint64, attempts int) {
	t := history.TaskState{ID: id, Pool: lp, Key: o.keys[id], Status: status, Attempt: attempts, MaxAttempts: workload.LanesMaxAttempts,
		Payload: o.payload(id), OrderingKey: o.okeys[id]}
	switch status {
	case "succeeded":
		t.Output = workload.ResultFor(o.payload(id), tok)
	case "failed":
		t.Error = workload.ErrorFor(tok)
	}
	o.final[id] = t
}

func (o *ordHist) finish() []history.Op {
	o.h.call("final", workload.DrainOp, &history.Value{Detail: "[q cron wf lanes]"}, history.OK, nil)
	var tasks []history.TaskState
	for _, id := range o.order {
		if t, ok := o.final[id]; ok {
			tasks = append(tasks, t)
		}
	}
	o.h.final(tasks...)
	return o.h.ops
}

// cleanLanes: a batch A, B, C on lane-0 and a task D on lane-1. A fails
// once retryably and keeps its place; B fails for good and C still runs
// after it; D runs beside A (another lane).
func cleanLanes() *ordHist {
	o := newOrdHist()
	o.submit("c11", "lane-0", "A", "B", "C")
	o.submit("c12", "lane-1", "D")
	o.grant("w7", "A", 10, 1)
	o.grant("w8", "D", 11, 1)
	o.done("w7", "A", 10, "retryable", history.OK, "")
	o.grant("w8", "A", 12, 2)
	o.done("w8", "D", 11, "success", history.OK, "")
	o.done("w8", "A", 12, "success", history.OK, "")
	o.grant("w7", "B", 13, 1)
	o.done("w7", "B", 13, "permanent", history.OK, "")
	o.grant("w8", "C", 14, 1)
	o.done("w8", "C", 14, "success", history.OK, "")
	o.end("A", "succeeded", 12, 2)
	o.end("B", "failed", 13, 1)
	o.end("C", "succeeded", 14, 1)
	o.end("D", "succeeded", 11, 1)
	return o
}

func TestOrderingCleanHistoryIsValid(t *testing.T) {
	r := Ordering(cleanLanes().finish(), Params{})
	require.Equal(t, Valid, r.Valid, "%+v", r.Anomalies)
	require.EqualValues(t, 2, r.Counts["lanes"])
	require.EqualValues(t, 4, r.Counts["tasks"])
	require.EqualValues(t, 4, r.Counts["acked_tasks"])
	require.EqualValues(t, 1, r.Counts["batches"])
	require.EqualValues(t, 5, r.Counts["attempts"])
	require.EqualValues(t, 1, r.Counts["retried_tasks"])
	require.EqualValues(t, 1, r.Counts["max_concurrent_per_key"])
	require.EqualValues(t, 2, r.Counts["waited_in_lane"], "B and C waited behind A")
	require.EqualValues(t, 2, r.Counts["max_lane_depth"])
	require.EqualValues(t, 3, r.Counts["ordered_pairs"])
}

func TestOrderingWithoutFinalReadIsUnknown(t *testing.T) {
	r := Ordering(cleanLanes().h.ops, Params{})
	require.Equal(t, Unknown, r.Valid)
}

// Faults that a correct cluster may show, and the checker must accept.
func TestOrderingFaultCasesAreValid(t *testing.T) {
	tests := []struct {
		name  string
		build func() *ordHist
	}{
		{"a stale attempt runs beside its task's retry and the next task", func() *ordHist {
			// w7 is paused holding A's first lease; it expires, A is
			// granted again to w8, succeeds, B runs, and only then does
			// w7 send its completion, refused.
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.grant("w8", "A", 12, 2)
			o.done("w8", "A", 12, "success", history.OK, "")
			o.grant("w8", "B", 13, 1)
			o.done("w7", "A", 10, "success", history.Fail, "stale_lease")
			o.done("w8", "B", 13, "success", history.OK, "")
			o.end("A", "succeeded", 12, 2)
			o.end("B", "succeeded", 13, 1)
			return o
		}},
		{"a head out of attempts by lease expiry lets the next run while its worker still holds it", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 4)
			o.grant("w8", "B", 11, 1)
			o.done("w8", "B", 11, "success", history.OK, "")
			o.done("w7", "A", 10, "success", history.Fail, "stale_lease")
			o.end("A", "failed", 0, 4)
			o.final["A"] = withErr(o.final["A"], "lease expired")
			o.end("B", "succeeded", 11, 1)
			return o
		}},
		{"a completion whose outcome is unknown and that did not win", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.send("w7", "A", 10, "success")
			o.grant("w8", "A", 12, 2)
			o.done("w8", "A", 12, "success", history.OK, "")
			o.grant("w8", "B", 13, 1)
			o.ack("w7", 10, history.Info, "")
			o.done("w8", "B", 13, "success", history.OK, "")
			o.end("A", "succeeded", 12, 2)
			o.end("B", "succeeded", 13, 1)
			return o
		}},
		{"a paused worker reads its grant after the next task ran", func() *ordHist {
			// Grants are dated by their tokens, not by when they were
			// read: A's first lease (10) was read last.
			o := newOrdHist()
			o.submit("c11", "lane-0", "A")
			o.submit("c11", "lane-0", "B")
			o.grant("w8", "A", 12, 2)
			o.done("w8", "A", 12, "success", history.OK, "")
			o.grant("w8", "B", 13, 1)
			o.done("w8", "B", 13, "success", history.OK, "")
			o.grant("w7", "A", 10, 1)
			o.done("w7", "A", 10, "success", history.Fail, "stale_lease")
			o.end("A", "succeeded", 12, 2)
			o.end("B", "succeeded", 13, 1)
			return o
		}},
		{"a completion re-sent after an unknown outcome counts from its first sending", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.done("w7", "A", 10, "success", history.Info, "")
			o.grant("w8", "B", 11, 1)
			o.done("w7", "A", 10, "success", history.Fail, "stale_lease")
			o.done("w8", "B", 11, "success", history.OK, "")
			o.end("A", "succeeded", 10, 1)
			o.end("B", "succeeded", 11, 1)
			return o
		}},
		{"an accepted completion under a lease superseded before it was sent proves nothing", func() *ordHist {
			// (A fencing fault, the queue checker's business.)
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.grant("w8", "A", 12, 2)
			o.grant("w8", "B", 13, 1)
			o.done("w7", "A", 10, "success", history.OK, "")
			o.done("w8", "A", 12, "success", history.Fail, "stale_lease")
			o.done("w8", "B", 13, "success", history.OK, "")
			o.end("A", "succeeded", 10, 2)
			o.end("B", "succeeded", 13, 1)
			return o
		}},
		{"submits that overlap are not ordered", func() *ordHist {
			o := newOrdHist()
			o.submitInvoke("c12", "lane-0", "B")
			o.submit("c11", "lane-0", "A")
			o.submitAck("c12", "lane-0", "B")
			o.grant("w8", "B", 10, 1)
			o.done("w8", "B", 10, "success", history.OK, "")
			o.grant("w7", "A", 11, 1)
			o.done("w7", "A", 11, "success", history.OK, "")
			o.end("A", "succeeded", 11, 1)
			o.end("B", "succeeded", 10, 1)
			return o
		}},
		{"a task from an unknown submit runs in its place", func() *ordHist {
			o := newOrdHist()
			o.submitUnknown("c12", "lane-0", "A")
			o.submit("c11", "lane-0", "B")
			o.grant("w7", "A", 10, 1)
			o.done("w7", "A", 10, "success", history.OK, "")
			o.grant("w8", "B", 11, 1)
			o.done("w8", "B", 11, "success", history.OK, "")
			o.end("A", "succeeded", 10, 1)
			o.end("B", "succeeded", 11, 1)
			return o
		}},
		{"different lanes run at once", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A")
			o.submit("c11", "lane-1", "B")
			o.grant("w7", "A", 10, 1)
			o.grant("w8", "B", 11, 1)
			o.done("w7", "A", 10, "success", history.OK, "")
			o.done("w8", "B", 11, "success", history.OK, "")
			o.end("A", "succeeded", 10, 1)
			o.end("B", "succeeded", 11, 1)
			return o
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Ordering(tt.build().finish(), Params{})
			require.Equal(t, Valid, r.Valid, "%+v", r.Anomalies)
		})
	}
}

func withErr(t history.TaskState, msg string) history.TaskState {
	t.Error = msg
	return t
}

func TestOrderingAnomalies(t *testing.T) {
	tests := []struct {
		name  string
		build func() *ordHist
		inv   string
	}{
		{"the next task of the lane granted while the head runs", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.grant("w8", "B", 11, 1)
			o.done("w7", "A", 10, "success", history.OK, "")
			o.done("w8", "B", 11, "success", history.OK, "")
			o.end("A", "succeeded", 10, 1)
			o.end("B", "succeeded", 11, 1)
			return o
		}, "O1"},
		{"granted while the head runs, its own completion refused later", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.grant("w8", "B", 11, 1)
			o.done("w7", "A", 10, "success", history.OK, "")
			o.done("w8", "B", 11, "success", history.Fail, "stale_lease")
			o.end("A", "succeeded", 10, 1)
			o.end("B", "succeeded", 0, 1)
			return o
		}, "O1"},
		{"granted while the head runs, whose completion the final read shows won", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.grant("w8", "B", 11, 1)
			o.done("w7", "A", 10, "success", history.Info, "")
			o.done("w8", "B", 11, "success", history.OK, "")
			o.end("A", "succeeded", 10, 1)
			o.end("B", "succeeded", 11, 1)
			return o
		}, "O1"},
		{"a later task started before the earlier one", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A")
			o.submit("c11", "lane-0", "B")
			o.grant("w8", "B", 10, 1)
			o.done("w8", "B", 10, "success", history.OK, "")
			o.grant("w7", "A", 11, 1)
			o.done("w7", "A", 11, "success", history.OK, "")
			o.end("A", "succeeded", 11, 1)
			o.end("B", "succeeded", 10, 1)
			return o
		}, "O2"},
		{"the second task of a batch started before the first", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w8", "B", 10, 1)
			o.done("w8", "B", 10, "success", history.OK, "")
			o.grant("w7", "A", 11, 1)
			o.done("w7", "A", 11, "success", history.OK, "")
			o.end("A", "succeeded", 11, 1)
			o.end("B", "succeeded", 10, 1)
			return o
		}, "O2"},
		{"the next task ran while the head waited for its retry", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w7", "A", 10, 1)
			o.done("w7", "A", 10, "retryable", history.OK, "")
			o.grant("w8", "B", 11, 1)
			o.done("w8", "B", 11, "success", history.OK, "")
			o.grant("w7", "A", 12, 2)
			o.done("w7", "A", 12, "success", history.OK, "")
			o.end("A", "succeeded", 12, 2)
			o.end("B", "succeeded", 11, 1)
			return o
		}, "O2"},
		{"the next task ran while the head never did", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "A", "B")
			o.grant("w8", "B", 10, 1)
			o.done("w8", "B", 10, "success", history.OK, "")
			o.end("A", "queued", 0, 0)
			o.end("B", "succeeded", 10, 1)
			return o
		}, "O2"},
		{"an acknowledged task is lost", func() *ordHist {
			o := cleanLanes()
			delete(o.final, "C")
			return o
		}, "O3"},
		{"a batch's ids do not follow its order", func() *ordHist {
			o := newOrdHist()
			o.submit("c11", "lane-0", "B", "A")
			o.grant("w7", "B", 10, 1)
			o.done("w7", "B", 10, "success", history.OK, "")
			o.grant("w7", "A", 11, 1)
			o.done("w7", "A", 11, "success", history.OK, "")
			o.end("A", "succeeded", 11, 1)
			o.end("B", "succeeded", 10, 1)
			return o
		}, "O3"},
		{"a task has another ordering key than submitted", func() *ordHist {
			o := cleanLanes()
			c := o.final["C"]
			c.OrderingKey = "lane-5"
			o.final["C"] = c
			return o
		}, "O3"},
		{"a task is live after the pool drained", func() *ordHist {
			o := cleanLanes()
			c := o.final["D"]
			c.Status, c.Output = "queued", ""
			o.final["D"] = c
			return o
		}, "O3"},
		{"a task nobody submitted", func() *ordHist {
			o := cleanLanes()
			o.final["Z"] = history.TaskState{ID: "Z", Pool: lp, Key: "nobody", Status: "succeeded", OrderingKey: "lane-0"}
			o.order = append(o.order, "Z")
			return o
		}, "O3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Ordering(tt.build().finish(), Params{})
			require.Equal(t, Invalid, r.Valid)
			require.True(t, hasInvariant(r, tt.inv), "want %s, got %+v", tt.inv, r.Anomalies)
		})
	}
}

// Two tasks of a lane that overlap make the concurrency count 2.
func TestOrderingMaxConcurrent(t *testing.T) {
	o := newOrdHist()
	o.submit("c11", "lane-0", "A", "B")
	o.grant("w7", "A", 10, 1)
	o.grant("w8", "B", 11, 1)
	o.done("w7", "A", 10, "success", history.OK, "")
	o.done("w8", "B", 11, "success", history.OK, "")
	o.end("A", "succeeded", 10, 1)
	o.end("B", "succeeded", 11, 1)
	r := Ordering(o.finish(), Params{})
	require.EqualValues(t, 2, r.Counts["max_concurrent_per_key"])
	require.EqualValues(t, 1, r.AnomalyCount["O1"])
}

func TestLaneWaitsDuring(t *testing.T) {
	ops := cleanLanes().finish()
	require.EqualValues(t, 2, LaneWaitsDuring(ops, 0, int64(1e9)))
	require.EqualValues(t, 0, LaneWaitsDuring(ops, int64(1e9), int64(2e9)))
}

// The tasks of the lanes pool are the ordering checker's: the queue
// checker does not call them unexpected.
func TestQueueLeavesTheLanesPool(t *testing.T) {
	r := Queue(cleanLanes().finish(), Params{})
	require.False(t, hasInvariant(r, "Q2"), "%+v", r.Anomalies)
}
