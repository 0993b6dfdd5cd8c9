package cluster

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Snapshots are checked before raft starts. hashicorp/raft stores a CRC64
// of each snapshot's state.bin in its meta.json and compares it when it
// opens the snapshot (file_snapshot.go, Open); at start it restores the
// newest snapshot that opens and restores, skipping the others with an
// error in its log, and fails only when none does (api.go,
// restoreSnapshot). A snapshot whose meta.json cannot be read is not even
// listed (file_snapshot.go, getSnapshots). Falling back to an older
// snapshot is right only while the log still holds every entry after it:
// raft replays the log from the snapshot it restored, and an entry the log
// no longer has makes it panic (raft.go, processLogs). Log compaction
// removes entries up to the newest snapshot, so after a corrupt newest
// snapshot the log often starts past the older one.
//
// So the node, before raft starts:
//   - opens the newest snapshots (checking their CRC) until one is good;
//   - moves each bad one newer than that aside into snapshots-corrupt/,
//     naming its file in an error line;
//   - if the log does not reach back to the good snapshot (or to the start
//     when none is left), discards the local log (the term and vote are
//     kept): the node starts behind, as a new server would, and the leader
//     sends it the entries or a snapshot. That needs another voter holding
//     the state; when the configuration names none, the node refuses to
//     start instead, and nothing is moved.

// snapshotCheck is what checkSnapshots found.
type snapshotCheck struct {
	bad        []badSnapshot
	good       *raft.SnapshotMeta // nil: no usable snapshot
	discardLog bool               // the log does not reach back to good
	first      uint64             // the log's first and last indexes
	last       uint64
}

type badSnapshot struct {
	id     string
	file   string // the file that failed
	reason error
	meta   *raft.SnapshotMeta // nil when meta.json is unreadable
}

// SnapshotCorruptError says the node's snapshots are corrupt and it cannot
// rebuild its state from another server.
type SnapshotCorruptError struct {
	File   string
	Reason error
	Detail string
}

func (e *SnapshotCorruptError) Error() string {
	return fmt.Sprintf("raft snapshot %s is corrupt: %v; %s (see docs/operations.md#disk-faults)", e.File, e.Reason, e.Detail)
}

func (e *SnapshotCorruptError) Unwrap() error { return e.Reason }

// checkSnapshots checks the snapshots in raftDir and, when the newest are
// corrupt, moves them aside and discards a log that does not reach back to
// the snapshot that will be restored (see above). id is this node's id.
func checkSnapshots(raftDir, id string, snaps raft.SnapshotStore, logs raft.LogStore, logger hclog.Logger) error {
	chk, err := inspectSnapshots(raftDir, snaps, logs)
	if err != nil {
		return err
	}
	if len(chk.bad) == 0 && !chk.discardLog {
		return nil
	}
	if chk.discardLog {
		servers, err := lastConfiguration(chk, logs)
		if err != nil {
			return err
		}
		others := 0
		for _, s := range servers {
			if s.Suffrage == raft.Voter && string(s.ID) != id {
				others++
			}
		}
		if others == 0 {
			from := "no older snapshot is left"
			if chk.good != nil {
				from = fmt.Sprintf("the older snapshot %s ends at entry %d", chk.good.ID, chk.good.Index)
			}
			detail := fmt.Sprintf("%s but the log starts at entry %d, and no other voter holds the state in between: "+
				"restore a backup of this server", from, chk.first)
			if len(chk.bad) == 0 {
				return &SnapshotCorruptError{File: filepath.Join(raftDir, "snapshots"),
					Reason: errors.New("a snapshot is missing"), Detail: detail}
			}
			return &SnapshotCorruptError{File: chk.bad[0].file, Reason: chk.bad[0].reason, Detail: detail}
		}
	}
	quarantine := filepath.Join(raftDir, "snapshots-corrupt")
	for _, b := range chk.bad {
		dst := filepath.Join(quarantine, b.id)
		logger.Error("raft snapshot is corrupt: moving it aside", "file", b.file, "error", b.reason, "moved_to", dst)
		if err := os.MkdirAll(quarantine, 0o700); err != nil {
			return fmt.Errorf("moving corrupt snapshot aside: %w", err)
		}
		_ = os.RemoveAll(dst) // a leftover of an earlier start
		if err := os.Rename(filepath.Join(raftDir, "snapshots", b.id), dst); err != nil {
			return fmt.Errorf("moving corrupt snapshot %s aside: %w", b.file, err)
		}
	}
	if !chk.discardLog {
		if chk.good != nil {
			logger.Warn("starting from an older snapshot; the log holds every entry after it",
				"snapshot", chk.good.ID, "snapshot_index", chk.good.Index, "log_first", chk.first, "log_last", chk.last)
		}
		return nil
	}
	goodIndex := uint64(0)
	if chk.good != nil {
		goodIndex = chk.good.Index
	}
	logger.Warn("the raft log does not reach back to the snapshot this node can restore: discarding it; "+
		"this node starts behind and catches up from the leader",
		"snapshot_index", goodIndex, "log_first", chk.first, "log_last", chk.last)
	if err := logs.DeleteRange(chk.first, chk.last); err != nil {
		return fmt.Errorf("discarding the raft log: %w", err)
	}
	return nil
}

// inspectSnapshots finds the newest good snapshot, the bad ones newer than
// it, and whether the log reaches back to the good one.
func inspectSnapshots(raftDir string, snaps raft.SnapshotStore, logs raft.LogStore) (*snapshotCheck, error) {
	dir := filepath.Join(raftDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading the snapshot directory: %w", err)
	}
	chk := &snapshotCheck{}
	var metas []*raft.SnapshotMeta
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		file := filepath.Join(dir, e.Name(), "meta.json")
		m, err := readSnapshotMeta(file)
		if err != nil {
			chk.bad = append(chk.bad, badSnapshot{id: e.Name(), file: file, reason: err})
			continue
		}
		metas = append(metas, m)
	}
	// Newest first, as raft orders them.
	slices.SortFunc(metas, func(a, b *raft.SnapshotMeta) int {
		return cmp.Or(cmp.Compare(b.Term, a.Term), cmp.Compare(b.Index, a.Index), cmp.Compare(b.ID, a.ID))
	})
	for _, m := range metas {
		_, rc, err := snaps.Open(m.ID)
		if err == nil {
			err = rc.Close()
		}
		if err != nil {
			chk.bad = append(chk.bad, badSnapshot{id: m.ID, file: filepath.Join(dir, m.ID, "state.bin"), reason: err, meta: m})
			continue
		}
		chk.good = m
		break
	}
	// An unreadable meta.json older than the good snapshot is left alone:
	// raft never reads it.
	chk.bad = slices.DeleteFunc(chk.bad, func(b badSnapshot) bool {
		return b.meta == nil && chk.good != nil && olderName(b.id, chk.good.ID)
	})
	if chk.first, err = logs.FirstIndex(); err != nil {
		return nil, fmt.Errorf("reading the first log index: %w", err)
	}
	if chk.last, err = logs.LastIndex(); err != nil {
		return nil, fmt.Errorf("reading the last log index: %w", err)
	}
	goodIndex := uint64(0)
	if chk.good != nil {
		goodIndex = chk.good.Index
	}
	chk.discardLog = chk.last > 0 && chk.first > goodIndex+1
	return chk, nil
}

// readSnapshotMeta reads a snapshot's meta.json as raft does.
func readSnapshotMeta(file string) (*raft.SnapshotMeta, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var m raft.SnapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax {
		return nil, fmt.Errorf("snapshot version %d not supported", m.Version)
	}
	return &m, nil
}

// olderName reports whether snapshot directory a sorts before b: names
// are term-index-milliseconds.
func olderName(a, b string) bool {
	var at, ai, bt, bi uint64
	var am, bm int64
	if _, err := fmt.Sscanf(a, "%d-%d-%d", &at, &ai, &am); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(b, "%d-%d-%d", &bt, &bi, &bm); err != nil {
		return false
	}
	return cmp.Or(cmp.Compare(at, bt), cmp.Compare(ai, bi), cmp.Compare(am, bm)) < 0
}

// lastConfiguration is the newest raft configuration the node holds: the
// last configuration entry of the log, else the one recorded with the
// newest snapshot whose meta.json reads (even one whose state is corrupt).
func lastConfiguration(chk *snapshotCheck, logs raft.LogStore) ([]raft.Server, error) {
	var (
		servers []raft.Server
		index   uint64
	)
	consider := func(m *raft.SnapshotMeta) {
		if m != nil && m.ConfigurationIndex >= index && len(m.Configuration.Servers) > 0 {
			servers, index = m.Configuration.Servers, m.ConfigurationIndex
		}
	}
	consider(chk.good)
	for _, b := range chk.bad {
		consider(b.meta)
	}
	for i := max(chk.first, index+1); chk.last > 0 && i <= chk.last; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return nil, fmt.Errorf("reading log entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			servers = raft.DecodeConfiguration(l.Data).Servers
		}
	}
	return servers, nil
}
