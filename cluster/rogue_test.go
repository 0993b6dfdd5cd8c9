package cluster_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// rogueTerm is far above any term the test cluster reaches.
const rogueTerm = 1_000_000

// rogueFSM is the state machine of a rogue raft instance: it keeps nothing.
type rogueFSM struct{}

func (rogueFSM) Apply(*raft.Log) any                 { return nil }
func (rogueFSM) Snapshot() (raft.FSMSnapshot, error) { return rogueSnapshot{}, nil }
func (rogueFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type rogueSnapshot struct{}

func (rogueSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (rogueSnapshot) Release()                             {}

// startRogue starts a raft instance that is no member of the test cluster:
// its own id, its own address, in-memory stores, a current term of
// rogueTerm, and a configuration of itself plus the given servers of the
// cluster. It stops when the test ends.
func startRogue(t *testing.T, id string, others ...raft.Server) *raft.Raft {
	t.Helper()
	addrs := testcluster.NewAddrs()
	trans, err := raft.NewTCPTransportWithLogger(addrs.Raft, nil, 3, 2*time.Second, hclog.NewNullLogger())
	require.NoError(t, err)
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(id)
	cfg.Logger = hclog.NewNullLogger()
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	conf := raft.Configuration{Servers: append([]raft.Server{{
		Suffrage: raft.Voter, ID: cfg.LocalID, Address: trans.LocalAddr(),
	}}, others...)}
	require.NoError(t, raft.BootstrapCluster(cfg, store, store, snaps, trans, conf))
	require.NoError(t, store.SetUint64([]byte("CurrentTerm"), rogueTerm))
	r, err := raft.NewRaft(cfg, rogueFSM{}, store, store, snaps, trans)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Shutdown().Error() })
	return r
}

// raftTerm is a node's current raft term.
func raftTerm(t *testing.T, n *cluster.Node) uint64 {
	t.Helper()
	term, err := strconv.ParseUint(n.RaftStats()["term"], 10, 64)
	require.NoError(t, err)
	return term
}

// server is n as a server of a raft configuration.
func server(n *cluster.Node, suffrage raft.ServerSuffrage) raft.Server {
	return raft.Server{Suffrage: suffrage, ID: raft.ServerID(n.ID()), Address: raft.ServerAddress(n.RaftAddr())}
}

// sameState waits until b has applied a's whole log, with the same state.
func sameState(t *testing.T, a, b *cluster.Node) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := a.RaftStats()
		ai, ah, err := a.Hash()
		if err != nil || st["applied_index"] != st["last_log_index"] {
			return false
		}
		bi, bh, err := b.Hash()
		return err == nil && ai == bi && ah == bh
	}, 30*time.Second, 20*time.Millisecond, "%s and %s did not converge", a.ID(), b.ID())
}

// TestNonMemberCannotAppendOrVote: raft instances outside the cluster's
// configuration, with a far higher term, cannot make a member take their
// appends (a rogue leader that counts the member as its follower) or their
// vote requests (a rogue candidate that needs the member's vote), nor can
// one that claims the id of a peer removed with RemovePeer (tombstoned,
// still gossiping). The member keeps its term, its leader and its log.
func TestNonMemberCannotAppendOrVote(t *testing.T) {
	c := newTestCluster(t)
	c.formCluster("n1", "n2", "n3")
	leader := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.submitKey(ctx, "before")
	require.NoError(t, err)
	var victim, removed *cluster.Node
	for _, n := range c.live() {
		switch {
		case n == leader:
		case victim == nil:
			victim = n
		default:
			removed = n
		}
	}
	members := map[string]bool{"n1": true, "n2": true, "n3": true}

	// checkIntact: the victim refused more RPCs than before (the rogue's
	// reached it), never took the rogue's term, and follows a leader of
	// the cluster. (Its own term may move: a loaded machine can make the
	// cluster elect again.)
	checkIntact := func(refusedBefore uint64, what string) {
		t.Helper()
		require.Eventually(t, func() bool { return victim.RaftRefused() >= refusedBefore+5 },
			20*time.Second, 10*time.Millisecond, "%s: the victim did not refuse the rogue's RPCs", what)
		require.Less(t, raftTerm(t, victim), uint64(rogueTerm), "%s: the victim took the rogue's term", what)
		require.True(t, members[c.leader().ID()], "%s: a rogue leads", what)
		id, _ := victim.Leader()
		require.True(t, members[id], "%s: the victim follows %q", what, id)
	}

	// A rogue leader: it leads alone (the victim is its non-voter) and
	// sends the victim heartbeats and entries at its term.
	refused := victim.RaftRefused()
	rogue := startRogue(t, "rogue-leader", server(victim, raft.Nonvoter))
	require.Eventually(t, func() bool { return rogue.State() == raft.Leader }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, rogue.Apply([]byte("entry"), 5*time.Second).Error())
	checkIntact(refused, "rogue leader")

	// A rogue candidate: it needs the victim's vote, and never gets it.
	refused = victim.RaftRefused()
	candidate := startRogue(t, "rogue-candidate", server(victim, raft.Voter))
	checkIntact(refused, "rogue candidate")
	require.NotEqual(t, raft.Leader, candidate.State())

	// A removed peer: tombstoned, still gossiping alive; an instance
	// claiming its id is refused too.
	require.Eventually(t, func() bool {
		// Leadership may move under load; a removal whose outcome was
		// unknown is found done.
		err := c.leader().RemovePeer(ctx, removed.ID())
		return err == nil || errors.Is(err, cluster.ErrUnknownPeer)
	}, 30*time.Second, 10*time.Millisecond)
	delete(members, removed.ID())
	m, ok := victim.Member(removed.ID())
	require.True(t, ok)
	require.Equal(t, cluster.StatusAlive, m.Status, "the removed peer still gossips")
	refused = victim.RaftRefused()
	impostor := startRogue(t, removed.ID(), server(victim, raft.Nonvoter))
	require.Eventually(t, func() bool { return impostor.State() == raft.Leader }, 10*time.Second, 10*time.Millisecond)
	checkIntact(refused, "removed peer")

	// The cluster still commits, and the victim has the cluster's log and
	// nothing else.
	_, err = c.submitKey(ctx, "after")
	require.NoError(t, err)
	sameState(t, c.leader(), victim)
	_, ok = victim.FSM().GetByKey("after")
	require.True(t, ok)
	require.Less(t, raftTerm(t, victim), uint64(rogueTerm))
}

// TestStaleConfigurationCatchesUp: a node that was down while the
// membership changed restarts with a configuration that names none of the
// current members but itself; it still takes the leader's appends (gossip
// knows the leader as a live member) and catches up.
func TestStaleConfigurationCatchesUp(t *testing.T) {
	c := newTestCluster(t)
	c.formCluster("n1", "n2", "n3")
	leader := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, err := c.submitKey(ctx, "before")
	require.NoError(t, err)

	// A follower goes down (it stays in the configuration).
	var sleeper string
	var others []string
	for _, n := range c.live() {
		if n != leader && sleeper == "" {
			sleeper = n.ID()
		} else {
			others = append(others, n.ID())
		}
	}
	c.stop(sleeper)

	// n4 and n5 join and take over; the other two are removed and stop.
	for _, name := range []string{"n4", "n5"} {
		cfg := c.config(name)
		cfg.Join = []string{leader.GossipAddr()}
		c.start(cfg)
		require.Eventually(t, func() bool { return peerMap(t, c.leader())[name] }, 30*time.Second, 10*time.Millisecond, "%s not promoted", name)
	}
	require.Eventually(t, func() bool {
		got, err := c.leader().TransferLeadership(ctx, "n4")
		return err == nil && got == "n4"
	}, 30*time.Second, 10*time.Millisecond, "n4 did not take the leadership")
	for _, id := range others {
		require.Eventually(t, func() bool {
			err := c.leader().RemovePeer(ctx, id)
			return err == nil || errors.Is(err, cluster.ErrUnknownPeer)
		}, 30*time.Second, 10*time.Millisecond, "%s not removed", id)
		c.stop(id)
	}
	_, err = c.submitKey(ctx, "while-down")
	require.NoError(t, err)

	// Back on its data dir, the sleeper's configuration names the two
	// removed nodes and itself; it joins gossip through n4.
	cfg := c.Node(sleeper).Config
	cfg.Join = []string{c.node("n4").GossipAddr()}
	back := c.start(cfg)
	c.converged()
	_, ok := back.FSM().GetByKey("while-down")
	require.True(t, ok, "the sleeper caught up")
	require.Equal(t, map[string]bool{sleeper: true, "n4": true, "n5": true}, peerMap(t, back))
}
