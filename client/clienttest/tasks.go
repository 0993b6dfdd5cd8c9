package clienttest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

type taskService struct{ n *Node }

func (s *taskService) Submit(ctx context.Context, req *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.SubmitResponse, error) {
		subs, _, err := s.n.c.admitLocked(submitOne, []*cronoqv1.TaskSpec{req.Msg.GetSpec()})
		if err != nil {
			return nil, err
		}
		return &cronoqv1.SubmitResponse{Result: subs[0]}, nil
	})
}

func (s *taskService) SubmitBatch(ctx context.Context, req *connect.Request[cronoqv1.SubmitBatchRequest]) (*connect.Response[cronoqv1.SubmitBatchResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.SubmitBatchResponse, error) {
		if len(req.Msg.GetSpecs()) == 0 {
			return nil, invalid("specs", "at least one spec is required")
		}
		subs, _, err := s.n.c.admitLocked(submitBatch, req.Msg.GetSpecs())
		if err != nil {
			return nil, err
		}
		return &cronoqv1.SubmitBatchResponse{Results: subs}, nil
	})
}

func (s *taskService) EnqueueMany(ctx context.Context, req *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.EnqueueManyResponse, error) {
		if len(req.Msg.GetSpecs()) == 0 {
			return nil, invalid("specs", "at least one spec is required")
		}
		subs, errs, err := s.n.c.admitLocked(submitMany, req.Msg.GetSpecs())
		if err != nil {
			return nil, err
		}
		out := &cronoqv1.EnqueueManyResponse{Results: make([]*cronoqv1.ItemResult, len(subs))}
		for i := range subs {
			if errs[i] != nil {
				code, msg := itemError(errs[i])
				out.Results[i] = &cronoqv1.ItemResult{Error: msg, Code: code}
				continue
			}
			out.Results[i] = &cronoqv1.ItemResult{Submitted: subs[i]}
		}
		return out, nil
	})
}

// lookupLocked finds the task of a reference.
func (c *Cluster) lookupLocked(ref *cronoqv1.TaskRef) (*task, error) {
	id, key := ref.GetId(), ref.GetKey()
	switch {
	case id != "" && key != "":
		return nil, invalid("ref", "give an id or a key, not both")
	case id == "" && key == "":
		return nil, invalid("ref", "an id or a key is required")
	}
	t := c.tasks[id]
	what := "task " + id
	if id == "" {
		t = c.byKey[key]
		what = fmt.Sprintf("task with key %q", key)
	}
	if t == nil {
		return nil, apierr.NotFound(what + " not found")
	}
	return t, nil
}

// readMetaLocked is the metadata of a read served as sv says.
func (c *Cluster) readMetaLocked(sv *served, stale bool) *cronoqv1.ReadMeta {
	n := sv.node
	meta := &cronoqv1.ReadMeta{Stale: stale, Node: n.id, KnownLeader: c.leader >= 0, AppliedIndex: c.applied}
	if !stale {
		return meta
	}
	lc := n.lastContact
	if c.leader >= 0 && c.nodes[c.leader] == n {
		lc = 0
	}
	switch {
	case lc < 0:
	case lc == 0:
		// 0 would read as "never heard from the leader": round up.
		meta.LastContact = durationpb.New(1)
	default:
		meta.LastContact = durationpb.New(lc)
	}
	return meta
}

func (s *taskService) Get(ctx context.Context, req *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
	mode := leaderCall
	if req.Msg.GetStale() {
		mode = anyNode
	}
	return unary(ctx, s.n, req, mode, func(sv *served) (*cronoqv1.GetResponse, error) {
		c := s.n.c
		t, err := c.lookupLocked(req.Msg.GetRef())
		if err != nil {
			return nil, err
		}
		return &cronoqv1.GetResponse{Task: cloneTask(t.p), Meta: c.readMetaLocked(sv, req.Msg.GetStale())}, nil
	})
}

// Wait holds until the task ends or the requested timeout passes, and
// answers with the task as it then is.
func (s *taskService) Wait(ctx context.Context, req *connect.Request[cronoqv1.WaitRequest]) (*connect.Response[cronoqv1.WaitResponse], error) {
	c := s.n.c
	return longPoll(ctx, s.n, req, req.Msg.GetTimeout(), func() (*cronoqv1.WaitResponse, bool, error) {
		t, err := c.lookupLocked(req.Msg.GetRef())
		if err != nil {
			return nil, false, err
		}
		return &cronoqv1.WaitResponse{Task: cloneTask(t.p)}, terminal(t.p.GetStatus()), nil
	})
}

func (s *taskService) Cancel(ctx context.Context, req *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.CancelResponse, error) {
		c := s.n.c
		t, err := c.lookupLocked(req.Msg.GetRef())
		if err != nil {
			return nil, err
		}
		return &cronoqv1.CancelResponse{Id: t.p.GetId(), Cancelled: c.cancelLocked(t, reasonCancelAbort)}, nil
	})
}

// Delete removes an ended task now, as a real node does before the end of
// its retention: its record and its key go. A live task (cancel it
// first), a member of a workflow (it goes with its workflow) and a task a
// live task depends on are refused as invalid, naming the id.
func (s *taskService) Delete(ctx context.Context, req *connect.Request[cronoqv1.DeleteRequest]) (*connect.Response[cronoqv1.DeleteResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.DeleteResponse, error) {
		c := s.n.c
		t, err := c.lookupLocked(req.Msg.GetRef())
		if err != nil {
			return nil, err
		}
		if err := c.deleteLocked(t); err != nil {
			return nil, err
		}
		return &cronoqv1.DeleteResponse{Id: t.p.GetId(), Deleted: true}, nil
	})
}

// deleteLocked removes an ended task that is no member of a workflow and
// that no live task waits for.
func (c *Cluster) deleteLocked(t *task) error {
	id := t.p.GetId()
	switch {
	case !terminal(t.p.GetStatus()):
		return invalid("id", "task %s is %s: only an ended task can be deleted (cancel it first)", id, statusName(t.p.GetStatus()))
	case t.wf != nil:
		return invalid("id", "task %s is a member of workflow %s, and is deleted with it", id, t.wf.p.GetId())
	}
	for _, o := range c.tasks {
		if !terminal(o.p.GetStatus()) && slices.Contains(o.p.GetDependsOn(), id) {
			return invalid("id", "task %s has live dependents", id)
		}
	}
	delete(c.tasks, id)
	if k := t.p.GetKey(); k != "" && c.byKey[k] == t {
		delete(c.byKey, k)
	}
	c.dequeueLocked(t)
	delete(c.timed, t)
	c.applied++
	return nil
}

// Complete ends an external task that waits for its completion, and
// answers with the task as it then is.
func (s *taskService) Complete(ctx context.Context, req *connect.Request[cronoqv1.CompleteRequest]) (*connect.Response[cronoqv1.CompleteResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.CompleteResponse, error) {
		c := s.n.c
		t, err := c.lookupLocked(req.Msg.GetRef())
		if err != nil {
			return nil, err
		}
		if err := c.completeExternalLocked(t, req.Msg); err != nil {
			return nil, err
		}
		return &cronoqv1.CompleteResponse{Task: cloneTask(t.p)}, nil
	})
}

func (s *taskService) List(ctx context.Context, req *connect.Request[cronoqv1.ListRequest]) (*connect.Response[cronoqv1.ListResponse], error) {
	mode := leaderCall
	if req.Msg.GetStale() {
		mode = anyNode
	}
	return unary(ctx, s.n, req, mode, func(sv *served) (*cronoqv1.ListResponse, error) {
		c := s.n.c
		m := req.Msg
		limit := int(m.GetLimit())
		switch {
		case limit < 0:
			return nil, invalid("limit", "must not be negative")
		case limit == 0:
			limit = DefaultListLimit
		}
		limit = min(limit, c.cfg.maxListLimit)
		for _, st := range m.GetStatuses() {
			if st <= cronoqv1.Status_STATUS_UNSPECIFIED || st > cronoqv1.Status_STATUS_PARKED {
				return nil, invalid("statuses", "unknown status %d", int32(st))
			}
		}
		// The cursor is exclusive: with newest_first it means "ids before
		// it", else "ids after it".
		after, desc := m.GetAfter(), m.GetNewestFirst()
		var ids []string
		for id, t := range c.tasks {
			if after != "" && (desc && id >= after || !desc && id <= after) {
				continue
			}
			if len(m.GetPools()) > 0 && !slices.Contains(m.GetPools(), t.pool()) {
				continue
			}
			if len(m.GetStatuses()) > 0 && !slices.Contains(m.GetStatuses(), t.p.GetStatus()) {
				continue
			}
			if len(m.GetKinds()) > 0 && !slices.Contains(m.GetKinds(), t.p.GetTemplate().GetKind()) {
				continue
			}
			ids = append(ids, id)
		}
		slices.Sort(ids)
		if desc {
			slices.Reverse(ids)
		}
		out := &cronoqv1.ListResponse{Meta: c.readMetaLocked(sv, m.GetStale())}
		if len(ids) > limit {
			ids = ids[:limit]
			out.Next = ids[limit-1]
		}
		size := 0
		for i, id := range ids {
			t := cloneTask(c.tasks[id].p)
			if size += proto.Size(t); i > 0 && size > c.cfg.maxPageBytes {
				out.Next = ids[i-1]
				break
			}
			out.Tasks = append(out.Tasks, t)
		}
		return out, nil
	})
}

func (s *taskService) Counts(ctx context.Context, req *connect.Request[cronoqv1.CountsRequest]) (*connect.Response[cronoqv1.CountsResponse], error) {
	mode := leaderCall
	if req.Msg.GetStale() {
		mode = anyNode
	}
	return unary(ctx, s.n, req, mode, func(sv *served) (*cronoqv1.CountsResponse, error) {
		c := s.n.c
		by := map[string]map[cronoqv1.Status]int64{}
		for _, t := range c.tasks {
			if by[t.pool()] == nil {
				by[t.pool()] = map[cronoqv1.Status]int64{}
			}
			by[t.pool()][t.p.GetStatus()]++
		}
		out := &cronoqv1.CountsResponse{Meta: c.readMetaLocked(sv, req.Msg.GetStale())}
		for _, pool := range slices.Sorted(maps.Keys(by)) {
			pc := &cronoqv1.PoolCounts{Pool: pool, ByStatus: make(map[string]int64, len(statusNames))}
			for _, sn := range statusNames {
				pc.ByStatus[sn.name] = by[pool][sn.s]
			}
			out.Pools = append(out.Pools, pc)
		}
		return out, nil
	})
}

// Events streams the status events of the tasks of the pools asked for
// (all when none, and then the workflow events too), from the leader only. Without a script it carries the
// cluster's own events; a subscriber that falls behind gets a lagged
// marker where events were dropped.
func (s *taskService) Events(ctx context.Context, req *connect.Request[cronoqv1.EventsRequest], stream *connect.ServerStream[cronoqv1.Event]) error {
	c := s.n.c
	if _, err := s.n.begin(ctx, cronoqv1connect.TaskServiceEventsProcedure, req.Msg, leaderStream); err != nil {
		return err
	}
	n := c.calls[cronoqv1connect.TaskServiceEventsProcedure]
	script := c.eventScript
	sub := &subscriber{ch: make(chan *cronoqv1.Event, eventBuffer), end: make(chan struct{})}
	if len(req.Msg.GetPools()) > 0 {
		sub.pools = map[string]bool{}
		for _, p := range req.Msg.GetPools() {
			sub.pools[p] = true
		}
	}
	c.subs[sub] = struct{}{}
	c.settleLocked()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.subs, sub)
		c.notifyLocked()
		c.mu.Unlock()
	}()
	// Headers go out at once, so that the subscriber knows it is subscribed.
	if err := stream.Send(nil); err != nil {
		return nil
	}
	if script != nil {
		if err := script(n, stream.Send); err != nil {
			return err
		}
	}
	for {
		select {
		case ev := <-sub.ch:
			c.mu.Lock()
			lagged := sub.lagged
			sub.lagged = false
			c.mu.Unlock()
			if lagged {
				if err := stream.Send(&cronoqv1.Event{Lagged: true}); err != nil {
					return nil
				}
			}
			if err := stream.Send(ev); err != nil {
				return nil
			}
		case <-sub.end:
			c.mu.Lock()
			err := sub.err
			c.mu.Unlock()
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// statusName is the name of a status in messages.
func statusName(s cronoqv1.Status) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_"))
}
