package clienttest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// schedule is a stored recurring schedule.
type schedule struct {
	rec    *cronoqv1.Schedule // as stored: template unresolved, no next fire
	expr   *cronExpr
	cursor time.Time // the last fire, or when the schedule was made or resumed
	next   time.Time // the next fire; zero while paused
}

// maxCatchUp bounds the due slots counted when a schedule catches up.
const maxCatchUp = 100000

func (s *schedule) arm() {
	s.next = time.Time{}
	if !s.rec.GetPaused() {
		s.next = s.expr.next(s.cursor)
	}
}

// proto returns the schedule as List shows it.
func (s *schedule) proto() *cronoqv1.Schedule {
	out := proto.Clone(s.rec).(*cronoqv1.Schedule)
	out.NextFire = ts(s.next)
	return out
}

// checkSchedule validates a schedule as a real cluster does.
func (c *Cluster) checkSchedule(p *cronoqv1.Schedule) (*cronoqv1.Schedule, *cronExpr, error) {
	if p.GetName() == "" {
		return nil, nil, invalid("name", "must not be empty")
	}
	expr, err := parseCron(p.GetCron(), p.GetTz())
	if err != nil {
		if errors.Is(err, errUnknownZone) {
			return nil, nil, invalid("tz", "%v", err)
		}
		return nil, nil, invalid("cron", "%v", err)
	}
	switch {
	case p.GetOverlap() != cronoqv1.Overlap_OVERLAP_SKIP && p.GetOverlap() != cronoqv1.Overlap_OVERLAP_ALLOW:
		return nil, nil, invalid("overlap", "unknown overlap policy %d", int32(p.GetOverlap()))
	case p.GetCatchUp() < cronoqv1.CatchUp_CATCH_UP_ONCE || p.GetCatchUp() > cronoqv1.CatchUp_CATCH_UP_ALL:
		return nil, nil, invalid("catch_up", "unknown catch-up policy %d", int32(p.GetCatchUp()))
	}
	tpl, err := c.checkTemplate(p.GetTask())
	if err != nil {
		return nil, nil, prefixed("task.", err)
	}
	return &cronoqv1.Schedule{
		Name:         p.GetName(),
		Cron:         p.GetCron(),
		Tz:           p.GetTz(),
		Task:         tpl,
		Overlap:      p.GetOverlap(),
		CatchUp:      p.GetCatchUp(),
		CatchUpLimit: p.GetCatchUpLimit(),
		Paused:       p.GetPaused(),
	}, expr, nil
}

// fireDueLocked fires the schedules whose next fire has come. A schedule
// that missed several fires (a clock moved by hand) fires once, for the
// latest, and counts the others as skipped, whatever its catch-up policy.
func (c *Cluster) fireDueLocked(now time.Time) bool {
	fired := false
	for _, name := range slices.Sorted(maps.Keys(c.schedules)) {
		s := c.schedules[name]
		if s.next.IsZero() || s.next.After(now) {
			continue
		}
		slot, skipped := s.next, uint64(0)
		for n := 0; n < maxCatchUp; n++ {
			nx := s.expr.next(slot)
			if nx.IsZero() || nx.After(now) {
				break
			}
			slot = nx
			skipped++
		}
		s.rec.Skipped += skipped
		c.fireLocked(s, slot)
		fired = true
	}
	return fired
}

// fireLocked fires s for slot: a task from its template, unless the
// overlap policy skips it. It returns the task's id ("" when skipped).
func (c *Cluster) fireLocked(s *schedule, slot time.Time) string {
	s.cursor = slot
	s.rec.LastFire = ts(slot)
	defer s.arm()
	c.applied++
	if s.rec.GetOverlap() == cronoqv1.Overlap_OVERLAP_SKIP {
		if last := c.tasks[s.rec.GetLastTask()]; last != nil && !terminal(last.p.GetStatus()) {
			s.rec.Skipped++
			return ""
		}
	}
	key := s.rec.GetName() + "@" + slot.UTC().Format(time.RFC3339)
	if c.byKey[key] != nil || c.fitsLocked(s.rec.GetTask().GetPool(), 1) != nil {
		s.rec.Skipped++
		return ""
	}
	rec := &cronoqv1.Task{
		Template:    c.resolve(s.rec.GetTask()),
		Key:         key,
		SubmittedAt: ts(c.now()),
		RunAt:       ts(slot),
		UpdatedAt:   ts(c.now()),
		Schedule:    s.rec.GetName(),
		Slot:        ts(slot),
	}
	t := c.insertLocked(rec)
	s.rec.Fires++
	s.rec.LastTask = t.p.GetId()
	return t.p.GetId()
}

// ---------------------------------------------------------------------------
// ScheduleService

type scheduleService struct{ n *Node }

func (h *scheduleService) Add(ctx context.Context, req *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
	return unary(ctx, h.n, req, leaderCall, func(*served) (*cronoqv1.AddScheduleResponse, error) {
		c := h.n.c
		rec, expr, err := c.checkSchedule(req.Msg.GetSchedule())
		if err != nil {
			return nil, err
		}
		s := &schedule{rec: rec, expr: expr, cursor: c.now()}
		if old := c.schedules[rec.GetName()]; old != nil {
			rec.LastTask, rec.Fires, rec.Skipped, rec.LastFire = old.rec.LastTask, old.rec.Fires, old.rec.Skipped, old.rec.LastFire
		}
		s.arm()
		c.schedules[rec.GetName()] = s
		c.applied++
		return &cronoqv1.AddScheduleResponse{Name: rec.GetName(), NextFire: ts(s.next)}, nil
	})
}

func (h *scheduleService) List(ctx context.Context, req *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
	mode := leaderCall
	if req.Msg.GetStale() {
		mode = anyNode
	}
	return unary(ctx, h.n, req, mode, func(*served) (*cronoqv1.ListSchedulesResponse, error) {
		c := h.n.c
		out := &cronoqv1.ListSchedulesResponse{}
		for _, name := range slices.Sorted(maps.Keys(c.schedules)) {
			out.Schedules = append(out.Schedules, c.schedules[name].proto())
		}
		return out, nil
	})
}

func (h *scheduleService) Remove(ctx context.Context, req *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
	return unary(ctx, h.n, req, leaderCall, func(*served) (*cronoqv1.RemoveScheduleResponse, error) {
		c := h.n.c
		name := req.Msg.GetName()
		_, ok := c.schedules[name]
		if ok {
			delete(c.schedules, name)
			c.applied++
		}
		return &cronoqv1.RemoveScheduleResponse{Name: name, Removed: ok}, nil
	})
}

func (h *scheduleService) Pause(ctx context.Context, req *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
	return unary(ctx, h.n, req, leaderCall, func(*served) (*cronoqv1.PauseScheduleResponse, error) {
		c := h.n.c
		name, paused := req.Msg.GetName(), req.Msg.GetPaused()
		s := c.schedules[name]
		if s == nil {
			return nil, apierr.NotFound("no schedule " + name)
		}
		if s.rec.GetPaused() != paused {
			s.rec.Paused = paused
			if !paused {
				// A resume does not rewind: the fires missed while paused are
				// skipped.
				now := c.now()
				for n := 0; n < maxCatchUp; n++ {
					nx := s.expr.next(s.cursor)
					if nx.IsZero() || nx.After(now) {
						break
					}
					s.cursor = nx
					s.rec.Skipped++
				}
			}
			s.arm()
			c.applied++
		}
		return &cronoqv1.PauseScheduleResponse{Name: name, Paused: paused}, nil
	})
}
