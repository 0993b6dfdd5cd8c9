package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// LoopStatus is the health of one background loop of a node.
type LoopStatus struct {
	Name      string
	Failures  int       // consecutive failures (0 = healthy)
	LastError string    // of the last failure, while Failures > 0
	LastOK    time.Time // last successful iteration (zero: none yet)
	Runs      uint64    // iterations so far
}

// loopGuard records the consecutive failures of one loop.
type loopGuard struct {
	name string
	now  func() time.Time

	mu       sync.Mutex
	failures int
	lastErr  string
	lastOK   time.Time
	runs     uint64
}

func (g *loopGuard) ok() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures, g.lastErr = 0, ""
	g.lastOK = g.now()
	g.runs++
}

func (g *loopGuard) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures++
	g.lastErr = err.Error()
	g.runs++
}

func (g *loopGuard) status() LoopStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return LoopStatus{Name: g.name, Failures: g.failures, LastError: g.lastErr, LastOK: g.lastOK, Runs: g.runs}
}

// loopSet is the node's background loops.
type loopSet struct {
	join, bootstrap, meta, leadership, reconcile *loopGuard
}

func newLoopSet(now func() time.Time) loopSet {
	g := func(name string) *loopGuard { return &loopGuard{name: name, now: now} }
	return loopSet{
		join:       g("join"),
		bootstrap:  g("bootstrap"),
		meta:       g("gossip-meta"),
		leadership: g("leadership"),
		reconcile:  g("reconcile"),
	}
}

func (s loopSet) all() []*loopGuard {
	return []*loopGuard{s.join, s.bootstrap, s.meta, s.leadership, s.reconcile}
}

// Health is a node's view of itself and the cluster (`cronoq health`).
type Health struct {
	Node           string
	Leader         string // leader id; empty when no leader is known
	LeaderHTTPAddr string
	Epoch          uint64 // the FSM's current epoch
	Status         string // "ok" or "degraded"
	Reasons        []string
	RaftState      string // Follower, Candidate, Leader, Shutdown
	Ready          bool   // this node leads and serves
	AppliedIndex   uint64
	Loops          []LoopStatus
}

// Health status values.
const (
	HealthOK       = "ok"
	HealthDegraded = "degraded"
	// HealthFailed: the node stopped applying the raft log at an entry it
	// cannot apply (a newer release wrote it); it must be upgraded.
	HealthFailed = "failed"
)

// Health reports this node's health. Status is failed when the node
// stopped applying the raft log (see fsm.HaltError), degraded, with
// reasons, when its data directory is full (see DiskFullError), no leader
// is known, this leader is not serving yet, a voter is not alive in
// gossip, a background loop keeps failing, TLS is off while an address of
// the node is not on loopback, or a durable subscription stalled.
func (n *Node) Health() Health {
	leader, leaderHTTP := n.Leader()
	state := n.raft.State()
	h := Health{
		Node:           n.id,
		Leader:         leader,
		LeaderHTTPAddr: leaderHTTP,
		Epoch:          n.state.Epoch(),
		RaftState:      state.String(),
		AppliedIndex:   n.raft.AppliedIndex(),
	}
	n.mu.Lock()
	h.Ready = n.ready && state == raft.Leader
	n.mu.Unlock()

	if err := n.disk.err(); err != nil {
		h.Reasons = append(h.Reasons, fmt.Sprintf("%v (since %s); this node takes no writes until space is freed",
			err, err.Since.UTC().Format(time.RFC3339)))
	}
	if leader == "" {
		h.Reasons = append(h.Reasons, "no leader known")
	}
	if state == raft.Leader && !h.Ready {
		h.Reasons = append(h.Reasons, "leader not ready: establishing leadership")
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		members := make(map[string]Member)
		for _, m := range n.Members() {
			members[m.Name] = m
		}
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Voter || string(s.ID) == n.id {
				continue
			}
			m, ok := members[string(s.ID)]
			switch {
			case !ok:
				h.Reasons = append(h.Reasons, fmt.Sprintf("voter %s is not known to gossip", s.ID))
			case m.Status == StatusFailed || m.Status == StatusLeft:
				h.Reasons = append(h.Reasons, fmt.Sprintf("voter %s is %s", s.ID, m.Status))
			}
		}
	}
	if state == raft.Leader {
		if eng, err := n.engine(); err == nil {
			if st := eng.Stats(); st.Saturated {
				h.Reasons = append(h.Reasons, fmt.Sprintf("write path saturated: %d bytes wait for the log (limit %d); submits are refused until it drains",
					st.QueuedBytes, eng.Config().MaxQueuedBytes))
			}
		}
		if r := n.clockReason(); r != "" {
			h.Reasons = append(h.Reasons, r)
		}
	}
	loops := make([]LoopStatus, 0, len(n.loops.all()))
	for _, g := range n.loops.all() {
		loops = append(loops, g.status())
	}
	for _, st := range append(loops, n.webhookLoops()...) {
		h.Loops = append(h.Loops, st)
		if st.Failures > 0 {
			h.Reasons = append(h.Reasons, fmt.Sprintf("loop %s: %d consecutive failures: %s", st.Name, st.Failures, st.LastError))
		}
	}
	if r := plaintextReason(n.plaintext); r != "" {
		h.Reasons = append(h.Reasons, r)
	}
	h.Reasons = append(h.Reasons, n.stalledReasons()...)
	h.Status = HealthOK
	if len(h.Reasons) > 0 {
		h.Status = HealthDegraded
	}
	if halt := n.state.Halted(); halt != nil {
		h.Status = HealthFailed
		h.Reasons = append([]string{halt.Error()}, h.Reasons...)
	}
	return h
}
