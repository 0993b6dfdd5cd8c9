package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"time"
)

// The raft counters every cronoq node exports on GET /metrics that tell of
// elections. hashicorp/raft's own telemetry reaches the node's registry
// through go-metrics (metrics.RaftTelemetry, never expired): it counts
// raft.state.candidate each time the node starts an election (pre-vote
// rounds included) and raft.state.leader each time it wins one. The node
// itself counts the changes of leader it observes and exports the engine
// epoch of the replicated state, which every new leadership bumps once
// it is established. The go-metrics counters exist from the first
// increment: a node that never stood has none.
const (
	metricCandidate     = "cronoq_raft_state_candidate"
	metricLeader        = "cronoq_raft_state_leader"
	metricLeaderChanges = "cronoq_leader_changes_total"
	metricEpoch         = "cronoq_epoch"
)

// nodeElections is one node's election counters at one moment.
type nodeElections struct {
	Candidacies   float64
	Won           float64
	LeaderChanges float64
	Epoch         float64
}

// electionCounter is a system whose servers export raft's election
// counters (the cronoq clusters).
type electionCounter interface {
	// ElectionSample reads every node's counters, by node name.
	ElectionSample(ctx context.Context) (map[string]nodeElections, error)
}

// ElectionCount is what happened to raft leadership between two samples:
// during W1's measured window, from the workers' start to the last
// durable completion.
type ElectionCount struct {
	// Elections is the number of elections started: the increase of
	// cronoq_raft_state_candidate summed over the nodes. 0 means no node
	// stood for election.
	Elections int `json:"elections"`
	// Won is the increase of cronoq_raft_state_leader summed over the
	// nodes: elections that made a leader.
	Won int `json:"won"`
	// LeaderChanges is the largest increase of cronoq_leader_changes_total
	// on one node (each node counts the changes it sees).
	LeaderChanges int `json:"leader_changes"`
	// EpochIncrease is the increase of cronoq_epoch (the largest on any
	// node): leaderships established.
	EpochIncrease int `json:"epoch_increase"`
	// CandidaciesByNode is the increase of cronoq_raft_state_candidate per
	// node.
	CandidaciesByNode map[string]int `json:"candidacies_by_node,omitempty"`
	// Error says why the count could not be taken (then the counts are
	// not to be read).
	Error string `json:"error,omitempty"`
}

// Summary is the count as one line, "elections during W1: 0 (...)".
func (e *ElectionCount) Summary() string {
	if e == nil {
		return "elections during W1: not counted"
	}
	if e.Error != "" {
		return "elections during W1: unknown (" + e.Error + ")"
	}
	return fmt.Sprintf("elections during W1: %d (won %d, leader changes seen %d, epoch +%d)", e.Elections, e.Won, e.LeaderChanges, e.EpochIncrease)
}

// countElections compares two samples. A node missing from either sample
// makes the count unknown: an election could hide behind it.
func countElections(before, after map[string]nodeElections) *ElectionCount {
	ec := &ElectionCount{CandidaciesByNode: map[string]int{}}
	var names []string
	for n := range before {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(before) != len(after) {
		ec.Error = fmt.Sprintf("%d nodes read before the window, %d after", len(before), len(after))
		return ec
	}
	var epoch0, epoch1 float64
	for _, n := range names {
		b := before[n]
		a, ok := after[n]
		if !ok {
			ec.Error = fmt.Sprintf("node %s not read after the window", n)
			return ec
		}
		d := int(math.Round(a.Candidacies - b.Candidacies))
		ec.CandidaciesByNode[n] = d
		ec.Elections += d
		ec.Won += int(math.Round(a.Won - b.Won))
		ec.LeaderChanges = max(ec.LeaderChanges, int(math.Round(a.LeaderChanges-b.LeaderChanges)))
		epoch0, epoch1 = math.Max(epoch0, b.Epoch), math.Max(epoch1, a.Epoch)
	}
	ec.EpochIncrease = int(math.Round(epoch1 - epoch0))
	return ec
}

// parseElections reads a node's counters from its /metrics (Prometheus
// text format). The node's own leader-change counter and epoch are always
// there; raft's counters only once they were first incremented.
func parseElections(r io.Reader) (nodeElections, error) {
	vals, err := parseMetrics(r)
	if err != nil {
		return nodeElections{}, err
	}
	return electionsOf(vals)
}

// electionsOf picks a node's counters out of a scrape of its /metrics.
func electionsOf(vals promSample) (nodeElections, error) {
	for _, m := range []string{metricLeaderChanges, metricEpoch} {
		if _, ok := vals[m]; !ok {
			return nodeElections{}, fmt.Errorf("no %s in the metrics", m)
		}
	}
	return nodeElections{
		Candidacies:   vals[metricCandidate],
		Won:           vals[metricLeader],
		LeaderChanges: vals[metricLeaderChanges],
		Epoch:         vals[metricEpoch],
	}, nil
}

// ElectionSample reads the election counters of every node of the cluster.
func (s *cronoqSys) ElectionSample(ctx context.Context) (map[string]nodeElections, error) {
	hc := s.httpClient(10 * time.Second)
	out := make(map[string]nodeElections, len(s.http))
	for i, addr := range s.http {
		name := fmt.Sprintf("n%d", i+1)
		vals, err := scrapeMetrics(ctx, hc, s.scheme()+addr+"/metrics")
		var ne nodeElections
		if err == nil {
			ne, err = electionsOf(vals)
		}
		if err != nil {
			return nil, fmt.Errorf("reading the election counters of %s: %w", name, err)
		}
		out[name] = ne
	}
	return out, checkSample(out)
}

// checkSample refuses a sample in which no node has ever won an election:
// a cluster with a leader has had one, so raft's counters are not being
// exported and a count of 0 would mean nothing.
func checkSample(sample map[string]nodeElections) error {
	won := 0.0
	for _, ne := range sample {
		won += ne.Won
	}
	if won < 1 {
		return fmt.Errorf("no node reports %s above 0: raft's telemetry is not exported, so elections cannot be counted", metricLeader)
	}
	return nil
}
