package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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

func readFixtureEntries(t testing.TB, path string) []fixtureEntry {
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

// wantState reads the state the fixtures hold, in the JSON form of this
// release's stateDump: the fixture is unmarshalled into the current types
// and marshalled again, so that fields added since (Schedule.Backoff, zero
// in every v1 record) do not break the comparison. Nothing of the fixture
// may be lost on the way: every key and value it holds must be in the
// result unchanged, so a field renamed or dropped still fails.
func wantState(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "v1", "state.json"))
	require.NoError(t, err)
	var d stateDump
	require.NoError(t, json.Unmarshal(raw, &d))
	out, err := json.Marshal(d)
	require.NoError(t, err)

	var orig, now any
	require.NoError(t, json.Unmarshal(raw, &orig))
	require.NoError(t, json.Unmarshal(out, &now))
	requireSuperset(t, orig, now, "state")
	return string(out)
}

// requireSuperset requires got to hold everything want holds: the same
// scalars, arrays of the same length, and maps with at least want's keys.
func requireSuperset(t *testing.T, want, got any, path string) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		require.True(t, ok, "%s: %T, want an object", path, got)
		for k, v := range w {
			gv, ok := g[k]
			require.True(t, ok, "%s.%s is missing", path, k)
			requireSuperset(t, v, gv, path+"."+k)
		}
	case []any:
		g, ok := got.([]any)
		require.True(t, ok, "%s: %T, want an array", path, got)
		require.Len(t, g, len(w), path)
		for i := range w {
			requireSuperset(t, w[i], g[i], fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		require.Equal(t, want, got, path)
	}
}

// TestV1LogReplays replays the v1 log on a state of this release and on
// one that plays a node of log format 1: a v1 log needs nothing newer.
func TestV1LogReplays(t *testing.T) {
	entries := readFixtureEntries(t, filepath.Join("testdata", "v1", "entries.bin"))
	want := wantState(t)

	for _, st := range []*State{New(), NewVersion(1)} {
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
		require.Nil(t, st.Halted())
		require.JSONEq(t, want, dumpView(t, st.View()))
	}
}

// TestV1SnapshotRestores restores the v1 snapshot, and what this release
// writes of that state: both hold the fixture's state, and the snapshot
// written says log format 1 (no record needs more), so that a node of the
// previous release can restore it too.
func TestV1SnapshotRestores(t *testing.T) {
	snap, err := os.ReadFile(filepath.Join("testdata", "v1", "snapshot.bin"))
	require.NoError(t, err)
	want := wantState(t)

	for _, st := range []*State{New(), NewVersion(1)} {
		require.NoError(t, st.Restore(bytes.NewReader(snap)))
		require.JSONEq(t, want, dumpView(t, st.View()))

		again := snapshotBytes(t, st)
		require.Equal(t, uint16(1), binary.BigEndian.Uint16(again[4:6]), "header version")
		back := NewVersion(1)
		require.NoError(t, back.Restore(bytes.NewReader(again)))
		require.JSONEq(t, want, dumpView(t, back.View()))
	}
}

// TestFixturesAreUntouched pins the fixture files: they were written by
// the previous release and must never be regenerated.
func TestFixturesAreUntouched(t *testing.T) {
	for name, sum := range map[string]string{
		"entries.bin":  "d1fafc903f3565f3debc9c2b64827a058d9465a4d2bdb4c2a5b9cdeb6e032906",
		"snapshot.bin": "0b8fcf28fca2fbc11597e2346ae458b10696baea611f44d062a7b80b66f684ef",
		"state.json":   "9f48783913f5808c538542189ec95f4d086ce389d41351b30b3a42b1f3b81ec9",
	} {
		data, err := os.ReadFile(filepath.Join("testdata", "v1", name))
		require.NoError(t, err)
		require.Equal(t, sum, sha256Hex(data), name)
	}
}

// TestV1EmptyBatchApplies holds the first release's form of a batch without
// mutations ("m" as nil, not an empty array): it applies as a no-op.
func TestV1EmptyBatchApplies(t *testing.T) {
	// 0x02, then {"e": 1, "t": 5, "m": nil}
	entry := []byte{byte(EntryCommitBatch), 0x83, 0xa1, 'e', 0x01, 0xa1, 't', 0x05, 0xa1, 'm', 0xc0}
	st := New()
	require.Equal(t, uint64(1), st.Apply(1, 1, bumpEntry(t, 1)))
	require.Nil(t, st.Apply(2, 1, entry))
	require.Equal(t, uint64(2), st.AppliedIndex())
}
