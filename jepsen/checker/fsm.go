package checker

import (
	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// FSM checks that every node ended with the same replicated state (the
// same FSM hash at the same applied index) and that no node crashed.
func FSM(ops []history.Op, p Params) *Result {
	r := newResult("fsm")
	// A node that exited on its own (a panic, a fatal error) is a finding
	// whatever else the run shows.
	for _, op := range ops {
		if op.F == workload.NodeCrash && op.Value != nil {
			r.fail("crash", []int64{op.Index}, "node %s exited without being killed or stopped: %s (see nodes/%s.log)",
				joinStr(op.Value.Targets), op.Value.Detail, joinStr(op.Value.Targets))
		}
	}
	var hashes map[string]history.NodeHash
	var idx int64
	found := false
	converged := false
	for _, op := range ops {
		if op.F == workload.FSMHash && op.Type != history.Invoke && op.Value != nil && op.Value.Hashes != nil {
			hashes, idx, found = op.Value.Hashes, op.Index, true
			converged = op.Type == history.OK
		}
	}
	if !found {
		r.unknown("no FSM hashes were collected")
		return r
	}
	r.Counts["nodes"] = int64(len(hashes))
	for _, n := range p.Nodes {
		if _, ok := hashes[n]; !ok {
			r.unknown("no FSM hash from %s", n)
		}
	}
	byIndex := map[uint64]map[string][]string{} // applied index -> hash -> nodes
	for _, n := range sortedKeys(hashes) {
		h := hashes[n]
		if h.Err != "" || h.Hash == "" {
			r.unknown("%s: %s", n, h.Err)
			continue
		}
		if byIndex[h.AppliedIndex] == nil {
			byIndex[h.AppliedIndex] = map[string][]string{}
		}
		byIndex[h.AppliedIndex][h.Hash] = append(byIndex[h.AppliedIndex][h.Hash], n)
	}
	for ai, hs := range byIndex {
		if len(hs) > 1 {
			detail := ""
			for _, h := range sortedKeys(hs) {
				detail += " " + h[:min(12, len(h))] + "=" + joinStr(hs[h])
			}
			r.fail("hash", []int64{idx}, "nodes disagree on the FSM at applied index %d:%s", ai, detail)
		}
	}
	if len(byIndex) > 1 && r.Valid != Invalid {
		r.unknown("nodes never reached the same applied index (%d distinct)", len(byIndex))
	}
	if !converged && r.Valid == Valid {
		r.unknown("FSM hash collection did not converge")
	}
	return r
}

func joinStr(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}
