package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// observed collects what a commit observer is told. It takes no lock: the
// engine tells it before it answers the call, and the test reads it after
// the answer (the race detector checks that order).
type observed map[int]engine.EntryTrace

func (o observed) ctx(ctx context.Context) context.Context {
	return engine.WithCommitObserver(ctx, func(i int, ent engine.EntryTrace) { o[i] = ent })
}

// requireEntry checks that ent describes an entry applied at or before the
// state's applied index, with its times in order and after start.
func requireEntry(t *testing.T, ent engine.EntryTrace, state *fsm.State, start time.Time) {
	t.Helper()
	require.Positive(t, ent.Seq)
	require.Greater(t, ent.Index, uint64(1), "after the epoch bump")
	require.LessOrEqual(t, ent.Index, state.AppliedIndex())
	require.Positive(t, ent.Mutations)
	require.Positive(t, ent.Bytes)
	require.False(t, ent.Queued.Before(start), "queued %v before the call %v", ent.Queued, start)
	require.False(t, ent.Appended.Before(ent.Queued), "appended before queued")
	require.False(t, ent.Applied.Before(ent.Appended), "applied before appended")
}

// TestCommitObserver: a call whose context carries an observer is told of
// the entry that made its answer durable, before the answer; in a
// CompleteMany, each completion under its index. A call whose answer
// needed no entry of its own (a duplicate submit, a stale completion) is
// told nothing, and neither is a call without an observer.
func TestCommitObserver(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	start := time.Now()

	sub := observed{}
	keyed := spec("k")
	keyed.Key = "once"
	res, err := h.eng.Submit(sub.ctx(h.ctx), core.SubmitOne, []core.Spec{keyed, spec("k")})
	require.Error(t, err, "SubmitOne takes one spec")
	require.Nil(t, res)
	require.Empty(t, sub, "a refused call")

	res, err = h.eng.Submit(sub.ctx(h.ctx), core.SubmitBatch, []core.Spec{keyed, spec("k")})
	require.NoError(t, err)
	require.Len(t, sub, 1)
	requireEntry(t, sub[0], h.state, start)
	require.GreaterOrEqual(t, sub[0].Mutations, 2, "both tasks")
	first := sub[0]

	dup := observed{}
	again, err := h.eng.Submit(dup.ctx(h.ctx), core.SubmitOne, []core.Spec{keyed})
	require.NoError(t, err)
	require.True(t, again.Tasks[0].Duplicate)
	require.Equal(t, res.Tasks[0].ID, again.Tasks[0].ID)
	require.Empty(t, dup, "a duplicate commits nothing")

	poll := observed{}
	grants, err := h.eng.Poll(poll.ctx(h.ctx), core.Offer{Worker: "w", Pool: "p", Slots: 2})
	require.NoError(t, err)
	require.Len(t, grants, 2)
	require.Len(t, poll, 1)
	requireEntry(t, poll[0], h.state, start)
	require.Greater(t, poll[0].Seq, first.Seq)
	require.Greater(t, poll[0].Index, first.Index)

	comp := observed{}
	errs := h.eng.CompleteMany(comp.ctx(h.ctx), []engine.Completion{
		{Lease: grants[0].Lease, Outcome: core.Outcome{Kind: core.OutcomeSuccess}},
		{Lease: 999, Outcome: core.Outcome{Kind: core.OutcomeSuccess}},
		{Lease: grants[1].Lease, Outcome: core.Outcome{Kind: core.OutcomePermanent, Message: "no"}},
	})
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], core.ErrStaleLease)
	require.NoError(t, errs[2])
	require.Len(t, comp, 2, "the stale completion committed nothing: %v", comp)
	requireEntry(t, comp[0], h.state, start)
	requireEntry(t, comp[2], h.state, start)
	require.Greater(t, comp[0].Seq, poll[0].Seq)

	// Without an observer nothing is told (and nothing breaks).
	_, err = h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("k")})
	require.NoError(t, err)
}
