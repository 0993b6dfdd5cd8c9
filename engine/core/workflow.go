package core

import (
	"fmt"
	"slices"
	"time"

	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/units"
)

// Dependencies and workflows.
//
// A task with dependencies is blocked while any of them lives. When its last
// dependency ends it is released (Unblock) in the same commit as that end;
// under policy succeeded, a dependency that ends without success ends it
// cancelled instead, and so on down the graph, in the same commit too. A
// workflow is a set of tasks submitted together (or spawned by one of its
// members); it ends, with a status derived from its members, in the commit
// in which its last live member ends, and is purged with its members once
// its retention has passed.

// Messages of the ends the workflow machinery decides.
const (
	msgWorkflowCancelled = "workflow cancelled"
	reasonWorkflowAbort  = "workflow cancelled"
	msgExternalFailed    = "failed by request"
)

// maxStepName bounds a step name (it names a file for the exec worker).
const maxStepName = 128

// workflow is the core's view of one workflow.
type workflow struct {
	rec     *fsm.Workflow    // the durable record as of the mutations emitted so far
	members []*task          // in id order
	steps   map[string]*task // named members
	live    int              // members that have not ended

	failed    bool // a member failed or expired
	cancelled bool // a member was cancelled
	cancelAll bool // cancelled as a whole

	settling  bool    // queued in Core.wfSettle
	purgeHeld bool    // its retention ended while a member had a live dependent elsewhere
	waiters   []ReqID // AttachWorkflow requests
}

// wfUnit is what a workflow submit adds to its admission unit.
type wfUnit struct {
	name, key string
	w         *workflow // created at admission
	dup       *workflow // the workflow the key already names
}

// depMessage is the error of a task ended because dependency d ended
// without success.
func depMessage(d *task) string {
	name := d.stepName()
	if name == "" {
		name = d.id
	}
	return fmt.Sprintf("dependency %s %s", name, d.status)
}

// checkStepName refuses a step name that could not name a file.
func checkStepName(name string) error {
	switch {
	case len(name) > maxStepName:
		return Invalid("name", "%s", units.TooBig(len(name), maxStepName))
	case name == "." || name == "..":
		return Invalid("name", "%q is not a step name", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return Invalid("name", "%q: use letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// The dependency graph
// ---------------------------------------------------------------------------

// linkDeps files t among the dependents of its dependencies (a task just
// inserted or recovered).
func (c *Core) linkDeps(t *task) {
	if t.flow == nil {
		return
	}
	for _, id := range t.flow.deps {
		d := c.tasks[id]
		if d == nil {
			continue // a purged dependency of a task that ended
		}
		if !t.status.Terminal() {
			d.fl().liveDependents++
		}
		if t.status == fsm.StatusBlocked && !d.status.Terminal() {
			df := d.fl()
			df.dependents = append(df.dependents, t)
			t.flow.waitingOn++
		}
	}
}

// ended does what follows from t's end (t.status is terminal now) for the
// graph: the retention of its dependencies, and its dependents, released
// or ended in turn.
func (c *Core) ended(t *task) {
	if t.flow == nil {
		return
	}
	for _, id := range t.flow.deps {
		if d := c.tasks[id]; d != nil {
			df := d.fl() // linkDeps gave d one
			df.liveDependents--
			if df.liveDependents == 0 {
				c.releaseHold(d)
			}
		}
	}
	deps := t.flow.dependents
	t.flow.dependents = nil
	for _, dt := range deps {
		if dt.status != fsm.StatusBlocked {
			continue // ended on its own meanwhile
		}
		df := dt.fl() // it has dependencies
		df.waitingOn--
		switch {
		case t.status != fsm.StatusSucceeded && df.depPolicy == fsm.DepSucceeded && !bugDepDone:
			c.finish(dt, fsm.StatusCancelled, nil, depMessage(t))
		case df.waitingOn == 0:
			c.unblock(dt)
		}
	}
}

// unblock releases a blocked task whose dependencies all ended.
func (c *Core) unblock(t *task) {
	c.mutate(fsm.Mutation{Unblock: &fsm.Unblock{ID: t.id, At: c.now}})
	if t.runAt > c.now {
		c.setStatus(t, fsm.StatusScheduled)
		c.timers.push(timer{when: t.runAt, kind: tmReady, id: t.id, gen: t.gen})
	} else {
		c.setStatus(t, fsm.StatusQueued)
		c.enqueue(t)
	}
	c.event(t, "")
}

// releaseHold schedules the purge that waited for the last dependent of d
// to end.
func (c *Core) releaseHold(d *task) {
	if d.flow != nil && d.flow.purgeHeld {
		d.flow.purgeHeld = false
		c.purges.ReplaceOrInsert(purgeItem{at: c.now, id: d.id})
	}
	if w := d.inWorkflow(); w != nil && w.purgeHeld {
		w.purgeHeld = false
		c.purges.ReplaceOrInsert(purgeItem{at: c.now, id: w.rec.ID, wf: true})
	}
}

// ---------------------------------------------------------------------------
// Workflows
// ---------------------------------------------------------------------------

// note records what the end of member t says of the workflow's status.
func (w *workflow) note(t *task) {
	switch t.status {
	case fsm.StatusFailed, fsm.StatusExpired:
		w.failed = true
	case fsm.StatusCancelled:
		w.cancelled = true
	}
}

// status is the status of a workflow whose members all ended.
func (w *workflow) status() fsm.WorkflowStatus {
	switch {
	case w.cancelAll:
		return fsm.WorkflowCancelled
	case w.failed:
		return fsm.WorkflowFailed
	case w.cancelled:
		return fsm.WorkflowCancelled
	}
	return fsm.WorkflowSucceeded
}

// createWorkflow starts a workflow.
func (c *Core) createWorkflow(name, key, schedule string, slot fsm.Instant, parent string) *workflow {
	rec := &fsm.Workflow{
		ID:          c.ids.next(uint64(int64(c.now) / int64(time.Millisecond))),
		Name:        name,
		Key:         key,
		Status:      fsm.WorkflowRunning,
		Schedule:    schedule,
		Slot:        slot,
		Parent:      parent,
		SubmittedAt: c.now,
		UpdatedAt:   c.now,
	}
	c.mutate(fsm.Mutation{PutWorkflow: rec.Clone()})
	w := c.trackWorkflow(rec)
	c.wfEvent(w, "")
	return w
}

// trackWorkflow files a workflow record (created now or recovered).
func (c *Core) trackWorkflow(rec *fsm.Workflow) *workflow {
	w := &workflow{rec: rec, steps: make(map[string]*task)}
	c.workflows[rec.ID] = w
	if rec.Key != "" {
		c.wfKeys[rec.Key] = w
	}
	if rec.Status.Terminal() {
		c.purges.ReplaceOrInsert(purgeItem{at: rec.FinishedAt.Add(c.cfg.Retention), id: rec.ID, wf: true})
	}
	return w
}

// join makes t a member of w.
func (c *Core) join(t *task, w *workflow) {
	t.fl().wf = w
	w.members = append(w.members, t)
	if s := t.stepName(); s != "" {
		w.steps[s] = t
	}
	if t.status.Terminal() {
		w.note(t)
	} else {
		w.live++
	}
}

// settleLater queues w for settleWorkflows.
func (c *Core) settleLater(w *workflow) {
	if !w.settling && w.rec.Status == fsm.WorkflowRunning {
		w.settling = true
		c.wfSettle = append(c.wfSettle, w)
	}
}

// settleWorkflows ends the running workflows whose members have all ended.
// It runs at the end of every step, so that a member ending in the same
// step as new members join (a spawn) does not end its workflow.
func (c *Core) settleWorkflows() {
	for len(c.wfSettle) > 0 {
		w := c.wfSettle[0]
		c.wfSettle = c.wfSettle[1:]
		w.settling = false
		if w.rec.Status != fsm.WorkflowRunning || w.live > 0 {
			continue
		}
		st := w.status()
		c.mutate(fsm.Mutation{EndWorkflow: &fsm.EndWorkflow{ID: w.rec.ID, Status: st, At: c.now}})
		rec := w.rec.Clone()
		rec.Status = st
		rec.FinishedAt = c.now
		rec.UpdatedAt = c.now
		w.rec = rec
		c.purges.ReplaceOrInsert(purgeItem{at: c.now.Add(c.cfg.Retention), id: rec.ID, wf: true})
		c.wfEvent(w, "")
		for _, req := range w.waiters {
			c.reply(req, rec.ID)
			delete(c.wfWaiting, req)
		}
		w.waiters = nil
	}
	c.wfSettle = c.wfSettle[:0]
}

// purgeWorkflow forgets an ended workflow and its members, unless a member
// is the dependency of a live task elsewhere (then it waits for it).
func (c *Core) purgeWorkflow(w *workflow) {
	ids := make([]string, 0, len(w.members))
	for _, m := range w.members {
		if m.flow != nil && m.flow.liveDependents > 0 {
			w.purgeHeld = true
			return
		}
		ids = append(ids, m.id)
	}
	if c.retained(purgeItem{id: w.rec.ID, wf: true}, w.rec.FinishedAt, ids...) {
		return
	}
	c.mutate(fsm.Mutation{PurgeWorkflow: &fsm.PurgeWorkflow{ID: w.rec.ID}})
	for _, m := range w.members {
		c.forget(m)
	}
	delete(c.workflows, w.rec.ID)
	if w.rec.Key != "" && c.wfKeys[w.rec.Key] == w {
		delete(c.wfKeys, w.rec.Key)
	}
}

// resolveWorkflow finds a workflow by id or key.
func (c *Core) resolveWorkflow(ref WorkflowRef) (*workflow, error) {
	switch {
	case ref.ID != "" && ref.Key != "":
		return nil, Invalid("ref", "give an id or a key, not both")
	case ref.ID == "" && ref.Key == "":
		return nil, Invalid("ref", "an id or a key is required")
	}
	w := c.workflows[ref.ID]
	if ref.ID == "" {
		w = c.wfKeys[ref.Key]
	}
	if w == nil {
		return nil, fmt.Errorf("workflow %s: %w", ref, ErrNotFound)
	}
	return w, nil
}

// prepareStep validates one step of a workflow submit or spawn.
func (c *Core) prepareStep(st *StepSpec) (*fsm.Task, error) {
	if st.Key != "" {
		return nil, Invalid("key", "a step takes no key: the workflow's key makes its submit idempotent")
	}
	if st.Name != "" {
		if err := checkStepName(st.Name); err != nil {
			return nil, err
		}
	}
	rec, err := c.prepare(&st.Spec)
	if err != nil {
		return nil, err
	}
	rec.MakeFlow().Step = st.Name
	return rec, nil
}

// SubmitWorkflow admits a workflow: its steps are inserted atomically, as
// one batch, each blocked until the steps it depends on end. Steps must
// have unique names, and depend only on earlier steps (so that a cycle
// cannot be written), or on existing tasks through their DependsOn. The
// reply (held) is a *WorkflowSubmitted; a key that names a workflow
// already answers with it (Duplicate) and changes nothing. Bounds and
// parking are those of an atomic batch; errors name the step as
// steps[i].field.
func (c *Core) SubmitWorkflow(now time.Time, req ReqID, spec WorkflowSpec) {
	c.begin(now)
	defer c.serve()
	if c.shutdown {
		c.fail(req, ErrShuttingDown)
		return
	}
	if err := c.requireVersion("a workflow", 3); err != nil {
		c.fail(req, err)
		return
	}
	if spec.Key != "" {
		if w := c.wfKeys[spec.Key]; w != nil {
			c.reply(req, duplicateWorkflow(w))
			return
		}
	}
	if len(spec.Steps) == 0 {
		c.fail(req, Invalid("steps", "at least one step is required"))
		return
	}
	if len(spec.Name) > c.cfg.MaxKindLen {
		c.fail(req, Invalid("name", "%s", units.TooBig(len(spec.Name), c.cfg.MaxKindLen)))
		return
	}
	u := &unit{req: req, specs: make([]*fsm.Task, len(spec.Steps)), batch: true, wf: &wfUnit{name: spec.Name, key: spec.Key}}
	names := make(map[string]int, len(spec.Steps))
	for i := range spec.Steps {
		st := &spec.Steps[i]
		fail := func(err error) { c.fail(req, prefixed(fmt.Sprintf("steps[%d].", i), err)) }
		if st.Name == "" {
			fail(Invalid("name", "must not be empty"))
			return
		}
		if _, dup := names[st.Name]; dup {
			fail(Invalid("name", "step %q is named twice", st.Name))
			return
		}
		rec, err := c.prepareStep(st)
		if err != nil {
			fail(err)
			return
		}
		u.specs[i] = rec
		if len(st.DependsOn) > 0 {
			if u.refs == nil {
				u.refs = make([][]TaskRef, len(spec.Steps))
			}
			u.refs[i] = st.DependsOn
		}
		if len(st.DependsOnSteps) > 0 {
			if u.stepDeps == nil {
				u.stepDeps = make([][]int, len(spec.Steps))
			}
			for _, name := range st.DependsOnSteps {
				j, ok := names[name]
				if !ok {
					fail(Invalid("depends_on", "%q is not an earlier step of the workflow", name))
					return
				}
				u.stepDeps[i] = append(u.stepDeps[i], j)
			}
		}
		names[st.Name] = i
	}
	c.submitUnit(u)
}

// duplicateWorkflow is the answer to a submit whose key names w.
func duplicateWorkflow(w *workflow) *WorkflowSubmitted {
	res := &WorkflowSubmitted{ID: w.rec.ID, Duplicate: true}
	for _, m := range w.members {
		if s := m.stepName(); s != "" {
			res.Tasks = append(res.Tasks, StepTask{Step: s, ID: m.id})
		}
	}
	return res
}

// answerWorkflow answers a workflow submit unit.
func (c *Core) answerWorkflow(u *unit, subs []Submitted, err error) {
	switch {
	case err != nil:
		c.fail(u.req, err)
	case u.wf.dup != nil:
		c.reply(u.req, duplicateWorkflow(u.wf.dup))
	default:
		res := &WorkflowSubmitted{ID: u.wf.w.rec.ID, Tasks: make([]StepTask, len(subs))}
		for i, s := range subs {
			res.Tasks[i] = StepTask{Step: u.specs[i].Step(), ID: s.ID}
		}
		c.reply(u.req, res)
	}
}

// CancelWorkflow ends every live member of a workflow cancelled, in one
// commit: running attempts lose their lease and their workers are told to
// stop. The workflow ends cancelled in the same commit. The reply (held)
// is a CancelledWorkflow counting the members this call ended (0 for a
// workflow that had ended); ErrNotFound for an unknown workflow.
func (c *Core) CancelWorkflow(now time.Time, req ReqID, ref WorkflowRef) {
	c.begin(now)
	defer c.serve()
	w, err := c.resolveWorkflow(ref)
	if err != nil {
		c.fail(req, err)
		return
	}
	if w.rec.Status != fsm.WorkflowRunning {
		c.reply(req, CancelledWorkflow{ID: w.rec.ID})
		return
	}
	w.cancelAll = true
	before := w.live
	// Last first: dependents end before their dependencies, so that each
	// says it was cancelled with its workflow, not for a dependency.
	for i := len(w.members) - 1; i >= 0; i-- {
		m := w.members[i]
		if m.status.Terminal() {
			continue
		}
		if m.status == fsm.StatusRunning {
			c.abort(m, reasonWorkflowAbort)
		}
		c.finish(m, fsm.StatusCancelled, nil, msgWorkflowCancelled)
	}
	c.reply(req, CancelledWorkflow{ID: w.rec.ID, Cancelled: before - w.live})
}

// AttachWorkflow waits for a workflow to end. The reply (held) is the
// workflow's id: at once for an ended workflow, else when it ends.
// ErrNotFound for an unknown workflow.
func (c *Core) AttachWorkflow(now time.Time, req ReqID, ref WorkflowRef) {
	c.begin(now)
	defer c.serve()
	w, err := c.resolveWorkflow(ref)
	if err != nil {
		c.fail(req, err)
		return
	}
	if w.rec.Status != fsm.WorkflowRunning {
		c.reply(req, w.rec.ID)
		return
	}
	if old, ok := c.wfWaiting[req]; ok {
		old.waiters = slices.DeleteFunc(old.waiters, func(r ReqID) bool { return r == req })
	}
	w.waiters = append(w.waiters, req)
	c.wfWaiting[req] = w
}

// CompleteExternal ends an external task that waits for its completion
// (queued: its dependencies done and its run time come) with out: success
// with an output, or a permanent failure with a reason. The reply (held)
// is the task's id. A task that is not external, or not waiting, is
// refused with an error wrapping ErrNotWaiting; ErrNotFound for an unknown
// task.
func (c *Core) CompleteExternal(now time.Time, req ReqID, ref TaskRef, out Outcome) {
	c.begin(now)
	defer c.serve()
	t, err := c.resolveRef(ref)
	if err != nil {
		c.fail(req, err)
		return
	}
	switch {
	case !t.isExternal():
		c.fail(req, fmt.Errorf("%w: task %s is not an external task", ErrNotWaiting, t.id))
		return
	case t.status != fsm.StatusQueued:
		c.fail(req, fmt.Errorf("%w: task %s is %s", ErrNotWaiting, t.id, t.status))
		return
	case len(out.Children) > 0 || out.Then != nil:
		c.fail(req, Invalid("children", "an external task spawns no children"))
		return
	}
	switch out.Kind {
	case OutcomeSuccess:
		if len(out.Output) > c.cfg.MaxOutput {
			c.fail(req, Invalid("output", "%s", units.TooBig(len(out.Output), c.cfg.MaxOutput)))
			return
		}
		c.finish(t, fsm.StatusSucceeded, slices.Clone(out.Output), "")
	case OutcomePermanent:
		c.finish(t, fsm.StatusFailed, nil, orDefault(out.Message, msgExternalFailed))
	default:
		c.fail(req, Invalid("outcome", "an external task ends with success or a permanent failure"))
		return
	}
	c.reply(req, t.id)
}

// spawn completes t successfully with out.Output and inserts out's
// children and continuation in its workflow, creating one (which t joins)
// when t has none. Nothing changes when it returns an error: the
// completion is refused with it.
func (c *Core) spawn(t *task, out Outcome) error {
	if err := c.requireVersion("spawning children", 3); err != nil {
		return err
	}
	steps := make([]*StepSpec, 0, len(out.Children)+1)
	for i := range out.Children {
		steps = append(steps, &out.Children[i])
	}
	if out.Then != nil {
		steps = append(steps, out.Then)
	}
	field := func(i int) string {
		if i == len(out.Children) {
			return "then."
		}
		return fmt.Sprintf("children[%d].", i)
	}
	w := t.inWorkflow()
	recs := make([]*fsm.Task, len(steps))
	deps := make([][]*task, len(steps)) // dependencies among existing tasks
	after := make([][]int, len(steps))  // and among the spawned steps
	names := make(map[string]int)
	var d delta
	for i, st := range steps {
		rec, err := c.prepareStep(st)
		if err != nil {
			return prefixed(field(i), err)
		}
		if st.Name != "" {
			_, spawned := names[st.Name]
			existing := w != nil && w.steps[st.Name] != nil
			if spawned || existing {
				return prefixed(field(i), Invalid("name", "step %q exists in the workflow", st.Name))
			}
		}
		for j, ref := range st.DependsOn {
			var dt *task
			if err := ref.Check(); err == nil {
				if ref.ID != "" {
					dt = c.tasks[ref.ID]
				} else {
					dt = c.keys[ref.Key]
				}
			}
			if dt == nil {
				return prefixed(fmt.Sprintf("%sdepends_on[%d].", field(i), j), Invalid("ref", "task %s does not exist (unknown, or purged)", ref))
			}
			deps[i] = append(deps[i], dt)
		}
		for _, name := range st.DependsOnSteps {
			if j, ok := names[name]; ok {
				after[i] = append(after[i], j)
				continue
			}
			if w != nil && w.steps[name] != nil {
				deps[i] = append(deps[i], w.steps[name])
				continue
			}
			return prefixed(field(i), Invalid("depends_on", "%q is neither an earlier child nor a step of the workflow", name))
		}
		if st.Name != "" {
			names[st.Name] = i
		}
		recs[i] = rec
		d.add(pairKey{rec.Pool, rec.Priority})
	}
	if !c.fits(d, false) {
		return ErrOverloaded
	}
	var join *workflow
	if w == nil {
		w = c.createWorkflow(t.kind, "", "", 0, t.id)
		join = w
	}
	c.finishJoin(t, fsm.StatusSucceeded, slices.Clone(out.Output), "", join, 0)
	ids := make([]*task, len(steps))
	for i, rec := range recs {
		all := deps[i]
		for _, j := range after[i] {
			all = append(all, ids[j])
		}
		if out.Then != nil && i == len(out.Children) {
			all = append(all, ids[:len(out.Children)]...)
		}
		ids[i] = c.insertMember(rec, all, w, t.id)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Recurring workflows
// ---------------------------------------------------------------------------

// checkStepTemplates validates the workflow of a recurring schedule and
// returns its steps normalised.
func (c *Core) checkStepTemplates(steps []fsm.StepTemplate) ([]fsm.StepTemplate, error) {
	out := make([]fsm.StepTemplate, len(steps))
	names := make(map[string]bool, len(steps))
	for i, st := range steps {
		fail := func(err error) ([]fsm.StepTemplate, error) {
			return nil, prefixed(fmt.Sprintf("steps[%d].", i), err)
		}
		switch {
		case st.Name == "":
			return fail(Invalid("name", "must not be empty"))
		case names[st.Name]:
			return fail(Invalid("name", "step %q is named twice", st.Name))
		case st.DepPolicy > fsm.DepDone:
			return fail(Invalid("dependency_policy", "unknown policy %d", st.DepPolicy))
		}
		if err := checkStepName(st.Name); err != nil {
			return fail(err)
		}
		tpl, err := c.checkTemplate(&st.Template)
		if err != nil {
			return fail(err)
		}
		for _, name := range st.DependsOn {
			if !names[name] {
				return fail(Invalid("depends_on", "%q is not an earlier step of the workflow", name))
			}
		}
		out[i] = fsm.StepTemplate{
			Name: st.Name, Template: tpl, DependsOn: slices.Clone(st.DependsOn),
			DepPolicy: st.DepPolicy, External: st.External,
		}
		names[st.Name] = true
	}
	return out, nil
}

// fireWorkflow inserts the workflow of one fire of s and returns its id,
// or "" when the slot cannot fire (its key exists already, or the pending
// bounds are full).
func (c *Core) fireWorkflow(s *schedule, slot time.Time) string {
	key := c.refireKey(slotKey(s.rec.Name, slot))
	if _, ok := c.wfKeys[key]; ok {
		return ""
	}
	var d delta
	for i := range s.rec.Steps {
		d.add(pairKey{s.rec.Steps[i].Pool, s.rec.Steps[i].Priority})
	}
	if !c.fits(d, false) {
		return ""
	}
	at := fsm.InstantOf(slot)
	name := s.rec.Workflow
	if name == "" {
		name = s.rec.Name
	}
	w := c.createWorkflow(name, key, s.rec.Name, at, "")
	ids := make(map[string]*task, len(s.rec.Steps))
	for _, st := range s.rec.Steps {
		rec := &fsm.Task{
			Template: c.resolve(st.Template),
			RunAt:    at,
			Schedule: s.rec.Name,
			Slot:     at,
			Flow:     &fsm.Flow{Step: st.Name, DepPolicy: st.DepPolicy, External: st.External},
		}
		var deps []*task
		for _, name := range st.DependsOn {
			deps = append(deps, ids[name])
		}
		ids[st.Name] = c.insertMember(rec, deps, w, "")
	}
	return w.rec.ID
}
