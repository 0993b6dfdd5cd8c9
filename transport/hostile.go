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

// Bounds of the API server against hostile or broken clients, besides the
// read limits of the calls (Config.MaxRequestBytes, and the worker
// streams' messages: two outputs of the engine's maximum plus room).
const (
	// maxHeaderBytes bounds the header of a request (HTTP/1.1), and the
	// header list of a stream (HTTP/2, advertised in the connection's
	// settings). Cronoq's headers are a few hundred bytes.
	maxHeaderBytes = 64 << 10
	// maxConcurrentStreams bounds the calls one HTTP/2 connection has in
	// progress at once: unary calls, long polls, worker and event streams
	// alike (an HTTP/1.1 connection carries one at a time). 250 is the
	// default of Go's HTTP/2 server, written here so that it is documented
	// and does not move with Go releases. Go clients open another
	// connection to the same node when a connection is full.
	maxConcurrentStreams = 250
)
