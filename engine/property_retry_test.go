package engine_test

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// The failed-task operations of the determinism property: an operator's
// retry and a cancel by filter, checked against the durable state when
// they were sent.

// retryTask retries a recent task, ended or not.
func (s *sim) retryTask() {
	if len(s.ids) == 0 {
		return
	}
	id := s.recent(s.ids, 30)
	// A third of the time a recent task that blocks its lane, a third one
	// that may be retried, if a recent one does or may.
	if k := s.pick(3); k < 2 {
		for i := len(s.ids) - 1; i >= 0 && i >= len(s.ids)-200; i-- {
			if t, ok := s.a.Get(s.ids[i]); ok && (k == 0 && t.BlocksLane || k == 1 && fsm.Retryable(t.Status)) {
				id = t.ID
				break
			}
		}
	}
	before, existed := s.a.Get(id)
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		var ve *core.VersionError
		if errors.As(r.Err, &ve) {
			s.check(s.logVersion < 6, "retry refused for the log version %d: %v", s.logVersion, r.Err)
			return
		}
		if !existed {
			s.check(errors.Is(r.Err, core.ErrNotFound), "retry of %s, which does not exist: %v", id, r.Err)
			return
		}
		if r.Err != nil {
			var ie *core.InvalidError
			switch {
			case errors.Is(r.Err, core.ErrNotRetryable):
				s.check(!fsm.Retryable(before.Status), "retry of %s (%s) refused as not retryable", id, before.Status)
				s.covered(covRetryRefused)
			default:
				s.check(errors.As(r.Err, &ie) || errors.Is(r.Err, core.ErrOverloaded) || errors.Is(r.Err, core.ErrShuttingDown),
					"retry of %s (%s): %v", id, before.Status, r.Err)
			}
			return
		}
		s.check(fsm.Retryable(before.Status) && before.Workflow() == "", "retried %s, which was %s in workflow %q", id, before.Status, before.Workflow())
		after, ok := s.a.Get(id)
		s.check(ok, "retried task %s is gone", id)
		s.check(after.AttemptBase == before.Attempt && !after.BlocksLane && after.FinishedAt == 0,
			"retried task %s: base %d (attempts %d), blocks lane %t, finished %d", id, after.AttemptBase, before.Attempt, after.BlocksLane, after.FinishedAt)
		s.check(len(after.Attempts) >= len(before.Attempts), "retried task %s lost its history", id)
		s.covered(covRetried)
		if before.BlocksLane {
			s.covered(covRetriedLane)
		}
	})
	s.logf("req %d retry %s", req, id)
	s.core.Retry(s.now, req, core.TaskRef{ID: id})
}

// cancelMany cancels what a random filter selects, as the engine does: the
// ids the core matches (checked against the durable state), then one batch
// of them.
func (s *sim) cancelMany() {
	live := []fsm.Status{fsm.StatusQueued, fsm.StatusRunning, fsm.StatusRetrying, fsm.StatusScheduled, fsm.StatusBlocked, fsm.StatusParked}
	f := core.TaskFilter{Pool: fmt.Sprintf("p%d", s.pick(3)), Statuses: live[:1+s.pick(len(live))]}
	if s.pick(3) == 0 {
		f.Kinds = []string{[]string{"email", "resize", "report"}[s.pick(3)]}
	}
	ids, err := s.core.Matching(f)
	s.check(err == nil, "matching %+v: %v", f, err)
	s.check(slices.IsSorted(ids), "matching ids out of order: %v", ids)
	matches := func(t *fsm.Task) bool {
		return t.Pool == f.Pool && slices.Contains(f.Statuses, t.Status) && (len(f.Kinds) == 0 || slices.Contains(f.Kinds, t.Kind))
	}
	want := 0
	s.a.View().EachTask(func(t *fsm.Task) bool {
		if matches(t) {
			want++
			s.check(slices.Contains(ids, t.ID), "matching %+v missed %s", f, t.ID)
		}
		return true
	})
	s.check(want == len(ids), "matching %+v: %d ids, %d tasks match", f, len(ids), want)
	if len(ids) == 0 {
		return
	}
	chunk := ids[:1+s.pick(len(ids))]
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		s.check(r.Err == nil, "cancel of %d tasks: %v", len(chunk), r.Err)
		// A cancel may end later tasks of the batch first (dependents of a
		// cancelled one): they are skipped, and not counted.
		v, _ := r.Value.(core.CancelledMany)
		s.check(v.Cancelled >= 1 && v.Cancelled <= len(chunk), "cancelled %d of %d matching tasks", v.Cancelled, len(chunk))
		for _, id := range chunk {
			t, ok := s.a.Get(id)
			s.check(ok && t.Status == fsm.StatusCancelled, "task %s not cancelled by filter", id)
		}
		s.covered(covCancelledMany)
	})
	s.logf("req %d cancel-many %+v: %d of %d", req, f, len(chunk), len(ids))
	s.core.CancelTasks(s.now, req, chunk, f)
}
