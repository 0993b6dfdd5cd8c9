package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A node whose data directory runs out of space stops taking writes: what
// it holds stays as it was (a bbolt transaction that cannot be written is
// rolled back whole), it says why in its health and in the errors of the
// writes routed to it, and it takes writes again once the space is back.
//
// hashicorp/raft does not know about a full disk: a leader whose log write
// fails answers the entries with the error and steps down
// (raft.go, dispatchLogs), a follower refuses the AppendEntries and the
// leader retries it (raft.go, appendEntries), and nothing stops the node
// from winning the next election. So the node keeps the condition itself:
// the log and stable stores are wrapped to notice ENOSPC, and while it
// holds, a leader does not establish (its engine stays stopped, so nothing
// more is appended and raft is not made to step down again), hands its
// leadership to another voter when there is one, and answers every leader
// operation with a *DiskFullError at once instead of holding the call
// until a leader appears. A probe that writes a file the size of the
// failed write in the raft directory clears the condition once it fits, as
// does a log write at least that large.

// ErrDiskFull is matched (errors.Is) by every *DiskFullError.
var ErrDiskFull = errors.New("disk full")

// DiskFullError says that this node's data directory has no space left: a
// write to its raft log or stable store failed with ENOSPC (or EDQUOT). The
// node refuses writes until the space is back.
type DiskFullError struct {
	Dir   string    // the data directory
	Since time.Time // when the first write failed
	Err   error     // the failed write's error
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("disk full: %s: %s", e.Dir, errnoText(e.Err))
}

// Is matches ErrDiskFull.
func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// Unwrap returns the failed write's error.
func (e *DiskFullError) Unwrap() error { return e.Err }

// errnoText is the system error's own text ("no space left on device")
// when err carries one, else err's text.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	if err == nil {
		return "no space left"
	}
	return err.Error()
}

// isNoSpace reports whether err is a write that failed for lack of space.
// bbolt wraps some of its file errors with %s (a failed resize reads "file
// resize error: no space left on device"), so the text is checked too.
func isNoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

// Probe sizes: at least minProbeBytes, else twice the failed write, at most
// maxProbeBytes.
const (
	minProbeBytes   = 1 << 20
	maxProbeBytes   = 64 << 20
	probeFileName   = "space-probe"
	probeChunkBytes = 64 << 10
)

// diskState is a node's disk-full condition.
type diskState struct {
	dir      string // the data directory, named in errors
	probeDir string // where the probe writes
	now      func() time.Time
	logger   hclog.Logger

	mu      sync.Mutex
	full    *DiskFullError
	failed  int           // bytes of the write that failed
	changed chan struct{} // closed and replaced on every change
}

func newDiskState(dir, probeDir string, now func() time.Time, logger hclog.Logger) *diskState {
	return &diskState{dir: dir, probeDir: probeDir, now: now, logger: logger, changed: make(chan struct{})}
}

// err returns the condition, nil while there is space.
func (d *diskState) err() *DiskFullError {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.full
}

// watch returns a channel closed at the next change of the condition.
func (d *diskState) watch() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

func (d *diskState) notify() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// failedWrite records the outcome of a write of size bytes to the raft
// stores: an ENOSPC sets the condition and is returned as a
// *DiskFullError (wrapping it); other errors pass unchanged.
func (d *diskState) failedWrite(err error, size int, what string) error {
	if !isNoSpace(err) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failed = max(d.failed, size)
	if d.full == nil {
		d.full = &DiskFullError{Dir: d.dir, Since: d.now(), Err: err}
		d.logger.Error("disk full: this node takes no writes until space is freed; its data is kept",
			"data_dir", d.dir, "write", what, "bytes", size, "error", err)
		d.notify()
	}
	return &DiskFullError{Dir: d.full.Dir, Since: d.full.Since, Err: err}
}

// wrote records a successful log write of size bytes: one at least as
// large as the write that failed clears the condition.
func (d *diskState) wrote(size int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full != nil && size >= d.failed {
		d.clearLocked("log write succeeded")
	}
}

func (d *diskState) clearLocked(how string) {
	d.logger.Info("disk space available again: taking writes", "data_dir", d.dir, "how", how,
		"full_for", d.now().Sub(d.full.Since).Round(time.Millisecond))
	d.full, d.failed = nil, 0
	d.notify()
}

// probe writes (and removes) a file the size of the failed write, plus
// margin, in the raft directory; when that fits the condition clears. It
// returns nil when the condition is clear, else why the probe failed.
func (d *diskState) probe() error {
	d.mu.Lock()
	if d.full == nil {
		d.mu.Unlock()
		return nil
	}
	size := min(max(minProbeBytes, 2*d.failed), maxProbeBytes)
	d.mu.Unlock()

	err := writeProbe(filepath.Join(d.probeDir, probeFileName), size)

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full == nil {
		return nil
	}
	if err != nil {
		if !isNoSpace(err) {
			d.logger.Warn("disk space probe failed", "dir", d.probeDir, "error", err)
		}
		return fmt.Errorf("probing for %d bytes of space in %s: %w", size, d.probeDir, err)
	}
	d.clearLocked(fmt.Sprintf("a %d-byte probe file fits", size))
	return nil
}

// writeProbe writes size bytes to path, syncs them and removes the file.
func writeProbe(path string, size int) (err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating probe file: %w", err)
	}
	defer func() {
		cerr := f.Close()
		rerr := os.Remove(path)
		if err == nil {
			err = errors.Join(cerr, rerr)
		}
	}()
	chunk := make([]byte, probeChunkBytes)
	for left := size; left > 0; left -= len(chunk) {
		if left < len(chunk) {
			chunk = chunk[:left]
		}
		if _, err := f.Write(chunk); err != nil {
			return fmt.Errorf("writing probe file: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing probe file: %w", err)
	}
	return nil
}

// heldElectionTimeout is raft's heartbeat and election timeout while the
// disk is full: long enough that the node does not stand for election.
const heldElectionTimeout = 24 * time.Hour

// probeLoop probes the disk while the condition holds, every
// DiskProbeInterval at first and less often (its backoff) while the probes
// keep finding no space, until the node shuts down. While the condition
// holds the node does not stand for election: raft's heartbeat and
// election timeouts are lengthened, and restored once space is back.
func (n *Node) probeLoop() {
	defer n.loopsWG.Done()
	l := n.loops.disk
	held := false
	for {
		changed := n.disk.watch()
		full := n.disk.err() != nil
		if full != held {
			n.holdElections(full)
			held = full
		}
		if !full {
			// Space is back, by a probe or a log write: the probes'
			// failures are over.
			l.Reset()
			select {
			case <-n.shutdownCh:
				return
			case <-changed:
			}
			continue
		}
		t := l.Timer(l.Next(n.cfg.DiskProbeInterval))
		select {
		case <-n.shutdownCh:
			t.Stop()
			return
		case <-changed:
			// Cleared by a log write (or set again): no probe needed now.
			t.Stop()
		case <-t.C():
			if err := l.Do(n.disk.probe); err != nil {
				n.logger.Debug("disk space probe", "error", err, "next_in", l.Next(0))
			}
		}
	}
}

// holdElections lengthens raft's heartbeat and election timeouts (hold) or
// restores the configured ones. hashicorp/raft has no way to keep a node
// from voting or standing for election, but a follower campaigns only once
// its heartbeat timeout passes without a leader (raft.go, runFollower), and
// the timeout can be reloaded: shortening it wakes the follower at once
// (api.go, ReloadConfig). A node whose disk is full would win an election
// only to fail its first log write and step down again, over and over.
func (n *Node) holdElections(hold bool) {
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout
	if hold {
		rc.HeartbeatTimeout, rc.ElectionTimeout = heldElectionTimeout, heldElectionTimeout
	}
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.logger.Warn("changing raft timeouts for a full disk", "hold", hold, "error", err)
		return
	}
	if hold {
		n.logger.Warn("disk full: this node does not stand for election until space is freed")
	}
}

// waitDiskSpace waits until the disk-full condition clears; false when ctx
// ended first.
func (n *Node) waitDiskSpace(ctx context.Context) bool {
	for {
		changed := n.disk.watch()
		if n.disk.err() == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// DiskFull returns the node's disk-full condition: nil while its data
// directory takes writes.
func (n *Node) DiskFull() error {
	if err := n.disk.err(); err != nil {
		return err
	}
	return nil
}

// logBytes is the size of the entries' data and extensions.
func logBytes(logs []*raft.Log) int {
	size := 0
	for _, l := range logs {
		size += len(l.Data) + len(l.Extensions) + 32
	}
	return size
}

// diskLogStore notices a full disk in the log store's writes.
type diskLogStore struct {
	raft.LogStore
	disk *diskState
}

func (s *diskLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s *diskLogStore) StoreLogs(logs []*raft.Log) error {
	size := logBytes(logs)
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return s.disk.failedWrite(err, size, "raft log")
	}
	s.disk.wrote(size)
	return nil
}

func (s *diskLogStore) DeleteRange(lo, hi uint64) error {
	return s.disk.failedWrite(s.LogStore.DeleteRange(lo, hi), 0, "raft log compaction")
}

// diskStableStore notices a full disk in the stable store's writes (the
// current term and the vote). A failed write of the term makes raft panic
// (raft.go, setCurrentTerm): the process stops with the error.
type diskStableStore struct {
	raft.StableStore
	disk *diskState
}

func (s *diskStableStore) Set(k, v []byte) error {
	return s.disk.failedWrite(s.StableStore.Set(k, v), len(k)+len(v), "raft stable store")
}

func (s *diskStableStore) SetUint64(k []byte, v uint64) error {
	return s.disk.failedWrite(s.StableStore.SetUint64(k, v), len(k)+8, "raft stable store")
}
