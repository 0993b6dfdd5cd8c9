package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// The delivery checker's rules (durable subscriptions; see the delivery
// workload: consumers read each subscription through random nodes,
// process the events above the last one they processed, in the order
// delivered, acknowledge what they processed, and now and then discard a
// read unprocessed and reconnect, as a consumer that crashes does):
//
//	D1 no loss: every terminal event of a task of the subscription's pool
//	   that matches its filter (the task's status in the final read, after
//	   the pool drained) was delivered, processed and acknowledged (an ack
//	   answered ok covers it) at least once. Checked once the consumer
//	   caught up (the subscription had nothing left to deliver) after a
//	   complete drain; otherwise a missing event makes the verdict
//	   unknown. A server that advances the cursor before the consumer's
//	   ack is durable loses the events of a discarded read: they never
//	   come again.
//	D2 log order: within one read stream, an event never delivered before
//	   (on any stream) never comes after one with a larger cursor: new
//	   events arrive in cursor order (events sent again may come later,
//	   at least once).
//	D3 one event per cursor: every delivery of a cursor, on any node and
//	   stream, carries the same task, status and attempt; a task's
//	   terminal event has the same cursor in every subscription (cursors
//	   are positions in the one log).
//	D4 filter and existence: every delivered event is of the
//	   subscription's pool and, when it filters statuses, of one of them;
//	   its task was submitted or exists in the final read; a terminal
//	   event's status is the task's final status (a task ends once).
//	D5 per task: no event of a task has a larger cursor than its terminal
//	   event.

// subCheck gathers one subscription's history.
type subCheck struct {
	spec     history.Value // the acknowledged create's value
	created  bool
	caughtUp bool
	// delivered: cursor -> the event as first delivered (and the op).
	delivered   map[uint64]history.EventState
	deliveredOp map[uint64]int64
	deliveries  int64
	redelivered int64
	dropped     map[uint64]bool
	drops       int64
	sessions    map[string]bool
	// acked: events an ok ack covered; pendingAck: events of acks not
	// (yet) answered ok.
	acked      map[uint64]history.EventState
	pendingAck map[uint64]bool
	acksOK     int64
	acksFail   int64
	acksInfo   int64
	faultAcked int64
}

func newSubCheck() *subCheck {
	return &subCheck{delivered: map[uint64]history.EventState{}, deliveredOp: map[uint64]int64{}, dropped: map[uint64]bool{},
		sessions: map[string]bool{}, acked: map[uint64]history.EventState{}, pendingAck: map[uint64]bool{}}
}

// matches reports whether a status passes the subscription's filter.
func (s *subCheck) matches(status string) bool {
	return len(s.spec.Statuses) == 0 || slices.Contains(s.spec.Statuses, status)
}

// Delivery checks the delivery workload's subscriptions (D1-D5 above).
// A history without them is valid, with a note.
func Delivery(ops []history.Op, p Params) *Result {
	r := newResult("delivery")
	subs := map[string]*subCheck{}
	sub := func(name string) *subCheck {
		s, ok := subs[name]
		if !ok {
			s = newSubCheck()
			subs[name] = s
		}
		return s
	}
	var final map[string]history.TaskState
	submitted := map[string]bool{}
	drainOK := false
	for _, pr := range history.Pairs(ops) {
		switch pr.F() {
		case workload.SubCreate:
			if pr.Type() == history.OK {
				s := sub(pr.InvokeValue().Subscription)
				s.created, s.spec = true, *pr.InvokeValue()
			}
		case workload.SubFinal:
			if pr.Type() == history.OK {
				sub(pr.InvokeValue().Subscription).caughtUp = true
			}
		case workload.DrainOp:
			if strings.Contains(" "+strings.Trim(pr.InvokeValue().Detail, "[]")+" ", " "+workload.QueuePool+" ") {
				drainOK = pr.Type() == history.OK
			}
		case workload.FinalTasks:
			if pr.Type() == history.OK {
				final = map[string]history.TaskState{}
				for _, t := range pr.Value().Tasks {
					final[t.ID] = t
				}
			}
		case "submit":
			if id := pr.Value().ID; id != "" {
				submitted[id] = true
			}
		}
	}
	if len(subs) == 0 {
		r.Notes = append(r.Notes, "no delivery workload in this run")
		return r
	}

	// Deliveries, discards and acks, in history order.
	sessMax := map[string]uint64{} // process/sub/session -> largest cursor delivered on it
	terminalCursor := map[string]uint64{}
	terminalOp := map[string]int64{}
	for _, op := range ops {
		v := op.Value
		if v == nil {
			continue
		}
		switch {
		case op.F == workload.SubRead && op.Type == history.OK:
			s := sub(v.Subscription)
			sk := fmt.Sprintf("%s/%s/%d", op.Process, v.Subscription, v.Session)
			s.sessions[sk] = true
			for _, e := range v.Events {
				s.deliveries++
				prev, seen := s.delivered[e.Cursor]
				if seen {
					s.redelivered++
					if prev.ID != e.ID || prev.Status != e.Status || prev.Attempt != e.Attempt {
						r.fail("D3", []int64{s.deliveredOp[e.Cursor], op.Index},
							"%s: cursor %d delivered as %s %s (attempt %d), later as %s %s (attempt %d)",
							v.Subscription, e.Cursor, prev.ID, prev.Status, prev.Attempt, e.ID, e.Status, e.Attempt)
					}
				} else {
					if m := sessMax[sk]; e.Cursor < m {
						r.fail("D2", []int64{op.Index},
							"%s: new event at cursor %d (%s %s) delivered after cursor %d on the same stream (session %d of %s via %s)",
							v.Subscription, e.Cursor, e.ID, e.Status, m, v.Session, op.Process, op.Node)
					}
					s.delivered[e.Cursor] = e
					s.deliveredOp[e.Cursor] = op.Index
				}
				sessMax[sk] = max(sessMax[sk], e.Cursor)
				if s.created && (e.Pool != s.spec.Pool || !s.matches(e.Status)) {
					r.fail("D4", []int64{op.Index}, "%s: event %s %s of pool %s at cursor %d does not match the filter (pool %s, statuses %v)",
						v.Subscription, e.ID, e.Status, e.Pool, e.Cursor, s.spec.Pool, s.spec.Statuses)
				}
				if !seen && workload.TerminalStatus(e.Status) {
					k := e.ID + "/" + e.Status
					if c, ok := terminalCursor[k]; ok && c != e.Cursor {
						r.fail("D3", []int64{terminalOp[k], op.Index}, "%s: terminal event %s %s delivered at cursor %d, elsewhere at cursor %d",
							v.Subscription, e.ID, e.Status, e.Cursor, c)
					} else if !ok {
						terminalCursor[k], terminalOp[k] = e.Cursor, op.Index
					}
				}
			}
		case op.F == workload.SubDrop:
			s := sub(v.Subscription)
			s.drops++
			for _, e := range v.Events {
				s.dropped[e.Cursor] = true
			}
		case op.F == workload.SubAck && op.Type != history.Invoke:
			s := sub(v.Subscription)
			switch op.Type {
			case history.OK:
				s.acksOK++
				for _, e := range v.Events {
					s.acked[e.Cursor] = e
					delete(s.pendingAck, e.Cursor)
					if op.Time >= p.FaultStart && op.Time <= p.FaultEnd {
						s.faultAcked++
					}
				}
			case history.Fail:
				s.acksFail++
			default:
				s.acksInfo++
			}
			if op.Type != history.OK {
				for _, e := range v.Events {
					if _, ok := s.acked[e.Cursor]; !ok {
						s.pendingAck[e.Cursor] = true
					}
				}
			}
		}
	}

	var faultAcked, unconfirmed int64
	for _, name := range sortedKeys(subs) {
		s := subs[name]
		if !s.created {
			r.unknown("%s: no create was acknowledged", name)
			continue
		}
		faultAcked += s.faultAcked
		// D4 existence and final status, D5 order within a task.
		byTask := map[string][]history.EventState{}
		for _, e := range s.delivered {
			byTask[e.ID] = append(byTask[e.ID], e)
		}
		for _, id := range sortedKeys(byTask) {
			evs := byTask[id]
			sort.Slice(evs, func(i, j int) bool { return evs[i].Cursor < evs[j].Cursor })
			t, exists := final[id]
			if !exists && !submitted[id] && final != nil {
				r.fail("D4", []int64{s.deliveredOp[evs[0].Cursor]}, "%s: event of task %s, which nobody submitted and the final read does not hold", name, id)
			}
			for i, e := range evs {
				if !workload.TerminalStatus(e.Status) {
					continue
				}
				if exists && e.Status != t.Status {
					r.fail("D4", []int64{s.deliveredOp[e.Cursor]}, "%s: task %s delivered as %s at cursor %d, but it is %s in the final read",
						name, id, e.Status, e.Cursor, t.Status)
				}
				if i < len(evs)-1 {
					n := evs[len(evs)-1]
					r.fail("D5", []int64{s.deliveredOp[e.Cursor], s.deliveredOp[n.Cursor]}, "%s: task %s has event %s at cursor %d after its terminal event %s at cursor %d",
						name, id, n.Status, n.Cursor, e.Status, e.Cursor)
				}
				break
			}
		}
		// D1: every terminal event of the pool that matches, acknowledged.
		ackedTerminal := map[string]bool{}
		for _, e := range s.acked {
			ackedTerminal[e.ID+"/"+e.Status] = true
		}
		var expected, missing int64
		for _, id := range sortedKeys(final) {
			t := final[id]
			if t.Pool != s.spec.Pool || !workload.TerminalStatus(t.Status) || !s.matches(t.Status) {
				continue
			}
			expected++
			if ackedTerminal[id+"/"+t.Status] {
				continue
			}
			missing++
			why := "never delivered"
			var ops []int64
			for c, e := range s.delivered {
				if e.ID != id || e.Status != t.Status {
					continue
				}
				ops = append(ops, s.deliveredOp[c])
				switch {
				case s.pendingAck[c]:
					why = fmt.Sprintf("delivered at cursor %d and processed, but no ack covering it was answered ok", c)
				case s.dropped[c]:
					why = fmt.Sprintf("delivered at cursor %d only in reads the consumer discarded, never again", c)
				default:
					why = fmt.Sprintf("delivered at cursor %d but never acknowledged", c)
				}
			}
			if !s.caughtUp || !drainOK {
				unconfirmed++
				continue
			}
			r.fail("D1", ops, "%s: terminal event of task %s (%s) lost: %s", name, id, t.Status, why)
		}
		if final == nil {
			r.unknown("%s: no final read of the tasks", name)
		} else if !s.caughtUp {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: the consumer did not catch up after the drain", name))
		}
		pre := name + "."
		r.Counts[pre+"expected_terminal"] = expected
		r.Counts[pre+"missing_terminal"] = missing
		r.Counts[pre+"delivered_events"] = int64(len(s.delivered))
		r.Counts[pre+"deliveries"] = s.deliveries
		r.Counts[pre+"redelivered"] = s.redelivered
		r.Counts[pre+"acked_events"] = int64(len(s.acked))
		r.Counts[pre+"acked_during_faults"] = s.faultAcked
		r.Counts[pre+"discarded_reads"] = s.drops
		r.Counts[pre+"streams"] = int64(len(s.sessions))
		r.Counts[pre+"acks_ok"] = s.acksOK
		r.Counts[pre+"acks_fail"] = s.acksFail
		r.Counts[pre+"acks_unknown"] = s.acksInfo
	}
	if unconfirmed > 0 {
		r.unknown("%d terminal events not acknowledged, and the consumer did not catch up after a complete drain: cannot tell lost from late", unconfirmed)
	}
	if p.FaultEnd > p.FaultStart && faultAcked == 0 {
		r.unknown("no event was acknowledged during the faults")
	}
	return r
}
