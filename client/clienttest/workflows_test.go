package clienttest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

// workflowsOf returns the generated workflow client of the node at addr.
func workflowsOf(t *testing.T, addr string) cronoqv1connect.WorkflowServiceClient {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return cronoqv1connect.NewWorkflowServiceClient(&http.Client{Transport: tr}, "http://"+addr)
}

// step is a workflow step of pool p running kind, after the steps named.
func step(name, kind string, after ...string) *cronoqv1.WorkflowStep {
	return &cronoqv1.WorkflowStep{Name: name, Spec: &cronoqv1.TaskSpec{Template: tpl("p", kind)}, DependsOn: after}
}

// rawWorker is one worker stream driven by hand.
type rawWorker struct {
	t      *testing.T
	stream *connect.BidiStreamForClient[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]
	// aborts and acks received while waiting for something else.
	aborts []*cronoqv1.Abort
}

func connectWorker(t *testing.T, ctx context.Context, a api, pool string) *rawWorker {
	t.Helper()
	stream := a.workers.Connect(ctx)
	t.Cleanup(func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	w := &rawWorker{t: t, stream: stream}
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: pool}}})
	require.NotNil(t, w.recv().GetWelcome())
	return w
}

func (w *rawWorker) send(m *cronoqv1.WorkerMessage) {
	w.t.Helper()
	require.NoError(w.t, w.stream.Send(m))
}

func (w *rawWorker) recv() *cronoqv1.ServerMessage {
	w.t.Helper()
	m, err := w.stream.Receive()
	require.NoError(w.t, err)
	return m
}

// poll offers n slots and returns the grants of the next Grants message.
func (w *rawWorker) poll(n int32) []*cronoqv1.Grant {
	w.t.Helper()
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: n}}})
	for {
		m := w.recv()
		if g := m.GetGrants(); g != nil {
			return g.GetGrants()
		}
		if a := m.GetAbort(); a != nil {
			w.aborts = append(w.aborts, a)
		}
	}
}

// complete sends one completion and returns its per-lease result.
func (w *rawWorker) complete(c *cronoqv1.Completion) *cronoqv1.LeaseResult {
	w.t.Helper()
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: []*cronoqv1.Completion{c}}}})
	for {
		m := w.recv()
		if ack := m.GetCompleteAck(); ack != nil {
			return ack.GetResults()[0]
		}
		if a := m.GetAbort(); a != nil {
			w.aborts = append(w.aborts, a)
		}
	}
}

func success(lease uint64, output string, children ...*cronoqv1.WorkflowStep) *cronoqv1.Completion {
	return &cronoqv1.Completion{Lease: lease, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte(output), Children: children}
}

// statuses returns the status of each member of a workflow, by step name
// (by id for unnamed members).
func statuses(w *cronoqv1.Workflow) map[string]cronoqv1.Status {
	out := map[string]cronoqv1.Status{}
	for _, m := range w.GetTasks() {
		name := m.GetStep()
		if name == "" {
			name = m.GetId()
		}
		out[name] = m.GetStatus()
	}
	return out
}

// message is the message of an API error, without its code.
func message(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return ""
}

// stepIDs maps the step names of a submit answer to task ids.
func stepIDs(res *cronoqv1.SubmitWorkflowResponse) map[string]string {
	out := map[string]string{}
	for _, st := range res.GetTasks() {
		out[st.GetStep()] = st.GetId()
	}
	return out
}

const (
	blocked   = cronoqv1.Status_STATUS_BLOCKED
	queued    = cronoqv1.Status_STATUS_QUEUED
	running   = cronoqv1.Status_STATUS_RUNNING
	succeeded = cronoqv1.Status_STATUS_SUCCEEDED
	failed    = cronoqv1.Status_STATUS_FAILED
	cancelled = cronoqv1.Status_STATUS_CANCELLED
)

// A diamond: a step runs once every step it depends on succeeded, in the
// change that ends the last of them, and sees what they ended with; the
// workflow ends with its last member. Its start and end are events for
// subscribers of every pool only. The key makes the submit idempotent.
func TestWorkflowDiamond(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	wf := workflowsOf(t, c.Addrs()[0])
	ctx := testCtx(t)

	all, err := a.tasks.Events(ctx, connect.NewRequest(&cronoqv1.EventsRequest{}))
	require.NoError(t, err)
	defer all.Close()
	byPool, err := a.tasks.Events(ctx, connect.NewRequest(&cronoqv1.EventsRequest{Pools: []string{"p"}}))
	require.NoError(t, err)
	defer byPool.Close()
	c.WaitUntil("subscribed", func() bool { return c.Calls(cronoqv1connect.TaskServiceEventsProcedure) == 2 })

	spec := &cronoqv1.WorkflowSpec{Name: "nightly", Key: "n-1", Steps: []*cronoqv1.WorkflowStep{
		step("extract", "extract"), step("clean", "clean", "extract"), step("index", "index", "extract"),
		step("load", "load", "clean", "index"),
	}}
	res, err := wf.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: spec}))
	require.NoError(t, err)
	require.False(t, res.Msg.GetDuplicate())
	id, ids := res.Msg.GetId(), stepIDs(res.Msg)
	require.Equal(t, []string{"extract", "clean", "index", "load"}, func() (out []string) {
		for _, st := range res.Msg.GetTasks() {
			out = append(out, st.GetStep())
		}
		return out
	}(), "one task per step, in step order")
	got := c.Workflow(id)
	require.Equal(t, "nightly", got.GetName())
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, got.GetStatus())
	require.Equal(t, map[string]cronoqv1.Status{"extract": queued, "clean": blocked, "index": blocked, "load": blocked}, statuses(got))
	load := c.Task(ids["load"])
	require.Equal(t, []string{ids["clean"], ids["index"]}, load.GetDependsOn())
	require.Equal(t, id, load.GetWorkflow())
	require.Equal(t, "load", load.GetStep())

	w := connectWorker(t, ctx, a, "p")
	grants := w.poll(1)
	require.Len(t, grants, 1)
	require.Equal(t, ids["extract"], grants[0].GetTask().GetId())
	require.Empty(t, grants[0].GetDependencies())
	require.Empty(t, w.complete(success(grants[0].GetLease(), "rows")).GetCode())
	require.Equal(t, queued, c.Task(ids["clean"]).GetStatus(), "released with the end of extract")
	require.Equal(t, queued, c.Task(ids["index"]).GetStatus())

	grants = w.poll(2)
	require.Len(t, grants, 2)
	for _, g := range grants {
		require.Equal(t, []*cronoqv1.DependencyResult{{Id: ids["extract"], Step: "extract", Status: succeeded, Output: []byte("rows")}},
			g.GetDependencies())
		require.Empty(t, w.complete(success(g.GetLease(), g.GetTask().GetStep())).GetCode())
	}
	grants = w.poll(1)
	require.Len(t, grants, 1)
	require.Equal(t, ids["load"], grants[0].GetTask().GetId())
	deps := grants[0].GetDependencies()
	require.Len(t, deps, 2)
	require.Equal(t, "clean", deps[0].GetStep(), "in depends_on order")
	require.Equal(t, []byte("clean"), deps[0].GetOutput())
	require.Equal(t, "index", deps[1].GetStep())
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, c.Workflow(id).GetStatus())
	require.Empty(t, w.complete(success(grants[0].GetLease(), "loaded")).GetCode())
	got = c.Workflow(id)
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED, got.GetStatus())
	require.NotNil(t, got.GetFinishedAt())

	// The key names the workflow: a second submit answers with it.
	again, err := wf.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
		Name: "nightly", Key: "n-1", Steps: []*cronoqv1.WorkflowStep{step("other", "other")},
	}}))
	require.NoError(t, err)
	require.True(t, again.Msg.GetDuplicate())
	require.Equal(t, id, again.Msg.GetId())
	require.Equal(t, ids, stepIDs(again.Msg))
	require.Len(t, c.Workflows(), 1)
	require.Len(t, c.Tasks(), 4)

	// Events: the workflow's start, its members' transitions (naming the
	// workflow and step), its end; a pool filter leaves the workflow
	// events out.
	var wfEvents []cronoqv1.WorkflowStatus
	for all.Receive() {
		ev := all.Msg()
		if ev.GetTaskId() == "" {
			require.Equal(t, id, ev.GetWorkflow())
			require.Equal(t, "nightly", ev.GetKind())
			wfEvents = append(wfEvents, ev.GetWorkflowStatus())
			if ev.GetWorkflowStatus() == cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED {
				break
			}
			continue
		}
		require.Equal(t, id, ev.GetWorkflow())
		require.NotEmpty(t, ev.GetStep())
	}
	require.Equal(t, []cronoqv1.WorkflowStatus{cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED}, wfEvents)
	// Extract: queued, running, succeeded; the others: blocked, queued,
	// running, succeeded. Nothing else.
	n := 0
	for byPool.Receive() {
		ev := byPool.Msg()
		require.NotEmpty(t, ev.GetTaskId(), "no workflow event for a pool filter")
		if n++; ev.GetTaskId() == ids["load"] && ev.GetStatus() == succeeded {
			break
		}
	}
	require.Equal(t, 3+3*4, n)
}

// Under policy succeeded a dependency that ends without success cancels
// its dependents, transitively, each naming the dependency; under policy
// done a dependent runs anyway. The workflow ends failed.
func TestWorkflowCascade(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t, clienttest.WithMaxAttempts(1))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	report := step("report", "report", "a", "d")
	report.Spec.DependencyPolicy = cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE
	id := c.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "cascade", Steps: []*cronoqv1.WorkflowStep{
		step("a", "a"), step("b", "b", "a"), step("c", "c", "b"), step("d", "d", "c"), report,
	}})
	w := connectWorker(t, ctx, a, "p")
	grants := w.poll(1)
	require.Empty(t, w.complete(&cronoqv1.Completion{Lease: grants[0].GetLease(), Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT, Message: "boom"}).GetCode())

	byStep := map[string]*cronoqv1.Task{}
	for _, m := range c.Workflow(id).GetTasks() {
		byStep[m.GetStep()] = m
	}
	require.Equal(t, "boom", byStep["a"].GetError())
	require.Equal(t, "dependency a failed", byStep["b"].GetError())
	require.Equal(t, "dependency b cancelled", byStep["c"].GetError())
	require.Equal(t, "dependency c cancelled", byStep["d"].GetError())
	for _, s := range []string{"b", "c", "d"} {
		require.Equal(t, cancelled, byStep[s].GetStatus())
		require.Zero(t, byStep[s].GetAttempt(), "never ran")
	}
	require.Equal(t, queued, byStep["report"].GetStatus())
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, c.Workflow(id).GetStatus())

	grants = w.poll(1)
	deps := grants[0].GetDependencies()
	require.Equal(t, failed, deps[0].GetStatus())
	require.Equal(t, "boom", deps[0].GetError())
	require.Equal(t, cancelled, deps[1].GetStatus())
	require.Empty(t, w.complete(success(grants[0].GetLease(), "summary")).GetCode())
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_FAILED, c.Workflow(id).GetStatus())

	// Policy done with a failed dependency and a live one waits for both;
	// cancelling one member cancels its dependents and the workflow ends
	// cancelled once the rest end.
	z := step("z", "z", "x", "y")
	z.Spec.DependencyPolicy = cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE
	id2 := c.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "done", Steps: []*cronoqv1.WorkflowStep{step("x", "x"), step("y", "y"), z, step("after-y", "k", "y")}})
	byStep = map[string]*cronoqv1.Task{}
	for _, m := range c.Workflow(id2).GetTasks() {
		byStep[m.GetStep()] = m
	}
	c.Finish(byStep["x"].GetId(), failed, nil, "x failed")
	require.Equal(t, blocked, c.Task(byStep["z"].GetId()).GetStatus())
	_, err := a.tasks.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelRequest{Ref: &cronoqv1.TaskRef{Id: byStep["y"].GetId()}}))
	require.NoError(t, err)
	require.Equal(t, "dependency y cancelled", c.Task(byStep["after-y"].GetId()).GetError())
	require.Equal(t, queued, c.Task(byStep["z"].GetId()).GetStatus())
	c.Finish(byStep["z"].GetId(), succeeded, nil, "")
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_FAILED, c.Workflow(id2).GetStatus(), "a failed member wins over a cancelled one")
}

// Cancelling a workflow ends every live member at once, each saying so;
// running attempts are revoked with an Abort; the answer counts them.
func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	wf := workflowsOf(t, c.Addrs()[0])
	ctx := testCtx(t)
	id := c.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "wf", Key: "k", Steps: []*cronoqv1.WorkflowStep{
		step("a", "a"), step("b", "b"), step("c", "c", "a"), step("d", "d", "b", "c"),
	}})
	w := connectWorker(t, ctx, a, "p")
	grants := w.poll(1)
	require.Len(t, grants, 1)

	res, err := wf.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: id}}))
	require.NoError(t, err)
	require.Equal(t, id, res.Msg.GetId())
	require.EqualValues(t, 4, res.Msg.GetCancelled())
	got := c.Workflow(id)
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED, got.GetStatus())
	for _, m := range got.GetTasks() {
		require.Equal(t, cancelled, m.GetStatus(), m.GetStep())
		require.Equal(t, "workflow cancelled", m.GetError(), m.GetStep())
	}
	abort := w.recv().GetAbort()
	require.Equal(t, grants[0].GetLease(), abort.GetLease())
	require.Equal(t, "workflow cancelled", abort.GetReason())
	require.Equal(t, apierr.KindStaleLease, w.complete(success(grants[0].GetLease(), "late")).GetCode())

	res, err = wf.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Key: "k"}}))
	require.NoError(t, err)
	require.Zero(t, res.Msg.GetCancelled(), "nothing left to end")
	_, err = wf.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "nope"}}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	_, err = wf.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{}}))
	field, _ := apierr.Field(err)
	require.Equal(t, "ref", field)
}

// A running attempt completes with children and a continuation: inserted
// with the completion, in a workflow created for them (named after the
// parent's kind, which the parent joins). Names stay unique in the
// workflow; children of a stale lease, of a failure, or that do not fit
// the pending limit refuse the completion and change nothing.
func TestWorkflowSpawn(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	parent := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("p", "fanout")})
	w := connectWorker(t, ctx, a, "p")
	g := w.poll(1)[0]

	comp := success(g.GetLease(), "split", step("part-1", "part"), step("part-2", "part"))
	comp.Then = step("merge", "merge")
	require.Empty(t, w.complete(comp).GetCode())
	p := c.Task(parent)
	require.Equal(t, succeeded, p.GetStatus())
	require.NotEmpty(t, p.GetWorkflow(), "the parent joined the workflow made for its children")
	got := c.Workflow(p.GetWorkflow())
	require.Equal(t, "fanout", got.GetName())
	require.Equal(t, parent, got.GetParent())
	require.Equal(t, map[string]cronoqv1.Status{parent: succeeded, "part-1": queued, "part-2": queued, "merge": blocked}, statuses(got))
	byStep := map[string]*cronoqv1.Task{}
	for _, m := range got.GetTasks() {
		byStep[m.GetStep()] = m
		if m.GetId() != parent {
			require.Equal(t, parent, m.GetParent())
		}
	}
	require.Equal(t, []string{byStep["part-1"].GetId(), byStep["part-2"].GetId()}, byStep["merge"].GetDependsOn())

	// A child spawns in turn, in the same workflow; a taken name refuses
	// the completion and keeps the lease.
	grants := w.poll(2)
	require.Len(t, grants, 2)
	require.Empty(t, w.complete(success(grants[0].GetLease(), "r1")).GetCode())
	res := w.complete(success(grants[1].GetLease(), "r2", step("part-1", "part")))
	require.Equal(t, apierr.KindInvalid, res.GetCode())
	require.Equal(t, `invalid children[0].name: step "part-1" exists in the workflow`, res.GetError())
	require.Equal(t, running, c.Task(grants[1].GetTask().GetId()).GetStatus(), "lease kept")
	res = w.complete(success(grants[1].GetLease(), "r2", step("part-3", "part", "part-1")))
	require.Empty(t, res.GetCode())
	require.Len(t, c.Workflow(p.GetWorkflow()).GetTasks(), 5)

	// A stale lease: the completion and its children are refused together.
	require.Equal(t, apierr.KindStaleLease, w.complete(success(g.GetLease(), "again", step("x", "x"))).GetCode())
	require.Len(t, c.Workflow(p.GetWorkflow()).GetTasks(), 5)

	// Children only with a success, and only within the pending limit.
	grants = w.poll(1)
	require.Len(t, grants, 1)
	fail := &cronoqv1.Completion{Lease: grants[0].GetLease(), Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT, Children: []*cronoqv1.WorkflowStep{step("y", "y")}}
	res = w.complete(fail)
	require.Equal(t, "invalid children: only a successful attempt spawns children", res.GetError())
	c.SetPendingLimit("p", 2)
	res = w.complete(success(grants[0].GetLease(), "", step("y1", "y"), step("y2", "y")))
	require.Equal(t, apierr.KindOverloaded, res.GetCode())
	require.Equal(t, running, c.Task(grants[0].GetTask().GetId()).GetStatus(), "lease kept")
	res = w.complete(success(grants[0].GetLease(), "", &cronoqv1.WorkflowStep{Spec: &cronoqv1.TaskSpec{Template: tpl("p", "anon")}}))
	require.Empty(t, res.GetCode(), "a child needs no name")
	require.Len(t, c.Workflow(p.GetWorkflow()).GetTasks(), 6)

	// Spawn errors name the child and the field.
	c.SetPendingLimit("p", -1)
	grants = w.poll(1)
	for _, tc := range []struct {
		comp  *cronoqv1.Completion
		error string
	}{
		{success(grants[0].GetLease(), "", &cronoqv1.WorkflowStep{Name: "k", Spec: &cronoqv1.TaskSpec{Template: tpl("p", "k"), Key: "x"}}),
			"invalid children[0].key: a step takes no key: the workflow's key makes its submit idempotent"},
		{success(grants[0].GetLease(), "", step("z", "z", "nope")),
			`invalid children[0].depends_on: "nope" is neither an earlier child nor a step of the workflow`},
		{success(grants[0].GetLease(), "", step("z", "z"), step("z", "z")),
			`invalid children[1].name: step "z" exists in the workflow`},
		{success(grants[0].GetLease(), "", &cronoqv1.WorkflowStep{Name: "z", Spec: &cronoqv1.TaskSpec{Template: tpl("p", "z"),
			DependsOn: []*cronoqv1.TaskRef{{Id: "T99999999"}}}}),
			"invalid children[0].depends_on[0].ref: task T99999999 does not exist (unknown, or purged)"},
		{&cronoqv1.Completion{Lease: grants[0].GetLease(), Then: step("a/b", "z")},
			`invalid then.name: "a/b": use letters, digits, '-', '_' and '.'`},
	} {
		require.Equal(t, tc.error, w.complete(tc.comp).GetError())
	}
	require.Len(t, c.Workflow(p.GetWorkflow()).GetTasks(), 6)
}

// An external task is never granted: once queued it waits for Complete,
// which ends it with an output or a failure message; anything else is
// refused as not_waiting. Its deadline still applies.
func TestExternalTasks(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := clienttest.NewCluster(t, clienttest.WithClock(clock.Now))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	approval := step("approval", "approval", "build")
	approval.Spec.External = true
	approval.Spec.Deadline = timestamppb.New(clock.Now().Add(time.Hour))
	id := c.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "approve", Steps: []*cronoqv1.WorkflowStep{
		step("build", "build"), approval, step("deploy", "deploy", "approval"),
	}})
	byStep := map[string]string{}
	for _, m := range c.Workflow(id).GetTasks() {
		byStep[m.GetStep()] = m.GetId()
	}
	complete := func(ref *cronoqv1.TaskRef, outcome cronoqv1.OutcomeKind, output, msg string) (*cronoqv1.Task, error) {
		res, err := a.tasks.Complete(ctx, connect.NewRequest(&cronoqv1.CompleteRequest{Ref: ref, Outcome: outcome, Output: []byte(output), Message: msg}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetTask(), nil
	}
	ok := cronoqv1.OutcomeKind_OUTCOME_SUCCESS
	_, err := complete(&cronoqv1.TaskRef{Id: byStep["approval"]}, ok, "yes", "")
	require.Equal(t, apierr.KindNotWaiting, apierr.Kind(err))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Contains(t, err.Error(), "task "+byStep["approval"]+" is blocked")

	w := connectWorker(t, ctx, a, "p")
	g := w.poll(1)
	require.Len(t, g, 1)
	require.Equal(t, byStep["build"], g[0].GetTask().GetId())
	require.Empty(t, w.complete(success(g[0].GetLease(), "artifact")).GetCode())
	require.Equal(t, queued, c.Task(byStep["approval"]).GetStatus())
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 1}}})
	c.WaitUntil("the poll taken", func() bool { return len(c.Workers().Polls) == 2 })
	require.Len(t, c.Workers().Grants, 1, "the approval is never granted")

	_, err = complete(&cronoqv1.TaskRef{Id: byStep["build"]}, ok, "yes", "")
	require.Equal(t, apierr.KindNotWaiting, apierr.Kind(err))
	require.Contains(t, err.Error(), "is not an external task")
	_, err = complete(&cronoqv1.TaskRef{Id: byStep["approval"]}, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, "", "")
	field, _ := apierr.Field(err)
	require.Equal(t, "outcome", field)
	_, err = complete(&cronoqv1.TaskRef{Id: "nope"}, ok, "", "")
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))

	task, err := complete(&cronoqv1.TaskRef{Id: byStep["approval"]}, ok, "approved-by-ann", "")
	require.NoError(t, err)
	require.Equal(t, succeeded, task.GetStatus())
	require.Equal(t, []byte("approved-by-ann"), task.GetOutput())
	require.Equal(t, running, c.Task(byStep["deploy"]).GetStatus(), "released, and granted to the open poll")
	_, err = complete(&cronoqv1.TaskRef{Id: byStep["approval"]}, ok, "again", "")
	require.Contains(t, err.Error(), "is succeeded")

	// Failed by request, by key; then one whose deadline passes first, and
	// its dependent with it.
	c.AddTask(&cronoqv1.TaskSpec{Template: tpl("q", "callback"), External: true, Key: "cb"})
	task, err = complete(&cronoqv1.TaskRef{Key: "cb"}, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, "", "rejected")
	require.NoError(t, err)
	require.Equal(t, failed, task.GetStatus())
	require.Equal(t, "rejected", task.GetError())
	appr := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("q", "approval"), External: true, Key: "appr",
		Deadline: timestamppb.New(clock.Now().Add(10 * time.Second))})
	after := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("q", "after"), DependsOn: []*cronoqv1.TaskRef{{Key: "appr"}}})
	clock.Advance(11 * time.Second)
	c.Refresh()
	require.Equal(t, cronoqv1.Status_STATUS_EXPIRED, c.Task(appr).GetStatus())
	require.Equal(t, "dependency "+appr+" expired", c.Task(after).GetError())
	_, err = complete(&cronoqv1.TaskRef{Key: "appr"}, ok, "late", "")
	require.Equal(t, apierr.KindNotWaiting, apierr.Kind(err))
}

// A workflow submit refuses what the core refuses, naming the step and the
// field, and inserts nothing.
func TestWorkflowValidation(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	wf := workflowsOf(t, c.Addrs()[0])
	ctx := testCtx(t)
	withSpec := func(s *cronoqv1.WorkflowStep, f func(*cronoqv1.TaskSpec)) *cronoqv1.WorkflowStep {
		f(s.Spec)
		return s
	}
	for _, tc := range []struct {
		name  string
		steps []*cronoqv1.WorkflowStep
		error string
	}{
		{"no steps", nil, "invalid steps: at least one step is required"},
		{"no name", []*cronoqv1.WorkflowStep{step("", "a")}, "invalid steps[0].name: must not be empty"},
		{"named twice", []*cronoqv1.WorkflowStep{step("a", "a"), step("a", "b")}, `invalid steps[1].name: step "a" is named twice`},
		{"bad name", []*cronoqv1.WorkflowStep{step("a/b", "a")}, `invalid steps[0].name: "a/b": use letters, digits, '-', '_' and '.'`},
		{"later step", []*cronoqv1.WorkflowStep{step("a", "a", "b"), step("b", "b", "a")},
			`invalid steps[0].depends_on: "b" is not an earlier step of the workflow`},
		{"itself", []*cronoqv1.WorkflowStep{step("a", "a", "a")}, `invalid steps[0].depends_on: "a" is not an earlier step of the workflow`},
		{"key", []*cronoqv1.WorkflowStep{withSpec(step("a", "a"), func(s *cronoqv1.TaskSpec) { s.Key = "k" })},
			"invalid steps[0].key: a step takes no key: the workflow's key makes its submit idempotent"},
		{"bad spec", []*cronoqv1.WorkflowStep{step("a", "a"), withSpec(step("b", "b"), func(s *cronoqv1.TaskSpec) { s.Template.Pool = "" })},
			"invalid steps[1].pool: must not be empty"},
		{"bad policy", []*cronoqv1.WorkflowStep{step("a", "a"), withSpec(step("b", "b", "a"), func(s *cronoqv1.TaskSpec) { s.DependencyPolicy = 9 })},
			"invalid steps[1].dependency_policy: unknown dependency policy 9"},
		{"unknown task", []*cronoqv1.WorkflowStep{withSpec(step("a", "a"), func(s *cronoqv1.TaskSpec) { s.DependsOn = []*cronoqv1.TaskRef{{Id: "nope"}} })},
			"invalid steps[0].depends_on[0].id: task nope does not exist (unknown, or purged)"},
		{"bad ref", []*cronoqv1.WorkflowStep{withSpec(step("a", "a"), func(s *cronoqv1.TaskSpec) { s.DependsOn = []*cronoqv1.TaskRef{{}} })},
			"invalid steps[0].depends_on[0].ref: an id or a key is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wf.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{Name: "w", Steps: tc.steps}}))
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
			require.Equal(t, tc.error, message(err))
		})
	}
	require.Empty(t, c.Tasks())
	require.Empty(t, c.Workflows())
}

// Plain submits depend on tasks too: by id, by key, or by key on an earlier
// spec of the same batch. An unknown reference is refused naming it; a
// dependency that ended without success cancels the new task at once
// (policy succeeded) or lets it run (policy done). Blocked tasks count as
// pending and are listed and counted.
func TestTaskDependencies(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t)
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	batch, err := a.tasks.SubmitBatch(ctx, connect.NewRequest(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "a"), Key: "a"},
		{Template: tpl("p", "b"), Key: "b", DependsOn: []*cronoqv1.TaskRef{{Key: "a"}}},
		{Template: tpl("p", "c"), DependsOn: []*cronoqv1.TaskRef{{Key: "a"}, {Key: "b"}, {Key: "a"}}},
	}}))
	require.NoError(t, err)
	ids := []string{}
	for _, r := range batch.Msg.GetResults() {
		ids = append(ids, r.GetId())
	}
	require.Equal(t, []string{ids[0], ids[1]}, c.Task(ids[2]).GetDependsOn(), "each dependency once")
	require.Equal(t, blocked, c.Task(ids[1]).GetStatus())

	for _, tc := range []struct {
		specs []*cronoqv1.TaskSpec
		field string
	}{
		{[]*cronoqv1.TaskSpec{{Template: tpl("p", "e"), DependsOn: []*cronoqv1.TaskRef{{Id: "T99"}}}}, "specs[0].depends_on[0].id"},
		{[]*cronoqv1.TaskSpec{{Template: tpl("p", "x")}, {Template: tpl("p", "y"), DependsOn: []*cronoqv1.TaskRef{{Key: "zz"}}}}, "specs[1].depends_on[0].key"},
		{[]*cronoqv1.TaskSpec{{Template: tpl("p", "y"), DependsOn: []*cronoqv1.TaskRef{{Key: "later"}}}, {Template: tpl("p", "x"), Key: "later"}}, "specs[0].depends_on[0].key"},
		{[]*cronoqv1.TaskSpec{{Template: tpl("p", "y"), DependsOn: []*cronoqv1.TaskRef{{Id: ids[0], Key: "a"}}}}, "specs[0].depends_on[0].ref"},
		{[]*cronoqv1.TaskSpec{{Template: tpl("p", "y"), DependencyPolicy: 5}}, "specs[0].dependency_policy"},
	} {
		_, err := a.tasks.SubmitBatch(ctx, connect.NewRequest(&cronoqv1.SubmitBatchRequest{Specs: tc.specs}))
		field, _ := apierr.Field(err)
		require.Equal(t, tc.field, field)
	}
	_, err = submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "f"), DependsOn: []*cronoqv1.TaskRef{{Key: "nope"}}})
	require.Equal(t, `invalid depends_on[0].key: no task has the key "nope" (unknown, or purged)`, message(err))
	many, err := a.tasks.EnqueueMany(ctx, connect.NewRequest(&cronoqv1.EnqueueManyRequest{Specs: []*cronoqv1.TaskSpec{
		{Template: tpl("p", "m"), Key: "m"}, {Template: tpl("p", "n"), DependsOn: []*cronoqv1.TaskRef{{Key: "m"}, {Id: "T99"}}},
	}}))
	require.NoError(t, err)
	require.Empty(t, many.Msg.GetResults()[0].GetCode())
	require.Equal(t, "invalid depends_on[1].id: task T99 does not exist (unknown, or purged)", many.Msg.GetResults()[1].GetError())
	require.Len(t, c.Tasks(), 4)

	c.Finish(ids[0], failed, nil, "boom")
	require.Equal(t, "dependency "+ids[0]+" failed", c.Task(ids[1]).GetError())
	require.Equal(t, "dependency "+ids[1]+" cancelled", c.Task(ids[2]).GetError(), "cancelled down the graph, depth first")

	late, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "late"), DependsOn: []*cronoqv1.TaskRef{{Id: ids[0]}}})
	require.NoError(t, err)
	require.Equal(t, cancelled, c.Task(late.Msg.GetResult().GetId()).GetStatus(), "ended at once")
	done, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("p", "late"), DependsOn: []*cronoqv1.TaskRef{{Id: ids[0]}},
		DependencyPolicy: cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE})
	require.NoError(t, err)
	require.Equal(t, queued, c.Task(done.Msg.GetResult().GetId()).GetStatus())
	waits, err := submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("q", "later"), DependsOn: []*cronoqv1.TaskRef{{Id: done.Msg.GetResult().GetId()}},
		Delay: durationpb.New(time.Hour)})
	require.NoError(t, err)
	waitsID := waits.Msg.GetResult().GetId()
	require.Equal(t, blocked, c.Task(waitsID).GetStatus())

	// Blocked counts as pending: the limit refuses what it would exceed.
	c.SetPendingLimit("q", 1)
	_, err = submit(ctx, a, &cronoqv1.TaskSpec{Template: tpl("q", "more")})
	require.Equal(t, apierr.KindOverloaded, apierr.Kind(err))
	counts, err := a.tasks.Counts(ctx, connect.NewRequest(&cronoqv1.CountsRequest{}))
	require.NoError(t, err)
	require.EqualValues(t, 1, counts.Msg.GetPools()[1].GetByStatus()["blocked"])
	list, err := a.tasks.List(ctx, connect.NewRequest(&cronoqv1.ListRequest{Statuses: []cronoqv1.Status{blocked}}))
	require.NoError(t, err)
	require.Len(t, list.Msg.GetTasks(), 1)
	require.Equal(t, waitsID, list.Msg.GetTasks()[0].GetId())

	// Released once its dependency succeeds, it waits for its run-at.
	c.Finish(done.Msg.GetResult().GetId(), succeeded, []byte("ok"), "")
	require.Equal(t, cronoqv1.Status_STATUS_SCHEDULED, c.Task(waitsID).GetStatus())
}

// Grants carry dependency outputs up to the grant's output budget; past it
// they are left out, marked so.
func TestGrantOutputBudget(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t, clienttest.WithGrantOutputBudget(5))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	x := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("done", "x")})
	y := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("done", "y")})
	z := c.AddTask(&cronoqv1.TaskSpec{Template: tpl("done", "z")})
	c.Finish(x, succeeded, []byte("1234"), "")
	c.Finish(y, succeeded, []byte("5678"), "")
	c.Finish(z, succeeded, nil, "")
	c.AddTask(&cronoqv1.TaskSpec{Template: tpl("p", "k"), DependsOn: []*cronoqv1.TaskRef{{Id: x}, {Id: y}, {Id: z}}})
	w := connectWorker(t, ctx, a, "p")
	deps := w.poll(1)[0].GetDependencies()
	require.Len(t, deps, 3)
	require.Equal(t, []byte("1234"), deps[0].GetOutput())
	require.False(t, deps[0].GetOutputOmitted())
	require.Empty(t, deps[1].GetOutput())
	require.True(t, deps[1].GetOutputOmitted(), "past the budget")
	require.False(t, deps[2].GetOutputOmitted(), "nothing to leave out")
}

// Workflows are read by id or key (stale reads from any node), listed by
// id with a status filter and a cursor, and waited for.
func TestWorkflowReads(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t, clienttest.WithNodes(2), clienttest.WithMaxListLimit(2))
	leader, follower := workflowsOf(t, c.Addrs()[0]), workflowsOf(t, c.Addrs()[1])
	ctx := testCtx(t)
	var ids []string
	for _, key := range []string{"a", "b", "c"} {
		ids = append(ids, c.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "w-" + key, Key: key, Steps: []*cronoqv1.WorkflowStep{step("s", "k")}}))
	}
	c.Finish(c.Workflow(ids[1]).GetTasks()[0].GetId(), succeeded, nil, "")

	got, err := leader.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Key: "b"}}))
	require.NoError(t, err)
	require.Equal(t, ids[1], got.Msg.GetWorkflow().GetId())
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED, got.Msg.GetWorkflow().GetStatus())
	require.Len(t, got.Msg.GetWorkflow().GetTasks(), 1)
	_, err = follower.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: ids[0]}}))
	require.Equal(t, apierr.KindNotLeader, apierr.Kind(err))
	stale, err := follower.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: ids[0]}, Stale: true}))
	require.NoError(t, err)
	require.True(t, stale.Msg.GetMeta().GetStale())
	_, err = leader.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: "nope"}}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))

	var listed []string
	req := &cronoqv1.ListWorkflowsRequest{Limit: 5}
	for {
		page, err := leader.List(ctx, connect.NewRequest(req))
		require.NoError(t, err)
		for _, w := range page.Msg.GetWorkflows() {
			require.Empty(t, w.GetTasks(), "lists leave members out")
			listed = append(listed, w.GetId())
		}
		if page.Msg.GetNext() == "" {
			break
		}
		req.After = page.Msg.GetNext()
	}
	require.Equal(t, ids, listed, "capped at the list limit, in pages")
	page, err := leader.List(ctx, connect.NewRequest(&cronoqv1.ListWorkflowsRequest{Statuses: []cronoqv1.WorkflowStatus{cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING}}))
	require.NoError(t, err)
	require.Len(t, page.Msg.GetWorkflows(), 2)
	_, err = leader.List(ctx, connect.NewRequest(&cronoqv1.ListWorkflowsRequest{Statuses: []cronoqv1.WorkflowStatus{9}}))
	field, _ := apierr.Field(err)
	require.Equal(t, "statuses", field)

	// Wait answers at the end, or with the workflow as it is when its hold
	// passes.
	held, err := leader.Wait(ctx, connect.NewRequest(&cronoqv1.WaitWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: ids[0]}, Timeout: durationpb.New(10 * time.Millisecond)}))
	require.NoError(t, err)
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, held.Msg.GetWorkflow().GetStatus())
	done := make(chan *cronoqv1.Workflow, 1)
	go func() {
		res, err := leader.Wait(ctx, connect.NewRequest(&cronoqv1.WaitWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Key: "a"}}))
		if err != nil {
			done <- nil
			return
		}
		done <- res.Msg.GetWorkflow()
	}()
	c.WaitUntil("waiting", func() bool { return c.Calls(cronoqv1connect.WorkflowServiceWaitProcedure) == 2 })
	c.Finish(c.Workflow(ids[0]).GetTasks()[0].GetId(), failed, nil, "no")
	w := <-done
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_FAILED, w.GetStatus())
	require.Equal(t, failed, w.GetTasks()[0].GetStatus())
}

// A schedule may fire a workflow: each fire inserts the whole graph, keyed
// by schedule and instant; overlap skip looks at the workflow of the last
// fire. A schedule fires a task or a workflow, not both.
func TestWorkflowSchedule(t *testing.T) {
	t.Parallel()
	clock := &manualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := clienttest.NewCluster(t, clienttest.WithClock(clock.Now))
	a := dialNode(t, c.Addrs()[0])
	ctx := testCtx(t)
	add := func(s *cronoqv1.Schedule) error {
		_, err := a.schedules.Add(ctx, connect.NewRequest(&cronoqv1.AddScheduleRequest{Schedule: s}))
		return err
	}
	require.NoError(t, add(&cronoqv1.Schedule{Name: "etl", Cron: "@hourly", Workflow: "nightly", Steps: []*cronoqv1.WorkflowStep{
		step("extract", "extract"), step("load", "load", "extract"),
	}}))
	id := c.FireSchedule("etl")
	w := c.Workflow(id)
	require.NotNil(t, w)
	require.Equal(t, "nightly", w.GetName())
	require.Equal(t, "etl", w.GetSchedule())
	require.Contains(t, w.GetKey(), "etl@")
	require.Equal(t, map[string]cronoqv1.Status{"extract": queued, "load": blocked}, statuses(w))
	require.Equal(t, "etl", w.GetTasks()[0].GetSchedule())
	require.Equal(t, id, c.Schedule("etl").GetLastTask())
	require.Empty(t, c.FireSchedule("etl"), "overlap skip: the last fire's workflow runs")
	require.EqualValues(t, 1, c.Schedule("etl").GetSkipped())
	for _, m := range w.GetTasks() {
		c.Finish(m.GetId(), succeeded, nil, "")
	}
	require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED, c.Workflow(id).GetStatus())
	clock.Advance(time.Minute)
	require.NotEmpty(t, c.FireSchedule("etl"))
	require.EqualValues(t, 2, c.Schedule("etl").GetFires())

	// Fired by the clock too, at its instants.
	require.NoError(t, add(&cronoqv1.Schedule{Name: "tick", Cron: "@every 1m", Overlap: cronoqv1.Overlap_OVERLAP_ALLOW, Steps: []*cronoqv1.WorkflowStep{step("only", "k")}}))
	clock.Advance(time.Minute)
	c.Refresh()
	fired := c.Workflow(c.Schedule("tick").GetLastTask())
	require.NotNil(t, fired)
	require.Equal(t, "tick", fired.GetName(), "named after the schedule when the workflow has no name")
	require.Equal(t, clock.Now().Truncate(time.Minute), fired.GetSlot().AsTime())
	require.Len(t, fired.GetTasks(), 1)

	for _, tc := range []struct {
		s     *cronoqv1.Schedule
		field string
	}{
		{&cronoqv1.Schedule{Name: "both", Cron: "@hourly", Task: tpl("p", "k"), Steps: []*cronoqv1.WorkflowStep{step("a", "a")}}, "task"},
		{&cronoqv1.Schedule{Name: "bad", Cron: "@hourly", Steps: []*cronoqv1.WorkflowStep{step("a", "a", "b")}}, "steps[0].depends_on"},
		{&cronoqv1.Schedule{Name: "bad", Cron: "@hourly", Steps: []*cronoqv1.WorkflowStep{step("a", "")}}, "steps[0].kind"},
		{&cronoqv1.Schedule{Name: "empty", Cron: "@hourly", Workflow: "w"}, "steps"},
		{&cronoqv1.Schedule{Name: "keyed", Cron: "@hourly", Steps: []*cronoqv1.WorkflowStep{{Name: "a", Spec: &cronoqv1.TaskSpec{Template: tpl("p", "a"), Key: "k"}}}}, "steps[0].spec.key"},
	} {
		field, _ := apierr.Field(add(tc.s))
		require.Equal(t, tc.field, field, tc.s.GetName())
	}
}

// The members of a workflow come by pages, bounded by a count and by
// bytes; task lists are bounded by bytes too.
func TestMemberPages(t *testing.T) {
	t.Parallel()
	c := clienttest.NewCluster(t, clienttest.WithMaxPageBytes(300))
	a := dialNode(t, c.Addrs()[0])
	wf := workflowsOf(t, c.Addrs()[0])
	ctx := testCtx(t)
	var steps []*cronoqv1.WorkflowStep
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		steps = append(steps, step(name, "k"))
	}
	id := c.AddWorkflow(&cronoqv1.WorkflowSpec{Name: "w", Steps: steps})
	all := c.Workflow(id).GetTasks()
	require.Len(t, all, 5)

	get := func(after string, limit int32) (*cronoqv1.GetWorkflowResponse, error) {
		res, err := wf.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: id}, TasksAfter: after, TasksLimit: limit}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	page, err := get("", 2)
	require.NoError(t, err)
	require.Len(t, page.GetWorkflow().GetTasks(), 2)
	require.Equal(t, all[1].GetId(), page.GetTasksNext())
	page, err = get(page.GetTasksNext(), 1)
	require.NoError(t, err)
	require.Equal(t, all[2].GetId(), page.GetWorkflow().GetTasks()[0].GetId())
	require.Equal(t, all[2].GetId(), page.GetTasksNext())
	page, err = get(all[3].GetId(), 1)
	require.NoError(t, err)
	require.Equal(t, all[4].GetId(), page.GetWorkflow().GetTasks()[0].GetId())
	require.Empty(t, page.GetTasksNext(), "no empty page after the last")
	_, err = get("", -1)
	field, _ := apierr.Field(err)
	require.Equal(t, "tasks_limit", field)

	// By bytes: a task is some 100 bytes here, so pages hold 2 or 3.
	var got []string
	pages := 0
	for after := ""; ; pages++ {
		page, err := get(after, 0)
		require.NoError(t, err)
		require.NotEmpty(t, page.GetWorkflow().GetTasks())
		for _, m := range page.GetWorkflow().GetTasks() {
			got = append(got, m.GetId())
		}
		if after = page.GetTasksNext(); after == "" {
			break
		}
	}
	require.Greater(t, pages, 0)
	require.Equal(t, []string{all[0].GetId(), all[1].GetId(), all[2].GetId(), all[3].GetId(), all[4].GetId()}, got)
	wait, err := wf.Wait(ctx, connect.NewRequest(&cronoqv1.WaitWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: id}, Timeout: durationpb.New(time.Millisecond)}))
	require.NoError(t, err)
	require.Less(t, len(wait.Msg.GetWorkflow().GetTasks()), 5)
	require.Equal(t, wait.Msg.GetWorkflow().GetTasks()[len(wait.Msg.GetWorkflow().GetTasks())-1].GetId(), wait.Msg.GetTasksNext())

	list, err := a.tasks.List(ctx, connect.NewRequest(&cronoqv1.ListRequest{}))
	require.NoError(t, err)
	require.Less(t, len(list.Msg.GetTasks()), 5)
	require.NotEmpty(t, list.Msg.GetNext())
}
