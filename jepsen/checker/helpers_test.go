package checker

import (
	"time"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// hb builds synthetic histories: every entry is 1ms after the previous.
type hb struct {
	ops []history.Op
	t   int64
}

func (h *hb) add(p string, typ history.Type, f string, v *history.Value) int64 {
	h.t += int64(time.Millisecond)
	i := int64(len(h.ops))
	h.ops = append(h.ops, history.Op{Index: i, Time: h.t, Process: p, Type: typ, F: f, Value: v})
	return i
}

// call records an invocation and its completion.
func (h *hb) call(p, f string, in *history.Value, typ history.Type, out *history.Value) {
	h.add(p, history.Invoke, f, in)
	h.add(p, typ, f, out)
}

// invoke and complete split a call, for concurrency.
func (h *hb) invoke(p, f string, in *history.Value) { h.add(p, history.Invoke, f, in) }
func (h *hb) complete(p, f string, typ history.Type, out *history.Value) {
	h.add(p, typ, f, out)
}

const q = workload.QueuePool

func (h *hb) submit(p, key, id string) {
	h.call(p, "submit", &history.Value{Pool: q, Key: key, Payload: key}, history.OK, &history.Value{Key: key, ID: id})
}

func (h *hb) grant(w, id, key string, tok uint64, attempt int) {
	h.add(w, history.OK, "grant", &history.Value{Pool: q, ID: id, Key: key, Payload: key, Token: tok, Attempt: attempt, Worker: w})
}

func (h *hb) completeOK(w, id, key string, tok uint64, outcome string) {
	v := &history.Value{Pool: q, ID: id, Key: key, Token: tok, Outcome: outcome}
	if outcome == "success" {
		v.Output = workload.ResultFor(key, tok)
	}
	h.call(w+"/x", "complete", v, history.OK, nil)
}

func (h *hb) completeStale(w, id, key string, tok uint64) {
	v := &history.Value{Pool: q, ID: id, Key: key, Token: tok, Outcome: "success", Output: workload.ResultFor(key, tok)}
	h.call(w+"/x", "complete", v, history.Fail, &history.Value{Code: "stale_lease"})
}

func (h *hb) final(tasks ...history.TaskState) {
	h.call("final", workload.FinalTasks, nil, history.OK, &history.Value{Tasks: tasks})
}

func succeeded(id, key string, tok uint64, attempt int) history.TaskState {
	return history.TaskState{ID: id, Pool: q, Key: key, Status: "succeeded", Attempt: attempt, MaxAttempts: 4, Payload: key, Output: workload.ResultFor(key, tok)}
}

func hasInvariant(r *Result, inv string) bool {
	return r.AnomalyCount[inv] > 0
}
