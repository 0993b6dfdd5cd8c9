//go:build !jepsenfaults

package cluster

import "github.com/hashicorp/raft"

// faults is the fault injection of the jepsenfaults builds (faults_on.go).
// Release builds have none: the engine reads the configured clock and raft
// writes straight to its stores.
type faults struct{}

// newFaults returns no fault injection; cfg is left as it is.
func newFaults(*Config) *faults { return nil }

// logStore returns s unchanged.
func (*faults) logStore(s raft.LogStore) raft.LogStore { return s }

// stableStore returns s unchanged.
func (*faults) stableStore(s raft.StableStore) raft.StableStore { return s }
