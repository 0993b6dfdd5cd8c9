package core

import (
	"fmt"
	"slices"
	"time"

	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/units"
)

// Messages recorded with task ends the core decides on its own.
const (
	msgCancelled      = "cancelled by request"
	msgWorkerCancel   = "attempt cancelled by the worker"
	msgDeadline       = "deadline exceeded"
	msgRetryable      = "retryable failure"
	msgPermanent      = "permanent failure"
	reasonCancelAbort = "task cancelled"
)

// setStatus moves t to s and keeps the counters, the lease index and the
// parked-submitter trigger in step.
func (c *Core) setStatus(t *task, s fsm.Status) {
	old := t.status
	if old.Pending() && !s.Pending() {
		c.global.add(t.prio, -1)
		t.pool.pending.add(t.prio, -1)
		if c.parked.Len() > 0 || c.nParked > 0 {
			c.spaceFreed = true
		}
	} else if !old.Pending() && s.Pending() {
		c.global.add(t.prio, 1)
		t.pool.pending.add(t.prio, 1)
	}
	if old == fsm.StatusRunning && s != fsm.StatusRunning {
		t.pool.running--
		delete(c.leases, t.lease)
		t.lease = 0
		if t.pool.cfg.MaxRunning > 0 {
			c.markDirty(t.pool)
		}
		c.concStopped(t)
	} else if old != fsm.StatusRunning && s == fsm.StatusRunning {
		t.pool.running++
	}
	t.status = s
	t.gen++
}

// finish ends t with a terminal status, revoking its lease if it runs, and
// answers its waiters; its dependents follow (see ended). A running
// attempt ends with the outcome of that status.
func (c *Core) finish(t *task, status fsm.Status, output []byte, msg string) {
	c.finishJoin(t, status, output, msg, nil, 0)
}

// finishJoin is finish, making t a member of workflow join (when not nil)
// as it ends, and recording its running attempt as ended with outcome (0:
// the outcome of status).
func (c *Core) finishJoin(t *task, status fsm.Status, output []byte, msg string, join *workflow, outcome fsm.AttemptOutcome) {
	switch t.status {
	case fsm.StatusQueued:
		c.dequeue(t)
	case fsm.StatusParked:
		c.unfileParked(t)
	}
	fin := &fsm.Finish{ID: t.id, Lease: t.lease, Status: status, Output: output, Error: msg, At: c.now}
	if join != nil {
		fin.Workflow = join.rec.ID
	}
	if t.status == fsm.StatusRunning && t.lease != 0 {
		if outcome == 0 {
			outcome = fsm.OutcomeOf(status)
		}
		fin.Outcome = c.historyOutcome(outcome)
	}
	c.setStatus(t, status)
	t.finishedAt = c.now
	c.leaveLane(t)
	fin.BlocksLane = t.blocksLane
	c.mutate(fsm.Mutation{Finish: fin})
	if w := t.inWorkflow(); w != nil {
		w.note(t)
		w.live--
		if w.live == 0 {
			c.settleLater(w)
		}
	} else if join != nil {
		c.join(t, join)
	} else {
		c.purgeEnded(t)
	}
	c.event(t, msg)
	for _, w := range t.waiters {
		c.reply(w, t.id)
		delete(c.waiting, w)
	}
	t.waiters = nil
	c.ended(t)
	retire(t)
}

// failAttempt ends the running attempt of t with a retryable failure, a
// timeout or a lost lease (outcome: fsm.AttemptRetry, AttemptTimeout or
// AttemptLost): the task is retried after retryAfter (when > 0) or its
// backoff, or fails if its attempts are used up (counted since an
// operator's retry, if any).
func (c *Core) failAttempt(t *task, msg string, retryAfter time.Duration, outcome fsm.AttemptOutcome) {
	n := t.attempt - t.attemptBase // attempts of the current budget
	if n >= t.maxAttempts {
		final := outcome
		if final == fsm.AttemptRetry {
			final = fsm.AttemptFailed
		}
		c.finishJoin(t, fsm.StatusFailed, nil, msg, nil, final)
		return
	}
	delay := retryAfter
	if delay <= 0 {
		delay = backoffDelay(t.backoff, n, &c.rng)
	}
	retryAt := c.now.Add(delay)
	c.mutate(fsm.Mutation{Retry: &fsm.Retry{ID: t.id, Lease: t.lease, Error: msg, RetryAt: retryAt, At: c.now, Outcome: c.historyOutcome(outcome)}})
	t.runAt = retryAt
	if retryAt <= c.now {
		c.setStatus(t, fsm.StatusQueued)
		c.enqueue(t)
	} else {
		c.setStatus(t, fsm.StatusRetrying)
		c.timers.push(timer{when: retryAt, kind: tmReady, id: t.id, gen: t.gen})
	}
	c.event(t, msg)
}

// expire ends t because its deadline passed.
func (c *Core) expire(t *task) {
	if t.status == fsm.StatusRunning {
		c.abort(t, msgDeadline)
	}
	c.finish(t, fsm.StatusExpired, nil, msgDeadline)
}

// purge forgets a terminal task whose retention ended and frees its key,
// unless a task that depends on it lives (it then waits for it) or a
// subscription still holds an event of it (see retained).
func (c *Core) purge(t *task) {
	if t.flow != nil && t.flow.liveDependents > 0 {
		t.flow.purgeHeld = true
		return
	}
	if c.retained(purgeItem{id: t.id}, t.finishedAt, t.id) {
		return
	}
	c.mutate(fsm.Mutation{Purge: &fsm.Purge{ID: t.id}})
	c.forget(t)
}

// forget drops a purged task from the core, releasing the lane it blocked.
func (c *Core) forget(t *task) {
	c.unblockLane(t)
	delete(c.tasks, t.id)
	if t.key != "" && c.keys[t.key] == t {
		delete(c.keys, t.key)
	}
}

// Deleted answers a delete.
type Deleted struct {
	ID      string
	Deleted bool
}

// Delete removes an ended task now, rather than at the end of its
// retention: its record, its output and its key go, and an ordering lane
// it blocked runs on. The reply (held) is a Deleted. Refused: a live task
// (cancel it first), a task a live task depends on, and a member of a
// workflow (it goes with its workflow); ErrNotFound for an unknown task.
func (c *Core) Delete(now time.Time, req ReqID, ref TaskRef) {
	c.begin(now)
	defer c.serve()
	t, err := c.resolveRef(ref)
	if err != nil {
		c.fail(req, err)
		return
	}
	switch {
	case !t.status.Terminal():
		c.fail(req, Invalid("id", "task %s is %s: only an ended task can be deleted (cancel it first)", t.id, t.status))
		return
	case t.inWorkflow() != nil:
		c.fail(req, Invalid("id", "task %s is a member of workflow %s, and is deleted with it", t.id, t.inWorkflow().rec.ID))
		return
	case t.flow != nil && t.flow.liveDependents > 0:
		c.fail(req, Invalid("id", "task %s has live dependents", t.id))
		return
	}
	c.purges.Delete(purgeItem{at: t.finishedAt.Add(c.cfg.Retention), id: t.id})
	c.mutate(fsm.Mutation{Purge: &fsm.Purge{ID: t.id}})
	c.forget(t)
	c.reply(req, Deleted{ID: t.id, Deleted: true})
}

// resolveRef finds a task by id or key.
func (c *Core) resolveRef(ref TaskRef) (*task, error) {
	if err := ref.Check(); err != nil {
		return nil, err
	}
	t := c.tasks[ref.ID]
	if ref.ID == "" {
		t = c.keys[ref.Key]
	}
	if t == nil {
		return nil, fmt.Errorf("task %s: %w", ref, ErrNotFound)
	}
	return t, nil
}

// Complete reports the end of the attempt under lease. The reply (held) has
// no value when the report was taken, ErrStaleLease when lease is not the
// task's current lease (nothing changes then).
//
// Success ends the task succeeded with the output, or failed when the output
// exceeds MaxOutput (it is never truncated). A retryable failure retries
// after RetryAfter or the backoff while attempts remain, else fails the
// task. A permanent failure fails it; a cancelled attempt cancels it.
func (c *Core) Complete(now time.Time, req ReqID, lease uint64, out Outcome) {
	c.begin(now)
	defer c.serve()
	t, ok := c.leases[lease]
	if !ok && bugStaleLease {
		t = c.adoptStaleLease(lease, out.Kind)
		ok = t != nil
	}
	if !ok {
		c.fail(req, ErrStaleLease)
		return
	}
	if (len(out.Children) > 0 || out.Then != nil) && out.Kind != OutcomeSuccess {
		c.fail(req, Invalid("children", "only a successful attempt spawns children"))
		return
	}
	switch out.Kind {
	case OutcomeSuccess:
		schemaErr := c.checkOutput(t, out.Output)
		switch {
		case len(out.Output) > c.cfg.MaxOutput:
			c.finish(t, fsm.StatusFailed, nil,
				"output of "+units.TooBig(len(out.Output), c.cfg.MaxOutput))
		case schemaErr != "":
			// Like an oversized output: the attempt fails for good.
			c.finish(t, fsm.StatusFailed, nil, schemaErr)
		case len(out.Children) > 0 || out.Then != nil:
			if err := c.spawn(t, out); err != nil {
				c.fail(req, err)
				return
			}
		default:
			c.finish(t, fsm.StatusSucceeded, slices.Clone(out.Output), "")
		}
	case OutcomeRetryable:
		c.failAttempt(t, orDefault(out.Message, msgRetryable), out.RetryAfter, fsm.AttemptRetry)
	case OutcomePermanent:
		c.finish(t, fsm.StatusFailed, nil, orDefault(out.Message, msgPermanent))
	case OutcomeCancelled:
		c.finish(t, fsm.StatusCancelled, nil, orDefault(out.Message, msgWorkerCancel))
	default:
		c.fail(req, Invalid("outcome", "unknown kind %d", out.Kind))
		return
	}
	c.reply(req, nil)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Cancel ends a live task cancelled. A running attempt's lease is revoked
// in the same commit and its worker is told to stop at once (an Abort).
// The reply (held) is a Cancelled: true when this call cancelled the task,
// false when it had already ended; ErrNotFound for an unknown task.
func (c *Core) Cancel(now time.Time, req ReqID, ref TaskRef) {
	c.begin(now)
	defer c.serve()
	t, err := c.resolveRef(ref)
	if err != nil {
		c.fail(req, err)
		return
	}
	if t.status.Terminal() {
		c.reply(req, Cancelled{ID: t.id, LastLease: t.lastLease})
		return
	}
	if t.status == fsm.StatusRunning {
		c.abort(t, reasonCancelAbort)
	}
	c.finish(t, fsm.StatusCancelled, nil, msgCancelled)
	c.reply(req, Cancelled{ID: t.id, Cancelled: true, LastLease: t.lastLease})
}

// Attach waits for a task to end. The reply (held, so it follows everything
// already produced) is the task's id: at once for a terminal task, else
// when the task ends. ErrNotFound for an unknown task.
func (c *Core) Attach(now time.Time, req ReqID, ref TaskRef) {
	c.begin(now)
	defer c.serve()
	t, err := c.resolveRef(ref)
	if err != nil {
		c.fail(req, err)
		return
	}
	if t.status.Terminal() {
		c.reply(req, t.id)
		return
	}
	if old, ok := c.waiting[req]; ok {
		old.waiters = slices.DeleteFunc(old.waiters, func(r ReqID) bool { return r == req })
	}
	t.waiters = append(t.waiters, req)
	c.waiting[req] = t
}

// Detach drops request req, whose caller went away: an open poll, a result
// waiter or a parked submitter. It gets no answer. Items of an enqueue-many
// request that were already admitted stay admitted.
func (c *Core) Detach(req ReqID) {
	if pl, ok := c.polls[req]; ok {
		pl.pool.polls.Remove(pl.elem)
		delete(c.polls, req)
	}
	if t, ok := c.waiting[req]; ok {
		t.waiters = slices.DeleteFunc(t.waiters, func(r ReqID) bool { return r == req })
		delete(c.waiting, req)
	}
	if w, ok := c.wfWaiting[req]; ok {
		w.waiters = slices.DeleteFunc(w.waiters, func(r ReqID) bool { return r == req })
		delete(c.wfWaiting, req)
	}
	if els, ok := c.parkedByReq[req]; ok {
		for _, e := range els {
			c.unpark(e)
		}
		delete(c.parkedByReq, req)
		// Whoever queued behind it may go now.
		c.spaceFreed = true
		c.serve()
	}
}
