package engine_test

import (
	"errors"
	"fmt"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// Flow control in the determinism property: ordering and concurrency keys
// on random specs, pool settings changed at random, deletes; and the
// invariants they promise.

// randomKeys gives sp flow-control keys now and then.
func (s *sim) randomKeys(sp *core.Spec) {
	var k fsm.Keys
	if s.pick(3) == 0 {
		k.Ordering = fmt.Sprintf("o%d", s.pick(3))
	}
	if s.pick(4) == 0 {
		k.Concurrency = fmt.Sprintf("c%d", s.pick(2))
	}
	if !k.IsZero() {
		sp.Keys = &k
	}
}

// setPool changes a pool's settings at random.
func (s *sim) setPool() {
	ch := core.PoolChange{Pool: fmt.Sprintf("p%d", s.pick(3))}
	switch s.pick(9) {
	case 8:
		// The global bounds.
		n := 6 + s.pick(30)
		ch.Pool, ch.MaxPending = core.GlobalPool, &n
	case 0:
		n := 1 + s.pick(3)
		ch.ConcurrencyLimit = &n
	case 1:
		r, b := []float64{0, 0.5, 2, 10}[s.pick(4)], s.pick(4)
		ch.Rate, ch.Burst = &r, &b
	case 2:
		ch.KindRates = map[string]core.Rate{"email": {Per: []float64{0, 1}[s.pick(2)], Burst: 1}}
	case 3:
		o := fsm.OrderingPolicy(s.pick(2))
		ch.Ordering = &o
	case 4:
		p := s.pick(3) != 0 // paused mostly briefly: resumed twice as often
		p = !p
		ch.Paused = &p
	case 5:
		o := fsm.Overflow(s.pick(3))
		n := 4 + s.pick(20)
		ch.Overflow, ch.MaxPending = &o, &n
	case 6:
		n := s.pick(3)
		ch.MaxRunning = &n
	case 7:
		n := -1 // invalid
		ch.MaxRunning = &n
	}
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		var ve *core.VersionError
		if errors.As(r.Err, &ve) {
			s.check(s.logVersion < 4, "pool settings refused for the log version %d: %v", s.logVersion, r.Err)
			s.covered(covVersionRefused)
			return
		}
		if ch.MaxRunning != nil && *ch.MaxRunning < 0 {
			var ie *core.InvalidError
			s.check(errors.As(r.Err, &ie), "a negative cap was not refused: %v", r.Err)
			return
		}
		info, ok := r.Value.(core.PoolInfo)
		s.check(r.Err == nil && ok && info.Replicated, "set-pool %s: %+v %v", ch.Pool, r.Value, r.Err)
		if ch.Pool == core.GlobalPool {
			s.check(info.Config.Bounds.MaxPending == *ch.MaxPending, "global bound %d, set %d", info.Config.Bounds.MaxPending, *ch.MaxPending)
			s.covered(covGlobalSet)
		}
		rec, found := s.a.PoolSettings(ch.Pool)
		s.check(found, "settings of pool %s are not durable with the reply", ch.Pool)
		if ch.ConcurrencyLimit != nil {
			s.check(rec.ConcurrencyLimit == int64(*ch.ConcurrencyLimit), "pool %s: limit %d, set %d", ch.Pool, rec.ConcurrencyLimit, *ch.ConcurrencyLimit)
			s.concMax[ch.Pool] = max(s.concMax[ch.Pool], *ch.ConcurrencyLimit)
		}
		s.covered(covPoolSet)
	})
	s.logf("req %d set-pool %+v", req, ch)
	s.core.SetPool(s.now, req, ch)
}

// deleteTask deletes a recent task, ended or not.
func (s *sim) deleteTask() {
	if len(s.ids) == 0 {
		return
	}
	id := s.recent(s.ids, 30)
	if s.pick(2) == 0 {
		// Half the time, a task that blocks its lane, if a recent one does.
		for i := len(s.ids) - 1; i >= 0 && i >= len(s.ids)-200; i-- {
			if t, ok := s.a.Get(s.ids[i]); ok && t.BlocksLane {
				id = t.ID
				break
			}
		}
	}
	before, existed := s.a.Get(id)
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		if !existed {
			s.check(errors.Is(r.Err, core.ErrNotFound), "delete of %s, which does not exist: %v", id, r.Err)
			return
		}
		if r.Err != nil {
			var ie *core.InvalidError
			s.check(errors.As(r.Err, &ie), "delete of %s (%s): %v", id, before.Status, r.Err)
			return
		}
		s.check(before.Status.Terminal() && before.Workflow() == "", "deleted %s, which was %s in workflow %q", id, before.Status, before.Workflow())
		_, still := s.a.Get(id)
		s.check(!still, "deleted task %s is still there", id)
		s.covered(covDeleted)
		if before.BlocksLane {
			s.covered(covLaneUnblocked)
		}
	})
	s.logf("req %d delete %s", req, id)
	s.core.Delete(s.now, req, core.TaskRef{ID: id})
}

// laneKey names the lane of t ("" for none).
func laneKey(t *fsm.Task) string {
	if t.OrderingKey() == "" {
		return ""
	}
	return t.Pool + "/" + t.OrderingKey()
}

// checkStarts checks the starts of a batch (applied) against the durable
// state before it (pre): a paused pool starts nothing, and the first
// attempt of a lane member starts only when no member before it (admitted
// before the batch, not started) lives, and the lane is not blocked.
func (s *sim) checkStarts(muts []fsm.Mutation, pre *fsm.View) {
	paused := map[string]bool{}
	for _, m := range muts {
		switch {
		case m.PutPool != nil:
			paused[m.PutPool.Name] = m.PutPool.Paused
		case m.Start != nil:
			t, ok := s.a.Get(m.Start.ID)
			if !ok {
				continue
			}
			p, set := paused[t.Pool]
			if !set {
				if rec, ok := s.a.PoolSettings(t.Pool); ok {
					p = rec.Paused
				}
			}
			s.check(!p, "task %s of paused pool %s started", t.ID, t.Pool)
			if laneKey(t) == "" || m.Start.Attempt != 1 {
				continue
			}
			v := s.a.View()
			v.EachTask(func(o *fsm.Task) bool {
				if o.ID == t.ID || laneKey(o) != laneKey(t) {
					return true
				}
				if o.BlocksLane {
					s.check(false, "task %s of lane %s started while %s blocks it", t.ID, laneKey(t), o.ID)
				}
				if was, ok := pre.Get(o.ID); ok && o.ID < t.ID && !o.Status.Terminal() && was.Status != fsm.StatusParked {
					s.check(o.Attempt > 0, "task %s of lane %s started before %s (%s)", t.ID, laneKey(t), o.ID, o.Status)
				}
				if !o.Status.Terminal() && o.Status != fsm.StatusParked && o.ID > t.ID {
					s.covered(covLaneWaited)
				}
				return true
			})
		}
	}
}

// checkFlow checks the flow-control invariants of the durable state: a
// lane has at most one started live member, a concurrency key never runs
// more tasks than the highest limit its pool ever had, and every lane
// blocked durably is blocked by an ended task that did not succeed.
func (s *sim) checkFlow() {
	started := map[string]string{}
	running := map[string]int{}
	v := s.a.View()
	v.EachTask(func(t *fsm.Task) bool {
		if t.Status == fsm.StatusParked {
			s.covered(covParked)
		}
		if t.BlocksLane {
			s.check(t.Status.Terminal() && t.Status != fsm.StatusSucceeded, "task %s (%s) blocks its lane", t.ID, t.Status)
			s.covered(covLaneBlocked)
		}
		if k := laneKey(t); k != "" && !t.Status.Terminal() && t.Attempt > 0 {
			other, dup := started[k]
			s.check(!dup, "lane %s has two started live members: %s and %s", k, other, t.ID)
			started[k] = t.ID
		}
		if c := t.ConcurrencyKey(); c != "" && t.Status == fsm.StatusRunning {
			k := t.Pool + "/" + c
			running[k]++
			s.check(running[k] <= max(1, s.concMax[t.Pool]), "key %s runs %d tasks, limit at most %d", k, running[k], max(1, s.concMax[t.Pool]))
			if running[k] > 1 {
				s.covered(covConcShared)
			}
		}
		return true
	})
}

// admitted notes the admission of a parked task.
func (s *sim) admitted(m *fsm.Admit) {
	if t, ok := s.a.Get(m.ID); ok { // else inserted parked in the same batch
		s.check(t.Status == fsm.StatusParked, "admit of %s, which is %s", m.ID, t.Status)
	}
	s.covered(covAdmitted)
}
