package transport

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	"github.com/cronoq/cronoq/cluster"
)

// notServed reports whether err means this node could not serve the call
// and nothing was done: it does not lead (or not yet, or no longer), or its
// engine stopped before taking the call. Such calls may be routed again.
func notServed(err error) bool {
	var nle *cluster.NotLeaderError
	return errors.As(err, &nle) ||
		(errors.Is(err, cluster.ErrStopped) && !errors.Is(err, cluster.ErrOutcomeUnknown))
}

// apiError turns an error of the engine, the cluster or the edge validation
// into the wire error a client sees. Errors already on the wire convention
// (*connect.Error) pass through.
func (s *Server) apiError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return apierr.Relay(err)
	}
	var ie *cluster.InvalidError
	var ve *cluster.VersionError
	var nle *cluster.NotLeaderError
	switch {
	case errors.As(err, &ie):
		return apierr.Invalid(ie.Field, ie.Reason)
	case errors.As(err, &ve):
		return apierr.UpgradeRequired(err.Error())
	case errors.Is(err, cluster.ErrDiskFull):
		return apierr.DiskFull(err.Error(), diskFullRetryAfter)
	case errors.Is(err, cluster.ErrWritePathSaturated):
		e := apierr.Overloaded(err.Error())
		e.Meta().Set(apierr.HeaderRetryAfter, "1")
		return e
	case errors.Is(err, cluster.ErrOverloaded):
		return apierr.Overloaded(err.Error())
	case errors.Is(err, cluster.ErrNotFound), errors.Is(err, cluster.ErrUnknownPeer):
		return apierr.NotFound(err.Error())
	case errors.Is(err, cluster.ErrStaleLease):
		return apierr.StaleLease(err.Error())
	case errors.Is(err, cluster.ErrACLBootstrapped):
		return apierr.New(apierr.KindACLBootstrapped, "ACL bootstrap already done: use the bootstrap token (or another management token)")
	case errors.Is(err, cluster.ErrNotWaiting):
		return apierr.NotWaiting(err.Error())
	case errors.Is(err, cluster.ErrNotRetryable):
		return apierr.NotRetryable(err.Error())
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return apierr.OutcomeUnknown(err.Error())
	case errors.Is(err, cluster.ErrShutdown) || s.stopping():
		return apierr.ShuttingDown()
	case errors.As(err, &nle):
		return s.leaderHint(nle.LeaderID, nle.LeaderHTTPAddr)
	case errors.Is(err, cluster.ErrStopped), errors.Is(err, cluster.ErrShuttingDown):
		id, addr := s.node.Leader()
		return s.leaderHint(id, addr)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

// diskFullRetryAfter is the Retry-After (seconds) of a disk_full error: a
// full node checks for space every few seconds.
const diskFullRetryAfter = 5

// leaderHint is the not_leader error naming the leader, or no_leader when
// none other than this node is known.
func (s *Server) leaderHint(id, addr string) error {
	if id == "" {
		return apierr.NoLeader()
	}
	if id == s.node.ID() {
		// This node leads but does not serve (yet, or any more).
		return apierr.NoLeader()
	}
	return apierr.NotLeader(id, addr)
}

// itemError is the code and message of a per-item error (enqueue-many items,
// heartbeat and completion results) for err.
func (s *Server) itemError(err error) (code, msg string) {
	if err == nil {
		return "", ""
	}
	werr := s.apiError(err)
	var ce *connect.Error
	if errors.As(werr, &ce) {
		kind := apierr.Kind(ce)
		if kind == "" {
			kind = ce.Code().String()
		}
		return kind, ce.Message()
	}
	return "", err.Error()
}
