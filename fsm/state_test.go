package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// l1 and l2 are lease tokens of epoch 1.
var l1, l2 = lease(1, 1), lease(1, 2)

func TestPreconditions(t *testing.T) {
	const (
		q   = "q"   // queued
		sch = "sch" // scheduled
		run = "run" // running under l1 (attempt 1)
		rty = "rty" // retrying, after attempt 1 under l1
		don = "don" // succeeded
	)
	// setup builds a state with one task in each status and a schedule "s".
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		h.ok(
			insert(q, "p", "kq"), insertScheduled(sch, "p", baseTime+1e9),
			insert(run, "p", ""), insert(rty, "p", ""), insert(don, "p", "kdone"),
			start(run, 1, l1), start(rty, 1, lease(1, 3)), retry(rty, lease(1, 3), baseTime+1e12),
			start(don, 1, lease(1, 4)), finish(don, lease(1, 4), StatusSucceeded),
			putSchedule("s"), tombstone("n9", false),
		)
		return h
	}
	tests := []struct {
		name  string
		m     Mutation
		ok    bool
		check func(t *testing.T, h *harness) // after an accepted mutation
	}{
		// Insert
		{"insert new", insert("new", "p", "k-new"), true, func(t *testing.T, h *harness) {
			task := h.task("new")
			require.Equal(t, StatusQueued, task.Status)
			require.Equal(t, h.index, task.CreateIndex)
			require.Equal(t, h.index, task.ModifyIndex)
			require.Equal(t, baseTime, task.UpdatedAt)
			byKey, ok := h.s.GetByKey("k-new")
			require.True(t, ok)
			require.Same(t, task, byKey)
		}},
		{"insert scheduled", insertScheduled("new", "p", baseTime+5), true, nil},
		{"insert empty id", insert("", "p", ""), false, nil},
		{"insert existing id", insert(q, "p", ""), false, nil},
		{"insert key in use by live task", insert("new", "p", "kq"), false, nil},
		{"insert key in use by terminal task", insert("new", "p", "kdone"), false, nil},
		{"insert running", func() Mutation { m := insert("new", "p", ""); m.Insert.Status = StatusRunning; return m }(), false, nil},
		{"insert unknown status", func() Mutation { m := insert("new", "p", ""); m.Insert.Status = 0; return m }(), false, nil},
		{"insert with attempt", func() Mutation { m := insert("new", "p", ""); m.Insert.Attempt = 1; return m }(), false, nil},
		{"insert with lease", func() Mutation { m := insert("new", "p", ""); m.Insert.Lease = 1; return m }(), false, nil},
		// Ready
		{"ready scheduled", ready(sch), true, func(t *testing.T, h *harness) {
			task := h.task(sch)
			require.Equal(t, StatusQueued, task.Status)
			require.Equal(t, baseTime+1, task.UpdatedAt)
			require.Equal(t, h.index, task.ModifyIndex)
		}},
		{"ready retrying", ready(rty), true, nil},
		{"ready queued", ready(q), false, nil},
		{"ready running", ready(run), false, nil},
		{"ready missing", ready("nope"), false, nil},
		// Start
		{"start queued", start(q, 1, l2), true, func(t *testing.T, h *harness) {
			task := h.task(q)
			require.Equal(t, StatusRunning, task.Status)
			require.Equal(t, uint32(1), task.Attempt)
			require.Equal(t, l2, task.Lease)
			require.Equal(t, l2, task.LastLease)
			require.Equal(t, "w1", task.Worker)
			require.Equal(t, baseTime+2, task.StartedAt)
		}},
		{"start wrong attempt", start(q, 2, l2), false, nil},
		{"start attempt zero", start(q, 0, l2), false, nil},
		{"start lease zero", start(q, 1, 0), false, nil},
		{"start running", start(run, 2, l2), false, nil},
		{"start scheduled", start(sch, 1, l2), false, nil},
		{"start missing", start("nope", 1, l2), false, nil},
		// Retry
		{"retry later", retry(run, l1, baseTime+1e9), true, func(t *testing.T, h *harness) {
			task := h.task(run)
			require.Equal(t, StatusRetrying, task.Status)
			require.Equal(t, baseTime+1e9, task.RunAt)
			require.Zero(t, task.Lease)
			require.Equal(t, l1, task.LastLease)
			require.Empty(t, task.Worker)
			require.Equal(t, "boom", task.Error)
		}},
		{"retry now queues", retry(run, l1, baseTime), true, func(t *testing.T, h *harness) {
			require.Equal(t, StatusQueued, h.task(run).Status)
		}},
		{"retry stale lease", retry(run, l2, baseTime), false, nil},
		{"retry queued", retry(q, 0, baseTime), false, nil},
		{"retry missing", retry("nope", l1, baseTime), false, nil},
		// Finish
		{"finish with lease", finish(run, l1, StatusSucceeded), true, func(t *testing.T, h *harness) {
			task := h.task(run)
			require.Equal(t, StatusSucceeded, task.Status)
			require.Equal(t, []byte("out"), task.Output)
			require.Equal(t, baseTime+4, task.FinishedAt)
			require.Zero(t, task.Lease)
		}},
		{"finish stale lease", finish(run, l2, StatusSucceeded), false, nil},
		{"finish running without lease", finish(run, 0, StatusCancelled), false, nil},
		{"cancel queued", finish(q, 0, StatusCancelled), true, nil},
		{"expire scheduled", finish(sch, 0, StatusExpired), true, nil},
		{"cancel retrying", finish(rty, 0, StatusCancelled), true, nil},
		{"finish queued with lease", finish(q, l1, StatusSucceeded), false, nil},
		{"finish terminal", finish(don, 0, StatusCancelled), false, nil},
		{"finish non-terminal status", finish(run, l1, StatusQueued), false, nil},
		{"finish missing", finish("nope", 0, StatusCancelled), false, nil},
		// Purge
		{"purge terminal", purge(don), true, func(t *testing.T, h *harness) {
			_, ok := h.s.Get(don)
			require.False(t, ok)
			_, ok = h.s.GetByKey("kdone")
			require.False(t, ok)
			h.ok(insert("reuse", "p", "kdone")) // the key is free again
		}},
		{"purge live", purge(q), false, nil},
		{"purge missing", purge("nope"), false, nil},
		// Schedules
		{"put schedule new", putSchedule("t"), true, func(t *testing.T, h *harness) {
			sc, ok := h.s.Schedule("t")
			require.True(t, ok)
			require.Equal(t, h.index, sc.CreateIndex)
		}},
		{"put schedule replace keeps create index", putSchedule("s"), true, func(t *testing.T, h *harness) {
			sc, _ := h.s.Schedule("s")
			require.Equal(t, uint64(2), sc.CreateIndex)
			require.Equal(t, h.index, sc.ModifyIndex)
		}},
		{"put schedule empty name", putSchedule(""), false, nil},
		{"delete schedule", delSchedule("s"), true, func(t *testing.T, h *harness) {
			_, ok := h.s.Schedule("s")
			require.False(t, ok)
		}},
		{"delete missing schedule", delSchedule("nope"), false, nil},
		{"pause schedule", pauseSchedule("s", true), true, func(t *testing.T, h *harness) {
			sc, _ := h.s.Schedule("s")
			require.True(t, sc.Paused)
		}},
		{"pause missing schedule", pauseSchedule("nope", true), false, nil},
		{"fire with task", fire("s", baseTime+60e9, 2, q), true, func(t *testing.T, h *harness) {
			sc, _ := h.s.Schedule("s")
			require.Equal(t, baseTime+60e9, sc.LastFire)
			require.Equal(t, uint64(2), sc.Skipped)
			require.Equal(t, uint64(1), sc.Fires)
			require.Equal(t, q, sc.LastTask)
		}},
		{"fire skipped slot", fire("s", baseTime+60e9, 2, ""), true, func(t *testing.T, h *harness) {
			sc, _ := h.s.Schedule("s")
			require.Equal(t, uint64(3), sc.Skipped)
			require.Zero(t, sc.Fires)
			require.Empty(t, sc.LastTask)
		}},
		{"fire missing task", fire("s", baseTime+60e9, 0, "nope"), false, nil},
		{"fire slot not after cursor", fire("s", 0, 0, ""), false, nil},
		{"fire missing schedule", fire("nope", 1, 0, ""), false, nil},
		// Tombstones
		{"tombstone set", tombstone("n1", false), true, func(t *testing.T, h *harness) {
			require.True(t, h.s.Tombstoned("n1"))
		}},
		{"tombstone clear", tombstone("n9", true), true, func(t *testing.T, h *harness) {
			require.False(t, h.s.Tombstoned("n9"))
		}},
		{"tombstone clear absent", tombstone("n1", true), true, nil},
		{"tombstone empty node", tombstone("", false), false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			before := snapshotBytes(t, h.s)
			applied := h.s.AppliedIndex()
			if !tc.ok {
				rej := h.reject(0, tc.m)
				require.NotEmpty(t, rej.Reason)
				require.Equal(t, before, snapshotBytes(t, h.s))
				require.Equal(t, applied, h.s.AppliedIndex())
				return
			}
			h.ok(tc.m)
			require.Equal(t, h.index, h.s.AppliedIndex())
			require.NotEqual(t, before, snapshotBytes(t, h.s))
			require.Equal(t, recount(h.s.View()), h.s.Counts())
			if tc.check != nil {
				tc.check(t, h)
			}
		})
	}
}

func TestLifecycleWithinOneBatch(t *testing.T) {
	h := newHarness(t)
	h.ok(
		putSchedule("s"),
		insert("a", "p", "ka"), fire("s", baseTime, 0, "a"),
		start("a", 1, l1), retry("a", l1, baseTime), start("a", 2, l2),
		finish("a", l2, StatusFailed),
	)
	task := h.task("a")
	require.Equal(t, StatusFailed, task.Status)
	require.Equal(t, uint32(2), task.Attempt)
	require.Equal(t, l2, task.LastLease)
	require.Equal(t, []PoolCounts{{Pool: "p", ByStatus: [numStatuses]int64{StatusFailed: 1}}}, h.s.Counts())
}

func TestRejectedBatchRollsBackEverything(t *testing.T) {
	tests := []struct {
		name   string
		failAt int
		ms     []Mutation
	}{
		{"third mutation fails", 2, []Mutation{
			insert("c", "q", "kc"), // new task, key and pool
			start("a", 1, l1),      // a task change that moves counters
			purge("a"),             // fails: a is running
		}},
		{"every kind of change, then a failure", 7, []Mutation{
			insert("c", "q", "kc"),
			start("a", 1, l1),
			fire("s", baseTime, 0, "c"),
			putSchedule("t"),
			tombstone("n1", true),
			tombstone("n2", false),
			finish("a", l1, StatusSucceeded),
			finish("b", l1, StatusSucceeded), // fails: b is not running
		}},
		{"undo of a task changed twice", 3, []Mutation{
			start("a", 1, l1),
			retry("a", l1, baseTime),
			start("a", 2, l2),
			insert("c", "q", "ka"), // fails: key in use
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(insert("a", "p", "ka"), insert("b", "p", ""), putSchedule("s"), tombstone("n1", false))
			before := snapshotBytes(t, h.s)
			counts := h.s.Counts()
			applied := h.s.AppliedIndex()
			a := h.task("a")

			h.reject(tc.failAt, tc.ms...)

			require.Equal(t, before, snapshotBytes(t, h.s))
			require.Equal(t, counts, h.s.Counts())
			require.Equal(t, applied, h.s.AppliedIndex())
			require.Same(t, a, h.task("a"))
			_, ok := h.s.Get("c")
			require.False(t, ok)
			_, ok = h.s.GetByKey("kc")
			require.False(t, ok)
			byKey, ok := h.s.GetByKey("ka")
			require.True(t, ok)
			require.Same(t, a, byKey)
			require.True(t, h.s.Tombstoned("n1"))
			require.False(t, h.s.Tombstoned("n2"))
			_, ok = h.s.Schedule("t")
			require.False(t, ok)
			tasks, _ := h.s.List(ListQuery{Pools: []string{"q"}})
			require.Empty(t, tasks)
			tasks, _ = h.s.List(ListQuery{Statuses: []Status{StatusQueued}})
			require.Len(t, tasks, 2)

			// The same batch without its failing mutation applies.
			h.ok(tc.ms[:tc.failAt]...)
		})
	}
}

func TestEpochFencing(t *testing.T) {
	h := newHarness(t) // epoch 1
	h.ok(insert("a", "p", ""))
	before := snapshotBytes(t, h.s)
	applied := h.s.AppliedIndex()

	for _, epoch := range []uint64{0, 2} {
		resp := h.apply(batchEntry(t, epoch, insert("b", "p", "")))
		err, _ := resp.(error)
		require.ErrorIs(t, err, ErrStaleEpoch)
		require.Equal(t, before, snapshotBytes(t, h.s))
		require.Equal(t, applied, h.s.AppliedIndex())
	}

	// A bump must be exactly the next epoch.
	for _, epoch := range []uint64{0, 1, 3} {
		resp := h.apply(bumpEntry(t, epoch))
		err, _ := resp.(error)
		require.ErrorIs(t, err, ErrStaleEpoch, "bump to %d", epoch)
		require.Equal(t, before, snapshotBytes(t, h.s))
	}
	h.term = 5
	require.Equal(t, uint64(2), h.apply(bumpEntry(t, 2)))
	require.Equal(t, uint64(2), h.s.Epoch())
	require.Equal(t, uint64(5), h.s.EpochTerm())
	require.Equal(t, h.index, h.s.AppliedIndex())

	// The old engine is fenced off; the new one writes.
	resp := h.apply(batchEntry(t, 1, start("a", 1, l1)))
	require.ErrorIs(t, resp.(error), ErrStaleEpoch)
	require.Equal(t, StatusQueued, h.task("a").Status)
	h.ok(start("a", 1, lease(2, 1)))
	require.Equal(t, StatusRunning, h.task("a").Status)
}

// TestUnknownEntries holds an entry of an unknown type to be skipped when
// it carries IgnoreUnknownFlag (only the applied index moves) and to halt
// the state otherwise.
func TestUnknownEntries(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", ""))
	before := snapshotBytes(t, h.s)

	resp := h.apply([]byte{0x07 | byte(IgnoreUnknownFlag), 0xff, 0xfe})
	require.Nil(t, resp)
	require.Equal(t, h.index, h.s.AppliedIndex())
	// Only the applied index in the header changed.
	after := snapshotBytes(t, h.s)
	require.NotEqual(t, before, after)
	require.Equal(t, withoutApplied(before), withoutApplied(after))

	applied := h.s.AppliedIndex()
	resp = h.apply([]byte{0x07, 0x81, 0xa1, 'x', 0x01})
	var halt *HaltError
	require.ErrorAs(t, resp.(error), &halt)
	require.ErrorIs(t, halt, ErrUnknownEntry)
	require.Equal(t, &HaltError{Index: h.index, Version: LogVersion, Err: halt.Err}, halt)
	require.Equal(t, applied, h.s.AppliedIndex())
	require.Equal(t, after, snapshotBytes(t, h.s))
}

// TestCorruptEntriesNeverPanic applies every truncation and thousands of
// random byte flips of a valid entry. Each is applied (a flip may leave a
// valid batch), refused by a precondition or the epoch, or halts the state;
// anything but an application leaves the state as it was.
func TestCorruptEntriesNeverPanic(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"), start("a", 1, l1))
	good := batchEntry(t, 1, finish("a", l1, StatusSucceeded), insert("b", "p", "kb"))
	before := snapshotBytes(t, h.s)
	r := &prng{s: 5}
	outcomes := map[string]int{}
	check := func(data []byte) {
		t.Helper()
		s := New()
		require.NoError(t, s.Restore(bytes.NewReader(before)))
		resp := s.Apply(100, 1, data)
		if resp == nil {
			outcomes["applied"]++
			require.Equal(t, uint64(100), s.AppliedIndex())
			require.Equal(t, recount(s.View()), s.Counts())
			return
		}
		err, isErr := resp.(error)
		require.True(t, isErr, "%T %v", resp, resp)
		var (
			halt *HaltError
			rej  *RejectedError
		)
		switch {
		case errors.As(err, &halt):
			outcomes["halted"]++
			require.Same(t, halt, s.Halted())
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownMutation) || errors.Is(err, ErrNewerVersion), "%v", err)
		case errors.As(err, &rej):
			outcomes["rejected"]++
		default:
			require.ErrorIs(t, err, ErrStaleEpoch)
			outcomes["stale"]++
		}
		require.Equal(t, before, snapshotBytes(t, s))
	}
	for n := 0; n < len(good); n++ {
		check(good[:n])
	}
	for i := 0; i < 2000; i++ {
		data := append([]byte{}, good...)
		for j := 0; j <= r.intn(3); j++ {
			data[1+r.intn(len(data)-1)] = byte(r.next())
		}
		check(data)
	}
	for _, o := range []string{"applied", "halted", "rejected", "stale"} {
		require.NotZero(t, outcomes[o], "no entry %s: %v", o, outcomes)
	}
}

func TestViewIsolation(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"), insert("b", "p", ""), putSchedule("s"), tombstone("n1", false))
	v := h.s.View()
	frozen, err := viewBytes(v)
	require.NoError(t, err)
	a := h.task("a")

	for i := 0; i < 300; i++ { // enough inserts to split B-tree nodes
		h.ok(insert(taskID(i), "p", fmt.Sprintf("k%d", i)))
	}
	h.ok(start("a", 1, l1), finish("a", l1, StatusSucceeded), purge("a"),
		delSchedule("s"), tombstone("n1", true), tombstone("n2", false))
	require.Equal(t, uint64(2), h.apply(bumpEntry(t, 2)))

	got, err := viewBytes(v)
	require.NoError(t, err)
	require.Equal(t, frozen, got)
	va, ok := v.Get("a")
	require.True(t, ok)
	require.Same(t, a, va)
	require.Equal(t, StatusQueued, va.Status)
	_, ok = v.GetByKey("k1")
	require.False(t, ok)
	require.Equal(t, uint64(1), v.Epoch())
	require.Equal(t, 2, v.Len())
	require.True(t, v.Tombstoned("n1"))
	require.False(t, v.Tombstoned("n2"))
	_, ok = v.Schedule("s")
	require.True(t, ok)
	require.Equal(t, []PoolCounts{{Pool: "p", ByStatus: [numStatuses]int64{StatusQueued: 2}}}, v.Counts())
	list, next := v.List(ListQuery{Statuses: []Status{StatusQueued}})
	require.Len(t, list, 2)
	require.Empty(t, next)

	require.Equal(t, uint64(1), v.EpochTerm())
	require.Equal(t, uint64(2), v.AppliedIndex())
	require.Equal(t, []Tombstone{{NodeID: "n1", At: baseTime}}, v.Tombstones())
	var names []string
	v.EachSchedule(func(sc *Schedule) bool { names = append(names, sc.Name); return true })
	require.Equal(t, []string{"s"}, names)

	_, ok = h.s.Get("a")
	require.False(t, ok)
	require.Equal(t, 301, h.s.View().Len()) // 300 inserted, b kept, a purged
}

func viewBytes(v *View) ([]byte, error) {
	var buf bytes.Buffer
	_, err := v.WriteTo(&buf)
	return buf.Bytes(), err
}

// withoutApplied returns a snapshot with its applied index zeroed.
func withoutApplied(snap []byte) []byte {
	out := append([]byte{}, snap...)
	clear(out[22:30])
	return out
}

func TestListPaginationAndFilters(t *testing.T) {
	h := newHarness(t)
	pools := []string{"a", "b", "c"}
	var ms []Mutation
	for i := 0; i < 90; i++ {
		ms = append(ms, insert(taskID(i), pools[i%3], ""))
	}
	h.ok(ms...)
	ms = ms[:0]
	for i := 0; i < 90; i += 2 {
		ms = append(ms, start(taskID(i), 1, lease(1, uint64(i+1))))
	}
	h.ok(ms...)
	ms = ms[:0]
	for i := 0; i < 90; i += 4 {
		ms = append(ms, finish(taskID(i), lease(1, uint64(i+1)), StatusSucceeded))
	}
	h.ok(ms...)

	// brute force: the expected ids of a query, in order.
	expect := func(q ListQuery) []string {
		var ids []string
		h.s.View().EachTask(func(task *Task) bool {
			if task.ID <= q.After && q.After != "" {
				return true
			}
			if len(q.Pools) > 0 && !contains(q.Pools, task.Pool) {
				return true
			}
			if len(q.Statuses) > 0 && !contains(q.Statuses, task.Status) {
				return true
			}
			ids = append(ids, task.ID)
			return true
		})
		return ids
	}
	queries := []ListQuery{
		{},
		{Pools: []string{"a"}},
		{Pools: []string{"c", "a", "a"}},
		{Statuses: []Status{StatusRunning}},
		{Statuses: []Status{StatusSucceeded, StatusQueued, StatusQueued}},
		{Pools: []string{"b"}, Statuses: []Status{StatusRunning, StatusSucceeded}},
		{Pools: []string{"nope"}},
		{Statuses: []Status{StatusFailed}},
		{Statuses: []Status{StatusUnknown, 200}},
		{After: taskID(40)},
		{After: "zzz"},
	}
	for _, q := range queries {
		for _, limit := range []int{0, 1, 7, 30, 1000} {
			q := q
			q.Limit = limit
			want := expect(q)
			// Page through.
			var got []string
			pages := 0
			for {
				tasks, next := h.s.List(q)
				pages++
				if limit > 0 {
					require.LessOrEqual(t, len(tasks), limit)
				}
				for _, task := range tasks {
					got = append(got, task.ID)
				}
				if next == "" {
					break
				}
				require.Equal(t, got[len(got)-1], next)
				q.After = next
				require.Less(t, pages, 200)
			}
			require.Equal(t, want, got, "query %+v", q)
			if limit > 0 && len(want) > 0 {
				require.Equal(t, (len(want)+limit-1)/limit, pages, "no empty last page")
			}
		}
	}
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestRandomOperations applies random batches (many of them rejected) and
// checks after each that the counters equal a recount, that a second state
// fed the same entries has the same snapshot, and that a state restored from
// the snapshot continues identically.
func TestRandomOperations(t *testing.T) {
	r := &prng{s: 6}
	h := newHarness(t)
	twin := New()
	var restored *State
	apply := func(data []byte) any {
		resp := h.apply(data)
		resp2 := twin.Apply(h.index, h.term, data)
		require.Equal(t, fmt.Sprint(resp), fmt.Sprint(resp2))
		if restored != nil {
			resp3 := restored.Apply(h.index, h.term, data)
			require.Equal(t, fmt.Sprint(resp), fmt.Sprint(resp3))
		}
		return resp
	}
	twin.Apply(1, 1, bumpEntry(t, 1))
	pools := []string{"p0", "p1", "p2", "p3"}
	var leases uint64
	accepted, rejected := 0, 0
	var (
		frozen    *View
		frozenQ   ListQuery
		frozenIDs []string
	)
	for round := 0; round < 300; round++ {
		if round%100 == 50 {
			require.Equal(t, h.s.Epoch()+1, apply(bumpEntry(t, h.s.Epoch()+1)))
		}
		var ms []Mutation
		for i := 0; i < 1+r.intn(8); i++ {
			id := taskID(r.intn(60))
			cur, exists := h.s.Get(id)
			switch op := r.intn(10); {
			case !exists || op == 0:
				key := ""
				if r.coin() {
					key = fmt.Sprintf("key%d", r.intn(80))
				}
				ms = append(ms, insert(id, pools[r.intn(len(pools))], key))
			case op == 1:
				ms = append(ms, ready(id))
			case op == 2 || op == 3:
				leases++
				ms = append(ms, start(id, cur.Attempt+1, lease(h.s.Epoch(), leases)))
			case op == 4:
				ms = append(ms, retry(id, cur.Lease, baseTime+Instant(r.intn(3))))
			case op == 5 || op == 6:
				ms = append(ms, finish(id, cur.Lease, AllStatuses[4+r.intn(4)]))
			case op == 7:
				ms = append(ms, purge(id))
			case op == 8:
				name := fmt.Sprintf("s%d", r.intn(4))
				if r.coin() {
					ms = append(ms, putSchedule(name))
				} else {
					ms = append(ms, fire(name, baseTime+Instant(round), uint32(r.intn(2)), id))
				}
			default:
				ms = append(ms, tombstone(fmt.Sprintf("n%d", r.intn(3)), r.coin()))
			}
		}
		if apply(batchEntry(t, h.s.Epoch(), ms...)) == nil {
			accepted++
		} else {
			rejected++
		}
		require.Equal(t, recount(h.s.View()), h.s.Counts(), "round %d", round)
		// The (pool, status) index agrees with the task table, and a view
		// keeps what it saw while later batches change the index.
		q := ListQuery{Pools: []string{pools[r.intn(len(pools))]}, Statuses: []Status{AllStatuses[r.intn(len(AllStatuses))]}}
		require.Equal(t, bruteList(h.s.View(), q), listIDs(h.s, q), "round %d, query %+v", round, q)
		if frozen != nil {
			require.Equal(t, frozenIDs, listIDs(frozen, frozenQ), "round %d: a view changed", round)
		}
		if round%40 == 0 {
			frozen, frozenQ = h.s.View(), ListQuery{Pools: pools[:2]}
			frozenIDs = listIDs(frozen, frozenQ)
		}
		snap := snapshotBytes(t, h.s)
		require.Equal(t, snap, snapshotBytes(t, twin))
		if round%25 == 0 {
			restored = New()
			require.NoError(t, restored.Restore(bytes.NewReader(snap)))
			require.Equal(t, h.s.Counts(), restored.Counts())
		}
		if restored != nil {
			require.Equal(t, h.s.Hash(), restored.Hash(), "round %d", round)
		}
	}
	require.Greater(t, accepted, 50)
	require.Greater(t, rejected, 50)
}

func TestLargeBatches(t *testing.T) {
	h := newHarness(t)
	var ms []Mutation
	for i := 0; i < 2*maxScratchMutations; i++ {
		ms = append(ms, insert(taskID(i), "p", ""))
	}
	h.ok(ms...)
	h.ok(start(taskID(0), 1, l1))
	h.reject(1, start(taskID(1), 1, l2), purge(taskID(0)))
	want := []PoolCounts{{Pool: "p", ByStatus: [numStatuses]int64{StatusQueued: 2*maxScratchMutations - 1, StatusRunning: 1}}}
	require.Equal(t, want, h.s.Counts())
	require.Equal(t, recount(h.s.View()), h.s.Counts())
}

// TestApplyReturnsOnlyDocumentedValues holds Apply to its documented
// answers: nil, the new epoch, a *RejectedError, ErrStaleEpoch, or a
// *HaltError, which then answers every later entry.
func TestApplyReturnsOnlyDocumentedValues(t *testing.T) {
	h := newHarness(t)
	var rej *RejectedError
	require.ErrorAs(t, h.apply(batchEntry(t, 1, purge("x"))).(error), &rej)
	require.ErrorIs(t, h.apply(batchEntry(t, 9)).(error), ErrStaleEpoch)
	require.ErrorIs(t, h.apply(bumpEntry(t, 3)).(error), ErrStaleEpoch)
	require.Nil(t, h.apply(batchEntry(t, 1)))
	require.Equal(t, uint64(2), h.apply(bumpEntry(t, 2)))

	var halt *HaltError
	require.ErrorAs(t, h.apply([]byte{2, 0xc1}).(error), &halt)
	require.ErrorIs(t, halt, ErrCorrupt)
	require.Same(t, halt, h.apply(batchEntry(t, 2)))
	require.Same(t, halt, h.apply(bumpEntry(t, 3)))
}

func FuzzApply(f *testing.F) {
	seed := func(t testing.TB) *State {
		h := newHarness(t)
		h.ok(insert("a", "p", "ka"), insert("b", "q", "kb"), insertScheduled("c", "p", baseTime+9),
			start("b", 1, l1), putSchedule("s"), tombstone("n1", false),
			// Log format 3: a running workflow with a live member and a
			// blocked one, an ended one with a terminal member.
			putWorkflow("w", "kw"), insertInto("m", "km", "w"), insertBlocked("bl", "p", "a", "m"),
			putWorkflow("we", ""), insertInto("me", "", "we"), finish("me", 0, StatusSucceeded),
			endWorkflow("we", WorkflowSucceeded))
		return h.s
	}
	base := seed(f)
	snap := snapshotBytes(f, base)
	for _, ms := range [][]Mutation{
		{insert("d", "p", "kd"), start("a", 1, l2)},
		{finish("b", l1, StatusSucceeded), purge("b")},
		{retry("b", l1, baseTime+5), ready("c")},
		{fire("s", baseTime, 1, "a"), pauseSchedule("s", true), delSchedule("s")},
		{tombstone("n1", true), putSchedule("t")},
		// Log format 3.
		{unblock("bl", baseTime+1), putWorkflow("w2", "kw2"), insertInto("d", "", "w2")},
		{finish("m", 0, StatusCancelled), endWorkflow("w", WorkflowCancelled), purgeWorkflow("w")},
		{purgeWorkflow("we"), finishInto("a", 0, StatusSucceeded, "w")},
		{fireWorkflow("s", baseTime, "w"), {PutSchedule: goldenV3Schedule()}},
		{insertBlocked("d", "p", "a"), endWorkflow("w", WorkflowFailed)}, // rejected: m is live
		// Log format 6.
		{putSub("s", []string{"p"}, nil, nil), finish("a", 0, StatusCancelled), ackSub("s", MakeCursor(3, 0))},
		{putSub("all", nil, nil, nil), insert("d", "p", ""), stallSub("all", "x"), delSub("all")},
	} {
		f.Add(batchEntry(f, 1, ms...))
	}
	for _, b := range []*CommitBatch{goldenV3Batch(), smallV3Batch()} {
		b.Epoch = 1
		data, err := EncodeCommitBatch(b)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add(bumpEntry(f, 2))
	f.Add([]byte{0x99, 0x00})
	for _, data := range fixtureSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		require.NoError(t, s.Restore(bytes.NewReader(snap)))
		resp := s.Apply(100, 2, data)
		after := snapshotBytes(t, s)
		if err, isErr := resp.(error); isErr {
			require.Equal(t, snap, after)
			var halt *HaltError
			if errors.As(err, &halt) {
				// Halted: the next entry, however good, is refused alike.
				require.Same(t, halt, s.Halted())
				require.Same(t, halt, s.Apply(101, 2, batchEntry(t, 1, purge("zz"))))
				require.Equal(t, snap, snapshotBytes(t, s))
			} else {
				require.Nil(t, s.Halted())
			}
			return
		}
		require.Nil(t, s.Halted())
		require.Equal(t, recount(s.View()), s.Counts())
		checkIndexes(t, s.View())
		// Whatever was accepted survives a snapshot round trip.
		restored := New()
		require.NoError(t, restored.Restore(bytes.NewReader(after)))
		require.Equal(t, after, snapshotBytes(t, restored))
	})
}

// lister is a State or a View.
type lister interface {
	List(ListQuery) ([]*Task, string)
}

// listIDs returns the ids List returns for q.
func listIDs(l lister, q ListQuery) []string {
	tasks, _ := l.List(q)
	ids := []string{}
	for _, task := range tasks {
		ids = append(ids, task.ID)
	}
	return ids
}

// bruteList returns the ids of the tasks of v that q selects (pools and
// statuses only), in id order, by scanning every task.
func bruteList(v *View, q ListQuery) []string {
	ids := []string{}
	v.EachTask(func(task *Task) bool {
		if (len(q.Pools) == 0 || contains(q.Pools, task.Pool)) && (len(q.Statuses) == 0 || contains(q.Statuses, task.Status)) {
			ids = append(ids, task.ID)
		}
		return true
	})
	return ids
}
