package client

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// SubmitWorkflow submits a workflow: its steps are inserted atomically,
// each blocked until the steps it depends on end. A spec without a key
// gets a random one, and the submit is retried with that key like Submit.
// Steps continue the trace of ctx's span as Submit's task does.
func (c *Client) SubmitWorkflow(ctx context.Context, spec WorkflowSpec) (*WorkflowSubmitted, error) {
	what := "submitting workflow"
	if spec.Name != "" {
		what += " " + spec.Name
	}
	generated := spec.Key == ""
	if generated {
		spec.Key = newKey()
	}
	req := &cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{Name: spec.Name, Key: spec.Key}}
	for i, st := range spec.Steps {
		ps, err := stepToProto(st)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, prefixInvalid(fmt.Sprintf("steps[%d].", i), err))
		}
		injectTrace(ctx, ps.GetSpec())
		req.Spec.Steps = append(req.Spec.Steps, ps)
	}
	resp, err := unary(ctx, c, what, idempotent, req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitWorkflowRequest]) (*connect.Response[cronoqv1.SubmitWorkflowResponse], error) {
			return ep.workflows.Submit
		})
	if err != nil {
		return nil, err
	}
	if resp.GetId() == "" {
		return nil, fmt.Errorf("%s: node answered without a workflow id", what)
	}
	out := &WorkflowSubmitted{
		ID:        resp.GetId(),
		Duplicate: resp.GetDuplicate() && !generated,
		Key:       spec.Key,
		Tasks:     make(map[string]string, len(resp.GetTasks())),
	}
	for _, t := range resp.GetTasks() {
		out.Tasks[t.GetStep()] = t.GetId()
	}
	return out, nil
}

func (c *Client) getWorkflow(ctx context.Context, what string, ref *cronoqv1.WorkflowRef, stale bool) (*Workflow, ReadMeta, error) {
	resp, err := c.getWorkflowPage(ctx, what, &cronoqv1.GetWorkflowRequest{Ref: ref, Stale: stale})
	if err != nil {
		return nil, ReadMeta{}, err
	}
	w := resp.GetWorkflow()
	if err := c.restOfMembers(ctx, what, w, resp.GetTasksNext(), stale); err != nil {
		return nil, ReadMeta{}, err
	}
	return workflowFromProto(w), readMetaFromProto(resp.GetMeta()), nil
}

// getWorkflowPage reads a workflow with one page of its members.
func (c *Client) getWorkflowPage(ctx context.Context, what string, req *cronoqv1.GetWorkflowRequest) (*cronoqv1.GetWorkflowResponse, error) {
	resp, err := unaryTo(ctx, c, what, read, req.GetStale(), req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetWorkflowRequest]) (*connect.Response[cronoqv1.GetWorkflowResponse], error) {
			return ep.workflows.Get
		})
	if err != nil {
		return nil, err
	}
	if resp.GetWorkflow() == nil {
		return nil, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return resp, nil
}

// restOfMembers appends to w the pages of its members that follow the one
// it holds, from next on (a node answers them by pages when they are
// large).
func (c *Client) restOfMembers(ctx context.Context, what string, w *cronoqv1.Workflow, next string, stale bool) error {
	for next != "" {
		resp, err := c.getWorkflowPage(ctx, what, &cronoqv1.GetWorkflowRequest{
			Ref: &cronoqv1.WorkflowRef{Id: w.GetId()}, Stale: stale, TasksAfter: next,
		})
		if err != nil {
			return err
		}
		w.Tasks = append(w.Tasks, resp.GetWorkflow().GetTasks()...)
		if resp.GetTasksNext() == next {
			return fmt.Errorf("%s: node answered the page after %s with the same cursor", what, next)
		}
		next = resp.GetTasksNext()
	}
	return nil
}

// GetWorkflow reads a workflow and its members by id, linearizably. A
// node answers the members of a large workflow by pages: GetWorkflow reads
// them all (the pages after the first are later reads, so the members of
// a running workflow may be newer than its status).
func (c *Client) GetWorkflow(ctx context.Context, id string) (*Workflow, error) {
	w, _, err := c.getWorkflow(ctx, "getting workflow "+id, &cronoqv1.WorkflowRef{Id: id}, false)
	return w, err
}

// GetWorkflowByKey reads a workflow by idempotency key, linearizably.
func (c *Client) GetWorkflowByKey(ctx context.Context, key string) (*Workflow, error) {
	w, _, err := c.getWorkflow(ctx, "getting workflow by key "+key, &cronoqv1.WorkflowRef{Key: key}, false)
	return w, err
}

// GetWorkflowStale reads a workflow by id from whichever node answers,
// without asking the leader; meta tells how fresh its replica is.
func (c *Client) GetWorkflowStale(ctx context.Context, id string) (*Workflow, ReadMeta, error) {
	return c.getWorkflow(ctx, "getting workflow "+id, &cronoqv1.WorkflowRef{Id: id}, true)
}

// WaitWorkflow blocks until the workflow ends and returns it with its
// members, re-issuing the call after lost connections, leader changes and
// node-side timeouts, until ctx ends.
func (c *Client) WaitWorkflow(ctx context.Context, id string) (*Workflow, error) {
	what := "waiting for workflow " + id
	ref := &cronoqv1.WorkflowRef{Id: id}
	for {
		poll := c.opts.waitPoll
		if dl, ok := ctx.Deadline(); ok {
			poll = max(min(poll, time.Until(dl)), time.Millisecond)
		}
		req := &cronoqv1.WaitWorkflowRequest{Ref: ref, Timeout: durationToProto(poll)}
		var got *cronoqv1.WaitWorkflowResponse
		start := time.Now()
		err := c.do(ctx, what, read, false, poll+c.opts.timeout, func(actx context.Context, ep *endpoint) (string, error) {
			resp, err := ep.workflows.Wait(actx, connect.NewRequest(req))
			if err != nil {
				return "", err
			}
			got = resp.Msg
			return resp.Header().Get(apierr.HeaderLeaderAddr), nil
		})
		if err != nil {
			return nil, waitError(ctx, what, err)
		}
		if w := workflowFromProto(got.GetWorkflow()); w != nil && w.Terminal() {
			// The members of an ended workflow no longer change: the pages
			// that follow agree with the first.
			if err := c.restOfMembers(ctx, what, got.GetWorkflow(), got.GetTasksNext(), false); err != nil {
				return nil, err
			}
			return workflowFromProto(got.GetWorkflow()), nil
		}
		// A node that answered at once with a live workflow may not hold
		// long polls: do not spin.
		if time.Since(start) < poll/2 {
			if err := sleep(ctx, c.opts.backoffMin); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
}

// CancelWorkflow cancels every live member of a workflow, in one commit,
// and returns how many members this call ended (0 for a workflow that had
// ended; after a retry, the count of the attempt that did it is lost and 0
// is returned).
func (c *Client) CancelWorkflow(ctx context.Context, id string) (int, error) {
	resp, err := unary(ctx, c, "cancelling workflow "+id, idempotent, &cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: id}},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CancelWorkflowRequest]) (*connect.Response[cronoqv1.CancelWorkflowResponse], error) {
			return ep.workflows.Cancel
		})
	if err != nil {
		return 0, err
	}
	return int(resp.GetCancelled()), nil
}

// ListWorkflows lists workflows (without their members) filtered by opt,
// ordered by id. next is the cursor of the following page, "" after the
// last page.
func (c *Client) ListWorkflows(ctx context.Context, opt WorkflowListOptions) ([]*Workflow, string, error) {
	const what = "listing workflows"
	if opt.Limit < 0 || opt.Limit > 1<<31-1 {
		return nil, "", fmt.Errorf("%s: %w", what, &InvalidError{Field: "limit", Reason: "out of range"})
	}
	req := &cronoqv1.ListWorkflowsRequest{After: opt.After, Limit: int32(opt.Limit), Stale: opt.Stale}
	for _, s := range opt.Statuses {
		st, err := workflowStatusToProto(s)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", what, err)
		}
		req.Statuses = append(req.Statuses, st)
	}
	resp, err := unaryTo(ctx, c, what, read, opt.Stale, req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListWorkflowsRequest]) (*connect.Response[cronoqv1.ListWorkflowsResponse], error) {
			return ep.workflows.List
		})
	if err != nil {
		return nil, "", err
	}
	out := make([]*Workflow, 0, len(resp.GetWorkflows()))
	for _, w := range resp.GetWorkflows() {
		out = append(out, workflowFromProto(w))
	}
	return out, resp.GetNext(), nil
}

// Complete ends an external task that waits for its completion with
// success and output, and returns the task. A task that is not external,
// or not waiting (blocked, or already ended), is refused with
// ErrNotWaiting. It is not retried after an unknown outcome (a retry could
// not tell its own earlier success from another's): Get tells whether it
// took.
func (c *Client) Complete(ctx context.Context, ref TaskRef, output []byte) (*Task, error) {
	return c.completeExternal(ctx, "completing task "+ref.String(), &cronoqv1.CompleteRequest{
		Ref: &cronoqv1.TaskRef{Id: ref.ID, Key: ref.Key}, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: output,
	})
}

// Fail ends an external task that waits for its completion as failed,
// with reason; otherwise as Complete.
func (c *Client) Fail(ctx context.Context, ref TaskRef, reason string) (*Task, error) {
	return c.completeExternal(ctx, "failing task "+ref.String(), &cronoqv1.CompleteRequest{
		Ref: &cronoqv1.TaskRef{Id: ref.ID, Key: ref.Key}, Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT, Message: reason,
	})
}

func (c *Client) completeExternal(ctx context.Context, what string, req *cronoqv1.CompleteRequest) (*Task, error) {
	resp, err := unary(ctx, c, what, once, req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CompleteRequest]) (*connect.Response[cronoqv1.CompleteResponse], error) {
			return ep.tasks.Complete
		})
	if err != nil {
		return nil, err
	}
	if resp.GetTask() == nil {
		return nil, fmt.Errorf("%s: node answered without the task", what)
	}
	return taskFromProto(resp.GetTask()), nil
}
