//go:build jepsenbug_depdone

package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// With the dependency-done fault, a step under policy succeeded whose
// dependency failed is released and dispatched instead of ending
// cancelled, and the FSM records it so.
func TestBugDepDoneReleasesDependentOfFailedStep(t *testing.T) {
	state := fsm.New()
	index := uint64(1)
	require.Equal(t, uint64(1), state.Apply(index, 1, mustEncode(fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: 1, Leader: "n", Time: fsm.InstantOf(t0)}))))
	commit := func(c *Core) Output {
		t.Helper()
		o := c.Ready()
		if len(o.Mutations) > 0 {
			index++
			data := mustEncode(fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: 1, Time: fsm.InstantOf(t0), Mutations: o.Mutations}))
			require.Nil(t, state.Apply(index, 1, data), "batch refused")
		}
		return o
	}
	reply := func(o Output, req ReqID) Reply {
		t.Helper()
		for _, r := range o.Replies {
			if r.Req == req {
				return r
			}
		}
		t.Fatalf("no reply to request %d", req)
		return Reply{}
	}
	dispatched := func(o Output, req ReqID) []Grant {
		for _, d := range o.Dispatches {
			if d.Req == req {
				return d.Grants
			}
		}
		return nil
	}

	c, err := New(Config{Seed: 1}, 1, t0)
	require.NoError(t, err)
	tpl := fsm.Template{Pool: "p", Kind: "k"}
	c.SubmitWorkflow(t0, 1, WorkflowSpec{Name: "wf", Steps: []StepSpec{
		{Name: "first", Spec: Spec{Template: tpl}},
		{Name: "second", Spec: Spec{Template: tpl}, DependsOnSteps: []string{"first"}},
	}})
	r := reply(commit(c), 1)
	require.NoError(t, r.Err)
	sub := r.Value.(*WorkflowSubmitted)
	require.Len(t, sub.Tasks, 2)
	first, second := sub.Tasks[0].ID, sub.Tasks[1].ID

	c.Poll(t0, 2, Offer{Worker: "w", Pool: "p", Slots: 1})
	g := dispatched(commit(c), 2)
	require.Len(t, g, 1)
	require.Equal(t, first, g[0].ID)

	// The first step fails for good: its dependent is released, not
	// cancelled, and is granted to the next poll.
	c.Complete(t0, 3, g[0].Lease, Outcome{Kind: OutcomePermanent, Message: "boom"})
	o := commit(c)
	require.NoError(t, reply(o, 3).Err)
	var unblocked bool
	for _, m := range o.Mutations {
		if m.Finish != nil {
			require.NotEqual(t, second, m.Finish.ID, "the dependent must not end with its dependency")
		}
		if m.Unblock != nil && m.Unblock.ID == second {
			unblocked = true
		}
	}
	require.True(t, unblocked, "the dependent of a failed step is released")
	rec, ok := state.Get(first)
	require.True(t, ok)
	require.Equal(t, fsm.StatusFailed, rec.Status)
	rec, ok = state.Get(second)
	require.True(t, ok)
	require.NotEqual(t, fsm.StatusCancelled, rec.Status)
	require.Equal(t, fsm.DepSucceeded, rec.DepPolicy())

	c.Poll(t0, 4, Offer{Worker: "w", Pool: "p", Slots: 1})
	g = dispatched(commit(c), 4)
	require.Len(t, g, 1)
	require.Equal(t, second, g[0].ID)
	rec, _ = state.Get(second)
	require.Equal(t, fsm.StatusRunning, rec.Status)
}
