package clienttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// Failed-task operations and attempt history, as a real cluster does them.

// The bounds of a task's attempt history, as a real cluster keeps it.
const (
	maxAttemptHistory = 10
	maxAttemptError   = 1024
	truncatedMark     = "… (truncated)"
	msgRetried        = "retried by request"
)

// outcomeOf is the outcome of an attempt that ends its task with status s.
func outcomeOf(s cronoqv1.Status) cronoqv1.AttemptOutcome {
	switch s {
	case cronoqv1.Status_STATUS_SUCCEEDED:
		return cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED
	case cronoqv1.Status_STATUS_FAILED:
		return cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED
	case cronoqv1.Status_STATUS_CANCELLED:
		return cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED
	case cronoqv1.Status_STATUS_EXPIRED:
		return cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_EXPIRED
	}
	return cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_UNSPECIFIED
}

// cutError bounds an attempt's error as a real cluster does.
func cutError(s string) string {
	if len(s) <= maxAttemptError {
		return s
	}
	n := maxAttemptError - len(truncatedMark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + truncatedMark
}

// recordAttemptLocked adds t's running attempt to its history as ended now
// with outcome and msg, the oldest record going when the history is full.
func (c *Cluster) recordAttemptLocked(t *task, outcome cronoqv1.AttemptOutcome, msg string) {
	a := &cronoqv1.Attempt{
		Attempt:    t.p.GetAttempt(),
		Worker:     t.attemptWorker,
		Lease:      t.attemptLease,
		Epoch:      t.attemptLease >> 32,
		StartedAt:  t.p.GetStartedAt(),
		FinishedAt: ts(c.now()),
		Outcome:    outcome,
		Error:      cutError(msg),
	}
	h := append(t.p.Attempts, a)
	if len(h) > maxAttemptHistory {
		h = slices.Clone(h[len(h)-maxAttemptHistory:])
	}
	t.p.Attempts = h
}

// Retry puts a task that ended failed, expired or cancelled back in the
// queue with a new attempt budget, and answers with it.
func (s *taskService) Retry(ctx context.Context, req *connect.Request[cronoqv1.RetryRequest]) (*connect.Response[cronoqv1.RetryResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.RetryResponse, error) {
		c := s.n.c
		t, err := c.lookupLocked(req.Msg.GetRef())
		if err != nil {
			return nil, err
		}
		if err := c.retryLocked(t); err != nil {
			return nil, err
		}
		return &cronoqv1.RetryResponse{Task: cloneTask(t.p)}, nil
	})
}

// retryLocked requeues an ended task, refusing what a real cluster
// refuses.
func (c *Cluster) retryLocked(t *task) error {
	id, st := t.p.GetId(), t.p.GetStatus()
	switch {
	case st != cronoqv1.Status_STATUS_FAILED && st != cronoqv1.Status_STATUS_EXPIRED && st != cronoqv1.Status_STATUS_CANCELLED:
		return apierr.NotRetryable(fmt.Sprintf("task %s is %s, not retryable: only a task that ended failed, expired or cancelled can be retried", id, statusName(st)))
	case t.wf != nil:
		return invalid("id", "task %s is a member of workflow %s, which ended with it: it cannot be retried alone", id, t.wf.p.GetId())
	case t.p.GetExternal():
		return invalid("id", "task %s is external: no worker runs it", id)
	}
	for _, dep := range t.p.GetDependsOn() {
		d := c.tasks[dep]
		switch {
		case d == nil:
			return invalid("id", "task %s depends on %s, which no longer exists", id, dep)
		case !terminal(d.p.GetStatus()):
			return invalid("id", "task %s depends on %s, which is %s", id, dep, statusName(d.p.GetStatus()))
		case d.p.GetStatus() != cronoqv1.Status_STATUS_SUCCEEDED &&
			t.p.GetDependencyPolicy() == cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED:
			return invalid("id", "task %s depends on %s, which ended %s (retry it first)", id, dep, statusName(d.p.GetStatus()))
		}
	}
	// A task its end released would have run before its dependency ended;
	// the blocked ones wait for its new end.
	var waiting []*task
	ran := ""
	for _, x := range c.tasks {
		if !slices.Contains(x.p.GetDependsOn(), id) {
			continue
		}
		switch st := x.p.GetStatus(); {
		case st == cronoqv1.Status_STATUS_BLOCKED:
			waiting = append(waiting, x)
		case x.p.GetAttempt() > 0 || st == cronoqv1.Status_STATUS_SCHEDULED || st == cronoqv1.Status_STATUS_QUEUED ||
			st == cronoqv1.Status_STATUS_RUNNING || st == cronoqv1.Status_STATUS_RETRYING ||
			st == cronoqv1.Status_STATUS_SUCCEEDED || st == cronoqv1.Status_STATUS_FAILED:
			if ran == "" || x.p.GetId() < ran {
				ran = x.p.GetId()
			}
		}
	}
	if ran != "" {
		return invalid("id", "task %s was released by the end of task %s, which can no longer be retried", ran, id)
	}
	if err := c.fitsLocked(t.pool(), 1); err != nil {
		return err
	}
	slices.SortFunc(waiting, func(a, b *task) int { return strings.Compare(a.p.GetId(), b.p.GetId()) })
	for _, x := range waiting {
		t.dependents = append(t.dependents, x)
		x.waitingOn++
	}
	now := c.now()
	if dl := tsTime(t.p.GetDeadline()); !dl.IsZero() && !dl.After(now) {
		t.p.Deadline = nil
	}
	t.p.AttemptBase = t.p.GetAttempt()
	t.p.BlocksLane = false
	t.p.RunAt = ts(now)
	t.p.Output = nil
	t.p.FinishedAt = nil
	c.setStatusLocked(t, cronoqv1.Status_STATUS_QUEUED)
	c.eventLocked(t, msgRetried)
	return nil
}

// CancelMany cancels the live tasks of a pool with one of the statuses
// (and one of the kinds), and answers how many.
func (s *taskService) CancelMany(ctx context.Context, req *connect.Request[cronoqv1.CancelManyRequest]) (*connect.Response[cronoqv1.CancelManyResponse], error) {
	return unary(ctx, s.n, req, leaderCall, func(*served) (*cronoqv1.CancelManyResponse, error) {
		c := s.n.c
		m := req.Msg
		switch {
		case m.GetPool() == "":
			return nil, invalid("pool", "a pool is required")
		case len(m.GetStatuses()) == 0:
			return nil, invalid("statuses", "at least one status is required")
		}
		for _, st := range m.GetStatuses() {
			if st <= cronoqv1.Status_STATUS_UNSPECIFIED || st > cronoqv1.Status_STATUS_PARKED || terminal(st) {
				return nil, invalid("statuses", "%s is not a status of a live task", statusName(st))
			}
		}
		for _, k := range m.GetKinds() {
			if k == "" {
				return nil, invalid("kinds", "an empty kind")
			}
		}
		var ids []string
		for id, t := range c.tasks {
			if t.pool() == m.GetPool() && slices.Contains(m.GetStatuses(), t.p.GetStatus()) &&
				(len(m.GetKinds()) == 0 || slices.Contains(m.GetKinds(), t.p.GetTemplate().GetKind())) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		n := int64(0)
		for _, id := range ids {
			if c.cancelLocked(c.tasks[id], reasonCancelAbort) {
				n++
			}
		}
		return &cronoqv1.CancelManyResponse{Cancelled: n}, nil
	})
}
