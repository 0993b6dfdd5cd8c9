package transport

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// This file is where wire (proto) types meet the server's. It converts and
// refuses only what the server's types cannot hold (an enum value with no
// meaning, an unrepresentable instant); every rule about what a task may
// be is the engine core's.

func invalidf(field, format string, args ...any) error {
	return cluster.Invalid(field, format, args...)
}

// prefixed names the field of an *InvalidError inside a part of the request
// ("specs[2]." + "kind"); other errors are returned unchanged.
func prefixed(prefix string, err error) error {
	if ie, ok := err.(*cluster.InvalidError); ok {
		return &cluster.InvalidError{Field: prefix + ie.Field, Reason: ie.Reason}
	}
	return err
}

// ---------------------------------------------------------------------------
// Times
// ---------------------------------------------------------------------------

// instantFromProto reads a timestamp; unset is 0.
func instantFromProto(field string, ts *timestamppb.Timestamp) (fsm.Instant, error) {
	if ts == nil {
		return 0, nil
	}
	if err := ts.CheckValid(); err != nil {
		return 0, invalidf(field, "%v", err)
	}
	// Unix nanoseconds hold the years 1678 to 2262.
	if s := ts.GetSeconds(); s <= math.MinInt64/int64(time.Second) || s >= math.MaxInt64/int64(time.Second) {
		return 0, invalidf(field, "out of range")
	}
	return fsm.InstantOf(ts.AsTime()), nil
}

// instantToProto writes an instant; 0 is unset.
func instantToProto(at fsm.Instant) *timestamppb.Timestamp {
	if at == 0 {
		return nil
	}
	return timestamppb.New(at.Time())
}

// durationFromProto reads a duration; unset is 0.
func durationFromProto(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalidf(field, "%v", err)
	}
	if s := d.GetSeconds(); s <= math.MinInt64/int64(time.Second) || s >= math.MaxInt64/int64(time.Second) {
		return 0, invalidf(field, "out of range")
	}
	return d.AsDuration(), nil
}

// durationToProto writes a duration; 0 is unset.
func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// ---------------------------------------------------------------------------
// Enums
// ---------------------------------------------------------------------------

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
	// The range check comes first: fsm.Status is a byte, which a large
	// value would wrap into a valid one.
	if s < 0 || s > math.MaxUint8 || !fsm.Status(s).Valid() {
		return 0, invalidf("statuses", "unknown status %d", int32(s))
	}
	return fsm.Status(s), nil
}

// statusToProto relies on the two enums sharing their numbers (checked by a
// test).
func statusToProto(s fsm.Status) cronoqv1.Status { return cronoqv1.Status(s) }

// workflowStatusFromProto reads a workflow status of a list filter.
func workflowStatusFromProto(s cronoqv1.WorkflowStatus) (fsm.WorkflowStatus, error) {
	if s < 0 || s > math.MaxUint8 || !fsm.WorkflowStatus(s).Valid() {
		return 0, invalidf("statuses", "unknown workflow status %d", int32(s))
	}
	return fsm.WorkflowStatus(s), nil
}

// workflowStatusToProto relies on the two enums sharing their numbers
// (checked by a test).
func workflowStatusToProto(s fsm.WorkflowStatus) cronoqv1.WorkflowStatus {
	return cronoqv1.WorkflowStatus(s)
}

func depPolicyFromProto(p cronoqv1.DependencyPolicy) (fsm.DepPolicy, error) {
	switch p {
	case cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED:
		return fsm.DepSucceeded, nil
	case cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE:
		return fsm.DepDone, nil
	}
	return 0, invalidf("dependency_policy", "unknown dependency policy %d", int32(p))
}

func depPolicyToProto(p fsm.DepPolicy) cronoqv1.DependencyPolicy {
	if p == fsm.DepDone {
		return cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE
	}
	return cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED
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

func outcomeFromProto(c *cronoqv1.Completion) (cluster.Outcome, error) {
	out := cluster.Outcome{Output: c.GetOutput(), Message: c.GetMessage()}
	switch c.GetOutcome() {
	case cronoqv1.OutcomeKind_OUTCOME_SUCCESS:
		out.Kind = cluster.OutcomeSuccess
	case cronoqv1.OutcomeKind_OUTCOME_RETRYABLE:
		out.Kind = cluster.OutcomeRetryable
	case cronoqv1.OutcomeKind_OUTCOME_PERMANENT:
		out.Kind = cluster.OutcomePermanent
	case cronoqv1.OutcomeKind_OUTCOME_CANCELLED:
		out.Kind = cluster.OutcomeCancelled
	default:
		return cluster.Outcome{}, invalidf("outcome", "unknown outcome %d", int32(c.GetOutcome()))
	}
	var err error
	if out.RetryAfter, err = durationFromProto("retry_after", c.GetRetryAfter()); err != nil {
		return cluster.Outcome{}, err
	}
	// Children and a continuation go to the engine as they are: whether
	// the outcome may carry them is the core's to decide.
	if len(c.GetChildren()) > 0 {
		out.Children = make([]cluster.StepSpec, len(c.GetChildren()))
		for i, p := range c.GetChildren() {
			if out.Children[i], err = stepFromProto(p); err != nil {
				return cluster.Outcome{}, prefixed(fmt.Sprintf("children[%d].", i), err)
			}
		}
	}
	if p := c.GetThen(); p != nil {
		then, err := stepFromProto(p)
		if err != nil {
			return cluster.Outcome{}, prefixed("then.", err)
		}
		out.Then = &then
	}
	return out, nil
}

// externalOutcomeFromProto reads the end of an external task: a success
// with its output, or a permanent failure with its message.
func externalOutcomeFromProto(m *cronoqv1.CompleteRequest) (cluster.Outcome, error) {
	switch m.GetOutcome() {
	case cronoqv1.OutcomeKind_OUTCOME_SUCCESS:
		return cluster.Outcome{Kind: cluster.OutcomeSuccess, Output: m.GetOutput()}, nil
	case cronoqv1.OutcomeKind_OUTCOME_PERMANENT:
		return cluster.Outcome{Kind: cluster.OutcomePermanent, Message: m.GetMessage()}, nil
	}
	return cluster.Outcome{}, invalidf("outcome", "an external task ends with success or a permanent failure, not %s", m.GetOutcome())
}

// ---------------------------------------------------------------------------
// Templates, specs and tasks
// ---------------------------------------------------------------------------

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

// templateFromProto converts a task template (unset: the zero template,
// which the engine refuses for want of a pool).
func templateFromProto(p *cronoqv1.TaskTemplate) (fsm.Template, error) {
	prio, err := priorityFromProto(p.GetPriority())
	if err != nil {
		return fsm.Template{}, err
	}
	t := fsm.Template{
		Pool:        p.GetPool(),
		Kind:        p.GetKind(),
		Priority:    prio,
		Payload:     p.GetPayload(),
		MaxAttempts: p.GetMaxAttempts(),
	}
	if k := (fsm.Keys{Ordering: p.GetOrderingKey(), Concurrency: p.GetConcurrencyKey()}); !k.IsZero() {
		t.Keys = &k
	}
	if t.Labels, err = kvsFromProto("labels", p.GetLabels()); err != nil {
		return t, err
	}
	if t.Tags, err = kvsFromProto("tags", p.GetTags()); err != nil {
		return t, err
	}
	if t.Timeout, err = durationFromProto("timeout", p.GetTimeout()); err != nil {
		return t, err
	}
	if b := p.GetBackoff(); b != nil {
		if t.Backoff, err = backoffFromProto(b); err != nil {
			return t, err
		}
	}
	return t, nil
}

// backoffFromProto converts a retry backoff (of a template, a pool or a
// kind); the engine checks its values.
func backoffFromProto(b *cronoqv1.Backoff) (fsm.Backoff, error) {
	var (
		bo  fsm.Backoff
		err error
	)
	if bo.Initial, err = durationFromProto("backoff.initial", b.GetInitial()); err != nil {
		return bo, err
	}
	if bo.Max, err = durationFromProto("backoff.max", b.GetMax()); err != nil {
		return bo, err
	}
	bo.Jitter = b.GetJitter()
	return bo, nil
}

func templateToProto(t *fsm.Template) *cronoqv1.TaskTemplate {
	out := &cronoqv1.TaskTemplate{
		Pool:        t.Pool,
		Kind:        t.Kind,
		Priority:    priorityToProto(t.Priority),
		Payload:     t.Payload,
		Labels:      kvsToProto(t.Labels),
		Tags:        kvsToProto(t.Tags),
		Timeout:     durationToProto(t.Timeout),
		MaxAttempts: t.MaxAttempts,

		OrderingKey:    t.OrderingKey(),
		ConcurrencyKey: t.ConcurrencyKey(),
	}
	if t.Backoff != (fsm.Backoff{}) {
		out.Backoff = &cronoqv1.Backoff{
			Initial: durationToProto(t.Backoff.Initial),
			Max:     durationToProto(t.Backoff.Max),
			Jitter:  t.Backoff.Jitter,
		}
	}
	return out
}

// specFromProto converts the wire form of a task spec.
func specFromProto(p *cronoqv1.TaskSpec) (cluster.Spec, error) {
	var (
		s   cluster.Spec
		err error
	)
	if s.Template, err = templateFromProto(p.GetTemplate()); err != nil {
		return s, err
	}
	s.Key = p.GetKey()
	if s.RunAt, err = instantFromProto("run_at", p.GetRunAt()); err != nil {
		return s, err
	}
	if s.Delay, err = durationFromProto("delay", p.GetDelay()); err != nil {
		return s, err
	}
	if s.Deadline, err = instantFromProto("deadline", p.GetDeadline()); err != nil {
		return s, err
	}
	if len(p.GetDependsOn()) > 0 {
		s.DependsOn = make([]cluster.TaskRef, len(p.GetDependsOn()))
		for i, r := range p.GetDependsOn() {
			ref := refFromProto(r)
			switch {
			case ref.ID != "" && ref.Key != "":
				return s, invalidf(fmt.Sprintf("depends_on[%d]", i), "give an id or a key, not both")
			case ref.ID == "" && ref.Key == "":
				return s, invalidf(fmt.Sprintf("depends_on[%d]", i), "an id or a key is required")
			}
			s.DependsOn[i] = ref
		}
	}
	if s.DepPolicy, err = depPolicyFromProto(p.GetDependencyPolicy()); err != nil {
		return s, err
	}
	s.External = p.GetExternal()
	return s, nil
}

func refFromProto(r *cronoqv1.TaskRef) cluster.TaskRef {
	return cluster.TaskRef{ID: r.GetId(), Key: r.GetKey()}
}

// ---------------------------------------------------------------------------
// Workflows
// ---------------------------------------------------------------------------

// stepFromProto converts one step of a workflow submit, or a child or
// continuation of a completion.
func stepFromProto(p *cronoqv1.WorkflowStep) (cluster.StepSpec, error) {
	spec, err := specFromProto(p.GetSpec())
	if err != nil {
		return cluster.StepSpec{}, err
	}
	return cluster.StepSpec{Spec: spec, Name: p.GetName(), DependsOnSteps: p.GetDependsOn()}, nil
}

// workflowSpecFromProto converts a workflow to submit; the errors of a
// step name it as steps[i].
func workflowSpecFromProto(p *cronoqv1.WorkflowSpec) (cluster.WorkflowSpec, error) {
	out := cluster.WorkflowSpec{Name: p.GetName(), Key: p.GetKey()}
	if len(p.GetSteps()) > 0 {
		out.Steps = make([]cluster.StepSpec, len(p.GetSteps()))
	}
	for i, st := range p.GetSteps() {
		var err error
		if out.Steps[i], err = stepFromProto(st); err != nil {
			return out, prefixed(fmt.Sprintf("steps[%d].", i), err)
		}
	}
	return out, nil
}

func workflowRefFromProto(r *cronoqv1.WorkflowRef) cluster.WorkflowRef {
	return cluster.WorkflowRef{ID: r.GetId(), Key: r.GetKey()}
}

// workflowToProto converts a stored workflow, with members when given
// (Get and Wait answer them, List does not).
func workflowToProto(w *fsm.Workflow, members []*fsm.Task) *cronoqv1.Workflow {
	out := &cronoqv1.Workflow{
		Id:          w.ID,
		Name:        w.Name,
		Key:         w.Key,
		Status:      workflowStatusToProto(w.Status),
		SubmittedAt: instantToProto(w.SubmittedAt),
		UpdatedAt:   instantToProto(w.UpdatedAt),
		FinishedAt:  instantToProto(w.FinishedAt),
		Schedule:    w.Schedule,
		Slot:        instantToProto(w.Slot),
		Parent:      w.Parent,
	}
	if len(members) > 0 {
		out.Tasks = make([]*cronoqv1.Task, len(members))
		for i, t := range members {
			out.Tasks[i] = taskToProto(t)
		}
	}
	return out
}

// dependencyToProto is what dependency t of a granted task ended with,
// its output left out when omit is set.
func dependencyToProto(t *fsm.Task, omit bool) *cronoqv1.DependencyResult {
	out := &cronoqv1.DependencyResult{
		Id:     t.ID,
		Step:   t.Step(),
		Status: statusToProto(t.Status),
		Error:  t.Error,
	}
	if omit {
		out.OutputOmitted = len(t.Output) > 0
	} else {
		out.Output = t.Output
	}
	return out
}

func taskToProto(t *fsm.Task) *cronoqv1.Task {
	if t == nil {
		return nil
	}
	return &cronoqv1.Task{
		Id:          t.ID,
		Template:    templateToProto(&t.Template),
		Key:         t.Key,
		Status:      statusToProto(t.Status),
		Attempt:     t.Attempt,
		Lease:       t.Lease,
		Output:      t.Output,
		Error:       t.Error,
		SubmittedAt: instantToProto(t.SubmittedAt),
		RunAt:       instantToProto(t.RunAt),
		StartedAt:   instantToProto(t.StartedAt),
		FinishedAt:  instantToProto(t.FinishedAt),
		UpdatedAt:   instantToProto(t.UpdatedAt),
		Deadline:    instantToProto(t.Deadline),
		Schedule:    t.Schedule,
		Slot:        instantToProto(t.Slot),

		DependsOn:        t.DependsOn(),
		DependencyPolicy: depPolicyToProto(t.DepPolicy()),
		External:         t.External(),
		Workflow:         t.Workflow(),
		Step:             t.Step(),
		Parent:           t.Parent(),
		BlocksLane:       t.BlocksLane,
		Principal:        t.Principal,
		Attempts:         attemptsToProto(t.Attempts),
		AttemptBase:      t.AttemptBase,
	}
}

// attemptsToProto converts a task's attempt history (nil for none).
func attemptsToProto(as []fsm.Attempt) []*cronoqv1.Attempt {
	if len(as) == 0 {
		return nil
	}
	out := make([]*cronoqv1.Attempt, len(as))
	for i := range as {
		a := &as[i]
		out[i] = &cronoqv1.Attempt{
			Attempt:    a.Attempt,
			Worker:     a.Worker,
			Lease:      a.Lease,
			Epoch:      a.Epoch(),
			StartedAt:  instantToProto(a.StartedAt),
			FinishedAt: instantToProto(a.FinishedAt),
			Outcome:    cronoqv1.AttemptOutcome(a.Outcome),
			Error:      a.Error,
		}
	}
	return out
}

// taskFilterFromProto reads the filter of a cancel by filter.
func taskFilterFromProto(m *cronoqv1.CancelManyRequest) (cluster.TaskFilter, error) {
	f := cluster.TaskFilter{Pool: m.GetPool(), Kinds: m.GetKinds()}
	for _, p := range m.GetStatuses() {
		st, err := statusFromProto(p)
		if err != nil {
			return f, err
		}
		f.Statuses = append(f.Statuses, st)
	}
	return f, nil
}

// taskSize bounds the encoded size of a task, to cut list pages.
func taskSize(t *fsm.Task) int { return t.Msgsize() }

// ---------------------------------------------------------------------------
// Schedules and events
// ---------------------------------------------------------------------------

// scheduleFromProto converts a schedule to add. A schedule that fires a
// workflow (steps set) leaves its task unset (or sends it empty): that is
// the zero template, not the conversion of an empty one (whose priority
// would be normal, so the engine would take it for a task template that
// is set). A task set next to steps is passed on for the engine to refuse.
func scheduleFromProto(p *cronoqv1.Schedule) (cluster.ScheduleSpec, error) {
	var (
		tpl fsm.Template
		err error
	)
	if len(p.GetSteps()) == 0 || proto.Size(p.GetTask()) > 0 {
		if tpl, err = templateFromProto(p.GetTask()); err != nil {
			return cluster.ScheduleSpec{}, prefixed("task.", err)
		}
	}
	ov, err := overlapFromProto(p.GetOverlap())
	if err != nil {
		return cluster.ScheduleSpec{}, err
	}
	cu, err := catchUpFromProto(p.GetCatchUp())
	if err != nil {
		return cluster.ScheduleSpec{}, err
	}
	out := cluster.ScheduleSpec{
		Name:         p.GetName(),
		Cron:         p.GetCron(),
		TZ:           p.GetTz(),
		Task:         tpl,
		Workflow:     p.GetWorkflow(),
		Overlap:      ov,
		CatchUp:      cu,
		CatchUpLimit: p.GetCatchUpLimit(),
		Paused:       p.GetPaused(),
	}
	if len(p.GetSteps()) > 0 {
		out.Steps = make([]fsm.StepTemplate, len(p.GetSteps()))
		for i, st := range p.GetSteps() {
			if out.Steps[i], err = stepTemplateFromProto(st); err != nil {
				return cluster.ScheduleSpec{}, prefixed(fmt.Sprintf("steps[%d].", i), err)
			}
		}
	}
	return out, nil
}

// stepTemplateFromProto converts a step of a schedule's workflow. Its spec
// holds a template, a dependency policy and the external flag: each fire
// runs its steps at the fire's instant, and they depend on other steps
// only, so the rest of a spec has no place here and is refused rather
// than dropped.
func stepTemplateFromProto(p *cronoqv1.WorkflowStep) (fsm.StepTemplate, error) {
	sp := p.GetSpec()
	notHere := func(field string) (fsm.StepTemplate, error) {
		return fsm.StepTemplate{}, invalidf(field, "a step of a schedule takes a template, a dependency policy and the external flag only")
	}
	switch {
	case sp.GetKey() != "":
		return notHere("spec.key")
	case sp.GetRunAt() != nil:
		return notHere("spec.run_at")
	case sp.GetDelay() != nil:
		return notHere("spec.delay")
	case sp.GetDeadline() != nil:
		return notHere("spec.deadline")
	case len(sp.GetDependsOn()) > 0:
		return notHere("spec.depends_on")
	}
	tpl, err := templateFromProto(sp.GetTemplate())
	if err != nil {
		return fsm.StepTemplate{}, err
	}
	pol, err := depPolicyFromProto(sp.GetDependencyPolicy())
	if err != nil {
		return fsm.StepTemplate{}, err
	}
	return fsm.StepTemplate{
		Name:      p.GetName(),
		Template:  tpl,
		DependsOn: p.GetDependsOn(),
		DepPolicy: pol,
		External:  sp.GetExternal(),
	}, nil
}

// scheduleToProto converts a stored schedule with its next fire.
func scheduleToProto(s *fsm.Schedule) *cronoqv1.Schedule {
	out := &cronoqv1.Schedule{
		Name:         s.Name,
		Cron:         s.Cron,
		Tz:           s.TZ,
		Workflow:     s.Workflow,
		Overlap:      overlapToProto(s.Overlap),
		CatchUp:      catchUpToProto(s.CatchUp),
		CatchUpLimit: s.CatchUpLimit,
		Paused:       s.Paused,
		NextFire:     instantToProto(cluster.NextFire(s)),
		LastFire:     instantToProto(s.LastFire),
		Fires:        s.Fires,
		Skipped:      s.Skipped,
		LastTask:     s.LastTask,
	}
	if len(s.Steps) == 0 {
		out.Task = templateToProto(&s.Template)
		return out
	}
	// A schedule that fires a workflow has no task template.
	out.Steps = make([]*cronoqv1.WorkflowStep, len(s.Steps))
	for i := range s.Steps {
		st := &s.Steps[i]
		out.Steps[i] = &cronoqv1.WorkflowStep{
			Name: st.Name,
			Spec: &cronoqv1.TaskSpec{
				Template:         templateToProto(&st.Template),
				DependencyPolicy: depPolicyToProto(st.DepPolicy),
				External:         st.External,
			},
			DependsOn: st.DependsOn,
		}
	}
	return out
}

func eventToProto(ev cluster.Event) *cronoqv1.Event {
	return &cronoqv1.Event{
		Cursor:  ev.Cursor,
		TaskId:  ev.TaskID,
		Pool:    ev.Pool,
		Kind:    ev.Kind,
		Status:  statusToProto(ev.Status),
		Attempt: ev.Attempt,
		Message: ev.Message,
		At:      instantToProto(ev.At),

		Workflow:       ev.Workflow,
		Step:           ev.Step,
		WorkflowStatus: workflowStatusToProto(ev.WorkflowStatus),
	}
}

// fsmEventToProto converts an event of the replicated state, with its
// cursor.
func fsmEventToProto(ev *fsm.Event) *cronoqv1.Event {
	return &cronoqv1.Event{
		TaskId:  ev.TaskID,
		Pool:    ev.Pool,
		Kind:    ev.Kind,
		Status:  statusToProto(ev.Status),
		Attempt: ev.Attempt,
		Message: ev.Message,
		At:      instantToProto(ev.At),

		Workflow:       ev.Workflow,
		Step:           ev.Step,
		WorkflowStatus: workflowStatusToProto(ev.WorkflowStatus),
		Cursor:         ev.Cursor,
	}
}

// subscriptionSpecFromProto reads what a create of a subscription sets.
func subscriptionSpecFromProto(p *cronoqv1.Subscription, secret string) (cluster.SubscriptionSpec, error) {
	if p == nil {
		return cluster.SubscriptionSpec{}, invalidf("subscription", "required")
	}
	spec := cluster.SubscriptionSpec{
		Name: p.GetName(), Pools: p.GetPools(), Kinds: p.GetKinds(),
		Webhook: p.GetWebhook(), Secret: secret, MaxDeliveries: p.GetMaxDeliveries(),
	}
	for i, st := range p.GetStatuses() {
		s, err := statusFromProto(st)
		if err != nil {
			return spec, invalidf(fmt.Sprintf("statuses[%d]", i), "unknown status %d", int32(st))
		}
		spec.Statuses = append(spec.Statuses, s)
	}
	d, err := durationFromProto("ack_timeout", p.GetAckTimeout())
	if err != nil {
		return spec, err
	}
	spec.AckTimeout = d
	return spec, nil
}

// subscriptionToProto converts a subscription, without its secret.
func subscriptionToProto(s *fsm.Subscription, pending int) *cronoqv1.Subscription {
	out := &cronoqv1.Subscription{
		Name: s.Name, Pools: s.Pools, Kinds: s.Kinds, Webhook: s.Webhook, HasSecret: s.Secret != "",
		AckTimeout: durationToProto(s.AckTimeout), MaxDeliveries: s.MaxDeliveries, Acked: s.Acked,
		Stalled: s.Stalled, StallReason: s.StallReason, StalledAt: instantToProto(s.StalledAt),
		Pending: uint64(pending), CreatedAt: instantToProto(s.CreatedAt),
		CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex,
	}
	for _, st := range s.Statuses {
		out.Statuses = append(out.Statuses, statusToProto(st))
	}
	return out
}
