package transport

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
)

// Retry puts a task that ended failed, expired or cancelled back in the
// queue, and answers with the task as stored once that is durable.
func (t *taskService) Retry(ctx context.Context, req *connect.Request[cronoqv1.RetryRequest]) (*connect.Response[cronoqv1.RetryResponse], error) {
	s := t.s
	ref := refFromProto(req.Msg.GetRef())
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.RetryResponse, error) {
		if err := s.needTaskPool(ctx, acl.Write, ref); err != nil {
			return nil, err
		}
		r, err := s.node.Retry(ctx, ref)
		if err != nil {
			return nil, err
		}
		// The call returned once the retry was applied on this node (the
		// leader): its own replica has it.
		rd, _ := s.node.StaleRead()
		task, err := lookup(rd, cluster.TaskRef{ID: r.ID})
		if err != nil {
			return nil, fmt.Errorf("reading task %s after its retry: %w", r.ID, err)
		}
		return &cronoqv1.RetryResponse{Task: taskToProto(task)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RetryRequest]) (*connect.Response[cronoqv1.RetryResponse], error) {
		return ep.tasks.Retry
	})
}

// CancelMany cancels the live tasks of a pool that have one of the
// statuses (and one of the kinds), in bounded batches. It needs write on
// the pool.
func (t *taskService) CancelMany(ctx context.Context, req *connect.Request[cronoqv1.CancelManyRequest]) (*connect.Response[cronoqv1.CancelManyResponse], error) {
	s := t.s
	f, err := taskFilterFromProto(req.Msg)
	if err != nil {
		return nil, s.apiError(err)
	}
	if f.Pool == "" {
		return nil, s.apiError(invalidf("pool", "a pool is required"))
	}
	if err := needPool(ctx, acl.Write, f.Pool); err != nil {
		return nil, err
	}
	return route(ctx, s, writeCall, req, func(ctx context.Context) (*cronoqv1.CancelManyResponse, error) {
		n, err := s.node.CancelMany(ctx, f)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.CancelManyResponse{Cancelled: int64(n)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CancelManyRequest]) (*connect.Response[cronoqv1.CancelManyResponse], error) {
		return ep.tasks.CancelMany
	})
}
