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
	for _, s := range []*State{New(), richState(t), workflowState(t)} {
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
		blocked, _ := s.List(ListQuery{Statuses: []Status{StatusBlocked}})
		blockedRestored, _ := restored.List(ListQuery{Statuses: []Status{StatusBlocked}})
		require.Equal(t, blocked, blockedRestored)

		// Workflows, their keys and their members.
		wfs, _ := s.ListWorkflows(WorkflowQuery{})
		wfsRestored, _ := restored.ListWorkflows(WorkflowQuery{})
		require.Equal(t, wfs, wfsRestored)
		for _, w := range wfs {
			require.Equal(t, s.WorkflowTasks(w.ID), restored.WorkflowTasks(w.ID))
			if w.Key != "" {
				got, ok := restored.WorkflowByKey(w.Key)
				require.True(t, ok)
				require.Equal(t, w, got)
			}
		}
		checkIndexes(t, restored.View())
	}
}

// TestWorkflowStateSnapshot holds a state of log format 3 (workflows in
// every status, blocked tasks, members, tasks spawned by members, a
// schedule that fires workflows) to round-trip byte for byte, under a
// header of version 3 whose end marker counts the workflows.
func TestWorkflowStateSnapshot(t *testing.T) {
	s := workflowState(t)
	snap := snapshotBytes(t, s)
	require.Equal(t, uint16(3), binary.BigEndian.Uint16(snap[4:6]), "header version")
	v := s.View()
	end := snap[len(snap)-33:]
	require.Equal(t, recEnd, end[0])
	var wfs uint64
	v.EachWorkflow(func(*Workflow) bool { wfs++; return true })
	require.Equal(t, [4]uint64{uint64(v.Len()), uint64(len(v.Schedules())), uint64(len(v.Tombstones())), wfs},
		[4]uint64{binary.BigEndian.Uint64(end[1:]), binary.BigEndian.Uint64(end[9:]), binary.BigEndian.Uint64(end[17:]), binary.BigEndian.Uint64(end[25:])})

	// Every kind of record of format 3 is there.
	require.NotEmpty(t, listIDs(s, ListQuery{Statuses: []Status{StatusBlocked}}))
	statuses := map[WorkflowStatus]bool{}
	v.EachWorkflow(func(w *Workflow) bool { statuses[w.Status] = true; return true })
	require.Len(t, statuses, 4, "workflows of every status")
	members, spawned, external := 0, 0, 0
	v.EachTask(func(task *Task) bool {
		if task.Workflow() != "" {
			members++
		}
		if task.Parent() != "" {
			spawned++
		}
		if task.External() {
			external++
		}
		return true
	})
	require.Positive(t, members)
	require.Positive(t, spawned)
	require.Positive(t, external)

	// Written, restored, written again: the same bytes, on a state that
	// had other content before.
	restored := newHarness(t)
	restored.ok(putWorkflow("zz-old", "k-old"), insertInto("zz-task", "", "zz-old"))
	require.NoError(t, restored.s.Restore(bytes.NewReader(snap)))
	require.Equal(t, snap, snapshotBytes(t, restored.s))
	require.Equal(t, s.Hash(), restored.s.Hash())
	_, ok := restored.s.Workflow("zz-old")
	require.False(t, ok)
	_, ok = restored.s.WorkflowByKey("k-old")
	require.False(t, ok)
	require.Empty(t, restored.s.WorkflowTasks("zz-old"))
	checkIndexes(t, restored.s.View())

	// The restored state applies what the original applies, alike.
	restored.index = s.AppliedIndex()
	orig := &harness{t: t, s: s, index: s.AppliedIndex(), term: 1}
	for _, ms := range [][]Mutation{
		{putWorkflow("new", "k-new"), insertInto("new-task", "", "new"), unblock(firstBlocked(t, s), 0)},
		{finish("new-task", 0, StatusCancelled), endWorkflow("new", WorkflowCancelled), purgeWorkflow("new")},
	} {
		orig.ok(ms...)
		restored.ok(ms...)
		require.Equal(t, snapshotBytes(t, s), snapshotBytes(t, restored.s))
	}
}

// firstBlocked returns the id of the first blocked task of s.
func firstBlocked(t testing.TB, s *State) string {
	tasks, _ := s.List(ListQuery{Statuses: []Status{StatusBlocked}, Limit: 1})
	require.NotEmpty(t, tasks)
	return tasks[0].ID
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

// end4 writes the end marker of log format 3 on, which counts the
// workflows too.
func (w *snapshotWriter) end4(tasks, scheds, tombs, wfs uint64) []byte {
	w.buf.WriteByte(recEnd)
	_ = binary.Write(&w.buf, binary.BigEndian, [4]uint64{tasks, scheds, tombs, wfs})
	return w.buf.Bytes()
}

// wfRecord is the body of a workflow record.
func wfRecord(id, key string, st WorkflowStatus) []byte {
	return recordBody(&Workflow{ID: id, Key: key, Status: st, SubmittedAt: baseTime, UpdatedAt: baseTime})
}

// memberRecord is the body of a queued task record of workflow wf.
func memberRecord(id, wf string) []byte {
	return recordBody(&Task{ID: id, Template: Template{Pool: "p", Kind: "k"}, Flow: &Flow{Workflow: wf}, Status: StatusQueued})
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
	// Tasks, schedules and workflows with random content (every field
	// reachable).
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
	// A restore checks that the workflow of every task exists: one for each
	// workflow the tasks name, and a few without members.
	var wfIDs []string
	tbl.members.Ascend(func(mi memberItem) bool {
		if len(wfIDs) == 0 || wfIDs[len(wfIDs)-1] != mi.wf {
			wfIDs = append(wfIDs, mi.wf)
		}
		return true
	})
	require.Greater(t, len(wfIDs), 3, "tasks of several workflows")
	wfIDs = append(wfIDs, "lone-1", "lone-2", "lone-3")
	for i, id := range wfIDs {
		var w Workflow
		fillValue(r, reflect.ValueOf(&w).Elem(), i%3 == 0)
		w.ID = id
		w.Status = WorkflowStatus(1 + r.intn(4))
		if w.Status.Terminal() {
			// An ended workflow has no live member (restore checks it).
			for _, m := range tbl.workflowTasks(id) {
				if !m.Status.Terminal() {
					w.Status = WorkflowRunning
				}
			}
		}
		w.Key = ""
		if i%3 == 0 || r.coin() {
			w.Key = fmt.Sprintf("wk%d", i)
		}
		tbl.putWorkflow(nil, &w)
	}
	// Pool settings, valid ones (a restore checks them).
	for i := 0; i < 5; i++ {
		var p Pool
		fillValue(r, reflect.ValueOf(&p).Elem(), i == 0)
		p.Name = fmt.Sprintf("pool-%d", i)
		p.MaxRunning, p.MaxPending, p.Burst, p.ConcurrencyLimit = int64(i), int64(2*i), int64(3*i), int64(i)
		p.MaxPendingPerClass = []int64{int64(i), 0, 1}
		p.Overflow, p.Ordering = Overflow(i%3), OrderingPolicy(i%2)
		p.Rate, p.LeaseGrace = float64(i)/4, time.Duration(i)*time.Second
		p.KindRates = []KindRate{{Kind: "a", Rate: 1.5, Burst: int64(i)}, {Kind: "b", Rate: 2}}
		p.Kinds = []KindSettings{{Kind: "a", PayloadSchema: []byte("{}"), Timeout: time.Duration(i)}, {Kind: "z", MaxAttempts: uint32(i)}}
		require.NoError(t, p.Check())
		tbl.putPool(nil, &p)
	}
	v := &View{t: tbl}
	snap, err := viewBytes(v)
	require.NoError(t, err)
	require.Equal(t, uint16(6), binary.BigEndian.Uint16(snap[4:6]), "header version")
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
	var want, gotWfs []*Workflow
	v.EachWorkflow(func(w *Workflow) bool { want = append(want, w); return true })
	got.EachWorkflow(func(w *Workflow) bool { gotWfs = append(gotWfs, w); return true })
	require.Len(t, want, len(wfIDs))
	require.Equal(t, want, gotWfs)
	require.Len(t, got.Pools(), 5)
	require.Equal(t, v.Pools(), got.Pools())
	for _, w := range want {
		require.Equal(t, v.WorkflowTasks(w.ID), got.WorkflowTasks(w.ID))
		if w.Key != "" {
			byKey, ok := got.WorkflowByKey(w.Key)
			require.True(t, ok)
			require.Equal(t, w, byKey)
		}
	}
	checkIndexes(t, got)
	again, err := viewBytes(got)
	require.NoError(t, err)
	require.Equal(t, snap, again)
}

// TestRestoreRejectsBadV3Snapshots restores snapshots of log format 3 (or
// claiming an earlier one) that are wrong in what format 3 added: each is
// a bad snapshot and changes nothing. The first cases are good ones, to
// show the others fail for what they change.
func TestRestoreRejectsBadV3Snapshots(t *testing.T) {
	good := snapshotBytes(t, goldenV3State(t))
	blocked := recordBody(&Task{ID: "b", Template: Template{Pool: "p", Kind: "k"}, Status: StatusBlocked, Flow: &Flow{DependsOn: []string{"a"}}})
	wf := func(id string) []byte { return wfRecord(id, "", WorkflowRunning) }
	tests := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"a member and its workflow", newSnapshotWriter(3).record(recTask, memberRecord("a", "w")).record(recWorkflow, wf("w")).end4(1, 0, 0, 1), true},
		{"workflows of every status", newSnapshotWriter(3).record(recWorkflow, wfRecord("a", "ka", WorkflowRunning)).
			record(recWorkflow, wfRecord("b", "kb", WorkflowSucceeded)).record(recWorkflow, wfRecord("c", "", WorkflowFailed)).
			record(recWorkflow, wfRecord("d", "", WorkflowCancelled)).end4(0, 0, 0, 4), true},
		{"every record type", newSnapshotWriter(3).record(recTask, memberRecord("a", "w")).record(recTask, blocked).
			record(recSchedule, recordBody(goldenV3Schedule())).record(recTombstone, recordBody(&Tombstone{NodeID: "n"})).
			record(recWorkflow, wf("w")).end4(2, 1, 1, 1), true},
		{"a blocked task without workflows", newSnapshotWriter(3).record(recTask, blocked).end4(1, 0, 0, 0), true},
		{"format 3 claimed for format 1 records", newSnapshotWriter(3).record(recTask, taskRecord("a", "")).end4(1, 0, 0, 0), true},
		{"nothing under a v3 header", newSnapshotWriter(3).end4(0, 0, 0, 0), true},

		{"workflow count too high", newSnapshotWriter(3).record(recWorkflow, wf("w")).end4(0, 0, 0, 2), false},
		{"workflow count too low", newSnapshotWriter(3).record(recWorkflow, wf("w")).end4(0, 0, 0, 0), false},
		{"workflow count missing", newSnapshotWriter(3).record(recWorkflow, wf("w")).end(0, 0, 0), false},
		{"workflow count missing, no workflows", newSnapshotWriter(3).record(recTask, taskRecord("a", "")).end(1, 0, 0), false},
		{"workflow count under a v2 header", newSnapshotWriter(2).record(recTask, taskRecord("a", "")).end4(1, 0, 0, 0), false},
		{"member of a missing workflow", newSnapshotWriter(3).record(recTask, memberRecord("a", "w")).end4(1, 0, 0, 0), false},
		{"member of a missing workflow among others", newSnapshotWriter(3).record(recTask, memberRecord("a", "w1")).
			record(recTask, memberRecord("b", "w2")).record(recTask, memberRecord("c", "w1")).record(recWorkflow, wf("w1")).end4(3, 0, 0, 1), false},
		{"member of a workflow whose id it prefixes", newSnapshotWriter(3).record(recTask, memberRecord("a", "w")).
			record(recWorkflow, wf("w1")).end4(1, 0, 0, 1), false},
		{"workflows out of order", newSnapshotWriter(3).record(recWorkflow, wf("b")).record(recWorkflow, wf("a")).end4(0, 0, 0, 2), false},
		{"duplicate workflow", newSnapshotWriter(3).record(recWorkflow, wf("a")).record(recWorkflow, wf("a")).end4(0, 0, 0, 2), false},
		{"duplicate workflow key", newSnapshotWriter(3).record(recWorkflow, wfRecord("a", "k", WorkflowRunning)).
			record(recWorkflow, wfRecord("b", "k", WorkflowSucceeded)).end4(0, 0, 0, 2), false},
		{"empty workflow id", newSnapshotWriter(3).record(recWorkflow, wf("")).end4(0, 0, 0, 1), false},
		{"workflow status 0", newSnapshotWriter(3).record(recWorkflow, wfRecord("a", "", 0)).end4(0, 0, 0, 1), false},
		{"workflow status 5", newSnapshotWriter(3).record(recWorkflow, wfRecord("a", "", 5)).end4(0, 0, 0, 1), false},
		{"workflow record under a v2 header", newSnapshotWriter(2).record(recWorkflow, wf("w")).end(0, 0, 0), false},
		{"workflow record under a v2 header, four counts", newSnapshotWriter(2).record(recWorkflow, wf("w")).end4(0, 0, 0, 1), false},
		{"workflow record under a v1 header", newSnapshotWriter(1).record(recWorkflow, wf("w")).end(0, 0, 0), false},
		{"workflow before a tombstone", newSnapshotWriter(3).record(recWorkflow, wf("w")).
			record(recTombstone, recordBody(&Tombstone{NodeID: "n"})).end4(0, 0, 1, 1), false},
		{"workflow before a task", newSnapshotWriter(3).record(recWorkflow, wf("w")).record(recTask, memberRecord("a", "w")).end4(1, 0, 0, 1), false},
		{"record type 5", newSnapshotWriter(3).record(5, []byte{0x80}).end4(0, 0, 0, 0), false},
		{"workflow record not msgpack", newSnapshotWriter(3).record(recWorkflow, []byte{0xc1}).end4(0, 0, 0, 1), false},
		{"workflow record not a map", newSnapshotWriter(3).record(recWorkflow, mpArray(mpStr("w"))).end4(0, 0, 0, 1), false},
		{"workflow record with trailing bytes", newSnapshotWriter(3).record(recWorkflow, append(wf("w"), 0)).end4(0, 0, 0, 1), false},
		{"workflow record with a string status", newSnapshotWriter(3).record(recWorkflow, mpMap("id", mpStr("w"), "st", mpStr("running"))).end4(0, 0, 0, 1), false},
		{"blocked task under a v2 header", newSnapshotWriter(2).record(recTask, blocked).end(1, 0, 0), false},
		{"member under a v2 header", newSnapshotWriter(2).record(recTask, memberRecord("a", "w")).end(1, 0, 0), false},
		{"schedule of a workflow under a v2 header", newSnapshotWriter(2).record(recSchedule, recordBody(goldenV3Schedule())).end(0, 1, 0), false},
		{"trailing data", append(append([]byte{}, good...), 0), false},
	}
	for n := 0; n < len(good); n += 1 + n/16 {
		tests = append(tests, struct {
			name string
			data []byte
			ok   bool
		}{fmt.Sprintf("truncated at %d", n), good[:n], false})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(putWorkflow("old", "k-old"), insertInto("a", "ka", "old"))
			before := snapshotBytes(t, h.s)
			err := h.s.Restore(bytes.NewReader(tc.data))
			if tc.ok {
				require.NoError(t, err)
				checkIndexes(t, h.s.View())
				_, ok := h.s.Workflow("old")
				require.False(t, ok)
				return
			}
			require.ErrorIs(t, err, ErrBadSnapshot)
			require.NotErrorIs(t, err, ErrNewerVersion)
			require.Equal(t, before, snapshotBytes(t, h.s))
			require.Equal(t, []*Task{h.task("a")}, h.s.WorkflowTasks("old"))
		})
	}
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
	// Log format 3: a state of every record type, and one by hand.
	f.Add(snapshotBytes(f, goldenV3State(f)))
	f.Add(newSnapshotWriter(3).record(recTask, memberRecord("a", "w")).
		record(recWorkflow, wfRecord("w", "k", WorkflowRunning)).end4(1, 0, 0, 1))
	v1, err := os.ReadFile(filepath.Join("testdata", "v1", "snapshot.bin"))
	require.NoError(f, err)
	f.Add(v1)
	// Log format 6: subscriptions and the events they hold.
	f.Add(snapshotBytes(f, goldenV6SubsState(f)))
	f.Add(snapshotBytes(f, goldenV6State(f)))
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
		checkIndexes(t, s.View())
		// The input may use non-canonical encodings; what we write is canonical.
		snap := snapshotBytes(t, s)
		again := New()
		require.NoError(t, again.Restore(bytes.NewReader(snap)))
		require.Equal(t, snap, snapshotBytes(t, again))
	})
}
