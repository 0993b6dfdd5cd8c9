package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type snapshotSaveJSON struct {
	File      string `json:"file"`
	Size      int64  `json:"size"`
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	Created   string `json:"created"`
	SHA256    string `json:"sha256"`
	Tasks     int    `json:"tasks"`
	Schedules int    `json:"schedules"`
	Workflows int    `json:"workflows"`
	Pools     int    `json:"pools"`
}

type snapshotRestoreJSON struct {
	snapshotSaveJSON
	RevokedLeases int    `json:"revoked_leases"`
	RaftIndex     uint64 `json:"raft_index"`
	Epoch         uint64 `json:"epoch"`
}

// TestOperatorSnapshotSaveRestore saves a backup with the CLI, refuses
// damaged copies of it without touching the cluster, then restores it: the
// tasks of the backup are back with their statuses and outputs, the one
// written after it is gone, and the epoch is higher.
func TestOperatorSnapshotSaveRestore(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	done := c.submit(t, "-pool", "snap", "-kind", "echo", "-payload", "hello", "-key", "done")
	w := c.startWorker(t, "worker-snap", c.addrs(), "-pool", "snap", "-handler", "echo=cat")
	task := c.waitStatus(t, done, 60*time.Second, "succeeded")
	require.Equal(t, "hello", *task.Output)
	w.kill()
	queued := c.submit(t, "-pool", "idle", "-kind", "k", "-key", "queued")

	dir := t.TempDir()
	path := filepath.Join(dir, "backup.snap")
	saved := decodeStrict[snapshotSaveJSON](t, c.cli(t, "operator", "snapshot", "save", path, "-o", "json").ok(t))
	require.Equal(t, path, saved.File)
	require.Equal(t, 2, saved.Tasks)
	require.NotZero(t, saved.Index)
	require.Len(t, saved.SHA256, 64)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, saved.Size, st.Size())
	_, err = os.Stat(path + ".tmp")
	require.True(t, os.IsNotExist(err), "the temporary file is gone")
	text := c.cli(t, "operator", "snapshot", "save", filepath.Join(dir, "second.snap")).ok(t)
	require.Contains(t, text, "raft index")
	require.Contains(t, text, "sha256")

	after := c.submit(t, "-pool", "idle", "-kind", "k", "-key", "after")
	before := c.leader()
	_, h, _, err := getHealth(before.httpAddr)
	require.NoError(t, err)
	epoch := h.Epoch

	// Damaged copies are refused, and change nothing.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	flipped := []byte(strings.Clone(string(data)))
	flipped[len(flipped)/2] ^= 0x04
	require.NoError(t, os.WriteFile(filepath.Join(dir, "flipped.snap"), flipped, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "short.snap"), data[:len(data)-10], 0o600))
	requireOneLineError(t, c.cli(t, "operator", "snapshot", "restore", filepath.Join(dir, "flipped.snap")), "checksum mismatch")
	requireOneLineError(t, c.cli(t, "operator", "snapshot", "restore", filepath.Join(dir, "short.snap")), "truncated")
	requireOneLineError(t, c.cli(t, "operator", "snapshot", "restore", filepath.Join(dir, "missing.snap")), "missing.snap")
	require.Equal(t, "queued", c.status(t, after).Status, "a refused restore changed the cluster")

	// The backup itself.
	restored := decodeStrict[snapshotRestoreJSON](t, c.cli(t, "operator", "snapshot", "restore", path, "-o", "json").ok(t))
	require.Equal(t, saved.SHA256, restored.SHA256)
	require.Equal(t, saved.Index, restored.Index)
	require.Equal(t, 2, restored.Tasks)
	require.Zero(t, restored.RevokedLeases)
	require.Greater(t, restored.RaftIndex, saved.Index)

	leader := c.waitStable(30 * time.Second)
	_, h, _, err = getHealth(leader.httpAddr)
	require.NoError(t, err)
	require.Greater(t, h.Epoch, epoch+1)
	task = c.status(t, done)
	require.Equal(t, "succeeded", task.Status)
	require.Equal(t, "hello", *task.Output)
	require.Equal(t, "queued", c.status(t, queued).Status)
	requireOneLineError(t, c.cli(t, "status", after), after)

	// The restored cluster takes new tasks.
	c.submit(t, "-pool", "idle", "-kind", "k", "-key", "after-restore")
}
