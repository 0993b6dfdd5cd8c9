package core

import (
	"fmt"

	"github.com/cronoq/cronoq/fsm"
)

// The helpers below implement the deliberate faults of the fault-injection
// harness's self-test builds (bug_*_on.go). Each one does nothing unless its
// constant is true, so release builds compile them away.

// rememberLease notes that lease was granted to task id, so that the
// stale-lease fault can find the task again once the lease is gone.
func (c *Core) rememberLease(lease uint64, id string) {
	if !bugStaleLease || lease == 0 {
		return
	}
	if c.pastLeases == nil {
		c.pastLeases = make(map[uint64]string)
	}
	c.pastLeases[lease] = id
}

// adoptStaleLease is the stale-lease fault: it returns the task that lease
// was once granted to, as if lease were still its current lease, or nil.
// A task running under another lease has that attempt aborted and lease put
// in its place, so the completion's Retry or Finish names the stale lease.
// A task that is not running is taken as it is (its Finish needs no lease),
// except for a retryable failure, which has no attempt to end.
func (c *Core) adoptStaleLease(lease uint64, kind OutcomeKind) *task {
	if !bugStaleLease || kind > OutcomeCancelled {
		return nil
	}
	t := c.tasks[c.pastLeases[lease]]
	if t == nil || t.status.Terminal() {
		return nil
	}
	if t.status != fsm.StatusRunning {
		if kind == OutcomeRetryable {
			return nil
		}
		return t
	}
	c.abort(t, "lease taken over by a completion under an older lease")
	delete(c.leases, t.lease)
	t.lease = lease
	c.leases[lease] = t
	return t
}

// forgetCursor is the cron re-fire fault, applied to a schedule a new leader
// recovers: its cursor moves to just before the last slot it fired, and it
// catches up on every due slot, so that slot fires a second time.
func forgetCursor(s *schedule) {
	if !bugCronRefire || s.rec.LastFire == 0 {
		return
	}
	s.rec.LastFire--
	s.rec.CatchUp = fsm.CatchUpAll
}

// refireKey is the cron re-fire fault's way around the slot key: when key
// already names a task, the fire gets a key of its own for this epoch.
func (c *Core) refireKey(key string) string {
	if !bugCronRefire {
		return key
	}
	if _, ok := c.keys[key]; ok {
		return fmt.Sprintf("%s#e%d", key, c.epoch)
	}
	return key
}
