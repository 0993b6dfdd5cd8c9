package clienttest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/internal/units"
)

// Messages of the ends the workflow machinery decides, as a real cluster
// words them.
const (
	msgWorkflowCancelled = "workflow cancelled"
	reasonWorkflowAbort  = "workflow cancelled"
)

// maxStepName bounds a step name (it names a file for the exec worker).
const maxStepName = 128

// workflow is a stored workflow and what the cluster keeps about it
// besides.
type workflow struct {
	p       *cronoqv1.Workflow // without its members
	members []*task            // in the order they joined (id order)
	steps   map[string]*task   // named members
	live    int                // members that have not ended

	failed    bool // a member failed or expired
	cancelled bool // a member was cancelled
	cancelAll bool // cancelled as a whole
	settling  bool // queued in Cluster.wfSettle
}

// joinLocked makes t a member of w.
func (w *workflow) joinLocked(t *task) {
	t.wf = w
	w.members = append(w.members, t)
	if name := t.p.GetStep(); name != "" {
		w.steps[name] = t
	}
	if terminal(t.p.GetStatus()) {
		w.note(t.p.GetStatus())
	} else {
		w.live++
	}
}

// leaveLocked takes t out of w (PutTask replacing it).
func (w *workflow) leaveLocked(c *Cluster, t *task) {
	w.members = slices.DeleteFunc(w.members, func(m *task) bool { return m == t })
	if name := t.p.GetStep(); name != "" && w.steps[name] == t {
		delete(w.steps, name)
	}
	if !terminal(t.p.GetStatus()) {
		w.live--
		if w.live == 0 {
			c.settleLaterLocked(w)
		}
	}
	t.wf = nil
}

// note records what a member's end with status s says of the workflow's
// status.
func (w *workflow) note(s cronoqv1.Status) {
	switch s {
	case cronoqv1.Status_STATUS_FAILED, cronoqv1.Status_STATUS_EXPIRED:
		w.failed = true
	case cronoqv1.Status_STATUS_CANCELLED:
		w.cancelled = true
	}
}

// status is the status of a workflow whose members all ended.
func (w *workflow) status() cronoqv1.WorkflowStatus {
	switch {
	case w.cancelAll:
		return cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED
	case w.failed:
		return cronoqv1.WorkflowStatus_WORKFLOW_STATUS_FAILED
	case w.cancelled:
		return cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED
	}
	return cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED
}

func (w *workflow) running() bool {
	return w.p.GetStatus() == cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING
}

// protoLocked returns the workflow as the API shows it, with its members
// in id order when members is set.
func (w *workflow) protoLocked(members bool) *cronoqv1.Workflow {
	out := proto.Clone(w.p).(*cronoqv1.Workflow)
	if members {
		for _, m := range w.sortedMembers() {
			out.Tasks = append(out.Tasks, cloneTask(m.p))
		}
	}
	return out
}

func (w *workflow) sortedMembers() []*task {
	ms := slices.Clone(w.members)
	slices.SortFunc(ms, func(a, b *task) int { return strings.Compare(a.p.GetId(), b.p.GetId()) })
	return ms
}

// pageLocked returns the workflow with one page of its members, as Get and
// Wait answer it: those after after, at most limit (0: no limit), ending
// before the member that would pass the page's bytes; next is the cursor
// of the following page, "" after the last.
func (c *Cluster) pageLocked(w *workflow, after string, limit int) (out *cronoqv1.Workflow, next string) {
	out = w.protoLocked(false)
	size := 0
	for _, m := range w.sortedMembers() {
		if m.p.GetId() <= after {
			continue
		}
		t := cloneTask(m.p)
		size += proto.Size(t)
		if n := len(out.Tasks); n > 0 && (size > c.cfg.maxPageBytes || limit > 0 && n == limit) {
			return out, out.Tasks[n-1].GetId()
		}
		out.Tasks = append(out.Tasks, t)
	}
	return out, ""
}

// createWorkflowLocked starts a workflow.
func (c *Cluster) createWorkflowLocked(name, key, schedule string, slot time.Time, parent string) *workflow {
	now := c.now()
	var id string
	for {
		c.wfSeq++
		id = fmt.Sprintf("W%08d", c.wfSeq)
		if c.workflows[id] == nil {
			break
		}
	}
	w := &workflow{
		p: &cronoqv1.Workflow{
			Id: id, Name: name, Key: key, Status: cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING,
			SubmittedAt: ts(now), UpdatedAt: ts(now), Schedule: schedule, Slot: ts(slot), Parent: parent,
		},
		steps: make(map[string]*task),
	}
	c.workflows[id] = w
	if key != "" {
		c.wfByKey[key] = w
	}
	c.applied++
	c.wfEventLocked(w)
	return w
}

// wfEventLocked publishes w's current status.
func (c *Cluster) wfEventLocked(w *workflow) {
	c.publishLocked(&cronoqv1.Event{
		Kind:           w.p.GetName(),
		At:             ts(c.now()),
		Workflow:       w.p.GetId(),
		WorkflowStatus: w.p.GetStatus(),
	})
}

// settleLaterLocked queues w for settleWorkflowsLocked.
func (c *Cluster) settleLaterLocked(w *workflow) {
	if !w.settling && w.running() {
		w.settling = true
		c.wfSettle = append(c.wfSettle, w)
	}
}

// settleWorkflowsLocked ends the running workflows whose members have all
// ended.
func (c *Cluster) settleWorkflowsLocked() {
	for len(c.wfSettle) > 0 {
		w := c.wfSettle[0]
		c.wfSettle = c.wfSettle[1:]
		w.settling = false
		if !w.running() || w.live > 0 {
			continue
		}
		now := ts(c.now())
		w.p.Status = w.status()
		w.p.FinishedAt, w.p.UpdatedAt = now, now
		c.applied++
		c.wfEventLocked(w)
	}
	c.wfSettle = nil
}

// lookupWorkflowLocked finds the workflow of a reference.
func (c *Cluster) lookupWorkflowLocked(ref *cronoqv1.WorkflowRef) (*workflow, error) {
	id, key := ref.GetId(), ref.GetKey()
	switch {
	case id != "" && key != "":
		return nil, invalid("ref", "give an id or a key, not both")
	case id == "" && key == "":
		return nil, invalid("ref", "an id or a key is required")
	}
	w := c.workflows[id]
	what := "workflow " + id
	if id == "" {
		w = c.wfByKey[key]
		what = fmt.Sprintf("workflow with key %q", key)
	}
	if w == nil {
		return nil, apierr.NotFound(what + " not found")
	}
	return w, nil
}

// checkStepName refuses a step name that could not name a file.
func checkStepName(name string) error {
	switch {
	case len(name) > maxStepName:
		return invalid("name", "%s", units.TooBig(len(name), maxStepName))
	case name == "." || name == "..":
		return invalid("name", "%q is not a step name", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return invalid("name", "%q: use letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// prepareStep validates one step of a workflow submit or spawn and builds
// its task (without an id).
func (c *Cluster) prepareStep(st *cronoqv1.WorkflowStep, now time.Time) (*cronoqv1.Task, error) {
	if st.GetSpec().GetKey() != "" {
		return nil, invalid("key", "a step takes no key: the workflow's key makes its submit idempotent")
	}
	if name := st.GetName(); name != "" {
		if err := checkStepName(name); err != nil {
			return nil, err
		}
	}
	rec, err := c.prepare(st.GetSpec(), now)
	if err != nil {
		return nil, err
	}
	rec.Step = st.GetName()
	return rec, nil
}

// submitWorkflowLocked admits a workflow: its steps are inserted at once,
// each blocked until the steps it depends on end. Errors name the step as
// steps[i].field; a key that names a workflow answers with it.
func (c *Cluster) submitWorkflowLocked(spec *cronoqv1.WorkflowSpec) (*cronoqv1.SubmitWorkflowResponse, error) {
	if key := spec.GetKey(); key != "" {
		if w := c.wfByKey[key]; w != nil {
			return duplicateWorkflow(w), nil
		}
	}
	steps := spec.GetSteps()
	switch {
	case len(steps) == 0:
		return nil, invalid("steps", "at least one step is required")
	case len(spec.GetName()) > maxKindLen:
		return nil, invalid("name", "%s", units.TooBig(len(spec.GetName()), maxKindLen))
	}
	now := c.now()
	recs := make([]*cronoqv1.Task, len(steps))
	after := make([][]int, len(steps))
	names := make(map[string]int, len(steps))
	adds := map[string]int{}
	for i, st := range steps {
		fail := func(err error) error { return prefixed(fmt.Sprintf("steps[%d].", i), err) }
		if st.GetName() == "" {
			return nil, fail(invalid("name", "must not be empty"))
		}
		if _, dup := names[st.GetName()]; dup {
			return nil, fail(invalid("name", "step %q is named twice", st.GetName()))
		}
		rec, err := c.prepareStep(st, now)
		if err != nil {
			return nil, fail(err)
		}
		for _, name := range st.GetDependsOn() {
			j, ok := names[name]
			if !ok {
				return nil, fail(invalid("depends_on", "%q is not an earlier step of the workflow", name))
			}
			after[i] = append(after[i], j)
		}
		names[st.GetName()] = i
		recs[i] = rec
		adds[rec.GetTemplate().GetPool()]++
	}
	deps := make([][]*task, len(steps))
	for i, st := range steps {
		for j, ref := range st.GetSpec().GetDependsOn() {
			t, err := c.existingLocked(ref)
			if err != nil {
				return nil, prefixed(fmt.Sprintf("steps[%d].depends_on[%d].", i, j), err)
			}
			deps[i] = append(deps[i], t)
		}
	}
	if err := c.fitAllLocked(adds); err != nil {
		return nil, err
	}
	w := c.createWorkflowLocked(spec.GetName(), spec.GetKey(), "", time.Time{}, "")
	res := &cronoqv1.SubmitWorkflowResponse{Id: w.p.GetId()}
	ids := make([]*task, len(steps))
	for i, rec := range recs {
		all := deps[i]
		for _, j := range after[i] {
			all = append(all, ids[j])
		}
		ids[i] = c.insertLocked(rec, all, w, "")
		res.Tasks = append(res.Tasks, &cronoqv1.StepTask{Step: rec.GetStep(), Id: ids[i].p.GetId()})
	}
	return res, nil
}

// duplicateWorkflow is the answer to a submit whose key names w: its named
// members, in id order.
func duplicateWorkflow(w *workflow) *cronoqv1.SubmitWorkflowResponse {
	res := &cronoqv1.SubmitWorkflowResponse{Id: w.p.GetId(), Duplicate: true}
	for _, m := range w.protoLocked(true).GetTasks() {
		if m.GetStep() != "" {
			res.Tasks = append(res.Tasks, &cronoqv1.StepTask{Step: m.GetStep(), Id: m.GetId()})
		}
	}
	return res
}

// spawnLocked completes t successfully with comp's output and inserts
// comp's children and continuation in its workflow, creating one (which t
// joins) when t has none. Nothing changes when it returns an error: the
// completion is refused with it.
func (c *Cluster) spawnLocked(t *task, comp *cronoqv1.Completion) error {
	steps := slices.Clone(comp.GetChildren())
	if comp.GetThen() != nil {
		steps = append(steps, comp.GetThen())
	}
	nChildren := len(comp.GetChildren())
	field := func(i int) string {
		if i == nChildren {
			return "then."
		}
		return fmt.Sprintf("children[%d].", i)
	}
	w := t.wf
	now := c.now()
	recs := make([]*cronoqv1.Task, len(steps))
	deps := make([][]*task, len(steps)) // dependencies among existing tasks
	after := make([][]int, len(steps))  // and among the spawned steps
	names := make(map[string]int)
	adds := map[string]int{}
	for i, st := range steps {
		rec, err := c.prepareStep(st, now)
		if err != nil {
			return prefixed(field(i), err)
		}
		name := st.GetName()
		if name != "" {
			_, spawned := names[name]
			if spawned || w != nil && w.steps[name] != nil {
				return prefixed(field(i), invalid("name", "step %q exists in the workflow", name))
			}
		}
		for j, ref := range st.GetSpec().GetDependsOn() {
			var dt *task
			if ref.GetId() != "" {
				dt = c.tasks[ref.GetId()]
			} else {
				dt = c.byKey[ref.GetKey()]
			}
			if dt == nil {
				return prefixed(fmt.Sprintf("%sdepends_on[%d].", field(i), j),
					invalid("ref", "task %s does not exist (unknown, or purged)", refString(ref)))
			}
			deps[i] = append(deps[i], dt)
		}
		for _, dep := range st.GetDependsOn() {
			if j, ok := names[dep]; ok {
				after[i] = append(after[i], j)
				continue
			}
			if w != nil && w.steps[dep] != nil {
				deps[i] = append(deps[i], w.steps[dep])
				continue
			}
			return prefixed(field(i), invalid("depends_on", "%q is neither an earlier child nor a step of the workflow", dep))
		}
		if name != "" {
			names[name] = i
		}
		recs[i] = rec
		adds[rec.GetTemplate().GetPool()]++
	}
	if err := c.fitAllLocked(adds); err != nil {
		return err
	}
	var join *workflow
	if w == nil {
		w = c.createWorkflowLocked(t.p.GetTemplate().GetKind(), "", "", time.Time{}, t.p.GetId())
		join = w
	}
	c.finishJoinLocked(t, cronoqv1.Status_STATUS_SUCCEEDED, slices.Clone(comp.GetOutput()), "", "", join, 0)
	ids := make([]*task, len(steps))
	for i, rec := range recs {
		all := deps[i]
		for _, j := range after[i] {
			all = append(all, ids[j])
		}
		if i == nChildren {
			all = append(all, ids[:nChildren]...)
		}
		ids[i] = c.insertLocked(rec, all, w, t.p.GetId())
	}
	return nil
}

// cancelWorkflowLocked ends every live member of w cancelled, dependents
// before their dependencies (so that each says it was cancelled with its
// workflow), revoking running leases with an Abort to their workers. It
// returns how many members it ended.
func (c *Cluster) cancelWorkflowLocked(w *workflow) int {
	if !w.running() {
		return 0
	}
	w.cancelAll = true
	before := w.live
	ms := slices.Clone(w.members)
	slices.SortFunc(ms, func(a, b *task) int { return strings.Compare(b.p.GetId(), a.p.GetId()) })
	for _, m := range ms {
		if m.wf == w && !terminal(m.p.GetStatus()) {
			c.finishLocked(m, cronoqv1.Status_STATUS_CANCELLED, nil, msgWorkflowCancelled, reasonWorkflowAbort)
		}
	}
	return before - w.live
}

// completeExternalLocked ends an external task waiting for its completion
// (queued: its dependencies ended and its run time came) with success and
// an output, or a permanent failure with a message.
func (c *Cluster) completeExternalLocked(t *task, req *cronoqv1.CompleteRequest) error {
	const notWaiting = "not waiting for an external completion: task %s is %s"
	switch {
	case !t.p.GetExternal():
		return apierr.NotWaiting(fmt.Sprintf(notWaiting, t.p.GetId(), "not an external task"))
	case t.p.GetStatus() != cronoqv1.Status_STATUS_QUEUED:
		return apierr.NotWaiting(fmt.Sprintf(notWaiting, t.p.GetId(), statusName(t.p.GetStatus())))
	}
	switch req.GetOutcome() {
	case cronoqv1.OutcomeKind_OUTCOME_SUCCESS:
		if out := req.GetOutput(); len(out) > c.cfg.maxOutput {
			return invalid("output", "%s", units.TooBig(len(out), c.cfg.maxOutput))
		}
		c.finishLocked(t, cronoqv1.Status_STATUS_SUCCEEDED, slices.Clone(req.GetOutput()), "", "")
	case cronoqv1.OutcomeKind_OUTCOME_PERMANENT:
		c.finishLocked(t, cronoqv1.Status_STATUS_FAILED, nil, orDefault(req.GetMessage(), msgExternalFailed), "")
	default:
		return invalid("outcome", "an external task ends with success or a permanent failure")
	}
	return nil
}

// ---------------------------------------------------------------------------
// WorkflowService

type workflowService struct{ n *Node }

func (s *workflowService) Submit(ctx context.Context, req *connect.Request[cronoqv1.SubmitWorkflowRequest]) (*connect.Response[cronoqv1.SubmitWorkflowResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.SubmitWorkflowResponse, error) {
		return s.n.c.submitWorkflowLocked(req.Msg.GetSpec())
	})
}

func (s *workflowService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetWorkflowRequest]) (*connect.Response[cronoqv1.GetWorkflowResponse], error) {
	mode := leaderCall
	if req.Msg.GetStale() {
		mode = anyNode
	}
	return unary(ctx, s.n, req, mode, func(sv *served) (*cronoqv1.GetWorkflowResponse, error) {
		c := s.n.c
		if req.Msg.GetTasksLimit() < 0 {
			return nil, invalid("tasks_limit", "must not be negative")
		}
		w, err := c.lookupWorkflowLocked(req.Msg.GetRef())
		if err != nil {
			return nil, err
		}
		page, next := c.pageLocked(w, req.Msg.GetTasksAfter(), int(req.Msg.GetTasksLimit()))
		return &cronoqv1.GetWorkflowResponse{Workflow: page, Meta: c.readMetaLocked(sv, req.Msg.GetStale()), TasksNext: next}, nil
	})
}

// Wait holds until the workflow ends or the requested timeout passes, and
// answers with the workflow and its members as they then are.
func (s *workflowService) Wait(ctx context.Context, req *connect.Request[cronoqv1.WaitWorkflowRequest]) (*connect.Response[cronoqv1.WaitWorkflowResponse], error) {
	c := s.n.c
	return longPoll(ctx, s.n, req, req.Msg.GetTimeout(), func() (*cronoqv1.WaitWorkflowResponse, bool, error) {
		w, err := c.lookupWorkflowLocked(req.Msg.GetRef())
		if err != nil {
			return nil, false, err
		}
		return c.waitAnswerLocked(w), !w.running(), nil
	})
}

// waitAnswerLocked is w with the first page of its members.
func (c *Cluster) waitAnswerLocked(w *workflow) *cronoqv1.WaitWorkflowResponse {
	page, next := c.pageLocked(w, "", 0)
	return &cronoqv1.WaitWorkflowResponse{Workflow: page, TasksNext: next}
}

func (s *workflowService) Cancel(ctx context.Context, req *connect.Request[cronoqv1.CancelWorkflowRequest]) (*connect.Response[cronoqv1.CancelWorkflowResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.CancelWorkflowResponse, error) {
		c := s.n.c
		w, err := c.lookupWorkflowLocked(req.Msg.GetRef())
		if err != nil {
			return nil, err
		}
		n := c.cancelWorkflowLocked(w)
		return &cronoqv1.CancelWorkflowResponse{Id: w.p.GetId(), Cancelled: int32(n)}, nil
	})
}

func (s *workflowService) List(ctx context.Context, req *connect.Request[cronoqv1.ListWorkflowsRequest]) (*connect.Response[cronoqv1.ListWorkflowsResponse], error) {
	mode := leaderCall
	if req.Msg.GetStale() {
		mode = anyNode
	}
	return unary(ctx, s.n, req, mode, func(sv *served) (*cronoqv1.ListWorkflowsResponse, error) {
		c := s.n.c
		m := req.Msg
		limit := int(m.GetLimit())
		switch {
		case limit < 0:
			return nil, invalid("limit", "must not be negative")
		case limit == 0:
			limit = DefaultListLimit
		}
		limit = min(limit, c.cfg.maxListLimit)
		for _, st := range m.GetStatuses() {
			if st <= cronoqv1.WorkflowStatus_WORKFLOW_STATUS_UNSPECIFIED || st > cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED {
				return nil, invalid("statuses", "unknown status %d", int32(st))
			}
		}
		var ids []string
		for _, id := range slices.Sorted(maps.Keys(c.workflows)) {
			if id <= m.GetAfter() {
				continue
			}
			if len(m.GetStatuses()) > 0 && !slices.Contains(m.GetStatuses(), c.workflows[id].p.GetStatus()) {
				continue
			}
			ids = append(ids, id)
		}
		out := &cronoqv1.ListWorkflowsResponse{Meta: c.readMetaLocked(sv, m.GetStale())}
		if len(ids) > limit {
			ids = ids[:limit]
			out.Next = ids[limit-1]
		}
		for _, id := range ids {
			out.Workflows = append(out.Workflows, c.workflows[id].protoLocked(false))
		}
		return out, nil
	})
}
