package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
)

// SnapshotBackend is what a Backend offers for backups (*cluster.Node does):
// SaveSnapshot returns the backup file of the state, RestoreSnapshot
// replaces the state with one read from r. Both run on the leader only (a
// follower's server relays the calls to the leader).
type SnapshotBackend interface {
	SaveSnapshot(ctx context.Context) (*cluster.Snapshot, error)
	RestoreSnapshot(ctx context.Context, r io.Reader) (*cluster.RestoreResult, error)
}

var _ SnapshotBackend = (*cluster.Node)(nil)

// snapshotChunkSize is the size of the chunks a backup file travels in.
const snapshotChunkSize = 256 << 10

// snapshots returns the node's SnapshotBackend.
func (s *Server) snapshots() (SnapshotBackend, error) {
	if sb, ok := s.node.(SnapshotBackend); ok {
		return sb, nil
	}
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this node does not take snapshots"))
}

// SnapshotSave streams a backup file of the state from the leader. A
// follower relays it from the leader; until the first chunk is relayed, a
// leader that does not take the call is looked for again, as for a
// forwarded read.
func (o *operatorService) SnapshotSave(ctx context.Context, req *connect.Request[cronoqv1.SnapshotSaveRequest], stream *connect.ServerStream[cronoqv1.SnapshotChunk]) error {
	s := o.s
	sb, err := s.snapshots()
	if err != nil {
		return err
	}
	hold := time.NewTimer(s.cfg.HoldTimeout)
	defer hold.Stop()
	var last error
	for {
		t, err := s.leaderTarget(ctx, req.Header(), hold.C, last)
		if err != nil {
			return err
		}
		if t.local {
			return s.saveSnapshot(ctx, sb, stream)
		}
		s.m.Forwarded(req.Spec().Procedure)
		sent, err := s.relaySnapshot(ctx, req, stream, t)
		if err == nil || sent {
			return err
		}
		if ctx.Err() != nil {
			return s.apiError(ctx.Err())
		}
		final, again := forwardOutcome(readCall, t.id, t.addr, err)
		if final != nil {
			return final
		}
		s.log.Debug("relayed snapshot save not taken, routing again", "leader", t.id, "error", err)
		last = again
		if !pause(ctx, hold.C, s.baseCtx.Done()) {
			if s.stopping() {
				return apierr.ShuttingDown()
			}
			return again
		}
	}
}

// saveSnapshot streams a backup file of this node's state (it leads).
func (s *Server) saveSnapshot(ctx context.Context, sb SnapshotBackend, stream *connect.ServerStream[cronoqv1.SnapshotChunk]) error {
	snap, err := sb.SaveSnapshot(ctx)
	if err != nil {
		return s.apiError(err)
	}
	defer snap.Close()
	buf := make([]byte, snapshotChunkSize)
	for {
		n, rerr := io.ReadFull(snap, buf)
		if n > 0 {
			if err := stream.Send(&cronoqv1.SnapshotChunk{Data: buf[:n]}); err != nil {
				return err // the client went away
			}
		}
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			return nil
		case rerr != nil:
			s.log.Error("sending a snapshot failed", "index", snap.Index, "error", rerr)
			return connect.NewError(connect.CodeInternal, fmt.Errorf("reading the snapshot: %w", rerr))
		}
	}
}

// relaySnapshot relays a backup file from the leader t. sent reports
// whether a chunk reached the caller (then err is the call's answer).
func (s *Server) relaySnapshot(ctx context.Context, req *connect.Request[cronoqv1.SnapshotSaveRequest], stream *connect.ServerStream[cronoqv1.SnapshotChunk], t target) (sent bool, err error) {
	fwd := connect.NewRequest(req.Msg)
	s.forwardHeaders(fwd.Header(), req.Header())
	up, err := s.fwd.endpoint(t.addr).operator.SnapshotSave(ctx, fwd)
	if err != nil {
		return false, err
	}
	defer func() { _ = up.Close() }()
	for up.Receive() {
		if !sent {
			stream.ResponseHeader().Set(apierr.HeaderLeader, t.id)
			stream.ResponseHeader().Set(apierr.HeaderLeaderAddr, t.addr)
		}
		if err := stream.Send(up.Msg()); err != nil {
			return true, err // the client went away
		}
		sent = true
	}
	switch err := up.Err(); {
	case err == nil:
		return true, nil
	case !sent:
		return false, err
	case connect.IsWireError(err):
		return true, apierr.Relay(err)
	default:
		return true, connect.NewError(connect.CodeUnavailable,
			fmt.Errorf("snapshot: lost the connection to the leader %s at %s: %w", t.id, t.addr, err))
	}
}

// SnapshotRestore receives a backup file and has the leader restore it. A
// follower relays the file to the leader as it reads it: as for a
// forwarded write, a relay that failed once the leader may have got the
// file is answered outcome_unknown.
func (o *operatorService) SnapshotRestore(ctx context.Context, stream *connect.ClientStream[cronoqv1.SnapshotChunk]) (*connect.Response[cronoqv1.SnapshotRestoreResponse], error) {
	s := o.s
	sb, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	hold := time.NewTimer(s.cfg.HoldTimeout)
	defer hold.Stop()
	t, err := s.leaderTarget(ctx, stream.RequestHeader(), hold.C, nil)
	if err != nil {
		return nil, err
	}
	if !t.local {
		s.m.Forwarded(stream.Spec().Procedure)
		return s.relayRestore(ctx, stream, t)
	}
	res, err := sb.RestoreSnapshot(ctx, &chunkReader{stream: stream})
	if err != nil {
		return nil, s.apiError(err)
	}
	return connect.NewResponse(&cronoqv1.SnapshotRestoreResponse{
		Index:           res.Index,
		Term:            res.Term,
		CreatedUnixNano: res.Created.UnixNano(),
		Size:            res.Size,
		Checksum:        res.Checksum[:],
		Tasks:           uint64(res.Tasks),
		Schedules:       uint64(res.Schedules),
		Workflows:       uint64(res.Workflows),
		Pools:           uint64(res.Pools),
		RevokedLeases:   uint64(res.Revoked),
		RaftIndex:       res.RaftIndex,
		Epoch:           res.Epoch,
	}), nil
}

// relayRestore relays a backup file to the leader t and its answer back.
func (s *Server) relayRestore(ctx context.Context, stream *connect.ClientStream[cronoqv1.SnapshotChunk], t target) (*connect.Response[cronoqv1.SnapshotRestoreResponse], error) {
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := s.fwd.endpoint(t.addr).operator.SnapshotRestore(uctx)
	s.forwardHeaders(up.RequestHeader(), stream.RequestHeader())
	for stream.Receive() {
		if err := up.Send(stream.Msg()); err != nil {
			break // the leader answered already: CloseAndReceive has it
		}
	}
	if err := stream.Err(); err != nil {
		// The caller's side failed: the leader must not restore a
		// truncated file (it checks the trailer, and the cancelled call
		// never ends cleanly).
		cancel()
		_, _ = up.CloseAndReceive()
		return nil, err
	}
	resp, err := up.CloseAndReceive()
	if err != nil {
		if ctx.Err() != nil {
			return nil, s.apiError(ctx.Err())
		}
		final, again := forwardOutcome(writeCall, t.id, t.addr, err)
		if final != nil {
			return nil, final
		}
		return nil, again
	}
	out := connect.NewResponse(resp.Msg)
	out.Header().Set(apierr.HeaderLeader, t.id)
	out.Header().Set(apierr.HeaderLeaderAddr, t.addr)
	return out, nil
}

// chunkReader reads the bytes of a stream of chunks.
type chunkReader struct {
	stream *connect.ClientStream[cronoqv1.SnapshotChunk]
	buf    []byte
	err    error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if !r.stream.Receive() {
			r.err = r.stream.Err()
			if r.err == nil {
				r.err = io.EOF
			}
			continue
		}
		r.buf = r.stream.Msg().GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
