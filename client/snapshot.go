package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// snapshotChunk is the size of the chunks a backup file is sent in.
const snapshotChunk = 256 << 10

// RestoreResult says what a restore did.
type RestoreResult struct {
	// Of the backup file.
	Index    uint64 // raft index of the snapshot it holds
	Term     uint64
	Created  time.Time
	Size     int64 // bytes
	Checksum []byte
	// Of the state restored.
	Tasks         int
	Schedules     int
	Workflows     int
	Pools         int
	RevokedLeases int // running attempts whose lease the restore revoked
	// Of the cluster after the restore.
	RaftIndex uint64 // raft index of the restored snapshot
	Epoch     uint64 // the leader's epoch once it served again (0: not known)
}

// SnapshotSave streams a backup file of the cluster's state (taken by the
// leader, with every write acknowledged before the call) into w and
// returns how many bytes it wrote. It goes to the leader, following the
// leader hint of a node that is not; a failure once bytes were written to
// w is not retried. The file is not checked here: read it back with the
// fsm package's ReadBackup, as `cronoq operator snapshot save` does.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer) (int64, error) {
	const what = "saving a snapshot"
	var written int64
	started := false
	err := c.stream(ctx, what, func(ctx context.Context, ep *endpoint) error {
		stream, err := ep.operator.SnapshotSave(ctx, connect.NewRequest(&cronoqv1.SnapshotSaveRequest{}))
		if err != nil {
			return err
		}
		defer stream.Close()
		for stream.Receive() {
			started = true
			n, err := w.Write(stream.Msg().GetData())
			written += int64(n)
			if err != nil {
				return &localError{fmt.Errorf("writing the snapshot: %w", err)}
			}
		}
		if err := stream.Err(); err != nil {
			return err
		}
		if !started {
			return &localError{errors.New("the node sent an empty snapshot")}
		}
		return nil
	}, func() bool { return !started })
	return written, err
}

// SnapshotRestore sends the backup file read from r to the leader, which
// replaces the cluster's state with it once it has checked all of it (a
// damaged file is refused with an *InvalidError for the field "snapshot"
// and changes nothing). Leases granted before the restore are refused
// afterwards. r is read from its start again when a node that is not the
// leader refused it.
func (c *Client) SnapshotRestore(ctx context.Context, r io.ReadSeeker) (*RestoreResult, error) {
	const what = "restoring a snapshot"
	var out *cronoqv1.SnapshotRestoreResponse
	err := c.stream(ctx, what, func(ctx context.Context, ep *endpoint) error {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return &localError{fmt.Errorf("reading the snapshot: %w", err)}
		}
		stream := ep.operator.SnapshotRestore(ctx)
		buf := make([]byte, snapshotChunk)
		for {
			n, rerr := io.ReadFull(r, buf)
			if n > 0 {
				// An error here means the node answered already (or the
				// connection broke): CloseAndReceive tells which.
				if err := stream.Send(&cronoqv1.SnapshotChunk{Data: buf[:n]}); err != nil {
					break
				}
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				break
			}
			if rerr != nil {
				_, _ = stream.CloseAndReceive()
				return &localError{fmt.Errorf("reading the snapshot: %w", rerr)}
			}
		}
		resp, err := stream.CloseAndReceive()
		if err != nil {
			return err
		}
		out = resp.Msg
		return nil
	}, func() bool { return true })
	if err != nil {
		return nil, err
	}
	return &RestoreResult{
		Index:         out.GetIndex(),
		Term:          out.GetTerm(),
		Created:       time.Unix(0, out.GetCreatedUnixNano()).UTC(),
		Size:          out.GetSize(),
		Checksum:      out.GetChecksum(),
		Tasks:         int(out.GetTasks()),
		Schedules:     int(out.GetSchedules()),
		Workflows:     int(out.GetWorkflows()),
		Pools:         int(out.GetPools()),
		RevokedLeases: int(out.GetRevokedLeases()),
		RaftIndex:     out.GetRaftIndex(),
		Epoch:         out.GetEpoch(),
	}, nil
}

// localError is a failure on this side of a stream (reading or writing the
// caller's data): never retried.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// stream runs a streaming call that only the leader serves: fn is tried on
// the leader hint (or the next address) while a node refuses it unexecuted
// (not the leader, no leader, shutting down, unreachable) and retry says
// that fn may run again. Other failures are returned.
func (c *Client) stream(ctx context.Context, what string, fn func(ctx context.Context, ep *endpoint) error, retry func() bool) error {
	var lastHint string
	for n := 0; ; n++ {
		addr, err := c.pick(false)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		err = fn(ctx, c.endpointFor(addr))
		if err == nil {
			c.succeeded(addr)
			return nil
		}
		var le *localError
		if errors.As(err, &le) {
			return fmt.Errorf("%s: %w", what, le.err)
		}
		err = decodeError(err)
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		if classify(ctx, err) != notExecuted || !retry() {
			return fmt.Errorf("%s: %w", what, err)
		}
		hint := ""
		var ae *APIError
		if errors.As(err, &ae) && ae.Kind == apierr.KindNotLeader {
			hint = normalizeAddr(ae.LeaderAddr)
		}
		c.failed(addr, hint, !answered(err))
		c.log.Debug("streaming call refused, retrying", "call", what, "addr", addr, "error", err, "leader_hint", hint)
		var wait time.Duration
		if hint == "" || hint == lastHint {
			wait = c.backoff(n + 1)
		}
		lastHint = hint
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, serr, err)
		}
	}
}
