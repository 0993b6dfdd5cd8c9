//go:build jepsenbug_laneoverlap

package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// With the lane-overlap fault, the second task of a lane is dispatched
// while the first runs.
func TestBugLaneOverlapDispatchesSecondTask(t *testing.T) {
	c, err := New(Config{Seed: 1}, 1, t0)
	require.NoError(t, err)
	spec := Spec{Template: fsm.Template{Pool: "p", Kind: "k", Keys: &fsm.Keys{Ordering: "lane"}}}
	c.Submit(t0, 1, SubmitBatch, []Spec{spec, spec})
	c.Ready()
	c.Poll(t0, 2, Offer{Worker: "w", Pool: "p", Slots: 1})
	require.Len(t, c.Ready().Dispatches[0].Grants, 1)
	c.Poll(t0, 3, Offer{Worker: "w", Pool: "p", Slots: 1})
	o := c.Ready()
	require.Len(t, o.Dispatches, 1, "the second task of the lane is dispatched while the first runs")
	require.Len(t, o.Dispatches[0].Grants, 1)
}
