package transport

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

type taskService struct{ s *Server }

// submit is the one path of the three submit forms: it converts the specs,
// hands the ones that convert to the leader in mode, and answers one result
// per spec. A spec refused before the engine keeps its place: with
// SubmitMany it is that item's error, otherwise the whole request's.
func (s *Server) submit(ctx context.Context, mode cluster.SubmitMode, ps []*cronoqv1.TaskSpec) ([]*cronoqv1.ItemResult, error) {
	results := make([]*cronoqv1.ItemResult, len(ps))
	specs := make([]cluster.Spec, 0, len(ps))
	index := make([]int, 0, len(ps)) // specs[j] is request item index[j]
	who := principal(ctx)
	for i, p := range ps {
		spec, err := specFromProto(p)
		if err == nil {
			err = needPool(ctx, acl.Submit, spec.Pool)
			spec.Principal = who
		}
		if err != nil {
			if mode != cluster.SubmitMany {
				if mode == cluster.SubmitBatch {
					err = prefixed(fmt.Sprintf("specs[%d].", i), err)
				}
				return nil, err
			}
			code, msg := s.itemError(err)
			results[i] = &cronoqv1.ItemResult{Error: msg, Code: code}
			continue
		}
		specs = append(specs, spec)
		index = append(index, i)
	}
	if len(specs) == 0 && len(ps) > 0 {
		// Every item refused here: nothing for the leader.
		return results, nil
	}
	tr, traced := s.tr.startSubmits(mode, specs)
	if tr != nil {
		ctx = tr.observe(ctx)
	}
	res, err := s.node.Submit(ctx, mode, specs)
	tr.endSubmits(traced, res, err)
	if err != nil {
		return nil, err
	}
	if len(res.Tasks) != len(specs) {
		return nil, fmt.Errorf("engine answered %d results for %d specs", len(res.Tasks), len(specs))
	}
	for j, i := range index {
		if j < len(res.Errs) && res.Errs[j] != nil {
			code, msg := s.itemError(res.Errs[j])
			results[i] = &cronoqv1.ItemResult{Error: msg, Code: code}
			continue
		}
		sub := res.Tasks[j]
		results[i] = &cronoqv1.ItemResult{Submitted: &cronoqv1.Submitted{Id: sub.ID, Duplicate: sub.Duplicate}}
	}
	return results, nil
}

func (t *taskService) Submit(ctx context.Context, req *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
	return route(ctx, t.s, writeCall, req, func(ctx context.Context) (*cronoqv1.SubmitResponse, error) {
		out, err := t.s.submit(ctx, cluster.SubmitOne, []*cronoqv1.TaskSpec{req.Msg.GetSpec()})
		if err != nil {
			return nil, err
		}
		return &cronoqv1.SubmitResponse{Result: out[0].GetSubmitted()}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
		return ep.tasks.Submit
	})
}

func (t *taskService) SubmitBatch(ctx context.Context, req *connect.Request[cronoqv1.SubmitBatchRequest]) (*connect.Response[cronoqv1.SubmitBatchResponse], error) {
	return route(ctx, t.s, writeCall, req, func(ctx context.Context) (*cronoqv1.SubmitBatchResponse, error) {
		out, err := t.s.submit(ctx, cluster.SubmitBatch, req.Msg.GetSpecs())
		if err != nil {
			return nil, err
		}
		resp := &cronoqv1.SubmitBatchResponse{Results: make([]*cronoqv1.Submitted, len(out))}
		for i, r := range out {
			resp.Results[i] = r.GetSubmitted()
		}
		return resp, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitBatchRequest]) (*connect.Response[cronoqv1.SubmitBatchResponse], error) {
		return ep.tasks.SubmitBatch
	})
}

func (t *taskService) EnqueueMany(ctx context.Context, req *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
	return route(ctx, t.s, writeCall, req, func(ctx context.Context) (*cronoqv1.EnqueueManyResponse, error) {
		out, err := t.s.submit(ctx, cluster.SubmitMany, req.Msg.GetSpecs())
		if err != nil {
			return nil, err
		}
		return &cronoqv1.EnqueueManyResponse{Results: out}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
		return ep.tasks.EnqueueMany
	})
}

// lookup finds a task by id or key in r.
func lookup(r fsm.Reader, ref cluster.TaskRef) (*fsm.Task, error) {
	if err := ref.Check(); err != nil {
		return nil, err
	}
	var (
		t  *fsm.Task
		ok bool
	)
	if ref.ID != "" {
		t, ok = r.Get(ref.ID)
	} else {
		t, ok = r.GetByKey(ref.Key)
	}
	if !ok {
		return nil, fmt.Errorf("task %s: %w", ref, cluster.ErrNotFound)
	}
	return t, nil
}

// consistentMeta is the read metadata of a linearizable read served by
// this node (the leader).
func (s *Server) consistentMeta(r fsm.Reader) *cronoqv1.ReadMeta {
	return &cronoqv1.ReadMeta{Node: s.node.ID(), KnownLeader: true, AppliedIndex: r.AppliedIndex()}
}

// staleRead is this node's replica with the metadata of a stale read.
func (s *Server) staleRead() (fsm.Reader, *cronoqv1.ReadMeta) {
	r, st := s.node.StaleRead()
	meta := &cronoqv1.ReadMeta{
		Stale:        true,
		Node:         s.node.ID(),
		KnownLeader:  st.KnownLeader,
		AppliedIndex: st.AppliedIndex,
	}
	if st.LastContact >= 0 {
		meta.LastContact = durationToProto(st.LastContact)
		if meta.LastContact == nil {
			meta.LastContact = durationToProto(1) // 0 would read as "never": round up
		}
	}
	return r, meta
}

// read serves a read: from this node's replica when stale is asked (or the
// follower-read fault is built in), else linearizably through the leader.
// serve builds the answer from the replica and its metadata.
func read[Req, Res any](ctx context.Context, s *Server, stale bool, req *connect.Request[Req],
	serve func(r fsm.Reader, meta *cronoqv1.ReadMeta) (*Res, error),
	remote func(*endpoint) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	if stale {
		if s.stopping() {
			return nil, apierr.ShuttingDown()
		}
		r, meta := s.staleRead()
		res, err := serve(r, meta)
		if err != nil {
			return nil, s.apiError(err)
		}
		return connect.NewResponse(res), nil
	}
	return route(ctx, s, readCall, req, func(ctx context.Context) (*Res, error) {
		r, err := s.node.ConsistentRead(ctx)
		if err != nil {
			return nil, err
		}
		return serve(r, s.consistentMeta(r))
	}, remote)
}

func (t *taskService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
	ref := refFromProto(req.Msg.GetRef())
	return read(ctx, t.s, req.Msg.GetStale() || bugFollowerRead, req, func(r fsm.Reader, meta *cronoqv1.ReadMeta) (*cronoqv1.GetResponse, error) {
		task, err := lookup(r, ref)
		if err != nil {
			return nil, err
		}
		if err := needPool(ctx, acl.Read, task.Pool); err != nil {
			return nil, err
		}
		return &cronoqv1.GetResponse{Task: taskToProto(task), Meta: meta}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
		return ep.tasks.Get
	})
}

// Wait holds until the task is terminal (and durable) or the requested
// timeout passes, and answers with the task as it then is.
func (t *taskService) Wait(ctx context.Context, req *connect.Request[cronoqv1.WaitRequest]) (*connect.Response[cronoqv1.WaitResponse], error) {
	s := t.s
	ref := refFromProto(req.Msg.GetRef())
	hold, err := durationFromProto("timeout", req.Msg.GetTimeout())
	if err == nil && hold < 0 {
		err = invalidf("timeout", "must not be negative")
	}
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, readCall, req, func(ctx context.Context) (*cronoqv1.WaitResponse, error) {
		if err := s.needTaskPool(ctx, acl.Read, ref); err != nil {
			return nil, err
		}
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if hold > 0 {
			wctx, cancel = context.WithTimeout(ctx, hold)
		}
		defer cancel()
		id, err := s.node.Wait(wctx, ref)
		switch {
		case err == nil:
			ref = cluster.TaskRef{ID: id}
		case wctx.Err() != nil && ctx.Err() == nil:
			// The hold ended first: the task as it is.
		default:
			return nil, err
		}
		r, _ := s.node.StaleRead() // the leader's own replica: it has the end
		task, err := lookup(r, ref)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.WaitResponse{Task: taskToProto(task)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.WaitRequest]) (*connect.Response[cronoqv1.WaitResponse], error) {
		return ep.tasks.Wait
	})
}

func (t *taskService) Cancel(ctx context.Context, req *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
	ref := refFromProto(req.Msg.GetRef())
	return route(ctx, t.s, writeCall, req, func(ctx context.Context) (*cronoqv1.CancelResponse, error) {
		if err := t.s.needTaskPool(ctx, acl.Write, ref); err != nil {
			return nil, err
		}
		c, err := t.s.node.Cancel(ctx, ref)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.CancelResponse{Id: c.ID, Cancelled: c.Cancelled, LastLease: c.LastLease}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
		return ep.tasks.Cancel
	})
}

// Complete ends an external task that waits for its completion: a success
// with its output, or a permanent failure with its message. It answers
// with the task as stored once its end is durable.
func (t *taskService) Complete(ctx context.Context, req *connect.Request[cronoqv1.CompleteRequest]) (*connect.Response[cronoqv1.CompleteResponse], error) {
	s := t.s
	ref := refFromProto(req.Msg.GetRef())
	out, err := externalOutcomeFromProto(req.Msg)
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.CompleteResponse, error) {
		if err := s.needTaskPool(ctx, acl.Work, ref); err != nil {
			return nil, err
		}
		id, err := s.node.CompleteExternal(ctx, ref, out)
		if err != nil {
			return nil, err
		}
		// The call returned once the end was applied on this node (the
		// leader): its own replica has it. A consistent read could fail
		// now that the end is done, and the call would be routed again.
		r, _ := s.node.StaleRead()
		task, err := lookup(r, cluster.TaskRef{ID: id})
		if err != nil {
			return nil, fmt.Errorf("reading task %s after its completion: %w", id, err)
		}
		return &cronoqv1.CompleteResponse{Task: taskToProto(task)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CompleteRequest]) (*connect.Response[cronoqv1.CompleteResponse], error) {
		return ep.tasks.Complete
	})
}

// listQuery reads a list request.
func listQuery(m *cronoqv1.ListRequest) (fsm.ListQuery, error) {
	q := fsm.ListQuery{Pools: m.GetPools(), Kinds: m.GetKinds(), After: m.GetAfter(), Limit: int(m.GetLimit()), Desc: m.GetNewestFirst()}
	switch {
	case q.Limit < 0:
		return q, invalidf("limit", "must not be negative")
	case q.Limit == 0:
		q.Limit = defaultListLimit
	case q.Limit > maxListLimit:
		q.Limit = maxListLimit
	}
	for _, p := range m.GetStatuses() {
		st, err := statusFromProto(p)
		if err != nil {
			return q, err
		}
		q.Statuses = append(q.Statuses, st)
	}
	return q, nil
}

// list runs q on r, cutting the page short when its tasks get large. Tasks
// of pools a cannot read are left out of the page (which may then be
// short, or empty with a next cursor).
func list(r fsm.Reader, q fsm.ListQuery, meta *cronoqv1.ReadMeta, a *acl.Authorizer) *cronoqv1.ListResponse {
	tasks, next := r.List(q)
	out := &cronoqv1.ListResponse{Next: next, Meta: meta}
	size := 0
	for i, task := range tasks {
		if !a.Pool(task.Pool, acl.Read) {
			continue
		}
		size += taskSize(task)
		if i > 0 && size > maxListBytes {
			out.Next = tasks[i-1].ID
			break
		}
		out.Tasks = append(out.Tasks, taskToProto(task))
	}
	return out
}

func (t *taskService) List(ctx context.Context, req *connect.Request[cronoqv1.ListRequest]) (*connect.Response[cronoqv1.ListResponse], error) {
	q, err := listQuery(req.Msg)
	if err != nil {
		return nil, t.s.apiError(err)
	}
	if err := needPool(ctx, acl.Read, q.Pools...); err != nil {
		return nil, err
	}
	return read(ctx, t.s, req.Msg.GetStale(), req, func(r fsm.Reader, meta *cronoqv1.ReadMeta) (*cronoqv1.ListResponse, error) {
		return list(r, q, meta, authorizer(ctx)), nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListRequest]) (*connect.Response[cronoqv1.ListResponse], error) {
		return ep.tasks.List
	})
}

func counts(r fsm.Reader, a *acl.Authorizer) []*cronoqv1.PoolCounts {
	var out []*cronoqv1.PoolCounts
	for _, pc := range r.Counts() {
		if !a.Pool(pc.Pool, acl.Read) {
			continue
		}
		by := make(map[string]int64, len(fsm.AllStatuses))
		for _, status := range fsm.AllStatuses {
			by[status.String()] = pc.ByStatus[status]
		}
		out = append(out, &cronoqv1.PoolCounts{Pool: pc.Pool, ByStatus: by})
	}
	return out
}

func (t *taskService) Counts(ctx context.Context, req *connect.Request[cronoqv1.CountsRequest]) (*connect.Response[cronoqv1.CountsResponse], error) {
	return read(ctx, t.s, req.Msg.GetStale(), req, func(r fsm.Reader, meta *cronoqv1.ReadMeta) (*cronoqv1.CountsResponse, error) {
		return &cronoqv1.CountsResponse{Pools: counts(r, authorizer(ctx)), Meta: meta}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CountsRequest]) (*connect.Response[cronoqv1.CountsResponse], error) {
		return ep.tasks.Counts
	})
}

// eventsBatch bounds the events one stream takes from the node's history
// at a time.
const eventsBatch = 256

// Events streams the status events of this node's replica, on any node: an
// event goes out once its transition is applied here (it is durable then),
// in log order, with its cursor. A request with after_cursor resumes after
// it, as far as the node's history of events reaches back (see
// cluster.EventHub). A marker event with lagged set tells the subscriber
// that it missed events: it fell behind the history, resumed from beyond
// it, or the replica was replaced by a snapshot. A subscriber that names
// pools gets the task events of those pools only; the events of workflows
// (which have no pool) go to the subscribers that name none.
func (t *taskService) Events(ctx context.Context, req *connect.Request[cronoqv1.EventsRequest], stream *connect.ServerStream[cronoqv1.Event]) error {
	s := t.s
	if err := needPool(ctx, acl.Read, req.Msg.GetPools()...); err != nil {
		return err
	}
	a := authorizer(ctx)
	if s.stopping() {
		return apierr.ShuttingDown()
	}
	sub := s.node.Subscribe(req.Msg.GetAfterCursor())
	defer sub.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.baseCtx, cancel)()
	pools := make(map[string]bool, len(req.Msg.GetPools()))
	for _, p := range req.Msg.GetPools() {
		pools[p] = true
	}
	// Headers go out at once, so the subscriber knows it is subscribed.
	if err := stream.Send(nil); err != nil {
		return nil
	}
	buf := make([]cluster.Event, 0, eventsBatch)
	for {
		evs, gap, err := sub.Next(ctx, buf)
		if err != nil {
			if s.stopping() {
				return apierr.ShuttingDown()
			}
			if ctx.Err() != nil {
				return nil // the subscriber went away
			}
			return s.apiError(err)
		}
		if gap {
			s.m.EventStreamLagged()
			if err := stream.Send(&cronoqv1.Event{Lagged: true}); err != nil {
				return nil
			}
		}
		for _, ev := range evs {
			if !wanted(pools, ev) || !mayRead(a, ev) {
				continue
			}
			if err := stream.Send(eventToProto(ev)); err != nil {
				return nil
			}
		}
	}
}

// mayRead reports whether a may see ev: a task event of a pool it reads,
// a workflow event when it reads every pool.
func mayRead(a *acl.Authorizer, ev cluster.Event) bool {
	if ev.TaskID == "" {
		return a.Pool("*", acl.Read)
	}
	return a.Pool(ev.Pool, acl.Read)
}

// needTaskPool refuses the call of ctx unless its caller may act at level
// on the pool of the task ref names (read from this node's replica). A
// task it does not find is left to the operation, which answers
// not_found.
func (s *Server) needTaskPool(ctx context.Context, level acl.Level, ref cluster.TaskRef) error {
	if authorizer(ctx).Management() {
		return nil
	}
	r, _ := s.node.StaleRead()
	task, err := lookup(r, ref)
	if err != nil {
		return nil
	}
	return needPool(ctx, level, task.Pool)
}

// wanted reports whether a subscriber to pools (none: every pool) gets ev.
func wanted(pools map[string]bool, ev cluster.Event) bool {
	if len(pools) == 0 {
		return true
	}
	return ev.TaskID != "" && pools[ev.Pool]
}

// Delete removes an ended task now, rather than at the end of its
// retention.
func (t *taskService) Delete(ctx context.Context, req *connect.Request[cronoqv1.DeleteRequest]) (*connect.Response[cronoqv1.DeleteResponse], error) {
	ref := refFromProto(req.Msg.GetRef())
	return route(ctx, t.s, writeCall, req, func(ctx context.Context) (*cronoqv1.DeleteResponse, error) {
		if err := t.s.needTaskPool(ctx, acl.Write, ref); err != nil {
			return nil, err
		}
		d, err := t.s.node.Delete(ctx, ref)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.DeleteResponse{Id: d.ID, Deleted: d.Deleted}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.DeleteRequest]) (*connect.Response[cronoqv1.DeleteResponse], error) {
		return ep.tasks.Delete
	})
}
