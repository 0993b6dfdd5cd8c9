package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// revokeLog is a state that every output of a core is committed to, one
// batch per output.
type revokeLog struct {
	t     *testing.T
	state *fsm.State
	index uint64
	epoch uint64
}

func (l *revokeLog) bump(now time.Time) {
	l.t.Helper()
	l.epoch++
	l.index++
	resp := l.state.Apply(l.index, 1, mustEncode(fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: l.epoch, Leader: "n", Time: fsm.InstantOf(now)})))
	require.Equal(l.t, l.epoch, resp)
}

func (l *revokeLog) commit(c *Core, now time.Time) Output {
	l.t.Helper()
	o := c.Ready()
	if len(o.Mutations) > 0 {
		l.index++
		data := mustEncode(fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: l.epoch, Time: fsm.InstantOf(now), Mutations: o.Mutations}))
		require.Nil(l.t, l.state.Apply(l.index, 1, data), "batch refused")
	}
	return o
}

// RevokeLeases ends every running attempt at once: retried while attempts
// remain, failed otherwise; the workers are told to stop, and the old leases
// are refused from then on, by the core and, through the committed state,
// by the core of any later leader.
func TestRevokeLeases(t *testing.T) {
	l := &revokeLog{t: t, state: fsm.New()}
	l.bump(t0)
	cfg := Config{Seed: 1, HeartbeatWindow: 5 * time.Second, Backoff: fsm.Backoff{Initial: time.Second, Max: time.Second}}
	c, err := New(cfg, l.epoch, t0)
	require.NoError(t, err)
	now := t0
	c.Submit(now, 1, SubmitOne, []Spec{{Template: fsm.Template{Pool: "p", Kind: "k", MaxAttempts: 3}}})
	c.Submit(now, 2, SubmitOne, []Spec{{Template: fsm.Template{Pool: "p", Kind: "k", MaxAttempts: 1}}})
	c.Submit(now, 3, SubmitOne, []Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}}})
	l.commit(c, now)
	c.Poll(now, 4, Offer{Worker: "w1", Pool: "p", Slots: 2})
	o := l.commit(c, now)
	var leases []uint64
	var leased []string
	for _, d := range o.Dispatches {
		for _, g := range d.Grants {
			leases = append(leases, g.Lease)
			leased = append(leased, g.ID)
		}
	}
	require.Len(t, leases, 2)

	// A core rebuilt from the state, as a restore does, revokes them.
	l.bump(now)
	c, err = Recover(cfg, l.state.View(), l.epoch, now)
	require.NoError(t, err)
	require.Equal(t, 2, c.RevokeLeases("lease revoked by a restore"))
	o = l.commit(c, now)
	require.Len(t, o.Aborts, 2)
	for _, lease := range leases {
		require.ErrorIs(t, c.Heartbeat(now, lease), ErrStaleLease)
		c.Complete(now, 10, lease, Outcome{Kind: OutcomeSuccess})
		out := l.commit(c, now)
		require.Len(t, out.Replies, 1)
		require.ErrorIs(t, out.Replies[0].Err, ErrStaleLease)
		require.Empty(t, out.Mutations)
	}
	for _, id := range leased {
		rec, ok := l.state.Get(id)
		require.True(t, ok)
		switch rec.MaxAttempts {
		case 1:
			require.Equal(t, fsm.StatusFailed, rec.Status, "task %s", id)
		default:
			require.Contains(t, []fsm.Status{fsm.StatusRetrying, fsm.StatusQueued}, rec.Status, "task %s", id)
		}
		require.Contains(t, rec.Error, "lease revoked by a restore")
		require.Zero(t, rec.Lease)
	}
	require.Zero(t, c.RevokeLeases("again"), "nothing runs any more")

	// A later leader's core does not know the leases either.
	l.bump(now)
	c, err = Recover(cfg, l.state.View(), l.epoch, now)
	require.NoError(t, err)
	for _, lease := range leases {
		require.ErrorIs(t, c.Heartbeat(now, lease), ErrStaleLease)
	}
}
