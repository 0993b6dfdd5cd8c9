//go:build jepsenbug_noepoch

package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// With the noepoch fault a batch from a deposed engine (an older epoch) is
// applied: the fencing that stops a stale leader from writing is gone.
func TestBugNoEpochAppliesStaleBatch(t *testing.T) {
	h := newHarness(t) // epoch 1
	h.ok(insert("a", "p", ""))
	require.Equal(t, uint64(2), h.apply(bumpEntry(t, 2)))

	// The epoch-1 engine grants a lease after epoch 2 began.
	resp := h.apply(batchEntry(t, 1, start("a", 1, lease(1, 1))))
	require.Nil(t, resp, "stale-epoch batch refused: %v", resp)
	a := h.task("a")
	require.Equal(t, StatusRunning, a.Status)
	require.Equal(t, lease(1, 1), a.Lease)
	require.Equal(t, uint64(2), h.s.Epoch())
	require.Equal(t, h.index, h.s.AppliedIndex())

	// A batch claiming a future epoch goes in as well.
	resp = h.apply(batchEntry(t, 7, insert("b", "p", "")))
	require.Nil(t, resp)
	h.task("b")
}
