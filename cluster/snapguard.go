package cluster

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/fsm"
)

// staleSnapshotGuard decides whether a snapshot older than the applied
// state may be restored (see fsm.RaftFSM.Restore). After installing it,
// raft re-applies the entries that follow it from the log, so it is safe
// only while the log holds every one of them up to the applied index.
// Otherwise the snapshot is a stale InstallSnapshot (for example a request
// the network delivered late, after a newer snapshot had been installed and
// the entries before that one compacted away): restoring it would make the
// next apply look for entries that are gone, which hashicorp/raft treats
// as fatal. It is refused instead, and the node keeps its newer state.
func staleSnapshotGuard(logs raft.LogStore, logger hclog.Logger) fsm.RestoreGuard {
	return func(snapshot, applied uint64) error {
		first, err := logs.FirstIndex()
		if err != nil {
			return fmt.Errorf("reading the first log index: %w", err)
		}
		last, err := logs.LastIndex()
		if err != nil {
			return fmt.Errorf("reading the last log index: %w", err)
		}
		if first != 0 && first <= snapshot+1 && last >= applied {
			logger.Info("restoring a snapshot older than the applied state; the log holds the entries after it",
				"snapshot_index", snapshot, "applied_index", applied, "log_first", first, "log_last", last)
			return nil
		}
		logger.Warn("refusing a stale snapshot: the log no longer holds the entries after it",
			"snapshot_index", snapshot, "applied_index", applied, "log_first", first, "log_last", last)
		return fmt.Errorf("stale snapshot: the log holds entries %d..%d, not %d..%d", first, last, snapshot+1, applied)
	}
}
