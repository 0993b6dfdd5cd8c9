package transport

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

type taskService struct{ s *Server }

// engineCall runs fn with the engine of this node, which must be the ready
// leader (a *cluster.NotLeaderError otherwise, so that route forwards).
func (s *Server) engineCall(fn func(eng *engine.Engine) error) error {
	eng, err := s.node.Engine()
	if err != nil {
		return err
	}
	s.follow(eng)
	return fn(eng)
}

func (t *taskService) Submit(ctx context.Context, req *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
	s := t.s
	spec, err := specFromProto(req.Msg.GetSpec())
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, write, req, func(ctx context.Context) (*cronoqv1.SubmitResponse, error) {
		var out *cronoqv1.SubmitResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			subs, _, err := eng.Submit(ctx, core.SubmitOne, []core.Spec{spec})
			if err != nil {
				return err
			}
			if len(subs) != 1 {
				return fmt.Errorf("engine answered %d results for one spec", len(subs))
			}
			out = &cronoqv1.SubmitResponse{Result: &cronoqv1.Submitted{Id: subs[0].ID, Duplicate: subs[0].Duplicate}}
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
		return ep.tasks.Submit
	})
}

func (t *taskService) SubmitBatch(ctx context.Context, req *connect.Request[cronoqv1.SubmitBatchRequest]) (*connect.Response[cronoqv1.SubmitBatchResponse], error) {
	s := t.s
	specs, err := specsFromProto(req.Msg.GetSpecs())
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, write, req, func(ctx context.Context) (*cronoqv1.SubmitBatchResponse, error) {
		var out *cronoqv1.SubmitBatchResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			subs, _, err := eng.Submit(ctx, core.SubmitBatch, specs)
			if err != nil {
				return err
			}
			if len(subs) != len(specs) {
				return fmt.Errorf("engine answered %d results for %d specs", len(subs), len(specs))
			}
			out = &cronoqv1.SubmitBatchResponse{Results: make([]*cronoqv1.Submitted, len(subs))}
			for i, sub := range subs {
				out.Results[i] = &cronoqv1.Submitted{Id: sub.ID, Duplicate: sub.Duplicate}
			}
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitBatchRequest]) (*connect.Response[cronoqv1.SubmitBatchResponse], error) {
		return ep.tasks.SubmitBatch
	})
}

func (t *taskService) EnqueueMany(ctx context.Context, req *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
	s := t.s
	n := len(req.Msg.GetSpecs())
	if n == 0 {
		return nil, apierr.Invalid("specs", "at least one spec is required")
	}
	// Items refused at the edge keep their place in the results; the
	// others go to the engine together.
	edgeErrs := make([]error, n)
	var specs []core.Spec
	var index []int
	for i, p := range req.Msg.GetSpecs() {
		spec, err := specFromProto(p)
		if err != nil {
			edgeErrs[i] = err
			continue
		}
		specs = append(specs, spec)
		index = append(index, i)
	}
	results := func(subs []core.Submitted, errs []error) *cronoqv1.EnqueueManyResponse {
		out := &cronoqv1.EnqueueManyResponse{Results: make([]*cronoqv1.ItemResult, n)}
		for i, err := range edgeErrs {
			if err != nil {
				code, msg := s.itemError(err)
				out.Results[i] = &cronoqv1.ItemResult{Error: msg, Code: code}
			}
		}
		for j, i := range index {
			if j < len(errs) && errs[j] != nil {
				code, msg := s.itemError(errs[j])
				out.Results[i] = &cronoqv1.ItemResult{Error: msg, Code: code}
				continue
			}
			out.Results[i] = &cronoqv1.ItemResult{Submitted: &cronoqv1.Submitted{Id: subs[j].ID, Duplicate: subs[j].Duplicate}}
		}
		return out
	}
	if len(specs) == 0 {
		// Nothing for the engine: answered here, leader or not.
		return connect.NewResponse(results(nil, nil)), nil
	}
	return route(ctx, s, write, req, func(ctx context.Context) (*cronoqv1.EnqueueManyResponse, error) {
		var out *cronoqv1.EnqueueManyResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			subs, errs, err := eng.Submit(ctx, core.SubmitMany, specs)
			if err != nil {
				return err
			}
			if len(subs) != len(specs) {
				return fmt.Errorf("engine answered %d results for %d specs", len(subs), len(specs))
			}
			out = results(subs, errs)
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
		return ep.tasks.EnqueueMany
	})
}

// lookup finds a task by id or key in st.
func lookup(st *fsm.State, ref core.TaskRef) (*fsm.Task, error) {
	var (
		t  *fsm.Task
		ok bool
	)
	if ref.ID != "" {
		t, ok = st.Get(ref.ID)
	} else {
		t, ok = st.GetByKey(ref.Key)
	}
	if !ok {
		return nil, fmt.Errorf("task %s: %w", ref, core.ErrNotFound)
	}
	return t, nil
}

// consistentMeta is the read metadata of a linearizable read served by
// this node (the leader).
func (s *Server) consistentMeta(st *fsm.State) *cronoqv1.ReadMeta {
	return &cronoqv1.ReadMeta{Node: s.node.ID(), KnownLeader: true, AppliedIndex: st.AppliedIndex()}
}

// staleState is this node's replica with the metadata of a stale read.
func (s *Server) staleState() (*fsm.State, *cronoqv1.ReadMeta) {
	st, meta := s.node.StaleState()
	lc := int64(-1)
	if meta.LastContact >= 0 {
		lc = meta.LastContact.Milliseconds()
	}
	return st, &cronoqv1.ReadMeta{
		Stale:         true,
		Node:          s.node.ID(),
		KnownLeader:   meta.KnownLeader,
		LastContactMs: lc,
		AppliedIndex:  meta.AppliedIndex,
	}
}

func (t *taskService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
	s := t.s
	ref, err := refFromProto(req.Msg.GetRef())
	if err != nil {
		return nil, s.apiError(err)
	}
	if req.Msg.GetStale() || bugFollowerRead {
		if s.stopping() {
			return nil, apierr.ShuttingDown()
		}
		st, meta := s.staleState()
		task, err := lookup(st, ref)
		if err != nil {
			return nil, s.apiError(err)
		}
		return connect.NewResponse(&cronoqv1.GetResponse{Task: taskToProto(task), Meta: meta}), nil
	}
	return route(ctx, s, read, req, func(ctx context.Context) (*cronoqv1.GetResponse, error) {
		st, err := s.node.ConsistentState(ctx)
		if err != nil {
			return nil, err
		}
		task, err := lookup(st, ref)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.GetResponse{Task: taskToProto(task), Meta: s.consistentMeta(st)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
		return ep.tasks.Get
	})
}

// Wait holds until the task is terminal (and durable) or the requested
// timeout passes, and answers with the task as it then is.
func (t *taskService) Wait(ctx context.Context, req *connect.Request[cronoqv1.WaitRequest]) (*connect.Response[cronoqv1.WaitResponse], error) {
	s := t.s
	ref, err := refFromProto(req.Msg.GetRef())
	if err != nil {
		return nil, s.apiError(err)
	}
	hold, err := msDuration("timeout", req.Msg.GetTimeoutMs())
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, read, req, func(ctx context.Context) (*cronoqv1.WaitResponse, error) {
		var out *cronoqv1.WaitResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			wctx, cancel := ctx, context.CancelFunc(func() {})
			if hold > 0 {
				wctx, cancel = context.WithTimeout(ctx, hold)
			}
			defer cancel()
			id, err := eng.Wait(wctx, ref)
			switch {
			case err == nil:
				ref = core.TaskRef{ID: id}
			case wctx.Err() != nil && ctx.Err() == nil:
				// The hold ended first: the task as it is.
			default:
				return err
			}
			st, _ := s.node.StaleState()
			task, err := lookup(st, ref)
			if err != nil {
				return err
			}
			out = &cronoqv1.WaitResponse{Task: taskToProto(task)}
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.WaitRequest]) (*connect.Response[cronoqv1.WaitResponse], error) {
		return ep.tasks.Wait
	})
}

func (t *taskService) Cancel(ctx context.Context, req *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
	s := t.s
	ref, err := refFromProto(req.Msg.GetRef())
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, write, req, func(ctx context.Context) (*cronoqv1.CancelResponse, error) {
		var out *cronoqv1.CancelResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			id, cancelled, err := eng.Cancel(ctx, ref)
			if err != nil {
				return err
			}
			out = &cronoqv1.CancelResponse{Id: id, Cancelled: cancelled}
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
		return ep.tasks.Cancel
	})
}

// listQuery validates a list request.
func listQuery(m *cronoqv1.ListRequest) (fsm.ListQuery, error) {
	q := fsm.ListQuery{Pools: m.GetPools(), After: m.GetAfter(), Limit: int(m.GetLimit())}
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

// list runs q on st, cutting the page short when its tasks get large.
func list(st *fsm.State, q fsm.ListQuery) *cronoqv1.ListResponse {
	tasks, next := st.List(q)
	out := &cronoqv1.ListResponse{Next: next}
	size := 0
	for i, task := range tasks {
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
	s := t.s
	q, err := listQuery(req.Msg)
	if err != nil {
		return nil, s.apiError(err)
	}
	if req.Msg.GetStale() {
		if s.stopping() {
			return nil, apierr.ShuttingDown()
		}
		st, meta := s.staleState()
		out := list(st, q)
		out.Meta = meta
		return connect.NewResponse(out), nil
	}
	return route(ctx, s, read, req, func(ctx context.Context) (*cronoqv1.ListResponse, error) {
		st, err := s.node.ConsistentState(ctx)
		if err != nil {
			return nil, err
		}
		out := list(st, q)
		out.Meta = s.consistentMeta(st)
		return out, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListRequest]) (*connect.Response[cronoqv1.ListResponse], error) {
		return ep.tasks.List
	})
}

func counts(st *fsm.State) []*cronoqv1.PoolCounts {
	var out []*cronoqv1.PoolCounts
	for _, pc := range st.Counts() {
		by := make(map[string]int64, len(fsm.AllStatuses))
		for _, status := range fsm.AllStatuses {
			by[status.String()] = pc.ByStatus[status]
		}
		out = append(out, &cronoqv1.PoolCounts{Pool: pc.Pool, ByStatus: by})
	}
	return out
}

func (t *taskService) Counts(ctx context.Context, req *connect.Request[cronoqv1.CountsRequest]) (*connect.Response[cronoqv1.CountsResponse], error) {
	s := t.s
	if req.Msg.GetStale() {
		if s.stopping() {
			return nil, apierr.ShuttingDown()
		}
		st, meta := s.staleState()
		return connect.NewResponse(&cronoqv1.CountsResponse{Pools: counts(st), Meta: meta}), nil
	}
	return route(ctx, s, read, req, func(ctx context.Context) (*cronoqv1.CountsResponse, error) {
		st, err := s.node.ConsistentState(ctx)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.CountsResponse{Pools: counts(st), Meta: s.consistentMeta(st)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CountsRequest]) (*connect.Response[cronoqv1.CountsResponse], error) {
		return ep.tasks.Counts
	})
}

// eventsBuffer is the room of one Events subscriber before it lags.
const eventsBuffer = 1024

// Events streams the status events of the leader's engine (leader only: a
// follower answers not_leader with the leader's address). A marker event
// with lagged set tells the subscriber it missed events.
func (t *taskService) Events(ctx context.Context, req *connect.Request[cronoqv1.EventsRequest], stream *connect.ServerStream[cronoqv1.Event]) error {
	s := t.s
	if err := s.awaitLeader(ctx); err != nil {
		return err
	}
	eng, err := s.node.Engine()
	if err != nil {
		return s.apiError(err)
	}
	pools := make(map[string]bool, len(req.Msg.GetPools()))
	for _, p := range req.Msg.GetPools() {
		pools[p] = true
	}
	sub := eng.Subscribe(eventsBuffer)
	defer sub.Close()
	// Headers go out at once, so the subscriber knows it is subscribed.
	if err := stream.Send(nil); err != nil {
		return nil
	}
	var dropped uint64
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				if s.stopping() {
					return apierr.ShuttingDown()
				}
				// The engine stopped: this node no longer leads.
				return s.apiError(engine.ErrStopped)
			}
			if d := sub.Dropped(); d > dropped {
				dropped = d
				if err := stream.Send(&cronoqv1.Event{Lagged: true}); err != nil {
					return nil
				}
			}
			if len(pools) > 0 && !pools[ev.Pool] {
				continue
			}
			if err := stream.Send(eventToProto(ev)); err != nil {
				return nil
			}
		case <-ctx.Done():
			if s.stopping() {
				return apierr.ShuttingDown()
			}
			return nil
		}
	}
}
