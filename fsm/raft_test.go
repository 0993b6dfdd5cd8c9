package fsm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func commandLog(index uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

func TestRaftFSMApplyBatch(t *testing.T) {
	s := New()
	f := NewRaftFSM(s)
	require.Same(t, s, f.State())
	logs := []*raft.Log{
		commandLog(1, bumpEntry(t, 1)),
		{Index: 2, Term: 1, Type: raft.LogConfiguration, Data: []byte{0xde, 0xad}},
		commandLog(3, batchEntry(t, 1, insert("a", "p", ""))),
		commandLog(4, batchEntry(t, 1, purge("a"))), // rejected: a is live
		{Index: 5, Term: 1, Type: raft.LogConfiguration, Data: []byte("not ours")},
	}
	resp := f.ApplyBatch(logs)
	require.Len(t, resp, len(logs))
	require.Equal(t, uint64(1), resp[0])
	require.Nil(t, resp[1])
	require.Nil(t, resp[2])
	var rej *RejectedError
	require.ErrorAs(t, resp[3].(error), &rej)
	require.Nil(t, resp[4])
	// Configuration entries do not move the applied index.
	require.Equal(t, uint64(3), s.AppliedIndex())

	require.Nil(t, f.Apply(&raft.Log{Index: 6, Type: raft.LogConfiguration, Data: []byte{1}}))
	require.Equal(t, uint64(3), s.AppliedIndex())
	require.Empty(t, f.ApplyBatch(nil))
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	failAfter int // fail writes once this many bytes were written (< 0: never)
	closed    bool
	cancelled bool
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.failAfter >= 0 && s.Len()+len(p) > s.failAfter {
		return 0, errors.New("sink write failed")
	}
	return s.Buffer.Write(p)
}
func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

func TestRaftFSMSnapshotPersistAndRestore(t *testing.T) {
	src := richState(t)
	f := NewRaftFSM(src)
	snap, err := f.Snapshot()
	require.NoError(t, err)
	defer snap.Release()

	// Applies after Snapshot() do not reach the persisted bytes.
	want := snapshotBytes(t, src)
	h := &harness{t: t, s: src, index: src.AppliedIndex(), term: 3}
	h.ok(insert("later", "p", ""))

	sink := &memSink{failAfter: -1}
	require.NoError(t, snap.Persist(sink))
	require.True(t, sink.closed)
	require.False(t, sink.cancelled)
	require.Equal(t, want, sink.Bytes())

	dst := NewRaftFSM(New())
	rc := &closeRecorder{Reader: bytes.NewReader(sink.Bytes())}
	require.NoError(t, dst.Restore(rc))
	require.True(t, rc.closed)
	require.Equal(t, want, snapshotBytes(t, dst.State()))

	failing := &memSink{failAfter: 100}
	require.Error(t, snap.Persist(failing))
	require.True(t, failing.cancelled)
	require.False(t, failing.closed)

	rc = &closeRecorder{Reader: bytes.NewReader([]byte("garbage"))}
	require.ErrorIs(t, dst.Restore(rc), ErrBadSnapshot)
	require.True(t, rc.closed)
	require.Equal(t, want, snapshotBytes(t, dst.State()))
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// TestRaftSingleNode runs the adapter under a real (in-memory) raft node:
// responses travel through apply futures, reads run concurrently with the
// FSM goroutine, and a raft snapshot restores to the same state.
func TestRaftSingleNode(t *testing.T) {
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.BatchApplyCh = true
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("")
	require.NoError(t, raft.BootstrapCluster(conf, store, store, snaps, trans,
		raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}))
	state := New()
	r, err := raft.NewRaft(conf, NewRaftFSM(state), store, store, snaps, trans)
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

	// Many entries in flight while this goroutine reads.
	var futs []raft.ApplyFuture
	for i := 0; i < 200; i++ {
		futs = append(futs, r.Apply(batchEntry(t, 1, insert(taskID(i), "p", ""), start(taskID(i), 1, lease(1, uint64(i+1)))), time.Second))
		_, _ = state.List(ListQuery{Statuses: []Status{StatusRunning}, Limit: 10})
		_ = state.Counts()
		_ = state.View().Len()
	}
	stale := r.Apply(batchEntry(t, 0, insert("x", "p", "")), time.Second)
	rejected := r.Apply(batchEntry(t, 1, insert(taskID(0), "p", "")), time.Second)
	for _, f := range futs {
		require.NoError(t, f.Error())
		require.Nil(t, f.Response())
	}
	require.NoError(t, stale.Error())
	require.ErrorIs(t, stale.Response().(error), ErrStaleEpoch)
	require.NoError(t, rejected.Error())
	var rej *RejectedError
	require.ErrorAs(t, rejected.Response().(error), &rej)
	require.Equal(t, []PoolCounts{{Pool: "p", ByStatus: [numStatuses]int64{StatusRunning: 200}}}, state.Counts())

	require.NoError(t, r.Snapshot().Error())
	metas, err := snaps.List()
	require.NoError(t, err)
	require.NotEmpty(t, metas)
	_, rc, err := snaps.Open(metas[0].ID)
	require.NoError(t, err)
	restored := New()
	require.NoError(t, NewRaftFSM(restored).Restore(rc))
	require.Equal(t, state.Hash(), restored.Hash())
}

// A snapshot older than the applied state goes through the restore guard;
// a refusal leaves the state as it was. A snapshot at or after the applied
// index never asks the guard.
func TestRaftFSMRestoreGuard(t *testing.T) {
	old := richState(t)
	oldBytes := snapshotBytes(t, old)
	newer := richState(t)
	h := &harness{t: t, s: newer, index: newer.AppliedIndex(), term: 3}
	h.ok(insert("later", "p", ""))
	newerBytes := snapshotBytes(t, newer)

	dst := NewRaftFSM(New())
	var asked [][2]uint64
	refuse := errors.New("refused")
	dst.SetRestoreGuard(func(snapshot, applied uint64) error {
		asked = append(asked, [2]uint64{snapshot, applied})
		return refuse
	})
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(newerBytes))))
	require.Empty(t, asked, "a snapshot ahead of the state is restored without asking")

	err := dst.Restore(io.NopCloser(bytes.NewReader(oldBytes)))
	require.ErrorIs(t, err, refuse)
	require.Equal(t, [][2]uint64{{old.AppliedIndex(), newer.AppliedIndex()}}, asked)
	require.Equal(t, newerBytes, snapshotBytes(t, dst.State()), "a refused snapshot changes nothing")

	dst.SetRestoreGuard(func(uint64, uint64) error { return nil })
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(oldBytes))))
	require.Equal(t, oldBytes, snapshotBytes(t, dst.State()))
}
