package cluster

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
)

// bootstrapDecision is the outcome of decideBootstrap.
type bootstrapDecision struct {
	// Servers is the configuration to bootstrap with; empty when the node
	// must not bootstrap (now).
	Servers []raft.Server
	// Final reports that bootstrapping will never be right for this node
	// (it has state, or a cluster already exists): stop trying.
	Final bool
	// Reason says why not, for the log.
	Reason string
}

// decideBootstrap decides whether a node with -bootstrap-expect expect
// bootstraps raft, from what gossip shows (the members list includes the
// node itself). It follows Nomad's maybeBootstrap, with gossip metadata in
// place of asking each peer for its raft configuration:
//
//   - never when this node or any member already has raft state: a cluster
//     exists, and the node joins it through the leader's reconciliation;
//   - only once at least expect alive members announce the same expect; a
//     member announcing another non-zero expect is a configuration mistake
//     and stops the decision;
//   - with exactly expect servers: the alive ones with the same expect, in
//     id order, the first expect of them; a node not among them does not
//     bootstrap (it is added later as any other node).
//
// Every chosen node computes the identical configuration, which is safe to
// bootstrap on each of them.
func decideBootstrap(self string, expect int, selfHasState bool, members []Member) bootstrapDecision {
	if expect <= 0 {
		return bootstrapDecision{Final: true, Reason: "bootstrap-expect not set"}
	}
	if selfHasState {
		return bootstrapDecision{Final: true, Reason: "this node has raft state"}
	}
	var candidates []Member
	for _, m := range members {
		if m.Status != StatusAlive && m.Status != StatusSuspect {
			continue
		}
		if m.RaftAddr == "" {
			continue // not a cronoq node
		}
		if m.HasRaftState {
			return bootstrapDecision{Final: true, Reason: fmt.Sprintf("member %s has raft state: a cluster exists", m.Name)}
		}
		if m.BootstrapExpect == 0 {
			continue
		}
		if m.BootstrapExpect != expect {
			return bootstrapDecision{Reason: fmt.Sprintf("member %s expects %d servers, this node %d",
				m.Name, m.BootstrapExpect, expect)}
		}
		candidates = append(candidates, m)
	}
	if len(candidates) < expect {
		return bootstrapDecision{Reason: fmt.Sprintf("%d of %d expected servers seen", len(candidates), expect)}
	}
	slices.SortFunc(candidates, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	candidates = candidates[:expect]

	servers := make([]raft.Server, 0, expect)
	addrs := make(map[string]string, expect)
	found := false
	for _, m := range candidates {
		if other, dup := addrs[m.RaftAddr]; dup {
			return bootstrapDecision{Reason: fmt.Sprintf("members %s and %s announce the same raft address %s",
				other, m.Name, m.RaftAddr)}
		}
		addrs[m.RaftAddr] = m.Name
		if m.Name == self {
			found = true
		}
		servers = append(servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       raft.ServerID(m.Name),
			Address:  raft.ServerAddress(m.RaftAddr),
		})
	}
	if !found {
		return bootstrapDecision{Reason: "this node is not among the first expected servers by id; it joins the cluster they form"}
	}
	return bootstrapDecision{Servers: servers}
}
