package client

import (
	"errors"
	"fmt"
	"strings"
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
	cronoqv1.Status_STATUS_BLOCKED:   StatusBlocked,
	cronoqv1.Status_STATUS_PARKED:    StatusParked,
}

func depPolicyToProto(s string) (cronoqv1.DependencyPolicy, error) {
	switch s {
	case "", DependencyPolicySucceeded:
		return cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED, nil
	case DependencyPolicyDone:
		return cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE, nil
	}
	return 0, &InvalidError{Field: "dependency_policy", Reason: fmt.Sprintf("%q is not succeeded or done", s)}
}

func depPolicyFromProto(p cronoqv1.DependencyPolicy) string {
	if p == cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE {
		return DependencyPolicyDone
	}
	return DependencyPolicySucceeded
}

var workflowStatusNames = map[cronoqv1.WorkflowStatus]string{
	cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING:   WorkflowRunning,
	cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED: WorkflowSucceeded,
	cronoqv1.WorkflowStatus_WORKFLOW_STATUS_FAILED:    WorkflowFailed,
	cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED: WorkflowCancelled,
}

func workflowStatusToProto(s string) (cronoqv1.WorkflowStatus, error) {
	for k, v := range workflowStatusNames {
		if v == s {
			return k, nil
		}
	}
	return 0, &InvalidError{Field: "status", Reason: fmt.Sprintf("unknown workflow status %q", s)}
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
	pol, err := depPolicyToProto(s.DependencyPolicy)
	if err != nil {
		return nil, err
	}
	out := &cronoqv1.TaskSpec{
		Template:         tpl,
		Key:              s.Key,
		RunAt:            timeToProto(s.RunAt),
		Delay:            durationToProto(s.Delay),
		Deadline:         timeToProto(s.Deadline),
		DependencyPolicy: pol,
		External:         s.External,
	}
	for _, r := range s.DependsOn {
		out.DependsOn = append(out.DependsOn, &cronoqv1.TaskRef{Id: r.ID, Key: r.Key})
	}
	return out, nil
}

func stepToProto(s Step) (*cronoqv1.WorkflowStep, error) {
	spec, err := specToProto(s.Task)
	if err != nil {
		return nil, err
	}
	return &cronoqv1.WorkflowStep{Name: s.Name, Spec: spec, DependsOn: s.DependsOn}, nil
}

func stepFromProto(p *cronoqv1.WorkflowStep) Step {
	st := Step{Name: p.GetName(), DependsOn: p.GetDependsOn()}
	if sp := p.GetSpec(); sp != nil {
		st.Task = TaskSpec{
			Template:         templateFromProto(sp.GetTemplate()),
			DependencyPolicy: depPolicyFromProto(sp.GetDependencyPolicy()),
			External:         sp.GetExternal(),
		}
	}
	return st
}

func workflowFromProto(p *cronoqv1.Workflow) *Workflow {
	if p == nil {
		return nil
	}
	w := &Workflow{
		ID:          p.GetId(),
		Name:        p.GetName(),
		Key:         p.GetKey(),
		Status:      workflowStatusNames[p.GetStatus()],
		SubmittedAt: timeFromProto(p.GetSubmittedAt()),
		UpdatedAt:   timeFromProto(p.GetUpdatedAt()),
		FinishedAt:  timeFromProto(p.GetFinishedAt()),
		Schedule:    p.GetSchedule(),
		Slot:        timeFromProto(p.GetSlot()),
		Parent:      p.GetParent(),
	}
	for _, t := range p.GetTasks() {
		w.Tasks = append(w.Tasks, taskFromProto(t))
	}
	return w
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

		DependsOn:        p.GetDependsOn(),
		DependencyPolicy: depPolicyFromProto(p.GetDependencyPolicy()),
		External:         p.GetExternal(),
		Workflow:         p.GetWorkflow(),
		Step:             p.GetStep(),
		Parent:           p.GetParent(),
		BlocksLane:       p.GetBlocksLane(),
		Principal:        p.GetPrincipal(),
		Attempts:         attemptsFromProto(p.GetAttempts()),
		AttemptBase:      int(p.GetAttemptBase()),
	}
}

// attemptOutcomeNames are the names of the outcomes of an attempt.
var attemptOutcomeNames = map[cronoqv1.AttemptOutcome]string{
	cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED: AttemptSucceeded,
	cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED:    AttemptFailed,
	cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_RETRY:     AttemptRetry,
	cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED: AttemptCancelled,
	cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_EXPIRED:   AttemptExpired,
	cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_TIMEOUT:   AttemptTimeout,
	cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_LOST:      AttemptLost,
}

func attemptsFromProto(ps []*cronoqv1.Attempt) []Attempt {
	if len(ps) == 0 {
		return nil
	}
	out := make([]Attempt, len(ps))
	for i, p := range ps {
		outcome, ok := attemptOutcomeNames[p.GetOutcome()]
		if !ok {
			outcome = "unknown"
		}
		out[i] = Attempt{
			Attempt:    int(p.GetAttempt()),
			Worker:     p.GetWorker(),
			Lease:      p.GetLease(),
			Epoch:      p.GetEpoch(),
			StartedAt:  timeFromProto(p.GetStartedAt()),
			FinishedAt: timeFromProto(p.GetFinishedAt()),
			Outcome:    outcome,
			Error:      p.GetError(),
		}
	}
	return out
}

// cancelFilterToProto converts the filter of CancelMany.
func cancelFilterToProto(f CancelFilter) (*cronoqv1.CancelManyRequest, error) {
	if f.Pool == "" {
		return nil, &InvalidError{Field: "pool", Reason: "a pool is required"}
	}
	if len(f.Statuses) == 0 {
		return nil, &InvalidError{Field: "statuses", Reason: "at least one status is required"}
	}
	req := &cronoqv1.CancelManyRequest{Pool: f.Pool, Kinds: f.Kinds}
	for _, s := range f.Statuses {
		st, err := statusToProto(s)
		if err != nil {
			return nil, err
		}
		req.Statuses = append(req.Statuses, st)
	}
	return req, nil
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
	req := &cronoqv1.ListRequest{Pools: o.Pools, Kinds: o.Kinds, NewestFirst: o.NewestFirst,
		After: o.After, Limit: int32(o.Limit), Stale: o.Stale}
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
	var tpl *cronoqv1.TaskTemplate
	if len(s.Steps) == 0 || !isZeroTemplate(&s.Task) {
		var err error
		if tpl, err = templateToProto(&s.Task); err != nil {
			return nil, err
		}
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
	out := &cronoqv1.Schedule{
		Name:         s.Name,
		Cron:         s.Cron,
		Tz:           s.TZ,
		Task:         tpl,
		Overlap:      ov,
		CatchUp:      cu,
		CatchUpLimit: uint32(s.CatchUpLimit),
		Paused:       s.Paused,
		Workflow:     s.Workflow,
	}
	for i, st := range s.Steps {
		ps, err := stepToProto(st)
		if err != nil {
			return nil, prefixInvalid(fmt.Sprintf("steps[%d].", i), err)
		}
		out.Steps = append(out.Steps, ps)
	}
	return out, nil
}

func scheduleFromProto(p *cronoqv1.Schedule) Schedule {
	var steps []Step
	for _, st := range p.GetSteps() {
		steps = append(steps, stepFromProto(st))
	}
	var task Template // a schedule that fires a workflow has none
	if len(steps) == 0 {
		task = templateFromProto(p.GetTask())
	}
	return Schedule{
		Name:         p.GetName(),
		Cron:         p.GetCron(),
		TZ:           p.GetTz(),
		Task:         task,
		Overlap:      overlapFromProto(p.GetOverlap()),
		CatchUp:      catchUpFromProto(p.GetCatchUp()),
		CatchUpLimit: int(p.GetCatchUpLimit()),
		Paused:       p.GetPaused(),
		NextFire:     timeFromProto(p.GetNextFire()),
		LastFire:     timeFromProto(p.GetLastFire()),
		Fires:        p.GetFires(),
		Skipped:      p.GetSkipped(),
		LastTask:     p.GetLastTask(),
		Workflow:     p.GetWorkflow(),
		Steps:        steps,
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
		Cursor:  p.GetCursor(),
		Lagged:  p.GetLagged(),

		Workflow:       p.GetWorkflow(),
		Step:           p.GetStep(),
		WorkflowStatus: workflowStatusNames[p.GetWorkflowStatus()],
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

// jobFromGrant builds the Job a handler sees for a grant, with c to read
// the dependency outputs the grant left out. The grant's lease and attempt
// are authoritative over the copies inside the task.
func jobFromGrant(g *cronoqv1.Grant, c *Client) *Job {
	t := taskFromProto(g.GetTask())
	if t == nil {
		t = &Task{}
	}
	t.Lease = g.GetLease()
	if g.GetAttempt() != 0 {
		t.Attempt = int(g.GetAttempt())
	}
	t.Status = StatusRunning
	job := &Job{Task: t, Lease: g.GetLease(), Attempt: t.Attempt, client: c}
	for _, d := range g.GetDependencies() {
		job.Dependencies = append(job.Dependencies, Dependency{
			ID:            d.GetId(),
			Step:          d.GetStep(),
			Status:        statusFromProto(d.GetStatus()),
			Output:        d.GetOutput(),
			Error:         d.GetError(),
			OutputOmitted: d.GetOutputOmitted(),
		})
	}
	return job
}

// completionToProto turns what a handler returned into the completion sent
// for its lease: nil error = success with output, carrying the children
// and continuation the job spawned; ErrCancelAttempt = cancelled;
// *RetryableError = retryable with its hint; *PermanentError = permanent;
// any other error = retryable (a *PanicError with its stack excerpt). A
// failure drops the children. A child the wire cannot carry fails the
// attempt permanently, naming it, rather than losing the children.
func completionToProto(lease uint64, output []byte, err error, children []Step, then *Step) *cronoqv1.Completion {
	c := &cronoqv1.Completion{Lease: lease}
	if err == nil {
		c.Outcome = cronoqv1.OutcomeKind_OUTCOME_SUCCESS
		c.Output = output
		if err := spawnToProto(c, children, then); err != nil {
			return &cronoqv1.Completion{
				Lease:   lease,
				Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT,
				Message: "spawning children: " + err.Error(),
			}
		}
		return c
	}
	c.Message = err.Error()
	var perm *PermanentError
	var retry *RetryableError
	var pe *PanicError
	if errors.As(err, &pe) {
		c.Message = pe.Report()
	}
	switch {
	case errors.Is(err, ErrCancelAttempt):
		c.Outcome = cronoqv1.OutcomeKind_OUTCOME_CANCELLED
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

// spawnToProto converts the children and continuation of a successful
// attempt into c; errors name the step as children[i].field or
// then.field.
func spawnToProto(c *cronoqv1.Completion, children []Step, then *Step) error {
	for i, st := range children {
		ps, err := stepToProto(st)
		if err != nil {
			return prefixInvalid(fmt.Sprintf("children[%d].", i), err)
		}
		c.Children = append(c.Children, ps)
	}
	if then != nil {
		ps, err := stepToProto(*then)
		if err != nil {
			return prefixInvalid("then.", err)
		}
		c.Then = ps
	}
	return nil
}

// prefixInvalid names the field of an *InvalidError inside a part of a
// request; other errors are wrapped with the prefix.
func prefixInvalid(prefix string, err error) error {
	var inv *InvalidError
	if errors.As(err, &inv) {
		return &InvalidError{Field: prefix + inv.Field, Reason: inv.Reason}
	}
	return fmt.Errorf("%s %w", strings.TrimSuffix(prefix, "."), err)
}
