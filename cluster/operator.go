package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/fsm"
)

// Peer is one server of the raft configuration.
type Peer struct {
	ID      string
	Address string // raft address
	Voter   bool
	Leader  bool
}

// Peers returns the raft configuration as this node knows it (the latest
// one, which may not be committed yet), sorted by id. The leader flag comes
// from a separate read and may lag a change of leader.
func (n *Node) Peers() ([]Peer, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("reading raft configuration: %w", err)
	}
	_, leader := n.raft.LeaderWithID()
	var out []Peer
	for _, s := range f.Configuration().Servers {
		out = append(out, Peer{
			ID:      string(s.ID),
			Address: string(s.Address),
			Voter:   s.Suffrage == raft.Voter,
			Leader:  s.ID == leader,
		})
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// RemovePeer removes server id from the cluster for good (leader only): it
// commits a tombstone for id through the log, so that reconciliation does
// not add the node back while it still gossips, then removes it from the
// raft configuration. An id that is not in the configuration is refused
// with ErrUnknownPeer. The leader may remove itself; it steps down once the
// change commits.
func (n *Node) RemovePeer(ctx context.Context, id string) error {
	if err := n.requireReady(); err != nil {
		return err
	}
	if _, ok := n.configServer(id); !ok {
		return fmt.Errorf("removing peer %q: %w", id, ErrUnknownPeer)
	}
	if err := n.commitTombstone(ctx, id, false); err != nil {
		return fmt.Errorf("removing peer %q: %w", id, err)
	}
	if err := n.await(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
		return fmt.Errorf("removing peer %q from the raft configuration: %w", id, err)
	}
	n.logger.Info("removed peer", "peer", id)
	return nil
}

// Readmit clears the tombstone RemovePeer left for id (leader only), so
// that reconciliation adds the node again once it is alive in gossip.
func (n *Node) Readmit(ctx context.Context, id string) error {
	if err := n.requireReady(); err != nil {
		return err
	}
	if err := validateNodeID(id); err != nil {
		return fmt.Errorf("readmitting %q: %w", id, err)
	}
	if !n.state.Tombstoned(id) {
		return nil
	}
	if err := n.commitTombstone(ctx, id, true); err != nil {
		return fmt.Errorf("readmitting %q: %w", id, err)
	}
	n.membershipChanged()
	return nil
}

// commitTombstone commits a batch holding only a Tombstone mutation, under
// the epoch of this leader's engine (the FSM fences batches by epoch; the
// engine does not carry membership mutations, so the batch goes to raft
// directly). A batch that raced with a new epoch is retried.
func (n *Node) commitTombstone(ctx context.Context, id string, clear bool) error {
	var err error
	for range 3 {
		epoch := n.Epoch()
		if epoch == 0 {
			return n.notLeader(nil)
		}
		now := n.now()
		var data []byte
		data, err = fsm.EncodeCommitBatch(&fsm.CommitBatch{
			Epoch: epoch,
			Time:  fsm.InstantOf(now),
			Mutations: []fsm.Mutation{{Tombstone: &fsm.Tombstone{
				NodeID: id, At: fsm.InstantOf(now), Remove: clear,
			}}},
		})
		if err != nil {
			return fmt.Errorf("encoding tombstone: %w", err)
		}
		var resp any
		resp, err = n.applyAwait(ctx, data)
		if err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
				return n.notLeader(err)
			}
			return fmt.Errorf("committing tombstone: %w", err)
		}
		rerr, _ := resp.(error)
		if rerr == nil {
			return nil
		}
		err = fmt.Errorf("tombstone refused: %w", rerr)
		if !errors.Is(rerr, fsm.ErrStaleEpoch) {
			return err
		}
	}
	return err
}

// configServer returns server id of the latest raft configuration.
func (n *Node) configServer(id string) (raft.Server, bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

// TransferLeadership hands leadership to voter id, or to the most up to date
// voter when id is empty (leader only), and returns the id of the new
// leader once one is known. An id that is not in the configuration is
// refused with ErrUnknownPeer, one that is not a voter as invalid, and so is
// an empty id when no other voter exists. The engine stops before the
// transfer (writes during a transfer fail); if the transfer fails this node
// re-establishes its leadership. Transferring to the current leader is a
// no-op.
func (n *Node) TransferLeadership(ctx context.Context, id string) (string, error) {
	if n.raft.State() != raft.Leader {
		return "", n.notLeader(nil)
	}
	if id == n.id {
		return n.id, nil
	}
	req := transferRequest{resp: make(chan error, 1)}
	if id != "" {
		s, ok := n.configServer(id)
		if !ok {
			return "", fmt.Errorf("transferring leadership to %q: %w", id, ErrUnknownPeer)
		}
		if s.Suffrage != raft.Voter {
			return "", Invalid("id", "%s is not a voter", id)
		}
		req.id, req.addr = s.ID, s.Address
	} else if !n.hasOtherVoters() {
		// Refused before the engine stops for the transfer.
		return "", Invalid("id", "no other voter to transfer leadership to")
	}
	select {
	case n.transferCh <- req:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-n.shutdownCh:
		return "", ErrShutdown
	}
	select {
	case err := <-req.resp:
		if err != nil {
			return "", err
		}
	case <-ctx.Done():
		return "", ctx.Err()
	}
	var leader string
	err := n.waitFor(ctx, func() bool {
		_, l := n.raft.LeaderWithID()
		leader = string(l)
		return leader != "" && leader != n.id && (id == "" || leader == id)
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the new leader: %w", err)
	}
	return leader, nil
}

// consistentState returns the replicated state for a linearizable read:
// this node must lead, be ready (its barrier passed) and still hold a
// quorum (VerifyLeader). Otherwise a *NotLeaderError.
func (n *Node) consistentState(ctx context.Context) (*fsm.State, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	if err := n.await(ctx, n.raft.VerifyLeader()); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, n.notLeader(err)
		}
		return nil, fmt.Errorf("verifying leadership: %w", err)
	}
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	return n.state, nil
}

// Staleness describes how current a stale read is.
type Staleness struct {
	IsLeader    bool
	KnownLeader bool
	// LastContact is the time since this node last heard from the leader:
	// 0 on the leader, negative when it never has.
	LastContact  time.Duration
	AppliedIndex uint64
}

// staleState returns the local replicated state, which may lag the leader,
// with how stale it may be.
func (n *Node) staleState() (*fsm.State, Staleness) {
	_, leader := n.raft.LeaderWithID()
	st := Staleness{
		IsLeader:     n.raft.State() == raft.Leader,
		KnownLeader:  leader != "",
		AppliedIndex: n.raft.AppliedIndex(),
	}
	if !st.IsLeader {
		if lc := n.raft.LastContact(); lc.IsZero() {
			st.LastContact = -1
		} else {
			st.LastContact = time.Since(lc)
		}
	}
	return n.state, st
}

// Barrier waits (leader only) until every entry committed so far is applied
// on this node, and returns the FSM's applied index and hash at that point
// (a hash comparable across nodes at the same index).
func (n *Node) Barrier(ctx context.Context) (uint64, [32]byte, error) {
	if err := n.requireReady(); err != nil {
		return 0, [32]byte{}, err
	}
	if err := n.await(ctx, n.raft.Barrier(n.cfg.BarrierTimeout)); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, [32]byte{}, n.notLeader(err)
		}
		return 0, [32]byte{}, fmt.Errorf("barrier: %w", err)
	}
	return n.Hash()
}

// Hash returns the applied index of this node's replica and the SHA-256 of
// its snapshot encoding there: nodes that applied the same log have the
// same hash.
func (n *Node) Hash() (uint64, [32]byte, error) {
	v := n.state.View()
	h := sha256.New()
	if _, err := v.WriteTo(h); err != nil {
		return 0, [32]byte{}, fmt.Errorf("hashing the state: %w", err)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return v.AppliedIndex(), sum, nil
}

// RaftStats returns raft's own statistics (state, term, indexes, last
// contact, configuration) for diagnostics.
func (n *Node) RaftStats() map[string]string { return n.raft.Stats() }
