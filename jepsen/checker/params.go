package checker

import (
	"time"
)

// Params are what the checkers need to know about the run beyond its
// history. They are saved in config.json so that `jepsen check` can re-run
// the checkers.
type Params struct {
	// StartUnixNano is the wall time of history time zero.
	StartUnixNano int64 `json:"start_unix_nano"`
	// FaultStart and FaultEnd bound the fault phase (history ns).
	FaultStart int64 `json:"fault_start"`
	FaultEnd   int64 `json:"fault_end"`
	// TTL is the lease heartbeat window.
	TTL time.Duration `json:"ttl"`
	// Vacuity thresholds.
	MinAckedSubmits     int64 `json:"min_acked_submits"`
	MinFaultCompletions int64 `json:"min_fault_completions"`
	MinLeaderChanges    int64 `json:"min_leader_changes"`
	// MinFaultWorkflows is how many workflows must end during the faults
	// (0: none required, as in runs without the workflow workload).
	MinFaultWorkflows int64 `json:"min_fault_workflows,omitempty"`
	// MinFaultLaneWaits is how many ordering tasks first granted during
	// the faults must have waited behind an earlier task of their lane (0:
	// none required, as in runs without the ordering workload).
	MinFaultLaneWaits    int64         `json:"min_fault_lane_waits,omitempty"`
	RegisterCheckTimeout time.Duration `json:"register_check_timeout"`
	// Nodes lists the node ids (FSM hashes are expected from each).
	Nodes []string `json:"nodes"`
}

// DefaultThresholds scales the vacuity thresholds to the length of the
// fault phase: about 3 acked submits per second of run, 0.5 completions
// per second of faults, a leader change per 30 s of faults, a workflow
// ended per 10 s of faults, and an ordering task that waited for its turn
// per 2 s of faults.
func (p *Params) DefaultThresholds(traffic time.Duration) {
	faults := time.Duration(p.FaultEnd - p.FaultStart)
	p.MinAckedSubmits = int64(traffic.Seconds() * 3)
	p.MinFaultCompletions = int64(faults.Seconds() * 0.5)
	p.MinLeaderChanges = max(1, int64(faults/(30*time.Second)))
	p.MinFaultWorkflows = max(1, int64(faults/(10*time.Second)))
	p.MinFaultLaneWaits = max(1, int64(faults/(2*time.Second)))
}
