package fsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A state never skips an entry it cannot apply: every node that applied
// the entry would then be out of step with it. It halts instead, and stays
// as it was until a snapshot replaces it (or a newer release restarts it).

// rawBatch encodes b as it is, Version included: EncodeCommitBatch would
// set the Version from the mutations.
func rawBatch(t testing.TB, b *CommitBatch) []byte {
	t.Helper()
	data, err := b.MarshalMsg([]byte{byte(EntryCommitBatch)})
	require.NoError(t, err)
	return data
}

// unknownKind is the body of a mutation of a kind no release knows.
var unknownKind = mutationBody("zz", mpMap("id", mpStr("x")))

// haltCase is an entry that halts a state of the given version, with the
// log format it needs (HaltError.Need) and the cause (HaltError.Err).
type haltCase struct {
	name    string
	version uint16 // of the state that meets the entry
	data    []byte
	need    uint16
	err     error
}

// haltCases returns an entry of every cause of a halt, each of which would
// apply but for what makes it halt (at epoch 1, after task "a" and
// schedule "s").
func haltCases(t testing.TB) []haltCase {
	ins := insert("b", "p", "kb")
	insBody := marshal(t, &ins)
	v2 := Mutation{PutSchedule: backoffSchedule("v2")}
	return []haltCase{
		{"empty entry", LogVersion, nil, 0, ErrCorrupt},
		{"corrupt batch", LogVersion, []byte{byte(EntryCommitBatch), 0xc1}, 0, ErrCorrupt},
		{"truncated batch", LogVersion, batchEntry(t, 1, ins)[:20], 0, ErrCorrupt},
		{"corrupt epoch bump", LogVersion, []byte{byte(EntryEpochBump), 0x07}, 0, ErrCorrupt},
		{"corrupt batch flagged ignorable", LogVersion, []byte{byte(EntryCommitBatch | IgnoreUnknownFlag), 0xc1}, 0, ErrCorrupt},
		{"unknown entry type", LogVersion, []byte{0x07, 0x80}, 0, ErrUnknownEntry},
		{"unknown mutation kind", LogVersion, batchBody(insBody, unknownKind), 0, ErrUnknownMutation},
		{"batch of a newer format", LogVersion, rawBatch(t, &CommitBatch{Epoch: 1, Mutations: []Mutation{ins}, Version: LogVersion + 1}), LogVersion + 1, ErrNewerVersion},
		// The version explains the kind this release does not know.
		{"newer format with a mutation of an unknown kind", LogVersion, append([]byte{byte(EntryCommitBatch)},
			mpMap("e", mpUint(1), "m", mpArray(insBody, unknownKind), "v", mpUint(LogVersion+1))...), LogVersion + 1, ErrNewerVersion},
		{"v2 batch on a v1 node", 1, batchEntry(t, 1, ins, v2), 2, ErrNewerVersion},
		{"v2 mutation in a batch without its version, on a v1 node", 1, rawBatch(t, &CommitBatch{Epoch: 1, Mutations: []Mutation{ins, v2}}), 2, ErrNewerVersion},
	}
}

// TestHalt applies each entry that halts a state: Apply answers a
// *HaltError naming the entry's index, the version it needs and the cause;
// the state, its applied index included, is unchanged; every later entry,
// however good, gets the same answer; and a restore of a good snapshot
// clears the halt.
func TestHalt(t *testing.T) {
	for _, tc := range haltCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			h := &harness{t: t, s: NewVersion(tc.version), term: 1}
			require.Equal(t, uint64(1), h.apply(bumpEntry(t, 1)))
			h.ok(insert("a", "p", "ka"), putSchedule("s"))
			good := snapshotBytes(t, h.s)
			applied := h.s.AppliedIndex()

			resp := h.apply(tc.data)
			halt, ok := resp.(*HaltError)
			require.True(t, ok, "answer %T %v, want a *HaltError", resp, resp)
			require.Equal(t, &HaltError{Index: h.index, Need: tc.need, Version: tc.version, Err: halt.Err}, halt)
			require.ErrorIs(t, halt, tc.err)
			require.Contains(t, halt.Error(), fmt.Sprintf("halted at log index %d", h.index))
			if tc.need != 0 {
				require.Contains(t, halt.Error(), fmt.Sprintf("log format version %d (this node understands %d)", tc.need, tc.version))
			}
			require.Same(t, halt, h.s.Halted())
			require.Equal(t, applied, h.s.AppliedIndex())
			require.Equal(t, good, snapshotBytes(t, h.s))

			// Every later entry is refused alike, and changes nothing.
			for _, data := range [][]byte{
				batchEntry(t, 1, insert("c", "p", "")),
				bumpEntry(t, 2),
				{0x07 | byte(IgnoreUnknownFlag)},
				tc.data,
			} {
				require.Same(t, halt, h.apply(data))
			}
			require.Equal(t, applied, h.s.AppliedIndex())
			require.Equal(t, good, snapshotBytes(t, h.s))
			_, ok = h.s.Get("a")
			require.True(t, ok, "reads still answer")

			// A snapshot that cannot be restored keeps the halt.
			require.Error(t, h.s.Restore(bytes.NewReader([]byte("garbage"))))
			require.Same(t, halt, h.s.Halted())

			// A good one clears it: applying resumes from the snapshot.
			require.NoError(t, h.s.Restore(bytes.NewReader(good)))
			require.Nil(t, h.s.Halted())
			h.ok(insert("c", "p", ""))
			require.Equal(t, h.index, h.s.AppliedIndex())
		})
	}
}

// TestNewerStateAppliesWhatOlderHalts holds a state of this release to
// apply the entries of format 2 that halt a node of format 1.
func TestNewerStateAppliesWhatOlderHalts(t *testing.T) {
	for _, tc := range haltCases(t) {
		if tc.version != 1 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(insert("a", "p", "ka"), putSchedule("s"))
			require.Nil(t, h.apply(tc.data))
			require.Nil(t, h.s.Halted())
			sc, ok := h.s.Schedule("v2")
			require.True(t, ok)
			require.Equal(t, backoffSchedule("v2").Backoff, sc.Backoff)
			h.task("b")
		})
	}
}

// TestRefusalsDoNotHalt holds the refusals every node makes alike, from the
// entry and the state alone, not to halt: the next entry applies.
func TestRefusalsDoNotHalt(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"))
	var rej *RejectedError
	require.ErrorAs(t, h.apply(batchEntry(t, 1, purge("a"))).(error), &rej)
	require.ErrorIs(t, h.apply(batchEntry(t, 2, purge("a"))).(error), ErrStaleEpoch)
	require.ErrorIs(t, h.apply(bumpEntry(t, 5)).(error), ErrStaleEpoch)
	require.Nil(t, h.apply([]byte{0x07 | byte(IgnoreUnknownFlag), 0xc1}))
	require.Nil(t, h.s.Halted())
	h.ok(insert("b", "p", ""))
	require.Equal(t, h.index, h.s.AppliedIndex())
}

// TestSnapshotVersion holds the snapshot header to the log format its
// records need: 1 unless a schedule has a backoff. A state restores
// snapshots up to its own format and refuses a newer one with
// ErrNewerVersion (not a bad snapshot: a newer release can read it), and a
// header that claims less than its records need is a bad snapshot.
func TestSnapshotVersion(t *testing.T) {
	header := func(snap []byte) uint16 { return binary.BigEndian.Uint16(snap[4:6]) }
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"), putSchedule("plain"))
	v1 := snapshotBytes(t, h.s)
	require.Equal(t, uint16(1), header(v1))

	h.ok(Mutation{PutSchedule: backoffSchedule("b")})
	v2 := snapshotBytes(t, h.s)
	require.Equal(t, uint16(2), header(v2))

	// This release restores both; a node of format 1 only the first.
	for _, snap := range [][]byte{v1, v2} {
		s := New()
		require.NoError(t, s.Restore(bytes.NewReader(snap)))
		require.Equal(t, snap, snapshotBytes(t, s))
	}
	old := NewVersion(1)
	require.NoError(t, old.Restore(bytes.NewReader(v1)))
	err := old.Restore(bytes.NewReader(v2))
	require.ErrorIs(t, err, ErrNewerVersion)
	require.NotErrorIs(t, err, ErrBadSnapshot)
	require.Equal(t, v1, snapshotBytes(t, old), "a refused snapshot changes nothing")

	// The version follows the records: a replaced or deleted schedule
	// takes its need with it.
	h.ok(putSchedule("b"))
	require.Equal(t, uint16(1), header(snapshotBytes(t, h.s)))
	h.ok(Mutation{PutSchedule: backoffSchedule("b")})
	require.Equal(t, uint16(2), header(snapshotBytes(t, h.s)))
	h.ok(delSchedule("b"))
	require.Equal(t, uint16(1), header(snapshotBytes(t, h.s)))

	// Headers written by hand.
	v2rec := recordBody(backoffSchedule("s"))
	tests := []struct {
		name    string
		version uint16 // of the state restoring
		snap    []byte
		err     error // nil: restored
	}{
		{"a newer format on this release", LogVersion, newSnapshotWriter(LogVersion+1).end(0, 0, 0), ErrNewerVersion},
		{"format 2 with v1 records on a v1 node", 1, newSnapshotWriter(2).record(recTask, taskRecord("a", "")).end(1, 0, 0), ErrNewerVersion},
		{"format 2 with v1 records", LogVersion, newSnapshotWriter(2).record(recTask, taskRecord("a", "")).end(1, 0, 0), nil},
		{"format 2 with a v2 record", LogVersion, newSnapshotWriter(2).record(recSchedule, v2rec).end(0, 1, 0), nil},
		{"format 1 claimed for a v2 record", LogVersion, newSnapshotWriter(1).record(recSchedule, v2rec).end(0, 1, 0), ErrBadSnapshot},
		{"format 1 claimed for a v2 record, on a v1 node", 1, newSnapshotWriter(1).record(recSchedule, v2rec).end(0, 1, 0), ErrBadSnapshot},
		{"format 0", LogVersion, newSnapshotWriter(0).end(0, 0, 0), ErrBadSnapshot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewVersion(tc.version)
			before := snapshotBytes(t, s)
			err := s.Restore(bytes.NewReader(tc.snap))
			if tc.err == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.err)
			if tc.err == ErrNewerVersion {
				require.NotErrorIs(t, err, ErrBadSnapshot)
			}
			require.Equal(t, before, snapshotBytes(t, s))
		})
	}
}

// format3Case is a batch that applies on a state of this release at epoch
// 1, after task "a" and schedule "s": setup, then m, a mutation of a kind
// log format 3 added or with a field it added set.
type format3Case struct {
	name  string
	setup []Mutation
	m     Mutation
}

func format3Cases() []format3Case {
	with := func(m Mutation, change func(*Task)) Mutation { change(m.Insert); return m }
	wf := putWorkflow("w", "kw")
	return []format3Case{
		{"put workflow", nil, putWorkflow("w", "kw")},
		{"put workflow without a key", nil, putWorkflow("w", "")},
		{"insert blocked", nil, insertBlocked("b", "p", "a")},
		{"insert blocked with the policy done", nil, with(insertBlocked("b", "p", "a"), func(t *Task) { t.MakeFlow().DepPolicy = DepDone })},
		{"insert queued with dependencies", nil, with(insert("b", "p", ""), func(t *Task) { t.MakeFlow().DependsOn = []string{"a"} })},
		{"insert with a dependency policy", nil, with(insert("b", "p", ""), func(t *Task) { t.MakeFlow().DepPolicy = DepDone })},
		{"insert external", nil, with(insert("b", "p", ""), func(t *Task) { t.MakeFlow().External = true })},
		{"insert with a step", nil, with(insert("b", "p", ""), func(t *Task) { t.MakeFlow().Step = "x" })},
		{"insert with a parent", nil, with(insert("b", "p", ""), func(t *Task) { t.MakeFlow().Parent = "a" })},
		{"insert into a workflow", []Mutation{wf}, insertInto("b", "", "w")},
		{"unblock", []Mutation{insertBlocked("b", "p", "a")}, unblock("b", 0)},
		{"end workflow", []Mutation{wf}, endWorkflow("w", WorkflowSucceeded)},
		{"purge workflow", []Mutation{wf, endWorkflow("w", WorkflowCancelled)}, purgeWorkflow("w")},
		{"finish into a workflow", []Mutation{wf}, finishInto("a", 0, StatusCancelled, "w")},
		{"fire a workflow", []Mutation{wf}, fireWorkflow("s", baseTime, "w")},
		{"put schedule of a workflow", nil, Mutation{PutSchedule: goldenV3Schedule()}},
		{"put schedule with steps only", nil, Mutation{PutSchedule: &Schedule{Name: "t", Cron: "@hourly", Steps: []StepTemplate{{Name: "x"}}}}},
		{"put schedule with a workflow name only", nil, Mutation{PutSchedule: &Schedule{Name: "t", Cron: "@hourly", Workflow: "etl"}}},
	}
}

// formatCases are the entries of a log format (3 or 4) that a node of the
// format before it must halt on.
func formatCases(format uint16) []format3Case {
	if format == 3 {
		return format3Cases()
	}
	if format == 6 {
		started := start("a", 1, lease(1, 1))
		return []format3Case{
			{"retry with an outcome", []Mutation{started}, Mutation{Retry: &Retry{ID: "a", Lease: lease(1, 1), Error: "boom", RetryAt: baseTime, Outcome: AttemptTimeout}}},
			{"finish with an outcome", []Mutation{started}, Mutation{Finish: &Finish{ID: "a", Lease: lease(1, 1), Status: StatusSucceeded, Outcome: AttemptSucceeded}}},
			{"requeue", []Mutation{finish("a", 0, StatusCancelled)}, Mutation{Requeue: &Requeue{ID: "a", At: baseTime}}},
		}
	}
	withKeys := func(m Mutation, k Keys) Mutation { m.Insert.Keys = &k; return m }
	parked := insert("b", "p", "")
	parked.Insert.Status = StatusParked
	return []format3Case{
		{"put pool", nil, Mutation{PutPool: &Pool{Name: "p", MaxRunning: 2}}},
		{"put pool with every setting", nil, Mutation{PutPool: goldenPool()}},
		{"insert with an ordering key", nil, withKeys(insert("b", "p", ""), Keys{Ordering: "o"})},
		{"insert with a concurrency key", nil, withKeys(insert("b", "p", ""), Keys{Concurrency: "c"})},
		{"insert parked", nil, parked},
		{"admit", []Mutation{parked}, Mutation{Admit: &Admit{ID: "b", Status: StatusQueued}}},
		{"put schedule with keys", nil, Mutation{PutSchedule: goldenV4Schedule()}},
	}
}

// TestOlderNodeHaltsOnNewerFormat plays a node of log format 2 meeting
// each entry of format 3, one of format 3 each entry of format 4, and one
// of format 5 each entry of format 6 (attempt outcomes, requeue): it
// halts at the entry, asking for the newer format, whether the batch says
// it needs it or the mutation alone does; its state, applied index
// included, is unchanged, and the next entries are refused alike. A state
// of this release applies the same entries.
func TestOlderNodeHaltsOnNewerFormat(t *testing.T) {
	setup := func(t *testing.T, s *State) *harness {
		h := &harness{t: t, s: s, term: 1}
		require.Equal(t, uint64(1), h.apply(bumpEntry(t, 1)))
		h.ok(insert("a", "p", "ka"), putSchedule("s"))
		return h
	}
	for _, format := range []uint16{3, 4, 6} {
		older := format - 1
		for _, tc := range formatCases(format) {
			t.Run(fmt.Sprintf("format %d: %s", format, tc.name), func(t *testing.T) {
				require.Equal(t, format, tc.m.Version())
				full := append(append([]Mutation{}, tc.setup...), tc.m)
				entries := []struct {
					name string
					data []byte
					at   int // the mutation named in the error; -1 for the batch
				}{
					{"as written", batchEntry(t, 1, full...), -1},
					{"the mutation alone, no batch version", rawBatch(t, &CommitBatch{Epoch: 1, Mutations: []Mutation{tc.m}}), 0},
					{"after a format 1 mutation, no batch version", rawBatch(t, &CommitBatch{Epoch: 1, Mutations: []Mutation{insert("c", "p", ""), tc.m}}), 1},
					{"the batch claims the older format", rawBatch(t, &CommitBatch{Epoch: 1, Mutations: []Mutation{insert("c", "p", ""), tc.m}, Version: older}), 1},
				}
				for _, e := range entries {
					h := setup(t, NewVersion(older))
					good := snapshotBytes(t, h.s)
					applied := h.s.AppliedIndex()
					resp := h.apply(e.data)
					halt, ok := resp.(*HaltError)
					require.True(t, ok, "%s: answer %T %v, want a *HaltError", e.name, resp, resp)
					require.Equal(t, &HaltError{Index: h.index, Need: format, Version: older, Err: halt.Err}, halt, e.name)
					require.ErrorIs(t, halt, ErrNewerVersion)
					require.Contains(t, halt.Error(), fmt.Sprintf("needs log format version %d (this node understands %d)", format, older))
					if e.at >= 0 {
						require.Contains(t, halt.Error(), fmt.Sprintf("mutation %d:", e.at), e.name)
					}
					require.Equal(t, applied, h.s.AppliedIndex())
					require.Equal(t, good, snapshotBytes(t, h.s), e.name)
					_, ok = h.s.Get("c")
					require.False(t, ok)
					require.Same(t, halt, h.apply(batchEntry(t, 1, insert("d", "p", ""))))
					require.Equal(t, good, snapshotBytes(t, h.s))
				}

				// This release applies it, and so does a node of that format.
				for _, s := range []*State{New(), NewVersion(format)} {
					h := setup(t, s)
					require.Nil(t, h.apply(batchEntry(t, 1, full...)))
					require.Nil(t, h.s.Halted())
					checkIndexes(t, h.s.View())
				}
			})
		}
	}

	// A node of format 2 still applies format 2.
	h := setup(t, NewVersion(2))
	h.ok(Mutation{PutSchedule: backoffSchedule("b")}, finish("a", 0, StatusCancelled), fire("s", baseTime, 0, "a"))
	require.Nil(t, h.s.Halted())
}

// TestSnapshotVersionFormat3 holds the snapshot header to log format 3
// while a record needs it (a workflow, a blocked task or one with a field
// of format 3, a schedule of a workflow), and back to 1 or 2 once none
// does. A node of format 2 restores what it can read and refuses a
// snapshot of format 3 as newer, not bad.
func TestSnapshotVersionFormat3(t *testing.T) {
	header := func(snap []byte) uint16 { return binary.BigEndian.Uint16(snap[4:6]) }
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"), putSchedule("plain"))
	v1 := snapshotBytes(t, h.s)
	require.Equal(t, uint16(1), header(v1))

	steps := []struct {
		name string
		ms   []Mutation
		want uint16
	}{
		{"a blocked task", []Mutation{insertBlocked("b", "p", "a")}, 3},
		{"released, it keeps its dependencies", []Mutation{unblock("b", 0)}, 3},
		{"purged", []Mutation{finish("b", 0, StatusCancelled), purge("b")}, 1},
		{"a workflow without members", []Mutation{putWorkflow("w", "kw")}, 3},
		{"ended", []Mutation{endWorkflow("w", WorkflowSucceeded)}, 3},
		{"purged", []Mutation{purgeWorkflow("w")}, 1},
		{"a task spawned by another", []Mutation{func() Mutation { m := insert("c", "p", ""); m.Insert.MakeFlow().Parent = "a"; return m }()}, 3},
		{"purged", []Mutation{finish("c", 0, StatusSucceeded), purge("c")}, 1},
		{"a task that joined a workflow", []Mutation{putWorkflow("w", ""), finishInto("a", 0, StatusSucceeded, "w")}, 3},
		{"purged with its workflow", []Mutation{endWorkflow("w", WorkflowSucceeded), purgeWorkflow("w")}, 1},
		{"a schedule of a workflow", []Mutation{{PutSchedule: goldenV3Schedule()}}, 3},
		{"and one of format 2", []Mutation{{PutSchedule: backoffSchedule("b")}}, 3},
		{"replaced by a plain one", []Mutation{putSchedule("flow")}, 2},
		{"the format 2 one deleted", []Mutation{delSchedule("b")}, 1},
	}
	var v3 []byte
	for _, step := range steps {
		h.ok(step.ms...)
		snap := snapshotBytes(t, h.s)
		require.Equal(t, step.want, header(snap), step.name)
		// The end marker counts the workflows from format 3 on.
		v := h.s.View()
		counts := []uint64{uint64(v.Len()), uint64(len(v.Schedules())), uint64(len(v.Tombstones()))}
		if step.want >= 3 {
			n := uint64(0)
			v.EachWorkflow(func(*Workflow) bool { n++; return true })
			counts = append(counts, n)
			v3 = snap
		}
		end := snap[len(snap)-1-8*len(counts):]
		require.Equal(t, recEnd, end[0], step.name)
		for i, c := range counts {
			require.Equal(t, c, binary.BigEndian.Uint64(end[1+8*i:]), "%s: count %d", step.name, i)
		}
		restored := New()
		require.NoError(t, restored.Restore(bytes.NewReader(snap)))
		require.Equal(t, snap, snapshotBytes(t, restored), step.name)
		// A node of format 2 restores it exactly when it needs no more.
		old := NewVersion(2)
		err := old.Restore(bytes.NewReader(snap))
		if step.want <= 2 {
			require.NoError(t, err, step.name)
			require.Equal(t, snap, snapshotBytes(t, old), step.name)
		} else {
			require.ErrorIs(t, err, ErrNewerVersion, step.name)
			require.NotErrorIs(t, err, ErrBadSnapshot, step.name)
		}
	}

	// A node of format 2 refuses a snapshot of format 3 and keeps its state.
	for _, snap := range [][]byte{v3, snapshotBytes(t, goldenV3State(t)), snapshotBytes(t, workflowState(t)),
		newSnapshotWriter(3).record(recTask, taskRecord("x", "")).end4(1, 0, 0, 0)} {
		for _, version := range []uint16{1, 2} {
			old := &harness{t: t, s: NewVersion(version), term: 1}
			require.Equal(t, uint64(1), old.apply(bumpEntry(t, 1)))
			old.ok(insert("mine", "p", "k"))
			before := snapshotBytes(t, old.s)
			err := old.s.Restore(bytes.NewReader(snap))
			require.ErrorIs(t, err, ErrNewerVersion)
			require.NotErrorIs(t, err, ErrBadSnapshot)
			require.ErrorContains(t, err, fmt.Sprintf("snapshot needs log format version 3, this node understands %d", version))
			require.Equal(t, before, snapshotBytes(t, old.s))
			old.ok(insert("next", "p", ""))
		}
	}
}

// TestRaftFSMHalt holds the raft adapter to call the halt handler once per
// halt, with the *HaltError every later entry answers; to refuse to
// snapshot a halted state (raft would drop the entries it never applied
// from its log); and to resume after a good restore.
func TestRaftFSMHalt(t *testing.T) {
	f := NewRaftFSM(New())
	var calls []*HaltError
	f.SetHaltHandler(func(h *HaltError) { calls = append(calls, h) })
	resp := f.ApplyBatch([]*raft.Log{
		commandLog(1, bumpEntry(t, 1)),
		commandLog(2, batchEntry(t, 1, insert("a", "p", ""))),
	})
	require.Equal(t, []any{uint64(1), nil}, resp)
	good, err := f.Snapshot()
	require.NoError(t, err)
	sink := &memSink{failAfter: -1}
	require.NoError(t, good.Persist(sink))

	resp = f.ApplyBatch([]*raft.Log{
		commandLog(3, []byte{byte(EntryCommitBatch), 0xc1}),
		commandLog(4, batchEntry(t, 1, insert("b", "p", ""))),
		{Index: 5, Term: 1, Type: raft.LogConfiguration, Data: []byte{1}},
		commandLog(6, batchEntry(t, 1, insert("c", "p", ""))),
	})
	halt, ok := resp[0].(*HaltError)
	require.True(t, ok, "%T", resp[0])
	require.Equal(t, uint64(3), halt.Index)
	require.ErrorIs(t, halt, ErrCorrupt)
	require.Equal(t, []any{halt, halt, nil, halt}, resp)
	require.Len(t, calls, 1)
	require.Same(t, halt, calls[0])
	require.Equal(t, uint64(2), f.State().AppliedIndex())

	_, err = f.Snapshot()
	var snapErr *HaltError
	require.ErrorAs(t, err, &snapErr)
	require.Same(t, halt, snapErr)

	// A failed restore leaves it halted, and does not call the handler
	// again for the same halt.
	require.Error(t, f.Restore(io.NopCloser(bytes.NewReader([]byte("garbage")))))
	require.Same(t, halt, f.Apply(commandLog(7, batchEntry(t, 1))))
	require.Len(t, calls, 1)
	_, err = f.Snapshot()
	require.Error(t, err)

	// A good restore resumes: entries apply, snapshots are taken, and a
	// new halt is reported anew.
	require.NoError(t, f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	require.Nil(t, f.State().Halted())
	require.Nil(t, f.Apply(commandLog(8, batchEntry(t, 1, insert("d", "p", "")))))
	_, err = f.Snapshot()
	require.NoError(t, err)
	second := f.Apply(commandLog(9, []byte{0x07}))
	require.Len(t, calls, 2)
	require.Same(t, second, calls[1])
	require.ErrorIs(t, calls[1], ErrUnknownEntry)

	// Without a handler a halt is only answered.
	bare := NewRaftFSM(New())
	require.IsType(t, &HaltError{}, bare.Apply(commandLog(1, nil)))
	_, err = bare.Snapshot()
	require.Error(t, err)
}

// TestRaftSingleNodeHalts runs a halt under a real (in-memory) raft node:
// the apply future answers the *HaltError, the handler runs once, raft's
// snapshot fails while the state is halted, and the entries after the
// halt are answered alike.
func TestRaftSingleNodeHalts(t *testing.T) {
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("")
	require.NoError(t, raft.BootstrapCluster(conf, store, store, snaps, trans,
		raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}))
	state := New()
	fsm := NewRaftFSM(state)
	halts := make(chan *HaltError, 10)
	fsm.SetHaltHandler(func(h *HaltError) { halts <- h })
	r, err := raft.NewRaft(conf, fsm, store, store, snaps, trans)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Shutdown().Error()) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r.State() != raft.Leader {
		select {
		case <-r.LeaderCh():
		case <-ctx.Done():
			t.Fatal("no leader")
		}
	}
	fut := r.Apply(bumpEntry(t, 1), time.Second)
	require.NoError(t, fut.Error())
	require.Equal(t, uint64(1), fut.Response())

	v2 := Mutation{PutSchedule: backoffSchedule("s")}
	newer := rawBatch(t, &CommitBatch{Epoch: 1, Mutations: []Mutation{v2}, Version: LogVersion + 1})
	bad := r.Apply(newer, time.Second)
	after := r.Apply(batchEntry(t, 1, insert("a", "p", "")), time.Second)
	require.NoError(t, bad.Error())
	require.NoError(t, after.Error())
	halt, ok := bad.Response().(*HaltError)
	require.True(t, ok, "%T", bad.Response())
	require.Equal(t, &HaltError{Index: bad.Index(), Need: LogVersion + 1, Version: LogVersion, Err: halt.Err}, halt)
	require.Same(t, halt, after.Response())
	require.Same(t, halt, <-halts)
	require.Len(t, halts, 0, "the handler runs once")

	// raft flattens the error into its own message.
	require.ErrorContains(t, r.Snapshot().Error(), "not snapshotting a halted state")
	_, ok = state.Get("a")
	require.False(t, ok)
}
