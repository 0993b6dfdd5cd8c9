package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
)

// SnapshotBackend is what a Backend offers for backups (*cluster.Node does):
// SaveSnapshot returns the backup file of the state, RestoreSnapshot
// replaces the state with one read from r. Both run on the leader only.
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
// follower answers not_leader naming the leader, before sending anything;
// the SDK then asks the leader.
func (o *operatorService) SnapshotSave(ctx context.Context, _ *connect.Request[cronoqv1.SnapshotSaveRequest], stream *connect.ServerStream[cronoqv1.SnapshotChunk]) error {
	s := o.s
	sb, err := s.snapshots()
	if err != nil {
		return err
	}
	if err := s.awaitLeader(ctx); err != nil {
		return err
	}
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

// SnapshotRestore receives a backup file and has the leader restore it. A
// follower answers not_leader naming the leader before reading anything.
func (o *operatorService) SnapshotRestore(ctx context.Context, stream *connect.ClientStream[cronoqv1.SnapshotChunk]) (*connect.Response[cronoqv1.SnapshotRestoreResponse], error) {
	s := o.s
	sb, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	if err := s.awaitLeader(ctx); err != nil {
		return nil, err
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
