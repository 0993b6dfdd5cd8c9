package checker

import (
	"sort"
	"strings"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

type grantObs struct {
	op      history.Op
	token   uint64
	attempt int
	worker  string
}

type completionObs struct {
	pair    history.Pair
	token   uint64
	outcome string
	output  string
	typ     history.Type
	code    string
}

type cancelObs struct {
	pair      history.Pair
	typ       history.Type
	cancelled bool
	// lastLease is the task's highest lease when the cancel took effect,
	// as the cluster answered it (nil in a history without it).
	lastLease *uint64
}

func terminalOutcome(o string) bool { return o == "success" || o == "permanent" }

func isTerminalStatus(s string) bool {
	switch s {
	case "succeeded", "failed", "cancelled", "expired":
		return true
	}
	return false
}

// finalTasks returns the tasks of the last successful final read, and
// whether there was one.
func finalTasks(pairs []history.Pair) ([]history.TaskState, int64, bool) {
	var tasks []history.TaskState
	idx, ok := int64(-1), false
	for _, p := range pairs {
		if p.F() == workload.FinalTasks && p.Type() == history.OK && p.Completion.Value != nil {
			tasks, idx, ok = p.Completion.Value.Tasks, p.Completion.Index, true
		}
	}
	return tasks, idx, ok
}

// Queue checks the queue workload (pool q): Q1..Q9 of the design.
func Queue(ops []history.Op, _ Params) *Result {
	r := newResult("queue")
	pairs := history.Pairs(ops)
	const pool = workload.QueuePool
	issued := tokensIssued(ops)

	type keyInfo struct {
		attempts []history.Pair
		okIDs    map[string]bool
		ackTime  int64
		allFail  bool
	}
	keys := map[string]*keyInfo{}
	grants := map[string][]grantObs{}     // task id -> grants
	comps := map[string][]completionObs{} // task id -> completions
	cancels := map[string][]cancelObs{}   // task id -> cancels
	for _, p := range pairs {
		v := p.InvokeValue()
		switch p.F() {
		case "submit":
			if v.Pool != pool {
				continue
			}
			k := keys[v.Key]
			if k == nil {
				k = &keyInfo{okIDs: map[string]bool{}, allFail: true}
				keys[v.Key] = k
			}
			k.attempts = append(k.attempts, p)
			switch p.Type() {
			case history.OK:
				k.okIDs[p.Completion.Value.ID] = true
				if k.ackTime == 0 {
					k.ackTime = p.End()
				}
				k.allFail = false
			case history.Fail:
			default:
				k.allFail = false
			}
		case "grant":
			if p.Completion == nil || v.Pool != pool {
				continue
			}
			grants[v.ID] = append(grants[v.ID], grantObs{op: *p.Completion, token: v.Token, attempt: v.Attempt, worker: p.Process()})
		case "complete":
			if v.Pool != pool {
				continue
			}
			c := completionObs{pair: p, token: v.Token, outcome: v.Outcome, output: v.Output, typ: p.Type()}
			if p.Completion != nil && p.Completion.Value != nil {
				c.code = p.Completion.Value.Code
			}
			comps[v.ID] = append(comps[v.ID], c)
		case "cancel":
			if v.Pool != pool {
				continue
			}
			c := cancelObs{pair: p, typ: p.Type()}
			if c.typ == history.OK && p.Completion.Value != nil && p.Completion.Value.Cancelled != nil {
				c.cancelled = *p.Completion.Value.Cancelled
				c.lastLease = p.Completion.Value.LastLease
			}
			cancels[v.ID] = append(cancels[v.ID], c)
		}
	}

	all, finalIdx, haveFinal := finalTasks(pairs)
	var final []history.TaskState
	for _, t := range all {
		if t.Pool == pool {
			final = append(final, t)
		}
	}
	byKey := map[string][]history.TaskState{}
	byID := map[string]history.TaskState{}
	for _, t := range final {
		byKey[t.Key] = append(byKey[t.Key], t)
		byID[t.ID] = t
	}
	fi := []int64{finalIdx}

	var acked, defFailed, unknown int64
	for _, k := range keys {
		switch {
		case len(k.okIDs) > 0:
			acked++
		case k.allFail:
			defFailed++
		default:
			unknown++
		}
	}
	r.Counts["attempted_keys"] = int64(len(keys))
	r.Counts["acked_keys"] = acked
	r.Counts["definitely_failed_keys"] = defFailed
	r.Counts["unknown_keys"] = unknown
	r.Counts["final_tasks"] = int64(len(final))
	nGrants := 0
	for _, g := range grants {
		nGrants += len(g)
	}
	r.Counts["grants"] = int64(nGrants)
	var compOK, compStale int64
	for _, cs := range comps {
		for _, c := range cs {
			switch {
			case c.typ == history.OK:
				compOK++
			case c.code == "stale_lease":
				compStale++
			}
		}
	}
	r.Counts["completions_ok"] = compOK
	r.Counts["completions_stale"] = compStale
	nCancels := 0
	for _, c := range cancels {
		nCancels += len(c)
	}
	r.Counts["cancels"] = int64(nCancels)

	if !haveFinal {
		r.unknown("no final read of the tasks: Q1-Q9 cannot be decided")
		return r
	}

	// Q1: every acked key has its task, terminal after the drain. Lost
	// keys are split by ack time relative to the keys that survived.
	type ackedKey struct {
		key  string
		t    int64
		lost bool
	}
	drained := queueDrained(pairs)
	var ak []ackedKey
	var live int64
	for key, k := range keys {
		if len(k.okIDs) == 0 {
			continue
		}
		ts := byKey[key]
		ak = append(ak, ackedKey{key: key, t: k.ackTime, lost: len(ts) == 0})
		if len(ts) > 0 && !isTerminalStatus(ts[0].Status) {
			live++
			if drained {
				r.fail("Q1", fi, "acked task %s (key %s) is still %s after the queue drained", ts[0].ID, key, ts[0].Status)
			}
		}
	}
	r.Counts["not_terminal"] = live
	if live > 0 && !drained {
		r.unknown("the drain timed out: %d acked tasks were not terminal at the end", live)
	}
	sort.Slice(ak, func(i, j int) bool { return ak[i].t < ak[j].t })
	first, last := -1, -1
	for i, a := range ak {
		if !a.lost {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	var lost [3]int64
	for i, a := range ak {
		if !a.lost {
			continue
		}
		where := "middle"
		switch {
		case first < 0 || i < first:
			where = "prefix"
		case i > last:
			where = "postfix"
		}
		switch where {
		case "prefix":
			lost[0]++
		case "middle":
			lost[1]++
		default:
			lost[2]++
		}
		var idx []int64
		for _, p := range keys[a.key].attempts {
			if p.Type() == history.OK {
				idx = append(idx, p.Completion.Index)
			}
		}
		r.fail("Q1", idx, "acked submit of key %s lost (%s)", a.key, where)
	}
	r.Counts["lost_prefix"], r.Counts["lost_middle"], r.Counts["lost_postfix"] = lost[0], lost[1], lost[2]
	for id, gs := range grants {
		if _, ok := byID[id]; !ok {
			r.fail("Q1", []int64{gs[0].op.Index}, "task %s was granted to %s but is missing from the final state", id, gs[0].worker)
		}
	}

	// Q2: no task with a key never attempted. Q3: no task whose every
	// submit definitely failed.
	for _, t := range final {
		k, ok := keys[t.Key]
		switch {
		case !ok:
			r.fail("Q2", fi, "unexpected task %s with key %q that no client submitted", t.ID, t.Key)
		case k.allFail:
			r.fail("Q3", fi, "task %s exists for key %s whose every submit definitely failed", t.ID, t.Key)
		}
	}

	// Q2 for the other workloads' pools: every task comes from a submit or
	// a schedule of this run.
	regKeys := map[string]bool{}
	for _, p := range pairs {
		if p.F() == workload.RegSubmit {
			regKeys[p.InvokeValue().Key] = true
		}
	}
	for _, t := range all {
		switch {
		case t.Pool == pool:
		case t.Pool == workload.WorkflowPool:
			// The workflow checker accounts for these (W6).
		case t.Pool == workload.LanesPool:
			// The ordering checker accounts for these (O3).
		case t.Pool == workload.CronPool:
			if t.Schedule == "" {
				r.fail("Q2", fi, "unexpected task %s in pool %s without a schedule", t.ID, t.Pool)
			}
		case workload.IsRegisterKey(t.Pool):
			if !regKeys[t.Key] {
				r.fail("Q2", fi, "unexpected task %s with key %q in pool %s that no client submitted", t.ID, t.Key, t.Pool)
			}
		default:
			r.fail("Q2", fi, "unexpected task %s in pool %q", t.ID, t.Pool)
		}
	}

	// Q4: one task per key, and every ack of a key named it.
	for key, ts := range byKey {
		if len(ts) > 1 {
			ids := make([]string, len(ts))
			for i, t := range ts {
				ids[i] = t.ID
			}
			r.fail("Q4", fi, "key %s has %d tasks: %s", key, len(ts), strings.Join(ids, ", "))
		}
	}
	for key, k := range keys {
		if len(k.okIDs) > 1 {
			r.fail("Q4", nil, "acked submits of key %s returned different ids: %v", key, sortedKeys(k.okIDs))
		}
		if ts := byKey[key]; len(ts) == 1 && len(k.okIDs) > 0 && !k.okIDs[ts[0].ID] {
			r.fail("Q4", fi, "key %s was acked as %v but its task is %s", key, sortedKeys(k.okIDs), ts[0].ID)
		}
	}

	// Per task: Q5..Q9.
	var retried, multiExec int64
	ids := map[string]bool{}
	for id := range grants {
		ids[id] = true
	}
	for id := range comps {
		ids[id] = true
	}
	for id := range cancels {
		ids[id] = true
	}
	for _, t := range final {
		ids[t.ID] = true
	}
	for _, id := range sortedKeys(ids) {
		t, haveT := byID[id]
		gs := grants[id]
		cs := comps[id]
		if haveT && t.Attempt > 1 {
			retried++
		}
		successInvoked := map[uint64]bool{}
		for _, c := range cs {
			if c.outcome == "success" {
				successInvoked[c.token] = true
			}
		}
		if len(successInvoked) > 1 {
			multiExec++
		}

		// Q6 (a): one token per attempt, tokens rising with attempts.
		byAttempt := map[int]uint64{}
		for _, g := range gs {
			if prev, ok := byAttempt[g.attempt]; ok && prev != g.token {
				r.fail("Q6", []int64{g.op.Index}, "task %s: attempt %d was granted under two leases %d and %d", id, g.attempt, prev, g.token)
			}
			byAttempt[g.attempt] = g.token
		}
		atts := make([]int, 0, len(byAttempt))
		for a := range byAttempt {
			atts = append(atts, a)
		}
		sort.Ints(atts)
		for i := 1; i < len(atts); i++ {
			if byAttempt[atts[i]] <= byAttempt[atts[i-1]] {
				r.fail("Q6", nil, "task %s: lease of attempt %d (%d) is not above attempt %d's (%d)", id, atts[i], byAttempt[atts[i]], atts[i-1], byAttempt[atts[i-1]])
			}
		}

		// Accepted completions. A completion re-sent after an unknown
		// outcome counts from its first sending.
		firstSend := map[uint64]int64{}
		for _, c := range cs {
			if t0, ok := firstSend[c.token]; !ok || c.pair.Start() < t0 {
				firstSend[c.token] = c.pair.Start()
			}
		}
		var terminalOK []completionObs
		for _, c := range cs {
			if c.typ != history.OK {
				continue
			}
			if terminalOutcome(c.outcome) {
				terminalOK = append(terminalOK, c)
			}
			// Q6 (b): accepted although a newer lease had been granted
			// before it was sent.
			for _, g := range gs {
				if g.token > c.token && g.op.Time < firstSend[c.token] {
					r.fail("Q6", []int64{g.op.Index, c.pair.Completion.Index},
						"task %s: completion under lease %d accepted although lease %d was granted (to %s) before it was sent", id, c.token, g.token, g.worker)
					break
				}
			}
		}
		// Q5: at most one accepted terminal completion.
		tokens := map[uint64]bool{}
		for _, c := range terminalOK {
			tokens[c.token] = true
		}
		if len(tokens) > 1 {
			var idx []int64
			for _, c := range terminalOK {
				idx = append(idx, c.pair.Completion.Index)
			}
			r.fail("Q5", idx, "task %s: %d completions accepted (leases %v)", id, len(tokens), keysU64(tokens))
		}
		// Q6 (c): nothing is granted after an accepted terminal completion
		// or an accepted cancel. A grant is observed when a worker reads
		// it, which may be long after it was issued (a paused worker reads
		// what waited in its socket): what dates the issue is the token,
		// since the cluster issues tokens in rising order. A grant after a
		// completion has a higher token than the completed lease; a grant
		// after a cancel has a higher token than every grant read before
		// the cancel was sent.
		for _, g := range gs {
			for _, c := range terminalOK {
				if g.token > c.token && c.pair.End() < g.op.Time {
					r.fail("Q6", []int64{c.pair.Completion.Index, g.op.Index}, "task %s: lease %d granted after its completion under lease %d was accepted", id, g.token, c.token)
				}
			}
			for _, cn := range cancels[id] {
				// The cancel's answer names the task's last lease when
				// it took effect: a grant above it came after. Without
				// it, a grant above every token read before the cancel
				// was sent, read after its answer, is taken to be later
				// (which a grant racing the cancel can also be).
				after := g.token > issued.maxBefore(cn.pair.Start())
				if cn.lastLease != nil {
					after = g.token > *cn.lastLease
				}
				if cn.typ == history.OK && cn.cancelled && cn.pair.End() < g.op.Time && after {
					r.fail("Q6", []int64{cn.pair.Completion.Index, g.op.Index}, "task %s: lease %d granted after the task was cancelled", id, g.token)
				}
			}
		}

		if !haveT {
			continue
		}
		// Q7: accepted completions are in the final state, refused ones
		// are not.
		for _, c := range terminalOK {
			switch c.outcome {
			case "success":
				if t.Status != "succeeded" || t.Output != c.output {
					r.fail("Q7", []int64{c.pair.Completion.Index}, "task %s: completion under lease %d was accepted (output %s) but the task ended %s with output %q", id, c.token, c.output, t.Status, t.Output)
				}
			case "permanent":
				if t.Status != "failed" || t.Error != workload.ErrorFor(c.token) {
					r.fail("Q7", []int64{c.pair.Completion.Index}, "task %s: permanent failure under lease %d was accepted but the task ended %s (%q)", id, c.token, t.Status, t.Error)
				}
			}
		}
		refused := map[uint64]bool{}
		maybe := map[uint64]bool{}
		for _, c := range cs {
			switch {
			case c.typ == history.Fail && c.code == "stale_lease":
				refused[c.token] = true
			case c.typ != history.Fail:
				maybe[c.token] = true
			}
		}
		if t.Status == "succeeded" {
			won := uint64(0)
			for _, c := range cs {
				if c.outcome == "success" && c.output == t.Output {
					won = c.token
				}
			}
			switch {
			case won == 0:
				r.fail("Q7", fi, "task %s succeeded with output %q that no worker reported", id, t.Output)
			case refused[won] && !maybe[won]:
				r.fail("Q7", fi, "task %s: completion under lease %d was refused as stale but is the recorded result", id, won)
			}
		}

		// Q8: cancel and completion agree.
		cancelled := false
		var cancelIdx int64
		cancelInvoked := false
		for _, cn := range cancels[id] {
			cancelInvoked = true
			if cn.typ == history.OK && cn.cancelled {
				cancelled, cancelIdx = true, cn.pair.Completion.Index
			}
		}
		if cancelled {
			if t.Status != "cancelled" {
				r.fail("Q8", []int64{cancelIdx}, "task %s: cancel acknowledged but the task ended %s", id, t.Status)
			}
			for _, c := range terminalOK {
				r.fail("Q8", []int64{cancelIdx, c.pair.Completion.Index}, "task %s: both the cancel and the completion under lease %d were acknowledged", id, c.token)
			}
		}
		if t.Status == "cancelled" && !cancelInvoked {
			r.fail("Q8", fi, "task %s is cancelled but no client cancelled it", id)
		}

		// Q9: attempts within bounds.
		if t.MaxAttempts > 0 && t.Attempt > t.MaxAttempts {
			r.fail("Q9", fi, "task %s: %d attempts started, at most %d allowed", id, t.Attempt, t.MaxAttempts)
		}
		for _, g := range gs {
			if g.attempt > t.Attempt {
				r.fail("Q9", []int64{g.op.Index}, "task %s: attempt %d was granted but the task records only %d attempts", id, g.attempt, t.Attempt)
			}
			if t.MaxAttempts > 0 && g.attempt > t.MaxAttempts {
				r.fail("Q9", []int64{g.op.Index}, "task %s: attempt %d granted, at most %d allowed", id, g.attempt, t.MaxAttempts)
			}
		}
	}
	r.Counts["retried_tasks"] = retried
	r.Counts["executed_more_than_once"] = multiExec
	return r
}

// queueDrained reports whether the last drain of the queue pool completed.
func queueDrained(pairs []history.Pair) bool {
	drained := false
	for _, p := range pairs {
		if p.F() == workload.DrainOp && strings.Contains(p.InvokeValue().Detail, workload.QueuePool) {
			drained = p.Type() == history.OK
		}
	}
	return drained
}

func keysU64(m map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// tokenIndex tells, for an instant of the history, the highest lease token
// that some worker had read by then (of any pool: every lease of the
// cluster is drawn from one rising sequence).
type tokenIndex struct {
	times []int64  // of the grants read, in history order
	max   []uint64 // max[i]: the highest token among grants 0..i
}

func tokensIssued(ops []history.Op) tokenIndex {
	var ix tokenIndex
	var hi uint64
	for _, op := range ops {
		if op.F != "grant" || op.Type != history.OK || op.Value == nil {
			continue
		}
		hi = max(hi, op.Value.Token)
		ix.times = append(ix.times, op.Time)
		ix.max = append(ix.max, hi)
	}
	return ix
}

// maxBefore returns the highest token read strictly before t (0 if none).
func (ix tokenIndex) maxBefore(t int64) uint64 {
	i := sort.Search(len(ix.times), func(i int) bool { return ix.times[i] >= t })
	if i == 0 {
		return 0
	}
	return ix.max[i-1]
}
