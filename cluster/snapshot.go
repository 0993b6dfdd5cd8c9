package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// Backups (`cronoq operator snapshot save|restore`).
//
// Save takes raft's own snapshot on the leader, after a barrier, and streams
// it as a backup file (see fsm.NewBackupReader): every write acknowledged
// before the call is in it.
//
// Restore reads and checks the whole file first (checksum, length, the
// state decodes, its log format is one every voter understands); nothing is
// changed before. Then, on the leadership loop's goroutine, so that nothing
// else writes meanwhile:
//
//  1. the engine of the term is stopped;
//  2. the state read from the file is rebased: its epoch becomes one above
//     both the cluster's and the file's (so that it is an epoch no engine
//     ever ran at, and every batch of an engine from before is fenced), the
//     log index it has applied becomes the index raft will give the
//     restored snapshot, and its tombstones are the cluster's (membership
//     belongs to the cluster, like the raft configuration, which raft
//     keeps);
//  3. every attempt running in it loses its lease (core.RevokeLeases): a
//     worker holding a lease from the file, or from the cluster before the
//     restore, is refused from then on, whichever node leads next;
//  4. raft.Restore installs it on this node and, through InstallSnapshot,
//     on every follower, and compacts the log;
//  5. the loop re-establishes leadership as for a new term: barrier, epoch
//     bump (one above the restored epoch), an engine rebuilt from the
//     restored state.

// restoreIndexGap is added to the log's last index to make the index of a
// restored snapshot: raft gives it max(last index, meta.Index) + 1, and the
// state inside must say the same index, so meta.Index is chosen above
// anything the log could reach meanwhile (only raft's own entries could be
// appended while the engine is stopped).
const restoreIndexGap = 64

// msgRestoreRevoked is the error a running attempt ends with when a restore
// revokes its lease.
const msgRestoreRevoked = "lease revoked: the cluster's state was restored from a snapshot"

// Snapshot is a backup file being read from the leader: Index and Term are
// those of the raft snapshot it holds, Size the length of the whole file.
// Close it once read.
type Snapshot struct {
	Index uint64
	Term  uint64
	Size  int64
	r     io.Reader
	c     io.Closer
}

// Read reads the backup file.
func (s *Snapshot) Read(p []byte) (int, error) { return s.r.Read(p) }

// Close releases the raft snapshot being read.
func (s *Snapshot) Close() error { return s.c.Close() }

// SaveSnapshot takes a snapshot of the state on the leader and returns it
// as a backup file to read (leader only: a *NotLeaderError otherwise).
func (n *Node) SaveSnapshot(ctx context.Context) (*Snapshot, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	// Everything committed before now is applied here, so raft's snapshot
	// (of the state as applied) holds every write acknowledged so far.
	if err := n.await(ctx, n.raft.Barrier(n.cfg.BarrierTimeout)); err != nil {
		return nil, fmt.Errorf("saving a snapshot: barrier: %w", n.raftErr(err))
	}
	f := n.raft.Snapshot()
	if err := n.await(ctx, f); err != nil {
		return nil, fmt.Errorf("saving a snapshot: %w", n.raftErr(err))
	}
	meta, rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("saving a snapshot: opening it: %w", err)
	}
	hdr := fsm.BackupHeader{Index: meta.Index, Term: meta.Term, Created: n.now(), Size: uint64(meta.Size)}
	n.logger.Info("saving a snapshot", "index", meta.Index, "term", meta.Term, "bytes", hdr.FileSize())
	return &Snapshot{Index: meta.Index, Term: meta.Term, Size: hdr.FileSize(), r: fsm.NewBackupReader(hdr, rc), c: rc}, nil
}

// raftErr turns raft's refusal of a leader-only call into a
// *NotLeaderError; other errors pass through.
func (n *Node) raftErr(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) {
		return n.notLeader(err)
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		return ErrShutdown
	}
	return err
}

// RestoreResult says what a restore did.
type RestoreResult struct {
	// Of the backup file.
	Index    uint64 // raft index of the snapshot it holds
	Term     uint64
	Created  time.Time
	Size     int64 // of the file
	Checksum [32]byte

	// Of the state restored.
	Tasks     int
	Schedules int
	Workflows int
	Pools     int
	Revoked   int // running attempts whose lease was revoked

	// Of the cluster after the restore.
	RaftIndex uint64 // raft index of the restored snapshot
	Epoch     uint64 // the leader's epoch once it serves again (0: not known yet)
}

// restoreRequest asks the leadership loop to restore a state read from a
// backup file.
type restoreRequest struct {
	state *fsm.State
	info  fsm.BackupInfo
	resp  chan restoreOutcome
}

type restoreOutcome struct {
	res *RestoreResult
	err error
}

// RestoreSnapshot replaces the cluster's state with the backup file read
// from r (leader only). The file is read and checked whole before anything
// changes: a damaged file is refused with an *InvalidError for the field
// "snapshot". Leases granted before the restore are refused afterwards, and
// the leader serves again at a higher epoch (see the notes above). The
// raft configuration is kept.
func (n *Node) RestoreSnapshot(ctx context.Context, r io.Reader) (*RestoreResult, error) {
	term, err := n.Leading()
	if err != nil {
		return nil, err
	}
	st, info, err := fsm.ReadBackup(r, n.logVersion())
	if err != nil {
		if errors.Is(err, fsm.ErrBadBackup) || errors.Is(err, fsm.ErrNewerVersion) {
			return nil, Invalid("snapshot", "%v", err)
		}
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	req := restoreRequest{state: st, info: info, resp: make(chan restoreOutcome, 1)}
	select {
	case n.restoreCh <- req:
	case <-term.Done:
		return nil, n.notLeader(nil)
	case <-n.shutdownCh:
		return nil, ErrShutdown
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var out restoreOutcome
	select {
	case out = <-req.resp:
	case <-ctx.Done():
		return nil, fmt.Errorf("restoring a snapshot: %w: %w", ErrOutcomeUnknown, ctx.Err())
	}
	if out.err != nil {
		return nil, out.err
	}
	res := out.res
	// Report the epoch the cluster serves at, once the leader serves again
	// (or some other node leads: it bumps the epoch the same way).
	restored := res.Epoch
	wctx, cancel := context.WithTimeout(ctx, n.cfg.BarrierTimeout)
	defer cancel()
	_ = n.waitFor(wctx, func() bool { return n.Epoch() > restored || !n.IsLeader() })
	res.Epoch = n.Epoch()
	return res, nil
}

// restore does a restore on the leadership loop's goroutine, under the
// term's ctx; the engine is stopped. On an error before raft.Restore nothing
// has changed, and raft.Restore refuses before changing anything or says
// that it may have (ErrOutcomeUnknown).
func (n *Node) restore(ctx context.Context, req restoreRequest) (*RestoreResult, error) {
	if ctx.Err() != nil || n.raft.State() != raft.Leader {
		return nil, n.notLeader(raft.ErrNotLeader) // the term ended: nothing done
	}
	st, info := req.state, req.info
	epoch := max(n.state.Epoch(), info.Epoch) + 1
	base := max(n.raft.LastIndex(), info.Index) + restoreIndexGap
	index := base + 1
	term := n.raft.CurrentTerm()
	now := n.now()
	if err := st.Rebase(epoch, term, index, n.state.Tombstones()); err != nil {
		return nil, fmt.Errorf("restoring a snapshot: %w", err)
	}
	revoked, err := n.revokeRestoredLeases(st, epoch, index, term, now)
	if err != nil {
		return nil, fmt.Errorf("restoring a snapshot: revoking its leases: %w", err)
	}

	f, err := os.CreateTemp(n.dataDir, "restore-*.snap")
	if err != nil {
		return nil, fmt.Errorf("restoring a snapshot: %w", err)
	}
	size, err := st.View().WriteTo(f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("restoring a snapshot: writing it: %w", err)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: base, Term: info.Term, Size: size}
	n.logger.Warn("restoring a snapshot: replacing the cluster's state",
		"snapshot_index", info.Index, "snapshot_term", info.Term, "tasks", info.Tasks,
		"raft_index", index, "epoch", epoch, "revoked_leases", revoked)
	if err := n.raftRestore(meta, f); err != nil {
		if errors.Is(err, raft.ErrLeadershipLost) {
			// Restored here, but leadership was lost before a quorum
			// confirmed it: the next leader may or may not have it.
			return nil, fmt.Errorf("restoring a snapshot: leadership was lost before a quorum confirmed the restore, run it again: %w: %w",
				ErrOutcomeUnknown, err)
		}
		return nil, fmt.Errorf("restoring a snapshot: %w", n.raftErr(err))
	}
	if got := n.raft.Stats()["last_snapshot_index"]; got != strconv.FormatUint(index, 10) {
		n.logger.Warn("restored snapshot has another raft index than its state says", "raft_index", got, "state_index", index)
	}
	n.logger.Info("restored a snapshot", "raft_index", index, "epoch", epoch)
	return &RestoreResult{
		Index: info.Index, Term: info.Term, Created: info.Created, Size: info.FileSize(), Checksum: info.Checksum,
		Tasks: info.Tasks, Schedules: info.Schedules, Workflows: info.Workflows, Pools: info.Pools,
		Revoked: revoked, RaftIndex: index, Epoch: epoch,
	}, nil
}

// revokeRestoredLeases ends the running attempts of st (at epoch, not yet
// restored) the way a core does: one batch of the epoch, applied to st at
// index. It returns how many it ended.
func (n *Node) revokeRestoredLeases(st *fsm.State, epoch, index, term uint64, now time.Time) (int, error) {
	ccfg := n.cfg.Engine.Core
	if ccfg.Seed == 0 {
		ccfg.Seed = randomSeed()
	}
	ccfg.LogVersion = n.logVersion()
	c, err := core.Recover(ccfg, st.View(), epoch, now)
	if err != nil {
		return 0, fmt.Errorf("rebuilding the scheduler from the snapshot: %w", err)
	}
	revoked := c.RevokeLeases(msgRestoreRevoked)
	out := c.Ready()
	if len(out.Mutations) == 0 {
		return revoked, nil
	}
	data, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: epoch, Time: fsm.InstantOf(now), Mutations: out.Mutations})
	if err != nil {
		return 0, fmt.Errorf("encoding: %w", err)
	}
	if resp := st.Apply(index, term, data); resp != nil {
		if err, ok := resp.(error); ok {
			return 0, fmt.Errorf("applying: %w", err)
		}
		return 0, fmt.Errorf("applying: unexpected response %v", resp)
	}
	return revoked, nil
}

// raftRestore runs raft.Restore with the snapshot in f, which it closes and
// removes once raft is done with it. raft.Restore takes no context, and its
// answer is what tells whether the state was replaced, so it is waited for
// even when the term ends meanwhile: raft answers soon then (not the
// leader, leadership lost, shut down).
func (n *Node) raftRestore(meta *raft.SnapshotMeta, f *os.File) error {
	if !n.futures.add() {
		f.Close()
		os.Remove(f.Name())
		return ErrShutdown
	}
	ch := make(chan error, 1)
	go func() {
		defer n.futures.done()
		defer os.Remove(f.Name())
		defer f.Close()
		ch <- n.raft.Restore(meta, f, n.cfg.BarrierTimeout)
	}()
	return <-ch
}
