package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tests of log format 3: task dependencies, the blocked status and
// workflows.

// checkIndexes requires the derived indexes of v to agree with its
// records, rebuilt from scratch: the task keys, the workflow keys and the
// members of each workflow; and the workflow of every member to exist.
func checkIndexes(t testing.TB, v *View) {
	t.Helper()
	tb := v.t
	var keys, wantKeys, wfKeys, wantWfKeys []keyItem
	var members, wantMembers []memberItem
	tb.tasks.Ascend(func(r *Task) bool {
		if r.Key != "" {
			wantKeys = append(wantKeys, keyItem{key: r.Key, id: r.ID})
		}
		if r.Workflow() != "" {
			wantMembers = append(wantMembers, memberItem{wf: r.Workflow(), id: r.ID})
			require.True(t, tb.wfs.Has(wfItem{id: r.Workflow()}), "task %q: workflow %q does not exist", r.ID, r.Workflow())
		}
		return true
	})
	tb.wfs.Ascend(func(it wfItem) bool {
		require.Equal(t, it.id, it.w.ID)
		if it.w.Key != "" {
			wantWfKeys = append(wantWfKeys, keyItem{key: it.w.Key, id: it.id})
		}
		return true
	})
	tb.keys.Ascend(func(k keyItem) bool { keys = append(keys, k); return true })
	tb.wfKeys.Ascend(func(k keyItem) bool { wfKeys = append(wfKeys, k); return true })
	tb.members.Ascend(func(mi memberItem) bool { members = append(members, mi); return true })
	slices.SortFunc(wantKeys, func(a, b keyItem) int { return strings.Compare(a.key, b.key) })
	slices.SortFunc(wantWfKeys, func(a, b keyItem) int { return strings.Compare(a.key, b.key) })
	slices.SortFunc(wantMembers, func(a, b memberItem) int {
		if c := strings.Compare(a.wf, b.wf); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	require.Equal(t, wantKeys, keys, "task keys")
	require.Equal(t, wantWfKeys, wfKeys, "workflow keys")
	require.Equal(t, wantMembers, members, "members")

	// The events held by subscriptions: their subscription exists, they
	// follow its cursor, and the task index and counts agree with them.
	var held, wantHeld []heldItem
	counts := map[string]int{}
	tb.subEvs.Ascend(func(it subEvItem) bool {
		sub, ok := tb.subscription(it.sub)
		require.True(t, ok, "event %d of subscription %q: no such subscription", it.cursor, it.sub)
		require.Greater(t, it.cursor, sub.Acked)
		require.Equal(t, it.cursor, it.ev.Cursor)
		wantHeld = append(wantHeld, heldItem{task: it.ev.TaskID, sub: it.sub, cursor: it.cursor})
		counts[it.sub]++
		return true
	})
	tb.subHeld.Ascend(func(it heldItem) bool { held = append(held, it); return true })
	slices.SortFunc(wantHeld, func(a, b heldItem) int {
		switch {
		case lessHeld(a, b):
			return -1
		case lessHeld(b, a):
			return 1
		}
		return 0
	})
	require.Equal(t, wantHeld, held, "events held by task")
	require.Equal(t, counts, tb.subCount, "events held by subscription")
}

// indexDump lists every item of every tree of v's tables but the pools,
// which recount checks: two dumps are equal when the tables hold the same
// records and index them alike.
func indexDump(v *View) string {
	var b strings.Builder
	tb := v.t
	tb.tasks.Ascend(func(r *Task) bool { fmt.Fprintf(&b, "task %q %p\n", r.ID, r); return true })
	tb.keys.Ascend(func(k keyItem) bool { fmt.Fprintf(&b, "key %q %q\n", k.key, k.id); return true })
	tb.scheds.Ascend(func(it schedItem) bool { fmt.Fprintf(&b, "sched %q %p\n", it.name, it.s); return true })
	tb.tombs.Ascend(func(tomb Tombstone) bool { fmt.Fprintf(&b, "tomb %+v\n", tomb); return true })
	tb.wfs.Ascend(func(it wfItem) bool { fmt.Fprintf(&b, "wf %q %p\n", it.id, it.w); return true })
	tb.wfKeys.Ascend(func(k keyItem) bool { fmt.Fprintf(&b, "wfkey %q %q\n", k.key, k.id); return true })
	tb.members.Ascend(func(mi memberItem) bool { fmt.Fprintf(&b, "member %q %q\n", mi.wf, mi.id); return true })
	tb.subs.Ascend(func(it subItem) bool { fmt.Fprintf(&b, "sub %q %p\n", it.name, it.s); return true })
	tb.subEvs.Ascend(func(it subEvItem) bool { fmt.Fprintf(&b, "subev %q %d %p\n", it.sub, it.cursor, it.ev); return true })
	tb.subHeld.Ascend(func(it heldItem) bool { fmt.Fprintf(&b, "held %+v\n", it); return true })
	fmt.Fprintf(&b, "subcount %v\n", tb.subCount)
	return b.String()
}

// workflowState returns a state with workflows in every status, members in
// every live status and some terminal ones (blocked ones too), tasks
// spawned by members, external tasks, a task that joined a workflow as it
// ended, and a schedule that fires workflows, next to records of the
// earlier formats.
func workflowState(t testing.TB) *State {
	h := newHarness(t)
	wfID := func(i int) string { return fmt.Sprintf("wf%02d", i) }
	var ms []Mutation
	for w := 0; w < 8; w++ {
		key := ""
		if w%2 == 0 {
			key = fmt.Sprintf("wkey%d", w)
		}
		ms = append(ms, putWorkflow(wfID(w), key))
	}
	for i := 0; i < 60; i++ {
		id, wf := taskID(i), wfID(i%8)
		var m Mutation
		switch i % 5 {
		case 0: // outside workflows
			m = insert(id, fmt.Sprintf("pool%d", i%3), fmt.Sprintf("key%d", i))
		case 1:
			m = insertInto(id, fmt.Sprintf("key%d", i), wf)
		case 2:
			m = insertBlocked(id, "p", taskID(i-1), taskID(i-2))
			m.Insert.MakeFlow().Workflow, m.Insert.MakeFlow().Step = wf, "step"
			m.Insert.MakeFlow().DepPolicy = DepPolicy(i % 2)
		case 3: // spawned by the task before, outside workflows
			m = insert(id, "q", "")
			m.Insert.MakeFlow().Parent, m.Insert.MakeFlow().External = taskID(i-1), true
		case 4:
			m = insertInto(id, "", wf)
			m.Insert.Status, m.Insert.RunAt = StatusScheduled, baseTime+1e12
		}
		ms = append(ms, m)
	}
	h.ok(ms...)

	// Workflows 4 to 7 end, in every terminal status, once their members
	// did. Task 0 joins workflow 3 as it ends; a blocked member of workflow
	// 2 is released; a member of workflow 1 runs and succeeds.
	ms = ms[:0]
	ends := []WorkflowStatus{WorkflowSucceeded, WorkflowFailed, WorkflowCancelled, WorkflowCancelled}
	for w := 4; w < 8; w++ {
		h.s.View().EachTask(func(task *Task) bool {
			if task.Workflow() == wfID(w) {
				ms = append(ms, finish(task.ID, 0, StatusCancelled))
			}
			return true
		})
		ms = append(ms, endWorkflow(wfID(w), ends[w-4]))
	}
	ms = append(ms, finishInto(taskID(0), 0, StatusSucceeded, wfID(3)),
		unblock(taskID(2), 0), start(taskID(1), 1, l1), finish(taskID(1), l1, StatusSucceeded))
	// A workflow that ended and was purged with its members.
	ms = append(ms, putWorkflow("gone", "k-gone"), insertInto("gone-task", "k-gone-task", "gone"),
		finish("gone-task", 0, StatusCancelled), endWorkflow("gone", WorkflowCancelled), purgeWorkflow("gone"))
	// A schedule that fires workflows, one of format 2 and a tombstone.
	ms = append(ms, Mutation{PutSchedule: goldenV3Schedule()}, fireWorkflow("flow", baseTime+1e15, wfID(0)),
		Mutation{PutSchedule: backoffSchedule("b")}, tombstone("n2", false))
	h.ok(ms...)
	return h.s
}

// TestWorkflowPreconditions holds each mutation of log format 3, and each
// mutation that format 3 extended, to its preconditions and effects.
func TestWorkflowPreconditions(t *testing.T) {
	const (
		a     = "a"     // queued, key "ka"
		don   = "don"   // succeeded
		run   = "run"   // running under l1
		blk   = "blk"   // blocked on a, no run time
		later = "later" // blocked on a and don, to run at baseTime+1e12
		w     = "w"     // running, key "kw": m1 queued, m2 succeeded
		ended = "ended" // cancelled, key "kended": e1 cancelled (key "ke1")
		empty = "empty" // running, no members, no key
	)
	laterAt := baseTime + 1e12
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		lb := insertBlocked(later, "p", a, don)
		lb.Insert.RunAt = laterAt
		h.ok(
			insert(a, "p", "ka"), insert(don, "p", ""), start(don, 1, lease(1, 3)), finish(don, lease(1, 3), StatusSucceeded),
			insert(run, "p", ""), start(run, 1, l1),
			insertBlocked(blk, "p", a), lb,
			putWorkflow(w, "kw"), insertInto("m1", "km1", w), insertInto("m2", "", w),
			start("m2", 1, lease(1, 5)), finish("m2", lease(1, 5), StatusSucceeded),
			putWorkflow(ended, "kended"), insertInto("e1", "ke1", ended), finish("e1", 0, StatusCancelled),
			endWorkflow(ended, WorkflowCancelled),
			putWorkflow(empty, ""),
			putSchedule("s"),
		)
		return h
	}
	with := func(m Mutation, change func(*Task)) Mutation { change(m.Insert); return m }
	members := func(t *testing.T, h *harness, wf string, want ...string) {
		t.Helper()
		ids := []string{}
		for _, task := range h.s.WorkflowTasks(wf) {
			ids = append(ids, task.ID)
		}
		require.Equal(t, want, ids, "members of %s", wf)
	}
	tests := []struct {
		name  string
		ms    []Mutation
		ok    bool
		why   string                         // for a rejection, a part of the reason
		check func(t *testing.T, h *harness) // after an accepted batch
	}{
		// Insert of a blocked task, dependencies, workflow and parent.
		{"insert blocked", []Mutation{insertBlocked("new", "p", a, don)}, true, "", func(t *testing.T, h *harness) {
			task := h.task("new")
			require.Equal(t, StatusBlocked, task.Status)
			require.Equal(t, []string{a, don}, task.DependsOn())
			require.Equal(t, h.index, task.CreateIndex)
			require.True(t, task.Status.Pending())
			require.Equal(t, []string{blk, later, "new"}, listIDs(h.s, ListQuery{Statuses: []Status{StatusBlocked}}))
		}},
		{"insert blocked on a task of the same batch", []Mutation{insert("x", "p", ""), insertBlocked("new", "p", "x")}, true, "", nil},
		{"insert blocked on a blocked task", []Mutation{insertBlocked("new", "p", blk)}, true, "", nil},
		{"insert blocked with the policy done", []Mutation{with(insertBlocked("new", "p", a), func(t *Task) { t.MakeFlow().DepPolicy = DepDone })}, true, "", func(t *testing.T, h *harness) {
			require.Equal(t, DepDone, h.task("new").DepPolicy())
		}},
		{"insert blocked without dependencies", []Mutation{insertBlocked("new", "p")}, false, "blocked without dependencies", nil},
		{"insert blocked on itself", []Mutation{insertBlocked("new", "p", "new")}, false, "dependency new does not exist", nil},
		{"insert blocked on another and itself", []Mutation{insertBlocked("new", "p", a, "new")}, false, "dependency new does not exist", nil},
		{"insert blocked on a missing task", []Mutation{insertBlocked("new", "p", a, "nope")}, false, "dependency nope does not exist", nil},
		{"insert queued with dependencies", []Mutation{with(insert("new", "p", ""), func(t *Task) { t.MakeFlow().DependsOn = []string{a} })}, true, "", func(t *testing.T, h *harness) {
			require.Equal(t, StatusQueued, h.task("new").Status)
		}},
		{"insert queued with a missing dependency", []Mutation{with(insert("new", "p", ""), func(t *Task) { t.MakeFlow().DependsOn = []string{"nope"} })}, false, "dependency nope does not exist", nil},
		{"insert into a running workflow", []Mutation{insertInto("new", "knew", w)}, true, "", func(t *testing.T, h *harness) {
			task := h.task("new")
			require.Equal(t, w, task.Workflow())
			require.Equal(t, "step-new", task.Step())
			members(t, h, w, "m1", "m2", "new")
		}},
		{"insert blocked into a running workflow", []Mutation{with(insertBlocked("new", "p", "m1"), func(t *Task) { t.MakeFlow().Workflow = w })}, true, "", func(t *testing.T, h *harness) {
			members(t, h, w, "m1", "m2", "new")
		}},
		{"insert into a workflow of the same batch", []Mutation{putWorkflow("w2", ""), insertInto("new", "", "w2")}, true, "", func(t *testing.T, h *harness) {
			members(t, h, "w2", "new")
		}},
		{"insert into a missing workflow", []Mutation{insertInto("new", "", "nope")}, false, "no such workflow", nil},
		{"insert into an ended workflow", []Mutation{insertInto("new", "", ended)}, false, "workflow is cancelled, want running", nil},
		{"insert into a workflow ending in the same batch", []Mutation{endWorkflow(empty, WorkflowSucceeded), insertInto("new", "", empty)}, false, "want running", nil},
		{"insert with a parent", []Mutation{with(insert("new", "p", ""), func(t *Task) { t.MakeFlow().Parent, t.MakeFlow().External = don, true })}, true, "", func(t *testing.T, h *harness) {
			task := h.task("new")
			require.Equal(t, don, task.Parent())
			require.True(t, task.External())
		}},
		{"insert with a missing parent", []Mutation{with(insert("new", "p", ""), func(t *Task) { t.MakeFlow().Parent = "nope" })}, false, "parent nope does not exist", nil},
		{"insert with itself as parent", []Mutation{with(insert("new", "p", ""), func(t *Task) { t.MakeFlow().Parent = "new" })}, false, "parent new does not exist", nil},
		{"insert blocked with a key in use", []Mutation{with(insertBlocked("new", "p", a), func(t *Task) { t.Key = "ka" })}, false, "in use", nil},
		// Unblock
		{"unblock", []Mutation{unblock(blk, baseTime+6)}, true, "", func(t *testing.T, h *harness) {
			task := h.task(blk)
			require.Equal(t, StatusQueued, task.Status)
			require.Equal(t, baseTime+6, task.UpdatedAt)
			require.Equal(t, h.index, task.ModifyIndex)
			require.Equal(t, []string{a}, task.DependsOn(), "kept")
		}},
		{"unblock before the run time", []Mutation{unblock(later, laterAt-1)}, true, "", func(t *testing.T, h *harness) {
			task := h.task(later)
			require.Equal(t, StatusScheduled, task.Status)
			require.Equal(t, laterAt, task.RunAt)
			require.Equal(t, laterAt-1, task.UpdatedAt)
		}},
		{"unblock at the run time", []Mutation{unblock(later, laterAt)}, true, "", func(t *testing.T, h *harness) {
			require.Equal(t, StatusQueued, h.task(later).Status)
		}},
		{"unblock at the batch time", []Mutation{unblock(later, 0)}, true, "", func(t *testing.T, h *harness) {
			task := h.task(later)
			require.Equal(t, StatusScheduled, task.Status)
			require.Equal(t, baseTime, task.UpdatedAt)
		}},
		{"unblock then ready", []Mutation{unblock(later, 0), ready(later)}, true, "", nil},
		{"unblock queued", []Mutation{unblock(a, 0)}, false, "task is queued, want blocked", nil},
		{"unblock running", []Mutation{unblock(run, 0)}, false, "want blocked", nil},
		{"unblock succeeded", []Mutation{unblock(don, 0)}, false, "want blocked", nil},
		{"unblock missing", []Mutation{unblock("nope", 0)}, false, "no such task", nil},
		{"unblock twice", []Mutation{unblock(blk, 0), unblock(blk, 0)}, false, "want blocked", nil},
		{"ready blocked", []Mutation{ready(blk)}, false, "task is blocked", nil},
		{"start blocked", []Mutation{start(blk, 1, l2)}, false, "task is blocked", nil},
		{"cancel blocked", []Mutation{finish(blk, 0, StatusCancelled)}, true, "", func(t *testing.T, h *harness) {
			require.Equal(t, StatusCancelled, h.task(blk).Status)
		}},
		// PutWorkflow
		{"put workflow", []Mutation{putWorkflow("new", "knew")}, true, "", func(t *testing.T, h *harness) {
			wf, ok := h.s.Workflow("new")
			require.True(t, ok)
			require.Equal(t, &Workflow{ID: "new", Name: "name-new", Key: "knew", Status: WorkflowRunning,
				SubmittedAt: baseTime, UpdatedAt: baseTime, CreateIndex: h.index, ModifyIndex: h.index}, wf)
			byKey, ok := h.s.WorkflowByKey("knew")
			require.True(t, ok)
			require.Same(t, wf, byKey)
			require.Empty(t, h.s.WorkflowTasks("new"))
		}},
		{"put workflow keeps its update time", []Mutation{{PutWorkflow: &Workflow{ID: "new", Status: WorkflowRunning, SubmittedAt: 5, UpdatedAt: 9, Parent: a, Schedule: "s", Slot: 3}}}, true, "", func(t *testing.T, h *harness) {
			wf, _ := h.s.Workflow("new")
			require.Equal(t, Instant(9), wf.UpdatedAt)
			require.Equal(t, a, wf.Parent)
		}},
		{"put workflow with the key of a task", []Mutation{putWorkflow("new", "ka")}, true, "", func(t *testing.T, h *harness) {
			wf, ok := h.s.WorkflowByKey("ka")
			require.True(t, ok)
			require.Equal(t, "new", wf.ID)
			task, ok := h.s.GetByKey("ka")
			require.True(t, ok)
			require.Equal(t, a, task.ID)
		}},
		{"put workflow with the id of a task", []Mutation{putWorkflow(a, "")}, true, "", nil},
		{"put workflow empty id", []Mutation{putWorkflow("", "")}, false, "empty id", nil},
		{"put workflow existing id", []Mutation{putWorkflow(w, "")}, false, "workflow exists", nil},
		{"put workflow id of an ended workflow", []Mutation{putWorkflow(ended, "")}, false, "workflow exists", nil},
		{"put workflow key in use", []Mutation{putWorkflow("new", "kw")}, false, `key "kw" is in use by workflow w`, nil},
		{"put workflow key of an ended workflow", []Mutation{putWorkflow("new", "kended")}, false, "in use", nil},
		{"put workflow twice", []Mutation{putWorkflow("new", ""), putWorkflow("new", "")}, false, "workflow exists", nil},
		{"put workflow key twice", []Mutation{putWorkflow("new", "k"), putWorkflow("new2", "k")}, false, "in use by workflow new", nil},
		{"put workflow succeeded", []Mutation{{PutWorkflow: &Workflow{ID: "new", Status: WorkflowSucceeded}}}, false, "want running", nil},
		{"put workflow failed", []Mutation{{PutWorkflow: &Workflow{ID: "new", Status: WorkflowFailed}}}, false, "want running", nil},
		{"put workflow cancelled", []Mutation{{PutWorkflow: &Workflow{ID: "new", Status: WorkflowCancelled}}}, false, "want running", nil},
		{"put workflow status 0", []Mutation{{PutWorkflow: &Workflow{ID: "new"}}}, false, "want running", nil},
		{"put workflow status 9", []Mutation{{PutWorkflow: &Workflow{ID: "new", Status: 9}}}, false, "want running", nil},
		// EndWorkflow
		{"end workflow with a live member", []Mutation{endWorkflow(w, WorkflowSucceeded)}, false, "member m1 has not ended", nil},
		{"end workflow with a blocked member", []Mutation{finish("m1", 0, StatusCancelled), with(insertBlocked("new", "p", a), func(t *Task) { t.MakeFlow().Workflow = w }),
			endWorkflow(w, WorkflowSucceeded)}, false, "member new has not ended", nil},
		{"end workflow with a running member", []Mutation{start("m1", 1, l2), endWorkflow(w, WorkflowFailed)}, false, "member m1 has not ended", nil},
		{"end workflow after its members ended", []Mutation{finish("m1", 0, StatusCancelled), endWorkflow(w, WorkflowCancelled)}, true, "", func(t *testing.T, h *harness) {
			wf, ok := h.s.Workflow(w)
			require.True(t, ok)
			require.Equal(t, WorkflowCancelled, wf.Status)
			require.Equal(t, baseTime+5, wf.FinishedAt)
			require.Equal(t, baseTime+5, wf.UpdatedAt)
			require.Equal(t, h.index, wf.ModifyIndex)
			require.Equal(t, uint64(2), wf.CreateIndex)
			byKey, ok := h.s.WorkflowByKey("kw")
			require.True(t, ok)
			require.Same(t, wf, byKey)
			members(t, h, w, "m1", "m2")
		}},
		{"end empty workflow", []Mutation{endWorkflow(empty, WorkflowSucceeded)}, true, "", nil},
		{"end workflow at the batch time", []Mutation{{EndWorkflow: &EndWorkflow{ID: empty, Status: WorkflowFailed}}}, true, "", func(t *testing.T, h *harness) {
			wf, _ := h.s.Workflow(empty)
			require.Equal(t, baseTime, wf.FinishedAt)
			require.Equal(t, WorkflowFailed, wf.Status)
		}},
		{"end workflow a task joined as it ended", []Mutation{finishInto(a, 0, StatusCancelled, empty), endWorkflow(empty, WorkflowCancelled)}, true, "", nil},
		{"end workflow twice", []Mutation{endWorkflow(ended, WorkflowCancelled)}, false, "workflow is cancelled, want running", nil},
		{"end workflow twice in a batch", []Mutation{endWorkflow(empty, WorkflowSucceeded), endWorkflow(empty, WorkflowSucceeded)}, false, "want running", nil},
		{"end workflow running", []Mutation{endWorkflow(empty, WorkflowRunning)}, false, "not terminal", nil},
		{"end workflow status 0", []Mutation{endWorkflow(empty, 0)}, false, "not terminal", nil},
		{"end workflow status 5", []Mutation{endWorkflow(empty, 5)}, false, "not terminal", nil},
		{"end missing workflow", []Mutation{endWorkflow("nope", WorkflowSucceeded)}, false, "no such workflow", nil},
		// PurgeWorkflow
		{"purge ended workflow", []Mutation{purgeWorkflow(ended)}, true, "", func(t *testing.T, h *harness) {
			_, ok := h.s.Workflow(ended)
			require.False(t, ok)
			_, ok = h.s.WorkflowByKey("kended")
			require.False(t, ok)
			_, ok = h.s.Get("e1")
			require.False(t, ok)
			_, ok = h.s.GetByKey("ke1")
			require.False(t, ok)
			require.Empty(t, h.s.WorkflowTasks(ended))
			h.s.View().t.members.Ascend(func(mi memberItem) bool {
				require.NotEqual(t, ended, mi.wf)
				return true
			})
			members(t, h, w, "m1", "m2")
			// The ids and keys are free again.
			h.ok(putWorkflow(ended, "kended"), insertInto("e1", "ke1", ended))
			members(t, h, ended, "e1")
		}},
		{"purge workflow it ended in the same batch", []Mutation{finish("m1", 0, StatusCancelled), endWorkflow(w, WorkflowCancelled), purgeWorkflow(w)}, true, "", func(t *testing.T, h *harness) {
			for _, id := range []string{"m1", "m2"} {
				_, ok := h.s.Get(id)
				require.False(t, ok, id)
			}
			_, ok := h.s.GetByKey("km1")
			require.False(t, ok)
			h.task(a)
			members(t, h, ended, "e1")
		}},
		{"purge empty workflow", []Mutation{endWorkflow(empty, WorkflowSucceeded), purgeWorkflow(empty)}, true, "", nil},
		{"purge running workflow", []Mutation{purgeWorkflow(w)}, false, "workflow is running, want ended", nil},
		{"purge running workflow without members", []Mutation{purgeWorkflow(empty)}, false, "want ended", nil},
		{"purge missing workflow", []Mutation{purgeWorkflow("nope")}, false, "no such workflow", nil},
		{"purge workflow twice", []Mutation{purgeWorkflow(ended), purgeWorkflow(ended)}, false, "no such workflow", nil},
		{"purge a member alone", []Mutation{purge("m2")}, true, "", func(t *testing.T, h *harness) {
			members(t, h, w, "m1")
		}},
		// Finish into a workflow
		{"finish into a running workflow", []Mutation{finishInto(a, 0, StatusCancelled, w)}, true, "", func(t *testing.T, h *harness) {
			task := h.task(a)
			require.Equal(t, StatusCancelled, task.Status)
			require.Equal(t, w, task.Workflow())
			members(t, h, w, a, "m1", "m2")
		}},
		{"finish with a lease into a workflow", []Mutation{finishInto(run, l1, StatusSucceeded, empty)}, true, "", func(t *testing.T, h *harness) {
			members(t, h, empty, run)
			require.Zero(t, h.task(run).Lease)
		}},
		{"finish blocked into a workflow", []Mutation{finishInto(blk, 0, StatusCancelled, empty)}, true, "", nil},
		{"finish into a workflow of the same batch", []Mutation{putWorkflow("w2", ""), finishInto(a, 0, StatusCancelled, "w2")}, true, "", nil},
		{"finish a member into another workflow", []Mutation{finishInto("m1", 0, StatusCancelled, empty)}, false, "task is in workflow w", nil},
		{"finish a member into its own workflow", []Mutation{finishInto("m1", 0, StatusCancelled, w)}, false, "task is in workflow w", nil},
		{"finish into an ended workflow", []Mutation{finishInto(a, 0, StatusCancelled, ended)}, false, "workflow is cancelled, want running", nil},
		{"finish into a missing workflow", []Mutation{finishInto(a, 0, StatusCancelled, "nope")}, false, "no such workflow", nil},
		{"finish terminal into a workflow", []Mutation{finishInto(don, 0, StatusCancelled, w)}, false, "want live and not running", nil},
		{"finish into a workflow with a stale lease", []Mutation{finishInto(run, l2, StatusSucceeded, w)}, false, "want running under", nil},
		// Fire of a workflow
		{"fire a workflow", []Mutation{{Fire: &Fire{Name: "s", Slot: baseTime + 60e9, Skipped: 2, Workflow: w}}}, true, "", func(t *testing.T, h *harness) {
			sc, _ := h.s.Schedule("s")
			require.Equal(t, w, sc.LastTask)
			require.Equal(t, uint64(1), sc.Fires)
			require.Equal(t, uint64(2), sc.Skipped)
			require.Equal(t, baseTime+60e9, sc.LastFire)
		}},
		{"fire a workflow of the same batch", []Mutation{putWorkflow("w2", ""), fireWorkflow("s", baseTime+60e9, "w2")}, true, "", func(t *testing.T, h *harness) {
			sc, _ := h.s.Schedule("s")
			require.Equal(t, "w2", sc.LastTask)
		}},
		{"fire a task and a workflow", []Mutation{{Fire: &Fire{Name: "s", Slot: baseTime + 60e9, TaskID: a, Workflow: w}}}, false, "both a task and a workflow", nil},
		{"fire a missing workflow", []Mutation{fireWorkflow("s", baseTime+60e9, "nope")}, false, "workflow nope does not exist", nil},
		{"fire a workflow, slot not after the cursor", []Mutation{fireWorkflow("s", 0, w)}, false, "not after the last fire", nil},
		{"fire a workflow of a missing schedule", []Mutation{fireWorkflow("nope", 1, w)}, false, "no such schedule", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			before := snapshotBytes(t, h.s)
			dump := indexDump(h.s.View())
			applied := h.s.AppliedIndex()
			if !tc.ok {
				rej := h.reject(len(tc.ms)-1, tc.ms...)
				require.Contains(t, rej.Reason, tc.why)
				require.Equal(t, before, snapshotBytes(t, h.s))
				require.Equal(t, dump, indexDump(h.s.View()))
				require.Equal(t, applied, h.s.AppliedIndex())
				return
			}
			require.Empty(t, tc.why)
			h.ok(tc.ms...)
			require.Equal(t, h.index, h.s.AppliedIndex())
			require.NotEqual(t, before, snapshotBytes(t, h.s))
			require.Equal(t, recount(h.s.View()), h.s.Counts())
			checkIndexes(t, h.s.View())
			if tc.check != nil {
				tc.check(t, h)
			}
			// What was accepted survives a snapshot.
			snap := snapshotBytes(t, h.s)
			restored := New()
			require.NoError(t, restored.Restore(bytes.NewReader(snap)))
			require.Equal(t, snap, snapshotBytes(t, restored))
		})
	}
}

// TestRejectedBatchRollsBackWorkflows rejects batches that changed
// workflows, their keys and their members before their last mutation
// failed: the state is as it was, down to every index.
func TestRejectedBatchRollsBackWorkflows(t *testing.T) {
	tests := []struct {
		name string
		ms   []Mutation // the last one fails
	}{
		{"a new workflow, its key and members", []Mutation{
			putWorkflow("new", "knew"),
			insertInto("n1", "kn1", "new"),
			insertBlocked("n2", "p", "n1"),
			purge("a"), // fails: a is queued
		}},
		{"a task joins a workflow as it ends", []Mutation{
			finishInto("a", 0, StatusSucceeded, "w"),
			finishInto("x", 0, StatusSucceeded, "w"), // fails: no task x
		}},
		{"an unblock, an end and a fire", []Mutation{
			unblock("blk", 0),
			finish("m1", 0, StatusCancelled),
			endWorkflow("w", WorkflowCancelled),
			fireWorkflow("s", baseTime, "w"),
			endWorkflow("w", WorkflowCancelled), // fails: ended
		}},
		{"a purged workflow, its members and keys", []Mutation{
			purgeWorkflow("ended"),
			insert("e1", "p", "ke1"), // the id and key of its member, free again
			purgeWorkflow("ended"),   // fails: gone
		}},
		{"a purged workflow replaced by one of the same id and key", []Mutation{
			purgeWorkflow("ended"),
			putWorkflow("ended", "kended"),
			insertInto("e2", "ke1", "ended"),
			putWorkflow("w", ""), // fails: exists
		}},
		{"every kind of change, then a failure", []Mutation{
			putWorkflow("new", "knew"),
			insertInto("n1", "", "new"),
			finish("m1", 0, StatusCancelled),
			endWorkflow("w", WorkflowFailed),
			purgeWorkflow("w"),
			putWorkflow("w", "kw"),
			finishInto("a", 0, StatusCancelled, "w"),
			unblock("blk", 0),
			fireWorkflow("s", baseTime, "new"),
			purgeWorkflow("ended"),
			tombstone("n1", false),
			insertBlocked("bad", "p", "nope"), // fails: no task nope
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(insert("a", "p", "ka"), insertBlocked("blk", "p", "a"), putSchedule("s"),
				putWorkflow("w", "kw"), insertInto("m1", "km1", "w"), insertInto("m0", "", "w"), finish("m0", 0, StatusSucceeded),
				putWorkflow("ended", "kended"), insertInto("e1", "ke1", "ended"), finish("e1", 0, StatusCancelled),
				endWorkflow("ended", WorkflowCancelled))
			before := snapshotBytes(t, h.s)
			dump := indexDump(h.s.View())
			counts := h.s.Counts()
			applied := h.s.AppliedIndex()
			wf, _ := h.s.Workflow("w")
			endedWf, _ := h.s.Workflow("ended")
			wMembers, endedMembers := h.s.WorkflowTasks("w"), h.s.WorkflowTasks("ended")

			h.reject(len(tc.ms)-1, tc.ms...)

			require.Equal(t, before, snapshotBytes(t, h.s))
			require.Equal(t, dump, indexDump(h.s.View()), "every index as it was")
			require.Equal(t, counts, h.s.Counts())
			require.Equal(t, applied, h.s.AppliedIndex())
			checkIndexes(t, h.s.View())
			got, ok := h.s.Workflow("w")
			require.True(t, ok)
			require.Same(t, wf, got)
			got, ok = h.s.WorkflowByKey("kended")
			require.True(t, ok)
			require.Same(t, endedWf, got)
			_, ok = h.s.Workflow("new")
			require.False(t, ok)
			_, ok = h.s.WorkflowByKey("knew")
			require.False(t, ok)
			require.Empty(t, h.s.WorkflowTasks("new"))
			require.Equal(t, wMembers, h.s.WorkflowTasks("w"))
			require.Equal(t, endedMembers, h.s.WorkflowTasks("ended"))
			require.Equal(t, StatusBlocked, h.task("blk").Status)
			require.Empty(t, h.task("a").Workflow())
			byKey, ok := h.s.GetByKey("ke1")
			require.True(t, ok)
			require.Equal(t, "e1", byKey.ID)

			// The same batch without its failing mutation applies.
			h.ok(tc.ms[:len(tc.ms)-1]...)
			checkIndexes(t, h.s.View())
		})
	}
}

// workflowReader is what State and View both answer about workflows.
type workflowReader interface {
	Workflow(id string) (*Workflow, bool)
	WorkflowByKey(key string) (*Workflow, bool)
	WorkflowTasks(id string) []*Task
	ListWorkflows(q WorkflowQuery) ([]*Workflow, string)
}

// workflowReadsState returns a state of many workflows whose ids prefix
// each other (w1, w10, w100) and whose members' ids interleave, in every
// status.
func workflowReadsState(t *testing.T) *harness {
	h := newHarness(t)
	ids := []string{"w1", "w10", "w100", "w11", "w2", "w3", "wa", "wb", "x"}
	for i := 0; i < 20; i++ {
		ids = append(ids, fmt.Sprintf("wf%02d", i))
	}
	var ms []Mutation
	for i, id := range ids {
		key := ""
		if i%3 != 0 {
			key = "key-" + id
		}
		ms = append(ms, putWorkflow(id, key))
	}
	// Task i is a member of workflow i%len(ids) for i%4 != 3, else of
	// none: the members of one workflow are far apart in id order.
	for i := 0; i < 150; i++ {
		if i%4 == 3 {
			ms = append(ms, insert(taskID(i), "p", ""))
		} else {
			ms = append(ms, insertInto(taskID(i), "", ids[(i*7)%len(ids)]))
		}
	}
	h.ok(ms...)
	ms = ms[:0]
	// Every third workflow ends, in a status drawn from its position.
	ends := []WorkflowStatus{WorkflowSucceeded, WorkflowFailed, WorkflowCancelled}
	for i, id := range ids {
		if i%3 != 1 {
			continue
		}
		for _, task := range h.s.WorkflowTasks(id) {
			ms = append(ms, finish(task.ID, 0, StatusCancelled))
		}
		ms = append(ms, endWorkflow(id, ends[(i/3)%3]))
	}
	h.ok(ms...)
	return h
}

// bruteWorkflows returns the ids of the workflows of v that q selects, by
// scanning every workflow.
func bruteWorkflows(v *View, q WorkflowQuery) []string {
	ids := []string{}
	v.EachWorkflow(func(w *Workflow) bool {
		if (q.After == "" || w.ID > q.After) && (len(q.Statuses) == 0 || contains(q.Statuses, w.Status)) {
			ids = append(ids, w.ID)
		}
		return true
	})
	return ids
}

// bruteMembers returns the ids of the members of workflow id, by scanning
// every task.
func bruteMembers(v *View, id string) []string {
	ids := []string{}
	v.EachTask(func(task *Task) bool {
		if task.Workflow() == id {
			ids = append(ids, task.ID)
		}
		return true
	})
	return ids
}

func memberIDs(r workflowReader, id string) []string {
	ids := []string{}
	for _, task := range r.WorkflowTasks(id) {
		ids = append(ids, task.ID)
	}
	return ids
}

// checkWorkflowReads holds the reads of r to what a scan of v finds.
func checkWorkflowReads(t *testing.T, r workflowReader, v *View) {
	t.Helper()
	n := 0
	v.EachWorkflow(func(w *Workflow) bool {
		n++
		got, ok := r.Workflow(w.ID)
		require.True(t, ok, w.ID)
		require.Same(t, w, got)
		if w.Key != "" {
			got, ok = r.WorkflowByKey(w.Key)
			require.True(t, ok, w.Key)
			require.Same(t, w, got)
		}
		require.Equal(t, bruteMembers(v, w.ID), memberIDs(r, w.ID), "members of %s", w.ID)
		for _, task := range r.WorkflowTasks(w.ID) {
			got, _ := v.Get(task.ID)
			require.Same(t, got, task)
		}
		return true
	})
	require.NotZero(t, n)
	for _, missing := range []string{"", "w", "w0", "nope", "wf", "zzz"} {
		_, ok := r.Workflow(missing)
		require.False(t, ok, missing)
		require.Empty(t, r.WorkflowTasks(missing), missing)
	}
	for _, missing := range []string{"", "w1", "key-", "key-w1x"} {
		_, ok := r.WorkflowByKey(missing)
		require.False(t, ok, missing)
	}

	queries := []WorkflowQuery{
		{},
		{Statuses: []WorkflowStatus{WorkflowRunning}},
		{Statuses: []WorkflowStatus{WorkflowSucceeded, WorkflowCancelled, WorkflowSucceeded}},
		{Statuses: []WorkflowStatus{WorkflowFailed}},
		{Statuses: []WorkflowStatus{0, 9}},
		{After: "w1"},
		{After: "w10", Statuses: []WorkflowStatus{WorkflowRunning}},
		{After: "w"},
		{After: "wf05"},
		{After: "zzz"},
	}
	for _, q := range queries {
		for _, limit := range []int{0, -1, 1, 2, 7, 1000} {
			q := q
			q.Limit = limit
			want := bruteWorkflows(v, q)
			got := []string{}
			pages := 0
			for {
				wfs, next := r.ListWorkflows(q)
				pages++
				if limit > 0 {
					require.LessOrEqual(t, len(wfs), limit)
				}
				for _, w := range wfs {
					got = append(got, w.ID)
				}
				if next == "" {
					break
				}
				require.Equal(t, got[len(got)-1], next)
				q.After = next
				require.LessOrEqual(t, pages, len(want), "query %+v", q)
			}
			require.Equal(t, want, got, "query %+v", q)
			if limit > 0 && len(want) > 0 {
				require.Equal(t, (len(want)+limit-1)/limit, pages, "no empty last page")
			}
		}
	}
}

// TestWorkflowReads holds Workflow, WorkflowByKey, WorkflowTasks and
// ListWorkflows, on a State and on a View, to what a scan of the records
// finds: members in id order and only those of the workflow asked for, also
// when workflow ids prefix each other; pages that cover each selection
// once.
func TestWorkflowReads(t *testing.T) {
	h := workflowReadsState(t)
	v := h.s.View()
	checkWorkflowReads(t, h.s, v)
	checkWorkflowReads(t, v, v)

	// The selections are not empty.
	running, _ := h.s.ListWorkflows(WorkflowQuery{Statuses: []WorkflowStatus{WorkflowRunning}})
	require.Len(t, running, 19)
	for _, st := range []WorkflowStatus{WorkflowSucceeded, WorkflowFailed, WorkflowCancelled} {
		wfs, _ := h.s.ListWorkflows(WorkflowQuery{Statuses: []WorkflowStatus{st}})
		require.NotEmpty(t, wfs, st)
	}
	require.Equal(t, bruteMembers(v, "w1"), memberIDs(h.s, "w1"))
	require.NotEmpty(t, memberIDs(h.s, "w1"))
	require.NotEmpty(t, memberIDs(h.s, "w10"))
	wfs, next := h.s.ListWorkflows(WorkflowQuery{Limit: 3})
	require.Equal(t, []string{"w1", "w10", "w100"}, []string{wfs[0].ID, wfs[1].ID, wfs[2].ID})
	require.Equal(t, "w100", next)
	wfs, next = h.s.ListWorkflows(WorkflowQuery{After: "wf19"})
	require.Equal(t, "x", wfs[0].ID)
	require.Len(t, wfs, 1)
	require.Empty(t, next)
	wfs, next = h.s.ListWorkflows(WorkflowQuery{After: "x", Limit: 1})
	require.Empty(t, wfs)
	require.Empty(t, next)

	// EachWorkflow stops when told.
	var seen []string
	v.EachWorkflow(func(w *Workflow) bool { seen = append(seen, w.ID); return len(seen) < 2 })
	require.Equal(t, []string{"w1", "w10"}, seen)
}

// TestWorkflowViewIsolation takes a View, then changes every part of the
// workflows: the View reads what it read before, the State the changes.
func TestWorkflowViewIsolation(t *testing.T) {
	h := workflowReadsState(t)
	v := h.s.View()
	frozen, err := viewBytes(v)
	require.NoError(t, err)
	type reads struct {
		wfs     []*Workflow
		members map[string][]string
		byKey   map[string]*Workflow
	}
	read := func(r workflowReader) reads {
		out := reads{members: map[string][]string{}, byKey: map[string]*Workflow{}}
		out.wfs, _ = r.ListWorkflows(WorkflowQuery{})
		for _, w := range out.wfs {
			out.members[w.ID] = memberIDs(r, w.ID)
			if w.Key != "" {
				out.byKey[w.Key], _ = r.WorkflowByKey(w.Key)
			}
		}
		return out
	}
	was := read(v)
	w10, _ := v.Workflow("w10")
	require.Equal(t, WorkflowSucceeded, w10.Status, "w10 ended")
	w1Members := memberIDs(v, "w1")

	// Change every part: new workflows and members (enough to split the
	// B-tree nodes), ends, a purge, a task that joins a workflow, and a
	// purged workflow's id and key reused.
	var ms []Mutation
	for i := 0; i < 200; i++ {
		ms = append(ms, putWorkflow(fmt.Sprintf("new%03d", i), fmt.Sprintf("knew%d", i)),
			insertInto(fmt.Sprintf("n%03d", i), "", "w1"))
	}
	h.ok(ms...)
	ms = ms[:0]
	for _, task := range h.s.WorkflowTasks("w100") {
		ms = append(ms, finish(task.ID, 0, StatusCancelled))
	}
	ms = append(ms, endWorkflow("w100", WorkflowSucceeded), purgeWorkflow("w10"), putWorkflow("w10", "key-w10"),
		finishInto(taskID(3), 0, StatusCancelled, "w1"))
	h.ok(ms...)

	require.Equal(t, was, read(v))
	got, err := viewBytes(v)
	require.NoError(t, err)
	require.Equal(t, frozen, got)
	now, _ := v.Workflow("w10")
	require.Same(t, w10, now)
	require.Equal(t, w1Members, memberIDs(v, "w1"))
	_, ok := v.Workflow("new000")
	require.False(t, ok)
	_, ok = v.WorkflowByKey("knew0")
	require.False(t, ok)
	checkWorkflowReads(t, v, v)

	// The state sees the changes.
	now, _ = h.s.Workflow("w10")
	require.Equal(t, WorkflowRunning, now.Status)
	require.Empty(t, h.s.WorkflowTasks("w10"))
	w100, _ := h.s.Workflow("w100")
	require.Equal(t, WorkflowSucceeded, w100.Status)
	require.Len(t, memberIDs(h.s, "w1"), len(w1Members)+201)
	checkWorkflowReads(t, h.s, h.s.View())
	checkIndexes(t, h.s.View())
	checkIndexes(t, v)
}

// TestRandomWorkflowOperations applies random batches of every kind (many
// of them rejected) and checks after each that the counters equal a
// recount, that the derived indexes agree with the records, that a second
// state fed the same entries has the same snapshot, and that a state
// restored from the snapshot continues identically.
func TestRandomWorkflowOperations(t *testing.T) {
	r := &prng{s: 10}
	h := newHarness(t)
	h.ok(putSchedule("s"))
	twin := New()
	var restored *State
	apply := func(data []byte) any {
		resp := h.apply(data)
		resp2 := twin.Apply(h.index, h.term, data)
		require.Equal(t, fmt.Sprint(resp), fmt.Sprint(resp2))
		if restored != nil {
			resp3 := restored.Apply(h.index, h.term, data)
			require.Equal(t, fmt.Sprint(resp), fmt.Sprint(resp3))
		}
		return resp
	}
	twin.Apply(1, 1, bumpEntry(t, 1))
	twin.Apply(2, 1, batchEntry(t, 1, putSchedule("s")))
	wfStatuses := []WorkflowStatus{0, WorkflowRunning, WorkflowSucceeded, WorkflowFailed, WorkflowCancelled}
	wfID := func() string { return fmt.Sprintf("w%d", r.intn(6)) }
	var leases uint64
	accepted, rejected := 0, 0
	seen := map[string]bool{} // what accepted batches did
	for round := 0; round < 600; round++ {
		var ms []Mutation
		for i := 0; i < 1+r.intn(3); i++ {
			id := taskID(r.intn(40))
			cur, exists := h.s.Get(id)
			switch op := r.intn(14); {
			case !exists || op == 0:
				var m Mutation
				switch r.intn(4) {
				case 0:
					m = insertBlocked(id, "p", taskID(r.intn(40)))
					if r.coin() {
						m.Insert.MakeFlow().DependsOn = append(m.Insert.DependsOn(), taskID(r.intn(40)))
					}
					if r.coin() {
						m.Insert.RunAt = baseTime + Instant(r.intn(3))
					}
				case 1:
					m = insertInto(id, "", wfID())
					if r.coin() {
						m.Insert.Status, m.Insert.MakeFlow().DependsOn = StatusBlocked, []string{taskID(r.intn(40))}
					}
				case 2:
					m = insert(id, "q", fmt.Sprintf("key%d", r.intn(50)))
					m.Insert.MakeFlow().Parent = taskID(r.intn(40))
				default:
					m = insert(id, "p", "")
				}
				ms = append(ms, m)
			case op == 1:
				ms = append(ms, unblock(id, baseTime+Instant(r.intn(3))))
			case op == 2:
				if cur.Status == StatusScheduled || cur.Status == StatusRetrying {
					ms = append(ms, ready(id))
				} else {
					leases++
					ms = append(ms, start(id, cur.Attempt+1, lease(h.s.Epoch(), leases)))
				}
			case op == 3:
				ms = append(ms, finish(id, cur.Lease, AllStatuses[4+r.intn(4)]))
			case op == 4:
				ms = append(ms, finishInto(id, cur.Lease, AllStatuses[4+r.intn(4)], wfID()))
			case op == 5:
				ms = append(ms, purge(id))
			case op == 6 || op == 7:
				key := ""
				if r.coin() {
					key = fmt.Sprintf("wkey%d", r.intn(8))
				}
				m := putWorkflow(wfID(), key)
				if r.intn(8) == 0 {
					m.PutWorkflow.Status = wfStatuses[r.intn(len(wfStatuses))]
				}
				ms = append(ms, m)
			case op == 8 || op == 9:
				// End a workflow, its live members first most of the time.
				wf := wfID()
				if r.intn(4) != 0 {
					h.s.View().EachTask(func(task *Task) bool {
						if task.Workflow() == wf && !task.Status.Terminal() {
							ms = append(ms, finish(task.ID, task.Lease, StatusCancelled))
						}
						return true
					})
				}
				ms = append(ms, endWorkflow(wf, wfStatuses[r.intn(len(wfStatuses))]))
			case op == 10:
				ms = append(ms, purgeWorkflow(wfID()))
			case op == 11:
				if r.coin() {
					ms = append(ms, fireWorkflow("s", baseTime+Instant(round), wfID()))
				} else {
					ms = append(ms, fire("s", baseTime+Instant(round), 0, id))
				}
			default:
				ms = append(ms, retry(id, cur.Lease, baseTime+Instant(r.intn(3))))
			}
		}
		if apply(batchEntry(t, h.s.Epoch(), ms...)) == nil {
			accepted++
			for _, m := range ms {
				name := kindName(&m)
				if m.Insert != nil && m.Insert.Status == StatusBlocked {
					name = "InsertBlocked"
				}
				if m.Finish != nil && m.Finish.Workflow != "" {
					name = "FinishInto"
				}
				seen[name] = true
			}
		} else {
			rejected++
		}
		v := h.s.View()
		require.Equal(t, recount(v), h.s.Counts(), "round %d", round)
		checkIndexes(t, v)
		snap := snapshotBytes(t, h.s)
		require.Equal(t, snap, snapshotBytes(t, twin))
		if round%50 == 0 {
			restored = New()
			require.NoError(t, restored.Restore(bytes.NewReader(snap)))
			checkIndexes(t, restored.View())
		}
		if restored != nil {
			require.Equal(t, h.s.Hash(), restored.Hash(), "round %d", round)
		}
	}
	require.Greater(t, accepted, 100)
	require.Greater(t, rejected, 100)
	for _, kind := range []string{"InsertBlocked", "Unblock", "PutWorkflow", "EndWorkflow", "PurgeWorkflow", "FinishInto", "Fire"} {
		require.True(t, seen[kind], "no accepted batch did %s: %v", kind, seen)
	}
}

// TestRestoreRefusesEndedWorkflowWithLiveMember: no log can end a
// workflow while a member lives (EndWorkflow refuses it), so a snapshot
// that says so is corrupt.
func TestRestoreRefusesEndedWorkflowWithLiveMember(t *testing.T) {
	done := recordBody(&Task{ID: "a", Template: Template{Pool: "p", Kind: "k"}, Key: "ka", Flow: &Flow{Workflow: "w"}, Status: StatusSucceeded})
	snap := newSnapshotWriter(3).record(recTask, done).record(recTask, memberRecord("b", "w")).
		record(recWorkflow, wfRecord("w", "kw", WorkflowSucceeded)).end4(2, 0, 0, 1)
	s := New()
	err := s.Restore(bytes.NewReader(snap))
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.Contains(t, err.Error(), "task b is queued in workflow w, which is succeeded")
	require.Zero(t, s.View().Len())
}
