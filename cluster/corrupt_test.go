package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// submitN submits n keyed tasks with payloads of size bytes through
// whichever node leads, and returns their ids.
func submitN(t *testing.T, c *testcluster.Cluster, prefix string, n, size int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		l, _ := c.Leader()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := l.Node.Submit(ctx, cluster.SubmitOne, []cluster.Spec{{
			Template: fsm.Template{Pool: "p", Kind: "k", Payload: make([]byte, size)}, Key: fmt.Sprintf("%s%d", prefix, i)}})
		cancel()
		require.NoError(t, err)
		if len(res.Errs) > 0 {
			require.NoError(t, res.Errs[0])
		}
		ids = append(ids, res.Tasks[0].ID)
	}
	return ids
}

// logsRootPage returns the page id of the root of raft-boltdb's log
// bucket in the database at path, and the database's page size.
func logsRootPage(t *testing.T, path string) (pgid, pageSize int, used int64) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("logs"))
		require.NotNil(t, b)
		pgid, used = int(b.Root()), tx.Size()
		return nil
	}))
	return pgid, db.Info().PageSize, used
}

// A raft log database that is truncated or holds garbage stops the start
// with one error naming the file and what to do, never a panic.
func TestCorruptLogDatabase(t *testing.T) {
	c := testcluster.New(t, 0)
	cfg := c.Config("n1")
	cfg.BootstrapExpect = 1
	c.Start(cfg)
	c.Leader()
	submitN(t, c, "k", 40, 32<<10)
	c.Stop("n1")

	path := filepath.Join(cfg.DataDir, "raft", "raft.db")
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	root, pageSize, used := logsRootPage(t, path)
	require.Greater(t, root, 2)
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := func(b []byte, off, n int) {
		for i := off; i < off+n && i < len(b); i++ {
			b[i] = byte(rng.Uint32())
		}
	}

	cases := []struct {
		name    string
		corrupt func() []byte
	}{
		{"truncated", func() []byte { return slices.Clone(orig[:used/2]) }},
		{"shorter than two pages", func() []byte { return slices.Clone(orig[:pageSize+100]) }},
		{"random log root page", func() []byte {
			b := slices.Clone(orig)
			garbage(b, root*pageSize, pageSize)
			return b
		}},
		{"random pages after the first", func() []byte {
			// Two pages of random bytes at offset 4096, and the log's root.
			b := slices.Clone(orig)
			garbage(b, 4096, 8192)
			garbage(b, root*pageSize, pageSize)
			return b
		}},
		{"random meta pages", func() []byte {
			b := slices.Clone(orig)
			garbage(b, 0, 2*pageSize)
			return b
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, tc.corrupt(), 0o600))
			n, err := cluster.New(cfg)
			require.NoError(t, err)
			err = n.Start(context.Background())
			require.Error(t, err, "a corrupt log database must stop the start")
			var ce *cluster.LogStoreCorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, path, ce.Path)
			require.Contains(t, err.Error(), "raft log database "+path+" is corrupt")
			require.Contains(t, err.Error(), "move the file aside")
			t.Logf("%s: %v", tc.name, ce.Err)
			<-n.Done()
		})
	}

	// The intact file starts again.
	require.NoError(t, os.WriteFile(path, orig, 0o600))
	c.Restart("n1")
	c.Leader()
}

// snapshotDirs lists the snapshot directories of a node's data dir, oldest
// first.
func snapshotDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "raft", "snapshots"))
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		var at, ai, am, bt, bi, bm uint64
		_, _ = fmt.Sscanf(a, "%d-%d-%d", &at, &ai, &am)
		_, _ = fmt.Sscanf(b, "%d-%d-%d", &bt, &bi, &bm)
		switch {
		case at != bt:
			return int(at) - int(bt)
		case ai != bi:
			return int(ai) - int(bi)
		}
		return int(am) - int(bm)
	})
	return out
}

// flipBytes flips a few bytes in the middle of file.
func flipBytes(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NotEmpty(t, b)
	for i := len(b) / 2; i < len(b)/2+16 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	require.NoError(t, os.WriteFile(file, b, 0o600))
}

// A follower whose newest snapshot is corrupt reports it, moves it aside
// and ends with the state of the others: from its older snapshot and its
// log when the log reaches back to it, else (the log was compacted past
// the older snapshot) from the leader, its local log discarded.
func TestCorruptSnapshotFollower(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run(fmt.Sprintf("compacted=%v", compacted), func(t *testing.T) {
			c := testcluster.New(t, 3, testcluster.Configure(func(_ int, cfg *cluster.Config) {
				if compacted {
					cfg.TrailingLogs = 1
				}
			}))
			leader, followers := c.Leader()
			f := followers[0]
			ids := submitN(t, c, "a", 10, 1<<10)
			c.Converged()
			require.NoError(t, f.Node.Raft().Snapshot().Error())
			ids = append(ids, submitN(t, c, "b", 10, 1<<10)...)
			c.Converged()
			require.NoError(t, f.Node.Raft().Snapshot().Error())
			if compacted {
				// The leader compacts too: the follower cannot be sent
				// the entries after its older snapshot, only a snapshot.
				require.NoError(t, leader.Node.Raft().Snapshot().Error())
			}
			ids = append(ids, submitN(t, c, "c", 5, 1<<10)...)
			c.Converged()

			first, err := f.Node.LogStore().FirstIndex()
			require.NoError(t, err)
			snaps := snapshotDirs(t, f.Config.DataDir)
			require.Len(t, snaps, 2)
			var olderIndex uint64
			_, err = fmt.Sscanf(snaps[0], "%d-%d", new(uint64), &olderIndex)
			require.NoError(t, err)
			if compacted {
				require.Greater(t, first, olderIndex+1, "the log must start past the older snapshot")
			} else {
				require.LessOrEqual(t, first, olderIndex+1, "the log must reach back to the older snapshot")
			}

			c.Stop(f.ID)
			newest := filepath.Join(f.Config.DataDir, "raft", "snapshots", snaps[1])
			flipBytes(t, filepath.Join(newest, "state.bin"))
			// More happens while it is down.
			ids = append(ids, submitN(t, c, "d", 5, 1<<10)...)

			f2 := c.Restart(f.ID)
			_, err = os.Stat(filepath.Join(f.Config.DataDir, "raft", "snapshots-corrupt", snaps[1], "state.bin"))
			require.NoError(t, err, "the corrupt snapshot is moved aside")
			_, err = os.Stat(newest)
			require.ErrorIs(t, err, os.ErrNotExist)
			c.Converged()
			requireTasksPresent(t, f2.Node, ids)
		})
	}
}

// A single server whose newest snapshot is corrupt and whose log no longer
// reaches back to an older one refuses to start, naming the file: no other
// server could give it the state in between.
func TestCorruptSnapshotSingleServer(t *testing.T) {
	c := testcluster.New(t, 0)
	cfg := c.Config("n1")
	cfg.BootstrapExpect = 1
	cfg.TrailingLogs = 1
	n := c.Start(cfg).Node
	c.Leader()
	submitN(t, c, "a", 5, 1<<10)
	require.NoError(t, n.Raft().Snapshot().Error())
	submitN(t, c, "b", 5, 1<<10)
	require.NoError(t, n.Raft().Snapshot().Error())
	submitN(t, c, "c", 2, 1<<10)
	c.Stop("n1")

	snaps := snapshotDirs(t, cfg.DataDir)
	require.Len(t, snaps, 2)
	state := filepath.Join(cfg.DataDir, "raft", "snapshots", snaps[1], "state.bin")
	flipBytes(t, state)

	n2, err := cluster.New(cfg)
	require.NoError(t, err)
	err = n2.Start(context.Background())
	var se *cluster.SnapshotCorruptError
	require.ErrorAs(t, err, &se)
	require.Equal(t, state, se.File)
	require.Contains(t, err.Error(), "restore a backup")
	<-n2.Done()
	// Nothing was moved or discarded.
	require.Equal(t, snaps, snapshotDirs(t, cfg.DataDir))
}
