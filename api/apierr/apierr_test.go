package apierr_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type encoded struct {
	name       string
	err        *connect.Error
	code       connect.Code
	kind       string
	leaderID   string
	leaderAddr string
	field      string
	reason     string
}

func cases() []encoded {
	return []encoded{
		{name: "not leader", err: apierr.NotLeader("n2", "127.0.0.2:8650"), code: connect.CodeUnavailable,
			kind: apierr.KindNotLeader, leaderID: "n2", leaderAddr: "127.0.0.2:8650"},
		{name: "not leader unknown", err: apierr.NotLeader("", ""), code: connect.CodeUnavailable, kind: apierr.KindNotLeader},
		{name: "no leader", err: apierr.NoLeader(), code: connect.CodeUnavailable, kind: apierr.KindNoLeader},
		{name: "shutting down", err: apierr.ShuttingDown(), code: connect.CodeUnavailable, kind: apierr.KindShuttingDown},
		{name: "overloaded", err: apierr.Overloaded("pool p is full"), code: connect.CodeResourceExhausted, kind: apierr.KindOverloaded},
		{name: "invalid", err: apierr.Invalid("run_at", "must be after 1970"), code: connect.CodeInvalidArgument,
			kind: apierr.KindInvalid, field: "run_at", reason: "must be after 1970"},
		{name: "not found", err: apierr.NotFound("no task T1"), code: connect.CodeNotFound, kind: apierr.KindNotFound},
		{name: "stale lease", err: apierr.StaleLease("lease 5 is not current"), code: connect.CodeFailedPrecondition, kind: apierr.KindStaleLease},
		{name: "outcome unknown", err: apierr.OutcomeUnknown("leadership lost"), code: connect.CodeUnknown, kind: apierr.KindOutcomeUnknown},
		{name: "disk full", err: apierr.DiskFull("disk full: /d: no space left on device", 5), code: connect.CodeResourceExhausted, kind: apierr.KindDiskFull},
		{name: "not retryable", err: apierr.NotRetryable("task T1 is running"), code: connect.CodeFailedPrecondition, kind: apierr.KindNotRetryable},
	}
}

func check(t *testing.T, tc encoded, err error) {
	t.Helper()
	require.Equal(t, tc.code, connect.CodeOf(err))
	require.Equal(t, tc.kind, apierr.Kind(err))
	id, addr := apierr.Leader(err)
	require.Equal(t, tc.leaderID, id)
	require.Equal(t, tc.leaderAddr, addr)
	if tc.kind == apierr.KindInvalid {
		field, reason := apierr.Field(err)
		require.Equal(t, tc.field, field)
		require.Equal(t, tc.reason, reason)
	}
}

func TestEncodeDecodeLocal(t *testing.T) {
	t.Parallel()
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			check(t, tc, tc.err)
			check(t, tc, wrap(tc.err))
		})
	}
}

func wrap(err error) error { return errors.Join(errors.New("context"), err) }

// failing answers every call with the error queued for it.
type failing struct {
	cronoqv1connect.UnimplementedOperatorServiceHandler
	err error
}

func (f *failing) Health(context.Context, *connect.Request[cronoqv1.HealthRequest]) (*connect.Response[cronoqv1.HealthResponse], error) {
	return nil, f.err
}

func serve(t *testing.T, h *failing) cronoqv1connect.OperatorServiceClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(cronoqv1connect.NewOperatorServiceHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return cronoqv1connect.NewOperatorServiceClient(srv.Client(), srv.URL)
}

func TestEncodeDecodeOverTheWire(t *testing.T) {
	t.Parallel()
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			h := &failing{err: tc.err}
			cl := serve(t, h)
			_, err := cl.Health(context.Background(), connect.NewRequest(&cronoqv1.HealthRequest{}))
			require.Error(t, err)
			require.True(t, connect.IsWireError(err))
			check(t, tc, err)

			// A node relaying the error (forwarding) keeps its detail.
			relayed := &failing{err: apierr.Relay(err)}
			_, err2 := serve(t, relayed).Health(context.Background(), connect.NewRequest(&cronoqv1.HealthRequest{}))
			check(t, tc, err2)

			// Returning the wire error as is loses the header: that is why
			// Relay exists.
			if tc.kind != apierr.KindOverloaded && tc.kind != apierr.KindDiskFull && tc.kind != apierr.KindInvalid && tc.kind != apierr.KindNotFound {
				raw := &failing{err: err}
				_, err3 := serve(t, raw).Health(context.Background(), connect.NewRequest(&cronoqv1.HealthRequest{}))
				require.Equal(t, tc.code, connect.CodeOf(err3))
				require.Equal(t, "", apierr.Kind(err3))
			}
		})
	}
}

func TestKindFromCodeAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code connect.Code
		kind string
	}{
		{connect.CodeResourceExhausted, apierr.KindOverloaded},
		{connect.CodeInvalidArgument, apierr.KindInvalid},
		{connect.CodeNotFound, apierr.KindNotFound},
		{connect.CodeUnavailable, ""},
		{connect.CodeInternal, ""},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			h := &failing{err: connect.NewError(tc.code, errors.New("invalid pool: unknown"))}
			_, err := serve(t, h).Health(context.Background(), connect.NewRequest(&cronoqv1.HealthRequest{}))
			require.Equal(t, tc.kind, apierr.Kind(err))
		})
	}
	// Errors made by the client itself (no server answer) carry no kind.
	require.Equal(t, "", apierr.Kind(connect.NewError(connect.CodeInvalidArgument, errors.New("x"))))
	require.Equal(t, "", apierr.Kind(errors.New("plain")))
	require.Equal(t, "", apierr.Kind(nil))
}

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		msg, field, reason string
		ok                 bool
	}{
		{"invalid kind: must not be empty", "kind", "must not be empty", true},
		{"invalid payload: 2 MiB exceeds 1 MiB: refused", "payload", "2 MiB exceeds 1 MiB: refused", true},
		{apierr.InvalidMessage("catch_up_limit", "too big"), "catch_up_limit", "too big", true},
		{"invalid: nothing", "", "", false},
		{"invalid two words: x", "", "", false},
		{"bad kind: x", "", "", false},
		{"invalid kind", "", "", false},
	} {
		field, reason, ok := apierr.ParseInvalid(tc.msg)
		require.Equal(t, tc.ok, ok, tc.msg)
		require.Equal(t, tc.field, field, tc.msg)
		require.Equal(t, tc.reason, reason, tc.msg)
	}
}

// Retry-After survives a relay through a forwarding node.
func TestRetryAfterRelayed(t *testing.T) {
	t.Parallel()
	cl := serve(t, &failing{err: apierr.DiskFull("disk full: /d: no space left on device", 5)})
	_, err := cl.Health(context.Background(), connect.NewRequest(&cronoqv1.HealthRequest{}))
	require.Error(t, err)
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "5", ce.Meta().Get(apierr.HeaderRetryAfter))

	_, err = serve(t, &failing{err: apierr.Relay(err)}).Health(context.Background(), connect.NewRequest(&cronoqv1.HealthRequest{}))
	require.ErrorAs(t, err, &ce)
	require.Equal(t, apierr.KindDiskFull, apierr.Kind(err))
	require.Equal(t, "5", ce.Meta().Get(apierr.HeaderRetryAfter))
	require.Equal(t, "disk full: /d: no space left on device", ce.Message())
}

func TestCode(t *testing.T) {
	t.Parallel()
	require.Equal(t, connect.CodeUnknown, apierr.Code("something_new"))
	require.Equal(t, connect.CodeFailedPrecondition, apierr.Code(apierr.KindStaleLease))
}
