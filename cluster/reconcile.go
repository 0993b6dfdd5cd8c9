package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Membership reconciliation, run by the leader every ReconcileInterval and on
// every gossip event (Nomad's reconcile/reconcileMember, without serf):
//
//   - an alive member that is not in the raft configuration and not
//     tombstoned is added as a non-voter, and promoted to voter once it has
//     been in the configuration and alive for ServerStabilizationTime and
//     its applied index (published in its gossip metadata while it is not
//     a voter) is within MaxTrailingLogs of the leader's; hashicorp/raft
//     does not expose followers' match indexes, so this is how the leader
//     tells that a non-voter caught up;
//   - a member that left on purpose, or a tombstoned one, is removed;
//   - a failed member (or a configured server gossip has never shown this
//     leader) is removed after DeadServerTimeout, and a voter only while at
//     least MinVoters voters remain;
//   - a member whose raft address changed has its stale entry removed first
//     (and is added again on a later pass);
//   - the leader never removes itself.
//
// Each pass makes at most one configuration change per plan and re-plans
// from the new configuration; raft allows one uncommitted change at a time.

// reconcileState is the leader's own bookkeeping across passes of one term.
type reconcileState struct {
	nonvoterSince map[string]time.Time // non-voter in the configuration and alive since
	missingSince  map[string]time.Time // in the configuration, unknown to gossip since
}

func newReconcileState() *reconcileState {
	return &reconcileState{
		nonvoterSince: make(map[string]time.Time),
		missingSince:  make(map[string]time.Time),
	}
}

type actionKind uint8

const (
	actAddNonvoter actionKind = iota + 1
	actPromote
	actRemove
)

func (k actionKind) String() string {
	switch k {
	case actAddNonvoter:
		return "add non-voter"
	case actPromote:
		return "promote to voter"
	case actRemove:
		return "remove"
	}
	return "unknown"
}

// reconcileAction is one raft configuration change.
type reconcileAction struct {
	Kind   actionKind
	ID     string
	Addr   string
	Reason string
}

// reconcileInput is everything planReconcile looks at.
type reconcileInput struct {
	Self          string
	Servers       []raft.Server
	Members       []Member
	Tombstoned    func(id string) bool
	Now           time.Time
	LeaderApplied uint64

	DeadServerTimeout time.Duration
	Stabilization     time.Duration
	MinVoters         int
	MaxTrailingLogs   uint64
}

// planReconcile returns the next configuration change to make, if any. It
// updates st's since-times.
func planReconcile(in reconcileInput, st *reconcileState) (reconcileAction, bool) {
	servers := slices.Clone(in.Servers)
	slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	members := slices.Clone(in.Members)
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })

	byName := make(map[string]Member, len(members))
	for _, m := range members {
		byName[m.Name] = m
	}
	byID := make(map[string]raft.Server, len(servers))
	byAddr := make(map[string]raft.Server, len(servers))
	voters := 0
	for _, s := range servers {
		byID[string(s.ID)] = s
		byAddr[string(s.Address)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	alive := func(m Member) bool { return m.Status == StatusAlive || m.Status == StatusSuspect }

	// Since-times.
	for id := range st.nonvoterSince {
		if s, ok := byID[id]; !ok || s.Suffrage != raft.Nonvoter {
			delete(st.nonvoterSince, id)
		}
	}
	for id := range st.missingSince {
		if _, ok := byID[id]; !ok {
			delete(st.missingSince, id)
		}
	}
	for _, s := range servers {
		id := string(s.ID)
		m, known := byName[id]
		if known {
			delete(st.missingSince, id)
		} else if _, ok := st.missingSince[id]; !ok && id != in.Self {
			st.missingSince[id] = in.Now
		}
		if s.Suffrage == raft.Nonvoter && known && alive(m) && m.RaftAddr == string(s.Address) {
			if _, ok := st.nonvoterSince[id]; !ok {
				st.nonvoterSince[id] = in.Now
			}
		} else {
			delete(st.nonvoterSince, id)
		}
	}

	// 1. Servers that must go: tombstoned, or left on purpose.
	for _, s := range servers {
		id := string(s.ID)
		if id == in.Self {
			continue
		}
		if in.Tombstoned(id) {
			return reconcileAction{Kind: actRemove, ID: id, Reason: "removed by an operator (tombstoned)"}, true
		}
		if m, ok := byName[id]; ok && m.Status == StatusLeft {
			return reconcileAction{Kind: actRemove, ID: id, Reason: "left the cluster"}, true
		}
	}

	// 2. Alive members not (correctly) in the configuration.
	for _, m := range members {
		if !alive(m) || m.RaftAddr == "" || m.Name == in.Self || in.Tombstoned(m.Name) {
			continue
		}
		if s, ok := byID[m.Name]; ok {
			if string(s.Address) == m.RaftAddr {
				continue
			}
			return reconcileAction{Kind: actRemove, ID: m.Name,
				Reason: fmt.Sprintf("raft address changed from %s to %s", s.Address, m.RaftAddr)}, true
		}
		if s, ok := byAddr[m.RaftAddr]; ok {
			other := string(s.ID)
			if om, ok := byName[other]; (ok && alive(om) && om.RaftAddr == m.RaftAddr) || other == in.Self {
				continue // two live nodes claim one address: leave it to the operator
			}
			return reconcileAction{Kind: actRemove, ID: other,
				Reason: fmt.Sprintf("its raft address %s now belongs to %s", m.RaftAddr, m.Name)}, true
		}
		return reconcileAction{Kind: actAddNonvoter, ID: m.Name, Addr: m.RaftAddr, Reason: "alive member not in the configuration"}, true
	}

	// 3. Non-voters that are stable and caught up.
	for _, s := range servers {
		id := string(s.ID)
		since, ok := st.nonvoterSince[id]
		if !ok || in.Now.Sub(since) < in.Stabilization {
			continue
		}
		m := byName[id]
		if m.Applied+in.MaxTrailingLogs < in.LeaderApplied {
			continue
		}
		return reconcileAction{Kind: actPromote, ID: id, Addr: string(s.Address),
			Reason: fmt.Sprintf("stable for %s, applied %d of %d", in.Now.Sub(since).Round(time.Millisecond), m.Applied, in.LeaderApplied)}, true
	}

	// 4. Servers failed for longer than DeadServerTimeout.
	for _, s := range servers {
		id := string(s.ID)
		if id == in.Self {
			continue
		}
		var since time.Time
		if m, ok := byName[id]; ok {
			if m.Status != StatusFailed {
				continue
			}
			since = m.Since
		} else {
			since = st.missingSince[id]
		}
		if in.Now.Sub(since) < in.DeadServerTimeout {
			continue
		}
		if s.Suffrage == raft.Voter && voters-1 < in.MinVoters {
			continue
		}
		return reconcileAction{Kind: actRemove, ID: id,
			Reason: fmt.Sprintf("failed for %s", in.Now.Sub(since).Round(time.Second))}, true
	}
	return reconcileAction{}, false
}

// maxReconcileActions bounds the changes of one pass; the rest waits for the
// next one (which is requested at once).
const maxReconcileActions = 8

// reconcile runs one reconciliation pass on the leader.
func (n *Node) reconcile(ctx context.Context, st *reconcileState) error {
	defer n.reconcileRuns.Add(1)
	for range maxReconcileActions {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return fmt.Errorf("reading raft configuration: %w", err)
		}
		a, ok := planReconcile(reconcileInput{
			Self:              n.id,
			Servers:           f.Configuration().Servers,
			Members:           n.Members(),
			Tombstoned:        n.state.Tombstoned,
			Now:               time.Now(),
			LeaderApplied:     n.raft.AppliedIndex(),
			DeadServerTimeout: n.cfg.DeadServerTimeout,
			Stabilization:     n.cfg.ServerStabilizationTime,
			MinVoters:         n.cfg.MinVoters,
			MaxTrailingLogs:   n.cfg.MaxTrailingLogs,
		}, st)
		if !ok {
			return nil
		}
		n.logger.Info("reconcile: "+a.Kind.String(), "peer", a.ID, "addr", a.Addr, "reason", a.Reason)
		var fut raft.IndexFuture
		switch a.Kind {
		case actAddNonvoter:
			fut = n.raft.AddNonvoter(raft.ServerID(a.ID), raft.ServerAddress(a.Addr), 0, 0)
		case actPromote:
			fut = n.raft.AddVoter(raft.ServerID(a.ID), raft.ServerAddress(a.Addr), 0, 0)
		case actRemove:
			fut = n.raft.RemoveServer(raft.ServerID(a.ID), 0, 0)
		}
		if err := n.await(ctx, fut); err != nil {
			return fmt.Errorf("reconcile: %s %s: %w", a.Kind, a.ID, err)
		}
	}
	select {
	case n.reconcileCh <- struct{}{}:
	default:
	}
	return nil
}
