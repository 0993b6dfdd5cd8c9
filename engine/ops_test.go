package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// TestCancelMatchingInBatches cancels seven matching tasks three at a
// time: three commits, each holding only its batch's ends, and the count
// of every task cancelled; the tasks of other kinds and pools stay.
func TestCancelMatchingInBatches(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	var specs []core.Spec
	for i := 0; i < 7; i++ {
		specs = append(specs, spec("doomed"))
	}
	specs = append(specs, spec("kept"), core.Spec{Template: fsm.Template{Pool: "other", Kind: "doomed"}})
	subs, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitBatch, specs))
	require.NoError(t, err)
	before := len(h.batches())

	f := core.TaskFilter{Pool: "p", Statuses: []fsm.Status{fsm.StatusQueued}, Kinds: []string{"doomed"}}
	n, err := h.eng.CancelMatching(h.ctx, f, 3)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	after := h.batches()[before:]
	require.Len(t, after, 3)
	for i, b := range after {
		require.Len(t, b.Mutations, []int{3, 3, 1}[i])
		for _, m := range b.Mutations {
			require.NotNil(t, m.Finish)
			require.Equal(t, fsm.StatusCancelled, m.Finish.Status)
		}
	}
	for i, s := range subs {
		task, ok := h.state.Get(s.ID)
		require.True(t, ok)
		want := fsm.StatusCancelled
		if i >= 7 {
			want = fsm.StatusQueued
		}
		require.Equal(t, want, task.Status, "task %d", i)
	}

	// Nothing matches any more; a bad filter is refused before anything.
	n, err = h.eng.CancelMatching(h.ctx, f, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = h.eng.CancelMatching(h.ctx, core.TaskFilter{Pool: "p", Statuses: []fsm.Status{fsm.StatusFailed}}, 0)
	var ie *core.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "statuses", ie.Field)

	// A retry puts one back, durably, and it can be cancelled again.
	r, err := h.eng.Retry(h.ctx, core.TaskRef{ID: subs[0].ID})
	require.NoError(t, err)
	require.Equal(t, subs[0].ID, r.ID)
	task, _ := h.state.Get(subs[0].ID)
	require.Equal(t, fsm.StatusQueued, task.Status)
	_, err = h.eng.Retry(h.ctx, core.TaskRef{ID: subs[0].ID})
	require.ErrorIs(t, err, core.ErrNotRetryable)
	n, err = h.eng.CancelMatching(h.ctx, f, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
