package client

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// AddSchedule creates or replaces the recurring schedule s.Name and returns
// its next fire instant. It is idempotent by name and retried like a submit.
// The schedule's task spec keeps the key it has (usually none: each fire
// makes its own task).
func (c *Client) AddSchedule(ctx context.Context, s Schedule) (next time.Time, err error) {
	what := "adding schedule " + s.Name
	ps, err := scheduleToProto(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := unary(ctx, c, what, idempotent, &cronoqv1.AddScheduleRequest{Schedule: ps},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
			return ep.schedules.Add
		})
	if err != nil {
		return time.Time{}, err
	}
	return timeFromProto(resp.GetNextFire()), nil
}

// ListSchedules lists the recurring schedules.
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	resp, err := unary(ctx, c, "listing schedules", read, &cronoqv1.ListSchedulesRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
			return ep.schedules.List
		})
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(resp.GetSchedules()))
	for _, s := range resp.GetSchedules() {
		out = append(out, scheduleFromProto(s))
	}
	return out, nil
}

// RemoveSchedule removes a schedule; removed is false when there was none of
// that name (also when an earlier attempt of this call removed it).
func (c *Client) RemoveSchedule(ctx context.Context, name string) (removed bool, err error) {
	resp, err := unary(ctx, c, "removing schedule "+name, idempotent, &cronoqv1.RemoveScheduleRequest{Name: name},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
			return ep.schedules.Remove
		})
	if err != nil {
		return false, err
	}
	return resp.GetRemoved(), nil
}

// PauseSchedule pauses (paused=true) or resumes a schedule and returns its
// paused state.
func (c *Client) PauseSchedule(ctx context.Context, name string, paused bool) (bool, error) {
	what := "resuming schedule " + name
	if paused {
		what = "pausing schedule " + name
	}
	resp, err := unary(ctx, c, what, idempotent, &cronoqv1.PauseScheduleRequest{Name: name, Paused: paused},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
			return ep.schedules.Pause
		})
	if err != nil {
		return false, err
	}
	return resp.GetPaused(), nil
}
