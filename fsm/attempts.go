package fsm

import (
	"fmt"
	"unicode/utf8"
)

// Attempt history and the operator's retry (log format 6).
//
// A task keeps its last MaxAttemptHistory ended attempts. The state
// records one when a Retry or a Finish that carries an Outcome ends the
// running attempt, from the task as it was and the mutation: nothing in the
// record depends on the node that applies it. A leader sets Outcome only
// once every server understands log format 6, so a cluster that does not
// keeps tasks without history.

// MaxAttemptHistory bounds the attempts a task keeps: the oldest goes first.
const MaxAttemptHistory = 10

// MaxAttemptError bounds the error of an attempt in the history, in bytes:
// a longer one is cut (at a character boundary) and ends with
// TruncatedMark. The task's own Error, the last attempt's, is kept whole.
const MaxAttemptError = 1024

// TruncatedMark ends an error cut to MaxAttemptError bytes.
const TruncatedMark = "… (truncated)"

// The outcomes of an attempt (AttemptOutcome).
const (
	AttemptSucceeded AttemptOutcome = 1 // the worker reported success
	AttemptFailed    AttemptOutcome = 2 // a permanent failure, or a retryable one with no attempt left
	AttemptRetry     AttemptOutcome = 3 // a retryable failure: the task runs again
	AttemptCancelled AttemptOutcome = 4 // the task was cancelled, by a request or by its worker
	AttemptExpired   AttemptOutcome = 5 // the task's deadline passed while it ran
	AttemptTimeout   AttemptOutcome = 6 // the attempt ran past the task's timeout
	AttemptLost      AttemptOutcome = 7 // its lease lapsed without a heartbeat (or was revoked)

	numAttemptOutcomes = 8
)

var attemptOutcomeNames = [numAttemptOutcomes]string{
	"unknown", "succeeded", "failed", "retry", "cancelled", "expired", "timeout", "lost",
}

func (o AttemptOutcome) String() string {
	if int(o) < len(attemptOutcomeNames) {
		return attemptOutcomeNames[o]
	}
	return "unknown"
}

// Valid reports whether o is a known outcome.
func (o AttemptOutcome) Valid() bool { return o > 0 && o < numAttemptOutcomes }

// ParseAttemptOutcome parses the name of an outcome.
func ParseAttemptOutcome(name string) (AttemptOutcome, bool) {
	for i, n := range attemptOutcomeNames {
		if i != 0 && n == name {
			return AttemptOutcome(i), true
		}
	}
	return 0, false
}

// OutcomeOf is the outcome of an attempt that ends its task with status s:
// succeeded, failed, cancelled or expired (0 for a status that is not
// terminal).
func OutcomeOf(s Status) AttemptOutcome {
	switch s {
	case StatusSucceeded:
		return AttemptSucceeded
	case StatusFailed:
		return AttemptFailed
	case StatusCancelled:
		return AttemptCancelled
	case StatusExpired:
		return AttemptExpired
	}
	return 0
}

// Epoch is the leader epoch that granted the attempt's lease.
func (a *Attempt) Epoch() uint64 { return a.Lease >> 32 }

// CutError bounds an attempt's error to MaxAttemptError bytes.
func CutError(s string) string {
	if len(s) <= MaxAttemptError {
		return s
	}
	n := MaxAttemptError - len(TruncatedMark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + TruncatedMark
}

// endAttempt records in t (a copy of cur about to be stored) the running
// attempt of cur as ended at at with outcome and msg, the oldest record
// going when the history is full.
func endAttempt(t, cur *Task, at Instant, outcome AttemptOutcome, msg string) {
	a := Attempt{
		Attempt:    cur.Attempt,
		Worker:     cur.Worker,
		Lease:      cur.Lease,
		StartedAt:  cur.StartedAt,
		FinishedAt: at,
		Outcome:    outcome,
		Error:      CutError(msg),
	}
	keep := cur.Attempts
	if len(keep) >= MaxAttemptHistory {
		keep = keep[len(keep)-MaxAttemptHistory+1:]
	}
	h := make([]Attempt, 0, len(keep)+1)
	t.Attempts = append(append(h, keep...), a)
}

// checkOutcome refuses an attempt outcome a mutation cannot carry.
func checkOutcome(op, id string, o AttemptOutcome, allowed ...AttemptOutcome) error {
	for _, a := range allowed {
		if o == a {
			return nil
		}
	}
	return fmt.Errorf("%s %s: attempt outcome %s does not fit", op, id, o)
}

// Retryable reports whether an operator may retry a task of status s:
// it ended failed, expired or cancelled.
func Retryable(s Status) bool {
	return s == StatusFailed || s == StatusExpired || s == StatusCancelled
}

// requeue applies an operator's retry.
func (s *State) requeue(index uint64, at Instant, m *Requeue) error {
	cur, err := s.task("requeue", m.ID)
	if err != nil {
		return err
	}
	switch {
	case !Retryable(cur.Status):
		return fmt.Errorf("requeue %s: task is %s, want failed, expired or cancelled", m.ID, cur.Status)
	case cur.Workflow() != "":
		return fmt.Errorf("requeue %s: task is a member of workflow %s", m.ID, cur.Workflow())
	}
	t := cur.Clone()
	t.Status = StatusQueued
	t.AttemptBase = cur.Attempt
	t.BlocksLane = false
	t.RunAt = at
	t.Deadline = m.Deadline
	t.Output = nil
	t.FinishedAt = 0
	t.ModifyIndex = index
	t.UpdatedAt = at
	s.setTask(cur, t)
	return nil
}

// finishOutcomes are the outcomes of an attempt that ends its task with
// status s.
func finishOutcomes(s Status) []AttemptOutcome {
	switch s {
	case StatusFailed:
		// A retryable failure with no attempt left, a timeout or a lost
		// lease on the last attempt fail the task too.
		return []AttemptOutcome{AttemptFailed, AttemptTimeout, AttemptLost}
	case StatusSucceeded, StatusCancelled, StatusExpired:
		return []AttemptOutcome{OutcomeOf(s)}
	}
	return nil
}
