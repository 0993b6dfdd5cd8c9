package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A call to addresses that refuse connections, or do not resolve, fails
// within the fail-fast period, naming each address and why, instead of
// retrying until its ctx ends.
func TestFailFastWhenNoAddressAccepts(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t)
	c := newTestClient(t, []string{dead, "nonexistent.invalid:1"}, WithFailFast(500*time.Millisecond))
	start := time.Now()
	_, err := c.Submit(testCtx(t), TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
	require.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, err, ErrUnreachable)
	require.NotErrorIs(t, err, ErrOutcomeUnknown)
	var ue *UnreachableError
	require.True(t, errors.As(err, &ue))
	require.Equal(t, []string{dead, "nonexistent.invalid:1"}, ue.Addrs)
	require.GreaterOrEqual(t, ue.For, 500*time.Millisecond)
	require.Contains(t, err.Error(), dead+": connection refused")
	require.Contains(t, err.Error(), "nonexistent.invalid:1: cannot resolve host nonexistent.invalid")

	// A unary read fails the same way.
	c = newTestClient(t, []string{dead}, WithFailFast(300*time.Millisecond))
	start = time.Now()
	_, err = c.Health(testCtx(t))
	require.ErrorIs(t, err, ErrUnreachable)
	require.Less(t, time.Since(start), 2*time.Second)
}

// One address that answers is enough: the call goes on to it.
func TestFailFastNotWhileANodeAnswers(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, []string{deadAddr(t), fc.Node(0).Addr()}, WithFailFast(50*time.Millisecond))
	for range 3 {
		_, err := c.Submit(testCtx(t), TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
		require.NoError(t, err)
	}
}

// Without fail-fast, a call that cannot connect keeps trying until its ctx
// ends, and the notice says why once the outage has lasted long enough.
func TestUnreachableNoticeKeepsTrying(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t)
	var notices atomic.Int32
	var first atomic.Pointer[UnreachableError]
	c := newTestClient(t, []string{dead}, WithUnreachableNotice(200*time.Millisecond, 0, func(ue *UnreachableError) {
		first.CompareAndSwap(nil, ue)
		notices.Add(1)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Wait(ctx, "some-task")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrUnreachable)
	require.GreaterOrEqual(t, time.Since(start), 1400*time.Millisecond)
	require.Equal(t, int32(1), notices.Load(), "one notice per outage without repeat")
	require.Contains(t, first.Load().Error(), dead+": connection refused")
	require.GreaterOrEqual(t, first.Load().For, 200*time.Millisecond)
}
