package clienttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/internal/units"
)

// schedule is a stored recurring schedule.
type schedule struct {
	rec    *cronoqv1.Schedule // as stored: template unresolved, no next fire
	expr   *cronExpr
	cursor time.Time // the last fire, or when the schedule was made or resumed
	next   time.Time // the next fire; zero while paused
}

// maxCatchUp bounds the due slots counted when a schedule catches up.
const maxCatchUp = 100000

func (s *schedule) arm() {
	s.next = time.Time{}
	if !s.rec.GetPaused() {
		s.next = s.expr.next(s.cursor)
	}
}

// proto returns the schedule as List shows it.
func (s *schedule) proto() *cronoqv1.Schedule {
	out := proto.Clone(s.rec).(*cronoqv1.Schedule)
	out.NextFire = ts(s.next)
	return out
}

// checkSchedule validates a schedule as a real cluster does.
func (c *Cluster) checkSchedule(p *cronoqv1.Schedule) (*cronoqv1.Schedule, *cronExpr, error) {
	if p.GetName() == "" {
		return nil, nil, invalid("name", "must not be empty")
	}
	expr, err := parseCron(p.GetCron(), p.GetTz())
	if err != nil {
		if errors.Is(err, errUnknownZone) {
			return nil, nil, invalid("tz", "%v", err)
		}
		return nil, nil, invalid("cron", "%v", err)
	}
	switch {
	case p.GetOverlap() != cronoqv1.Overlap_OVERLAP_SKIP && p.GetOverlap() != cronoqv1.Overlap_OVERLAP_ALLOW:
		return nil, nil, invalid("overlap", "unknown overlap policy %d", int32(p.GetOverlap()))
	case p.GetCatchUp() < cronoqv1.CatchUp_CATCH_UP_ONCE || p.GetCatchUp() > cronoqv1.CatchUp_CATCH_UP_ALL:
		return nil, nil, invalid("catch_up", "unknown catch-up policy %d", int32(p.GetCatchUp()))
	}
	rec := &cronoqv1.Schedule{
		Name:         p.GetName(),
		Cron:         p.GetCron(),
		Tz:           p.GetTz(),
		Overlap:      p.GetOverlap(),
		CatchUp:      p.GetCatchUp(),
		CatchUpLimit: p.GetCatchUpLimit(),
		Paused:       p.GetPaused(),
	}
	if len(p.GetSteps()) > 0 {
		if !zeroTemplate(p.GetTask()) {
			return nil, nil, invalid("task", "a schedule fires a task or a workflow, not both")
		}
		if len(p.GetWorkflow()) > maxKindLen {
			return nil, nil, invalid("workflow", "%s", units.TooBig(len(p.GetWorkflow()), maxKindLen))
		}
		steps, err := c.checkStepTemplates(p.GetSteps())
		if err != nil {
			return nil, nil, err
		}
		rec.Workflow, rec.Steps = p.GetWorkflow(), steps
		return rec, expr, nil
	}
	if p.GetWorkflow() != "" {
		return nil, nil, invalid("steps", "a workflow needs at least one step")
	}
	tpl, err := c.checkTemplate(p.GetTask())
	if err != nil {
		return nil, nil, prefixed("task.", err)
	}
	rec.Task = tpl
	return rec, expr, nil
}

// zeroTemplate reports whether tpl sets nothing.
func zeroTemplate(tpl *cronoqv1.TaskTemplate) bool {
	b := tpl.GetBackoff()
	return tpl.GetPool() == "" && tpl.GetKind() == "" && tpl.GetPriority() == cronoqv1.Priority_PRIORITY_NORMAL &&
		len(tpl.GetPayload()) == 0 && len(tpl.GetLabels()) == 0 && len(tpl.GetTags()) == 0 &&
		tpl.GetTimeout().AsDuration() == 0 && tpl.GetMaxAttempts() == 0 &&
		b.GetInitial().AsDuration() == 0 && b.GetMax().AsDuration() == 0 && b.GetJitter() == 0
}

// checkStepTemplates validates the workflow of a recurring schedule and
// returns its steps normalised. A step's spec carries its template,
// dependency policy and external flag only: what each fire makes of it;
// the rest of a spec is refused, first, as a node refuses it while
// reading the request.
func (c *Cluster) checkStepTemplates(steps []*cronoqv1.WorkflowStep) ([]*cronoqv1.WorkflowStep, error) {
	const only = "a step of a schedule takes a template, a dependency policy and the external flag only"
	for i, st := range steps {
		spec := st.GetSpec()
		var field string
		switch p := spec.GetDependencyPolicy(); {
		case spec.GetKey() != "":
			field = "spec.key"
		case spec.GetRunAt() != nil:
			field = "spec.run_at"
		case spec.GetDelay() != nil:
			field = "spec.delay"
		case spec.GetDeadline() != nil:
			field = "spec.deadline"
		case len(spec.GetDependsOn()) > 0:
			field = "spec.depends_on"
		case p != cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED && p != cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE:
			return nil, invalid(fmt.Sprintf("steps[%d].dependency_policy", i), "unknown dependency policy %d", int32(p))
		default:
			continue
		}
		return nil, invalid(fmt.Sprintf("steps[%d].%s", i, field), "%s", only)
	}
	out := make([]*cronoqv1.WorkflowStep, len(steps))
	names := make(map[string]bool, len(steps))
	for i, st := range steps {
		fail := func(err error) ([]*cronoqv1.WorkflowStep, error) {
			return nil, prefixed(fmt.Sprintf("steps[%d].", i), err)
		}
		switch {
		case st.GetName() == "":
			return fail(invalid("name", "must not be empty"))
		case names[st.GetName()]:
			return fail(invalid("name", "step %q is named twice", st.GetName()))
		}
		if err := checkStepName(st.GetName()); err != nil {
			return fail(err)
		}
		tpl, err := c.checkTemplate(st.GetSpec().GetTemplate())
		if err != nil {
			return fail(err)
		}
		for _, name := range st.GetDependsOn() {
			if !names[name] {
				return fail(invalid("depends_on", "%q is not an earlier step of the workflow", name))
			}
		}
		out[i] = &cronoqv1.WorkflowStep{
			Name: st.GetName(),
			Spec: &cronoqv1.TaskSpec{
				Template: tpl, DependencyPolicy: st.GetSpec().GetDependencyPolicy(), External: st.GetSpec().GetExternal(),
			},
			DependsOn: slices.Clone(st.GetDependsOn()),
		}
		names[st.GetName()] = true
	}
	return out, nil
}

// fireDueLocked fires the schedules whose next fire has come. A schedule
// that missed several fires (a clock moved by hand) fires once, for the
// latest, and counts the others as skipped, whatever its catch-up policy.
func (c *Cluster) fireDueLocked(now time.Time) bool {
	fired := false
	for _, name := range slices.Sorted(maps.Keys(c.schedules)) {
		s := c.schedules[name]
		if s.next.IsZero() || s.next.After(now) {
			continue
		}
		slot, skipped := s.next, uint64(0)
		for n := 0; n < maxCatchUp; n++ {
			nx := s.expr.next(slot)
			if nx.IsZero() || nx.After(now) {
				break
			}
			slot = nx
			skipped++
		}
		s.rec.Skipped += skipped
		c.fireLocked(s, slot)
		fired = true
	}
	return fired
}

// fireLocked fires s for slot: a task from its template, or its workflow,
// unless the overlap policy skips it (the task or workflow of the last
// fire still runs). It returns the task's or the workflow's id ("" when
// skipped).
func (c *Cluster) fireLocked(s *schedule, slot time.Time) string {
	s.cursor = slot
	s.rec.LastFire = ts(slot)
	defer s.arm()
	c.applied++
	if s.rec.GetOverlap() == cronoqv1.Overlap_OVERLAP_SKIP && c.lastFireLiveLocked(s) {
		s.rec.Skipped++
		return ""
	}
	key := s.rec.GetName() + "@" + slot.UTC().Format(time.RFC3339)
	var id string
	if len(s.rec.GetSteps()) > 0 {
		id = c.fireWorkflowLocked(s, key, slot)
	} else if c.byKey[key] == nil && c.fitsLocked(s.rec.GetTask().GetPool(), 1) == nil {
		rec := &cronoqv1.Task{
			Template:    c.resolve(s.rec.GetTask()),
			Key:         key,
			SubmittedAt: ts(c.now()),
			RunAt:       ts(slot),
			UpdatedAt:   ts(c.now()),
			Schedule:    s.rec.GetName(),
			Slot:        ts(slot),
		}
		id = c.insertLocked(rec, nil, nil, "").p.GetId()
	}
	if id == "" {
		s.rec.Skipped++
		return ""
	}
	s.rec.Fires++
	s.rec.LastTask = id
	return id
}

// lastFireLiveLocked reports whether the task or workflow of the last fire
// of s still runs.
func (c *Cluster) lastFireLiveLocked(s *schedule) bool {
	last := s.rec.GetLastTask()
	if w := c.workflows[last]; w != nil {
		return w.running()
	}
	t := c.tasks[last]
	return t != nil && !terminal(t.p.GetStatus())
}

// fireWorkflowLocked inserts the workflow of one fire of s, keyed by key,
// and returns its id; "" when the key names a workflow already or the
// steps do not fit the pending limits.
func (c *Cluster) fireWorkflowLocked(s *schedule, key string, slot time.Time) string {
	if c.wfByKey[key] != nil {
		return ""
	}
	adds := map[string]int{}
	for _, st := range s.rec.GetSteps() {
		adds[st.GetSpec().GetTemplate().GetPool()]++
	}
	if c.fitAllLocked(adds) != nil {
		return ""
	}
	name := s.rec.GetWorkflow()
	if name == "" {
		name = s.rec.GetName()
	}
	w := c.createWorkflowLocked(name, key, s.rec.GetName(), slot, "")
	now := c.now()
	ids := make(map[string]*task, len(s.rec.GetSteps()))
	for _, st := range s.rec.GetSteps() {
		rec := &cronoqv1.Task{
			Template:         c.resolve(st.GetSpec().GetTemplate()),
			SubmittedAt:      ts(now),
			RunAt:            ts(slot),
			UpdatedAt:        ts(now),
			Schedule:         s.rec.GetName(),
			Slot:             ts(slot),
			Step:             st.GetName(),
			DependencyPolicy: st.GetSpec().GetDependencyPolicy(),
			External:         st.GetSpec().GetExternal(),
		}
		var deps []*task
		for _, name := range st.GetDependsOn() {
			deps = append(deps, ids[name])
		}
		ids[st.GetName()] = c.insertLocked(rec, deps, w, "")
	}
	return w.p.GetId()
}

// ---------------------------------------------------------------------------
// ScheduleService

type scheduleService struct{ n *Node }

func (h *scheduleService) Add(ctx context.Context, req *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
	return unary(ctx, h.n, req, leaderCall, func(*served) (*cronoqv1.AddScheduleResponse, error) {
		c := h.n.c
		rec, expr, err := c.checkSchedule(req.Msg.GetSchedule())
		if err != nil {
			return nil, err
		}
		s := &schedule{rec: rec, expr: expr, cursor: c.now()}
		if old := c.schedules[rec.GetName()]; old != nil {
			rec.LastTask, rec.Fires, rec.Skipped, rec.LastFire = old.rec.LastTask, old.rec.Fires, old.rec.Skipped, old.rec.LastFire
		}
		s.arm()
		c.schedules[rec.GetName()] = s
		c.applied++
		return &cronoqv1.AddScheduleResponse{Name: rec.GetName(), NextFire: ts(s.next)}, nil
	})
}

func (h *scheduleService) List(ctx context.Context, req *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
	mode := leaderCall
	if req.Msg.GetStale() {
		mode = anyNode
	}
	return unary(ctx, h.n, req, mode, func(*served) (*cronoqv1.ListSchedulesResponse, error) {
		c := h.n.c
		out := &cronoqv1.ListSchedulesResponse{}
		for _, name := range slices.Sorted(maps.Keys(c.schedules)) {
			out.Schedules = append(out.Schedules, c.schedules[name].proto())
		}
		return out, nil
	})
}

func (h *scheduleService) Remove(ctx context.Context, req *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
	return unary(ctx, h.n, req, leaderCall, func(*served) (*cronoqv1.RemoveScheduleResponse, error) {
		c := h.n.c
		name := req.Msg.GetName()
		_, ok := c.schedules[name]
		if ok {
			delete(c.schedules, name)
			c.applied++
		}
		return &cronoqv1.RemoveScheduleResponse{Name: name, Removed: ok}, nil
	})
}

func (h *scheduleService) Pause(ctx context.Context, req *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
	return unary(ctx, h.n, req, leaderCall, func(*served) (*cronoqv1.PauseScheduleResponse, error) {
		c := h.n.c
		name, paused := req.Msg.GetName(), req.Msg.GetPaused()
		s := c.schedules[name]
		if s == nil {
			return nil, apierr.NotFound("no schedule " + name)
		}
		if s.rec.GetPaused() != paused {
			s.rec.Paused = paused
			if !paused {
				// A resume does not rewind: the fires missed while paused are
				// skipped.
				now := c.now()
				for n := 0; n < maxCatchUp; n++ {
					nx := s.expr.next(s.cursor)
					if nx.IsZero() || nx.After(now) {
						break
					}
					s.cursor = nx
					s.rec.Skipped++
				}
			}
			s.arm()
			c.applied++
		}
		return &cronoqv1.PauseScheduleResponse{Name: name, Paused: paused}, nil
	})
}
