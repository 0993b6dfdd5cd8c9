package checker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

const wfp = workload.WorkflowPool

func (h *hb) wfSubmit(key, id string, steps map[string]string) {
	h.call("c9", workload.WfSubmit, &history.Value{Pool: wfp, Key: key}, history.OK, &history.Value{Pool: wfp, Key: key, Workflow: id, Steps: steps})
}

func (h *hb) wfSubmitOutcome(key string, typ history.Type) {
	h.call("c9", workload.WfSubmit, &history.Value{Pool: wfp, Key: key}, typ, &history.Value{Pool: wfp, Key: key})
}

// wfGrant records a grant of task id (step of workflow wf); deps are
// id:step:status triples.
func (h *hb) wfGrant(w, id, wf, step string, tok uint64, attempt int, policy string, deps ...history.DepState) int64 {
	return h.add(w, history.OK, "grant", &history.Value{Pool: wfp, ID: id, Workflow: wf, Step: step, Token: tok, Attempt: attempt,
		Policy: policy, Deps: deps, Worker: w, Payload: workload.StepPayload("k", step, workload.ModeOK)})
}

type wfCompletion struct {
	id, wf, step string
	tok          uint64
	outcome      string
	children     []string
	then         string
}

func (c wfCompletion) value() *history.Value {
	v := &history.Value{Pool: wfp, ID: c.id, Workflow: c.wf, Step: c.step, Token: c.tok, Outcome: c.outcome, Children: c.children, Then: c.then}
	if c.outcome == "success" {
		v.Output = workload.ResultFor(workload.StepPayload("k", c.step, workload.ModeOK), c.tok)
	}
	return v
}

func (h *hb) wfComplete(w string, c wfCompletion, typ history.Type, code string) {
	h.call(w+"/c", "complete", c.value(), typ, &history.Value{Code: code})
}

func (h *hb) wfCancel(id string, typ history.Type, count int) {
	h.call("c10", workload.WfCancel, &history.Value{Pool: wfp, Workflow: id}, typ, &history.Value{Pool: wfp, Workflow: id, Count: count})
}

func dep(id, step, status string) history.DepState {
	return history.DepState{ID: id, Step: step, Status: status}
}

// member builds a final member: a success or failure names its lease.
func member(id, wf, step, status string, tok uint64, deps ...string) history.TaskState {
	t := history.TaskState{ID: id, Pool: wfp, Workflow: wf, Step: step, Status: status, DependsOn: deps, MaxAttempts: workload.WorkflowMaxAttempts}
	if len(deps) > 0 {
		t.Policy = "succeeded"
	}
	switch status {
	case "succeeded":
		t.Output = workload.ResultFor(workload.StepPayload("k", step, workload.ModeOK), tok)
	case "failed":
		t.Error = workload.ErrorFor(tok)
	}
	return t
}

func withPolicy(t history.TaskState, policy string) history.TaskState {
	t.Policy = policy
	return t
}

func withError(t history.TaskState, msg string) history.TaskState {
	t.Error = msg
	return t
}

func child(t history.TaskState, parent string) history.TaskState {
	t.Parent = parent
	return t
}

// wfWorld is a valid workflow history and its final state, for the tests
// to alter before the final read is recorded.
type wfWorld struct {
	h     *hb
	final []history.WorkflowState
	keys  map[string]string
}

func (w *wfWorld) wf(id string) *history.WorkflowState {
	for i := range w.final {
		if w.final[i].ID == id {
			return &w.final[i]
		}
	}
	return nil
}

func (w *wfWorld) member(wf, id string) *history.TaskState {
	ws := w.wf(wf)
	for i := range ws.Members {
		if ws.Members[i].ID == id {
			return &ws.Members[i]
		}
	}
	return nil
}

func (w *wfWorld) finish() []history.Op {
	w.h.call("final", workload.DrainOp, &history.Value{Detail: "[q cron wf]"}, history.OK, nil)
	w.h.call("final", workload.FinalWorkflows, &history.Value{Pool: wfp}, history.OK, &history.Value{Pool: wfp, Workflows: w.final, WorkflowKeys: w.keys})
	return w.h.ops
}

// cleanWorkflows: WA has a failing step, a cascade and a step under
// policy done; WB spawns children, once refused (stale) and once
// accepted; WC is cancelled while its first step runs; a fourth submit's
// outcome is unknown and it does not exist.
func cleanWorkflows() *wfWorld {
	h := &hb{}
	h.wfSubmit("k1", "WA", map[string]string{"s0": "A0", "s1": "A1", "s2": "A2", "s3": "A3"})
	h.wfSubmit("k2", "WB", map[string]string{"s0": "B0"})
	h.wfSubmit("k3", "WC", map[string]string{"s0": "C0", "s1": "C1"})
	h.wfSubmitOutcome("k4", history.Info)

	// WA: s0 succeeds; s1 (after s0) fails; s2 (after s0, policy done)
	// runs; s3 (after s1) is cancelled with its dependency.
	h.wfGrant("w5", "A0", "WA", "s0", 10, 1, "")
	h.wfComplete("w5", wfCompletion{id: "A0", wf: "WA", step: "s0", tok: 10, outcome: "success"}, history.OK, "")
	h.wfGrant("w5", "A1", "WA", "s1", 11, 1, "succeeded", dep("A0", "s0", "succeeded"))
	h.wfGrant("w6", "A2", "WA", "s2", 12, 1, "done", dep("A0", "s0", "succeeded"))
	h.wfComplete("w5", wfCompletion{id: "A1", wf: "WA", step: "s1", tok: 11, outcome: "permanent"}, history.OK, "")
	h.wfComplete("w6", wfCompletion{id: "A2", wf: "WA", step: "s2", tok: 12, outcome: "success"}, history.OK, "")

	// WB: the first attempt's spawn is refused (its lease is stale), the
	// second's accepted; the children and the continuation run.
	h.wfGrant("w5", "B0", "WB", "s0", 20, 1, "")
	h.wfGrant("w6", "B0", "WB", "s0", 21, 2, "")
	h.wfComplete("w5", wfCompletion{id: "B0", wf: "WB", step: "s0", tok: 20, outcome: "success",
		children: []string{"s0.20.a", "s0.20.b"}, then: "s0.20.then"}, history.Fail, "stale_lease")
	h.wfComplete("w6", wfCompletion{id: "B0", wf: "WB", step: "s0", tok: 21, outcome: "success",
		children: []string{"s0.21.a", "s0.21.b"}, then: "s0.21.then"}, history.OK, "")
	h.wfGrant("w5", "BA", "WB", "s0.21.a", 22, 1, "")
	h.wfGrant("w6", "BB", "WB", "s0.21.b", 23, 1, "")
	h.wfComplete("w5", wfCompletion{id: "BA", wf: "WB", step: "s0.21.a", tok: 22, outcome: "success"}, history.OK, "")
	h.wfComplete("w6", wfCompletion{id: "BB", wf: "WB", step: "s0.21.b", tok: 23, outcome: "success"}, history.OK, "")
	h.wfGrant("w5", "BT", "WB", "s0.21.then", 24, 1, "succeeded", dep("BA", "s0.21.a", "succeeded"), dep("BB", "s0.21.b", "succeeded"))
	h.wfComplete("w5", wfCompletion{id: "BT", wf: "WB", step: "s0.21.then", tok: 24, outcome: "success"}, history.OK, "")

	// WC: cancelled while s0 runs; its worker is told, and its late
	// completion refused.
	h.wfGrant("w6", "C0", "WC", "s0", 30, 1, "")
	h.wfCancel("WC", history.OK, 2)
	h.add("w6", history.OK, "abort", &history.Value{Pool: wfp, ID: "C0", Token: 30})
	h.wfComplete("w6", wfCompletion{id: "C0", wf: "WC", step: "s0", tok: 30, outcome: "success"}, history.Fail, "stale_lease")

	return &wfWorld{h: h, keys: map[string]string{"k1": "WA", "k2": "WB", "k3": "WC", "k4": ""}, final: []history.WorkflowState{
		{ID: "WA", Key: "k1", Status: "failed", Members: []history.TaskState{
			member("A0", "WA", "s0", "succeeded", 10),
			member("A1", "WA", "s1", "failed", 11, "A0"),
			withPolicy(member("A2", "WA", "s2", "succeeded", 12, "A0"), "done"),
			withError(member("A3", "WA", "s3", "cancelled", 0, "A1"), "dependency s1 failed"),
		}},
		{ID: "WB", Key: "k2", Status: "succeeded", Members: []history.TaskState{
			member("B0", "WB", "s0", "succeeded", 21),
			child(member("BA", "WB", "s0.21.a", "succeeded", 22), "B0"),
			child(member("BB", "WB", "s0.21.b", "succeeded", 23), "B0"),
			child(member("BT", "WB", "s0.21.then", "succeeded", 24, "BA", "BB"), "B0"),
		}},
		{ID: "WC", Key: "k3", Status: "cancelled", Members: []history.TaskState{
			withError(member("C0", "WC", "s0", "cancelled", 0), workload.MsgWorkflowCancelled),
			withError(member("C1", "WC", "s1", "cancelled", 0, "C0"), workload.MsgWorkflowCancelled),
		}},
	}}
}

func TestWorkflowCleanHistoryIsValid(t *testing.T) {
	r := Workflow(cleanWorkflows().finish(), Params{})
	require.Equal(t, Valid, r.Valid, "%+v", r.Anomalies)
	require.EqualValues(t, 4, r.Counts["attempted_keys"])
	require.EqualValues(t, 3, r.Counts["acked_keys"])
	require.EqualValues(t, 1, r.Counts["unknown_keys"])
	require.EqualValues(t, 1, r.Counts["spawns_accepted"])
	require.EqualValues(t, 1, r.Counts["spawns_refused"])
	require.EqualValues(t, 3, r.Counts["children"])
	require.EqualValues(t, 1, r.Counts["cancelled_by_dependency"])
	require.EqualValues(t, 1, r.Counts["final_failed"])
}

func TestWorkflowUnknownSubmitMayExist(t *testing.T) {
	w := cleanWorkflows()
	w.final = append(w.final, history.WorkflowState{ID: "WD", Key: "k4", Status: "succeeded", Members: []history.TaskState{member("D0", "WD", "s0", "succeeded", 40)}})
	w.keys["k4"] = "WD"
	w.h.wfGrant("w5", "D0", "WD", "s0", 40, 1, "")
	w.h.wfComplete("w5", wfCompletion{id: "D0", wf: "WD", step: "s0", tok: 40, outcome: "success"}, history.OK, "")
	r := Workflow(w.finish(), Params{})
	require.Equal(t, Valid, r.Valid, "%+v", r.Anomalies)
}

func TestWorkflowWithoutFinalReadIsUnknown(t *testing.T) {
	r := Workflow(cleanWorkflows().h.ops, Params{})
	require.Equal(t, Unknown, r.Valid)
}

func TestWorkflowAnomalies(t *testing.T) {
	tests := []struct {
		name  string
		alter func(w *wfWorld)
		inv   string
	}{
		{"granted while the grant reported a failed dependency", func(w *wfWorld) {
			w.h.wfGrant("w5", "A3", "WA", "s3", 13, 1, "succeeded", dep("A1", "s1", "failed"))
		}, "W1"},
		{"policy done granted while a dependency was live", func(w *wfWorld) {
			w.h.wfGrant("w5", "A2", "WA", "s2", 14, 2, "done", dep("A0", "s0", "running"))
		}, "W1"},
		{"granted although the dependency finally failed", func(w *wfWorld) {
			// The grant says s0 succeeded; the final state says it failed.
			m := w.member("WA", "A0")
			m.Status, m.Output, m.Error = "failed", "", workload.ErrorFor(10)
			w.h.wfGrant("w5", "A3", "WA", "s3", 13, 1, "succeeded", dep("A1", "s1", "succeeded"))
		}, "W1"},
		{"granted before the dependency's completion was sent", func(w *wfWorld) {
			w.h.wfSubmit("k5", "WE", map[string]string{"s0": "E0", "s1": "E1"})
			w.h.wfGrant("w5", "E0", "WE", "s0", 50, 1, "")
			w.h.wfGrant("w6", "E1", "WE", "s1", 51, 1, "succeeded", dep("E0", "s0", "succeeded"))
			w.h.wfComplete("w5", wfCompletion{id: "E0", wf: "WE", step: "s0", tok: 50, outcome: "success"}, history.OK, "")
			w.h.wfComplete("w6", wfCompletion{id: "E1", wf: "WE", step: "s1", tok: 51, outcome: "success"}, history.OK, "")
			w.final = append(w.final, history.WorkflowState{ID: "WE", Key: "k5", Status: "succeeded", Members: []history.TaskState{
				member("E0", "WE", "s0", "succeeded", 50), member("E1", "WE", "s1", "succeeded", 51, "E0"),
			}})
			w.keys["k5"] = "WE"
		}, "W1"},
		{"dependent of a failed step not cancelled", func(w *wfWorld) {
			m := w.member("WA", "A3")
			m.Status, m.Error = "blocked", ""
		}, "W2"},
		{"dependent of a failed step released and run", func(w *wfWorld) {
			w.h.wfGrant("w5", "A3", "WA", "s3", 13, 1, "succeeded", dep("A1", "s1", "failed"))
			w.h.wfComplete("w5", wfCompletion{id: "A3", wf: "WA", step: "s3", tok: 13, outcome: "success"}, history.OK, "")
			m := w.member("WA", "A3")
			*m = member("A3", "WA", "s3", "succeeded", 13, "A1")
		}, "W2"},
		{"completion accepted after the cancel was acknowledged", func(w *wfWorld) {
			w.h.wfComplete("w6", wfCompletion{id: "C0", wf: "WC", step: "s0", tok: 30, outcome: "success"}, history.OK, "")
		}, "W3"},
		{"member granted after the cancel was acknowledged", func(w *wfWorld) {
			w.h.wfGrant("w5", "C1", "WC", "s1", 31, 1, "succeeded", dep("C0", "s0", "succeeded"))
		}, "W3"},
		{"cancel ended members but the workflow did not end cancelled", func(w *wfWorld) {
			m := w.member("WC", "C0")
			m.Status, m.Error = "failed", workload.ErrorFor(30)
			m = w.member("WC", "C1")
			m.Error = "dependency s0 failed"
			w.wf("WC").Status = "failed"
		}, "W3"},
		{"ended by a workflow cancel nobody sent", func(w *wfWorld) {
			m := w.member("WA", "A3")
			m.Error = workload.MsgWorkflowCancelled
			w.wf("WA").Status = "cancelled"
		}, "W3"},
		{"stale-refused spawn left children", func(w *wfWorld) {
			ws := w.wf("WB")
			ws.Members = append(ws.Members, child(member("BX", "WB", "s0.20.a", "succeeded", 25), "B0"))
		}, "W4"},
		{"accepted spawn lost a child", func(w *wfWorld) {
			ws := w.wf("WB")
			ws.Members = []history.TaskState{ws.Members[0], ws.Members[1], ws.Members[3]}
		}, "W4"},
		{"continuation does not depend on every child", func(w *wfWorld) {
			w.member("WB", "BT").DependsOn = []string{"BA"}
		}, "W4"},
		{"children of a task that did not succeed with them", func(w *wfWorld) {
			m := w.member("WB", "B0")
			m.Output = workload.ResultFor(workload.StepPayload("k", "s0", workload.ModeOK), 20)
		}, "W4"},
		{"status that its members do not imply", func(w *wfWorld) {
			w.wf("WA").Status = "succeeded"
		}, "W5"},
		{"running after the drain", func(w *wfWorld) {
			w.wf("WA").Status = "running"
			w.member("WA", "A2").Status = "queued"
		}, "W5"},
		{"acknowledged workflow lost", func(w *wfWorld) {
			w.final = w.final[:2]
			w.keys["k3"] = ""
		}, "W6"},
		{"acknowledged member lost", func(w *wfWorld) {
			ws := w.wf("WA")
			ws.Members = ws.Members[:3]
		}, "W6"},
		{"key names two workflows", func(w *wfWorld) {
			w.final = append(w.final, history.WorkflowState{ID: "WA2", Key: "k1", Status: "succeeded", Members: []history.TaskState{member("Z0", "WA2", "s0", "succeeded", 60)}})
		}, "W6"},
		{"key acknowledged as another workflow", func(w *wfWorld) {
			w.h.wfSubmit("k1", "WA2", map[string]string{"s0": "Z0"})
		}, "W6"},
		{"workflow nobody submitted", func(w *wfWorld) {
			w.final = append(w.final, history.WorkflowState{ID: "WZ", Key: "nobody", Status: "succeeded", Members: []history.TaskState{member("Z1", "WZ", "s0", "succeeded", 61)}})
		}, "W6"},
		{"workflow from a definitely failed submit", func(w *wfWorld) {
			w.h.wfSubmitOutcome("k6", history.Fail)
			w.final = append(w.final, history.WorkflowState{ID: "WF", Key: "k6", Status: "succeeded", Members: []history.TaskState{member("F0", "WF", "s0", "succeeded", 62)}})
		}, "W6"},
		{"pool task outside every workflow", func(w *wfWorld) {
			w.h.final(history.TaskState{ID: "Y0", Pool: wfp, Status: "queued"})
		}, "W6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := cleanWorkflows()
			tt.alter(w)
			r := Workflow(w.finish(), Params{})
			require.Equal(t, Invalid, r.Valid)
			require.True(t, hasInvariant(r, tt.inv), "want %s, got %+v", tt.inv, r.Anomalies)
		})
	}
}

func TestDerivedWorkflowStatus(t *testing.T) {
	st := func(status, err string) history.TaskState { return history.TaskState{Status: status, Error: err} }
	tests := []struct {
		name    string
		members []history.TaskState
		want    string
	}{
		{"all succeeded", []history.TaskState{st("succeeded", ""), st("succeeded", "")}, "succeeded"},
		{"a member live", []history.TaskState{st("succeeded", ""), st("blocked", "")}, "running"},
		{"a member failed", []history.TaskState{st("failed", "e-1"), st("cancelled", "dependency s0 failed")}, "failed"},
		{"a member expired", []history.TaskState{st("expired", ""), st("succeeded", "")}, "failed"},
		{"a member cancelled, none failed", []history.TaskState{st("cancelled", "stopped"), st("succeeded", "")}, "cancelled"},
		{"cancelled as a whole after a failure", []history.TaskState{st("failed", "e-1"), st("cancelled", workload.MsgWorkflowCancelled)}, "cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, derivedStatus(tt.members))
		})
	}
}

func TestLeaseOf(t *testing.T) {
	require.EqualValues(t, 17, leaseOf(workload.ResultFor("x", 17)))
	require.EqualValues(t, 9, leaseOf(workload.ErrorFor(9)))
	require.EqualValues(t, 0, leaseOf("boom"))
	require.EqualValues(t, 0, leaseOf(""))
}

func TestWorkflowsEndedDuring(t *testing.T) {
	w := cleanWorkflows()
	ops := w.finish()
	// Every acknowledged end of the clean history is within its first
	// second.
	require.EqualValues(t, 3, WorkflowsEndedDuring(ops, 0, int64(1e9)))
	require.EqualValues(t, 0, WorkflowsEndedDuring(ops, int64(1e9), int64(2e9)))
}
