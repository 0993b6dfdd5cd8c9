package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// Operations on failed tasks: an operator's retry of an ended task, and
// cancels of every live task a filter selects. Attempt history is recorded
// by the FSM from the outcome the ending mutations carry (historyOutcome).

// historyVersion is the log format of attempt history and of Requeue.
const historyVersion = 6

// msgRetried is the message of the event of an operator's retry.
const msgRetried = "retried by request"

// ErrNotRetryable refuses the retry of a task that has not ended failed,
// expired or cancelled (it is live, or it succeeded).
var ErrNotRetryable = errors.New("not retryable")

// historyOutcome is outcome when the cluster keeps attempt history (every
// server understands log format 6), else 0: an ending mutation that
// carries no outcome is one every server applies alike.
func (c *Core) historyOutcome(outcome fsm.AttemptOutcome) fsm.AttemptOutcome {
	if c.cfg.LogVersion < historyVersion {
		return 0
	}
	return outcome
}

// Retried answers a retry: the task, queued again.
type Retried struct {
	ID string
}

// Retry puts a task that ended failed, expired or cancelled back in the
// queue, as an operator asks: the same id and key, a new attempt budget
// (its attempts are counted from here, the ones before stay in its
// history), its output and end cleared; a deadline that has passed is
// dropped, one still ahead is kept. An ordering lane it blocked runs it
// first. The tasks that depend on it and are still blocked wait for its new
// end; those its end cancelled stay cancelled. The reply (held) is a
// Retried.
//
// Refused: a task that is live or succeeded (ErrNotRetryable), a member
// of a workflow (its workflow has ended with it), an external task, a task
// whose dependencies have not all ended, or (under policy succeeded) did
// not all succeed, and a task whose end released a task that depends on it
// (*InvalidError); ErrNotFound for an unknown task;
// *VersionError while some server does not understand log format 6;
// ErrOverloaded when its pool's or the cluster's pending bounds are full.
func (c *Core) Retry(now time.Time, req ReqID, ref TaskRef) {
	c.begin(now)
	defer c.serve()
	if err := c.requireVersion("retrying a task", historyVersion); err != nil {
		c.fail(req, err)
		return
	}
	if c.shutdown {
		c.fail(req, ErrShuttingDown)
		return
	}
	t, err := c.resolveRef(ref)
	if err != nil {
		c.fail(req, err)
		return
	}
	waiting, err := c.checkRetry(t)
	if err != nil {
		c.fail(req, err)
		return
	}
	if !c.fits(delta{{pair: pairKey{pool: t.pool.name, class: t.prio}, n: 1}}, false) {
		c.fail(req, fmt.Errorf("retrying task %s: %w", t.id, ErrOverloaded))
		return
	}
	deadline := t.deadline
	if deadline != 0 && deadline <= c.now {
		deadline = 0
	}
	c.mutate(fsm.Mutation{Requeue: &fsm.Requeue{ID: t.id, At: c.now, Deadline: deadline}})
	c.purges.Delete(purgeItem{at: t.finishedAt.Add(c.cfg.Retention), id: t.id})
	if t.flow != nil {
		t.flow.purgeHeld = false
		for _, id := range t.flow.deps {
			c.tasks[id].fl().liveDependents++ // live again (checkRetry found them all)
		}
		// The blocked tasks that depend on it wait for its new end, as a
		// new leader would have them do (linkDeps).
		for _, x := range waiting {
			t.flow.dependents = append(t.flow.dependents, x)
			x.flow.waitingOn++
		}
	}
	if l := t.lane; l != nil && l.blockedBy == t {
		// It runs again as the lane's head: the lane waits for it instead.
		l.blockedBy = nil
		t.lane = nil
	}
	t.blocksLane = false
	t.attemptBase = t.attempt
	t.runAt = c.now
	t.deadline = deadline
	t.finishedAt = 0
	c.setStatus(t, fsm.StatusQueued)
	c.joinLane(t)
	c.enqueue(t)
	if t.lane != nil {
		c.advanceLane(t.lane) // its head, if not t, may go now
	}
	if t.deadline != 0 {
		c.timers.push(timer{when: t.deadline, kind: tmDeadline, id: t.id})
	}
	c.event(t, msgRetried)
	c.reply(req, Retried{ID: t.id})
}

// checkRetry refuses what Retry cannot put back in the queue, and returns
// the blocked tasks that depend on t, in id order.
func (c *Core) checkRetry(t *task) ([]*task, error) {
	switch {
	case !fsm.Retryable(t.status):
		return nil, fmt.Errorf("task %s is %s, %w: only a task that ended failed, expired or cancelled can be retried", t.id, t.status, ErrNotRetryable)
	case t.inWorkflow() != nil:
		return nil, Invalid("id", "task %s is a member of workflow %s, which ended with it: it cannot be retried alone", t.id, t.inWorkflow().rec.ID)
	case t.isExternal():
		return nil, Invalid("id", "task %s is external: no worker runs it", t.id)
	}
	if t.flow == nil {
		// It never had dependencies nor dependents (linking either gives
		// a task its flow).
		return nil, nil
	}
	for _, id := range t.flow.deps {
		d := c.tasks[id]
		switch {
		case d == nil:
			return nil, Invalid("id", "task %s depends on %s, which no longer exists", t.id, id)
		case !d.status.Terminal():
			return nil, Invalid("id", "task %s depends on %s, which is %s", t.id, id, d.status)
		case d.status != fsm.StatusSucceeded && t.flow.depPolicy == fsm.DepSucceeded:
			return nil, Invalid("id", "task %s depends on %s, which ended %s (retry it first)", t.id, id, d.status)
		}
	}
	// A task that depends on it and was released by its end (it runs or
	// ran) would have run before its dependency ended: refused. Blocked
	// ones wait for it again; the others never ran and stay as they are.
	var waiting []*task
	ran := ""
	for _, x := range c.tasks {
		if x.flow == nil || !slices.Contains(x.flow.deps, t.id) {
			continue
		}
		switch {
		case x.status == fsm.StatusBlocked:
			waiting = append(waiting, x)
		case x.attempt > 0 || released(x.status):
			if ran == "" || x.id < ran {
				ran = x.id // map order must not reach the answer
			}
		}
	}
	if ran != "" {
		return nil, Invalid("id", "task %s was released by the end of task %s, which can no longer be retried", ran, t.id)
	}
	slices.SortFunc(waiting, func(a, b *task) int { return strings.Compare(a.id, b.id) })
	return waiting, nil
}

// released reports whether a task of status s has passed its dependencies.
func released(s fsm.Status) bool {
	switch s {
	case fsm.StatusScheduled, fsm.StatusQueued, fsm.StatusRunning, fsm.StatusRetrying, fsm.StatusSucceeded, fsm.StatusFailed:
		return true
	}
	return false
}

// TaskFilter selects the live tasks of a pool by status, and by kind.
type TaskFilter struct {
	Pool     string
	Statuses []fsm.Status // at least one; live statuses only
	Kinds    []string     // none: every kind
}

// Check refuses a filter that names no pool or no status, or a status
// that is not live.
func (f TaskFilter) Check() error {
	switch {
	case f.Pool == "":
		return Invalid("pool", "a pool is required")
	case len(f.Statuses) == 0:
		return Invalid("statuses", "at least one status is required")
	}
	for _, s := range f.Statuses {
		if !s.Valid() || s.Terminal() {
			return Invalid("statuses", "%s is not a status of a live task", s)
		}
	}
	for _, k := range f.Kinds {
		if k == "" {
			return Invalid("kinds", "an empty kind")
		}
	}
	return nil
}

func (f TaskFilter) matches(t *task) bool {
	return t.pool.name == f.Pool && slices.Contains(f.Statuses, t.status) &&
		(len(f.Kinds) == 0 || slices.Contains(f.Kinds, t.kind))
}

// Matching returns the ids of the live tasks f selects now, in id (that
// is submission) order. It changes nothing.
func (c *Core) Matching(f TaskFilter) ([]string, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	var ids []string
	for id, t := range c.tasks {
		if f.matches(t) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // map order must not reach the output
	return ids, nil
}

// CancelledMany answers CancelTasks: how many tasks it cancelled.
type CancelledMany struct {
	Cancelled int
}

// CancelTasks cancels, in one commit, each of ids that still exists, is
// live and matches f, as Cancel does (a running attempt's lease is revoked
// and its worker told to stop). The others are skipped. The reply (held)
// is a CancelledMany.
func (c *Core) CancelTasks(now time.Time, req ReqID, ids []string, f TaskFilter) {
	c.begin(now)
	defer c.serve()
	if err := f.Check(); err != nil {
		c.fail(req, err)
		return
	}
	n := 0
	for _, id := range ids {
		t := c.tasks[id]
		if t == nil || t.status.Terminal() || !f.matches(t) {
			continue
		}
		if t.status == fsm.StatusRunning {
			c.abort(t, reasonCancelAbort)
		}
		c.finish(t, fsm.StatusCancelled, nil, msgCancelled)
		n++
	}
	c.reply(req, CancelledMany{Cancelled: n})
}
