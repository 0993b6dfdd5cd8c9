package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

func TestFormElectAndServe(t *testing.T) {
	c := newTestCluster(t)
	nodes := c.formCluster("n1", "n2", "n3")
	leader := c.leader()

	// A follower learns the configuration from the leader's first entries,
	// which may still be on their way once it has heard of the leader.
	want := map[string]bool{"n1": true, "n2": true, "n3": true}
	for _, n := range nodes {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			ps, err := n.Peers()
			require.NoError(ct, err)
			got := map[string]bool{}
			for _, p := range ps {
				got[p.ID] = p.Voter
			}
			assert.Equal(ct, want, got, "peers seen by %s", n.ID())
		}, 10*time.Second, 10*time.Millisecond)
	}
	// Every node knows every other through gossip, with its addresses.
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			ms := n.Members()
			if len(ms) != 3 {
				return false
			}
			for _, m := range ms {
				if m.Status != cluster.StatusAlive || m.RaftAddr != c.node(m.Name).RaftAddr() || m.HTTPAddr != c.node(m.Name).HTTPAddr() {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)

	// Followers point at the leader.
	for _, n := range nodes {
		if n == leader {
			continue
		}
		_, err := n.TestEngine()
		var nle *cluster.NotLeaderError
		require.ErrorAs(t, err, &nle)
		require.Equal(t, leader.ID(), nle.LeaderID)
		require.Equal(t, leader.HTTPAddr(), nle.LeaderHTTPAddr)
		_, err = n.ConsistentRead(context.Background())
		require.ErrorAs(t, err, &nle)
		_, st := n.StaleRead()
		require.False(t, st.IsLeader)
		require.True(t, st.KnownLeader)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := c.submitKey(ctx, "k1")
	require.NoError(t, err)
	state, err := leader.ConsistentRead(ctx)
	require.NoError(t, err)
	task, ok := state.Get(id)
	require.True(t, ok)
	require.Equal(t, "k1", task.Key)
	require.Equal(t, leader.Epoch(), state.Epoch())
	h := c.converged()
	idx, bh, err := leader.Barrier(ctx)
	require.NoError(t, err)
	require.Equal(t, h, bh)
	require.Equal(t, leader.FSM().AppliedIndex(), idx)
	require.Equal(t, "Leader", leader.RaftStats()["state"])
	_, _, err = c.node(followerOf(t, c, leader)).Barrier(ctx)
	require.ErrorAs(t, err, new(*cluster.NotLeaderError))

	for _, n := range nodes {
		h := n.Health()
		require.Equal(t, n.ID(), h.Node)
		require.Equal(t, leader.ID(), h.Leader)
		require.Equal(t, state.Epoch(), h.Epoch)
		require.Equal(t, cluster.HealthOK, h.Status, "%v", h.Reasons)
	}
}

// TestFailoverSubmitsAndRestart submits 1,000 keyed tasks while the leader is
// shut down mid-stream, retrying unknown outcomes on the new leader with the
// same key; then every acknowledged task is on every node exactly once,
// completes exactly once, and the old leader restarted on its data dir
// catches up.
func TestFailoverSubmitsAndRestart(t *testing.T) {
	t.Run("leader shut down", func(t *testing.T) { testFailover(t, false) })
	t.Run("leader isolated then shut down", func(t *testing.T) { testFailover(t, true) })
}

func testFailover(t *testing.T, isolate bool) {
	c := newTestCluster(t)
	c.formCluster("n1", "n2", "n3")
	first := c.leader()

	const total = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var (
		mu    sync.Mutex
		acked = make(map[string]string, total) // key -> task id
		count atomic.Int64
	)
	keys := make(chan string)
	killed := make(chan struct{})
	var wg sync.WaitGroup
	errCh := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range keys {
				id, err := c.submitKey(ctx, key)
				if err != nil {
					errCh <- err
					return
				}
				mu.Lock()
				acked[key] = id
				mu.Unlock()
				count.Add(1)
			}
		}()
	}
	go func() {
		defer close(keys)
		for i := range total {
			if i == total/3 {
				// Kill the leader while submits are in flight.
				require.Eventually(t, func() bool { return count.Load() >= int64(total/4) }, 30*time.Second, time.Millisecond)
				go func() {
					defer close(killed)
					if isolate {
						// Cut every raft link first: entries in flight
						// end with an unknown outcome.
						first.IsolateRaft(true)
						require.Eventually(t, func() bool { return !first.IsLeader() }, 10*time.Second, time.Millisecond)
					}
					c.stop(first.ID())
				}()
			}
			select {
			case keys <- fmt.Sprintf("key-%04d", i):
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	<-killed
	close(errCh)
	for err := range errCh {
		require.NoError(t, err)
	}
	require.Len(t, acked, total)
	t.Logf("retried submits: %d %v", c.retries.Load(), c.retryKinds)

	second := c.leader()
	require.NotEqual(t, first.ID(), second.ID())
	require.Greater(t, second.Epoch(), uint64(1))
	c.converged()

	// Every acknowledged task is on every live node, once.
	for _, n := range c.live() {
		state, _ := n.StaleRead()
		var sum int64
		for _, pc := range state.Counts() {
			for _, v := range pc.ByStatus {
				sum += v
			}
		}
		require.EqualValues(t, total, sum, "node %s holds a duplicate or lost task", n.ID())
		for key, id := range acked {
			task, ok := state.GetByKey(key)
			require.True(t, ok, "node %s lost %s", n.ID(), key)
			require.Equal(t, id, task.ID)
		}
	}

	// Poll and complete everything through whichever node leads. A further
	// leader change (this machine may be loaded) only moves the work: a
	// completion whose outcome is unknown is settled by the final state.
	completions := make(map[string]int)
	unknown := make(map[string]bool)
	succeeded := func() int {
		n := c.leader()
		state, _ := n.StaleRead()
		var done int
		for _, pc := range state.Counts() {
			done += int(pc.ByStatus[fsm.StatusSucceeded])
		}
		return done
	}
	for succeeded() < total {
		n := c.leader()
		eng, err := n.TestEngine()
		if err != nil {
			require.True(t, retryable(err), "engine: %v", err)
			continue
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		grants, err := eng.Poll(pctx, core.Offer{Worker: "w1", Pool: "p", Slots: 200})
		pcancel()
		if err != nil {
			require.True(t, retryable(err), "poll: %v", err)
			continue
		}
		for _, g := range grants {
			err := eng.Complete(ctx, g.Lease, core.Outcome{Kind: core.OutcomeSuccess, Output: []byte("ok")})
			if err != nil {
				require.True(t, retryable(err), "complete: %v", err)
				unknown[g.ID] = true
				continue
			}
			completions[g.ID]++
		}
	}
	c.converged()
	for _, n := range c.live() {
		state, _ := n.StaleRead()
		for key, id := range acked {
			task, ok := state.GetByKey(key)
			require.True(t, ok)
			require.Equal(t, fsm.StatusSucceeded, task.Status, "task %s on %s", id, n.ID())
			require.LessOrEqual(t, completions[id], 1, "task %s completed twice", id)
			require.True(t, completions[id] == 1 || unknown[id], "task %s succeeded without an accepted completion", id)
		}
	}

	// The old leader comes back on its data dir and catches up.
	back := c.restart(first.ID())
	c.converged()
	state, _ := back.StaleRead()
	for key, id := range acked {
		task, ok := state.GetByKey(key)
		require.True(t, ok)
		require.Equal(t, id, task.ID)
		require.Equal(t, fsm.StatusSucceeded, task.Status, "task %s on %s", id, back.ID())
	}
	require.Equal(t, map[string]bool{"n1": true, "n2": true, "n3": true}, peerMap(t, back))
}

// TestSnapshotInstall: a follower that missed more entries than the leader
// keeps installs a snapshot and ends with the same FSM hash.
func TestSnapshotInstall(t *testing.T) {
	c := newTestCluster(t)
	var cfgs []cluster.Config
	var join []string
	for _, name := range []string{"n1", "n2", "n3"} {
		cfg := c.config(name)
		cfg.BootstrapExpect = 3
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 8
		cfg.SnapshotInterval = 50 * time.Millisecond
		cfgs = append(cfgs, cfg)
		join = append(join, cfg.GossipAddr)
	}
	for _, cfg := range cfgs {
		cfg.Join = join
		c.start(cfg)
	}
	leader := c.leader()
	var follower string
	for _, n := range c.live() {
		if n != leader {
			follower = n.ID()
			break
		}
	}
	lagging := c.node(follower)
	c.stop(follower)
	lastSeen := lagging.Raft().LastIndex()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 200 {
		_, err := c.submitKey(ctx, fmt.Sprintf("s-%d", i))
		require.NoError(t, err)
	}
	// The leader compacted its log past what the follower has.
	require.NoError(t, leader.Raft().Snapshot().Error())
	require.Eventually(t, func() bool {
		first, err := leader.LogStore().FirstIndex()
		return err == nil && first > lastSeen+1
	}, 10*time.Second, 10*time.Millisecond)

	back := c.restart(follower)
	h := c.converged()
	require.Equal(t, h, back.FSM().Hash())
	task, ok := back.FSM().GetByKey("s-199")
	require.True(t, ok)
	require.Equal(t, fsm.StatusQueued, task.Status)
	require.Equal(t, leader.FSM().Epoch(), back.FSM().Epoch())
}

// TestStaleEpochFenced: after leadership moves away and back, a batch cut by
// the engine of the first term (its epoch) is rejected by every FSM.
func TestStaleEpochFenced(t *testing.T) {
	c := newTestCluster(t)
	c.formCluster("n1", "n2", "n3")
	first := c.leader()
	oldEpoch := first.Epoch()
	require.NotZero(t, oldEpoch)

	// A batch the old engine would hold uncommitted: a real submit of a core
	// at the old epoch.
	now := time.Now()
	cc, err := core.New(core.Config{Seed: 7}.WithDefaults(), oldEpoch, now)
	require.NoError(t, err)
	cc.Submit(now, 1, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: "fenced"}})
	out := cc.Ready()
	require.NotEmpty(t, out.Mutations)
	stale, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: oldEpoch, Time: fsm.InstantOf(now), Mutations: out.Mutations})
	require.NoError(t, err)

	// Lose leadership and regain it: two new epochs.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	other, err := first.TransferLeadership(ctx, "")
	require.NoError(t, err)
	require.NotEqual(t, first.ID(), other)
	second := c.leader()
	require.Equal(t, other, second.ID())
	back, err := second.TransferLeadership(ctx, first.ID())
	require.NoError(t, err)
	require.Equal(t, first.ID(), back)
	require.Equal(t, first, c.leader())
	require.Greater(t, first.Epoch(), oldEpoch+1)

	// The old batch reaches the log now: every FSM refuses it.
	f := first.Raft().Apply(stale, 0)
	require.NoError(t, f.Error())
	rerr, _ := f.Response().(error)
	require.ErrorIs(t, rerr, fsm.ErrStaleEpoch)
	c.converged()
	for _, n := range c.live() {
		_, ok := n.FSM().GetByKey("fenced")
		require.False(t, ok, "node %s applied a fenced batch", n.ID())
	}

	// Control: the same mutations under the current epoch are accepted, so
	// the refusal above was the epoch's doing.
	current, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: first.FSM().Epoch(), Time: fsm.InstantOf(now), Mutations: out.Mutations})
	require.NoError(t, err)
	f = first.Raft().Apply(current, 0)
	require.NoError(t, f.Error())
	require.Nil(t, f.Response())
	c.converged()
	for _, n := range c.live() {
		_, ok := n.FSM().GetByKey("fenced")
		require.True(t, ok)
	}
}

func TestDataDirOfAnotherNodeRefused(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("n1")
	cfg.Dev = true
	n := c.start(cfg)
	c.stop(n.ID())

	cfg.NodeID = "n2"
	n2, err := cluster.New(cfg)
	require.NoError(t, err, "cluster.New opens nothing")
	err = n2.Start(context.Background())
	<-n2.Done()
	require.ErrorIs(t, n2.Err(), err, "a failed Start is why the node stopped")
	var mismatch *cluster.IdentityMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.Equal(t, "n1", mismatch.Stored)
	require.Equal(t, "n2", mismatch.Requested)

	// The original id still starts, with its data.
	cfg.NodeID = "n1"
	n = c.start(cfg)
	require.Equal(t, "n1", n.ID())
}

func TestDevMode(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("d1")
	cfg.DataDir = ""
	cfg.Dev = true
	start := time.Now()
	n := c.start(cfg)
	eng, err := func() (*engine.Engine, error) {
		var eng *engine.Engine
		var err error
		require.Eventually(t, func() bool { eng, err = n.TestEngine(); return err == nil }, 5*time.Second, 5*time.Millisecond)
		return eng, err
	}()
	require.NoError(t, err)
	require.Less(t, time.Since(start), 2*time.Second, "dev mode must be ready in under 2 seconds")
	dir := n.DataDir()
	require.DirExists(t, dir)

	subs, errs, err := submitted(eng.Submit(context.Background(), core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}}}))
	require.NoError(t, err)
	require.Empty(t, errs)
	state, err := n.ConsistentRead(context.Background())
	require.NoError(t, err)
	_, ok := state.Get(subs[0].ID)
	require.True(t, ok)
	require.Equal(t, cluster.HealthOK, n.Health().Status, "%v", n.Health().Reasons)

	c.stop(n.ID())
	require.NoDirExists(t, dir)
	require.NoError(t, n.Stop(context.Background()), "stop is idempotent")
	<-n.Done()
	require.NoError(t, n.Err())
	require.Error(t, n.Start(context.Background()), "a stopped node does not start again")
	_, err = n.TestEngine()
	require.Error(t, err)
	require.True(t, errors.As(err, new(*cluster.NotLeaderError)))
}

// reconcilePasses waits until the leader has run at least k more
// reconciliation passes.
func reconcilePasses(t *testing.T, leader *cluster.Node, k uint64) {
	t.Helper()
	start := leader.ReconcileRuns()
	require.Eventually(t, func() bool { return leader.ReconcileRuns() >= start+k }, 10*time.Second, 5*time.Millisecond)
}

func TestMembership(t *testing.T) {
	c := newTestCluster(t)
	var cfgs []cluster.Config
	var join []string
	for _, name := range []string{"n1", "n2", "n3"} {
		cfg := c.config(name)
		cfg.BootstrapExpect = 3
		cfg.DeadServerTimeout = 2 * time.Second
		cfgs = append(cfgs, cfg)
		join = append(join, cfg.GossipAddr)
	}
	for _, cfg := range cfgs {
		cfg.Join = join
		c.start(cfg)
	}
	leader := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.submitKey(ctx, "before-n4")
	require.NoError(t, err)

	// A fourth node without bootstrap-expect joins through one address: it
	// is added as a non-voter, then promoted once stable and caught up.
	cfg4 := c.config("n4")
	cfg4.DeadServerTimeout = 2 * time.Second
	cfg4.Join = []string{cfgs[1].GossipAddr}
	n4 := c.start(cfg4)
	require.Eventually(t, func() bool {
		v, ok := peerMap(t, leader)["n4"]
		return ok && !v
	}, 10*time.Second, 2*time.Millisecond, "n4 never seen as a non-voter")
	require.Eventually(t, func() bool { return peerMap(t, leader)["n4"] }, 10*time.Second, 10*time.Millisecond, "n4 not promoted")
	c.converged()
	_, ok := n4.FSM().GetByKey("before-n4")
	require.True(t, ok, "n4 caught up")

	// remove-peer: refused for an unknown id; shrinks the configuration;
	// the node, still gossiping, is not added back.
	err = leader.RemovePeer(ctx, "nope")
	require.ErrorIs(t, err, cluster.ErrUnknownPeer)
	var nle *cluster.NotLeaderError
	require.ErrorAs(t, n4.RemovePeer(ctx, "n4"), &nle, "only the leader removes peers")
	require.Equal(t, leader.ID(), nle.LeaderID)
	require.NoError(t, leader.RemovePeer(ctx, "n4"))
	require.Equal(t, map[string]bool{"n1": true, "n2": true, "n3": true}, peerMap(t, leader))
	reconcilePasses(t, leader, 3)
	require.Equal(t, map[string]bool{"n1": true, "n2": true, "n3": true}, peerMap(t, leader))
	m, ok := leader.Member("n4")
	require.True(t, ok)
	require.Equal(t, cluster.StatusAlive, m.Status, "n4 still gossips")
	c.converged()
	for _, n := range c.live() {
		require.True(t, n.FSM().Tombstoned("n4"), "tombstone on %s", n.ID())
	}

	// Readmitted, it comes back as a voter.
	require.NoError(t, leader.Readmit(ctx, "n4"))
	require.Eventually(t, func() bool { return peerMap(t, leader)["n4"] }, 10*time.Second, 10*time.Millisecond, "n4 not readmitted")

	// transfer-leadership: to any voter, then to a named one.
	newID, err := leader.TransferLeadership(ctx, "")
	require.NoError(t, err)
	require.NotEqual(t, leader.ID(), newID)
	leader = c.leader()
	require.Equal(t, newID, leader.ID())
	target := "n1"
	if leader.ID() == "n1" {
		target = "n2"
	}
	_, err = leader.TransferLeadership(ctx, "ghost")
	require.ErrorIs(t, err, cluster.ErrUnknownPeer)
	got, err := leader.TransferLeadership(ctx, target)
	require.NoError(t, err)
	require.Equal(t, target, got)
	leader = c.leader()
	require.Equal(t, target, leader.ID())
	self, err := leader.TransferLeadership(ctx, leader.ID())
	require.NoError(t, err)
	require.Equal(t, leader.ID(), self, "transfer to the leader itself is a no-op")

	// A fifth node with leave-on-terminate joins, then leaves: it is
	// removed from the configuration and shows as left.
	cfg5 := c.config("n5")
	cfg5.Join = []string{cfgs[0].GossipAddr}
	cfg5.LeaveOnTerminate = true
	c.start(cfg5)
	require.Eventually(t, func() bool { return peerMap(t, leader)["n5"] }, 10*time.Second, 10*time.Millisecond, "n5 not promoted")
	c.stop("n5")
	var seen string
	if !assert.Eventually(t, func() bool {
		_, in := peerMap(t, leader)["n5"]
		m, _ := leader.Member("n5")
		seen = fmt.Sprintf("in the configuration: %v, member status: %q", in, m.Status)
		return !in && m.Status == cluster.StatusLeft
	}, 20*time.Second, 10*time.Millisecond) {
		t.Fatalf("n5 did not leave (%s as %s sees it)", seen, leader.ID())
	}

	// Four voters: a killed follower shows failed within seconds and is
	// removed after DeadServerTimeout (three voters remain).
	victim := "n4"
	// Timed from the start of the stop: gossip may see the node fail while
	// its shutdown is still returning, and DeadServerTimeout runs from
	// that failure.
	killedAt := time.Now()
	c.stop(victim)
	require.Eventually(t, func() bool {
		m, _ := leader.Member(victim)
		return m.Status == cluster.StatusFailed
	}, 10*time.Second, 10*time.Millisecond, "%s not failed", victim)
	t.Logf("failure detected after %s", time.Since(killedAt))
	h := leader.Health()
	require.Equal(t, cluster.HealthDegraded, h.Status)
	require.Contains(t, fmt.Sprint(h.Reasons), "voter n4 is failed")
	require.Eventually(t, func() bool {
		_, in := peerMap(t, leader)[victim]
		return !in
	}, 15*time.Second, 10*time.Millisecond, "%s not removed", victim)
	require.GreaterOrEqual(t, time.Since(killedAt), 2*time.Second, "removed before DeadServerTimeout")
	require.Eventually(t, func() bool { return leader.Health().Status == cluster.HealthOK }, 5*time.Second, 10*time.Millisecond)

	// Three voters: a killed follower stays a voter (MinVoters 3).
	var follower string
	for _, n := range c.live() {
		if n != leader {
			follower = n.ID()
			break
		}
	}
	c.stop(follower)
	require.Eventually(t, func() bool {
		m, _ := leader.Member(follower)
		return m.Status == cluster.StatusFailed && time.Since(m.Since) > 2*time.Second
	}, 15*time.Second, 10*time.Millisecond)
	reconcilePasses(t, leader, 3)
	require.True(t, peerMap(t, leader)[follower], "%s removed below MinVoters", follower)
	_, err = c.submitKey(ctx, "after")
	require.NoError(t, err, "two of three voters still commit")
}

// TestEngineFailureReestablishes: when the engine stops by itself on a failed
// commit while its node still leads, the node re-establishes (barrier, new
// epoch, rebuilt engine) and serves again.
func TestEngineFailureReestablishes(t *testing.T) {
	c := newTestCluster(t)
	c.formCluster("n1", "n2", "n3")
	leader, eng := c.engine()
	epoch := leader.Epoch()

	// Move the epoch under the engine's feet: its next batch is fenced.
	bump, err := fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: epoch + 1, Leader: "intruder", Time: fsm.InstantOf(time.Now())})
	require.NoError(t, err)
	f := leader.Raft().Apply(bump, 0)
	require.NoError(t, f.Error())
	require.Equal(t, epoch+1, f.Response())

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _, err = submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: "fenced"}}))
	require.ErrorIs(t, err, fsm.ErrStaleEpoch, "the fenced batch fails its submitter")
	<-eng.Done()
	require.ErrorIs(t, eng.Err(), fsm.ErrStaleEpoch)

	require.Eventually(t, func() bool { return leader.Epoch() == epoch+2 }, 10*time.Second, 5*time.Millisecond)
	again, eng2 := c.engine()
	require.Equal(t, leader, again, "the same node leads again")
	require.NotSame(t, eng, eng2)
	id, err := c.submitKey(ctx, "fenced")
	require.NoError(t, err)
	state, err := leader.ConsistentRead(ctx)
	require.NoError(t, err)
	task, ok := state.Get(id)
	require.True(t, ok)
	require.Equal(t, "fenced", task.Key)
	require.Equal(t, 1, countKeys(state, "fenced"))
	c.converged()
}

func countKeys(s fsm.Reader, key string) int {
	n := 0
	tasks, _ := s.List(fsm.ListQuery{Limit: 1 << 20})
	for _, t := range tasks {
		if t.Key == key {
			n++
		}
	}
	return n
}

// followerOf returns the id of a live node other than leader.
func followerOf(t *testing.T, c *testCluster, leader *cluster.Node) string {
	for _, n := range c.live() {
		if n != leader {
			return n.ID()
		}
	}
	t.Fatal("no follower")
	return ""
}

// TestLeaderLeaves: a leader that leaves hands off leadership first, is
// removed from the raft configuration by its successor and shows as left.
func TestLeaderLeaves(t *testing.T) {
	c := newTestCluster(t)
	c.formCluster("n1", "n2", "n3")
	leader := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, leader.Leave(ctx))
	require.False(t, leader.IsLeader())
	c.stop(leader.ID())
	next := c.leader()
	require.NotContains(t, peerMap(t, next), leader.ID())
	require.Eventually(t, func() bool {
		m, _ := next.Member(leader.ID())
		return m.Status == cluster.StatusLeft
	}, 10*time.Second, 10*time.Millisecond)
	_, err := c.submitKey(ctx, "after-leave")
	require.NoError(t, err)
}
