package enginetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronoq/cronoq/engine/enginetest"
	"github.com/cronoq/cronoq/fsm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func batch(t *testing.T, epoch uint64, kind string) []byte {
	t.Helper()
	data, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: epoch, Time: 1, Mutations: []fsm.Mutation{{Insert: &fsm.Task{
		ID: "01JQJ79BZB00000080000000" + kind, Template: fsm.Template{Pool: "p", Kind: kind}, Status: fsm.StatusQueued, SubmittedAt: 1, UpdatedAt: 1,
	}}}})
	require.NoError(t, err)
	return data
}

func TestAppliesInOrder(t *testing.T) {
	ctx := context.Background()
	state := fsm.New()
	log := enginetest.New(state)
	defer log.Close()
	require.NoError(t, log.BumpEpoch(ctx, 1, "n1"))

	log.Pause()
	var ents []*enginetest.Entry
	for _, k := range []string{"01", "02", "03"} {
		ent, err := log.AppendEntry(batch(t, 1, k))
		require.NoError(t, err)
		ents = append(ents, ent)
	}
	select {
	case <-ents[0].Done():
		t.Fatal("applied while paused")
	default:
	}
	log.Allow(1)
	require.NoError(t, ents[0].Wait(ctx))
	require.EqualValues(t, 2, ents[0].Index())
	require.EqualValues(t, 2, state.AppliedIndex())
	log.Resume()
	require.NoError(t, ents[2].Wait(ctx))
	require.EqualValues(t, 3, ents[1].Index())
	require.EqualValues(t, 4, ents[2].Index())
	require.Equal(t, 4, log.Appended())
	require.Equal(t, 4, log.Calls())
	require.Len(t, log.Entries(), 4)
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	state := fsm.New()
	log := enginetest.New(state)
	defer log.Close()
	require.NoError(t, log.BumpEpoch(ctx, 1, "n1"))

	log.FailAppend(2, enginetest.ErrNotLeader)
	_, err := log.Append(batch(t, 1, "01"))
	require.ErrorIs(t, err, enginetest.ErrNotLeader)

	log.FailWait(3, enginetest.ErrLeadershipLost, false)
	log.FailWait(4, enginetest.ErrLeadershipLost, true)
	dropped, err := log.Append(batch(t, 1, "02"))
	require.NoError(t, err)
	kept, err := log.Append(batch(t, 1, "03"))
	require.NoError(t, err)
	require.ErrorIs(t, dropped.Wait(ctx), enginetest.ErrLeadershipLost)
	require.ErrorIs(t, kept.Wait(ctx), enginetest.ErrLeadershipLost)
	_, ok := state.Get("01JQJ79BZB0000008000000002")
	require.False(t, ok, "dropped")
	_, ok = state.Get("01JQJ79BZB0000008000000003")
	require.True(t, ok, "applied all the same")

	stale, err := log.Append(batch(t, 0, "04"))
	require.NoError(t, err)
	require.ErrorIs(t, stale.Wait(ctx), fsm.ErrStaleEpoch, "the FSM's error response")
}

func TestDelayAndClose(t *testing.T) {
	ctx := context.Background()
	state := fsm.New()
	log := enginetest.New(state)
	require.NoError(t, log.BumpEpoch(ctx, 1, "n1"))
	log.SetDelay(time.Millisecond)
	ent, err := log.Append(batch(t, 1, "01"))
	require.NoError(t, err)
	require.NoError(t, ent.Wait(ctx))

	log.Pause()
	pending, err := log.Append(batch(t, 1, "02"))
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	require.ErrorIs(t, pending.Wait(wctx), context.DeadlineExceeded)
	log.Close()
	log.Close()
	require.ErrorIs(t, pending.Wait(ctx), enginetest.ErrClosed)
	_, err = log.Append(batch(t, 1, "03"))
	require.ErrorIs(t, err, enginetest.ErrClosed)
}
