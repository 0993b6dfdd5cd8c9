package checker

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// The workflow checker's rules (pool wf):
//
//	W1 a member is granted only once its dependencies allow it: under
//	   policy succeeded every dependency had succeeded (as the grant
//	   reported it, and in the final state), under policy done every one
//	   had ended; and no dependency's ending completion was sent after
//	   the dependent's grant was read.
//	W2 a member under policy succeeded with a dependency that did not
//	   succeed is never granted and ends cancelled.
//	W3 after a workflow cancel is acknowledged, no member is granted and
//	   no member's completion sent afterwards is accepted; a cancel that
//	   ended members leaves the workflow cancelled; nothing is ended by a
//	   workflow cancel nobody sent.
//	W4 children exist iff the parent's completion carrying them was
//	   accepted: none from a stale-refused completion, all (with the
//	   continuation depending on every child) from an accepted one, and
//	   never from two completions.
//	W5 every workflow's status is the one its members imply, and every
//	   workflow ended once the pool drained.
//	W6 no acknowledged workflow (or member) is lost, a key names one
//	   workflow, and no workflow or member exists that nobody submitted.

// wfKey is what the history says of one workflow key.
type wfKey struct {
	attempts []history.Pair
	okIDs    map[string]bool
	oks      []wfAck
	allFail  bool
}

// wfAck is one acknowledged submit: the workflow and its step -> task ids.
type wfAck struct {
	id    string
	steps map[string]string
	idx   int64
}

type wfComp struct {
	pair history.Pair
	v    *history.Value
	typ  history.Type
	code string
}

// tokenFate is what became of the completions sent under one lease.
type tokenFate int

const (
	fateUnknown  tokenFate = iota
	fateAccepted           // some send was acknowledged
	fateRefused            // every send was definitely refused
)

// wfFinal is the last successful final read of the workflows.
type wfFinal struct {
	idx       int64
	workflows []history.WorkflowState
	keys      map[string]string
}

func finalWorkflows(pairs []history.Pair) (wfFinal, bool) {
	var f wfFinal
	ok := false
	for _, p := range pairs {
		if p.F() == workload.FinalWorkflows && p.Type() == history.OK && p.Completion.Value != nil {
			f = wfFinal{idx: p.Completion.Index, workflows: p.Completion.Value.Workflows, keys: p.Completion.Value.WorkflowKeys}
			ok = true
		}
	}
	return f, ok
}

// poolDrained reports whether the last drain that covered pool completed.
func poolDrained(pairs []history.Pair, pool string) bool {
	drained := false
	for _, p := range pairs {
		if p.F() != workload.DrainOp {
			continue
		}
		for _, f := range strings.Fields(strings.Trim(p.InvokeValue().Detail, "[]")) {
			if f == pool {
				drained = p.Type() == history.OK
			}
		}
	}
	return drained
}

// leaseOf parses the lease a worker's output (r-<lease>-<hash>) or error
// (e-<lease>) names; 0 when it names none.
func leaseOf(s string) uint64 {
	var tok uint64
	switch {
	case strings.HasPrefix(s, "r-"):
		if _, err := fmt.Sscanf(s, "r-%d-", &tok); err != nil {
			return 0
		}
	case strings.HasPrefix(s, "e-"):
		if _, err := fmt.Sscanf(s, "e-%d", &tok); err != nil {
			return 0
		}
	}
	return tok
}

// endLease is the lease of the worker completion that ended t, if one did.
func endLease(t history.TaskState) uint64 {
	switch t.Status {
	case "succeeded":
		return leaseOf(t.Output)
	case "failed":
		return leaseOf(t.Error)
	}
	return 0
}

// derivedStatus is the status a workflow with these members must have
// (docs/workflows.md): running while a member lives; cancelled when it was
// cancelled as a whole (some member ended by the cancel); else failed when
// a member failed or expired; else cancelled when a member was cancelled;
// else succeeded.
func derivedStatus(members []history.TaskState) string {
	whole, failed, cancelled := false, false, false
	for _, m := range members {
		switch m.Status {
		case "succeeded":
		case "failed", "expired":
			failed = true
		case "cancelled":
			cancelled = true
			if m.Error == workload.MsgWorkflowCancelled {
				whole = true
			}
		default:
			return "running"
		}
	}
	switch {
	case whole:
		return "cancelled"
	case failed:
		return "failed"
	case cancelled:
		return "cancelled"
	}
	return "succeeded"
}

// workflowEnds returns, for each workflow the final read saw ended, the
// history time of the last acknowledged event that could have ended it:
// a member's terminal completion or a cancel of the workflow.
func workflowEnds(pairs []history.Pair) map[string]int64 {
	final, ok := finalWorkflows(pairs)
	if !ok {
		return nil
	}
	wfOf := map[string]string{}
	ended := map[string]bool{}
	for _, w := range final.workflows {
		if w.Status != "running" {
			ended[w.ID] = true
		}
		for _, m := range w.Members {
			wfOf[m.ID] = w.ID
		}
	}
	out := map[string]int64{}
	note := func(id string, t int64) {
		if ended[id] && t > out[id] {
			out[id] = t
		}
	}
	for _, p := range pairs {
		if p.Type() != history.OK {
			continue
		}
		v := p.InvokeValue()
		switch p.F() {
		case "complete":
			if v.Pool == workload.WorkflowPool && terminalOutcome(v.Outcome) {
				note(wfOf[v.ID], p.End())
			}
		case workload.WfCancel:
			note(v.Workflow, p.End())
		}
	}
	return out
}

// WorkflowsEndedDuring counts the workflows that ended (by the final read)
// whose last acknowledged member completion or cancel fell in [from, to].
func WorkflowsEndedDuring(ops []history.Op, from, to int64) int64 {
	var n int64
	for _, t := range workflowEnds(history.Pairs(ops)) {
		if t >= from && t <= to {
			n++
		}
	}
	return n
}

// Workflow checks the workflow workload: W1..W6.
func Workflow(ops []history.Op, p Params) *Result {
	r := newResult("workflow")
	pairs := history.Pairs(ops)
	const pool = workload.WorkflowPool
	issued := tokensIssued(ops)

	keys := map[string]*wfKey{}
	grants := map[string][]grantObs{} // task id -> grants
	grantVals := map[uint64]*history.Value{}
	comps := map[string][]wfComp{}     // task id -> completions
	revoked := map[uint64]bool{}       // leases a node said were gone
	firstSend := map[uint64]int64{}    // lease -> first completion sent
	wfOfTask := map[string]string{}    // task id -> workflow id, as workers saw it
	var cancels []history.Pair         // workflow cancels
	cancelInvoked := map[string]bool{} // workflow id -> some cancel was sent
	for _, pr := range pairs {
		v := pr.InvokeValue()
		switch pr.F() {
		case workload.WfSubmit:
			k := keys[v.Key]
			if k == nil {
				k = &wfKey{okIDs: map[string]bool{}, allFail: true}
				keys[v.Key] = k
			}
			k.attempts = append(k.attempts, pr)
			switch pr.Type() {
			case history.OK:
				cv := pr.Completion.Value
				k.okIDs[cv.Workflow] = true
				k.oks = append(k.oks, wfAck{id: cv.Workflow, steps: cv.Steps, idx: pr.Completion.Index})
				k.allFail = false
			case history.Fail:
			default:
				k.allFail = false
			}
		case workload.WfCancel:
			cancels = append(cancels, pr)
			cancelInvoked[v.Workflow] = true
		case "grant":
			if pr.Completion == nil || v.Pool != pool {
				continue
			}
			grants[v.ID] = append(grants[v.ID], grantObs{op: *pr.Completion, token: v.Token, attempt: v.Attempt, worker: pr.Process()})
			grantVals[v.Token] = v
			if v.Workflow != "" {
				wfOfTask[v.ID] = v.Workflow
			}
		case "complete":
			if v.Pool != pool {
				continue
			}
			c := wfComp{pair: pr, v: v, typ: pr.Type()}
			if pr.Completion != nil && pr.Completion.Value != nil {
				c.code = pr.Completion.Value.Code
			}
			comps[v.ID] = append(comps[v.ID], c)
			if t0, ok := firstSend[v.Token]; !ok || pr.Start() < t0 {
				firstSend[v.Token] = pr.Start()
			}
			if c.typ == history.Fail {
				revoked[v.Token] = true
			}
			if v.Workflow != "" {
				wfOfTask[v.ID] = v.Workflow
			}
		case "abort", "lease-lost":
			if v.Pool == pool {
				revoked[v.Token] = true
			}
		}
	}
	fates := func(cs []wfComp) map[uint64]tokenFate {
		out := map[uint64]tokenFate{}
		sawUnknown := map[uint64]bool{}
		for _, c := range cs {
			switch c.typ {
			case history.OK:
				out[c.v.Token] = fateAccepted
			case history.Fail:
				if _, ok := out[c.v.Token]; !ok {
					out[c.v.Token] = fateRefused
				}
			default:
				sawUnknown[c.v.Token] = true
			}
		}
		for tok := range sawUnknown {
			if out[tok] != fateAccepted {
				out[tok] = fateUnknown
			}
		}
		return out
	}

	// Counts.
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
	nGrants := 0
	for _, g := range grants {
		nGrants += len(g)
	}
	r.Counts["grants"] = int64(nGrants)
	var compOK, compStale, spawnOK, spawnRefused int64
	for _, cs := range comps {
		for _, c := range cs {
			spawn := len(c.v.Children) > 0 || c.v.Then != ""
			switch {
			case c.typ == history.OK:
				compOK++
				if spawn {
					spawnOK++
				}
			case c.typ == history.Fail && c.code == "stale_lease":
				compStale++
				if spawn {
					spawnRefused++
				}
			}
		}
	}
	r.Counts["completions_ok"] = compOK
	r.Counts["completions_stale"] = compStale
	r.Counts["spawns_accepted"] = spawnOK
	r.Counts["spawns_refused"] = spawnRefused
	var cancelsOK int64
	for _, c := range cancels {
		if c.Type() == history.OK {
			cancelsOK++
		}
	}
	r.Counts["cancels"] = int64(len(cancels))
	r.Counts["cancels_acked"] = cancelsOK

	final, haveFinal := finalWorkflows(pairs)
	if !haveFinal {
		if len(keys) > 0 {
			r.unknown("no final read of the workflows: W1-W6 cannot be decided")
		}
		return r
	}
	fi := []int64{final.idx}
	byID := map[string]history.WorkflowState{}
	member := map[string]history.TaskState{}
	wfOfMember := map[string]string{}
	perKey := map[string][]string{}
	var children, byDep, doneRuns int64
	for _, w := range final.workflows {
		byID[w.ID] = w
		r.Counts["final_"+w.Status]++
		if w.Key != "" {
			perKey[w.Key] = append(perKey[w.Key], w.ID)
		}
		for _, m := range w.Members {
			member[m.ID] = m
			wfOfMember[m.ID] = w.ID
			if m.Parent != "" {
				children++
			}
			if m.Status == "cancelled" && strings.HasPrefix(m.Error, "dependency ") {
				byDep++
			}
			if m.Policy == "done" && len(grants[m.ID]) > 0 {
				doneRuns++
			}
		}
	}
	r.Counts["final_workflows"] = int64(len(final.workflows))
	r.Counts["members"] = int64(len(member))
	r.Counts["children"] = children
	r.Counts["cancelled_by_dependency"] = byDep
	r.Counts["policy_done_granted"] = doneRuns
	var during int64
	for _, t := range workflowEnds(pairs) {
		if t >= p.FaultStart && t <= p.FaultEnd {
			during++
		}
	}
	r.Counts["ended_during_faults"] = during
	// The final state of a task, also outside the workflows read.
	lookup := func(id string) (history.TaskState, bool) {
		if t, ok := member[id]; ok {
			return t, true
		}
		return history.TaskState{}, false
	}

	// W1: grants against what their dependencies were.
	for _, id := range sortedKeys(grants) {
		t, haveT := lookup(id)
		for _, g := range grants[id] {
			gv := grantVals[g.token]
			policy := gv.Policy
			if policy == "" && haveT {
				policy = t.Policy
			}
			for _, d := range gv.Deps {
				name := orID(d.Step, d.ID)
				switch {
				case policy != "done" && d.Status != "succeeded":
					r.fail("W1", []int64{g.op.Index}, "task %s (step %s of %s) granted under lease %d while dependency %s was %s, as the grant reported", id, gv.Step, gv.Workflow, g.token, name, orNone(d.Status))
				case policy == "done" && !isTerminalStatus(d.Status):
					r.fail("W1", []int64{g.op.Index}, "task %s (step %s, policy done) granted under lease %d while dependency %s was %s, as the grant reported", id, gv.Step, g.token, name, orNone(d.Status))
				}
			}
			if !haveT {
				continue
			}
			if gv.Workflow != "" && len(gv.Deps) != len(t.DependsOn) {
				r.fail("W1", []int64{g.op.Index}, "task %s: the grant under lease %d reported %d dependencies, the task has %d", id, g.token, len(gv.Deps), len(t.DependsOn))
			}
			for _, did := range t.DependsOn {
				d, ok := lookup(did)
				if !ok {
					continue
				}
				name := orID(d.Step, d.ID)
				switch {
				case !isTerminalStatus(d.Status):
					r.fail("W1", []int64{g.op.Index, final.idx}, "task %s (step %s) was granted under lease %d but its dependency %s is still %s", id, t.Step, g.token, name, d.Status)
					continue
				case policy != "done" && d.Status != "succeeded":
					r.fail("W1", []int64{g.op.Index, final.idx}, "task %s (step %s) was granted under lease %d but its dependency %s ended %s", id, t.Step, g.token, name, d.Status)
				}
				if tok := endLease(d); tok != 0 {
					if sent, ok := firstSend[tok]; ok && sent > g.op.Time {
						r.fail("W1", []int64{g.op.Index}, "task %s (step %s) was granted under lease %d before the completion that ended its dependency %s (lease %d) was sent", id, t.Step, g.token, name, tok)
					}
				}
			}
		}
	}

	// W2: dependents of a dependency that did not succeed.
	for _, id := range sortedKeys(member) {
		m := member[id]
		if m.Policy == "done" {
			continue
		}
		for _, did := range m.DependsOn {
			d, ok := lookup(did)
			if !ok || !isTerminalStatus(d.Status) || d.Status == "succeeded" {
				continue
			}
			if m.Status != "cancelled" {
				r.fail("W2", fi, "task %s (step %s of %s) ended %s although its dependency %s ended %s", id, m.Step, m.Workflow, m.Status, orID(d.Step, d.ID), d.Status)
			}
			for _, g := range grants[id] {
				r.fail("W2", []int64{g.op.Index}, "task %s (step %s of %s) was granted under lease %d although its dependency %s ended %s", id, m.Step, m.Workflow, g.token, orID(d.Step, d.ID), d.Status)
			}
			break
		}
	}

	// W3: nothing runs or completes after an acknowledged cancel.
	membersOf := map[string][]string{}
	for id, w := range wfOfMember {
		membersOf[w] = append(membersOf[w], id)
	}
	for id, w := range wfOfTask {
		if _, ok := wfOfMember[id]; !ok {
			membersOf[w] = append(membersOf[w], id)
		}
	}
	for _, c := range cancels {
		if c.Type() != history.OK {
			continue
		}
		cv := c.Completion.Value
		wid := c.InvokeValue().Workflow
		for _, id := range membersOf[wid] {
			for _, cp := range comps[id] {
				if cp.typ == history.OK && cp.pair.Start() > c.End() {
					r.fail("W3", []int64{c.Completion.Index, cp.pair.Completion.Index}, "workflow %s: the completion of task %s (step %s) under lease %d was accepted although it was sent after the workflow's cancel was acknowledged", wid, id, cp.v.Step, cp.v.Token)
				}
			}
			for _, g := range grants[id] {
				if g.op.Time > c.End() && g.token > issued.maxBefore(c.Start()) && !revoked[g.token] {
					r.fail("W3", []int64{c.Completion.Index, g.op.Index}, "workflow %s: task %s was granted under lease %d after the workflow's cancel was acknowledged", wid, id, g.token)
				}
			}
		}
		if w, ok := byID[wid]; ok && cv != nil && cv.Count > 0 && w.Status != "cancelled" {
			r.fail("W3", []int64{c.Completion.Index, final.idx}, "workflow %s: a cancel ended %d members but the workflow ended %s", wid, cv.Count, w.Status)
		}
	}
	for _, w := range final.workflows {
		if cancelInvoked[w.ID] {
			continue
		}
		for _, m := range w.Members {
			if m.Status == "cancelled" && m.Error == workload.MsgWorkflowCancelled {
				r.fail("W3", fi, "workflow %s: task %s (step %s) was ended by a workflow cancel nobody sent", w.ID, m.ID, m.Step)
				break
			}
		}
	}

	// W4: children exist iff their parent's completion was accepted.
	spawned := map[string][]history.TaskState{} // parent id -> children
	for _, id := range sortedKeys(member) {
		if m := member[id]; m.Parent != "" {
			spawned[m.Parent] = append(spawned[m.Parent], m)
		}
	}
	parents := map[string]bool{}
	for id, cs := range comps {
		for _, c := range cs {
			if len(c.v.Children) > 0 || c.v.Then != "" {
				parents[id] = true
			}
		}
	}
	for id := range spawned {
		parents[id] = true
	}
	for _, pid := range sortedKeys(parents) {
		pt, haveP := lookup(pid)
		fate := fates(comps[pid])
		kids := spawned[pid]
		byName := map[string]history.TaskState{}
		for _, k := range kids {
			byName[k.Step] = k
		}
		won := uint64(0)
		if haveP && pt.Status == "succeeded" {
			won = leaseOf(pt.Output)
		}
		names := map[uint64][]string{} // lease -> children and continuation
		kidsOf := map[uint64][]string{}
		thenOf := map[uint64]string{}
		var idx []int64
		for _, c := range comps[pid] {
			if c.pair.Completion != nil {
				idx = append(idx, c.pair.Completion.Index)
			}
			if _, ok := names[c.v.Token]; ok || (len(c.v.Children) == 0 && c.v.Then == "") {
				continue
			}
			ns := append([]string(nil), c.v.Children...)
			if c.v.Then != "" {
				ns = append(ns, c.v.Then)
			}
			names[c.v.Token] = ns
			kidsOf[c.v.Token] = c.v.Children
			thenOf[c.v.Token] = c.v.Then
		}
		from := map[string]uint64{} // child name -> the lease that named it
		var present []uint64
		for _, tok := range keysU64Map(names) {
			ns := names[tok]
			n := 0
			for _, name := range ns {
				from[name] = tok
				if _, ok := byName[name]; ok {
					n++
				}
			}
			if n > 0 {
				present = append(present, tok)
			}
			mustExist := fate[tok] == fateAccepted || tok == won
			switch {
			case fate[tok] == fateRefused && n > 0:
				r.fail("W4", idx, "task %s: the completion under lease %d was refused, yet %d of its children exist", pid, tok, n)
			case mustExist && n < len(ns):
				r.fail("W4", idx, "task %s: the completion under lease %d was accepted but only %d of its %d children and continuation exist", pid, tok, n, len(ns))
			case n > 0 && n < len(ns):
				r.fail("W4", idx, "task %s: only %d of the %d children and continuation of the completion under lease %d exist", pid, n, len(ns), tok)
			}
			if n == 0 {
				continue
			}
			if !haveP {
				r.fail("W4", idx, "task %s: children of its completion under lease %d exist but the task is missing from the final state", pid, tok)
			} else if won != tok {
				r.fail("W4", idx, "task %s: children of the completion under lease %d exist but the task ended %s with output %q", pid, tok, orNone(pt.Status), pt.Output)
			}
			// The continuation depends on every child.
			if th, ok := byName[thenOf[tok]]; ok && thenOf[tok] != "" {
				deps := map[string]bool{}
				for _, d := range th.DependsOn {
					deps[d] = true
				}
				for _, name := range kidsOf[tok] {
					if k, ok := byName[name]; ok && !deps[k.ID] {
						r.fail("W4", fi, "task %s: its continuation %s does not depend on its child %s", pid, th.Step, name)
					}
				}
				if th.Policy == "done" {
					r.fail("W4", fi, "task %s: its continuation %s runs under policy done", pid, th.Step)
				}
			}
			for _, name := range ns {
				if k, ok := byName[name]; ok && haveP && k.Workflow != pt.Workflow {
					r.fail("W4", fi, "task %s: its child %s is in workflow %s, not in its parent's %s", pid, name, k.Workflow, pt.Workflow)
				}
			}
		}
		if len(present) > 1 {
			r.fail("W4", idx, "task %s: children of %d completions exist (leases %v)", pid, len(present), present)
		}
		for _, k := range kids {
			if _, ok := from[k.Step]; !ok {
				r.fail("W4", fi, "task %s: child %s (%s) was named by no completion of its parent", pid, k.ID, orNone(k.Step))
			}
		}
		if won != 0 && len(names[won]) == 0 && len(kids) > 0 {
			r.fail("W4", fi, "task %s succeeded under lease %d, which spawned nothing, yet it has %d children", pid, won, len(kids))
		}
	}

	// W5: statuses.
	drained := poolDrained(pairs, pool)
	var live int64
	for _, w := range final.workflows {
		want := derivedStatus(w.Members)
		if w.Status != want {
			r.fail("W5", fi, "workflow %s (key %s) is %s but its members make it %s", w.ID, orNone(w.Key), w.Status, want)
		}
		if w.Status == "running" || want == "running" {
			live++
			if drained {
				r.fail("W5", fi, "workflow %s (key %s) is %s, members %s, after the pool drained", w.ID, orNone(w.Key), w.Status, want)
			}
		}
		for _, m := range w.Members {
			if m.Workflow != w.ID {
				r.fail("W5", fi, "workflow %s lists task %s, which names workflow %s", w.ID, m.ID, orNone(m.Workflow))
			}
		}
	}
	r.Counts["not_terminal"] = live
	if live > 0 && !drained {
		r.unknown("the drain timed out: %d workflows were not terminal at the end", live)
	}

	// W6: loss, keys, phantoms.
	for _, key := range sortedKeys(keys) {
		k := keys[key]
		var ackIdx []int64
		for _, a := range k.oks {
			ackIdx = append(ackIdx, a.idx)
		}
		if len(k.okIDs) > 1 {
			r.fail("W6", ackIdx, "key %s was acknowledged as %d workflows: %v", key, len(k.okIDs), sortedKeys(k.okIDs))
		}
		for i := 1; i < len(k.oks); i++ {
			if a, b := k.oks[0], k.oks[i]; a.id == b.id && !sameSteps(a.steps, b.steps) {
				r.fail("W6", []int64{a.idx, b.idx}, "key %s was acknowledged with different tasks: %v and %v", key, a.steps, b.steps)
			}
		}
		ids := perKey[key]
		if len(ids) > 1 {
			r.fail("W6", fi, "key %s names %d workflows: %v", key, len(ids), ids)
		}
		if got, read := final.keys[key]; read {
			switch {
			case len(k.okIDs) > 0 && !k.okIDs[got]:
				r.fail("W6", append([]int64{final.idx}, ackIdx...), "key %s was acknowledged as %v but names %q", key, sortedKeys(k.okIDs), got)
			case got != "" && len(ids) > 0 && got != ids[0]:
				r.fail("W6", fi, "key %s names %s by key and %v by the list", key, got, ids)
			case got != "" && len(ids) == 0:
				r.fail("W6", fi, "key %s names workflow %s, which the final read of the workflows does not hold", key, got)
			}
		}
		lost := map[string]bool{}
		for _, a := range k.oks {
			w, ok := byID[a.id]
			if !ok {
				if !lost[a.id] {
					lost[a.id] = true
					r.fail("W6", []int64{a.idx, final.idx}, "acknowledged workflow %s (key %s) is lost", a.id, key)
				}
				continue
			}
			if w.Key != key {
				r.fail("W6", []int64{a.idx, final.idx}, "acknowledged workflow %s was submitted with key %s but has key %q", a.id, key, w.Key)
			}
			for _, step := range sortedKeys(a.steps) {
				tid := a.steps[step]
				m, ok := member[tid]
				switch {
				case !ok:
					r.fail("W6", []int64{a.idx, final.idx}, "workflow %s: acknowledged task %s (step %s) is lost", a.id, tid, step)
				case m.Step != step || wfOfMember[tid] != a.id:
					r.fail("W6", []int64{a.idx, final.idx}, "workflow %s: task %s was acknowledged as step %s but is step %s of %s", a.id, tid, step, orNone(m.Step), wfOfMember[tid])
				}
			}
		}
	}
	for _, w := range final.workflows {
		if w.Parent != "" && w.Key == "" {
			continue // created by a spawn
		}
		k, ok := keys[w.Key]
		switch {
		case !ok:
			r.fail("W6", fi, "unexpected workflow %s with key %q that nobody submitted", w.ID, w.Key)
		case k.allFail:
			r.fail("W6", fi, "workflow %s exists for key %s whose every submit definitely failed", w.ID, w.Key)
		}
	}
	for id, gs := range grants {
		if _, ok := member[id]; !ok {
			r.fail("W6", []int64{gs[0].op.Index, final.idx}, "task %s was granted to %s but is in no workflow of the final read", id, gs[0].worker)
		}
	}
	if tasks, idx, ok := finalTasks(pairs); ok {
		for _, t := range tasks {
			if t.Pool != pool {
				continue
			}
			if _, ok := member[t.ID]; !ok {
				r.fail("W6", []int64{idx, final.idx}, "task %s in pool %s (workflow %q) is in no workflow of the final read", t.ID, pool, t.Workflow)
			}
		}
	}
	return r
}

func sameSteps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func orID(step, id string) string {
	if step != "" {
		return step
	}
	return id
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func keysU64Map[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
