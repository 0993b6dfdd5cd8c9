package cluster

import (
	"errors"
	"fmt"
)

var (
	// ErrNotReady: this node is the raft leader but has not finished
	// establishing its leadership (barrier, epoch bump, engine start).
	// Retry shortly on this node.
	ErrNotReady = errors.New("leader not ready yet")
	// ErrNoLeader: no leader is known.
	ErrNoLeader = errors.New("no leader known")
	// ErrUnknownPeer: the id is not in the raft configuration.
	ErrUnknownPeer = errors.New("unknown peer")
	// ErrShutdown: the node is shutting down.
	ErrShutdown = errors.New("node is shutting down")
)

// NotLeaderError is returned by every leader-only operation on a node that
// cannot serve it. LeaderID and LeaderHTTPAddr name the leader when one is
// known (LeaderHTTPAddr from its gossip metadata; empty when not tracked).
// Err says why: raft's ErrNotLeader or ErrLeadershipTransferInProgress,
// ErrNoLeader, or ErrNotReady (this node leads but is not serving yet).
type NotLeaderError struct {
	LeaderID       string
	LeaderHTTPAddr string
	Err            error
}

func (e *NotLeaderError) Error() string {
	cause := "not the leader"
	if e.Err != nil {
		cause = e.Err.Error()
	}
	switch {
	case e.LeaderID == "":
		return fmt.Sprintf("%s (no leader known)", cause)
	case e.LeaderHTTPAddr == "":
		return fmt.Sprintf("%s (leader is %s)", cause, e.LeaderID)
	default:
		return fmt.Sprintf("%s (leader is %s at %s)", cause, e.LeaderID, e.LeaderHTTPAddr)
	}
}

// Unwrap returns the cause.
func (e *NotLeaderError) Unwrap() error { return e.Err }
