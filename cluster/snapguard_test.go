package cluster

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func TestStaleSnapshotGuard(t *testing.T) {
	logsFrom := func(first, last uint64) raft.LogStore {
		s := raft.NewInmemStore()
		for i := first; i <= last && first != 0; i++ {
			require.NoError(t, s.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand}))
		}
		return s
	}
	tests := []struct {
		name              string
		first, last       uint64
		snapshot, applied uint64
		ok                bool
	}{
		{"the log holds every entry after the snapshot", 90, 300, 100, 250, true},
		{"the log starts right after the snapshot", 101, 250, 100, 250, true},
		{"entries after the snapshot compacted away", 200, 300, 100, 250, false},
		{"the log ends before the applied index", 90, 200, 100, 250, false},
		{"empty log", 0, 0, 100, 250, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard := staleSnapshotGuard(logsFrom(tc.first, tc.last), hclog.NewNullLogger())
			err := guard(tc.snapshot, tc.applied)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, "stale snapshot")
			}
		})
	}
}
