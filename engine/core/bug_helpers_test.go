//go:build jepsenbug_stalelease || jepsenbug_cronrefire

package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// replica is an FSM that the core's outputs are committed to, one batch per
// output, the way the driver does it.
type replica struct {
	t     *testing.T
	state *fsm.State
	index uint64
	epoch uint64
}

func newReplica(t *testing.T) *replica {
	r := &replica{t: t, state: fsm.New()}
	r.bump(t0)
	return r
}

// bump starts the next epoch.
func (r *replica) bump(now time.Time) {
	r.t.Helper()
	r.epoch++
	r.index++
	resp := r.state.Apply(r.index, 1, mustEncode(fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: r.epoch, Leader: "n", Time: fsm.InstantOf(now)})))
	require.Equal(r.t, r.epoch, resp)
}

// commit takes c's output and requires its batch (if any) to apply.
func (r *replica) commit(c *Core, now time.Time) Output {
	r.t.Helper()
	o := c.Ready()
	if len(o.Mutations) > 0 {
		r.index++
		data := mustEncode(fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: r.epoch, Time: fsm.InstantOf(now), Mutations: o.Mutations}))
		require.Nil(r.t, r.state.Apply(r.index, 1, data), "batch refused")
	}
	return o
}
