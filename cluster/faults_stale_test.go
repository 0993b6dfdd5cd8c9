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
func TestApplyStaleInsertRefused(t *testing.T) {
	n := devNode(t)
	eng := waitEngine(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	epoch := n.Epoch()
	require.Positive(t, epoch)

	probe, err := n.ApplyStaleInsert(ctx, "p", "stale", "probe")
	require.NoError(t, err)
	require.Equal(t, epoch-1, probe.Epoch)
	require.ErrorIs(t, probe.Answer, fsm.ErrStaleEpoch)
	_, ok := n.state.Get(probe.ID)
	require.False(t, ok)
	require.Equal(t, epoch, n.state.Epoch())

	subs, _, err := submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: "stale"}}))
	require.NoError(t, err)
	require.False(t, subs[0].Duplicate)
	require.Equal(t, epoch, n.Epoch())
}
