package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// The commands of the determinism property (property_test.go) and the
// checks of their answers against what the durable state said when they
// were sent.

// submit sends a plain submit in one of the three forms.
func (s *sim) submit(op simOp) {
	mode := map[simOp]core.SubmitMode{opSubmitOne: core.SubmitOne, opSubmitBatch: core.SubmitBatch, opSubmitMany: core.SubmitMany}[op]
	n := 1
	if mode != core.SubmitOne {
		n = 1 + s.pick(4)
	}
	specs := make([]core.Spec, n)
	for i := range specs {
		specs[i], _ = s.randomSpec()
		if mode == core.SubmitBatch && i > 0 && s.pick(2) == 0 {
			// Depends on an earlier spec of the batch, by its key.
			j := s.pick(i)
			if specs[j].Key == "" {
				specs[j].Key = fmt.Sprintf("key%d", s.pick(12))
			}
			specs[i].DependsOn = append(specs[i].DependsOn, core.TaskRef{Key: specs[j].Key})
		}
	}
	kind := reqSubmit
	if mode == core.SubmitMany {
		kind = reqSubmitMany
	}
	req := s.nextReq(kind, func(r core.Reply, _ bool) { s.checkSubmitDeps(mode, specs, r) })
	s.submits = append(s.submits, req)
	s.logf("req %d %s %d specs", req, simOpNames[op], n)
	s.core.Submit(s.now, req, mode, specs)
}

// checkSubmitDeps checks that the tasks a submit inserted depend on the
// tasks its specs named by id, and in an atomic batch on the earlier specs
// they name by key.
func (s *sim) checkSubmitDeps(mode core.SubmitMode, specs []core.Spec, r core.Reply) {
	var ie *core.InvalidError
	if errors.As(r.Err, &ie) && strings.Contains(ie.Field, "depends_on") {
		s.covered(covUnknownDepRefused)
	}
	res, ok := r.Value.(*core.SubmitResult)
	if !ok {
		return
	}
	for i, sub := range res.Tasks {
		if i < len(res.Errs) && errors.As(res.Errs[i], &ie) && strings.Contains(ie.Field, "depends_on") {
			s.covered(covUnknownDepRefused)
		}
		if sub.ID == "" || sub.Duplicate {
			continue
		}
		t, ok := s.a.Get(sub.ID)
		if !ok {
			continue // an early item of an enqueue-many, purged since
		}
		s.check(len(t.DependsOn()) <= len(specs[i].DependsOn), "task %s depends on %v, its spec on %v", t.ID, t.DependsOn(), specs[i].DependsOn)
		for _, ref := range specs[i].DependsOn {
			if ref.ID != "" {
				s.check(slices.Contains(t.DependsOn(), ref.ID), "task %s does not depend on %s: %v", t.ID, ref.ID, t.DependsOn())
				continue
			}
			if mode != core.SubmitBatch {
				continue
			}
			for j := i - 1; j >= 0; j-- {
				if specs[j].Key == ref.Key {
					want := res.Tasks[j].ID
					s.check(slices.Contains(t.DependsOn(), want), "task %s of a batch does not depend on %s, spec %d with key %q: %v", t.ID, want, j, ref.Key, t.DependsOn())
					s.covered(covBatchKeyDep)
					break
				}
			}
		}
	}
}

// randomWorkflow returns a workflow to submit: a random DAG of steps. deps
// holds the ids of the existing tasks each step names. bad says it is
// invalid on purpose; sure that it is valid (neither: a random spec may be
// invalid).
func (s *sim) randomWorkflow() (spec core.WorkflowSpec, deps [][]string, bad, sure bool) {
	spec.Name = []string{"etl", "deploy", "fanout"}[s.pick(3)]
	if s.pick(3) == 0 {
		spec.Key = fmt.Sprintf("wk%d", s.pick(6))
	}
	n := 1 + s.pick(5)
	spec.Steps = make([]core.StepSpec, n)
	deps = make([][]string, n)
	sure = true
	for i := range spec.Steps {
		sp, d, ok := s.randomStepSpec()
		sure = sure && ok
		st := core.StepSpec{Spec: sp, Name: fmt.Sprintf("%s%d", []string{"s", "step.", "x-", "y_"}[s.pick(4)], i)}
		for j := 0; j < i; j++ {
			if s.pick(3) == 0 {
				st.DependsOnSteps = append(st.DependsOnSteps, spec.Steps[j].Name)
			}
		}
		spec.Steps[i], deps[i] = st, d
	}
	if s.pick(10) == 0 {
		bad = true
		k := s.pick(n)
		switch s.pick(6) {
		case 0:
			if n > 1 {
				spec.Steps[n-1].Name = spec.Steps[0].Name
			} else {
				spec.Steps[0].Name = ""
			}
		case 1:
			later := "nosuch"
			if k < n-1 {
				later = spec.Steps[k+1].Name
			}
			spec.Steps[k].DependsOnSteps = append(spec.Steps[k].DependsOnSteps, later)
		case 2:
			spec.Steps[k].Name = "no/slash"
		case 3:
			spec.Steps[k].Key = "stepkey"
		case 4:
			spec.Steps = nil
		case 5:
			spec.Steps[k].Name = ""
		}
	}
	return spec, deps, bad, sure && !bad
}

func (s *sim) submitWorkflow() {
	spec, deps, bad, sure := s.randomWorkflow()
	req := s.nextReq(reqWorkflow, func(r core.Reply, late bool) {
		s.checkWorkflowSubmitted(spec, deps, bad, sure, late, r)
	})
	s.submits = append(s.submits, req)
	s.logf("req %d submit-workflow %q key=%q steps=%d bad=%v", req, spec.Name, spec.Key, len(spec.Steps), bad)
	s.core.SubmitWorkflow(s.now, req, spec)
}

// checkWorkflowSubmitted checks the answer to a workflow submit.
// late says it was answered after it waited for space.
func (s *sim) checkWorkflowSubmitted(spec core.WorkflowSpec, deps [][]string, bad, sure, late bool, r core.Reply) {
	if r.Err != nil {
		var ve *core.VersionError
		var ie *core.InvalidError
		switch {
		case errors.As(r.Err, &ve):
			s.check(s.logVersion < fsm.LogVersion, "workflow refused for the log version %d: %v", s.logVersion, r.Err)
			s.covered(covVersionRefused)
		case errors.As(r.Err, &ie):
			// A dependency may have been purged while the submit waited.
			s.check(!sure || late && strings.Contains(ie.Field, "depends_on"), "valid workflow refused: %v", r.Err)
			s.check(strings.HasPrefix(ie.Field, "steps"), "error field %q does not name a step", ie.Field)
			if bad {
				s.covered(covWorkflowInvalid)
			}
		case errors.Is(r.Err, core.ErrOverloaded):
			s.check(!bad, "invalid workflow answered %v", r.Err)
		default:
			s.check(false, "workflow submit: unexpected error %v", r.Err)
		}
		s.check(len(s.batch) == 0 || late, "a refused workflow committed %d mutations", len(s.batch))
		return
	}
	res, ok := r.Value.(*core.WorkflowSubmitted)
	s.check(ok, "workflow submit answered %T", r.Value)
	s.check(s.logVersion >= 3, "workflow admitted under log format %d", s.logVersion)
	w, ok := s.a.Workflow(res.ID)
	s.check(ok, "submitted workflow %s is not durable", res.ID)
	for _, st := range res.Tasks {
		t, ok := s.a.Get(st.ID)
		s.check(ok && t.Workflow() == res.ID && t.Step() == st.Step, "step %s=%s of workflow %s: %+v", st.Step, st.ID, res.ID, t)
	}
	if res.Duplicate {
		s.check(spec.Key != "" && w.Key == spec.Key, "workflow %s (key %q) answered as a duplicate of key %q", w.ID, w.Key, spec.Key)
		s.covered(covWorkflowDuplicate)
		return
	}
	s.check(!bad, "invalid workflow admitted as %s", res.ID)
	s.check(w.Key == spec.Key && w.Name == spec.Name, "workflow %s: name %q key %q, want %q %q", w.ID, w.Name, w.Key, spec.Name, spec.Key)
	s.check(len(res.Tasks) == len(spec.Steps), "workflow %s: %d tasks for %d steps", w.ID, len(res.Tasks), len(spec.Steps))
	s.covered(covWorkflowAdmitted)
	byName := make(map[string]string, len(res.Tasks))
	for i, st := range res.Tasks {
		step := &spec.Steps[i]
		s.check(st.Step == step.Name, "workflow %s: task %d is step %q, want %q", w.ID, i, st.Step, step.Name)
		byName[st.Step] = st.ID
		t, _ := s.a.Get(st.ID)
		s.check(t.DepPolicy() == step.DepPolicy && t.External() == step.External, "step %s: policy %d external %v", t.ID, t.DepPolicy(), t.External())
		want := slices.Clone(deps[i])
		for _, name := range step.DependsOnSteps {
			want = append(want, byName[name])
		}
		got := slices.Clone(t.DependsOn())
		slices.Sort(want)
		want = slices.Compact(want)
		slices.Sort(got)
		if late && len(deps[i]) > 0 {
			continue // a key may name another task by now
		}
		s.check(slices.Equal(got, want), "step %s (%s) depends on %v, want %v", step.Name, t.ID, got, want)
	}
}

// spawnPlan is what a completion with children should insert.
type spawnPlan struct {
	names []string // of the children, then of the continuation
	then  bool
	deps  [][]string // ids of the existing tasks each one names
	bad   bool       // invalid on purpose
	sure  bool       // valid for sure
}

// randomChildren adds children (and maybe a continuation) to out, for the
// task id that lease was granted for.
func (s *sim) randomChildren(id string, out *core.Outcome) *spawnPlan {
	// The named steps of the task's workflow, which children may depend on.
	var existing []string
	if t, ok := s.a.Get(id); ok && t.Workflow() != "" {
		for _, m := range s.a.WorkflowTasks(t.Workflow()) {
			if m.Step() != "" {
				existing = append(existing, m.Step())
			}
		}
	}
	p := &spawnPlan{sure: true}
	child := func(named bool, earlier []core.StepSpec) core.StepSpec {
		sp, deps, ok := s.randomStepSpec()
		p.sure = p.sure && ok
		st := core.StepSpec{Spec: sp}
		if named {
			st.Name = fmt.Sprintf("c%d", s.spawned)
			s.spawned++
		}
		for _, e := range earlier {
			if e.Name != "" && s.pick(3) == 0 {
				st.DependsOnSteps = append(st.DependsOnSteps, e.Name)
			}
		}
		if len(existing) > 0 && s.pick(3) == 0 {
			st.DependsOnSteps = append(st.DependsOnSteps, existing[s.pick(len(existing))])
		}
		p.names = append(p.names, st.Name)
		p.deps = append(p.deps, deps)
		return st
	}
	n := s.pick(4)
	for i := 0; i < n; i++ {
		out.Children = append(out.Children, child(s.pick(4) != 0, out.Children))
	}
	if n == 0 || s.pick(2) == 0 {
		then := child(s.pick(2) == 0, nil)
		out.Then = &then
		p.then = true
	}
	if s.pick(8) == 0 {
		p.bad = true
		last := out.Then
		if len(out.Children) > 0 {
			last = &out.Children[len(out.Children)-1]
		}
		switch s.pick(4) {
		case 0:
			if len(existing) > 0 {
				last.Name = existing[s.pick(len(existing))] // a step of the workflow already
			} else {
				last.Name = "two words"
			}
		case 1:
			last.Key = "childkey"
		case 2:
			last.DependsOnSteps = append(last.DependsOnSteps, "nosuch")
		case 3:
			if len(out.Children) > 1 && out.Children[0].Name != "" {
				out.Children[1].Name = out.Children[0].Name
			} else {
				last.Name = ".."
			}
		}
	}
	p.sure = p.sure && !p.bad
	return p
}

// complete reports the end of an attempt under a random lease, current or
// not; a success may spawn children.
func (s *sim) complete() {
	lease := s.someLease()
	// Mostly successes, so that chains of dependencies get far.
	out := core.Outcome{Kind: []core.OutcomeKind{
		core.OutcomeSuccess, core.OutcomeSuccess, core.OutcomeSuccess, core.OutcomeSuccess, core.OutcomeSuccess,
		core.OutcomeSuccess, core.OutcomeRetryable, core.OutcomeRetryable, core.OutcomePermanent, core.OutcomeCancelled,
	}[s.pick(10)]}
	switch out.Kind {
	case core.OutcomeSuccess:
		out.Output = s.bytes(s.pick(40))
	case core.OutcomeRetryable:
		out.Message = "transient"
		if s.pick(3) == 0 {
			out.RetryAfter = time.Duration(s.pick(5000)) * time.Millisecond
		}
	default:
		out.Message = "boom"
	}
	id := s.leaseTask[lease]
	var plan *spawnPlan
	if out.Kind == core.OutcomeSuccess && s.pick(3) == 0 || s.pick(40) == 0 {
		plan = s.randomChildren(id, &out)
	}
	before, _ := s.a.Get(id)
	current := before != nil && before.Status == fsm.StatusRunning && before.Lease == lease
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) { s.checkCompletion(lease, id, current, before, out, plan, r) })
	s.logf("req %d complete %#x kind %d children %d then %v", req, lease, out.Kind, len(out.Children), out.Then != nil)
	s.core.Complete(s.now, req, lease, out)
}

// checkCompletion checks the answer to a completion: one under a lease that
// is not current is refused and changes nothing; children are inserted with
// it, or refused with it.
func (s *sim) checkCompletion(lease uint64, id string, current bool, before *fsm.Task, out core.Outcome, plan *spawnPlan, r core.Reply) {
	if !current {
		s.check(errors.Is(r.Err, core.ErrStaleLease), "completion under the stale lease %#x answered %v", lease, r.Err)
		s.check(len(s.batch) == 0, "a completion under a stale lease committed %d mutations", len(s.batch))
		if plan != nil {
			s.covered(covSpawnStale)
		}
		return
	}
	if plan == nil {
		s.check(r.Err == nil, "completion under the current lease %#x refused: %v", lease, r.Err)
		return
	}
	stillRunning := func() {
		t, ok := s.a.Get(id)
		s.check(ok && t.Status == fsm.StatusRunning && t.Lease == lease, "task %s lost its lease %#x to a refused completion: %+v", id, lease, t)
		s.check(len(s.batch) == 0, "a refused completion committed %d mutations", len(s.batch))
	}
	if out.Kind != core.OutcomeSuccess {
		var ie *core.InvalidError
		s.check(errors.As(r.Err, &ie), "children of a failed attempt: %v", r.Err)
		stillRunning()
		return
	}
	if r.Err != nil {
		var ve *core.VersionError
		var ie *core.InvalidError
		switch {
		case errors.As(r.Err, &ve):
			s.check(s.logVersion < fsm.LogVersion, "children refused for the log version %d: %v", s.logVersion, r.Err)
		case errors.As(r.Err, &ie):
			s.check(!plan.sure, "valid children refused: %v", r.Err)
			s.check(strings.HasPrefix(ie.Field, "children[") || strings.HasPrefix(ie.Field, "then."), "error field %q names no child", ie.Field)
			if plan.bad {
				s.covered(covSpawnInvalid)
			}
		case errors.Is(r.Err, core.ErrOverloaded):
			s.check(!plan.bad, "invalid children answered %v", r.Err)
		default:
			s.check(false, "completion with children: unexpected error %v", r.Err)
		}
		stillRunning()
		return
	}
	s.check(!plan.bad && s.logVersion >= 3, "invalid children admitted (log format %d)", s.logVersion)
	t, ok := s.a.Get(id)
	s.check(ok && t.Status == fsm.StatusSucceeded && t.Workflow() != "", "spawning task %s: %+v", id, t)
	if before.Workflow() == "" {
		w, ok := s.a.Workflow(t.Workflow())
		s.check(ok && w.Parent == id && w.Name == t.Kind, "workflow %s created for the children of %s: %+v", t.Workflow(), id, w)
		s.covered(covSpawnJoined)
	} else {
		s.check(t.Workflow() == before.Workflow(), "spawning task %s moved from workflow %s to %s", id, before.Workflow(), t.Workflow())
	}
	var kids []*fsm.Task
	for _, m := range s.batch {
		if m.Insert != nil && m.Insert.Parent() == id {
			kid, ok := s.a.Get(m.Insert.ID)
			s.check(ok, "child %s is not durable", m.Insert.ID)
			kids = append(kids, kid)
		}
	}
	s.check(len(kids) == len(plan.names), "task %s spawned %d tasks, want %d", id, len(kids), len(plan.names))
	for i, k := range kids {
		s.check(k.Workflow() == t.Workflow() && k.Step() == plan.names[i], "child %d of %s: workflow %s step %q, want %s %q", i, id, k.Workflow(), k.Step(), t.Workflow(), plan.names[i])
		for _, d := range plan.deps[i] {
			s.check(slices.Contains(k.DependsOn(), d), "child %s does not depend on %s: %v", k.ID, d, k.DependsOn())
		}
	}
	if plan.then {
		then := kids[len(kids)-1]
		for _, k := range kids[:len(kids)-1] {
			s.check(slices.Contains(then.DependsOn(), k.ID), "continuation %s does not depend on child %s: %v", then.ID, k.ID, then.DependsOn())
		}
	}
	s.covered(covSpawned)
}

// cancel cancels a task.
func (s *sim) cancel(ref core.TaskRef) {
	before, ok := s.lookup(ref)
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		if !ok {
			s.check(errors.Is(r.Err, core.ErrNotFound), "cancel of %s, which does not exist: %v", ref, r.Err)
			return
		}
		c, isCancel := r.Value.(core.Cancelled)
		s.check(r.Err == nil && isCancel && c.ID == before.ID && c.Cancelled == !before.Status.Terminal(),
			"cancel of %s (%s): %+v %v", before.ID, before.Status, r.Value, r.Err)
		if c.Cancelled {
			t, _ := s.a.Get(before.ID)
			s.check(t.Status == fsm.StatusCancelled, "cancelled task %s is %s", t.ID, t.Status)
			if before.Status == fsm.StatusRunning {
				s.check(s.aborted(before.Lease), "cancelled task %s: its worker is not told to stop", t.ID)
			}
			if before.Workflow() != "" {
				s.covered(covMemberCancelled)
			}
		}
	})
	s.logf("req %d cancel %s", req, ref)
	s.core.Cancel(s.now, req, ref)
}

// lookup finds a task of the durable state by id or key.
func (s *sim) lookup(ref core.TaskRef) (*fsm.Task, bool) {
	if ref.ID != "" {
		return s.a.Get(ref.ID)
	}
	return s.a.GetByKey(ref.Key)
}

// aborted reports whether the commit being released aborts lease.
func (s *sim) aborted(lease uint64) bool {
	return slices.ContainsFunc(s.aborts, func(a core.Abort) bool { return a.Lease == lease })
}

// cancelWorkflow cancels a workflow: every live member ends cancelled in
// the step, and the workflow with them.
func (s *sim) cancelWorkflow() {
	ref := s.someWorkflowRef()
	var w *fsm.Workflow
	var ok bool
	if ref.ID != "" {
		w, ok = s.a.Workflow(ref.ID)
	} else {
		w, ok = s.a.WorkflowByKey(ref.Key)
	}
	var live []*fsm.Task
	if ok {
		for _, m := range s.a.WorkflowTasks(w.ID) {
			if !m.Status.Terminal() {
				live = append(live, m)
			}
		}
	}
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		if !ok {
			s.check(errors.Is(r.Err, core.ErrNotFound), "cancel of workflow %s, which does not exist: %v", ref, r.Err)
			return
		}
		c, isCancel := r.Value.(core.CancelledWorkflow)
		s.check(r.Err == nil && isCancel && c.ID == w.ID && c.Cancelled == len(live),
			"cancel of workflow %s with %d live members: %+v %v", w.ID, len(live), r.Value, r.Err)
		after, _ := s.a.Workflow(w.ID)
		if w.Status != fsm.WorkflowRunning {
			s.check(after.Status == w.Status, "cancel of ended workflow %s changed it from %s to %s", w.ID, w.Status, after.Status)
			return
		}
		s.check(after.Status == fsm.WorkflowCancelled, "cancelled workflow %s is %s", w.ID, after.Status)
		s.covered(covWorkflowCancelledWhole)
		for _, m := range live {
			t, _ := s.a.Get(m.ID)
			s.check(t.Status == fsm.StatusCancelled && t.Error == "workflow cancelled", "member %s of cancelled workflow %s: %s %q", t.ID, w.ID, t.Status, t.Error)
			if m.Status == fsm.StatusRunning {
				s.check(s.aborted(m.Lease), "member %s of cancelled workflow %s: its worker is not told to stop", t.ID, w.ID)
			}
		}
	})
	s.logf("req %d cancel-workflow %s", req, ref)
	s.core.CancelWorkflow(s.now, req, ref)
}

// completeExternal completes a task through the API: mostly an external
// task, else any task (refused: not waiting).
func (s *sim) completeExternal() {
	ref := s.someRef()
	if len(s.external) > 0 && s.pick(3) != 0 {
		ref = core.TaskRef{ID: s.recent(s.external, 10)}
	}
	out := core.Outcome{Kind: core.OutcomeSuccess, Output: s.bytes(s.pick(16))}
	switch s.pick(10) {
	case 0, 1:
		out = core.Outcome{Kind: core.OutcomePermanent, Message: []string{"", "rejected"}[s.pick(2)]}
	case 2:
		out.Kind = core.OutcomeRetryable // not for an external task
	case 3:
		out.Children = []core.StepSpec{{Spec: core.Spec{Template: fsm.Template{Pool: "p0", Kind: "child"}}}}
	}
	before, ok := s.lookup(ref)
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		var ie *core.InvalidError
		switch {
		case !ok:
			s.check(errors.Is(r.Err, core.ErrNotFound), "external completion of %s, which does not exist: %v", ref, r.Err)
		case !before.External() || before.Status != fsm.StatusQueued:
			s.check(errors.Is(r.Err, core.ErrNotWaiting), "external completion of %s (external %v, %s): %v", before.ID, before.External(), before.Status, r.Err)
			s.covered(covExternalNotWaiting)
		case len(out.Children) > 0 || out.Kind != core.OutcomeSuccess && out.Kind != core.OutcomePermanent:
			s.check(errors.As(r.Err, &ie), "external completion with %d children, kind %d: %v", len(out.Children), out.Kind, r.Err)
		default:
			s.check(r.Err == nil && r.Value == before.ID, "external completion of waiting %s: %v %v", before.ID, r.Value, r.Err)
			t, _ := s.a.Get(before.ID)
			if out.Kind == core.OutcomeSuccess {
				s.check(t.Status == fsm.StatusSucceeded && bytes.Equal(t.Output, out.Output), "completed external %s: %s %q", t.ID, t.Status, t.Output)
				s.covered(covExternalCompleted)
			} else {
				msg := out.Message
				if msg == "" {
					msg = "failed by request"
				}
				s.check(t.Status == fsm.StatusFailed && t.Error == msg, "failed external %s: %s %q", t.ID, t.Status, t.Error)
				s.covered(covExternalFailed)
			}
			return
		}
		s.check(len(s.batch) == 0, "a refused external completion committed %d mutations", len(s.batch))
	})
	s.logf("req %d complete-external %s kind %d", req, ref, out.Kind)
	s.core.CompleteExternal(s.now, req, ref, out)
}

// addSchedule creates or replaces a schedule, which fires a task or a
// workflow.
func (s *sim) addSchedule() {
	crons := []string{"@every 5s", "@every 1m", "*/10 * * * * *", "0 * * * *", "*/2 * * * *", "bad cron"}
	tpl, _ := s.randomSpec()
	spec := core.ScheduleSpec{
		Name:         fmt.Sprintf("s%d", s.pick(4)),
		Cron:         crons[s.pick(len(crons))],
		Task:         tpl.Template,
		Overlap:      fsm.Overlap(s.pick(2)),
		CatchUp:      fsm.CatchUp(s.pick(3)),
		CatchUpLimit: uint32(s.pick(4)),
		Paused:       s.pick(5) == 0,
	}
	if s.pick(4) == 0 {
		spec.TZ = "Europe/Berlin"
	}
	bad := false
	if s.pick(3) == 0 {
		spec.Task = fsm.Template{}
		spec.Workflow = []string{"", "nightly"}[s.pick(2)]
		n := 1 + s.pick(3)
		for i := 0; i < n; i++ {
			sp, _ := s.randomSpec()
			st := fsm.StepTemplate{Name: fmt.Sprintf("st%d", i), Template: sp.Template, DepPolicy: fsm.DepPolicy(s.pick(2)), External: s.pick(20) == 0}
			for j := 0; j < i; j++ {
				if s.pick(2) == 0 {
					st.DependsOn = append(st.DependsOn, spec.Steps[j].Name)
				}
			}
			spec.Steps = append(spec.Steps, st)
		}
		if s.pick(10) == 0 {
			bad = true
			if s.pick(2) == 0 {
				spec.Task = tpl.Template // a task and a workflow
				if spec.Task.Kind == "" {
					spec.Task.Kind = "both"
				}
			} else {
				spec.Steps[0].DependsOn = []string{"nosuch"}
			}
		}
	}
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		var ie *core.InvalidError
		if bad {
			s.check(errors.As(r.Err, &ie), "invalid schedule answered %v %v", r.Value, r.Err)
		}
	})
	s.logf("req %d add-schedule %s %q steps %d bad %v", req, spec.Name, spec.Cron, len(spec.Steps), bad)
	s.core.AddSchedule(s.now, req, spec)
}

// drain works off what is left like diligent workers would, for at most
// rounds seconds: every pool polled with every label, every current lease
// completed successfully, every waiting external task completed, so that
// chains of dependencies and workflows run to their end.
func (s *sim) drain(rounds int) {
	s.logf("drain")
	polls := len(s.polls)
	defer func() {
		// The workers leave.
		for _, req := range s.polls[polls:] {
			s.core.Detach(req)
			delete(s.open, req)
		}
		s.commit()
	}()
	for i := 0; i < rounds && !s.t.Failed(); i++ {
		s.settleDue()
		for _, pool := range []string{"p0", "p1", "p2"} {
			for _, zone := range []string{"a", "b"} {
				offer := core.Offer{Worker: "drain", Pool: pool, Labels: []fsm.KV{{K: "zone", V: zone}}, Slots: 4}
				req := s.nextReq(reqPoll, nil)
				s.polls = append(s.polls, req)
				s.core.Poll(s.now, req, offer)
				s.commit()
			}
		}
		var running, waiting []*fsm.Task
		live := 0
		s.a.View().EachTask(func(t *fsm.Task) bool {
			switch {
			case t.Status == fsm.StatusRunning:
				running = append(running, t)
			case t.External() && t.Status == fsm.StatusQueued:
				waiting = append(waiting, t)
			}
			if !t.Status.Terminal() {
				live++
			}
			return true
		})
		if live == 0 {
			return
		}
		// Each call is decided on the state as it is then: a submit admitted
		// from the line in the meantime may have a deadline passed already.
		for _, t := range running {
			s.settleDue()
			if cur, ok := s.a.Get(t.ID); !ok || cur.Status != fsm.StatusRunning || cur.Lease != t.Lease {
				continue
			}
			out := core.Outcome{Kind: core.OutcomeSuccess, Output: []byte("drained")}
			req := s.nextReq(reqOther, func(r core.Reply, _ bool) { s.checkCompletion(t.Lease, t.ID, true, t, out, nil, r) })
			s.core.Complete(s.now, req, t.Lease, out)
			s.commit()
		}
		for _, t := range waiting {
			s.settleDue()
			if cur, ok := s.a.Get(t.ID); !ok || cur.Status != fsm.StatusQueued {
				continue
			}
			req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
				s.check(r.Err == nil && r.Value == t.ID, "external completion of waiting %s: %v %v", t.ID, r.Value, r.Err)
			})
			s.core.CompleteExternal(s.now, req, core.TaskRef{ID: t.ID}, core.Outcome{Kind: core.OutcomeSuccess})
			s.commit()
		}
		s.advance(time.Second)
		s.checkGraph(false)
	}
}
