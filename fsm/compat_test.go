package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files under testdata/v1 were written by the release before the
// generated codec. These tests hold every later release to reading them.

// stateDump is the canonical JSON form of a state, as the fixtures hold it.
type stateDump struct {
	Epoch, EpochTerm, Applied uint64
	Tasks                     []*Task
	Schedules                 []*Schedule
	Tombstones                []Tombstone
}

func dumpView(t testing.TB, v *View) string {
	t.Helper()
	d := stateDump{Epoch: v.Epoch(), EpochTerm: v.EpochTerm(), Applied: v.AppliedIndex(), Tombstones: v.Tombstones()}
	v.EachTask(func(x *Task) bool { d.Tasks = append(d.Tasks, x); return true })
	v.EachSchedule(func(s *Schedule) bool { d.Schedules = append(d.Schedules, s); return true })
	b, err := json.Marshal(d)
	require.NoError(t, err)
	return string(b)
}

type fixtureEntry struct {
	index, term uint64
	data        []byte
}

func readFixtureEntries(t *testing.T, path string) []fixtureEntry {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := bufio.NewReader(f)
	var out []fixtureEntry
	for {
		index, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		term, err := binary.ReadUvarint(r)
		require.NoError(t, err)
		n, err := binary.ReadUvarint(r)
		require.NoError(t, err)
		data := make([]byte, n)
		_, err = io.ReadFull(r, data)
		require.NoError(t, err)
		out = append(out, fixtureEntry{index, term, data})
	}
}

func TestV1LogReplays(t *testing.T) {
	entries := readFixtureEntries(t, filepath.Join("testdata", "v1", "entries.bin"))
	want, err := os.ReadFile(filepath.Join("testdata", "v1", "state.json"))
	require.NoError(t, err)

	st := New()
	for _, e := range entries {
		resp := st.Apply(e.index, e.term, e.data)
		switch e.index {
		case 1, 16: // the epoch bumps
			require.IsType(t, uint64(0), resp, "entry %d", e.index)
		case 9: // a batch refused by a precondition
			var rej *RejectedError
			require.ErrorAs(t, resp.(error), &rej, "entry %d", e.index)
			require.Equal(t, 1, rej.Index)
		case 17: // a batch of the previous epoch
			require.ErrorIs(t, resp.(error), ErrStaleEpoch, "entry %d", e.index)
		default:
			require.Nil(t, resp, "entry %d", e.index)
		}
	}
	require.JSONEq(t, string(want), dumpView(t, st.View()))
}

func TestV1SnapshotRestores(t *testing.T) {
	snap, err := os.ReadFile(filepath.Join("testdata", "v1", "snapshot.bin"))
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join("testdata", "v1", "state.json"))
	require.NoError(t, err)

	st := New()
	require.NoError(t, st.Restore(bytes.NewReader(snap)))
	require.JSONEq(t, string(want), dumpView(t, st.View()))

	// What this release writes of that state reads back the same.
	var again bytes.Buffer
	_, err = st.View().WriteTo(&again)
	require.NoError(t, err)
	back := New()
	require.NoError(t, back.Restore(&again))
	require.JSONEq(t, string(want), dumpView(t, back.View()))
}
