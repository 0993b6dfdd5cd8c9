package core

import (
	"fmt"
	"time"

	"github.com/cronoq/cronoq/engine/core/cron"
	"github.com/cronoq/cronoq/fsm"
)

// Source is the durable state a core is rebuilt from (implemented by
// *fsm.View). Both iterations must be in a stable order (ids, names).
type Source interface {
	EachTask(fn func(*fsm.Task) bool)
	EachSchedule(fn func(*fsm.Schedule) bool)
	EachWorkflow(fn func(*fsm.Workflow) bool)
	EachPool(fn func(*fsm.Pool) bool)
	ACLSource
	SubscriptionSource
}

// Recover rebuilds a core for a new epoch from the durable state, as a new
// leader does: queued tasks go back to the ready queues, scheduled and
// retrying ones to their timers, running attempts keep their lease with a
// fresh heartbeat window of cfg.LeaseGrace from now (their worker must
// heartbeat to keep it), terminal tasks to the retention order, and
// schedules resume from their committed cursors. New ids sort after every
// existing id and new lease tokens carry the new epoch, so they exceed every
// earlier token.
//
// Recover itself produces nothing; overdue work (lapsed run times, deadlines,
// retention, schedule slots) is done by the first call that takes a time,
// typically Tick. It fails if a lease in the state was granted by epoch or a
// later one.
func Recover(cfg Config, src Source, epoch uint64, now time.Time) (*Core, error) {
	c, err := newCore(cfg, epoch)
	if err != nil {
		return nil, err
	}
	c.now = fsm.InstantOf(now)
	c.recoverACL(src)
	c.recoverSubscriptions(src)
	// Pool settings first: a pool's tasks are filed under its settings.
	src.EachPool(func(rec *fsm.Pool) bool {
		c.poolRecs[rec.Name] = rec.Clone() // GlobalPool's too: the global bounds
		return true
	})
	var wfs []*workflow
	src.EachWorkflow(func(rec *fsm.Workflow) bool {
		if _, dup := c.workflows[rec.ID]; dup {
			err = fmt.Errorf("recovering workflow %s: listed twice", rec.ID)
			return false
		}
		c.ids.observe(rec.ID)
		wfs = append(wfs, c.trackWorkflow(rec.Clone()))
		return true
	})
	if err != nil {
		return nil, err
	}
	src.EachTask(func(rec *fsm.Task) bool {
		if rec.LastLease>>32 >= epoch || rec.Lease>>32 >= epoch {
			err = fmt.Errorf("recovering task %s: lease %#x was granted at or after epoch %d", rec.ID, rec.LastLease, epoch)
			return false
		}
		if _, dup := c.tasks[rec.ID]; dup {
			err = fmt.Errorf("recovering task %s: listed twice", rec.ID)
			return false
		}
		if wf := rec.Workflow(); wf != "" && c.workflows[wf] == nil {
			err = fmt.Errorf("recovering task %s: its workflow %s does not exist", rec.ID, wf)
			return false
		}
		c.ids.observe(rec.ID)
		c.track(rec)
		c.rememberLease(rec.Lease, rec.ID)
		c.rememberLease(rec.LastLease, rec.ID)
		return true
	})
	if err != nil {
		return nil, err
	}
	// Tasks were filed in id order: a key's queued tasks may have been let
	// through before its running ones were counted.
	for _, p := range c.sortedPools() {
		if len(p.conc) > 0 {
			c.balanceConc(p)
		}
	}
	// A running workflow whose members all ended (a step of the previous
	// leader did not get to end it) ends at the first step.
	for _, w := range wfs {
		if w.live == 0 {
			c.settleLater(w)
		}
	}
	src.EachSchedule(func(rec *fsm.Schedule) bool {
		s := &schedule{rec: rec.Clone()}
		forgetCursor(s)
		if expr, perr := cron.Parse(rec.Cron, rec.TZ); perr == nil {
			s.expr = expr
		}
		c.schedules[rec.Name] = s
		c.arm(s)
		return true
	})
	// Nothing is emitted: the dirty marks of recovered queued tasks only
	// matter once polls arrive.
	for _, p := range c.dirty {
		p.dirty = false
	}
	c.dirty = nil
	c.spaceFreed = false
	return c, nil
}
