package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// The backup and recovery tests: `operator snapshot save|restore` through
// the SDK and the API servers of real nodes, and the lost-quorum recovery
// from peers.json.

// steady relaxes the raft timings of the test configuration: these tests
// are about what a restore leaves behind, and the loaded machines they run
// on (two cores, -race) otherwise change leaders every second or so.
func steady(_ int, cfg *cluster.Config) {
	cfg.HeartbeatTimeout = 1500 * time.Millisecond
	cfg.ElectionTimeout = 1500 * time.Millisecond
	cfg.LeaderLeaseTimeout = time.Second
}

// onLeader runs op on the current leader of c until it succeeds or fails
// with an error that is not "try again, maybe elsewhere" (the machine may be
// slow enough under -race for leadership to move).
func onLeader[T any](ctx context.Context, t *testing.T, c *testcluster.Cluster, op func(*cluster.Node) (T, error)) T {
	t.Helper()
	for {
		l, _ := c.Leader()
		v, err := op(l.Node)
		if err == nil || !retryable(err) {
			require.NoError(t, err)
			return v
		}
		require.NoError(t, ctx.Err(), "last error: %v", err)
		t.Logf("retrying on the leader: %v", err)
	}
}

// submitTask submits one task (which must have a key, so that a retry is
// safe) and returns its id.
func submitTask(ctx context.Context, t *testing.T, c *testcluster.Cluster, spec cluster.Spec) string {
	t.Helper()
	require.NotEmpty(t, spec.Key)
	return onLeader(ctx, t, c, func(n *cluster.Node) (string, error) {
		res, err := n.Submit(ctx, cluster.SubmitOne, []cluster.Spec{spec})
		if err == nil && len(res.Errs) > 0 && res.Errs[0] != nil {
			err = res.Errs[0]
		}
		if err != nil {
			return "", err
		}
		return res.Tasks[0].ID, nil
	})
}

// pollOne takes one attempt of pool and returns its grant.
func pollOne(ctx context.Context, t *testing.T, c *testcluster.Cluster, pool, worker string) cluster.Grant {
	t.Helper()
	gs := onLeader(ctx, t, c, func(n *cluster.Node) ([]cluster.Grant, error) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return n.Poll(pctx, cluster.Offer{Worker: worker, Pool: pool, Slots: 1})
	})
	require.Len(t, gs, 1)
	return gs[0]
}

// complete reports one outcome and returns its error (a stale lease, or
// nil).
func complete(ctx context.Context, t *testing.T, c *testcluster.Cluster, lease uint64, out cluster.Outcome) error {
	t.Helper()
	var stale error
	unsure := false // an earlier try may have taken the completion
	onLeader(ctx, t, c, func(n *cluster.Node) (struct{}, error) {
		err := n.Complete(ctx, []cluster.Completion{{Lease: lease, Outcome: out}})[0]
		switch {
		case errors.Is(err, cluster.ErrStaleLease) && unsure:
			err = nil
		case errors.Is(err, cluster.ErrStaleLease):
			stale, err = err, nil
		case errors.Is(err, cluster.ErrOutcomeUnknown):
			unsure = true
		}
		return struct{}{}, err
	})
	return stale
}

// restoreFile restores data through cl, again when the outcome of an
// attempt is unknown (leadership lost before a quorum confirmed it), as
// the docs tell operators to do.
func restoreFile(ctx context.Context, t *testing.T, cl *client.Client, data []byte) *client.RestoreResult {
	t.Helper()
	for try := 1; ; try++ {
		res, err := cl.SnapshotRestore(ctx, bytes.NewReader(data))
		if errors.Is(err, client.ErrOutcomeUnknown) && try < 5 {
			t.Logf("restore %d: %v; again", try, err)
			continue
		}
		require.NoError(t, err)
		return res
	}
}

// taskState is what a test expects of a task after a restore.
type taskState struct {
	status fsm.Status
	output string
}

// loadSource fills a cluster with tasks in every status: succeeded with an
// output, failed, cancelled, running (leased), queued and scheduled. It
// returns the tasks (as the leader's state has them), the running one and
// its lease.
func loadSource(ctx context.Context, t *testing.T, c *testcluster.Cluster) (map[string]taskState, string, uint64) {
	t.Helper()
	spec := func(pool string, i int) cluster.Spec {
		return cluster.Spec{Template: fsm.Template{Pool: pool, Kind: "k", Payload: []byte(fmt.Sprintf("payload-%d", i)), MaxAttempts: 1}, Key: fmt.Sprintf("%s-%d", pool, i)}
	}
	ok := submitTask(ctx, t, c, spec("a", 1))
	g := pollOne(ctx, t, c, "a", "w1")
	require.Equal(t, ok, g.ID)
	require.NoError(t, complete(ctx, t, c, g.Lease, cluster.Outcome{Kind: cluster.OutcomeSuccess, Output: []byte("output of a-1")}))

	failed := submitTask(ctx, t, c, spec("b", 1))
	g = pollOne(ctx, t, c, "b", "w1")
	require.Equal(t, failed, g.ID)
	require.NoError(t, complete(ctx, t, c, g.Lease, cluster.Outcome{Kind: cluster.OutcomePermanent, Message: "boom"}))

	cancelled := submitTask(ctx, t, c, spec("c", 1))
	onLeader(ctx, t, c, func(n *cluster.Node) (cluster.Cancelled, error) {
		return n.Cancel(ctx, cluster.TaskRef{ID: cancelled})
	})

	running := submitTask(ctx, t, c, spec("d", 1))
	g = pollOne(ctx, t, c, "d", "w1")
	require.Equal(t, running, g.ID)

	for i := range 5 {
		submitTask(ctx, t, c, spec("e", i))
	}
	later := spec("f", 1)
	later.Delay = time.Hour
	submitTask(ctx, t, c, later)

	c.Converged()
	l, _ := c.Leader()
	want := map[string]taskState{}
	l.Node.FSM().View().EachTask(func(task *fsm.Task) bool {
		want[task.ID] = taskState{status: task.Status, output: string(task.Output)}
		return true
	})
	require.Len(t, want, 10)
	require.Equal(t, taskState{fsm.StatusSucceeded, "output of a-1"}, want[ok])
	require.Equal(t, fsm.StatusFailed, want[failed].status)
	require.Equal(t, fsm.StatusCancelled, want[cancelled].status)
	require.Equal(t, fsm.StatusRunning, want[running].status)
	return want, running, g.Lease
}

// requireTasks waits until every live node's state has the tasks of want:
// same status and output, except running, which lost its lease.
func requireTasks(t *testing.T, c *testcluster.Cluster, want map[string]taskState, running string) {
	t.Helper()
	c.Converged()
	for _, n := range c.Live() {
		got := map[string]taskState{}
		n.Node.FSM().View().EachTask(func(task *fsm.Task) bool {
			got[task.ID] = taskState{status: task.Status, output: string(task.Output)}
			return true
		})
		require.Len(t, got, len(want), "node %s", n.ID)
		for id, w := range want {
			g, ok := got[id]
			require.True(t, ok, "node %s lost task %s", n.ID, id)
			if id == running {
				// MaxAttempts 1: the revoked attempt was its last.
				require.Equal(t, fsm.StatusFailed, g.status, "node %s: task %s", n.ID, id)
				task, _ := n.Node.FSM().Get(id)
				require.Contains(t, task.Error, "restored from a snapshot")
				continue
			}
			require.Equal(t, w, g, "node %s: task %s", n.ID, id)
		}
	}
}

// TestSnapshotRestoreIntoFreshCluster: a snapshot saved on a loaded cluster
// and restored into a new one brings every acknowledged task with its status
// and output; the attempt that was running is refused its lease.
func TestSnapshotRestoreIntoFreshCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	src := testcluster.New(t, 3, testcluster.Configure(steady))
	want, running, lease := loadSource(ctx, t, src)
	leader, followers := src.Leader()
	srcEpoch := leader.Node.Epoch()

	// Saved through a follower: it names the leader, the SDK goes there.
	var file bytes.Buffer
	n, err := src.Client(followers[0]).SnapshotSave(ctx, &file)
	require.NoError(t, err)
	require.Equal(t, int64(file.Len()), n)
	_, info, err := fsm.ReadBackup(bytes.NewReader(file.Bytes()), fsm.LogVersion)
	require.NoError(t, err)
	require.Equal(t, 10, info.Tasks)
	require.NotZero(t, info.Index)

	// The source's nodes go: fewer nodes share the machine.
	srcAddrs := map[string]string{}
	for _, n := range src.Live() {
		srcAddrs[n.ID] = n.Addrs.Raft
		src.Stop(n.ID)
	}

	dst := testcluster.New(t, 3, testcluster.Configure(steady))
	dstLeader, dstFollowers := dst.Leader()
	before := dstLeader.Node.Epoch()
	res := restoreFile(ctx, t, dst.Client(dstFollowers[1]), file.Bytes())
	require.Equal(t, info.Index, res.Index)
	require.Equal(t, info.Checksum[:], res.Checksum)
	require.Equal(t, 10, res.Tasks)
	require.Equal(t, 1, res.RevokedLeases)
	require.Greater(t, res.RaftIndex, info.Index)
	if res.Epoch != 0 { // 0: leadership moved before the leader served again
		require.Greater(t, res.Epoch, max(before, srcEpoch), "the epoch after a restore is above both clusters'")
	}

	requireTasks(t, dst, want, running)
	l, _ := dst.Leader()
	require.Greater(t, l.Node.Epoch(), max(before, srcEpoch)+1,
		"a restored state starts above both clusters' epochs, and the leader bumps it again")
	// The lease of the source cluster means nothing here.
	require.ErrorIs(t, complete(ctx, t, dst, lease, cluster.Outcome{Kind: cluster.OutcomeSuccess}), cluster.ErrStaleLease)
	// The configuration is the destination's own.
	peers, err := l.Node.Peers()
	require.NoError(t, err)
	require.Len(t, peers, 3)
	for _, p := range peers {
		require.NotNil(t, dst.Node(p.ID), "peer %s is not a node of the destination", p.ID)
		require.NotEqual(t, srcAddrs[p.ID], p.Address, "peer %s has the source's address", p.ID)
	}
	// The restored cluster takes new writes, and its leases are of its new
	// epoch.
	id := submitTask(ctx, t, dst, cluster.Spec{Template: fsm.Template{Pool: "new", Kind: "k"}, Key: "new-1"})
	g := pollOne(ctx, t, dst, "new", "w2")
	require.Equal(t, id, g.ID)
	require.Greater(t, g.Lease>>32, max(before, srcEpoch)+1)
	require.NoError(t, complete(ctx, t, dst, g.Lease, cluster.Outcome{Kind: cluster.OutcomeSuccess, Output: []byte("after")}))
	dst.Converged()
}

// TestSnapshotRestoreRevokesLeases: restored into the cluster it was saved
// from, a snapshot leaves no lease from before the restore alive (neither
// one in the snapshot nor one granted after the save), the epoch is higher
// and a batch of an engine from before is fenced. The logs of the nodes
// are compacted first, so that the followers take the restored snapshot
// over logs that no longer go back to it.
func TestSnapshotRestoreRevokesLeases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := testcluster.New(t, 3, testcluster.Configure(func(i int, cfg *cluster.Config) {
		steady(i, cfg)
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 4
		cfg.SnapshotInterval = 50 * time.Millisecond
	}))
	spec := func(key string) cluster.Spec {
		return cluster.Spec{Template: fsm.Template{Pool: "p", Kind: "k", MaxAttempts: 5}, Key: key}
	}
	inFile := submitTask(ctx, t, c, spec("in-file"))
	g1 := pollOne(ctx, t, c, "p", "w1")
	require.Equal(t, inFile, g1.ID)
	afterSave := submitTask(ctx, t, c, spec("after-save"))

	var file bytes.Buffer
	_, err := c.Client().SnapshotSave(ctx, &file)
	require.NoError(t, err)

	// After the save: a lease on the other task, and more writes.
	g2 := pollOne(ctx, t, c, "p", "w2")
	require.Equal(t, afterSave, g2.ID)
	for i := range 40 {
		submitTask(ctx, t, c, spec(fmt.Sprintf("gone-%d", i)))
	}
	c.Converged()
	for _, n := range c.Live() {
		require.NoError(t, n.Node.Raft().Snapshot().Error())
		first, err := n.Node.LogStore().FirstIndex()
		require.NoError(t, err)
		require.Greater(t, first, uint64(1), "node %s: log not compacted", n.ID)
	}
	leader, _ := c.Leader()
	epochBefore := leader.Node.Epoch()
	stale, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: epochBefore, Time: fsm.InstantOf(time.Now()),
		Mutations: []fsm.Mutation{{Retry: &fsm.Retry{ID: afterSave, Lease: g2.Lease, Error: "stale", RetryAt: fsm.InstantOf(time.Now())}}}})
	require.NoError(t, err)

	res := restoreFile(ctx, t, c.Client(), file.Bytes())
	require.Equal(t, 1, res.RevokedLeases)
	require.Equal(t, 2, res.Tasks)
	c.Converged()
	l, _ := c.Leader()
	require.Greater(t, l.Node.Epoch(), epochBefore+1, "a restored state starts one epoch above, and the leader bumps it again")
	if res.Epoch != 0 { // 0: leadership moved before the leader served again
		require.Greater(t, res.Epoch, epochBefore+1)
	}

	// The lease in the file and the one granted after the save are both
	// refused, for heartbeats and completions.
	for _, lease := range []uint64{g1.Lease, g2.Lease} {
		errs := onLeader(ctx, t, c, func(n *cluster.Node) ([]error, error) { return n.Heartbeat(ctx, []uint64{lease}) })
		require.ErrorIs(t, errs[0], cluster.ErrStaleLease, "heartbeat of lease %#x", lease)
		require.ErrorIs(t, complete(ctx, t, c, lease, cluster.Outcome{Kind: cluster.OutcomeSuccess}), cluster.ErrStaleLease,
			"completion under lease %#x", lease)
	}
	for _, n := range c.Live() {
		task, ok := n.Node.FSM().Get(inFile)
		require.True(t, ok)
		require.Contains(t, []fsm.Status{fsm.StatusRetrying, fsm.StatusQueued}, task.Status, "node %s", n.ID)
		require.Zero(t, task.Lease)
		require.Contains(t, task.Error, "restored from a snapshot")
		task, ok = n.Node.FSM().Get(afterSave)
		require.True(t, ok)
		require.Equal(t, fsm.StatusQueued, task.Status, "as in the file")
		_, ok = n.Node.FSM().GetByKey("gone-0")
		require.False(t, ok, "node %s kept a task written after the save", n.ID)
	}
	// A batch of the engine from before the restore is fenced.
	l, _ = c.Leader()
	f := l.Node.Raft().Apply(stale, 0)
	require.NoError(t, f.Error())
	rerr, _ := f.Response().(error)
	require.ErrorIs(t, rerr, fsm.ErrStaleEpoch)

	// Work goes on: the task whose lease was revoked runs again, under a
	// lease of the new epoch.
	require.Eventually(t, func() bool {
		task, _ := l.Node.FSM().Get(inFile)
		return task.Status == fsm.StatusQueued
	}, 30*time.Second, 10*time.Millisecond)
	for range 2 {
		g := pollOne(ctx, t, c, "p", "w3")
		require.Greater(t, g.Lease>>32, epochBefore+1)
		require.NoError(t, complete(ctx, t, c, g.Lease, cluster.Outcome{Kind: cluster.OutcomeSuccess}))
	}
	c.Converged()
}

// TestSnapshotRestoreRefusesDamagedFile: a file with a flipped byte, a
// truncated one and one that is not a snapshot are refused by the leader,
// with a clear error, and the cluster is left exactly as it was.
func TestSnapshotRestoreRefusesDamagedFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := testcluster.New(t, 3, testcluster.Configure(steady))
	for i := range 5 {
		submitTask(ctx, t, c, cluster.Spec{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: fmt.Sprintf("k%d", i)})
	}
	var file bytes.Buffer
	cl := c.Client()
	_, err := cl.SnapshotSave(ctx, &file)
	require.NoError(t, err)
	submitTask(ctx, t, c, cluster.Spec{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: "after"})
	hash := c.Converged()
	leader, _ := c.Leader()
	epoch := leader.Node.Epoch()

	flipped := bytes.Clone(file.Bytes())
	flipped[len(flipped)/2] ^= 0x01
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"flipped byte", flipped, "checksum mismatch"},
		{"truncated", file.Bytes()[:file.Len()/2], "truncated"},
		{"truncated checksum", file.Bytes()[:file.Len()-1], "truncated"},
		{"not a snapshot", []byte("this is not a cronoq snapshot, just some text"), "not a cronoq snapshot file"},
	}
	for _, tc := range cases {
		_, err := cl.SnapshotRestore(ctx, bytes.NewReader(tc.data))
		require.Error(t, err, tc.name)
		require.ErrorIs(t, err, client.ErrInvalid, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
	}
	require.Equal(t, hash, c.Converged(), "a refused restore changed the state")
	l, _ := c.Leader()
	if l.ID == leader.ID {
		require.Equal(t, epoch, l.Node.Epoch(), "a refused restore changed the epoch")
	}
	_, ok := l.Node.FSM().GetByKey("after")
	require.True(t, ok)
}

// TestLostQuorumRecovery: three nodes, two lost with their data; the
// survivor, started again with a peers.json naming only itself, becomes a
// one-voter cluster with every acknowledged task, takes new writes, and a
// new server joins it.
func TestLostQuorumRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := testcluster.New(t, 3)
	acked := map[string]fsm.Status{}
	for i := range 20 {
		id := submitTask(ctx, t, c, cluster.Spec{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: fmt.Sprintf("k%d", i)})
		acked[id] = fsm.StatusQueued
	}
	for range 5 {
		g := pollOne(ctx, t, c, "p", "w1")
		require.NoError(t, complete(ctx, t, c, g.Lease, cluster.Outcome{Kind: cluster.OutcomeSuccess, Output: []byte("done")}))
		acked[g.ID] = fsm.StatusSucceeded
	}
	c.Converged()

	// The survivor is a follower; the leader and the other follower are
	// lost with their data.
	leader, followers := c.Leader()
	survivor := followers[0]
	for _, n := range []*testcluster.Node{leader, followers[1]} {
		c.Stop(n.ID)
		require.NoError(t, os.RemoveAll(n.Config.DataDir))
	}
	c.Stop(survivor.ID)

	// The documented procedure: peers.json in the raft directory.
	peers := []map[string]any{{"id": survivor.ID, "address": survivor.Config.RaftAddr, "non_voter": false}}
	data, err := json.Marshal(peers)
	require.NoError(t, err)
	path := filepath.Join(survivor.Config.DataDir, "raft", cluster.PeersFile)
	require.NoError(t, os.WriteFile(path, data, 0o600))

	back := c.Restart(survivor.ID)
	l, _ := c.Leader()
	require.Equal(t, survivor.ID, l.ID, "the survivor elects itself")
	_, err = os.Stat(path)
	require.True(t, os.IsNotExist(err), "peers.json is deleted once used")
	ps, err := back.Node.Peers()
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, survivor.ID, ps[0].ID)
	require.True(t, ps[0].Voter)

	for id, st := range acked {
		task, ok := back.Node.FSM().Get(id)
		require.True(t, ok, "acknowledged task %s lost", id)
		require.Equal(t, st, task.Status, "task %s", id)
	}
	id := submitTask(ctx, t, c, cluster.Spec{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: "after-recovery"})
	task, ok := back.Node.FSM().Get(id)
	require.True(t, ok)
	require.Equal(t, fsm.StatusQueued, task.Status)

	// A new server joins the one-voter cluster.
	cfg := c.Config("n4")
	cfg.Join = []string{back.Config.GossipAddr}
	c.Start(cfg)
	require.Eventually(t, func() bool {
		ps, err := back.Node.Peers()
		if err != nil || len(ps) != 2 {
			return false
		}
		for _, p := range ps {
			if !p.Voter {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "n4 did not become a voter")
	c.Converged()
}

// A peers.json that does not name the node is refused at start, and the
// file is kept for the operator to fix.
func TestPeersFileWithoutSelfRefused(t *testing.T) {
	c := testcluster.New(t, 1)
	n := c.Live()[0]
	c.Stop(n.ID)
	path := filepath.Join(n.Config.DataDir, "raft", cluster.PeersFile)
	require.NoError(t, os.WriteFile(path, []byte(`[{"id": "someone-else", "address": "127.0.0.1:1", "non_voter": false}]`), 0o600))
	node, err := cluster.New(n.Config)
	require.NoError(t, err)
	err = node.Start(context.Background())
	require.ErrorContains(t, err, "does not list this node")
	_, statErr := os.Stat(path)
	require.NoError(t, statErr, "peers.json kept")
	require.NoError(t, node.Stop(context.Background()))
}
