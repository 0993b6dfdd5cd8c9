package transport

import (
	"context"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/fsm"
)

type scheduleService struct{ s *Server }

func (h *scheduleService) Add(ctx context.Context, req *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
	s := h.s
	spec, err := scheduleFromProto(req.Msg.GetSchedule())
	if err != nil {
		return nil, s.apiError(err)
	}
	return route(ctx, s, write, req, func(ctx context.Context) (*cronoqv1.AddScheduleResponse, error) {
		var out *cronoqv1.AddScheduleResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			next, err := eng.AddSchedule(ctx, spec)
			if err != nil {
				return err
			}
			out = &cronoqv1.AddScheduleResponse{Name: spec.Name, NextFire: fsm.Nanos(next)}
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
		return ep.schedules.Add
	})
}

func schedules(st *fsm.State) *cronoqv1.ListSchedulesResponse {
	out := &cronoqv1.ListSchedulesResponse{}
	for _, sc := range st.Schedules() {
		out.Schedules = append(out.Schedules, scheduleToProto(sc))
	}
	return out
}

func (h *scheduleService) List(ctx context.Context, req *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
	s := h.s
	if req.Msg.GetStale() {
		if s.stopping() {
			return nil, apierr.ShuttingDown()
		}
		st, _ := s.staleState()
		return connect.NewResponse(schedules(st)), nil
	}
	return route(ctx, s, read, req, func(ctx context.Context) (*cronoqv1.ListSchedulesResponse, error) {
		st, err := s.node.ConsistentState(ctx)
		if err != nil {
			return nil, err
		}
		return schedules(st), nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
		return ep.schedules.List
	})
}

func (h *scheduleService) Remove(ctx context.Context, req *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
	s := h.s
	name := req.Msg.GetName()
	if name == "" {
		return nil, apierr.Invalid("name", "must not be empty")
	}
	return route(ctx, s, write, req, func(ctx context.Context) (*cronoqv1.RemoveScheduleResponse, error) {
		var out *cronoqv1.RemoveScheduleResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			removed, err := eng.RemoveSchedule(ctx, name)
			if err != nil {
				return err
			}
			out = &cronoqv1.RemoveScheduleResponse{Name: name, Removed: removed}
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
		return ep.schedules.Remove
	})
}

func (h *scheduleService) Pause(ctx context.Context, req *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
	s := h.s
	name := req.Msg.GetName()
	if name == "" {
		return nil, apierr.Invalid("name", "must not be empty")
	}
	return route(ctx, s, write, req, func(ctx context.Context) (*cronoqv1.PauseScheduleResponse, error) {
		var out *cronoqv1.PauseScheduleResponse
		err := s.engineCall(func(eng *engine.Engine) error {
			paused, err := eng.PauseSchedule(ctx, name, req.Msg.GetPaused())
			if err != nil {
				return err
			}
			out = &cronoqv1.PauseScheduleResponse{Name: name, Paused: paused}
			return nil
		})
		return out, err
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
		return ep.schedules.Pause
	})
}
