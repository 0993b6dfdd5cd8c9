package cluster

import (
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/fsm"
)

// Access to a node's internals for the external tests of this package
// (package cluster_test), which run real clusters through
// internal/testcluster.

// FSM is the node's replicated state.
func (n *Node) FSM() *fsm.State { return n.state }

// Raft is the node's raft.
func (n *Node) Raft() *raft.Raft { return n.raft }

// LogStore is the node's raft log store.
func (n *Node) LogStore() *raftboltdb.BoltStore { return n.store }

// ReconcileRuns counts the reconciliation passes the node ran as leader.
func (n *Node) ReconcileRuns() uint64 { return n.reconcileRuns.Load() }

// Member is the node's gossip record of member id.
func (n *Node) Member(id string) (Member, bool) { return n.members.get(id) }

// TestEngine is the engine of the node's current term.
func (n *Node) TestEngine() (*engine.Engine, error) { return n.engine() }

// IsolateRaft cuts (or restores) the node's raft connections, both ways.
func (n *Node) IsolateRaft(b bool) { n.stream.block(b) }

// RaftTLSFailures counts the node's raft dials whose TLS handshake failed.
func (n *Node) RaftTLSFailures() uint64 { return n.stream.tlsFailures.Load() }

// RaftTransport is the node's raft network transport.
func (n *Node) RaftTransport() *raft.NetworkTransport { return n.trans }

// RaftRefused counts the raft RPCs this node refused from non-members.
func (n *Node) RaftRefused() uint64 { return n.filter.Refused() }
