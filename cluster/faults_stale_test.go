//go:build jepsenfaults && !jepsenbug_noepoch

package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// A batch stamped with the epoch before the leader's goes through raft and
// the FSM refuses it as stale: nothing of it is applied, and the engine
// goes on committing.
func TestApplyStaleEpochBatchRefused(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("d1")
	cfg.DataDir = ""
	cfg.Dev = true
	n := c.start(cfg)
	eng := waitEngine(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	epoch := n.Epoch()
	require.Positive(t, epoch)

	now := fsm.Nanos(time.Now())
	id := "01J00000000000000000000001"
	ins := fsm.Mutation{Insert: &fsm.Task{ID: id, Pool: "p", Kind: "k", Key: "stale", Status: fsm.StatusQueued, SubmittedAt: now}}
	stale, answer, err := n.ApplyStaleEpochBatch(ctx, []fsm.Mutation{ins})
	require.NoError(t, err)
	require.Equal(t, epoch-1, stale)
	require.ErrorIs(t, answer, fsm.ErrStaleEpoch)
	_, ok := n.state.Get(id)
	require.False(t, ok)
	require.Equal(t, epoch, n.state.Epoch())

	subs, _, err := eng.Submit(ctx, core.SubmitOne, []core.Spec{{Pool: "p", Kind: "k", Key: "stale"}})
	require.NoError(t, err)
	require.False(t, subs[0].Duplicate)
	require.Equal(t, epoch, n.Epoch())
}
