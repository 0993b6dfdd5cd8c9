package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

// wfStep is a step of pool p running kind, after the steps named.
func wfStep(name, kind string, after ...string) Step {
	return Step{Name: name, Task: TaskSpec{Template: Template{Pool: "p", Kind: kind}}, DependsOn: after}
}

// runHandlers runs a worker of pool p with handlers until the test ends.
func runHandlers(t *testing.T, c *Client, handlers map[string]Handler) {
	t.Helper()
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 4, Handlers: handlers})
	require.NoError(t, err)
	stop := runWorker(t, w)
	t.Cleanup(func() { require.NoError(t, stop()) })
}

// A diamond runs in dependency order; each handler sees what its
// dependencies ended with, by step name, and the workflow ends succeeded
// with every member. Reads by id, key and from any node; a key makes the
// submit idempotent.
func TestSubmitWorkflowRunsDependencies(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	c := newTestClient(t, addrs(fc, 0, 1))
	ctx := testCtx(t)
	seen := make(chan []Dependency, 4)
	derive := HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
		seen <- job.Dependencies
		in, err := job.DependencyOutput(ctx, "extract")
		if err != nil {
			return nil, Permanent(err)
		}
		return []byte(job.Task.Step + ":" + string(in)), nil
	})
	runHandlers(t, c, map[string]Handler{
		"extract": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return []byte("rows"), nil }),
		"clean":   derive,
		"index":   derive,
		"load": HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
			seen <- job.Dependencies
			if _, ok := job.Dependency("extract"); ok {
				return nil, Permanent(errors.New("extract is not a dependency of load"))
			}
			if _, err := job.DependencyOutput(ctx, "extract"); !errors.Is(err, ErrNotFound) {
				return nil, Permanent(errors.New("reading a dependency load does not have"))
			}
			var parts []string
			for _, name := range []string{"clean", job.Dependencies[1].ID} { // by step name, or by id
				out, err := job.DependencyOutput(ctx, name)
				if err != nil {
					return nil, Permanent(err)
				}
				parts = append(parts, string(out))
			}
			return []byte(strings.Join(parts, "+")), nil
		}),
	})

	spec := WorkflowSpec{Name: "nightly", Key: "nightly-1", Steps: []Step{
		wfStep("extract", "extract"), wfStep("clean", "clean", "extract"), wfStep("index", "index", "extract"),
		wfStep("load", "load", "clean", "index"),
	}}
	sub, err := c.SubmitWorkflow(ctx, spec)
	require.NoError(t, err)
	require.False(t, sub.Duplicate)
	require.Equal(t, "nightly-1", sub.Key)
	require.Len(t, sub.Tasks, 4)

	w, err := c.WaitWorkflow(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, WorkflowSucceeded, w.Status)
	require.True(t, w.Terminal())
	require.Equal(t, "nightly", w.Name)
	require.Equal(t, "nightly-1", w.Key)
	require.False(t, w.FinishedAt.IsZero())
	require.Len(t, w.Tasks, 4)
	byStep := map[string]*Task{}
	for _, task := range w.Tasks {
		require.Equal(t, sub.ID, task.Workflow)
		require.Equal(t, sub.Tasks[task.Step], task.ID)
		byStep[task.Step] = task
	}
	require.Equal(t, "clean:rows+index:rows", string(byStep["load"].Output))
	require.Equal(t, []string{sub.Tasks["clean"], sub.Tasks["index"]}, byStep["load"].DependsOn)
	require.Equal(t, DependencyPolicySucceeded, byStep["load"].DependencyPolicy)

	var deps [][]Dependency
	for range 3 {
		deps = append(deps, <-seen)
	}
	for _, d := range deps {
		if len(d) == 2 { // load
			require.Equal(t, Dependency{ID: sub.Tasks["clean"], Step: "clean", Status: StatusSucceeded, Output: []byte("clean:rows")}, d[0])
			continue
		}
		require.Equal(t, []Dependency{{ID: sub.Tasks["extract"], Step: "extract", Status: StatusSucceeded, Output: []byte("rows")}}, d)
	}

	byKey, err := c.GetWorkflowByKey(ctx, "nightly-1")
	require.NoError(t, err)
	require.Equal(t, w, byKey)
	got, meta, err := c.GetWorkflowStale(ctx, sub.ID)
	require.NoError(t, err)
	require.True(t, meta.Stale)
	require.Equal(t, sub.ID, got.ID)
	_, err = c.GetWorkflow(ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound)

	again, err := c.SubmitWorkflow(ctx, spec)
	require.NoError(t, err)
	require.True(t, again.Duplicate, "an explicit key reports the duplicate")
	require.Equal(t, sub.ID, again.ID)
	require.Equal(t, sub.Tasks, again.Tasks)
}

// A workflow submit without a key gets one, so that its retry after an
// unknown outcome finds the workflow its first attempt made; refusals name
// the step and field, and are not retried.
func TestSubmitWorkflowKeysAndRefusals(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	const proc = cronoqv1connect.WorkflowServiceSubmitProcedure
	fc.LoseAnswers(proc, 1, apierr.OutcomeUnknown("lost"))
	sub, err := c.SubmitWorkflow(ctx, WorkflowSpec{Name: "w", Steps: []Step{wfStep("a", "a")}})
	require.NoError(t, err)
	require.False(t, sub.Duplicate, "the SDK's own retry is no duplicate")
	require.Len(t, sub.Key, 32)
	require.Equal(t, 2, fc.Calls(proc))
	require.Len(t, fc.Workflows(), 1)
	require.Equal(t, sub.Key, fc.Workflow(sub.ID).GetKey())

	for _, tc := range []struct {
		name  string
		steps []Step
		field string
		calls int
	}{
		{"sdk: policy", []Step{wfStep("a", "a"), {Name: "b", Task: TaskSpec{Template: Template{Pool: "p", Kind: "b"}, DependencyPolicy: "sometimes"}}},
			"steps[1].dependency_policy", 0},
		{"sdk: priority", []Step{{Name: "a", Task: TaskSpec{Template: Template{Pool: "p", Kind: "a", Priority: "urgent"}}}}, "steps[0].priority", 0},
		{"node: name", []Step{wfStep("", "a")}, "steps[0].name", 1},
		{"node: later step", []Step{wfStep("a", "a", "b"), wfStep("b", "b")}, "steps[0].depends_on", 1},
		{"node: unknown task", []Step{{Name: "a", Task: TaskSpec{Template: Template{Pool: "p", Kind: "a"}, DependsOn: []TaskRef{ByKey("nope")}}}},
			"steps[0].depends_on[0].key", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fc.Calls(proc)
			_, err := c.SubmitWorkflow(ctx, WorkflowSpec{Name: "bad", Steps: tc.steps})
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, tc.field, inv.Field)
			require.ErrorContains(t, err, "submitting workflow bad")
			require.Equal(t, tc.calls, fc.Calls(proc)-before)
		})
	}
	require.Len(t, fc.Workflows(), 1)
}

// A handler spawns children and a continuation: they are inserted with its
// success, in a workflow made for them (named after the parent's kind),
// and the continuation sees the children's results.
func TestWorkerSpawnsChildren(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	runHandlers(t, c, map[string]Handler{
		"split": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			for _, part := range []string{"1", "2"} {
				st := wfStep("part-"+part, "part")
				st.Task.Payload = []byte(part)
				job.Spawn(st)
			}
			job.Then(wfStep("merge", "merge"))
			return []byte("split"), nil
		}),
		"part": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			return append([]byte("part "), job.Task.Payload...), nil
		}),
		"merge": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			var parts []string
			for _, d := range job.Dependencies {
				parts = append(parts, d.Step+"="+string(d.Output))
			}
			return []byte(strings.Join(parts, ",")), nil
		}),
	})
	sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "split"}})
	require.NoError(t, err)
	parent, err := c.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, parent.Status)
	require.NotEmpty(t, parent.Workflow, "the parent joined the workflow of its children")

	w, err := c.WaitWorkflow(ctx, parent.Workflow)
	require.NoError(t, err)
	require.Equal(t, WorkflowSucceeded, w.Status)
	require.Equal(t, "split", w.Name)
	require.Equal(t, sub.ID, w.Parent)
	require.Len(t, w.Tasks, 4)
	for _, task := range w.Tasks[1:] {
		require.Equal(t, sub.ID, task.Parent)
	}
	merge := w.Tasks[3]
	require.Equal(t, "merge", merge.Step)
	require.Equal(t, "part-1=part 1,part-2=part 2", string(merge.Output))
	comp := fc.Accepted(sub.ID)
	require.Len(t, comp.GetChildren(), 2)
	require.Equal(t, "merge", comp.GetThen().GetName())
}

// What a handler spawns goes only with a success; children that the SDK
// cannot send, or that the node refuses, fail the attempt for good, naming
// the problem, and nothing is inserted.
func TestWorkerSpawnFailures(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0, clienttest.WithMaxAttempts(1))
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	bad := wfStep("bad", "child")
	bad.Task.DependencyPolicy = "sometimes"
	badThen := wfStep("then", "child")
	badThen.Task.Priority = "urgent"
	runHandlers(t, c, map[string]Handler{
		"sdk-invalid": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			job.Spawn(wfStep("ok", "child"), bad)
			return []byte("x"), nil
		}),
		"sdk-then": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			job.Then(badThen)
			return []byte("x"), nil
		}),
		"node-invalid": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			job.Spawn(wfStep("a/b", "child"))
			return []byte("x"), nil
		}),
		"fails": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			job.Spawn(wfStep("c", "child"))
			return nil, Permanent(errors.New("gave up"))
		}),
		"retries": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			job.Spawn(wfStep("c", "child"))
			return nil, errors.New("try again")
		}),
	})
	for _, tc := range []struct {
		kind, error string
	}{
		{"sdk-invalid", `spawning children: invalid children[1].dependency_policy: "sometimes" is not succeeded or done`},
		{"sdk-then", "spawning children: invalid then.priority:"},
		{"node-invalid", `children refused: invalid children[0].name: "a/b": use letters, digits, '-', '_' and '.'`},
		{"fails", "gave up"},
		{"retries", "try again"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: tc.kind}})
			require.NoError(t, err)
			task, err := c.Wait(ctx, sub.ID)
			require.NoError(t, err)
			require.Equal(t, StatusFailed, task.Status)
			require.Contains(t, task.Error, tc.error)
			require.Empty(t, task.Workflow)
			require.Empty(t, fc.Accepted(sub.ID).GetChildren())
			require.Nil(t, fc.Accepted(sub.ID).GetThen())
		})
	}
	require.Empty(t, fc.Workflows())
	for _, r := range fc.Workers().Received {
		if r.GetOutcome() != cronoqv1.OutcomeKind_OUTCOME_SUCCESS {
			require.Empty(t, r.GetChildren(), "a failure carries no children")
		}
	}
	require.Empty(t, fc.Workers().Violations)
}

// A completion lost with its stream is sent again whole, children
// included; they are inserted once.
func TestWorkerResendsChildrenAfterLostStream(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	id := addTask(fc, "p", "split", "", nil)
	fc.DropStreamOnCompletion(id)
	runHandlers(t, c, map[string]Handler{
		"split": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			job.Spawn(wfStep("a", "child"), wfStep("b", "child", "a"))
			return []byte("split"), nil
		}),
		"child": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil }),
	})
	task, err := c.Wait(ctx, id)
	require.NoError(t, err)
	w, err := c.WaitWorkflow(ctx, task.Workflow)
	require.NoError(t, err)
	require.Equal(t, WorkflowSucceeded, w.Status)
	require.Len(t, w.Tasks, 3, "the children were inserted once")

	var sends []*cronoqv1.Completion
	for _, r := range fc.Workers().Received {
		if r.TaskID == id || r.GetLease() == fc.LeaseOf(id) {
			sends = append(sends, r.Completion)
		}
	}
	require.GreaterOrEqual(t, len(sends), 2, "lost with the first stream, sent again")
	for _, s := range sends[1:] {
		require.True(t, proto.Equal(sends[0], s), "the same completion, children included")
	}
	require.Len(t, sends[0].GetChildren(), 2)
}

// Outputs the grant left out are read from the cluster when asked for.
func TestDependencyOutputReadWhenOmitted(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0, clienttest.WithGrantOutputBudget(0))
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	dep := addTask(fc, "other", "k", "", nil)
	fc.Finish(dep, cronoqv1.Status_STATUS_SUCCEEDED, []byte("big output"), "")
	sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}, DependsOn: []TaskRef{ByID(dep)}})
	require.NoError(t, err)
	seen := make(chan Dependency, 1)
	runHandlers(t, c, map[string]Handler{"k": HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
		seen <- job.Dependencies[0]
		return job.DependencyOutput(ctx, dep)
	})})
	task, err := c.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, []byte("big output"), task.Output)
	d := <-seen
	require.True(t, d.OutputOmitted)
	require.Nil(t, d.Output)
	require.Equal(t, StatusSucceeded, d.Status)
	require.Equal(t, 1, fc.Calls(cronoqv1connect.TaskServiceGetProcedure), "read once, by the handler")
}

// A job built from a grant: its dependencies as the grant gives them, the
// omitted outputs read through its client.
func TestJobFromGrant(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	dep := addTask(fc, "p", "k", "", nil)
	fc.Finish(dep, cronoqv1.Status_STATUS_FAILED, []byte("partial"), "boom")
	g := &cronoqv1.Grant{Task: &cronoqv1.Task{Id: "T", Step: "s"}, Lease: 7, Attempt: 2, Dependencies: []*cronoqv1.DependencyResult{
		{Id: "A", Step: "a", Status: cronoqv1.Status_STATUS_SUCCEEDED, Output: []byte("out-a")},
		{Id: dep, Status: cronoqv1.Status_STATUS_FAILED, Error: "boom", OutputOmitted: true},
	}}
	job := jobFromGrant(g, c)
	require.Equal(t, StatusRunning, job.Task.Status)
	require.Equal(t, 2, job.Attempt)
	require.Equal(t, []Dependency{
		{ID: "A", Step: "a", Status: StatusSucceeded, Output: []byte("out-a")},
		{ID: dep, Status: StatusFailed, Error: "boom", OutputOmitted: true},
	}, job.Dependencies)
	out, err := job.DependencyOutput(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []byte("out-a"), out)
	require.Zero(t, fc.Calls(cronoqv1connect.TaskServiceGetProcedure), "inlined: no read")
	out, err = job.DependencyOutput(ctx, dep)
	require.NoError(t, err)
	require.Equal(t, []byte("partial"), out)
	_, err = job.DependencyOutput(ctx, "zzz")
	require.ErrorIs(t, err, ErrNotFound)

	orphan := jobFromGrant(g, nil)
	_, err = orphan.DependencyOutput(ctx, dep)
	require.ErrorContains(t, err, "no client")
	gone := jobFromGrant(&cronoqv1.Grant{Task: &cronoqv1.Task{Id: "T"}, Dependencies: []*cronoqv1.DependencyResult{{Id: "purged", OutputOmitted: true}}}, c)
	_, err = gone.DependencyOutput(ctx, "purged")
	require.ErrorIs(t, err, ErrNotFound)
}

// Complete and Fail end an external task that waits; anything else is
// refused with ErrNotWaiting.
func TestCompleteAndFailExternal(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	ext := TaskSpec{Template: Template{Pool: "p", Kind: "approval"}, External: true}
	approve := ext
	approve.Key = "approve-1"
	a, err := c.Submit(ctx, approve)
	require.NoError(t, err)
	b, err := c.Submit(ctx, ext)
	require.NoError(t, err)
	plain, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "plain"}})
	require.NoError(t, err)
	gated := ext
	gated.DependsOn = []TaskRef{ByID(plain.ID)}
	blockedExt, err := c.Submit(ctx, gated)
	require.NoError(t, err)

	task, err := c.Complete(ctx, ByKey("approve-1"), []byte("approved-by-ann"))
	require.NoError(t, err)
	require.Equal(t, a.ID, task.ID)
	require.Equal(t, StatusSucceeded, task.Status)
	require.Equal(t, []byte("approved-by-ann"), task.Output)
	require.True(t, task.External)
	task, err = c.Fail(ctx, ByID(b.ID), "rejected")
	require.NoError(t, err)
	require.Equal(t, StatusFailed, task.Status)
	require.Equal(t, "rejected", task.Error)

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"ended", func() error { _, err := c.Complete(ctx, ByID(a.ID), nil); return err }, ErrNotWaiting},
		{"not external", func() error { _, err := c.Fail(ctx, ByID(plain.ID), "no"); return err }, ErrNotWaiting},
		{"blocked", func() error { _, err := c.Complete(ctx, ByID(blockedExt.ID), nil); return err }, ErrNotWaiting},
		{"unknown", func() error { _, err := c.Complete(ctx, ByKey("nope"), nil); return err }, ErrNotFound},
		{"no ref", func() error { _, err := c.Complete(ctx, TaskRef{}, nil); return err }, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.want)
		})
	}
	got, err := c.Get(ctx, blockedExt.ID)
	require.NoError(t, err)
	require.Equal(t, StatusBlocked, got.Status)
	require.Equal(t, []string{plain.ID}, got.DependsOn)
	require.Equal(t, 2+5, fc.Calls(cronoqv1connect.TaskServiceCompleteProcedure), "each call sent once")
}

// ListWorkflows pages by id and filters by status, without members.
func TestListWorkflowsPaging(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	var want []string
	for range 5 {
		want = append(want, fc.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "w", Steps: []*cronoqv1.WorkflowStep{
			{Name: "s", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}}},
		}}))
	}
	n, err := c.CancelWorkflow(ctx, want[3])
	require.NoError(t, err)
	require.Equal(t, 1, n)

	var got []string
	pages := 0
	opt := WorkflowListOptions{Limit: 2}
	for {
		ws, next, err := c.ListWorkflows(ctx, opt)
		require.NoError(t, err)
		pages++
		for _, w := range ws {
			require.Empty(t, w.Tasks)
			require.Equal(t, "w", w.Name)
			got = append(got, w.ID)
		}
		if next == "" {
			break
		}
		require.Equal(t, got[len(got)-1], next)
		opt.After = next
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)

	ws, next, err := c.ListWorkflows(ctx, WorkflowListOptions{Statuses: []string{WorkflowCancelled}, Stale: true})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, ws, 1)
	require.Equal(t, want[3], ws[0].ID)
	require.Equal(t, WorkflowCancelled, ws[0].Status)

	_, _, err = c.ListWorkflows(ctx, WorkflowListOptions{Statuses: []string{"done"}})
	require.ErrorIs(t, err, ErrInvalid)
	_, _, err = c.ListWorkflows(ctx, WorkflowListOptions{Limit: -1})
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, 4, fc.Calls(cronoqv1connect.WorkflowServiceListProcedure), "refused before sending")
}

// WaitWorkflow asks again while the workflow runs, and gives up with its
// ctx.
func TestWaitWorkflow(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0), WithWaitPoll(20*time.Millisecond))
	ctx := testCtx(t)
	id := fc.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "w", Steps: []*cronoqv1.WorkflowStep{
		{Name: "s", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}}},
	}})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := c.WaitWorkflow(short, id)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	done := make(chan *Workflow, 1)
	go func() {
		w, err := c.WaitWorkflow(ctx, id)
		if err != nil {
			t.Error(err)
		}
		done <- w
	}()
	const proc = cronoqv1connect.WorkflowServiceWaitProcedure
	before := fc.Calls(proc)
	fc.WaitUntil("asked again", func() bool { return fc.Calls(proc) >= before+2 })
	fc.Finish(fc.Workflow(id).GetTasks()[0].GetId(), cronoqv1.Status_STATUS_EXPIRED, nil, "deadline exceeded")
	w := <-done
	require.Equal(t, WorkflowFailed, w.Status, "an expired member fails the workflow")
	require.Equal(t, StatusExpired, w.Tasks[0].Status)
	_, err = c.WaitWorkflow(ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

// Cancelling a workflow ends its members, aborting the running attempts
// (their ctx says why).
func TestCancelWorkflowAbortsAttempts(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	causes := make(chan error, 1)
	runHandlers(t, c, map[string]Handler{"wait": HandlerFunc(func(ctx context.Context, _ *Job) ([]byte, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})})
	sub, err := c.SubmitWorkflow(ctx, WorkflowSpec{Name: "wf", Steps: []Step{wfStep("a", "wait"), wfStep("b", "wait", "a")}})
	require.NoError(t, err)
	fc.WaitUntil("a runs", func() bool { return fc.LeaseOf(sub.Tasks["a"]) != 0 })
	n, err := c.CancelWorkflow(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	cause := <-causes
	require.ErrorIs(t, cause, errAborted)
	require.ErrorContains(t, cause, "workflow cancelled")
	w, err := c.WaitWorkflow(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, WorkflowCancelled, w.Status)
	for _, task := range w.Tasks {
		require.Equal(t, StatusCancelled, task.Status)
		require.Equal(t, "workflow cancelled", task.Error)
	}
	n, err = c.CancelWorkflow(ctx, sub.ID)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = c.CancelWorkflow(ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

// A workflow's start and end are events for subscribers of every pool;
// its members' events name it and their step.
func TestWorkflowEvents(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	all, err := c.Events(ctx)
	require.NoError(t, err)
	pool, err := c.Events(ctx, "p")
	require.NoError(t, err)
	fc.WaitUntil("subscribed", func() bool { return fc.Calls(cronoqv1connect.TaskServiceEventsProcedure) == 2 })
	sub, err := c.SubmitWorkflow(ctx, WorkflowSpec{Name: "nightly", Steps: []Step{wfStep("a", "a"), wfStep("b", "b", "a")}})
	require.NoError(t, err)
	n, err := c.CancelWorkflow(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	// running; a queued, b blocked; b then a cancelled; cancelled.
	var got []Event
	for ev := range all {
		require.NoError(t, ev.Err)
		got = append(got, ev)
		if ev.WorkflowStatus == WorkflowCancelled {
			break
		}
	}
	require.Len(t, got, 6)
	for _, i := range []int{0, 5} {
		require.Empty(t, got[i].TaskID)
		require.Empty(t, got[i].Status)
		require.Equal(t, sub.ID, got[i].Workflow)
		require.Equal(t, "nightly", got[i].Kind)
	}
	require.Equal(t, WorkflowRunning, got[0].WorkflowStatus)
	require.Equal(t, []string{"a", "b", "b", "a"}, []string{got[1].Step, got[2].Step, got[3].Step, got[4].Step})
	require.Equal(t, []string{StatusQueued, StatusBlocked, StatusCancelled, StatusCancelled},
		[]string{got[1].Status, got[2].Status, got[3].Status, got[4].Status})
	for _, ev := range got[1:5] {
		require.Equal(t, sub.ID, ev.Workflow)
		require.Empty(t, ev.WorkflowStatus)
	}
	require.Equal(t, "workflow cancelled", got[3].Message)
	require.Equal(t, "workflow cancelled", got[4].Message)
	for range 4 {
		ev := <-pool
		require.NotEmpty(t, ev.TaskID, "a pool filter gets task events only")
		require.Equal(t, sub.ID, ev.Workflow)
	}
}

// A schedule fires a whole workflow; its steps round-trip.
func TestScheduleFiresWorkflow(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	approval := wfStep("approval", "approval", "extract")
	approval.Task.External = true
	approval.Task.DependencyPolicy = DependencyPolicyDone
	s := Schedule{Name: "etl", Cron: "@hourly", Workflow: "nightly", Steps: []Step{wfStep("extract", "extract"), approval}}
	_, err := c.AddSchedule(ctx, s)
	require.NoError(t, err)
	list, err := c.ListSchedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "nightly", list[0].Workflow)
	require.Equal(t, Template{}, list[0].Task, "a workflow schedule has no task")
	require.Len(t, list[0].Steps, 2)
	got := list[0].Steps[1]
	require.Equal(t, "approval", got.Name)
	require.Equal(t, []string{"extract"}, got.DependsOn)
	require.Equal(t, "approval", got.Task.Kind)
	require.True(t, got.Task.External)
	require.Equal(t, DependencyPolicyDone, got.Task.DependencyPolicy)

	id := fc.FireSchedule("etl")
	w, err := c.GetWorkflow(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "nightly", w.Name)
	require.Equal(t, "etl", w.Schedule)
	require.False(t, w.Slot.IsZero())
	require.Equal(t, []string{StatusQueued, StatusBlocked}, []string{w.Tasks[0].Status, w.Tasks[1].Status})
	list, err = c.ListSchedules(ctx)
	require.NoError(t, err)
	require.Equal(t, id, list[0].LastTask)

	both := s
	both.Task = Template{Pool: "p", Kind: "k"}
	_, err = c.AddSchedule(ctx, both)
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "task", inv.Field)
	bad := s
	bad.Steps = []Step{{Name: "x", Task: TaskSpec{Template: Template{Pool: "p", Kind: "x", Priority: "urgent"}}}}
	_, err = c.AddSchedule(ctx, bad)
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "steps[0].priority", inv.Field)
}

// GetWorkflow and WaitWorkflow read every page of a large workflow's
// members.
func TestWorkflowMembersByPages(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0, clienttest.WithMaxPageBytes(1)) // one member a page
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	var steps []Step
	for _, name := range []string{"a", "b", "c", "d"} {
		steps = append(steps, wfStep(name, "k"))
	}
	sub, err := c.SubmitWorkflow(ctx, WorkflowSpec{Name: "big", Steps: steps})
	require.NoError(t, err)
	const get = cronoqv1connect.WorkflowServiceGetProcedure

	w, err := c.GetWorkflow(ctx, sub.ID)
	require.NoError(t, err)
	require.Len(t, w.Tasks, 4)
	for i, name := range []string{"a", "b", "c", "d"} {
		require.Equal(t, sub.Tasks[name], w.Tasks[i].ID)
	}
	require.Equal(t, 4, fc.Calls(get))
	w, _, err = c.GetWorkflowStale(ctx, sub.ID)
	require.NoError(t, err)
	require.Len(t, w.Tasks, 4)
	for _, r := range fc.Requests(get)[5:] {
		require.True(t, r.(*cronoqv1.GetWorkflowRequest).GetStale(), "the pages of a stale read are stale reads")
	}

	for _, m := range fc.Workflow(sub.ID).GetTasks() {
		fc.Finish(m.GetId(), cronoqv1.Status_STATUS_SUCCEEDED, nil, "")
	}
	w, err = c.WaitWorkflow(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, WorkflowSucceeded, w.Status)
	require.Len(t, w.Tasks, 4)
	require.Equal(t, 8+3, fc.Calls(get), "the first page came with the wait")
}
