package transport

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// t0 is the leader clock of the fake's entries.
const t0 fsm.Instant = 1_700_000_000_000_000_000

// queuedTask is a task record to insert, adjusted by mod.
func queuedTask(id string, mod func(*fsm.Task)) *fsm.Task {
	t := &fsm.Task{
		ID: id, Template: fsm.Template{Pool: "p", Kind: "k", Priority: fsm.PriorityNormal},
		Status: fsm.StatusQueued, SubmittedAt: t0,
	}
	if mod != nil {
		mod(t)
	}
	return t
}

// inWorkflow makes a task the member wf's step.
func inWorkflow(wf, step string) func(*fsm.Task) {
	return func(t *fsm.Task) { t.MakeFlow().Workflow, t.MakeFlow().Step = wf, step }
}

// succeed runs queued task id under lease and ends it succeeded with
// output.
func succeed(id string, lease uint64, output string) []fsm.Mutation {
	return []fsm.Mutation{
		{Start: &fsm.Start{ID: id, Attempt: 1, Lease: lease, Worker: "w", At: t0}},
		{Finish: &fsm.Finish{ID: id, Lease: lease, Status: fsm.StatusSucceeded, Output: []byte(output), At: t0}},
	}
}

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var ie *cluster.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, field, ie.Field, "%v", err)
}

func TestWorkflowStatusNumbersMatch(t *testing.T) {
	for st := fsm.WorkflowRunning; st <= fsm.WorkflowCancelled; st++ {
		p := workflowStatusToProto(st)
		require.Equal(t, "WORKFLOW_STATUS_"+strings.ToUpper(st.String()), p.String())
		back, err := workflowStatusFromProto(p)
		require.NoError(t, err)
		require.Equal(t, st, back)
	}
	// 257 would wrap into a valid status of a byte.
	for _, bad := range []cronoqv1.WorkflowStatus{cronoqv1.WorkflowStatus_WORKFLOW_STATUS_UNSPECIFIED, 5, -1, 257} {
		_, err := workflowStatusFromProto(bad)
		requireInvalid(t, err, "statuses")
	}
}

func TestDependenciesFromProto(t *testing.T) {
	s, err := specFromProto(&cronoqv1.TaskSpec{
		Template:         &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"},
		DependsOn:        []*cronoqv1.TaskRef{{Id: "a"}, {Key: "b"}},
		DependencyPolicy: cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE,
		External:         true,
	})
	require.NoError(t, err)
	require.Equal(t, []cluster.TaskRef{{ID: "a"}, {Key: "b"}}, s.DependsOn)
	require.Equal(t, fsm.DepDone, s.DepPolicy)
	require.True(t, s.External)

	s, err = specFromProto(spec("p"))
	require.NoError(t, err)
	require.Nil(t, s.DependsOn)
	require.Equal(t, fsm.DepSucceeded, s.DepPolicy)
	require.False(t, s.External)

	for _, tc := range []struct {
		spec  *cronoqv1.TaskSpec
		field string
	}{
		{&cronoqv1.TaskSpec{DependsOn: []*cronoqv1.TaskRef{{Id: "a"}, {Id: "a", Key: "b"}}}, "depends_on[1]"},
		{&cronoqv1.TaskSpec{DependsOn: []*cronoqv1.TaskRef{{}}}, "depends_on[0]"},
		{&cronoqv1.TaskSpec{DependsOn: []*cronoqv1.TaskRef{{Key: "a"}, nil}}, "depends_on[1]"},
		{&cronoqv1.TaskSpec{DependencyPolicy: 7}, "dependency_policy"},
	} {
		_, err := specFromProto(tc.spec)
		requireInvalid(t, err, tc.field)
	}
}

func TestWorkflowSpecFromProto(t *testing.T) {
	w, err := workflowSpecFromProto(&cronoqv1.WorkflowSpec{Name: "etl", Key: "wk", Steps: []*cronoqv1.WorkflowStep{
		{Name: "a", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, External: true}},
		{Name: "b", Spec: &cronoqv1.TaskSpec{
			Template:  &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"},
			DependsOn: []*cronoqv1.TaskRef{{Id: "x"}},
		}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	tpl := fsm.Template{Pool: "p", Kind: "k", Priority: fsm.PriorityNormal}
	require.Equal(t, cluster.WorkflowSpec{Name: "etl", Key: "wk", Steps: []cluster.StepSpec{
		{Name: "a", Spec: cluster.Spec{Template: tpl, External: true}},
		{Name: "b", Spec: cluster.Spec{Template: tpl, DependsOn: []cluster.TaskRef{{ID: "x"}}}, DependsOnSteps: []string{"a"}},
	}}, w)

	_, err = workflowSpecFromProto(&cronoqv1.WorkflowSpec{Steps: []*cronoqv1.WorkflowStep{
		{Name: "a", Spec: spec("p")}, {Name: "b", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Priority: 9}}},
	}})
	requireInvalid(t, err, "steps[1].priority")
	_, err = workflowSpecFromProto(&cronoqv1.WorkflowSpec{Steps: []*cronoqv1.WorkflowStep{
		{Name: "a", Spec: &cronoqv1.TaskSpec{DependsOn: []*cronoqv1.TaskRef{{}}}},
	}})
	requireInvalid(t, err, "steps[0].depends_on[0]")

	// Nothing to refuse here: the engine refuses an empty workflow.
	w, err = workflowSpecFromProto(nil)
	require.NoError(t, err)
	require.Empty(t, w.Steps)
}

func TestCompletionChildrenFromProto(t *testing.T) {
	out, err := outcomeFromProto(&cronoqv1.Completion{
		Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte("o"),
		Children: []*cronoqv1.WorkflowStep{
			{Name: "c1", Spec: spec("p")},
			{Spec: spec("q"), DependsOn: []string{"c1"}},
		},
		Then: &cronoqv1.WorkflowStep{Name: "join", Spec: spec("p")},
	})
	require.NoError(t, err)
	require.Equal(t, cluster.OutcomeSuccess, out.Kind)
	require.Equal(t, []byte("o"), out.Output)
	require.Len(t, out.Children, 2)
	require.Equal(t, "c1", out.Children[0].Name)
	require.Equal(t, "q", out.Children[1].Pool)
	require.Equal(t, []string{"c1"}, out.Children[1].DependsOnSteps)
	require.NotNil(t, out.Then)
	require.Equal(t, "join", out.Then.Name)

	out, err = outcomeFromProto(&cronoqv1.Completion{Outcome: cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, RetryAfter: durationpb.New(time.Second)})
	require.NoError(t, err)
	require.Nil(t, out.Children)
	require.Nil(t, out.Then)
	require.Equal(t, time.Second, out.RetryAfter)

	_, err = outcomeFromProto(&cronoqv1.Completion{Children: []*cronoqv1.WorkflowStep{{Spec: &cronoqv1.TaskSpec{DependencyPolicy: 3}}}})
	requireInvalid(t, err, "children[0].dependency_policy")
	_, err = outcomeFromProto(&cronoqv1.Completion{Then: &cronoqv1.WorkflowStep{Spec: &cronoqv1.TaskSpec{DependsOn: []*cronoqv1.TaskRef{{}}}}})
	requireInvalid(t, err, "then.depends_on[0]")

	for kind, want := range map[cronoqv1.OutcomeKind]cluster.Outcome{
		cronoqv1.OutcomeKind_OUTCOME_SUCCESS:   {Kind: cluster.OutcomeSuccess, Output: []byte("o")},
		cronoqv1.OutcomeKind_OUTCOME_PERMANENT: {Kind: cluster.OutcomePermanent, Message: "m"},
	} {
		got, err := externalOutcomeFromProto(&cronoqv1.CompleteRequest{Outcome: kind, Output: []byte("o"), Message: "m"})
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, kind := range []cronoqv1.OutcomeKind{cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, cronoqv1.OutcomeKind_OUTCOME_CANCELLED, 9} {
		_, err := externalOutcomeFromProto(&cronoqv1.CompleteRequest{Outcome: kind})
		requireInvalid(t, err, "outcome")
	}
}

func TestScheduleWorkflowConversion(t *testing.T) {
	steps := []*cronoqv1.WorkflowStep{
		{Name: "a", Spec: &cronoqv1.TaskSpec{
			Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", Priority: cronoqv1.Priority_PRIORITY_LOW}, External: true,
		}},
		{Name: "b", Spec: &cronoqv1.TaskSpec{
			Template:         &cronoqv1.TaskTemplate{Pool: "p", Kind: "k2"},
			DependencyPolicy: cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE,
		}, DependsOn: []string{"a"}},
	}
	sc, err := scheduleFromProto(&cronoqv1.Schedule{Name: "s", Cron: "@daily", Workflow: "etl", Steps: steps})
	require.NoError(t, err)
	require.Equal(t, fsm.Template{}, sc.Task, "an unset task is the zero template")
	require.Equal(t, "etl", sc.Workflow)
	require.Equal(t, []fsm.StepTemplate{
		{Name: "a", Template: fsm.Template{Pool: "p", Kind: "k", Priority: fsm.PriorityLow}, External: true},
		{Name: "b", Template: fsm.Template{Pool: "p", Kind: "k2", Priority: fsm.PriorityNormal}, DependsOn: []string{"a"}, DepPolicy: fsm.DepDone},
	}, sc.Steps)

	// An empty task message is unset too; a task set next to steps goes on
	// for the engine to refuse.
	sc2, err := scheduleFromProto(&cronoqv1.Schedule{Name: "s", Task: &cronoqv1.TaskTemplate{}, Steps: steps})
	require.NoError(t, err)
	require.Equal(t, fsm.Template{}, sc2.Task)
	sc2, err = scheduleFromProto(&cronoqv1.Schedule{Name: "s", Task: &cronoqv1.TaskTemplate{Pool: "p"}, Steps: steps})
	require.NoError(t, err)
	require.Equal(t, "p", sc2.Task.Pool)
	_, err = scheduleFromProto(&cronoqv1.Schedule{Name: "s", Task: &cronoqv1.TaskTemplate{Priority: 8}, Steps: steps})
	requireInvalid(t, err, "task.priority")

	// What a schedule's step cannot hold is refused, not dropped.
	for _, tc := range []struct {
		spec  *cronoqv1.TaskSpec
		field string
	}{
		{&cronoqv1.TaskSpec{Key: "k"}, "steps[0].spec.key"},
		{&cronoqv1.TaskSpec{RunAt: timestamppb.Now()}, "steps[0].spec.run_at"},
		{&cronoqv1.TaskSpec{Delay: durationpb.New(time.Second)}, "steps[0].spec.delay"},
		{&cronoqv1.TaskSpec{Deadline: timestamppb.Now()}, "steps[0].spec.deadline"},
		{&cronoqv1.TaskSpec{DependsOn: []*cronoqv1.TaskRef{{Id: "x"}}}, "steps[0].spec.depends_on"},
		{&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Priority: 9}}, "steps[0].priority"},
		{&cronoqv1.TaskSpec{DependencyPolicy: 4}, "steps[0].dependency_policy"},
	} {
		_, err := scheduleFromProto(&cronoqv1.Schedule{Name: "s", Steps: []*cronoqv1.WorkflowStep{{Name: "a", Spec: tc.spec}}})
		requireInvalid(t, err, tc.field)
	}

	// Stored, and back on the wire: no task, the steps as given.
	rec := &fsm.Schedule{Name: "s", Cron: "@daily", Workflow: sc.Workflow, Steps: sc.Steps, CreatedAt: t0}
	p := scheduleToProto(rec)
	require.Nil(t, p.GetTask())
	require.Equal(t, "etl", p.GetWorkflow())
	require.Len(t, p.GetSteps(), 2)
	require.Equal(t, []string{"a"}, p.GetSteps()[1].GetDependsOn())
	require.Equal(t, cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE, p.GetSteps()[1].GetSpec().GetDependencyPolicy())
	require.True(t, p.GetSteps()[0].GetSpec().GetExternal())
	require.Equal(t, cronoqv1.Priority_PRIORITY_LOW, p.GetSteps()[0].GetSpec().GetTemplate().GetPriority())
	back, err := scheduleFromProto(p)
	require.NoError(t, err)
	require.Equal(t, sc.Steps, back.Steps)
	require.Equal(t, fsm.Template{}, back.Task)

	// A schedule of one task keeps its template and has no steps.
	p = scheduleToProto(&fsm.Schedule{Name: "t", Cron: "@daily", Template: fsm.Template{Pool: "p", Kind: "k"}, CreatedAt: t0})
	require.Equal(t, "p", p.GetTask().GetPool())
	require.Empty(t, p.GetSteps())
}

func TestWorkflowEvents(t *testing.T) {
	task := cluster.Event{TaskID: "t", Pool: "p", Kind: "k", Status: fsm.StatusBlocked, Workflow: "w", Step: "s", At: t0}
	p := eventToProto(task)
	require.Equal(t, "w", p.GetWorkflow())
	require.Equal(t, "s", p.GetStep())
	require.Equal(t, cronoqv1.Status_STATUS_BLOCKED, p.GetStatus())
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_UNSPECIFIED, p.GetWorkflowStatus())

	wf := cluster.Event{Workflow: "w", Kind: "etl", WorkflowStatus: fsm.WorkflowSucceeded, At: t0}
	p = eventToProto(wf)
	require.Empty(t, p.GetTaskId())
	require.Equal(t, "etl", p.GetKind())
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED, p.GetWorkflowStatus())

	require.True(t, wanted(nil, task))
	require.True(t, wanted(nil, wf))
	pools := map[string]bool{"p": true}
	require.True(t, wanted(pools, task))
	require.False(t, wanted(pools, cluster.Event{TaskID: "t2", Pool: "other"}))
	require.False(t, wanted(pools, wf), "a workflow has no pool")
}

// A subscriber that names pools gets their task events only; one that
// names none gets the workflow events too.
func TestEventsFilterWorkflowEvents(t *testing.T) {
	b := newFakeBackend()
	b.subscribed = make(chan struct{}, 1)
	hc, base := startFake(t, b, nil)
	tasks := cronoqv1connect.NewTaskServiceClient(hc, base)

	var index uint64
	wfEvent := cluster.Event{Workflow: "w1", Kind: "etl", WorkflowStatus: fsm.WorkflowRunning, At: t0}
	other := cluster.Event{TaskID: "t0", Pool: "other", Kind: "k", Status: fsm.StatusQueued, At: t0}
	member := cluster.Event{TaskID: "t1", Pool: "p", Kind: "k", Status: fsm.StatusQueued, Workflow: "w1", Step: "a", At: t0}

	for _, tc := range []struct {
		pools []string
		want  []cluster.Event
	}{
		{[]string{"p"}, []cluster.Event{member}},
		{nil, []cluster.Event{wfEvent, other, member}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := tasks.Events(ctx, connect.NewRequest(&cronoqv1.EventsRequest{Pools: tc.pools}))
		require.NoError(t, err)
		select {
		case <-b.subscribed:
		case <-ctx.Done():
			t.Fatal("no subscription")
		}
		index++
		evs := []cluster.Event{wfEvent, other, member}
		for i := range evs {
			evs[i].Cursor = fsm.MakeCursor(index, i)
		}
		b.events.Publish(index, evs)
		for _, want := range tc.want {
			require.True(t, stream.Receive(), "%v", stream.Err())
			got := stream.Msg()
			require.Equal(t, want.TaskID, got.GetTaskId(), "pools %v", tc.pools)
			require.NotZero(t, got.GetCursor())
			require.Equal(t, index, fsm.CursorIndex(got.GetCursor()))
			require.Equal(t, want.Workflow, got.GetWorkflow())
			require.Equal(t, want.Step, got.GetStep())
			require.Equal(t, workflowStatusToProto(want.WorkflowStatus), got.GetWorkflowStatus())
		}
		require.NoError(t, stream.Close())
		cancel()
	}
}

// TaskService.Complete ends an external task through the leader and
// answers with the task as stored.
func TestCompleteExternalTask(t *testing.T) {
	b := newFakeBackend()
	b.apply(t, t0,
		fsm.Mutation{Insert: queuedTask("ext1", func(t *fsm.Task) { t.MakeFlow().External = true })},
		fsm.Mutation{Insert: queuedTask("ext2", func(t *fsm.Task) { t.MakeFlow().External, t.Key = true, "k2" })},
	)
	outcomes := make(chan cluster.Outcome, 4)
	b.completeExternal = func(ref cluster.TaskRef, out cluster.Outcome) (string, error) {
		outcomes <- out
		id := ref.ID
		switch {
		case ref.Key == "k2":
			id = "ext2"
		case id == "busy":
			return "", fmt.Errorf("%w: task busy is running", cluster.ErrNotWaiting)
		case id == "new":
			return "", &cluster.VersionError{What: "completing an external task", Need: 3, Have: 2}
		case id != "ext1":
			return "", fmt.Errorf("task %s: %w", ref, cluster.ErrNotFound)
		}
		fin := &fsm.Finish{ID: id, Status: fsm.StatusSucceeded, Output: out.Output, At: t0 + 1}
		if out.Kind == cluster.OutcomePermanent {
			fin.Status, fin.Output, fin.Error = fsm.StatusFailed, nil, out.Message
		}
		return id, b.applyErr(t0+1, fsm.Mutation{Finish: fin})
	}
	tasks, _ := serveFake(t, b)
	ctx := ctxT(t, 10*time.Second)

	resp, err := tasks.Complete(ctx, connect.NewRequest(&cronoqv1.CompleteRequest{
		Ref: &cronoqv1.TaskRef{Id: "ext1"}, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte("approved"),
	}))
	require.NoError(t, err)
	require.Equal(t, cluster.Outcome{Kind: cluster.OutcomeSuccess, Output: []byte("approved")}, <-outcomes)
	task := resp.Msg.GetTask()
	require.Equal(t, "ext1", task.GetId())
	require.Equal(t, cronoqv1.Status_STATUS_SUCCEEDED, task.GetStatus())
	require.Equal(t, []byte("approved"), task.GetOutput())
	require.True(t, task.GetExternal())

	resp, err = tasks.Complete(ctx, connect.NewRequest(&cronoqv1.CompleteRequest{
		Ref: &cronoqv1.TaskRef{Key: "k2"}, Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT, Message: "rejected",
	}))
	require.NoError(t, err)
	require.Equal(t, cluster.Outcome{Kind: cluster.OutcomePermanent, Message: "rejected"}, <-outcomes)
	require.Equal(t, cronoqv1.Status_STATUS_FAILED, resp.Msg.GetTask().GetStatus())
	require.Equal(t, "rejected", resp.Msg.GetTask().GetError())

	for _, tc := range []struct {
		ref     string
		outcome cronoqv1.OutcomeKind
		kind    string
		code    connect.Code
	}{
		{"busy", cronoqv1.OutcomeKind_OUTCOME_SUCCESS, apierr.KindNotWaiting, connect.CodeFailedPrecondition},
		{"new", cronoqv1.OutcomeKind_OUTCOME_SUCCESS, apierr.KindUpgradeRequired, connect.CodeFailedPrecondition},
		{"nope", cronoqv1.OutcomeKind_OUTCOME_PERMANENT, apierr.KindNotFound, connect.CodeNotFound},
		{"ext1", cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, apierr.KindInvalid, connect.CodeInvalidArgument},
		{"ext1", cronoqv1.OutcomeKind_OUTCOME_CANCELLED, apierr.KindInvalid, connect.CodeInvalidArgument},
	} {
		_, err := tasks.Complete(ctx, connect.NewRequest(&cronoqv1.CompleteRequest{Ref: &cronoqv1.TaskRef{Id: tc.ref}, Outcome: tc.outcome}))
		require.Equal(t, tc.kind, apierr.Kind(err), "%s: %v", tc.ref, err)
		require.Equal(t, tc.code, connect.CodeOf(err))
		if tc.kind == apierr.KindInvalid {
			field, _ := apierr.Field(err)
			require.Equal(t, "outcome", field)
		} else {
			<-outcomes
		}
	}
	require.Equal(t, []string{"complete-external", "complete-external", "complete-external", "complete-external", "complete-external"}, b.calls,
		"invalid outcomes never reach the leader")
}

// workflowFixture fills b's replica with two workflows: w1 (etl, key wk)
// running with a queued step a and a step b blocked on it, and w2 (other)
// whose one member was cancelled.
func workflowFixture(t *testing.T, b *fakeBackend) {
	b.apply(t, t0,
		fsm.Mutation{PutWorkflow: &fsm.Workflow{ID: "w1", Name: "etl", Key: "wk", Status: fsm.WorkflowRunning, SubmittedAt: t0}},
		fsm.Mutation{Insert: queuedTask("a1", inWorkflow("w1", "a"))},
		fsm.Mutation{Insert: queuedTask("b1", func(t *fsm.Task) {
			inWorkflow("w1", "b")(t)
			t.Status, t.MakeFlow().DependsOn = fsm.StatusBlocked, []string{"a1"}
		})},
		fsm.Mutation{PutWorkflow: &fsm.Workflow{ID: "w2", Name: "other", Status: fsm.WorkflowRunning, SubmittedAt: t0}},
		fsm.Mutation{Insert: queuedTask("c2", inWorkflow("w2", "c"))},
	)
	b.apply(t, t0+10,
		fsm.Mutation{Finish: &fsm.Finish{ID: "c2", Status: fsm.StatusCancelled, Error: "workflow cancelled", At: t0 + 10}},
		fsm.Mutation{EndWorkflow: &fsm.EndWorkflow{ID: "w2", Status: fsm.WorkflowCancelled, At: t0 + 10}},
	)
}

func TestWorkflowService(t *testing.T) {
	b := newFakeBackend()
	workflowFixture(t, b)
	specs := make(chan cluster.WorkflowSpec, 4)
	b.submitWorkflow = func(spec cluster.WorkflowSpec) (*cluster.WorkflowSubmitted, error) {
		specs <- spec
		switch spec.Name {
		case "new":
			return nil, &cluster.VersionError{What: "a workflow", Need: 3, Have: 2}
		case "full":
			return nil, cluster.ErrOverloaded
		}
		return &cluster.WorkflowSubmitted{ID: "w9", Duplicate: spec.Key == "old", Tasks: []cluster.StepTask{{Step: "a", ID: "t1"}, {Step: "b", ID: "t2"}}}, nil
	}
	b.cancelWorkflow = func(ref cluster.WorkflowRef) (cluster.CancelledWorkflow, error) {
		if ref.ID != "w1" {
			return cluster.CancelledWorkflow{}, fmt.Errorf("workflow %s: %w", ref, cluster.ErrNotFound)
		}
		return cluster.CancelledWorkflow{ID: "w1", Cancelled: 2}, nil
	}
	b.waitWorkflow = func(ctx context.Context, ref cluster.WorkflowRef) (string, error) {
		if ref.ID == "w2" {
			return "w2", nil
		}
		<-ctx.Done()
		return "", ctx.Err()
	}
	hc, base := startFake(t, b, nil)
	wfs := cronoqv1connect.NewWorkflowServiceClient(hc, base)
	ctx := ctxT(t, 20*time.Second)

	t.Run("submit", func(t *testing.T) {
		resp, err := wfs.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
			Name: "etl", Key: "old", Steps: []*cronoqv1.WorkflowStep{
				{Name: "a", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, External: true}},
				{Name: "b", Spec: &cronoqv1.TaskSpec{
					Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, DependsOn: []*cronoqv1.TaskRef{{Key: "outside"}},
					DependencyPolicy: cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE,
				}, DependsOn: []string{"a"}},
			},
		}}))
		require.NoError(t, err)
		require.Equal(t, "w9", resp.Msg.GetId())
		require.True(t, resp.Msg.GetDuplicate())
		require.Len(t, resp.Msg.GetTasks(), 2)
		require.Equal(t, "b", resp.Msg.GetTasks()[1].GetStep())
		require.Equal(t, "t2", resp.Msg.GetTasks()[1].GetId())
		spec := <-specs
		require.Equal(t, "etl", spec.Name)
		require.Equal(t, "old", spec.Key)
		require.Len(t, spec.Steps, 2)
		require.True(t, spec.Steps[0].External)
		require.Equal(t, []string{"a"}, spec.Steps[1].DependsOnSteps)
		require.Equal(t, []cluster.TaskRef{{Key: "outside"}}, spec.Steps[1].DependsOn)
		require.Equal(t, fsm.DepDone, spec.Steps[1].DepPolicy)

		// Refused at the edge, named by step: the leader never sees it.
		_, err = wfs.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
			Name: "etl", Steps: []*cronoqv1.WorkflowStep{{Name: "a", Spec: &cronoqv1.TaskSpec{DependsOn: []*cronoqv1.TaskRef{{Id: "x", Key: "y"}}}}},
		}}))
		require.Equal(t, apierr.KindInvalid, apierr.Kind(err))
		field, _ := apierr.Field(err)
		require.Equal(t, "steps[0].depends_on[0]", field)
		require.Empty(t, specs)

		for name, kind := range map[string]string{"new": apierr.KindUpgradeRequired, "full": apierr.KindOverloaded} {
			_, err = wfs.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
				Name: name, Steps: []*cronoqv1.WorkflowStep{{Name: "a", Spec: spec1()}},
			}}))
			require.Equal(t, kind, apierr.Kind(err), "%v", err)
			<-specs
		}
	})

	t.Run("get", func(t *testing.T) {
		for _, tc := range []struct {
			ref   *cronoqv1.WorkflowRef
			stale bool
		}{
			{&cronoqv1.WorkflowRef{Id: "w1"}, false},
			{&cronoqv1.WorkflowRef{Key: "wk"}, false},
			{&cronoqv1.WorkflowRef{Id: "w1"}, true},
		} {
			resp, err := wfs.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: tc.ref, Stale: tc.stale}))
			require.NoError(t, err)
			w := resp.Msg.GetWorkflow()
			require.Equal(t, "w1", w.GetId())
			require.Equal(t, "etl", w.GetName())
			require.Equal(t, "wk", w.GetKey())
			require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, w.GetStatus())
			require.Equal(t, t0.Time(), w.GetSubmittedAt().AsTime())
			require.Nil(t, w.GetFinishedAt())
			require.Len(t, w.GetTasks(), 2)
			require.Equal(t, "a1", w.GetTasks()[0].GetId())
			require.Equal(t, "a", w.GetTasks()[0].GetStep())
			require.Equal(t, cronoqv1.Status_STATUS_BLOCKED, w.GetTasks()[1].GetStatus())
			require.Equal(t, []string{"a1"}, w.GetTasks()[1].GetDependsOn())
			require.Equal(t, "w1", w.GetTasks()[1].GetWorkflow())
			require.Equal(t, tc.stale, resp.Msg.GetMeta().GetStale())
			require.Equal(t, "n1", resp.Msg.GetMeta().GetNode())
			require.NotZero(t, resp.Msg.GetMeta().GetAppliedIndex())
		}
		_, err := wfs.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "nope"}}))
		require.Equal(t, apierr.KindNotFound, apierr.Kind(err))
		_, err = wfs.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "w1", Key: "wk"}}))
		require.Equal(t, apierr.KindInvalid, apierr.Kind(err))
		_, err = wfs.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{}))
		require.Equal(t, apierr.KindInvalid, apierr.Kind(err))
	})

	t.Run("wait", func(t *testing.T) {
		// Ended: at once, with its members.
		resp, err := wfs.Wait(ctx, connect.NewRequest(&cronoqv1.WaitWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "w2"}}))
		require.NoError(t, err)
		w := resp.Msg.GetWorkflow()
		require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED, w.GetStatus())
		require.Equal(t, (t0 + 10).Time(), w.GetFinishedAt().AsTime())
		require.Len(t, w.GetTasks(), 1)
		require.Equal(t, cronoqv1.Status_STATUS_CANCELLED, w.GetTasks()[0].GetStatus())

		// Running: held for the timeout, then as it is.
		start := time.Now()
		resp, err = wfs.Wait(ctx, connect.NewRequest(&cronoqv1.WaitWorkflowRequest{
			Ref: &cronoqv1.WorkflowRef{Key: "wk"}, Timeout: durationpb.New(100 * time.Millisecond),
		}))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
		require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, resp.Msg.GetWorkflow().GetStatus())
		require.Len(t, resp.Msg.GetWorkflow().GetTasks(), 2)

		_, err = wfs.Wait(ctx, connect.NewRequest(&cronoqv1.WaitWorkflowRequest{
			Ref: &cronoqv1.WorkflowRef{Id: "w1"}, Timeout: durationpb.New(-time.Second),
		}))
		field, _ := apierr.Field(err)
		require.Equal(t, "timeout", field)
	})

	t.Run("cancel", func(t *testing.T) {
		resp, err := wfs.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "w1"}}))
		require.NoError(t, err)
		require.Equal(t, "w1", resp.Msg.GetId())
		require.Equal(t, int32(2), resp.Msg.GetCancelled())
		_, err = wfs.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "nope"}}))
		require.Equal(t, apierr.KindNotFound, apierr.Kind(err))
	})

	t.Run("list", func(t *testing.T) {
		list := func(req *cronoqv1.ListWorkflowsRequest) ([]string, string, *cronoqv1.ListWorkflowsResponse) {
			t.Helper()
			resp, err := wfs.List(ctx, connect.NewRequest(req))
			require.NoError(t, err)
			var ids []string
			for _, w := range resp.Msg.GetWorkflows() {
				require.Empty(t, w.GetTasks(), "a list has no members")
				ids = append(ids, w.GetId())
			}
			return ids, resp.Msg.GetNext(), resp.Msg
		}
		ids, next, msg := list(&cronoqv1.ListWorkflowsRequest{})
		require.Equal(t, []string{"w1", "w2"}, ids)
		require.Empty(t, next)
		require.False(t, msg.GetMeta().GetStale())
		require.Equal(t, "etl", msg.GetWorkflows()[0].GetName())

		ids, _, _ = list(&cronoqv1.ListWorkflowsRequest{Statuses: []cronoqv1.WorkflowStatus{cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED}})
		require.Equal(t, []string{"w2"}, ids)
		ids, next, _ = list(&cronoqv1.ListWorkflowsRequest{Limit: 1})
		require.Equal(t, []string{"w1"}, ids)
		require.Equal(t, "w1", next)
		ids, next, msg = list(&cronoqv1.ListWorkflowsRequest{Limit: 1, After: next, Stale: true})
		require.Equal(t, []string{"w2"}, ids)
		require.Empty(t, next)
		require.True(t, msg.GetMeta().GetStale())

		_, err := wfs.List(ctx, connect.NewRequest(&cronoqv1.ListWorkflowsRequest{Statuses: []cronoqv1.WorkflowStatus{9}}))
		field, _ := apierr.Field(err)
		require.Equal(t, "statuses", field)
		_, err = wfs.List(ctx, connect.NewRequest(&cronoqv1.ListWorkflowsRequest{Limit: -1}))
		field, _ = apierr.Field(err)
		require.Equal(t, "limit", field)
	})

	t.Run("blocked tasks are listed and counted", func(t *testing.T) {
		tasks := cronoqv1connect.NewTaskServiceClient(hc, base)
		list, err := tasks.List(ctx, connect.NewRequest(&cronoqv1.ListRequest{Statuses: []cronoqv1.Status{cronoqv1.Status_STATUS_BLOCKED}}))
		require.NoError(t, err)
		require.Len(t, list.Msg.GetTasks(), 1)
		require.Equal(t, "b1", list.Msg.GetTasks()[0].GetId())
		counts, err := tasks.Counts(ctx, connect.NewRequest(&cronoqv1.CountsRequest{}))
		require.NoError(t, err)
		require.Len(t, counts.Msg.GetPools(), 1)
		require.Equal(t, map[string]int64{
			"scheduled": 0, "queued": 1, "running": 0, "retrying": 0, "succeeded": 0,
			"failed": 0, "cancelled": 1, "expired": 0, "blocked": 1, "parked": 0,
		}, counts.Msg.GetPools()[0].GetByStatus())
	})

	t.Run("a node that does not lead", func(t *testing.T) {
		b.mu.Lock()
		b.leading, b.leader = false, "n2"
		b.mu.Unlock()
		defer func() {
			b.mu.Lock()
			b.leading, b.leader = true, ""
			b.mu.Unlock()
		}()
		before := len(specs)
		for _, call := range []func() error{
			func() error {
				req := connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{Steps: []*cronoqv1.WorkflowStep{{Name: "a", Spec: spec1()}}}})
				req.Header().Set(HeaderForwarded, "n3")
				_, err := wfs.Submit(ctx, req)
				return err
			},
			func() error {
				req := connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "w1"}})
				req.Header().Set(HeaderForwarded, "n3")
				_, err := wfs.Get(ctx, req)
				return err
			},
		} {
			err := call()
			require.Equal(t, apierr.KindNotLeader, apierr.Kind(err), "%v", err)
		}
		require.Len(t, specs, before)
		// A stale read is this node's own.
		resp, err := wfs.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "w2"}, Stale: true}))
		require.NoError(t, err)
		require.Equal(t, "w2", resp.Msg.GetWorkflow().GetId())
	})
}

func spec1() *cronoqv1.TaskSpec { return spec("p") }

// dependencyFixture fills b's replica with task g, granted under lease 7,
// which depends on d1 (output "one"), d2 ("twotwo"), d3 (failed, no
// output) and d4 ("4444"), steps of workflow w.
func dependencyFixture(t *testing.T, b *fakeBackend) {
	ms := []fsm.Mutation{{PutWorkflow: &fsm.Workflow{ID: "w", Name: "etl", Status: fsm.WorkflowRunning, SubmittedAt: t0}}}
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		ms = append(ms, fsm.Mutation{Insert: queuedTask(id, inWorkflow("w", "step-"+id))})
	}
	ms = append(ms, succeed("d1", 1, "one")...)
	ms = append(ms, succeed("d2", 1, "twotwo")...)
	ms = append(ms, succeed("d4", 1, "4444")...)
	ms = append(ms,
		fsm.Mutation{Start: &fsm.Start{ID: "d3", Attempt: 1, Lease: 1, At: t0}},
		fsm.Mutation{Finish: &fsm.Finish{ID: "d3", Lease: 1, Status: fsm.StatusFailed, Error: "boom", At: t0}},
		fsm.Mutation{Insert: queuedTask("g", func(t *fsm.Task) {
			inWorkflow("w", "join")(t)
			t.MakeFlow().DependsOn, t.MakeFlow().DepPolicy = []string{"d1", "d2", "d3", "d4"}, fsm.DepDone
		})},
		fsm.Mutation{Start: &fsm.Start{ID: "g", Attempt: 1, Lease: 7, Worker: "raw", At: t0}},
	)
	b.apply(t, t0, ms...)
}

func TestDependencyResults(t *testing.T) {
	b := newFakeBackend()
	dependencyFixture(t, b)
	for _, tc := range []struct {
		budget  int
		inline  []string // outputs given, in order ("" for none)
		omitted []bool
	}{
		{grantDependencyOutputs, []string{"one", "twotwo", "", "4444"}, []bool{false, false, false, false}},
		// d2 does not fit what d1 left; d4 does.
		{8, []string{"one", "", "", "4444"}, []bool{false, true, false, false}},
		{0, []string{"", "", "", ""}, []bool{true, true, false, true}},
	} {
		budget := tc.budget
		deps := dependencies(b.state, []string{"d1", "d2", "d3", "d4"}, &budget)
		require.Len(t, deps, 4)
		for i, d := range deps {
			require.Equal(t, fmt.Sprintf("d%d", i+1), d.GetId())
			require.Equal(t, fmt.Sprintf("step-d%d", i+1), d.GetStep())
			require.Equal(t, tc.inline[i], string(d.GetOutput()), "budget %d, dependency %d", tc.budget, i)
			require.Equal(t, tc.omitted[i], d.GetOutputOmitted(), "budget %d, dependency %d", tc.budget, i)
		}
		require.Equal(t, cronoqv1.Status_STATUS_FAILED, deps[2].GetStatus())
		require.Equal(t, "boom", deps[2].GetError())
		require.Equal(t, cronoqv1.Status_STATUS_SUCCEEDED, deps[3].GetStatus())
	}

	budget := 100
	deps := dependencies(b.state, []string{"gone", "d1"}, &budget)
	require.Equal(t, "gone", deps[0].GetId())
	require.Equal(t, cronoqv1.Status_STATUS_UNSPECIFIED, deps[0].GetStatus())
	require.Contains(t, deps[0].GetError(), "no longer exists")
	require.Equal(t, "one", string(deps[1].GetOutput()))
	require.Equal(t, 97, budget, "the output given is spent")
	require.Nil(t, dependencies(b.state, nil, &budget))

	// The budget is shared by the grants of one message: what the first
	// grant spent is not there for the second.
	budget = 10
	first := dependencies(b.state, []string{"d2"}, &budget)
	second := dependencies(b.state, []string{"d4", "d1"}, &budget)
	require.Equal(t, "twotwo", string(first[0].GetOutput()))
	require.Equal(t, "4444", string(second[0].GetOutput()))
	require.True(t, second[1].GetOutputOmitted(), "d1 does not fit what the first two left")
}

// A grant carries what the task's dependencies ended with; a completion
// carries children and a continuation to the engine, and a completion
// that does not convert is refused alone.
func TestWorkerStreamWorkflows(t *testing.T) {
	b := newFakeBackend()
	dependencyFixture(t, b)
	granted := make(chan []cluster.Grant, 1)
	granted <- []cluster.Grant{{ID: "g", Lease: 7, Attempt: 1}}
	b.poll = func(ctx context.Context, offer cluster.Offer) ([]cluster.Grant, error) {
		select {
		case gs := <-granted:
			return gs, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b.completions = make(chan []cluster.Completion, 1)
	var srv *Server
	hc, base := startFake(t, b, func(s *Server) {
		srv = s
		s.grantDepOutputs = 8
	})
	require.Equal(t, 8, srv.grantDepOutputs)

	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	stream := cronoqv1connect.NewWorkerServiceClient(hc, base).Connect(ctx)
	defer func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	}()
	send := func(m *cronoqv1.WorkerMessage) { require.NoError(t, stream.Send(m)) }
	send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "raw", Pool: "p"}}})
	msg, err := stream.Receive()
	require.NoError(t, err)
	require.NotNil(t, msg.GetWelcome())

	send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 1}}})
	msg, err = stream.Receive()
	require.NoError(t, err)
	grants := msg.GetGrants().GetGrants()
	require.Len(t, grants, 1)
	g := grants[0]
	require.Equal(t, "g", g.GetTask().GetId())
	require.Equal(t, "join", g.GetTask().GetStep())
	require.Equal(t, []string{"d1", "d2", "d3", "d4"}, g.GetTask().GetDependsOn())
	deps := g.GetDependencies()
	require.Len(t, deps, 4)
	require.Equal(t, "one", string(deps[0].GetOutput()))
	require.True(t, deps[1].GetOutputOmitted(), "over the grant's budget")
	require.Empty(t, deps[1].GetOutput())
	require.Equal(t, "boom", deps[2].GetError())
	require.Equal(t, "4444", string(deps[3].GetOutput()))

	send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: []*cronoqv1.Completion{
		{Lease: 7, Output: []byte("fan"), Children: []*cronoqv1.WorkflowStep{
			{Name: "c1", Spec: spec("p")}, {Name: "c2", Spec: spec("p"), DependsOn: []string{"c1"}},
		}, Then: &cronoqv1.WorkflowStep{Name: "sum", Spec: spec("p")}},
		{Lease: 8, Children: []*cronoqv1.WorkflowStep{{Spec: &cronoqv1.TaskSpec{DependencyPolicy: 9}}}},
	}}}})
	cs := <-b.completions
	require.Len(t, cs, 1, "the completion that does not convert stays here")
	require.Equal(t, uint64(7), cs[0].Lease)
	out := cs[0].Outcome
	require.Equal(t, "fan", string(out.Output))
	require.Len(t, out.Children, 2)
	require.Equal(t, []string{"c1"}, out.Children[1].DependsOnSteps)
	require.Equal(t, "sum", out.Then.Name)

	msg, err = stream.Receive()
	require.NoError(t, err)
	acks := msg.GetCompleteAck().GetResults()
	require.Len(t, acks, 2)
	require.Empty(t, acks[0].GetCode(), acks[0].GetError())
	require.Equal(t, apierr.KindInvalid, acks[1].GetCode())
	require.Contains(t, acks[1].GetError(), "children[0].dependency_policy")

	require.NoError(t, stream.CloseRequest())
	_, err = stream.Receive()
	require.ErrorIs(t, err, io.EOF)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestPageMembers(t *testing.T) {
	var members []*fsm.Task
	for i := 1; i <= 5; i++ {
		members = append(members, &fsm.Task{ID: fmt.Sprintf("t%d", i)})
	}
	ids := func(ts []*fsm.Task) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	for _, tc := range []struct {
		page memberPage
		want []string
		next string
	}{
		{memberPage{}, []string{"t1", "t2", "t3", "t4", "t5"}, ""},
		{memberPage{Limit: 2}, []string{"t1", "t2"}, "t2"},
		{memberPage{After: "t2", Limit: 2}, []string{"t3", "t4"}, "t4"},
		{memberPage{After: "t4", Limit: 2}, []string{"t5"}, ""},
		{memberPage{After: "t5"}, nil, ""},
		{memberPage{After: "t0"}, []string{"t1", "t2", "t3", "t4", "t5"}, ""},
	} {
		got, next := pageMembers(members, tc.page)
		require.Equal(t, tc.want, ids(got), "%+v", tc.page)
		require.Equal(t, tc.next, next, "%+v", tc.page)
	}

	// Large members end a page early, but a page holds at least one.
	big := []*fsm.Task{
		{ID: "a", Output: make([]byte, maxListBytes-100)},
		{ID: "b", Output: make([]byte, 1000)},
		{ID: "c"},
	}
	got, next := pageMembers(big, memberPage{})
	require.Equal(t, []string{"a"}, ids(got))
	require.Equal(t, "a", next)
	got, next = pageMembers(big, memberPage{After: next})
	require.Equal(t, []string{"b", "c"}, ids(got))
	require.Empty(t, next)

	_, err := memberPageFromProto("", -1)
	var ie *cluster.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "tasks_limit", ie.Field)
}
