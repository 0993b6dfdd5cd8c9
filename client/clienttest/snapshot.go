package clienttest

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// errNoSnapshots answers the backup calls: the fake cluster has no state to
// save or restore (the real cluster's tests cover them).
var errNoSnapshots = connect.NewError(connect.CodeUnimplemented, errors.New("the fake cluster takes no snapshots"))

func (o *operatorService) SnapshotSave(context.Context, *connect.Request[cronoqv1.SnapshotSaveRequest], *connect.ServerStream[cronoqv1.SnapshotChunk]) error {
	return errNoSnapshots
}

func (o *operatorService) SnapshotRestore(context.Context, *connect.ClientStream[cronoqv1.SnapshotChunk]) (*connect.Response[cronoqv1.SnapshotRestoreResponse], error) {
	return nil, errNoSnapshots
}
