package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// richState returns a state with tasks in every status and with every field
// set, schedules (one of log format 2) and tombstones.
func richState(t testing.TB) *State {
	h := newHarness(t)
	r := &prng{s: 7}
	var ms []Mutation
	for i := 0; i < 120; i++ {
		m := insert(taskID(i), fmt.Sprintf("pool%d", i%4), fmt.Sprintf("key%d", i))
		task := m.Insert
		task.Priority = Priority(i % 3)
		task.Labels = []KV{{K: "gpu", V: "yes"}}
		task.Tags = []KV{{K: "traceparent", V: "00-1-2-01"}, {K: "z", V: ""}}
		task.Deadline = baseTime + 1e12
		task.Timeout = time.Duration(i) * time.Second
		task.MaxAttempts = 5
		task.Backoff = Backoff{Initial: 1e9, Max: 3e11, Jitter: 0.2}
		task.Schedule = "s0"
		task.Slot = baseTime - Instant(i)
		if i%7 == 0 {
			task.Payload = nil
		}
		ms = append(ms, m)
	}
	h.ok(ms...)
	ms = ms[:0]
	for i := 0; i < 120; i++ {
		id := taskID(i)
		l := lease(1, uint64(i+1))
		switch i % 6 {
		case 1:
			ms = append(ms, start(id, 1, l))
		case 2:
			ms = append(ms, start(id, 1, l), retry(id, l, baseTime+1e12))
		case 3:
			ms = append(ms, start(id, 1, l), finish(id, l, AllStatuses[4+r.intn(4)]))
		case 4:
			ms = append(ms, finish(id, 0, StatusCancelled))
		}
	}
	for i := 0; i < 5; i++ {
		sc := putSchedule(fmt.Sprintf("s%d", i))
		sc.PutSchedule.TZ = "Europe/Paris"
		sc.PutSchedule.Payload = []byte{0, 1, 2}
		sc.PutSchedule.Labels = []KV{{K: "a", V: "b"}}
		sc.PutSchedule.Overlap = OverlapAllow
		sc.PutSchedule.CatchUp = CatchUpAll
		sc.PutSchedule.CatchUpLimit = 3
		if i == 4 {
			sc.PutSchedule.Backoff = Backoff{Initial: time.Second, Jitter: 0.1} // log format 2
		}
		ms = append(ms, sc, fire(fmt.Sprintf("s%d", i), baseTime, uint32(i), taskID(i)))
	}
	ms = append(ms, pauseSchedule("s1", true), tombstone("n2", false), tombstone("n1", false))
	h.ok(ms...)
	h.term = 3
	require.Equal(t, uint64(2), h.apply(bumpEntry(t, 2)))
	return h.s
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, s := range []*State{New(), richState(t)} {
		snap := snapshotBytes(t, s)
		restored := New()
		require.NoError(t, restored.Restore(bytes.NewReader(snap)))
		require.Equal(t, snap, snapshotBytes(t, restored))
		require.Equal(t, s.Hash(), restored.Hash())
		require.Equal(t, s.Epoch(), restored.Epoch())
		require.Equal(t, s.EpochTerm(), restored.EpochTerm())
		require.Equal(t, s.AppliedIndex(), restored.AppliedIndex())
		require.Equal(t, s.Counts(), restored.Counts())
		require.Equal(t, s.Schedules(), restored.Schedules())
		require.Equal(t, s.Tombstones(), restored.Tombstones())
		all, _ := s.List(ListQuery{})
		allRestored, _ := restored.List(ListQuery{})
		require.Equal(t, all, allRestored)
		for _, task := range all {
			if task.Key != "" {
				got, ok := restored.GetByKey(task.Key)
				require.True(t, ok)
				require.Equal(t, task, got)
			}
		}
		q := ListQuery{Pools: []string{"pool1", "pool3"}, Statuses: []Status{StatusRunning, StatusQueued}, Limit: 5}
		want, wantNext := s.List(q)
		got, gotNext := restored.List(q)
		require.Equal(t, want, got)
		require.Equal(t, wantNext, gotNext)
	}
}

func TestSnapshotIsDeterministic(t *testing.T) {
	a, b := richState(t), richState(t)
	require.Equal(t, snapshotBytes(t, a), snapshotBytes(t, b))
	require.Equal(t, a.Hash(), b.Hash())
	// The hash covers the content.
	h := &harness{t: t, s: b, index: b.AppliedIndex(), term: 3}
	h.ok(purge(taskID(3)))
	require.NotEqual(t, a.Hash(), b.Hash())
}

func TestRestoreReplacesPriorState(t *testing.T) {
	source := richState(t)
	snap := snapshotBytes(t, source)

	h := newHarness(t)
	h.ok(insert("zz-old", "oldpool", "key7"), insert("zz-other", "p", "only-old"),
		putSchedule("old"), tombstone("old-node", false))
	old := h.s.View()
	require.NoError(t, h.s.Restore(bytes.NewReader(snap)))

	require.Equal(t, snap, snapshotBytes(t, h.s))
	_, ok := h.s.Get("zz-old")
	require.False(t, ok)
	_, ok = h.s.GetByKey("only-old")
	require.False(t, ok)
	byKey, ok := h.s.GetByKey("key7")
	require.True(t, ok)
	require.Equal(t, taskID(7), byKey.ID)
	_, ok = h.s.Schedule("old")
	require.False(t, ok)
	require.False(t, h.s.Tombstoned("old-node"))
	require.Equal(t, source.Counts(), h.s.Counts())
	require.Equal(t, uint64(2), h.s.Epoch())

	// A view taken before still shows the old state.
	_, ok = old.Get("zz-old")
	require.True(t, ok)
	require.True(t, old.Tombstoned("old-node"))

	// Applying after the restore works from the restored state.
	h.index = h.s.AppliedIndex()
	h.ok(insert("new", "p", "key7-2"), purge(taskID(3)))
}

// snapshotWriter builds snapshots by hand for the error cases.
type snapshotWriter struct {
	buf bytes.Buffer
}

func newSnapshotWriter(version uint16) *snapshotWriter {
	w := &snapshotWriter{}
	w.buf.WriteString(snapshotMagic)
	_ = binary.Write(&w.buf, binary.BigEndian, version)
	_ = binary.Write(&w.buf, binary.BigEndian, [3]uint64{1, 1, 10})
	return w
}

func (w *snapshotWriter) record(typ byte, body []byte) *snapshotWriter {
	w.buf.WriteByte(typ)
	w.buf.Write(binary.AppendUvarint(nil, uint64(len(body))))
	w.buf.Write(body)
	return w
}

func (w *snapshotWriter) end(tasks, scheds, tombs uint64) []byte {
	w.buf.WriteByte(recEnd)
	_ = binary.Write(&w.buf, binary.BigEndian, [3]uint64{tasks, scheds, tombs})
	return w.buf.Bytes()
}

func taskRecord(id, key string) []byte {
	return recordBody(&Task{ID: id, Template: Template{Pool: "p", Kind: "k"}, Key: key, Status: StatusQueued})
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	good := snapshotBytes(t, richState(t))
	sched := recordBody(&Schedule{Name: "s"})
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"bad magic", append([]byte("XXXX"), good[4:]...)},
		{"version 0", newSnapshotWriter(0).end(0, 0, 0)},
		{"v2 record under a v1 header", newSnapshotWriter(1).record(recSchedule, recordBody(backoffSchedule("s"))).end(0, 1, 0)},
		{"trailing data", append(append([]byte{}, good...), 0)},
		{"wrong counts", newSnapshotWriter(1).record(recTask, taskRecord("a", "")).end(2, 0, 0)},
		{"tasks out of order", newSnapshotWriter(1).record(recTask, taskRecord("b", "")).record(recTask, taskRecord("a", "")).end(2, 0, 0)},
		{"duplicate task", newSnapshotWriter(1).record(recTask, taskRecord("a", "")).record(recTask, taskRecord("a", "")).end(2, 0, 0)},
		{"duplicate key", newSnapshotWriter(1).record(recTask, taskRecord("a", "k")).record(recTask, taskRecord("b", "k")).end(2, 0, 0)},
		{"empty task id", newSnapshotWriter(1).record(recTask, taskRecord("", "")).end(1, 0, 0)},
		{"invalid status", newSnapshotWriter(1).record(recTask, recordBody(&Task{ID: "a", Status: 0})).end(1, 0, 0)},
		{"task after schedule", newSnapshotWriter(1).record(recSchedule, sched).record(recTask, taskRecord("a", "")).end(1, 1, 0)},
		{"unknown record type", newSnapshotWriter(1).record(9, []byte{0x80}).end(0, 0, 0)},
		{"record with trailing bytes", newSnapshotWriter(1).record(recTask, append(taskRecord("a", ""), 0)).end(1, 0, 0)},
		{"record not msgpack", newSnapshotWriter(1).record(recTask, []byte{0xc1}).end(1, 0, 0)},
		{"removed tombstone", newSnapshotWriter(1).record(recTombstone, recordBody(&Tombstone{NodeID: "n", Remove: true})).end(0, 0, 1)},
		{"huge record", append(newSnapshotWriter(1).buf.Bytes(), recTask, 0xff, 0xff, 0xff, 0xff, 0x0f)},
	}
	for n := 0; n < len(good); n += 1 + n/8 {
		tests = append(tests, struct {
			name string
			data []byte
		}{fmt.Sprintf("truncated at %d", n), good[:n]})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(insert("a", "p", "k"))
			before := snapshotBytes(t, h.s)
			err := h.s.Restore(bytes.NewReader(tc.data))
			require.ErrorIs(t, err, ErrBadSnapshot)
			require.Equal(t, before, snapshotBytes(t, h.s))
		})
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestRestorePassesReaderErrors(t *testing.T) {
	boom := errors.New("disk on fire")
	s := New()
	err := s.Restore(io.MultiReader(bytes.NewReader([]byte(snapshotMagic)), failingReader{boom}))
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, ErrBadSnapshot)
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.after {
		n := w.after
		w.after = 0
		return n, errors.New("sink full")
	}
	w.after -= len(p)
	return len(p), nil
}

func TestWriteToReportsErrors(t *testing.T) {
	v := richState(t).View()
	var full bytes.Buffer
	total, err := v.WriteTo(&full)
	require.NoError(t, err)
	for _, after := range []int{0, 10, 1000, int(total) - 1} {
		n, err := v.WriteTo(&failingWriter{after: after})
		require.Error(t, err, "after %d", after)
		require.Equal(t, int64(after), n)
	}
}

func TestSnapshotEveryFieldSurvives(t *testing.T) {
	r := &prng{s: 8}
	// Tasks and schedules with random content (every field reachable).
	tbl := newTables()
	for i := 0; i < 50; i++ {
		var task Task
		fillValue(r, reflect.ValueOf(&task).Elem(), i%5 == 0)
		task.ID = taskID(i)
		task.Status = AllStatuses[r.intn(len(AllStatuses))]
		task.Key = fmt.Sprintf("k%d", i)
		tbl.putTask(nil, &task)
		var sc Schedule
		fillValue(r, reflect.ValueOf(&sc).Elem(), i%5 == 0)
		sc.Name = fmt.Sprintf("s%03d", i)
		tbl.putSchedule(nil, &sc)
	}
	v := &View{t: tbl}
	snap, err := viewBytes(v)
	require.NoError(t, err)
	s := New()
	require.NoError(t, s.Restore(bytes.NewReader(snap)))
	got := s.View()
	v.EachTask(func(task *Task) bool {
		g, ok := got.Get(task.ID)
		require.True(t, ok)
		require.Equal(t, task, g)
		return true
	})
	require.Equal(t, v.Schedules(), got.Schedules())
	again, err := viewBytes(got)
	require.NoError(t, err)
	require.Equal(t, snap, again)
}

// TestRestoreRefusesOverlongRecordLength restores a snapshot whose first
// record length is an 11-byte uvarint: it is refused and changes nothing.
func TestRestoreRefusesOverlongRecordLength(t *testing.T) {
	snap := append(newSnapshotWriter(1).buf.Bytes(), recTask)
	snap = append(snap, bytes.Repeat([]byte{0xff}, 10)...)
	snap = append(snap, 0x01)
	h := newHarness(t)
	h.ok(insert("a", "p", "k"))
	before := snapshotBytes(t, h.s)
	err := h.s.Restore(bytes.NewReader(snap))
	require.Error(t, err)
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.Equal(t, before, snapshotBytes(t, h.s))
}

func FuzzRestore(f *testing.F) {
	// Small seeds keep the minimization of new inputs quick.
	h := newHarness(f)
	h.ok(insert("a", "p", "ka"), insertScheduled("b", "q", baseTime), start("a", 1, l1),
		putSchedule("s"), tombstone("n1", false))
	f.Add(snapshotBytes(f, h.s))
	f.Add(newSnapshotWriter(1).record(recTask, taskRecord("a", "k")).end(1, 0, 0))
	f.Add(newSnapshotWriter(2).record(recSchedule, recordBody(backoffSchedule("s"))).end(0, 1, 0))
	v1, err := os.ReadFile(filepath.Join("testdata", "v1", "snapshot.bin"))
	require.NoError(f, err)
	f.Add(v1)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		s.Apply(1, 1, bumpEntry(t, 1))
		before := snapshotBytes(t, s)
		if err := s.Restore(bytes.NewReader(data)); err != nil {
			require.True(t, errors.Is(err, ErrBadSnapshot) || errors.Is(err, ErrNewerVersion), "unexpected error %v", err)
			require.Equal(t, before, snapshotBytes(t, s))
			return
		}
		// The header says what the records need, and this release reads
		// only what it understands.
		version := binary.BigEndian.Uint16(data[4:6])
		require.GreaterOrEqual(t, version, s.View().t.version())
		require.LessOrEqual(t, version, s.Version())
		require.Equal(t, recount(s.View()), s.Counts())
		// The input may use non-canonical encodings; what we write is canonical.
		snap := snapshotBytes(t, s)
		again := New()
		require.NoError(t, again.Restore(bytes.NewReader(snap)))
		require.Equal(t, snap, snapshotBytes(t, again))
	})
}
