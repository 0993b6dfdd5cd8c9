package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Helpers shared by the tests: entries are built as raw bytes and fed to
// Apply, the way raft would.

// baseTime is the leader clock of the test entries.
const baseTime Instant = 1_700_000_000_000_000_000

// prng is splitmix64: a seeded, deterministic generator for the tests.
type prng struct{ s uint64 }

func (r *prng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a value in [0, n).
func (r *prng) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *prng) coin() bool { return r.next()&1 == 1 }

func batchEntry(t testing.TB, epoch uint64, ms ...Mutation) []byte {
	t.Helper()
	data, err := EncodeCommitBatch(&CommitBatch{Epoch: epoch, Time: baseTime, Mutations: ms})
	require.NoError(t, err)
	return data
}

func bumpEntry(t testing.TB, epoch uint64) []byte {
	t.Helper()
	data, err := EncodeEpochBump(&EpochBump{Epoch: epoch, Leader: "n1", Time: baseTime})
	require.NoError(t, err)
	return data
}

// harness applies entries to a State at increasing log indexes.
type harness struct {
	t     testing.TB
	s     *State
	index uint64
	term  uint64
}

// newHarness returns a harness whose state is at epoch 1.
func newHarness(t testing.TB) *harness {
	h := &harness{t: t, s: New(), term: 1}
	require.Equal(t, uint64(1), h.apply(bumpEntry(t, 1)))
	return h
}

func (h *harness) apply(data []byte) any {
	h.index++
	return h.s.Apply(h.index, h.term, data)
}

// ok applies one batch of the current epoch and requires it to succeed.
func (h *harness) ok(ms ...Mutation) {
	h.t.Helper()
	resp := h.apply(batchEntry(h.t, h.s.Epoch(), ms...))
	require.Nil(h.t, resp, "batch rejected: %v", resp)
}

// reject applies one batch and requires it to be rejected at mutation i.
func (h *harness) reject(i int, ms ...Mutation) *RejectedError {
	h.t.Helper()
	resp := h.apply(batchEntry(h.t, h.s.Epoch(), ms...))
	err, isErr := resp.(error)
	require.True(h.t, isErr, "batch accepted, want rejection at %d", i)
	var rej *RejectedError
	require.ErrorAs(h.t, err, &rej)
	require.Equal(h.t, i, rej.Index, "rejected: %v", err)
	return rej
}

func (h *harness) task(id string) *Task {
	h.t.Helper()
	task, ok := h.s.Get(id)
	require.True(h.t, ok, "task %s missing", id)
	return task
}

func snapshotBytes(t testing.TB, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.View().WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	return buf.Bytes()
}

// Mutation constructors.

func taskID(i int) string { return fmt.Sprintf("01J000000000000000000%05d", i) }

func insert(id, pool, key string) Mutation {
	return Mutation{Insert: &Task{
		ID: id, Key: key, Status: StatusQueued, SubmittedAt: baseTime,
		Template: Template{Pool: pool, Kind: "k", Payload: []byte("payload-" + id)},
	}}
}

func insertScheduled(id, pool string, runAt Instant) Mutation {
	m := insert(id, pool, "")
	m.Insert.Status = StatusScheduled
	m.Insert.RunAt = runAt
	return m
}

func ready(id string) Mutation { return Mutation{Ready: &Ready{ID: id, At: baseTime + 1}} }

func start(id string, attempt uint32, lease uint64) Mutation {
	return Mutation{Start: &Start{ID: id, Attempt: attempt, Lease: lease, Worker: "w1", At: baseTime + 2}}
}

func retry(id string, lease uint64, retryAt Instant) Mutation {
	return Mutation{Retry: &Retry{ID: id, Lease: lease, Error: "boom", RetryAt: retryAt, At: baseTime + 3}}
}

func finish(id string, lease uint64, st Status) Mutation {
	return Mutation{Finish: &Finish{ID: id, Lease: lease, Status: st, Output: []byte("out"), Error: "", At: baseTime + 4}}
}

func purge(id string) Mutation { return Mutation{Purge: &Purge{ID: id}} }

func putSchedule(name string) Mutation {
	return Mutation{PutSchedule: &Schedule{Name: name, Template: Template{Pool: "p", Kind: "k"}, Cron: "@every 1m", CreatedAt: baseTime}}
}

func delSchedule(name string) Mutation { return Mutation{DelSchedule: &DelSchedule{Name: name}} }

func pauseSchedule(name string, paused bool) Mutation {
	return Mutation{PauseSchedule: &PauseSchedule{Name: name, Paused: paused, At: baseTime}}
}

func fire(name string, slot Instant, skipped uint32, id string) Mutation {
	return Mutation{Fire: &Fire{Name: name, Slot: slot, Skipped: skipped, TaskID: id}}
}

func tombstone(node string, remove bool) Mutation {
	return Mutation{Tombstone: &Tombstone{NodeID: node, At: baseTime, Remove: remove}}
}

// Mutation constructors of log format 3.

// insertBlocked inserts a task blocked on deps.
func insertBlocked(id, pool string, deps ...string) Mutation {
	m := insert(id, pool, "")
	m.Insert.Status = StatusBlocked
	m.Insert.MakeFlow().DependsOn = deps
	return m
}

// insertInto inserts a queued task into workflow wf.
func insertInto(id, key, wf string) Mutation {
	m := insert(id, "p", key)
	m.Insert.MakeFlow().Workflow = wf
	m.Insert.MakeFlow().Step = "step-" + id
	return m
}

func unblock(id string, at Instant) Mutation { return Mutation{Unblock: &Unblock{ID: id, At: at}} }

// putWorkflow creates a running workflow.
func putWorkflow(id, key string) Mutation {
	return Mutation{PutWorkflow: &Workflow{ID: id, Name: "name-" + id, Key: key, Status: WorkflowRunning, SubmittedAt: baseTime}}
}

func endWorkflow(id string, st WorkflowStatus) Mutation {
	return Mutation{EndWorkflow: &EndWorkflow{ID: id, Status: st, At: baseTime + 5}}
}

func purgeWorkflow(id string) Mutation { return Mutation{PurgeWorkflow: &PurgeWorkflow{ID: id}} }

// finishInto is finish, the task joining workflow wf as it ends.
func finishInto(id string, lease uint64, st Status, wf string) Mutation {
	m := finish(id, lease, st)
	m.Finish.Workflow = wf
	return m
}

// fireWorkflow fires schedule name at slot, inserting workflow wf.
func fireWorkflow(name string, slot Instant, wf string) Mutation {
	return Mutation{Fire: &Fire{Name: name, Slot: slot, Workflow: wf}}
}

// lease builds a lease token of the given epoch.
func lease(epoch, n uint64) uint64 { return epoch<<32 | n }

// recount computes the counters from scratch.
func recount(v *View) []PoolCounts {
	var out []PoolCounts
	v.EachTask(func(t *Task) bool {
		i := len(out) - 1
		for i >= 0 && out[i].Pool != t.Pool {
			i--
		}
		if i < 0 {
			out = append(out, PoolCounts{Pool: t.Pool})
			i = len(out) - 1
		}
		out[i].ByStatus[t.Status]++
		return true
	})
	// Sort by pool (insertion sort: few pools).
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Pool < out[j-1].Pool; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	if out == nil {
		out = []PoolCounts{}
	}
	return out
}
