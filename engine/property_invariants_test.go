package engine_test

import (
	"slices"
	"strings"

	"github.com/cronoq/cronoq/fsm"
)

// The invariants of the durable state that the determinism property
// (property_test.go) checks after every step.

// checkGraph checks the invariants of dependencies and workflows on the
// durable state (the engine has settled: every commit ends a step):
//   - a task that left blocked (queued, scheduled, running, retrying,
//     succeeded, failed) has only ended dependencies, succeeded ones under
//     policy succeeded; a live task's dependencies exist;
//   - a blocked task has a dependency that has not ended, and none that
//     ended without success under policy succeeded;
//   - a task cancelled for a dependency never ran;
//   - every workflow has members, their step names are unique, and every
//     member's workflow exists (the members of a purged workflow are gone);
//   - a workflow runs exactly while it has a live member; an ended one has
//     the status its members give it (engine/core/workflow.go status():
//     cancelled as a whole, else failed when a member failed or expired,
//     else cancelled when a member was cancelled, else succeeded);
//   - when no timer is due, a task or workflow kept past its retention is
//     held by a live dependent.
func (s *sim) checkGraph(final bool) {
	v := s.a.View()
	tasks := make(map[string]*fsm.Task, v.Len())
	v.EachTask(func(t *fsm.Task) bool {
		tasks[t.ID] = t
		return true
	})
	type members struct {
		n, live                int
		failed, cancelled, all bool // all: cancelled as a whole
	}
	wfs := make(map[string]*members)
	steps := make(map[[2]string]bool)
	held := make(map[string]bool) // tasks a live task depends on
	v.EachTask(func(t *fsm.Task) bool {
		s.checkDeps(t, tasks)
		if !t.Status.Terminal() {
			for _, d := range t.DependsOn() {
				held[d] = true
			}
		}
		if t.Workflow() == "" {
			return true
		}
		m := wfs[t.Workflow()]
		if m == nil {
			m = &members{}
			wfs[t.Workflow()] = m
		}
		m.n++
		switch t.Status {
		case fsm.StatusSucceeded:
		case fsm.StatusFailed, fsm.StatusExpired:
			m.failed = true
		case fsm.StatusCancelled:
			m.cancelled = true
			m.all = m.all || t.Error == "workflow cancelled"
		default:
			m.live++
		}
		if t.Step() != "" {
			k := [2]string{t.Workflow(), t.Step()}
			s.check(!steps[k], "workflow %s has two steps named %q", t.Workflow(), t.Step())
			steps[k] = true
		}
		return true
	})
	settled := s.settled()
	retention := s.ccfg.Retention
	now := fsm.InstantOf(s.now)
	n := 0
	v.EachWorkflow(func(w *fsm.Workflow) bool {
		n++
		m := wfs[w.ID]
		s.check(m != nil, "workflow %s (%s) has no member", w.ID, w.Status)
		delete(wfs, w.ID)
		if w.Status == fsm.WorkflowRunning {
			s.check(m.live > 0, "workflow %s runs without a live member", w.ID)
			return true
		}
		s.check(m.live == 0, "workflow %s is %s with %d live members", w.ID, w.Status, m.live)
		want := fsm.WorkflowSucceeded
		switch {
		case m.all:
			want = fsm.WorkflowCancelled
		case m.failed:
			want = fsm.WorkflowFailed
		case m.cancelled:
			want = fsm.WorkflowCancelled
		}
		s.check(w.Status == want, "workflow %s is %s, its members say %s (%+v)", w.ID, w.Status, want, *m)
		if settled && w.FinishedAt.Add(retention) <= now {
			kept := slices.ContainsFunc(v.WorkflowTasks(w.ID), func(t *fsm.Task) bool { return held[t.ID] })
			s.check(kept, "workflow %s ended at %s is kept past its retention with no live dependent", w.ID, w.FinishedAt.Time())
			s.coveredOnce(covWorkflowPurgeHeld, w.ID)
		}
		return true
	})
	for id := range wfs {
		s.check(false, "tasks of workflow %s, which does not exist", id)
	}
	s.check(n == s.core.Stats().Workflows, "workflows: fsm %d, core %d", n, s.core.Stats().Workflows)
	if settled {
		for _, t := range tasks {
			if t.Workflow() == "" && t.Status.Terminal() && t.FinishedAt.Add(retention) <= now {
				s.check(held[t.ID], "task %s ended at %s is kept past its retention with no live dependent", t.ID, t.FinishedAt.Time())
				s.coveredOnce(covTaskPurgeHeld, t.ID)
			}
		}
	}
	if final {
		s.logf("final: %d tasks, %d named steps", len(tasks), len(steps))
	}
}

// checkDeps checks the dependency invariants of t (see checkGraph).
func (s *sim) checkDeps(t *fsm.Task, tasks map[string]*fsm.Task) {
	if t.Status == fsm.StatusCancelled && strings.HasPrefix(t.Error, "dependency ") {
		s.check(t.Attempt == 0, "task %s cancelled for a dependency after %d attempts", t.ID, t.Attempt)
	}
	switch t.Status {
	case fsm.StatusBlocked:
		waiting := false
		for _, d := range t.DependsOn() {
			dt, ok := tasks[d]
			s.check(ok, "blocked task %s depends on %s, which is gone", t.ID, d)
			if !dt.Status.Terminal() {
				waiting = true
				continue
			}
			s.check(t.DepPolicy() == fsm.DepDone || dt.Status == fsm.StatusSucceeded,
				"blocked task %s waits although its dependency %s is %s", t.ID, d, dt.Status)
		}
		s.check(waiting, "task %s is blocked, but its dependencies %v have all ended", t.ID, t.DependsOn())
	case fsm.StatusQueued, fsm.StatusScheduled, fsm.StatusRunning, fsm.StatusRetrying, fsm.StatusSucceeded, fsm.StatusFailed:
		ranAfterFailure := false
		for _, d := range t.DependsOn() {
			dt, ok := tasks[d]
			if !ok {
				s.check(t.Status.Terminal(), "task %s is %s, its dependency %s is gone", t.ID, t.Status, d)
				continue
			}
			s.check(dt.Status.Terminal(), "task %s is %s before its dependency %s ended (%s)", t.ID, t.Status, d, dt.Status)
			s.check(t.DepPolicy() == fsm.DepDone || dt.Status == fsm.StatusSucceeded,
				"task %s is %s although its dependency %s is %s", t.ID, t.Status, d, dt.Status)
			ranAfterFailure = ranAfterFailure || dt.Status != fsm.StatusSucceeded
		}
		if ranAfterFailure && t.Attempt > 0 {
			s.coveredOnce(covDepDoneRan, t.ID)
		}
	}
}

// checkFired checks the workflow a schedule fired: one member per step of
// the schedule, depending on the steps it names.
func (s *sim) checkFired(f *fsm.Fire) {
	sc, ok := s.a.Schedule(f.Name)
	if !ok {
		return // removed in the same step
	}
	w, ok := s.a.Workflow(f.Workflow)
	s.check(ok && w.Schedule == f.Name && w.Slot == f.Slot && w.Key != "",
		"workflow %s of schedule %s at %d: %+v", f.Workflow, f.Name, f.Slot, w)
	name := sc.Workflow
	if name == "" {
		name = sc.Name
	}
	s.check(w.Name == name, "workflow %s of schedule %s is named %q, want %q", w.ID, sc.Name, w.Name, name)
	members := s.a.WorkflowTasks(w.ID)
	s.check(len(members) == len(sc.Steps), "workflow %s of schedule %s has %d members for %d steps", w.ID, sc.Name, len(members), len(sc.Steps))
	ids := make(map[string]string, len(members))
	for i, m := range members {
		st := &sc.Steps[i]
		ids[st.Name] = m.ID
		want := make([]string, 0, len(st.DependsOn))
		for _, d := range st.DependsOn {
			want = append(want, ids[d])
		}
		s.check(m.Step() == st.Name && m.Kind == st.Kind && m.Pool == st.Pool && m.DepPolicy() == st.DepPolicy && m.External() == st.External &&
			m.Schedule == sc.Name && slices.Equal(m.DependsOn(), want),
			"member %d of workflow %s of schedule %s: %+v, want step %+v depending on %v", i, w.ID, sc.Name, m, st, want)
	}
}
