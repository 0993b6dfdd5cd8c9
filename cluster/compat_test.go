package cluster_test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// v1Now is the wall clock at which the v1 data dir fixture was closed: a
// node whose engine clock stands still there finds nothing due, so the
// only entry it adds is its epoch bump.
const v1Now int64 = 1796188306039052053

// untar extracts the gzipped tar archive at path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
		target := filepath.Join(dir, filepath.Clean(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(target, 0o700))
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			require.NoError(t, err)
			_, err = io.Copy(out, tr)
			require.NoError(t, err)
			require.NoError(t, out.Close())
		}
	}
}

// records is the part of a state dump that a restart must keep.
type records struct {
	Tasks      []*fsm.Task
	Schedules  []*fsm.Schedule
	Tombstones []fsm.Tombstone
}

func recordsJSON(t *testing.T, v *fsm.View) string {
	t.Helper()
	r := records{Tombstones: v.Tombstones()}
	v.EachTask(func(x *fsm.Task) bool { r.Tasks = append(r.Tasks, x); return true })
	v.EachSchedule(func(s *fsm.Schedule) bool { r.Schedules = append(r.Schedules, s); return true })
	b, err := json.Marshal(r)
	require.NoError(t, err)
	return string(b)
}

// TestV1DataDirStarts starts a node on a data dir written by the release
// before the generated codec: it restores the snapshot, replays the entries
// after it, and leads with every record intact.
func TestV1DataDirStarts(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("fx1")
	require.NoError(t, os.MkdirAll(cfg.DataDir, 0o700))
	untar(t, filepath.Join("testdata", "v1-datadir.tar.gz"), cfg.DataDir)
	cfg.Dev = true
	cfg.Engine.Now = func() time.Time { return time.Unix(0, v1Now) }
	n := c.start(cfg)
	c.leader()

	raw, err := os.ReadFile(filepath.Join("testdata", "v1-datadir-state.json"))
	require.NoError(t, err)
	var want struct {
		Epoch uint64
		records
	}
	require.NoError(t, json.Unmarshal(raw, &want))
	wantJSON, err := json.Marshal(want.records)
	require.NoError(t, err)

	v := n.FSM().View()
	require.Equal(t, want.Epoch+1, v.Epoch(), "the new leader bumped the epoch once")
	require.JSONEq(t, string(wantJSON), recordsJSON(t, v))
}
