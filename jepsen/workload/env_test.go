package workload

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/jepsen/history"
)

func TestOutcome(t *testing.T) {
	tests := []struct {
		err  error
		want history.Type
	}{
		{nil, history.OK},
		{fmt.Errorf("submitting task: %w", client.ErrOverloaded), history.Fail},
		{&client.InvalidError{Field: "pool"}, history.Fail},
		// The SDK gave up and no attempt may have run.
		{fmt.Errorf("submitting task: %w (last error: no leader)", context.DeadlineExceeded), history.Fail},
		// The SDK gave up while an attempt may have run.
		{fmt.Errorf("submitting task: %w: %w", context.DeadlineExceeded, client.ErrOutcomeUnknown), history.Info},
		{fmt.Errorf("submitting task: %w", client.ErrOutcomeUnknown), history.Info},
		{errors.New("connection reset"), history.Info},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, Outcome(tc.err), "%v", tc.err)
	}
}

func TestResultNamesTheLease(t *testing.T) {
	require.NotEqual(t, ResultFor("p", 1), ResultFor("p", 2))
	require.Equal(t, ResultFor("p", 7), ResultFor("p", 7))
	require.Contains(t, ResultFor("p", 7), "r-7-")
}

func TestSubOutcome(t *testing.T) {
	require.Equal(t, history.OK, subOutcome(nil))
	require.Equal(t, history.Fail, subOutcome(connect.NewError(connect.CodeInvalidArgument, errors.New("bad cursor"))))
	require.Equal(t, history.Info, subOutcome(connect.NewError(connect.CodeUnavailable, errors.New("not the leader"))))
	require.Equal(t, history.Info, subOutcome(context.DeadlineExceeded))
}
