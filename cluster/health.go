package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/internal/loophealth"
)

// LoopStatus is the health of one background loop of a node.
type LoopStatus = loophealth.Status

// The node's background loops, by the name its health and the loop label
// of the cronoq_loop_* series give them.
const (
	// LoopJoin joins the gossip pool through Config.Join until a node
	// answers.
	LoopJoin = "join"
	// LoopBootstrap bootstraps raft once bootstrap-expect is met.
	LoopBootstrap = "bootstrap"
	// LoopGossipMeta refreshes the node's gossip metadata.
	LoopGossipMeta = "gossip-meta"
	// LoopLeadership establishes leadership (barrier, epoch bump, engine
	// start) on the leader.
	LoopLeadership = "leadership"
	// LoopEngine is the leader's engine: its timer wake-ups (runs at,
	// recurring fires, lease expiries, retention sweeps) and the commits of
	// everything it does. A failure is an engine stopped by a failed
	// commit; the leader starts a new one after the backoff.
	LoopEngine = "engine"
	// LoopReconcile reconciles gossip members with the raft configuration
	// on the leader (adds, promotions, removals).
	LoopReconcile = "reconcile"
	// LoopClockCheck compares the leader's clock with the other voters'.
	LoopClockCheck = "clock-check"
	// LoopDiskProbe probes a full data directory for space.
	LoopDiskProbe = "disk-probe"
	// LoopACLInitialManagement makes the initial management token on the
	// leader (Config.ACLInitialManagement).
	LoopACLInitialManagement = "acl-initial-management"
)

// loopSet is the node's background loops.
type loopSet struct {
	set *loophealth.Set

	join, bootstrap, meta, leadership, engine, reconcile, clock, disk, aclInit *loophealth.Loop
}

// newLoopSet registers the node's loops. A loop's first backoff is its own
// pace (its interval, or the pause it took before retrying when it had
// one); every cap is cfg.Loops.MaxBackoff but join's, JoinRetryMax.
func newLoopSet(cfg Config) loopSet {
	s := loophealth.New(cfg.Loops)
	reg := func(name string, first time.Duration) *loophealth.Loop {
		return s.Register(name, loophealth.Policy{Min: first})
	}
	return loopSet{
		set:        s,
		join:       s.Register(LoopJoin, loophealth.Policy{Min: cfg.JoinRetryMin, Max: cfg.JoinRetryMax}),
		bootstrap:  reg(LoopBootstrap, cfg.MetaRefreshInterval),
		meta:       reg(LoopGossipMeta, cfg.MetaRefreshInterval),
		leadership: reg(LoopLeadership, cfg.EstablishRetryInterval),
		engine:     reg(LoopEngine, cfg.EstablishRetryInterval),
		reconcile:  reg(LoopReconcile, 0),
		clock:      reg(LoopClockCheck, cfg.ClockCheckInterval),
		disk:       reg(LoopDiskProbe, cfg.DiskProbeInterval),
		aclInit:    reg(LoopACLInitialManagement, 0),
	}
}

// Loops is the node's set of background loops: what Health lists and the
// cronoq_loop_* series export. A component of the node that runs a loop of
// its own registers it here (see package loophealth).
func (n *Node) Loops() *loophealth.Set { return n.loops.set }

// loopReason is the health reason of a degraded loop.
func loopReason(st LoopStatus) string {
	return fmt.Sprintf("loop %s: %d consecutive failures (backing off %s): %s",
		st.Name, st.Failures, st.Backoff.Round(time.Millisecond), st.LastError)
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
// gossip, a background loop failed Config.Loops.Threshold times in a row
// (3; LoopStatus.Degraded), TLS is off while an address of the node is not
// on loopback, or a durable subscription stalled.
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
	h.Loops = n.loops.set.Statuses()
	for _, st := range h.Loops {
		if st.Degraded {
			h.Reasons = append(h.Reasons, loopReason(st))
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
