package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
)

// requestStreamErrors makes what a client sends on a stream its own fault:
// connect reports a malformed frame of the request stream (a truncated
// prefix, fewer bytes than the prefix promised) as internal or unknown,
// which would tell the client the server failed. They answer
// invalid_argument instead. The clean end of the stream and the other
// codes (a message too large, the call's deadline) pass as they are.
type requestStreamErrors struct{}

func (requestStreamErrors) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (requestStreamErrors) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (requestStreamErrors) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &receiveConn{StreamingHandlerConn: conn, ctx: ctx})
	}
}

// receiveConn is a handler's stream whose Receive errors are classified
// by requestStreamErrors.
type receiveConn struct {
	connect.StreamingHandlerConn
	ctx context.Context
}

func (c *receiveConn) Receive(msg any) error {
	err := c.StreamingHandlerConn.Receive(msg)
	if err == nil || errors.Is(err, io.EOF) || c.ctx.Err() != nil {
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeInternal, connect.CodeUnknown:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reading the request stream: %w", err))
	}
	return err
}
