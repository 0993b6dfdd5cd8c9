package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/engine/core/cron"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/units"
)

// schedule is the core's copy of a recurring schedule.
type schedule struct {
	rec  *fsm.Schedule // the durable record as of the mutations emitted so far
	expr *cron.Expr    // nil: the expression no longer parses (inert)
	gen  uint64        // validates the schedule's fire timer
}

func (s *schedule) cursor() time.Time {
	if s.rec.LastFire != 0 {
		return s.rec.LastFire.Time()
	}
	return s.rec.CreatedAt.Time()
}

// arm (re)starts the fire timer of s at its next slot after the cursor.
func (c *Core) arm(s *schedule) {
	c.schedGen++
	s.gen = c.schedGen
	if s.rec.Paused || s.expr == nil {
		return
	}
	next := s.expr.Next(s.cursor())
	if next.IsZero() {
		return
	}
	c.timers.push(timer{when: fsm.InstantOf(next), kind: tmFire, id: s.rec.Name, gen: s.gen})
}

// fireSchedule handles the due slots of s: each one either fires a task
// (Insert and Fire in the same output, so they commit together) or is
// recorded as skipped (overlap policy, catch-up policy, full bounds).
func (c *Core) fireSchedule(s *schedule) {
	now := c.now.Time()
	decs := cron.Plan(s.expr, s.cursor(), now, s.rec.CatchUp, s.rec.CatchUpLimit)
	for _, d := range decs {
		id := ""
		if d.Fire && (s.rec.Overlap == fsm.OverlapAllow || c.lastTaskEnded(s)) {
			if len(s.rec.Steps) > 0 {
				id = c.fireWorkflow(s, d.Slot)
			} else {
				id = c.fireTask(s, d.Slot)
			}
		}
		c.recordFire(s, d.Slot, d.Skipped, id)
	}
	if len(decs) == 0 && !s.cursor().After(now) {
		// Nothing was due after all (the timer came early): wait for the next
		// slot after now, which Plan will then report.
		c.schedGen++
		s.gen = c.schedGen
		if next := s.expr.Next(now); !next.IsZero() {
			c.timers.push(timer{when: fsm.InstantOf(next), kind: tmFire, id: s.rec.Name, gen: s.gen})
		}
		return
	}
	c.arm(s)
}

// recordFire commits the fire of slot: id names the task, or the workflow
// for a schedule with Steps, that it inserted ("" when skipped).
func (c *Core) recordFire(s *schedule, slot time.Time, skipped uint32, id string) {
	fire := &fsm.Fire{Name: s.rec.Name, Slot: fsm.InstantOf(slot), Skipped: skipped, TaskID: id}
	if len(s.rec.Steps) > 0 {
		fire.TaskID, fire.Workflow = "", id
	}
	c.mutate(fsm.Mutation{Fire: fire})
	rec := s.rec.Clone()
	rec.LastFire = fsm.InstantOf(slot)
	rec.Skipped += uint64(skipped)
	if id != "" {
		rec.LastTask = id
		rec.Fires++
	} else {
		rec.Skipped++
	}
	s.rec = rec
}

// lastTaskEnded reports whether the task (or workflow) of the schedule's
// last fire has ended or is gone.
func (c *Core) lastTaskEnded(s *schedule) bool {
	if s.rec.LastTask == "" {
		return true
	}
	if w, ok := c.workflows[s.rec.LastTask]; ok {
		return w.rec.Status != fsm.WorkflowRunning
	}
	t, ok := c.tasks[s.rec.LastTask]
	return !ok || t.status.Terminal()
}

// slotKey is the idempotency key of the task a schedule fires for slot.
func slotKey(name string, slot time.Time) string {
	return name + "@" + slot.UTC().Format(time.RFC3339)
}

// fireTask inserts the task of one fire and returns its id, or "" when the
// slot cannot fire (its key exists already, or the pending bounds are full).
func (c *Core) fireTask(s *schedule, slot time.Time) string {
	key := c.refireKey(slotKey(s.rec.Name, slot))
	if _, ok := c.keys[key]; ok {
		return ""
	}
	if !c.fits(delta{{pairKey{s.rec.Pool, s.rec.Priority}, 1}}, false) {
		return ""
	}
	at := fsm.InstantOf(slot)
	rec := &fsm.Task{
		Template: c.resolve(s.rec.Template),
		Key:      key,
		RunAt:    at,
		Schedule: s.rec.Name,
		Slot:     at,
	}
	return c.insert(rec).id
}

// AddSchedule creates or replaces the recurring schedule spec.Name. Its
// template's zero fields take the defaults at each fire. Slots fire strictly
// after now. Replacing a schedule keeps its counters and last task (for the
// overlap policy) but starts its cursor afresh at now. The reply (held) is
// the next fire instant (an fsm.Instant, 0 while paused); errors are
// *InvalidError naming the field, *VersionError, or ErrShuttingDown.
func (c *Core) AddSchedule(now time.Time, req ReqID, spec ScheduleSpec) {
	c.begin(now)
	defer c.serve()
	if c.shutdown {
		c.fail(req, ErrShuttingDown)
		return
	}
	rec, expr, err := c.checkSchedule(&spec)
	if err == nil {
		what := "this schedule"
		switch {
		case len(rec.Steps) > 0:
			what = "a schedule that fires a workflow"
		case rec.Backoff != (fsm.Backoff{}):
			what = "a schedule whose task has a retry backoff"
		}
		err = c.requireVersion(what, rec.Version())
	}
	if err != nil {
		c.fail(req, err)
		return
	}
	rec.CreatedAt = c.now
	if old, ok := c.schedules[spec.Name]; ok {
		rec.LastTask, rec.Fires, rec.Skipped = old.rec.LastTask, old.rec.Fires, old.rec.Skipped
	}
	c.mutate(fsm.Mutation{PutSchedule: rec.Clone()})
	s := &schedule{rec: rec, expr: expr}
	c.schedules[spec.Name] = s
	c.arm(s)
	var next fsm.Instant
	if !rec.Paused {
		next = fsm.InstantOf(expr.Next(s.cursor()))
	}
	c.reply(req, next)
}

func (c *Core) checkSchedule(spec *ScheduleSpec) (*fsm.Schedule, *cron.Expr, error) {
	if spec.Name == "" {
		return nil, nil, Invalid("name", "must not be empty")
	}
	expr, err := cron.Parse(spec.Cron, spec.TZ)
	if err != nil {
		if errors.Is(err, cron.ErrUnknownZone) {
			return nil, nil, Invalid("tz", "%v", err)
		}
		return nil, nil, Invalid("cron", "%v", err)
	}
	switch {
	case spec.Overlap > fsm.OverlapAllow:
		return nil, nil, Invalid("overlap", "unknown policy %d", spec.Overlap)
	case spec.CatchUp > fsm.CatchUpAll:
		return nil, nil, Invalid("catch_up", "unknown policy %d", spec.CatchUp)
	case spec.CatchUpLimit > cron.MaxCatchUpLimit:
		return nil, nil, Invalid("catch_up_limit", "%d is above the maximum of %d", spec.CatchUpLimit, cron.MaxCatchUpLimit)
	}
	rec := &fsm.Schedule{
		Name:         spec.Name,
		Cron:         spec.Cron,
		TZ:           spec.TZ,
		Overlap:      spec.Overlap,
		CatchUp:      spec.CatchUp,
		CatchUpLimit: spec.CatchUpLimit,
		Paused:       spec.Paused,
	}
	if len(spec.Steps) > 0 {
		if !isZeroTemplate(&spec.Task) {
			return nil, nil, Invalid("task", "a schedule fires a task or a workflow, not both")
		}
		if len(spec.Workflow) > c.cfg.MaxKindLen {
			return nil, nil, Invalid("workflow", "%s", units.TooBig(len(spec.Workflow), c.cfg.MaxKindLen))
		}
		steps, err := c.checkStepTemplates(spec.Steps)
		if err != nil {
			return nil, nil, err
		}
		rec.Workflow, rec.Steps = spec.Workflow, steps
		return rec, expr, nil
	}
	if spec.Workflow != "" {
		return nil, nil, Invalid("steps", "a workflow needs at least one step")
	}
	tpl, err := c.checkTemplate(&spec.Task)
	if err != nil {
		return nil, nil, prefixed("task.", err)
	}
	rec.Template = tpl // zero fields take the defaults at each fire
	return rec, expr, nil
}

// RemoveSchedule deletes a recurring schedule. The reply (held) is whether
// it existed (nothing changes when it did not).
func (c *Core) RemoveSchedule(now time.Time, req ReqID, name string) {
	c.begin(now)
	defer c.serve()
	if _, ok := c.schedules[name]; !ok {
		c.reply(req, false)
		return
	}
	c.mutate(fsm.Mutation{DelSchedule: &fsm.DelSchedule{Name: name}})
	delete(c.schedules, name)
	c.reply(req, true)
}

// PauseSchedule pauses or resumes a recurring schedule; the reply (held) is
// the new state (a bool), or ErrNotFound. Asking for the current state
// changes nothing.
//
// A resume does not rewind: the slots that came due while the schedule was
// paused are not fired. They are recorded as skipped by a Fire with no task
// (committed with the resume) that moves the cursor to the latest of them,
// so the schedule's history has no silent gap; the next fire is the first
// slot after that.
func (c *Core) PauseSchedule(now time.Time, req ReqID, name string, paused bool) {
	c.begin(now)
	defer c.serve()
	s, ok := c.schedules[name]
	if !ok {
		c.fail(req, fmt.Errorf("schedule %q: %w", name, ErrNotFound))
		return
	}
	if s.rec.Paused != paused {
		c.mutate(fsm.Mutation{PauseSchedule: &fsm.PauseSchedule{Name: name, Paused: paused, At: c.now}})
		rec := s.rec.Clone()
		rec.Paused = paused
		s.rec = rec
		if !paused && s.expr != nil {
			decs := cron.Plan(s.expr, s.cursor(), c.now.Time(), fsm.CatchUpOnce, 0)
			if n := len(decs); n > 0 {
				var skipped uint64
				for _, d := range decs[:n-1] {
					skipped += uint64(d.Skipped) + 1
				}
				skipped += uint64(decs[n-1].Skipped)
				c.recordFire(s, decs[n-1].Slot, uint32(min(skipped, 1<<32-1)), "")
			}
		}
		c.arm(s)
	}
	c.reply(req, paused)
}

// isZeroTemplate reports whether t sets nothing.
func isZeroTemplate(t *fsm.Template) bool {
	return t.Pool == "" && t.Kind == "" && t.Priority == 0 && len(t.Payload) == 0 &&
		len(t.Labels) == 0 && len(t.Tags) == 0 && t.Timeout == 0 && t.MaxAttempts == 0 &&
		t.Backoff == (fsm.Backoff{}) && t.Keys.IsZero()
}
