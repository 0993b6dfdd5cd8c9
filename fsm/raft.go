package fsm

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// RaftFSM adapts a State to hashicorp/raft: it implements raft.FSM and
// raft.BatchingFSM. The response of every command entry is the value
// State.Apply returns.
type RaftFSM struct {
	s      *State
	guard  RestoreGuard
	onHalt func(*HaltError)
	halted bool // onHalt was called for the current halt
}

// RestoreGuard decides whether a snapshot taken at log index snapshot may
// replace a state that has applied up to index applied (snapshot <
// applied): nil to restore, an error to keep the state and fail the
// restore.
type RestoreGuard func(snapshot, applied uint64) error

// SetRestoreGuard sets the check Restore runs on a snapshot older than the
// state it would replace. Without one such a snapshot is restored.
func (f *RaftFSM) SetRestoreGuard(g RestoreGuard) { f.guard = g }

var (
	_ raft.FSM         = (*RaftFSM)(nil)
	_ raft.BatchingFSM = (*RaftFSM)(nil)
)

// SetHaltHandler sets what to call, once, when the state halts at an entry
// it cannot apply (see HaltError). It runs on raft's FSM goroutine and must
// not block.
func (f *RaftFSM) SetHaltHandler(fn func(*HaltError)) { f.onHalt = fn }

// NewRaftFSM returns the raft adapter of s.
func NewRaftFSM(s *State) *RaftFSM { return &RaftFSM{s: s} }

// State returns the state the adapter applies to.
func (f *RaftFSM) State() *State { return f.s }

// Apply applies one committed log entry. Entries other than commands
// (configuration changes) leave the state untouched and answer nil.
func (f *RaftFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	resp := f.s.Apply(l.Index, l.Term, l.Data)
	if h, ok := resp.(*HaltError); ok && !f.halted {
		f.halted = true
		if f.onHalt != nil {
			f.onHalt(h)
		}
	}
	return resp
}

// ApplyBatch applies committed log entries in order and returns one response
// per entry.
func (f *RaftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	for i, l := range logs {
		out[i] = f.Apply(l)
	}
	return out
}

// Snapshot captures an immutable view of the state in O(1); the encoding
// happens in Persist, concurrently with later applies. It fails while the
// state is halted: raft would record the snapshot as covering the entries
// the state never applied and drop them from its log, so that a restart
// with a newer release could not apply them.
func (f *RaftFSM) Snapshot() (raft.FSMSnapshot, error) {
	if h := f.s.Halted(); h != nil {
		return nil, fmt.Errorf("not snapshotting a halted state: %w", h)
	}
	return &fsmSnapshot{v: f.s.View()}, nil
}

// Restore replaces the state with the snapshot read from rc and closes rc.
//
// hashicorp/raft installs a snapshot sent by the leader without comparing it
// with what the node already holds, so a stale InstallSnapshot (one the
// network delivered late, after a newer snapshot and the entries after it)
// would move the state back to an index whose following entries the log no
// longer has, and the next apply would fail on a missing entry. The guard
// (see SetRestoreGuard) refuses such a snapshot; raft then reports the
// failure to the sender and leaves its own state as it was.
func (f *RaftFSM) Restore(rc io.ReadCloser) error {
	var accept func(snapshot, applied uint64) error
	if f.guard != nil {
		accept = func(snapshot, applied uint64) error {
			if snapshot >= applied {
				return nil
			}
			return f.guard(snapshot, applied)
		}
	}
	err := f.s.restore(rc, accept)
	if err == nil {
		f.halted = false
	}
	if cerr := rc.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing snapshot: %w", cerr)
	}
	return err
}

// fsmSnapshot is a raft.FSMSnapshot of one View.
type fsmSnapshot struct {
	v *View
}

// Persist streams the view into sink, cancelling the sink on failure.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.v.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persisting snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("closing snapshot sink: %w", err)
	}
	return nil
}

// Release does nothing: the view holds no resources beyond memory.
func (s *fsmSnapshot) Release() {}
