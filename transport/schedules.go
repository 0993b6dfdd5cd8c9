package transport

import (
	"context"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/fsm"
)

type scheduleService struct{ s *Server }

func (h *scheduleService) Add(ctx context.Context, req *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.AddScheduleResponse, error) {
		spec, err := scheduleFromProto(req.Msg.GetSchedule())
		if err != nil {
			return nil, err
		}
		// A schedule submits at every fire, as the caller who added it.
		who := principal(ctx)
		for _, pool := range schedulePools(spec.Task, spec.Steps) {
			if err := needPool(ctx, acl.Submit, pool); err != nil {
				return nil, err
			}
		}
		if len(spec.Steps) == 0 {
			spec.Task.Principal = who
		}
		for i := range spec.Steps {
			spec.Steps[i].Principal = who
		}
		next, err := h.s.node.AddSchedule(ctx, spec)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.AddScheduleResponse{Name: spec.Name, NextFire: instantToProto(next)}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
		return ep.schedules.Add
	})
}

func (h *scheduleService) List(ctx context.Context, req *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
	return read(ctx, h.s, req.Msg.GetStale(), req, func(r fsm.Reader, _ *cronoqv1.ReadMeta) (*cronoqv1.ListSchedulesResponse, error) {
		out := &cronoqv1.ListSchedulesResponse{}
		a := authorizer(ctx)
		for _, sc := range r.Schedules() {
			if !a.Management() && !readsAll(a, schedulePools(sc.Template, sc.Steps)) {
				continue
			}
			out.Schedules = append(out.Schedules, scheduleToProto(sc))
		}
		return out, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
		return ep.schedules.List
	})
}

func (h *scheduleService) Remove(ctx context.Context, req *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
	name := req.Msg.GetName()
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.RemoveScheduleResponse, error) {
		if err := h.s.needSchedulePools(ctx, name); err != nil {
			return nil, err
		}
		removed, err := h.s.node.RemoveSchedule(ctx, name)
		if err != nil {
			return nil, err
		}
		return &cronoqv1.RemoveScheduleResponse{Name: name, Removed: removed}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
		return ep.schedules.Remove
	})
}

func (h *scheduleService) Pause(ctx context.Context, req *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
	name := req.Msg.GetName()
	return route(ctx, h.s, writeCall, req, func(ctx context.Context) (*cronoqv1.PauseScheduleResponse, error) {
		if err := h.s.needSchedulePools(ctx, name); err != nil {
			return nil, err
		}
		paused, err := h.s.node.PauseSchedule(ctx, name, req.Msg.GetPaused())
		if err != nil {
			return nil, err
		}
		return &cronoqv1.PauseScheduleResponse{Name: name, Paused: paused}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
		return ep.schedules.Pause
	})
}

// schedulePools lists the pools a schedule submits to: its task's, or its
// workflow steps'.
func schedulePools(task fsm.Template, steps []fsm.StepTemplate) []string {
	if len(steps) == 0 {
		return []string{task.Pool}
	}
	out := make([]string, 0, len(steps))
	for _, st := range steps {
		out = append(out, st.Pool)
	}
	return out
}

func readsAll(a *acl.Authorizer, pools []string) bool {
	for _, p := range pools {
		if !a.Pool(p, acl.Read) {
			return false
		}
	}
	return true
}

// needSchedulePools refuses the call of ctx unless its caller may write
// every pool of the schedule named name (read from this node's replica; a
// schedule it does not find is left to the operation).
func (s *Server) needSchedulePools(ctx context.Context, name string) error {
	if authorizer(ctx).Management() {
		return nil
	}
	r, _ := s.node.StaleRead()
	sc, ok := r.Schedule(name)
	if !ok {
		return nil
	}
	return needPool(ctx, acl.Write, schedulePools(sc.Template, sc.Steps)...)
}
