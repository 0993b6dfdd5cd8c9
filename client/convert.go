package client

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// This file and template.go are where SDK types and wire (proto) types meet.
// Instants travel as Timestamps and durations as Durations, unset when zero.

var statusNames = map[cronoqv1.Status]string{
	cronoqv1.Status_STATUS_SCHEDULED: StatusScheduled,
	cronoqv1.Status_STATUS_QUEUED:    StatusQueued,
	cronoqv1.Status_STATUS_RUNNING:   StatusRunning,
	cronoqv1.Status_STATUS_RETRYING:  StatusRetrying,
	cronoqv1.Status_STATUS_SUCCEEDED: StatusSucceeded,
	cronoqv1.Status_STATUS_FAILED:    StatusFailed,
	cronoqv1.Status_STATUS_CANCELLED: StatusCancelled,
	cronoqv1.Status_STATUS_EXPIRED:   StatusExpired,
}

func statusFromProto(s cronoqv1.Status) string { return statusNames[s] }

func statusToProto(s string) (cronoqv1.Status, error) {
	for k, v := range statusNames {
		if v == s {
			return k, nil
		}
	}
	return 0, &InvalidError{Field: "status", Reason: fmt.Sprintf("unknown status %q", s)}
}

// timeFromProto reads a timestamp; unset is the zero time.
func timeFromProto(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime().UTC()
}

// timeToProto writes an instant; the zero time is unset.
func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func specToProto(s TaskSpec) (*cronoqv1.TaskSpec, error) {
	tpl, err := templateToProto(&s.Template)
	if err != nil {
		return nil, err
	}
	return &cronoqv1.TaskSpec{
		Template: tpl,
		Key:      s.Key,
		RunAt:    timeToProto(s.RunAt),
		Delay:    durationToProto(s.Delay),
		Deadline: timeToProto(s.Deadline),
	}, nil
}

func taskFromProto(p *cronoqv1.Task) *Task {
	if p == nil {
		return nil
	}
	return &Task{
		ID:          p.GetId(),
		Template:    templateFromProto(p.GetTemplate()),
		Key:         p.GetKey(),
		Status:      statusFromProto(p.GetStatus()),
		Attempt:     int(p.GetAttempt()),
		Lease:       p.GetLease(),
		Output:      p.GetOutput(),
		Error:       p.GetError(),
		SubmittedAt: timeFromProto(p.GetSubmittedAt()),
		RunAt:       timeFromProto(p.GetRunAt()),
		StartedAt:   timeFromProto(p.GetStartedAt()),
		FinishedAt:  timeFromProto(p.GetFinishedAt()),
		UpdatedAt:   timeFromProto(p.GetUpdatedAt()),
		Deadline:    timeFromProto(p.GetDeadline()),
		Schedule:    p.GetSchedule(),
		Slot:        timeFromProto(p.GetSlot()),
	}
}

func submittedFromProto(p *cronoqv1.Submitted, key string, generatedKey bool) Submitted {
	return Submitted{
		ID:        p.GetId(),
		Duplicate: p.GetDuplicate() && !generatedKey,
		Key:       key,
	}
}

func readMetaFromProto(p *cronoqv1.ReadMeta) ReadMeta {
	m := ReadMeta{
		Stale:        p.GetStale(),
		Node:         p.GetNode(),
		KnownLeader:  p.GetKnownLeader(),
		LastContact:  -1,
		AppliedIndex: p.GetAppliedIndex(),
	}
	if lc := p.GetLastContact(); lc != nil {
		m.LastContact = lc.AsDuration()
	}
	return m
}

func listToProto(o ListOptions) (*cronoqv1.ListRequest, error) {
	if o.Limit < 0 || o.Limit > 1<<31-1 {
		return nil, &InvalidError{Field: "limit", Reason: "out of range"}
	}
	req := &cronoqv1.ListRequest{Pools: o.Pools, After: o.After, Limit: int32(o.Limit), Stale: o.Stale}
	for _, s := range o.Statuses {
		st, err := statusToProto(s)
		if err != nil {
			return nil, err
		}
		req.Statuses = append(req.Statuses, st)
	}
	return req, nil
}

func countsFromProto(pools []*cronoqv1.PoolCounts) map[string]map[string]int64 {
	out := make(map[string]map[string]int64, len(pools))
	for _, p := range pools {
		m := out[p.GetPool()]
		if m == nil {
			m = make(map[string]int64, len(p.GetByStatus()))
			out[p.GetPool()] = m
		}
		for k, v := range p.GetByStatus() {
			m[k] += v
		}
	}
	return out
}

func overlapToProto(s string) (cronoqv1.Overlap, error) {
	switch s {
	case "", OverlapSkip:
		return cronoqv1.Overlap_OVERLAP_SKIP, nil
	case OverlapAllow:
		return cronoqv1.Overlap_OVERLAP_ALLOW, nil
	}
	return 0, &InvalidError{Field: "overlap", Reason: fmt.Sprintf("%q is not skip or allow", s)}
}

func overlapFromProto(o cronoqv1.Overlap) string {
	if o == cronoqv1.Overlap_OVERLAP_ALLOW {
		return OverlapAllow
	}
	return OverlapSkip
}

func catchUpToProto(s string) (cronoqv1.CatchUp, error) {
	switch s {
	case "", CatchUpOnce:
		return cronoqv1.CatchUp_CATCH_UP_ONCE, nil
	case CatchUpSkip:
		return cronoqv1.CatchUp_CATCH_UP_SKIP, nil
	case CatchUpAll:
		return cronoqv1.CatchUp_CATCH_UP_ALL, nil
	}
	return 0, &InvalidError{Field: "catch_up", Reason: fmt.Sprintf("%q is not once, skip or all", s)}
}

func catchUpFromProto(c cronoqv1.CatchUp) string {
	switch c {
	case cronoqv1.CatchUp_CATCH_UP_SKIP:
		return CatchUpSkip
	case cronoqv1.CatchUp_CATCH_UP_ALL:
		return CatchUpAll
	default:
		return CatchUpOnce
	}
}

func scheduleToProto(s Schedule) (*cronoqv1.Schedule, error) {
	tpl, err := templateToProto(&s.Task)
	if err != nil {
		return nil, err
	}
	ov, err := overlapToProto(s.Overlap)
	if err != nil {
		return nil, err
	}
	cu, err := catchUpToProto(s.CatchUp)
	if err != nil {
		return nil, err
	}
	if s.CatchUpLimit < 0 || int64(s.CatchUpLimit) > int64(^uint32(0)) {
		return nil, &InvalidError{Field: "catch_up_limit", Reason: "out of range"}
	}
	return &cronoqv1.Schedule{
		Name:         s.Name,
		Cron:         s.Cron,
		Tz:           s.TZ,
		Task:         tpl,
		Overlap:      ov,
		CatchUp:      cu,
		CatchUpLimit: uint32(s.CatchUpLimit),
		Paused:       s.Paused,
	}, nil
}

func scheduleFromProto(p *cronoqv1.Schedule) Schedule {
	return Schedule{
		Name:         p.GetName(),
		Cron:         p.GetCron(),
		TZ:           p.GetTz(),
		Task:         templateFromProto(p.GetTask()),
		Overlap:      overlapFromProto(p.GetOverlap()),
		CatchUp:      catchUpFromProto(p.GetCatchUp()),
		CatchUpLimit: int(p.GetCatchUpLimit()),
		Paused:       p.GetPaused(),
		NextFire:     timeFromProto(p.GetNextFire()),
		LastFire:     timeFromProto(p.GetLastFire()),
		Fires:        p.GetFires(),
		Skipped:      p.GetSkipped(),
		LastTask:     p.GetLastTask(),
	}
}

func eventFromProto(p *cronoqv1.Event) Event {
	return Event{
		TaskID:  p.GetTaskId(),
		Pool:    p.GetPool(),
		Kind:    p.GetKind(),
		Status:  statusFromProto(p.GetStatus()),
		Attempt: int(p.GetAttempt()),
		Message: p.GetMessage(),
		At:      timeFromProto(p.GetAt()),
		Lagged:  p.GetLagged(),
	}
}

func memberFromProto(p *cronoqv1.Member) Member {
	return Member{
		Name:     p.GetName(),
		Addr:     p.GetAddr(),
		Status:   p.GetStatus(),
		RaftAddr: p.GetRaftAddr(),
		HTTPAddr: p.GetHttpAddr(),
		Version:  p.GetVersion(),
	}
}

func peerFromProto(p *cronoqv1.Peer) Peer {
	return Peer{ID: p.GetId(), Address: p.GetAddress(), Voter: p.GetVoter(), Leader: p.GetLeader()}
}

func healthFromProto(p *cronoqv1.HealthResponse) Health {
	return Health{
		Node:    p.GetNode(),
		Leader:  p.GetLeader(),
		Epoch:   p.GetEpoch(),
		Status:  p.GetStatus(),
		Reasons: p.GetReasons(),
	}
}

// jobFromGrant builds the Job a handler sees for a grant. The grant's lease
// and attempt are authoritative over the copies inside the task.
func jobFromGrant(g *cronoqv1.Grant) *Job {
	t := taskFromProto(g.GetTask())
	if t == nil {
		t = &Task{}
	}
	t.Lease = g.GetLease()
	if g.GetAttempt() != 0 {
		t.Attempt = int(g.GetAttempt())
	}
	t.Status = StatusRunning
	return &Job{Task: t, Lease: g.GetLease(), Attempt: t.Attempt}
}

// completionToProto turns what a handler returned into the completion sent
// for its lease: nil error = success with output; *RetryableError = retryable
// with its hint; *PermanentError = permanent; any other error = retryable.
func completionToProto(lease uint64, output []byte, err error) *cronoqv1.Completion {
	c := &cronoqv1.Completion{Lease: lease}
	if err == nil {
		c.Outcome = cronoqv1.OutcomeKind_OUTCOME_SUCCESS
		c.Output = output
		return c
	}
	c.Message = err.Error()
	var perm *PermanentError
	var retry *RetryableError
	switch {
	case errors.As(err, &perm):
		c.Outcome = cronoqv1.OutcomeKind_OUTCOME_PERMANENT
	case errors.As(err, &retry):
		c.Outcome = cronoqv1.OutcomeKind_OUTCOME_RETRYABLE
		if retry.After > 0 {
			c.RetryAfter = durationToProto(retry.After)
		}
	default:
		c.Outcome = cronoqv1.OutcomeKind_OUTCOME_RETRYABLE
	}
	return c
}
