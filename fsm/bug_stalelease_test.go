//go:build jepsenbug_stalelease

package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// With the stalelease fault the FSM applies a completion or a failure that
// names a lease other than the running attempt's.
func TestBugStaleLeaseFinishApplied(t *testing.T) {
	h := newHarness(t)
	old, cur := lease(1, 1), lease(1, 2)
	h.ok(insert("a", "p", ""), start("a", 1, old))
	h.ok(retry("a", old, 0)) // the first attempt lost its lease
	h.ok(start("a", 2, cur))
	require.Equal(t, cur, h.task("a").Lease)

	// The first attempt's worker completes late, under its old lease.
	h.ok(finish("a", old, StatusSucceeded))
	a := h.task("a")
	require.Equal(t, StatusSucceeded, a.Status)
	require.Equal(t, []byte("out"), a.Output)
	require.Equal(t, uint64(0), a.Lease)
	require.Equal(t, cur, a.LastLease)
}

func TestBugStaleLeaseRetryApplied(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", ""), start("a", 1, lease(1, 5)))
	h.ok(retry("a", lease(1, 4), 0)) // a lease never current for this attempt
	require.Equal(t, StatusQueued, h.task("a").Status)
	// Finishing a task that is not running still needs no lease or a live one.
	h.reject(0, finish("a", lease(1, 5), StatusSucceeded))
}
