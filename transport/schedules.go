package transport

import (
	"context"

	"connectrpc.com/connect"

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
		for _, sc := range r.Schedules() {
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
		paused, err := h.s.node.PauseSchedule(ctx, name, req.Msg.GetPaused())
		if err != nil {
			return nil, err
		}
		return &cronoqv1.PauseScheduleResponse{Name: name, Paused: paused}, nil
	}, func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
		return ep.schedules.Pause
	})
}
