package checker

import (
	"time"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nodes"
)

// Vacuity decides whether the run exercised the system enough for the other
// verdicts to mean anything: enough acked submits, enough completions,
// ended workflows and ordering tasks that waited for their turn during the
// faults, enough leader changes, and every partition probe passed. It is
// never invalid: a vacuous run is inconclusive.
func Vacuity(ops []history.Op, leaders []nodes.LeaderSample, p Params) *Result {
	r := newResult("vacuity")
	var acked, faultCompletions, probes, probeFails int64
	for _, pr := range history.Pairs(ops) {
		switch pr.F() {
		case "submit":
			if pr.Type() == history.OK {
				acked++
			}
		case "complete":
			if pr.Type() == history.OK && pr.Start() >= p.FaultStart && pr.Start() <= p.FaultEnd {
				faultCompletions++
			}
		case "probe":
			if pr.Process() == "nemesis" && pr.Completion != nil {
				probes++
				if pr.Type() != history.OK {
					probeFails++
				}
			}
		}
	}
	changes := LeaderChanges(leaders, p.FaultStart, p.FaultEnd)
	workflows := WorkflowsEndedDuring(ops, p.FaultStart, p.FaultEnd)
	r.Counts["fault_workflows"] = workflows
	laneWaits := LaneWaitsDuring(ops, p.FaultStart, p.FaultEnd)
	r.Counts["fault_lane_waits"] = laneWaits
	r.Counts["acked_submits"] = acked
	r.Counts["fault_completions"] = faultCompletions
	r.Counts["leader_changes"] = changes
	r.Counts["partition_probes"] = probes
	r.Counts["partition_probe_failures"] = probeFails
	faults := time.Duration(p.FaultEnd - p.FaultStart)
	if acked < p.MinAckedSubmits {
		r.unknown("only %d acked submits (need %d)", acked, p.MinAckedSubmits)
	}
	if faultCompletions < p.MinFaultCompletions {
		r.unknown("only %d completions during %s of faults (need %d)", faultCompletions, faults.Round(time.Second), p.MinFaultCompletions)
	}
	if workflows < p.MinFaultWorkflows {
		r.unknown("only %d workflows ended during %s of faults (need %d)", workflows, faults.Round(time.Second), p.MinFaultWorkflows)
	}
	if laneWaits < p.MinFaultLaneWaits {
		r.unknown("only %d ordering tasks first granted during %s of faults had waited behind an earlier task of their lane (need %d)", laneWaits, faults.Round(time.Second), p.MinFaultLaneWaits)
	}
	if changes < p.MinLeaderChanges {
		r.unknown("only %d leader changes during the faults (need %d)", changes, p.MinLeaderChanges)
	}
	if probeFails > 0 {
		r.unknown("%d of %d partition probes found a cut link open", probeFails, probes)
	}
	return r
}

// LeaderChanges counts how often the (leader, term) changed within
// [from, to], ignoring instants without a leader.
func LeaderChanges(samples []nodes.LeaderSample, from, to int64) int64 {
	var n int64
	prevLeader, prevTerm := "", uint64(0)
	for _, s := range samples {
		if s.Leader == "" {
			continue
		}
		if s.T >= from && s.T <= to && prevLeader != "" && (s.Leader != prevLeader || s.Term != prevTerm) {
			n++
		}
		prevLeader, prevTerm = s.Leader, s.Term
	}
	return n
}
