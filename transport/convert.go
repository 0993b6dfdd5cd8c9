package transport

import (
	"fmt"
	"time"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/engine/core/cron"
	"github.com/cronoq/cronoq/fsm"
)

// This file is where wire (proto) types meet the engine's and the replicated
// state's. Spec instants and durations travel as milliseconds; task and
// schedule instants as Unix nanoseconds (the unit of fsm records).

// fieldError is a request refused at the edge for a bad field; it becomes an
// invalid-argument error naming the field.
type fieldError = core.InvalidError

func invalidf(field, format string, args ...any) error {
	return &fieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// prefixed names the field of an *InvalidError inside a part of the request
// ("specs[2]." + "kind"); other errors are returned unchanged.
func prefixed(prefix string, err error) error {
	if ie, ok := err.(*fieldError); ok {
		return &fieldError{Field: prefix + ie.Field, Reason: ie.Reason}
	}
	return err
}

func priorityFromProto(p cronoqv1.Priority) (fsm.Priority, error) {
	switch p {
	case cronoqv1.Priority_PRIORITY_NORMAL:
		return fsm.PriorityNormal, nil
	case cronoqv1.Priority_PRIORITY_HIGH:
		return fsm.PriorityHigh, nil
	case cronoqv1.Priority_PRIORITY_LOW:
		return fsm.PriorityLow, nil
	}
	return 0, invalidf("priority", "unknown priority %d", int32(p))
}

func priorityToProto(p fsm.Priority) cronoqv1.Priority {
	switch p {
	case fsm.PriorityHigh:
		return cronoqv1.Priority_PRIORITY_HIGH
	case fsm.PriorityLow:
		return cronoqv1.Priority_PRIORITY_LOW
	default:
		return cronoqv1.Priority_PRIORITY_NORMAL
	}
}

func statusFromProto(s cronoqv1.Status) (fsm.Status, error) {
	st := fsm.Status(s)
	if s <= cronoqv1.Status_STATUS_UNSPECIFIED || s > cronoqv1.Status_STATUS_EXPIRED {
		return 0, invalidf("statuses", "unknown status %d", int32(s))
	}
	return st, nil
}

// statusToProto relies on the two enums sharing their numbers (checked by a
// test).
func statusToProto(s fsm.Status) cronoqv1.Status { return cronoqv1.Status(s) }

func kvsFromProto(field string, kvs []*cronoqv1.KV) ([]fsm.KV, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make([]fsm.KV, len(kvs))
	for i, kv := range kvs {
		if kv == nil {
			return nil, invalidf(field, "entry %d is empty", i)
		}
		out[i] = fsm.KV{K: kv.GetKey(), V: kv.GetValue()}
	}
	return out, nil
}

func kvsToProto(kvs []fsm.KV) []*cronoqv1.KV {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*cronoqv1.KV, len(kvs))
	for i, kv := range kvs {
		out[i] = &cronoqv1.KV{Key: kv.K, Value: kv.V}
	}
	return out
}

// msInstant reads a Unix-millisecond instant; 0 is none.
func msInstant(field string, ms int64) (time.Time, error) {
	switch {
	case ms == 0:
		return time.Time{}, nil
	case ms < 0:
		return time.Time{}, invalidf(field, "must be after 1970-01-01")
	case ms > maxMillis:
		return time.Time{}, invalidf(field, "too far in the future")
	}
	return time.UnixMilli(ms).UTC(), nil
}

// maxMillis keeps instants and durations representable in nanoseconds.
const maxMillis = int64(1<<63-1) / int64(time.Millisecond)

// msDuration reads a non-negative duration in milliseconds.
func msDuration(field string, ms int64) (time.Duration, error) {
	switch {
	case ms < 0:
		return 0, invalidf(field, "must not be negative")
	case ms > maxMillis:
		return 0, invalidf(field, "too long")
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// specFromProto validates the wire form of a task spec and converts it. The
// engine checks the rest (pool, kind, sizes, times against now, backoff).
func specFromProto(p *cronoqv1.TaskSpec) (core.Spec, error) {
	if p == nil {
		return core.Spec{}, invalidf("spec", "missing")
	}
	prio, err := priorityFromProto(p.GetPriority())
	if err != nil {
		return core.Spec{}, err
	}
	s := core.Spec{
		Pool:        p.GetPool(),
		Kind:        p.GetKind(),
		Key:         p.GetKey(),
		Priority:    prio,
		Payload:     p.GetPayload(),
		MaxAttempts: p.GetMaxAttempts(),
	}
	if s.Labels, err = kvsFromProto("labels", p.GetLabels()); err != nil {
		return core.Spec{}, err
	}
	if s.Tags, err = kvsFromProto("tags", p.GetTags()); err != nil {
		return core.Spec{}, err
	}
	if s.RunAt, err = msInstant("run_at", p.GetRunAtMs()); err != nil {
		return core.Spec{}, err
	}
	if s.Delay, err = msDuration("delay", p.GetDelayMs()); err != nil {
		return core.Spec{}, err
	}
	if s.Deadline, err = msInstant("deadline", p.GetDeadlineMs()); err != nil {
		return core.Spec{}, err
	}
	if s.Timeout, err = msDuration("timeout", p.GetTimeoutMs()); err != nil {
		return core.Spec{}, err
	}
	if b := p.GetBackoff(); b != nil {
		initial, err := msDuration("backoff.initial", b.GetInitialMs())
		if err != nil {
			return core.Spec{}, err
		}
		maxDelay, err := msDuration("backoff.max", b.GetMaxMs())
		if err != nil {
			return core.Spec{}, err
		}
		s.Backoff = &fsm.Backoff{Initial: int64(initial), Max: int64(maxDelay), Jitter: b.GetJitter()}
	}
	return s, nil
}

// specsFromProto converts the specs of a batch; a bad field is named
// specs[i].field.
func specsFromProto(ps []*cronoqv1.TaskSpec) ([]core.Spec, error) {
	if len(ps) == 0 {
		return nil, invalidf("specs", "at least one spec is required")
	}
	out := make([]core.Spec, len(ps))
	for i, p := range ps {
		s, err := specFromProto(p)
		if err != nil {
			return nil, prefixed(fmt.Sprintf("specs[%d].", i), err)
		}
		out[i] = s
	}
	return out, nil
}

func refFromProto(r *cronoqv1.TaskRef) (core.TaskRef, error) {
	switch {
	case r.GetId() != "" && r.GetKey() != "":
		return core.TaskRef{}, invalidf("ref", "give an id or a key, not both")
	case r.GetId() != "":
		return core.TaskRef{ID: r.GetId()}, nil
	case r.GetKey() != "":
		return core.TaskRef{Key: r.GetKey()}, nil
	}
	return core.TaskRef{}, invalidf("ref", "an id or a key is required")
}

func taskToProto(t *fsm.Task) *cronoqv1.Task {
	if t == nil {
		return nil
	}
	return &cronoqv1.Task{
		Id:          t.ID,
		Pool:        t.Pool,
		Kind:        t.Kind,
		Key:         t.Key,
		Priority:    priorityToProto(t.Priority),
		Payload:     t.Payload,
		Labels:      kvsToProto(t.Labels),
		Tags:        kvsToProto(t.Tags),
		Status:      statusToProto(t.Status),
		Attempt:     t.Attempt,
		MaxAttempts: t.MaxAttempts,
		Lease:       t.Lease,
		Output:      t.Output,
		Error:       t.Error,
		SubmittedAt: t.SubmittedAt,
		RunAt:       t.RunAt,
		StartedAt:   t.StartedAt,
		FinishedAt:  t.FinishedAt,
		UpdatedAt:   t.UpdatedAt,
		Deadline:    t.Deadline,
		TimeoutMs:   t.Timeout / int64(time.Millisecond),
		Schedule:    t.Schedule,
		Slot:        t.Slot,
	}
}

// taskSize estimates the encoded size of a task, to bound list pages.
func taskSize(t *fsm.Task) int {
	n := 256 + len(t.ID) + len(t.Pool) + len(t.Kind) + len(t.Key) + len(t.Payload) + len(t.Output) + len(t.Error)
	for _, kv := range t.Labels {
		n += len(kv.K) + len(kv.V) + 4
	}
	for _, kv := range t.Tags {
		n += len(kv.K) + len(kv.V) + 4
	}
	return n
}

func overlapFromProto(o cronoqv1.Overlap) (fsm.Overlap, error) {
	switch o {
	case cronoqv1.Overlap_OVERLAP_SKIP:
		return fsm.OverlapSkip, nil
	case cronoqv1.Overlap_OVERLAP_ALLOW:
		return fsm.OverlapAllow, nil
	}
	return 0, invalidf("overlap", "unknown overlap policy %d", int32(o))
}

func overlapToProto(o fsm.Overlap) cronoqv1.Overlap {
	if o == fsm.OverlapAllow {
		return cronoqv1.Overlap_OVERLAP_ALLOW
	}
	return cronoqv1.Overlap_OVERLAP_SKIP
}

func catchUpFromProto(c cronoqv1.CatchUp) (fsm.CatchUp, error) {
	switch c {
	case cronoqv1.CatchUp_CATCH_UP_ONCE:
		return fsm.CatchUpOnce, nil
	case cronoqv1.CatchUp_CATCH_UP_SKIP:
		return fsm.CatchUpSkip, nil
	case cronoqv1.CatchUp_CATCH_UP_ALL:
		return fsm.CatchUpAll, nil
	}
	return 0, invalidf("catch_up", "unknown catch-up policy %d", int32(c))
}

func catchUpToProto(c fsm.CatchUp) cronoqv1.CatchUp {
	switch c {
	case fsm.CatchUpSkip:
		return cronoqv1.CatchUp_CATCH_UP_SKIP
	case fsm.CatchUpAll:
		return cronoqv1.CatchUp_CATCH_UP_ALL
	default:
		return cronoqv1.CatchUp_CATCH_UP_ONCE
	}
}

func scheduleFromProto(p *cronoqv1.Schedule) (core.ScheduleSpec, error) {
	if p == nil {
		return core.ScheduleSpec{}, invalidf("schedule", "missing")
	}
	if p.GetName() == "" {
		return core.ScheduleSpec{}, invalidf("name", "must not be empty")
	}
	var task core.Spec
	if p.GetTask() != nil {
		var err error
		if task, err = specFromProto(p.GetTask()); err != nil {
			return core.ScheduleSpec{}, prefixed("task.", err)
		}
	} else {
		task.Priority = fsm.PriorityNormal
	}
	ov, err := overlapFromProto(p.GetOverlap())
	if err != nil {
		return core.ScheduleSpec{}, err
	}
	cu, err := catchUpFromProto(p.GetCatchUp())
	if err != nil {
		return core.ScheduleSpec{}, err
	}
	return core.ScheduleSpec{
		Name:         p.GetName(),
		Cron:         p.GetCron(),
		TZ:           p.GetTz(),
		Task:         task,
		Overlap:      ov,
		CatchUp:      cu,
		CatchUpLimit: p.GetCatchUpLimit(),
		Paused:       p.GetPaused(),
	}, nil
}

// scheduleToProto converts a stored schedule; its next fire is computed from
// the expression and the committed cursor (none while paused).
func scheduleToProto(s *fsm.Schedule) *cronoqv1.Schedule {
	out := &cronoqv1.Schedule{
		Name: s.Name,
		Cron: s.Cron,
		Tz:   s.TZ,
		Task: &cronoqv1.TaskSpec{
			Pool:        s.Pool,
			Kind:        s.Kind,
			Priority:    priorityToProto(s.Priority),
			Payload:     s.Payload,
			Labels:      kvsToProto(s.Labels),
			Tags:        kvsToProto(s.Tags),
			TimeoutMs:   s.Timeout / int64(time.Millisecond),
			MaxAttempts: s.MaxAttempts,
		},
		Overlap:      overlapToProto(s.Overlap),
		CatchUp:      catchUpToProto(s.CatchUp),
		CatchUpLimit: s.CatchUpLimit,
		Paused:       s.Paused,
		LastFire:     s.LastFire,
		Fires:        s.Fires,
		Skipped:      s.Skipped,
		LastTask:     s.LastTask,
	}
	if !s.Paused {
		if expr, err := cron.Parse(s.Cron, s.TZ); err == nil {
			cursor := s.LastFire
			if cursor == 0 {
				cursor = s.CreatedAt
			}
			out.NextFire = fsm.Nanos(cron.NextAfter(expr, fsm.Time(cursor)))
		}
	}
	return out
}

func outcomeFromProto(c *cronoqv1.Completion) (core.Outcome, error) {
	out := core.Outcome{Output: c.GetOutput(), Message: c.GetMessage()}
	switch c.GetOutcome() {
	case cronoqv1.OutcomeKind_OUTCOME_SUCCESS:
		out.Kind = core.OutcomeSuccess
	case cronoqv1.OutcomeKind_OUTCOME_RETRYABLE:
		out.Kind = core.OutcomeRetryable
	case cronoqv1.OutcomeKind_OUTCOME_PERMANENT:
		out.Kind = core.OutcomePermanent
	case cronoqv1.OutcomeKind_OUTCOME_CANCELLED:
		out.Kind = core.OutcomeCancelled
	default:
		return core.Outcome{}, invalidf("outcome", "unknown outcome %d", int32(c.GetOutcome()))
	}
	d, err := msDuration("retry_after", c.GetRetryAfterMs())
	if err != nil {
		return core.Outcome{}, err
	}
	out.RetryAfter = d
	return out, nil
}

func eventToProto(ev core.Event) *cronoqv1.Event {
	return &cronoqv1.Event{
		TaskId:  ev.TaskID,
		Pool:    ev.Pool,
		Kind:    ev.Kind,
		Status:  statusToProto(ev.Status),
		Attempt: ev.Attempt,
		Message: ev.Message,
		At:      fsm.Nanos(ev.At),
	}
}
