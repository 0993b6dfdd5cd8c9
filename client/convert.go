package client

import (
	"errors"
	"fmt"
	"sort"
	"time"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// This file is the one place where SDK types and wire (proto) types meet.
// Task instants travel as Unix nanoseconds; spec instants and durations as
// milliseconds.

func priorityToProto(p string) (cronoqv1.Priority, error) {
	switch p {
	case "", PriorityNormal:
		return cronoqv1.Priority_PRIORITY_NORMAL, nil
	case PriorityHigh:
		return cronoqv1.Priority_PRIORITY_HIGH, nil
	case PriorityLow:
		return cronoqv1.Priority_PRIORITY_LOW, nil
	}
	return 0, &InvalidError{Field: "priority", Reason: fmt.Sprintf("%q is not high, normal or low", p)}
}

func priorityFromProto(p cronoqv1.Priority) string {
	switch p {
	case cronoqv1.Priority_PRIORITY_HIGH:
		return PriorityHigh
	case cronoqv1.Priority_PRIORITY_LOW:
		return PriorityLow
	default:
		return PriorityNormal
	}
}

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

// kvsToProto turns a map into KV pairs sorted by key, so the same map always
// encodes the same way.
func kvsToProto(m map[string]string) []*cronoqv1.KV {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*cronoqv1.KV, len(keys))
	for i, k := range keys {
		out[i] = &cronoqv1.KV{Key: k, Value: m[k]}
	}
	return out
}

func kvsFromProto(kvs []*cronoqv1.KV) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// nsTime reads a Unix-nanosecond instant; 0 is the zero time.
func nsTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// msTime reads a Unix-millisecond instant; 0 is the zero time.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// timeToMs writes an instant as Unix milliseconds; the zero time is 0.
func timeToMs(field string, t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	ms := t.UnixMilli()
	if ms <= 0 {
		return 0, &InvalidError{Field: field, Reason: "must be after 1970-01-01"}
	}
	return ms, nil
}

// durationToMs writes a duration as milliseconds, rounding up so that a
// positive duration never becomes 0 ("none").
func durationToMs(field string, d time.Duration) (int64, error) {
	if d < 0 {
		return 0, &InvalidError{Field: field, Reason: "must not be negative"}
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond), nil
}

func specToProto(s TaskSpec) (*cronoqv1.TaskSpec, error) {
	prio, err := priorityToProto(s.Priority)
	if err != nil {
		return nil, err
	}
	out := &cronoqv1.TaskSpec{
		Pool:     s.Pool,
		Kind:     s.Kind,
		Key:      s.Key,
		Priority: prio,
		Payload:  s.Payload,
		Labels:   kvsToProto(s.Labels),
		Tags:     kvsToProto(s.Tags),
	}
	if out.RunAtMs, err = timeToMs("run_at", s.RunAt); err != nil {
		return nil, err
	}
	if out.DelayMs, err = durationToMs("delay", s.Delay); err != nil {
		return nil, err
	}
	if out.DeadlineMs, err = timeToMs("deadline", s.Deadline); err != nil {
		return nil, err
	}
	if out.TimeoutMs, err = durationToMs("timeout", s.Timeout); err != nil {
		return nil, err
	}
	if s.MaxAttempts < 0 || int64(s.MaxAttempts) > int64(^uint32(0)) {
		return nil, &InvalidError{Field: "max_attempts", Reason: "out of range"}
	}
	out.MaxAttempts = uint32(s.MaxAttempts)
	if s.Backoff != nil {
		b := &cronoqv1.Backoff{Jitter: s.Backoff.Jitter}
		if b.InitialMs, err = durationToMs("backoff.initial", s.Backoff.Initial); err != nil {
			return nil, err
		}
		if b.MaxMs, err = durationToMs("backoff.max", s.Backoff.Max); err != nil {
			return nil, err
		}
		out.Backoff = b
	}
	return out, nil
}

func specFromProto(p *cronoqv1.TaskSpec) TaskSpec {
	if p == nil {
		return TaskSpec{}
	}
	s := TaskSpec{
		Pool:        p.GetPool(),
		Kind:        p.GetKind(),
		Key:         p.GetKey(),
		Priority:    priorityFromProto(p.GetPriority()),
		Payload:     p.GetPayload(),
		Labels:      kvsFromProto(p.GetLabels()),
		Tags:        kvsFromProto(p.GetTags()),
		RunAt:       msTime(p.GetRunAtMs()),
		Delay:       time.Duration(p.GetDelayMs()) * time.Millisecond,
		Deadline:    msTime(p.GetDeadlineMs()),
		Timeout:     time.Duration(p.GetTimeoutMs()) * time.Millisecond,
		MaxAttempts: int(p.GetMaxAttempts()),
	}
	if b := p.GetBackoff(); b != nil {
		s.Backoff = &Backoff{
			Initial: time.Duration(b.GetInitialMs()) * time.Millisecond,
			Max:     time.Duration(b.GetMaxMs()) * time.Millisecond,
			Jitter:  b.GetJitter(),
		}
	}
	return s
}

func taskFromProto(p *cronoqv1.Task) *Task {
	if p == nil {
		return nil
	}
	return &Task{
		ID:          p.GetId(),
		Pool:        p.GetPool(),
		Kind:        p.GetKind(),
		Key:         p.GetKey(),
		Status:      statusFromProto(p.GetStatus()),
		Priority:    priorityFromProto(p.GetPriority()),
		Attempt:     int(p.GetAttempt()),
		MaxAttempts: int(p.GetMaxAttempts()),
		Lease:       p.GetLease(),
		Labels:      kvsFromProto(p.GetLabels()),
		Tags:        kvsFromProto(p.GetTags()),
		Payload:     p.GetPayload(),
		Output:      p.GetOutput(),
		Error:       p.GetError(),
		SubmittedAt: nsTime(p.GetSubmittedAt()),
		RunAt:       nsTime(p.GetRunAt()),
		StartedAt:   nsTime(p.GetStartedAt()),
		FinishedAt:  nsTime(p.GetFinishedAt()),
		UpdatedAt:   nsTime(p.GetUpdatedAt()),
		Deadline:    nsTime(p.GetDeadline()),
		Timeout:     time.Duration(p.GetTimeoutMs()) * time.Millisecond,
		Schedule:    p.GetSchedule(),
		Slot:        nsTime(p.GetSlot()),
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
	return ReadMeta{
		Stale:        p.GetStale(),
		Node:         p.GetNode(),
		KnownLeader:  p.GetKnownLeader(),
		LastContact:  time.Duration(p.GetLastContactMs()) * time.Millisecond,
		AppliedIndex: p.GetAppliedIndex(),
	}
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
	spec, err := specToProto(s.Task)
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
		Task:         spec,
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
		Task:         specFromProto(p.GetTask()),
		Overlap:      overlapFromProto(p.GetOverlap()),
		CatchUp:      catchUpFromProto(p.GetCatchUp()),
		CatchUpLimit: int(p.GetCatchUpLimit()),
		Paused:       p.GetPaused(),
		NextFire:     nsTime(p.GetNextFire()),
		LastFire:     nsTime(p.GetLastFire()),
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
		At:      nsTime(p.GetAt()),
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
			c.RetryAfterMs, _ = durationToMs("retry_after", retry.After)
		}
	default:
		c.Outcome = cronoqv1.OutcomeKind_OUTCOME_RETRYABLE
	}
	return c
}
