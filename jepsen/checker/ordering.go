package checker

import (
	"fmt"
	"sort"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// The ordering checker's rules (pool lanes; the tasks of one ordering key
// form a lane, in id order):
//
//	O1 one at a time: two different tasks of a lane never hold current
//	   leases at once. A lease is current from the moment its grant
//	   commits until its attempt ends. What the history proves:
//	   - an attempt whose completion was accepted held a current lease
//	     from before its worker read the grant until after the worker
//	     first sent that completion (a node accepts a completion only
//	     under the current lease, and leases never come back);
//	   - every other attempt (refused as stale, outcome unknown, never
//	     completed) held a current lease at least at the moment its grant
//	     committed, which is before its worker read it and, tokens being
//	     drawn from one rising sequence in commit order, after the commit
//	     of every lease with a smaller token.
//	   So there is a violation when an attempt Y, accepted, and an attempt
//	   X of another task of the lane with a larger token are such that X's
//	   grant was read before Y's completion was first sent: X's lease was
//	   granted while Y's was current. An attempt that lost its lease (a
//	   paused worker, a leader change) and then ran on beside the next
//	   task of its lane is no violation; nor is a stale attempt running
//	   beside a newer attempt of its own task. Time is the order in which
//	   the harness recorded the worker's observations (one recorder, one
//	   lock, one monotonic clock), so no tolerance is needed. An accepted
//	   completion sent after a newer lease of its own task was read proves
//	   nothing (a fencing bug, the queue checker's Q6) and is not used.
//	O2 submit order: a task of a lane is granted only once every earlier
//	   task of the lane has ended (retries keep the head's place; under
//	   policy continue a head that ends without succeeding lets the next
//	   one run). An earlier task is one acknowledged before the later one
//	   was first submitted and with a smaller id, or one before it in the
//	   same atomic batch. Violations: the earlier task was granted a lease
//	   with a larger token than one of the later task's (it had not ended
//	   when the later one started, whether it had started or not), or it
//	   is still live in the final read although the later one ran.
//	O3 accounting: every acknowledged task is in the final read with its
//	   ordering key, the ids of a batch rise in spec order, a key names
//	   one task, every task of the pool was submitted, grants carry their
//	   task's key, and every task ended once the pool drained.

// ordAttempt is one lease of an ordering task, as its worker saw it.
type ordAttempt struct {
	task    string
	token   uint64
	attempt int
	worker  string
	grant   history.Op // the worker's record of the grant
	// endIdx and end are the history index and time at which the first
	// completion under this lease was sent (-1: none was).
	endIdx int64
	end    int64
	fate   tokenFate
	// superseded: a newer lease of the same task was read before the
	// completion was sent.
	superseded bool
}

// accepted reports whether the attempt provably held a current lease from
// its grant to its end.
func (a *ordAttempt) accepted() bool {
	return a.fate == fateAccepted && a.endIdx >= 0 && !a.superseded
}

// ordTask is one task of the lanes pool.
type ordTask struct {
	id   string
	okey string
	key  string // idempotency key
	// ackIdx is the history index of its first acknowledged submit (-1:
	// none); batch names that submit (its completion index) and pos its
	// place in the batch.
	ackIdx   int64
	ackTime  int64
	batch    int64
	pos      int
	attempts []*ordAttempt // by token
	final    *history.TaskState
	// last is the history index of the last thing its workers did (-1:
	// nothing).
	last int64
}

// firstToken is the smallest lease token any worker read for the task (0:
// none).
func (t *ordTask) firstToken() (uint64, *ordAttempt) {
	var best *ordAttempt
	for _, a := range t.attempts {
		if best == nil || a.token < best.token {
			best = a
		}
	}
	if best == nil {
		return 0, nil
	}
	return best.token, best
}

// maxToken is the largest lease token any worker read for the task (0:
// none).
func (t *ordTask) maxToken() uint64 {
	if len(t.attempts) == 0 {
		return 0
	}
	return t.attempts[len(t.attempts)-1].token
}

// ordWorld is what the history says of the lanes pool.
type ordWorld struct {
	tasks    map[string]*ordTask
	byLane   map[string][]*ordTask // sorted by id
	attempts int
	// firstSubmit maps an idempotency key to the index of the first
	// submit that carried it.
	firstSubmit map[string]int64
	// acks lists the acknowledged submits: keys and ids in spec order.
	acks       []history.Pair
	keysTried  map[string]bool
	keysFailed map[string]bool // every submit carrying it definitely failed
	final      []history.TaskState
	finalIdx   int64
	haveFinal  bool
	completeOK int64
	stale      int64
}

func ordCollect(pairs []history.Pair) *ordWorld {
	const pool = workload.LanesPool
	w := &ordWorld{tasks: map[string]*ordTask{}, byLane: map[string][]*ordTask{}, firstSubmit: map[string]int64{},
		keysTried: map[string]bool{}, keysFailed: map[string]bool{}}
	task := func(id string) *ordTask {
		t := w.tasks[id]
		if t == nil {
			t = &ordTask{id: id, ackIdx: -1, batch: -1}
			w.tasks[id] = t
		}
		return t
	}
	byToken := map[uint64]*ordAttempt{}
	type comp struct {
		v   *history.Value
		typ history.Type
		idx int64
		t   int64
	}
	var comps []comp
	for _, p := range pairs {
		v := p.InvokeValue()
		if v.Pool != pool {
			continue
		}
		switch p.F() {
		case workload.OrdSubmit:
			if p.Invoke == nil {
				continue
			}
			for _, k := range v.Keys {
				if _, ok := w.firstSubmit[k]; !ok {
					w.firstSubmit[k] = p.Invoke.Index
					w.keysFailed[k] = true
				}
				w.keysTried[k] = true
				if p.Type() != history.Fail {
					w.keysFailed[k] = false
				}
			}
			if p.Type() != history.OK || p.Completion.Value == nil {
				continue
			}
			w.acks = append(w.acks, p)
			cv := p.Completion.Value
			for i, id := range cv.IDs {
				t := task(id)
				if t.ackIdx < 0 {
					t.ackIdx, t.ackTime, t.batch, t.pos = p.Completion.Index, p.Completion.Time, p.Completion.Index, i
					t.okey = v.OrderingKey
					if i < len(v.Keys) {
						t.key = v.Keys[i]
					}
				}
			}
		case "grant":
			if p.Completion == nil || v.ID == "" {
				continue
			}
			if a := byToken[v.Token]; a != nil {
				continue // the same grant read again
			}
			t := task(v.ID)
			if t.key == "" {
				t.key = v.Key
			}
			a := &ordAttempt{task: v.ID, token: v.Token, attempt: v.Attempt, worker: p.Process(), grant: *p.Completion, endIdx: -1, end: -1}
			byToken[v.Token] = a
			t.attempts = append(t.attempts, a)
			w.attempts++
		case "complete":
			if p.Invoke == nil {
				continue
			}
			comps = append(comps, comp{v: v, typ: p.Type(), idx: p.Invoke.Index, t: p.Invoke.Time})
			switch {
			case p.Type() == history.OK:
				w.completeOK++
			case p.Type() == history.Fail && p.Completion.Value != nil && p.Completion.Value.Code == "stale_lease":
				w.stale++
			}
		}
	}
	// Completions: when each lease's first was sent, and their fate.
	unknown := map[uint64]bool{}
	for _, c := range comps {
		a := byToken[c.v.Token]
		if a == nil {
			continue // its grant was not recorded: nothing to place it against
		}
		if a.endIdx < 0 || c.idx < a.endIdx {
			a.endIdx, a.end = c.idx, c.t
		}
		switch c.typ {
		case history.OK:
			a.fate = fateAccepted
		case history.Fail:
			if a.fate != fateAccepted {
				a.fate = fateRefused
			}
		default:
			unknown[c.v.Token] = true
		}
	}
	for tok := range unknown {
		if a := byToken[tok]; a.fate != fateAccepted {
			a.fate = fateUnknown
		}
	}
	// The final read: each task's key, and which lease ended it.
	all, idx, ok := finalTasks(pairs)
	w.finalIdx, w.haveFinal = idx, ok
	for i := range all {
		ft := all[i]
		if ft.Pool != pool {
			continue
		}
		w.final = append(w.final, ft)
		t := task(ft.ID)
		t.final = &w.final[len(w.final)-1]
		if t.okey == "" {
			t.okey = ft.OrderingKey
		}
		if t.key == "" {
			t.key = ft.Key
		}
		if tok := endLease(ft); tok != 0 {
			if a := byToken[tok]; a != nil && a.task == ft.ID {
				a.fate = fateAccepted
			}
		}
	}
	for _, t := range w.tasks {
		if t.okey == "" {
			// Only a grant saw it: take the key its grant or payload names.
			for _, a := range t.attempts {
				if gv := a.grant.Value; gv != nil {
					if gv.OrderingKey != "" {
						t.okey = gv.OrderingKey
					} else if k := workload.LaneKeyOf(gv.Payload); k != "" {
						t.okey = k
					}
				}
			}
		}
		sort.Slice(t.attempts, func(i, j int) bool { return t.attempts[i].token < t.attempts[j].token })
		t.last = -1
		for _, a := range t.attempts {
			t.last = max(t.last, a.grant.Index, a.endIdx)
			for _, b := range t.attempts {
				if b.token > a.token && a.endIdx >= 0 && b.grant.Index < a.endIdx {
					a.superseded = true
				}
			}
		}
		if t.okey != "" {
			w.byLane[t.okey] = append(w.byLane[t.okey], t)
		}
	}
	for _, ts := range w.byLane {
		sort.Slice(ts, func(i, j int) bool { return ts[i].id < ts[j].id })
	}
	return w
}

// before reports whether a is an earlier task of b's lane than b: a was
// acknowledged before b was first submitted and has a smaller id, or a
// comes before b in the same atomic batch.
func (w *ordWorld) before(a, b *ordTask) bool {
	if a.ackIdx < 0 || a == b {
		return false
	}
	if a.batch >= 0 && a.batch == b.batch {
		return a.pos < b.pos
	}
	sub, ok := w.firstSubmit[b.key]
	return ok && a.ackIdx < sub && a.id < b.id
}

// waited counts the acknowledged tasks that, when acknowledged, had an
// earlier task of their lane that workers were still busy with, among
// those first granted within [from, to] (history ns); depth is the most
// such earlier tasks any one had.
func (w *ordWorld) waited(from, to int64) (n, depth int64) {
	for _, ts := range w.byLane {
		for i, b := range ts {
			if b.ackIdx < 0 {
				continue
			}
			_, first := b.firstToken()
			if first == nil || first.grant.Time < from || first.grant.Time > to {
				continue
			}
			var d int64
			for _, a := range ts[:i] {
				if a.last > b.ackIdx {
					d++
				}
			}
			if d > 0 {
				n++
				depth = max(depth, d)
			}
		}
	}
	return n, depth
}

// LaneWaitsDuring counts the ordering tasks first granted within
// [from, to] that had waited behind an earlier task of their lane.
func LaneWaitsDuring(ops []history.Op, from, to int64) int64 {
	n, _ := ordCollect(history.Pairs(ops)).waited(from, to)
	return n
}

// maxOverlap is the most attempts of one lane whose [grant, first
// completion sent] spans overlap, among those keep selects.
func maxOverlap(ts []*ordTask, keep func(a *ordAttempt) bool) int64 {
	type ev struct {
		at int64
		d  int64
	}
	var evs []ev
	for _, t := range ts {
		for _, a := range t.attempts {
			if a.endIdx >= 0 && keep(a) {
				evs = append(evs, ev{a.grant.Index, 1}, ev{a.endIdx, -1})
			}
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var cur, best int64
	for _, e := range evs {
		cur += e.d
		best = max(best, cur)
	}
	return best
}

func secs(t int64) string { return fmt.Sprintf("%.3fs", float64(t)/1e9) }

// Ordering checks the ordering workload: O1..O3.
func Ordering(ops []history.Op, _ Params) *Result {
	r := newResult("ordering")
	pairs := history.Pairs(ops)
	w := ordCollect(pairs)

	var acked, batches, batchTasks, retried int64
	for _, p := range w.acks {
		n := int64(len(p.Completion.Value.IDs))
		if n > 1 {
			batches++
			batchTasks += n
		}
	}
	for _, t := range w.tasks {
		if t.ackIdx >= 0 {
			acked++
		}
		if len(t.attempts) > 1 {
			retried++
		}
	}
	var maxAccepted, maxHeld int64
	for _, ts := range w.byLane {
		maxAccepted = max(maxAccepted, maxOverlap(ts, (*ordAttempt).accepted))
		maxHeld = max(maxHeld, maxOverlap(ts, func(*ordAttempt) bool { return true }))
	}
	waited, depth := w.waited(0, 1<<62)
	r.Counts["lanes"] = int64(len(w.byLane))
	r.Counts["tasks"] = int64(len(w.tasks))
	r.Counts["acked_tasks"] = acked
	r.Counts["batches"] = batches
	r.Counts["batch_tasks"] = batchTasks
	r.Counts["attempts"] = int64(w.attempts)
	r.Counts["retried_tasks"] = retried
	r.Counts["completions_ok"] = w.completeOK
	r.Counts["completions_stale"] = w.stale
	r.Counts["waited_in_lane"] = waited
	r.Counts["max_lane_depth"] = depth
	r.Counts["max_concurrent_per_key"] = maxAccepted
	r.Counts["max_held_per_key"] = maxHeld
	r.Counts["final_tasks"] = int64(len(w.final))

	// O1: no lease of another task of the lane granted while an accepted
	// attempt's lease was current.
	var staleBeside int64
	for _, key := range sortedKeys(w.byLane) {
		var as []*ordAttempt
		for _, t := range w.byLane[key] {
			as = append(as, t.attempts...)
		}
		sort.Slice(as, func(i, j int) bool { return as[i].token < as[j].token })
		reported := map[[2]string]bool{}
		for i, y := range as {
			if y.endIdx < 0 {
				continue
			}
			beside := false
			for _, x := range as[i+1:] {
				if x.task == y.task || x.grant.Index >= y.endIdx {
					continue
				}
				if !y.accepted() {
					// Y's lease may have been gone by then: a stale attempt
					// running beside a later task of its lane.
					beside = true
					continue
				}
				pair := [2]string{y.task, x.task}
				if reported[pair] {
					r.AnomalyCount["O1"]++
					continue
				}
				reported[pair] = true
				r.fail("O1", []int64{y.grant.Index, x.grant.Index, y.endIdx},
					"lane %s: task %s was granted lease %d (read by %s at %s) while task %s held lease %d (read by %s at %s, its completion sent at %s and accepted)",
					key, x.task, x.token, x.worker, secs(x.grant.Time), y.task, y.token, y.worker, secs(y.grant.Time), secs(y.end))
			}
			if beside {
				staleBeside++
			}
		}
	}
	// Attempts not known to hold their lease to the end (refused, unknown,
	// or superseded) that workers ran beside a later task of their lane.
	r.Counts["stale_beside_next"] = staleBeside

	// O2: a task starts only once every earlier task of its lane ended.
	var pairsChecked int64
	for _, key := range sortedKeys(w.byLane) {
		ts := w.byLane[key]
		for _, b := range ts {
			tb, fb := b.firstToken()
			if fb == nil {
				continue
			}
			for _, a := range ts {
				if !w.before(a, b) {
					continue
				}
				pairsChecked++
				if a.maxToken() < tb && (a.final == nil || isTerminalStatus(a.final.Status)) {
					continue
				}
				var late *ordAttempt
				for _, x := range a.attempts {
					if x.token > tb && (late == nil || x.token < late.token) {
						late = x
					}
				}
				switch {
				case late != nil && a.attempts[0] == late:
					r.fail("O2", []int64{a.ackIdx, fb.grant.Index, late.grant.Index},
						"lane %s: task %s was granted lease %d (read at %s) before the earlier task %s started (its first lease read is %d, at %s)",
						key, b.id, tb, secs(fb.grant.Time), a.id, late.token, secs(late.grant.Time))
				case late != nil:
					r.fail("O2", []int64{a.ackIdx, fb.grant.Index, late.grant.Index},
						"lane %s: task %s was granted lease %d (read at %s) before the earlier task %s ended (it was granted lease %d afterwards, read at %s)",
						key, b.id, tb, secs(fb.grant.Time), a.id, late.token, secs(late.grant.Time))
				case a.final != nil && !isTerminalStatus(a.final.Status):
					r.fail("O2", []int64{a.ackIdx, fb.grant.Index, w.finalIdx},
						"lane %s: task %s was granted lease %d (read at %s) although the earlier task %s never ended: it is still %s in the final read",
						key, b.id, tb, secs(fb.grant.Time), a.id, a.final.Status)
				}
			}
		}
	}
	r.Counts["ordered_pairs"] = pairsChecked

	// O3: accounting.
	for _, p := range w.acks {
		cv := p.Completion.Value
		for i := 1; i < len(cv.IDs); i++ {
			if cv.IDs[i] <= cv.IDs[i-1] {
				r.fail("O3", []int64{p.Completion.Index}, "batch of lane %s: ids do not rise in spec order: %v", p.InvokeValue().OrderingKey, cv.IDs)
				break
			}
		}
		if len(cv.IDs) != len(p.InvokeValue().Keys) {
			r.fail("O3", []int64{p.Completion.Index}, "submit of %d tasks was answered with %d ids", len(p.InvokeValue().Keys), len(cv.IDs))
		}
	}
	ackedAs := map[string]map[string]bool{} // idempotency key -> ids acked
	for _, p := range w.acks {
		keys := p.InvokeValue().Keys
		for i, id := range p.Completion.Value.IDs {
			if i < len(keys) {
				if ackedAs[keys[i]] == nil {
					ackedAs[keys[i]] = map[string]bool{}
				}
				ackedAs[keys[i]][id] = true
			}
		}
	}
	for _, k := range sortedKeys(ackedAs) {
		if len(ackedAs[k]) > 1 {
			r.fail("O3", nil, "key %s was acknowledged as %d tasks: %v", k, len(ackedAs[k]), sortedKeys(ackedAs[k]))
		}
	}
	for _, id := range sortedKeys(w.tasks) {
		t := w.tasks[id]
		for _, a := range t.attempts {
			if gv := a.grant.Value; gv != nil && gv.OrderingKey != "" && t.okey != "" && gv.OrderingKey != t.okey {
				r.fail("O3", []int64{a.grant.Index}, "task %s of lane %s was granted with ordering key %s", id, t.okey, gv.OrderingKey)
			}
		}
	}
	if !w.haveFinal {
		if len(w.tasks) > 0 {
			r.unknown("no final read of the tasks: O2 (tasks that never ran) and O3 cannot be decided")
		}
		return r
	}
	fi := []int64{w.finalIdx}
	perKey := map[string][]string{}
	for _, ft := range w.final {
		perKey[ft.Key] = append(perKey[ft.Key], ft.ID)
		t := w.tasks[ft.ID]
		switch {
		case !w.keysTried[ft.Key]:
			r.fail("O3", fi, "task %s (key %q) in pool %s was never submitted", ft.ID, ft.Key, workload.LanesPool)
		case w.keysFailed[ft.Key]:
			r.fail("O3", fi, "task %s exists for key %s whose every submit definitely failed", ft.ID, ft.Key)
		}
		if t.ackIdx >= 0 && ft.OrderingKey != t.okey {
			r.fail("O3", []int64{t.ackIdx, w.finalIdx}, "task %s was submitted with ordering key %s but has %q", ft.ID, t.okey, ft.OrderingKey)
		}
	}
	for _, k := range sortedKeys(perKey) {
		if len(perKey[k]) > 1 {
			r.fail("O3", fi, "key %s names %d tasks: %v", k, len(perKey[k]), perKey[k])
		}
	}
	drained := poolDrained(pairs, workload.LanesPool)
	var live int64
	for _, id := range sortedKeys(w.tasks) {
		t := w.tasks[id]
		if t.final == nil {
			if t.ackIdx >= 0 {
				r.fail("O3", []int64{t.ackIdx, w.finalIdx}, "acknowledged task %s (lane %s, key %s) is missing from the final read", id, t.okey, t.key)
			} else if len(t.attempts) > 0 {
				r.fail("O3", []int64{t.attempts[0].grant.Index, w.finalIdx}, "task %s was granted to %s but is missing from the final read", id, t.attempts[0].worker)
			}
			continue
		}
		if !isTerminalStatus(t.final.Status) {
			live++
			if drained {
				r.fail("O3", fi, "task %s of lane %s is still %s after the pool drained", id, t.okey, t.final.Status)
			}
		}
	}
	r.Counts["not_terminal"] = live
	if live > 0 && !drained {
		r.unknown("the drain timed out: %d tasks of the lanes were not terminal at the end", live)
	}
	return r
}
