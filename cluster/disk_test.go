package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// smallFS mounts a tmpfs of size (a mount size such as "24m") on a new
// directory and returns it. It is unmounted when the test ends, after the
// nodes using it stopped (call it before starting them). Mounting needs
// root: the test is skipped otherwise.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs as root)")
	}
	dir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(dir, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// growFS remounts the tmpfs at dir with a new size.
func growFS(t *testing.T, dir, size string) {
	t.Helper()
	out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput()
	require.NoError(t, err, "remounting %s: %s", dir, out)
}

const diskPayload = 512 << 10

func payloadSpec(key string) []cluster.Spec {
	return []cluster.Spec{{Template: fsm.Template{Pool: "p", Kind: "k", Payload: make([]byte, diskPayload)}, Key: key}}
}

// fillDisk submits keyed tasks with large payloads through node n until a
// submit fails with the disk-full error; it returns the acknowledged ids.
func fillDisk(t *testing.T, c *testcluster.Cluster) []string {
	t.Helper()
	var acked []string
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		require.Less(t, i, 400, "the disk never filled")
		require.True(t, time.Now().Before(deadline), "the disk never filled")
		var leader *cluster.Node
		for _, n := range c.Live() {
			if _, err := n.Node.Leading(); err == nil || errors.Is(err, cluster.ErrDiskFull) {
				leader = n.Node
			}
		}
		if leader == nil {
			time.Sleep(10 * time.Millisecond) // retry backoff, not synchronisation
			i--
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := leader.Submit(ctx, cluster.SubmitOne, payloadSpec(fmt.Sprintf("k%d", i)))
		cancel()
		if err == nil && len(res.Errs) > 0 && res.Errs[0] != nil {
			err = res.Errs[0]
		}
		switch {
		case err == nil:
			acked = append(acked, res.Tasks[0].ID)
		case errors.Is(err, cluster.ErrDiskFull):
			t.Logf("disk full after %d acknowledged tasks: %v", len(acked), err)
			return acked
		case retryable(err):
			t.Logf("submit %d: %v (retried with the same key)", i, err)
			i-- // the same key again: it may have committed
		default:
			require.NoError(t, err, "submit %d", i)
		}
	}
}

// requireTasks checks that every id is in n's replica.
func requireTasksPresent(t *testing.T, n *cluster.Node, ids []string) {
	t.Helper()
	r, _ := n.StaleRead()
	for _, id := range ids {
		_, ok := r.Get(id)
		require.True(t, ok, "acknowledged task %s is missing on %s", id, n.ID())
	}
}

// A single server whose data directory fills up stops taking writes and
// says why, keeps what it acknowledged, does not keep losing and regaining
// leadership, and takes writes again once space is freed.
func TestDiskFullSingleNode(t *testing.T) {
	mnt := smallFS(t, "24m")
	c := testcluster.New(t, 0)
	cfg := c.Config("n1")
	cfg.BootstrapExpect = 1
	cfg.DataDir = filepath.Join(mnt, "n1")
	rec := newLoopRecorder()
	rec.install(&cfg)
	tn := c.Start(cfg)
	n := tn.Node
	c.Leader()

	acked := fillDisk(t, c)
	require.NotEmpty(t, acked)

	// Health says why.
	h := n.Health()
	require.Equal(t, cluster.HealthDegraded, h.Status)
	want := fmt.Sprintf("disk full: %s: no space left on device", cfg.DataDir)
	require.True(t, strings.HasPrefix(h.Reasons[0], want), "reasons: %q", h.Reasons)

	// Writes through the API fail at once with the disk_full error.
	cl := c.Client(tn)
	start := time.Now()
	_, err := cl.Submit(context.Background(), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k", Payload: []byte("x")}})
	took := time.Since(start)
	require.ErrorIs(t, err, client.ErrDiskFull)
	var ae *client.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, apierr.KindDiskFull, ae.Kind)
	require.Contains(t, ae.Message, want)
	require.Less(t, took, time.Second, "a disk_full answer must not wait for a leader")
	t.Logf("disk_full answered in %s: %v", took, err)

	// No flapping: the node keeps its term while the disk stays full.
	term := n.RaftStats()["term"]
	require.Never(t, func() bool {
		return n.RaftStats()["term"] != term || n.DiskFull() == nil
	}, 1500*time.Millisecond, 50*time.Millisecond, "term or condition changed while the disk stayed full")
	require.Equal(t, raft.Follower.String(), n.RaftStats()["state"], "raft steps down on a failed log write; the node stays down")
	requireTasksPresent(t, n, acked)

	// The space probes fail, back off, and say so after the disk reason.
	require.Eventually(t, func() bool {
		return loopStatus(t, n, cluster.LoopDiskProbe).Failures >= 4
	}, 20*time.Second, 10*time.Millisecond, "the probes did not fail four times: %+v", loopStatus(t, n, cluster.LoopDiskProbe))
	h = n.Health()
	require.True(t, strings.HasPrefix(h.Reasons[0], want), "reasons: %q", h.Reasons)
	require.Contains(t, loopReason(h, cluster.LoopDiskProbe), "no space left on device", "reasons: %q", h.Reasons)
	requireBackoffGrows(t, rec.failures(cluster.LoopDiskProbe, syscall.ENOSPC), cfg.DiskProbeInterval, cfg.Loops.MaxBackoff)

	// Space comes back: the node clears the condition by itself and serves.
	growFS(t, mnt, "96m")
	require.Eventually(t, func() bool {
		_, err := n.Leading()
		return err == nil && n.DiskFull() == nil
	}, 20*time.Second, 20*time.Millisecond, "the node did not take writes again")
	require.Equal(t, cluster.HealthOK, n.Health().Status, "%q", n.Health().Reasons)
	require.Zero(t, loopStatus(t, n, cluster.LoopDiskProbe).Failures)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Submit(ctx, cluster.SubmitOne, payloadSpec("after"))
	require.NoError(t, err)
	if len(res.Errs) > 0 {
		require.NoError(t, res.Errs[0])
	}
	requireTasksPresent(t, n, append(acked, res.Tasks[0].ID))

	// And after a restart, everything acknowledged is there.
	c.Stop("n1")
	n = c.Restart("n1").Node
	c.Leader()
	requireTasksPresent(t, n, append(acked, res.Tasks[0].ID))
}

// In a three-server cluster whose leader's data directory fills up, the
// leadership moves to a server with space and stays there, writes go on,
// the full server says why, and it catches up once space is freed.
func TestDiskFullLeader(t *testing.T) {
	mnt := smallFS(t, "12m")
	c := testcluster.New(t, 3, testcluster.Configure(func(i int, cfg *cluster.Config) {
		if i == 0 {
			cfg.DataDir = filepath.Join(mnt, cfg.NodeID)
		}
		// Raft's default timings: half-megabyte entries sent to three
		// servers under the race detector miss the test timings' 200ms
		// leader lease on a busy machine.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	}))
	start := time.Now()
	full := c.Node("n1")
	require.Eventually(t, func() bool {
		l, _ := c.Leader()
		if l.ID == full.ID {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = l.Node.TransferLeadership(ctx, full.ID)
		return false
	}, 30*time.Second, 50*time.Millisecond, "n1 never led")

	var acked []string
	for i := 0; full.Node.DiskFull() == nil; i++ {
		require.Less(t, i, 400, "the disk never filled")
		l, _ := c.Leader()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := l.Node.Submit(ctx, cluster.SubmitOne, payloadSpec(fmt.Sprintf("k%d", i)))
		cancel()
		if err == nil && len(res.Errs) > 0 && res.Errs[0] != nil {
			err = res.Errs[0]
		}
		if err != nil {
			require.True(t, retryable(err), "submit %d: %v", i, err)
			i-- // the same key again
			continue
		}
		acked = append(acked, res.Tasks[0].ID)
	}
	t.Logf("%s: n1 full after %d acknowledged tasks: %v", time.Since(start), len(acked), full.Node.DiskFull())

	// Another server leads and takes writes; n1 does not take the
	// leadership back while its disk is full.
	// n1 hands the leadership over once it has seen its disk full; on a
	// busy machine the transfer may still be under way.
	require.Eventually(t, func() bool { l, _ := c.Leader(); return l.ID != full.ID }, 20*time.Second, 20*time.Millisecond,
		"n1 kept the leadership with a full disk")
	acked = append(acked, submitN(t, c, "after", 5, 1<<10)...)
	require.Never(t, func() bool { return full.Node.IsLeader() }, time.Second, 20*time.Millisecond)
	h := full.Node.Health()
	require.Equal(t, cluster.HealthDegraded, h.Status)
	require.Contains(t, h.Reasons[0], fmt.Sprintf("disk full: %s: no space left on device", full.Config.DataDir))

	// Space is freed: n1 clears the condition and catches up.
	t.Logf("%s: freeing space", time.Since(start))
	growFS(t, mnt, "128m")
	require.Eventually(t, func() bool { return full.Node.DiskFull() == nil }, 20*time.Second, 20*time.Millisecond)
	c.Converged()
	t.Logf("%s: n1 caught up", time.Since(start))
	for _, n := range c.Live() {
		requireTasksPresent(t, n.Node, acked)
	}
}
