//go:build jepsenbug_stalelease

package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// With the stale-lease fault, a worker whose lease was lost (and re-granted
// to another worker) completes late and its completion is recorded: the
// core takes it and the FSM applies a Finish naming the old lease.
func TestBugStaleLeaseCompletionAccepted(t *testing.T) {
	r := newReplica(t)
	cfg := Config{Seed: 1, HeartbeatWindow: 5 * time.Second, Backoff: fsm.Backoff{Initial: time.Second, Max: time.Second}}
	c, err := New(cfg, r.epoch, t0)
	require.NoError(t, err)
	now := t0
	c.Submit(now, 1, SubmitOne, []Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}}})
	id := submittedID(r.commit(c, now), 1)

	c.Poll(now, 2, Offer{Worker: "w1", Pool: "p", Slots: 1})
	old := grants(r.commit(c, now))[2][0].Lease

	// w1 stops heartbeating: the lease is lost, the task retried and leased
	// to w2.
	now = now.Add(10 * time.Second)
	c.Tick(now)
	r.commit(c, now)
	now = now.Add(time.Second) // the backoff
	c.Tick(now)
	r.commit(c, now)
	c.Poll(now, 3, Offer{Worker: "w2", Pool: "p", Slots: 1})
	cur := grants(r.commit(c, now))[3][0].Lease
	require.NotEqual(t, old, cur)
	require.Equal(t, ErrStaleLease, c.Heartbeat(now, old))

	// w1 completes under its old lease: accepted, and w2 is told to stop.
	c.Complete(now, 4, old, Outcome{Kind: OutcomeSuccess, Output: []byte("late")})
	o := r.commit(c, now)
	require.NoError(t, replies(o)[4].Err)
	require.Len(t, o.Aborts, 1)
	require.Equal(t, cur, o.Aborts[0].Lease)
	require.Len(t, o.Mutations, 1)
	require.Equal(t, old, o.Mutations[0].Finish.Lease, "the Finish names the stale lease")

	rec, ok := r.state.Get(id)
	require.True(t, ok)
	require.Equal(t, fsm.StatusSucceeded, rec.Status)
	require.Equal(t, []byte("late"), rec.Output)
	require.Equal(t, cur, rec.LastLease)
	// w2's own completion now finds its lease gone.
	c.Complete(now, 5, cur, Outcome{Kind: OutcomeSuccess})
	require.ErrorIs(t, replies(r.commit(c, now))[5].Err, ErrStaleLease)
}

// A lease from before a failover is taken by the new leader's core as well.
func TestBugStaleLeaseAcrossFailover(t *testing.T) {
	r := newReplica(t)
	cfg := Config{Seed: 1, HeartbeatWindow: 5 * time.Second, Backoff: fsm.Backoff{Initial: time.Second, Max: time.Second}}
	c, err := New(cfg, r.epoch, t0)
	require.NoError(t, err)
	now := t0
	c.Submit(now, 1, SubmitOne, []Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}}})
	id := submittedID(r.commit(c, now), 1)
	c.Poll(now, 2, Offer{Worker: "w1", Pool: "p", Slots: 1})
	old := grants(r.commit(c, now))[2][0].Lease

	// A new leader; w1 never heartbeats it, so the attempt is failed and
	// the task waits out its backoff (its lease is gone).
	r.bump(now)
	c, err = Recover(cfg, r.state.View(), r.epoch, now)
	require.NoError(t, err)
	now = now.Add(6 * time.Second)
	c.Tick(now)
	r.commit(c, now)
	rec, _ := r.state.Get(id)
	require.Equal(t, fsm.StatusRetrying, rec.Status)

	c.Complete(now, 3, old, Outcome{Kind: OutcomeSuccess, Output: []byte("late")})
	require.NoError(t, replies(r.commit(c, now))[3].Err)
	rec, _ = r.state.Get(id)
	require.Equal(t, fsm.StatusSucceeded, rec.Status)
}

// replies returns the replies of o, by request.
func replies(o Output) map[ReqID]Reply {
	out := make(map[ReqID]Reply)
	for _, r := range o.Replies {
		out[r.Req] = r
	}
	return out
}

// grants returns the grants of the dispatches of o, by request.
func grants(o Output) map[ReqID][]Grant {
	out := make(map[ReqID][]Grant)
	for _, d := range o.Dispatches {
		out[d.Req] = d.Grants
	}
	return out
}

// submittedID is the id of the task submit req admitted.
func submittedID(o Output, req ReqID) string {
	return replies(o)[req].Value.(*SubmitResult).Tasks[0].ID
}
