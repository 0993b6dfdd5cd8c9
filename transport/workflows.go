package transport

import (
	"context"
	"fmt"
	"sort"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

type workflowService struct{ s *Server }

// lookupWorkflow finds a workflow by id or key in r.
func lookupWorkflow(r fsm.Reader, ref cluster.WorkflowRef) (*fsm.Workflow, error) {
	switch {
	case ref.ID != "" && ref.Key != "":
		return nil, invalidf("ref", "give an id or a key, not both")
	case ref.ID == "" && ref.Key == "":
		return nil, invalidf("ref", "an id or a key is required")
	}
	var (
		w  *fsm.Workflow
		ok bool
	)
	if ref.ID != "" {
		w, ok = r.Workflow(ref.ID)
	} else {
		w, ok = r.WorkflowByKey(ref.Key)
	}
	if !ok {
		return nil, fmt.Errorf("workflow %s: %w", ref, cluster.ErrNotFound)
	}
	return w, nil
}

// maxWorkflowReads bounds the reads of a workflow that keeps changing
// while its members are read (its record changes twice in its life: it
// starts, and it ends).
const maxWorkflowReads = 4

// memberPage selects a page of a workflow's members: those after After, at
// most Limit of them (0: no limit).
type memberPage struct {
	After string
	Limit int
}

func memberPageFromProto(after string, limit int32) (memberPage, error) {
	if limit < 0 {
		return memberPage{}, invalidf("tasks_limit", "must not be negative")
	}
	return memberPage{After: after, Limit: int(limit)}, nil
}

// workflowWithMembers reads a workflow and a page of its members from r,
// and returns the cursor of the next page ("" after the last). Its record
// is read again after the members, and the whole read again when it
// changed meanwhile, so that the members agree with the status answered
// (none still live in a workflow answered as ended, say).
func workflowWithMembers(r fsm.Reader, ref cluster.WorkflowRef, page memberPage) (*cronoqv1.Workflow, string, error) {
	w, err := lookupWorkflow(r, ref)
	if err != nil {
		return nil, "", err
	}
	ref = cluster.WorkflowRef{ID: w.ID}
	for n := 0; ; n++ {
		members, next := pageMembers(r.WorkflowTasks(w.ID), page)
		again, err := lookupWorkflow(r, ref)
		if err != nil {
			return nil, "", err
		}
		if again == w || n == maxWorkflowReads {
			return workflowToProto(again, members), next, nil
		}
		w = again
	}
}

// pageMembers cuts the page of members (in id order) that page selects,
// also cutting it short when its tasks get large; next is the cursor of
// the following page, "" after the last.
func pageMembers(members []*fsm.Task, page memberPage) ([]*fsm.Task, string) {
	i := sort.Search(len(members), func(i int) bool { return members[i].ID > page.After })
	members = members[i:]
	size := 0
	for j, t := range members {
		size += taskSize(t)
		if j > 0 && (size > maxListBytes || (page.Limit > 0 && j == page.Limit)) {
			return members[:j], members[j-1].ID
		}
	}
	return members, ""
}

func (h *workflowService) Submit(ctx context.Context, req *connect.Request[cronoqv1.SubmitWorkflowRequest]) (*connect.Response[cronoqv1.SubmitWorkflowResponse], error) {
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.SubmitWorkflowResponse, error) {
		spec, err := workflowSpecFromProto(req.Msg.GetSpec())
		if err != nil {
			return nil, err
		}
		who := principal(ctx)
		for i := range spec.Steps {
			if err := needPool(ctx, acl.Submit, spec.Steps[i].Pool); err != nil {
				return nil, err
			}
			spec.Steps[i].Principal = who
		}
		res, err := h.s.node.SubmitWorkflow(ctx, spec)
		if err != nil {
			return nil, err
		}
		out := &cronoqv1.SubmitWorkflowResponse{Id: res.ID, Duplicate: res.Duplicate, Tasks: make([]*cronoqv1.StepTask, len(res.Tasks))}
		for i, st := range res.Tasks {
			out.Tasks[i] = &cronoqv1.StepTask{Step: st.Step, Id: st.ID}
		}
		return out, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitWorkflowRequest]) (*connect.Response[cronoqv1.SubmitWorkflowResponse], error) {
		return ep.workflows.Submit
	})
}

func (h *workflowService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetWorkflowRequest]) (*connect.Response[cronoqv1.GetWorkflowResponse], error) {
	ref := workflowRefFromProto(req.Msg.GetRef())
	page, err := memberPageFromProto(req.Msg.GetTasksAfter(), req.Msg.GetTasksLimit())
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return read(ctx, h.s, req.Msg.GetStale(), req, func(r fsm.Reader, meta *cronoqv1.ReadMeta) (*cronoqv1.GetWorkflowResponse, error) {
		if err := needWorkflowPools(ctx, r, ref, acl.Read); err != nil {
			return nil, err
		}
		w, next, err := workflowWithMembers(r, ref, page)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.GetWorkflowResponse{Workflow: w, Meta: meta, TasksNext: next}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetWorkflowRequest]) (*connect.Response[cronoqv1.GetWorkflowResponse], error) {
		return ep.workflows.Get
	})
}

// Wait holds until the workflow has ended (and that is durable) or the
// requested timeout passes, and answers with the workflow as it then is,
// with its members.
func (h *workflowService) Wait(ctx context.Context, req *connect.Request[cronoqv1.WaitWorkflowRequest]) (*connect.Response[cronoqv1.WaitWorkflowResponse], error) {
	s := h.s
	ref := workflowRefFromProto(req.Msg.GetRef())
	hold, err := durationFromProto("timeout", req.Msg.GetTimeout())
	if err == nil && hold < 0 {
		err = invalidf("timeout", "must not be negative")
	}
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, readCall, req, func(ctx context.Context) (*cronoqv1.WaitWorkflowResponse, error) {
		pre, _ := s.node.StaleRead() // the leader's replica
		if err := needWorkflowPools(ctx, pre, ref, acl.Read); err != nil {
			return nil, err
		}
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if hold > 0 {
			wctx, cancel = context.WithTimeout(ctx, hold)
		}
		defer cancel()
		at := ref
		id, err := s.node.WaitWorkflow(wctx, ref)
		switch {
		case err == nil:
			at = cluster.WorkflowRef{ID: id}
		case wctx.Err() != nil && ctx.Err() == nil:
			// The hold ended first: the workflow as it is.
		default:
			return nil, err
		}
		r, _ := s.node.StaleRead() // the leader's own replica: it has the end
		w, next, err := workflowWithMembers(r, at, memberPage{})
		if err != nil {
			return nil, err
		}
		return &cronoqv1.WaitWorkflowResponse{Workflow: w, TasksNext: next}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.WaitWorkflowRequest]) (*connect.Response[cronoqv1.WaitWorkflowResponse], error) {
		return ep.workflows.Wait
	})
}

func (h *workflowService) Cancel(ctx context.Context, req *connect.Request[cronoqv1.CancelWorkflowRequest]) (*connect.Response[cronoqv1.CancelWorkflowResponse], error) {
	ref := workflowRefFromProto(req.Msg.GetRef())
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.CancelWorkflowResponse, error) {
		r, _ := h.s.node.StaleRead()
		if err := needWorkflowPools(ctx, r, ref, acl.Write); err != nil {
			return nil, err
		}
		c, err := h.s.node.CancelWorkflow(ctx, ref)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.CancelWorkflowResponse{Id: c.ID, Cancelled: int32(c.Cancelled)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CancelWorkflowRequest]) (*connect.Response[cronoqv1.CancelWorkflowResponse], error) {
		return ep.workflows.Cancel
	})
}

// workflowQuery reads a workflow list request, with the page size rules of
// the task list.
func workflowQuery(m *cronoqv1.ListWorkflowsRequest) (fsm.WorkflowQuery, error) {
	q := fsm.WorkflowQuery{After: m.GetAfter(), Limit: int(m.GetLimit())}
	switch {
	case q.Limit < 0:
		return q, invalidf("limit", "must not be negative")
	case q.Limit == 0:
		q.Limit = defaultListLimit
	case q.Limit > maxListLimit:
		q.Limit = maxListLimit
	}
	for _, p := range m.GetStatuses() {
		st, err := workflowStatusFromProto(p)
		if err != nil {
			return q, err
		}
		q.Statuses = append(q.Statuses, st)
	}
	return q, nil
}

// List lists workflows, without their members, in id order.
func (h *workflowService) List(ctx context.Context, req *connect.Request[cronoqv1.ListWorkflowsRequest]) (*connect.Response[cronoqv1.ListWorkflowsResponse], error) {
	q, err := workflowQuery(req.Msg)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return read(ctx, h.s, req.Msg.GetStale(), req, func(r fsm.Reader, meta *cronoqv1.ReadMeta) (*cronoqv1.ListWorkflowsResponse, error) {
		ws, next := r.ListWorkflows(q)
		out := &cronoqv1.ListWorkflowsResponse{Next: next, Meta: meta, Workflows: make([]*cronoqv1.Workflow, 0, len(ws))}
		for _, w := range ws {
			if needWorkflowPools(ctx, r, cluster.WorkflowRef{ID: w.ID}, acl.Read) != nil {
				continue // left out: the caller may not read one of its pools
			}
			out.Workflows = append(out.Workflows, workflowToProto(w, nil))
		}
		return out, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListWorkflowsRequest]) (*connect.Response[cronoqv1.ListWorkflowsResponse], error) {
		return ep.workflows.List
	})
}

// needWorkflowPools refuses the call of ctx unless its caller may act at
// level on every pool the members of the workflow ref names use. A
// workflow it does not find is left to the operation (not_found).
func needWorkflowPools(ctx context.Context, r fsm.Reader, ref cluster.WorkflowRef, level acl.Level) error {
	a := authorizer(ctx)
	if a.Management() {
		return nil
	}
	w, err := lookupWorkflow(r, ref)
	if err != nil {
		return nil
	}
	seen := make(map[string]bool)
	for _, t := range r.WorkflowTasks(w.ID) {
		if seen[t.Pool] {
			continue
		}
		seen[t.Pool] = true
		if !a.Pool(t.Pool, level) {
			return permissionDenied(a.Denied("%s on pool %q (a pool of workflow %s)", level, t.Pool, w.ID))
		}
	}
	return nil
}
