//go:build jepsenfaults

package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// clockReason returns n's health reason about the clock ("" when none).
func clockReason(n *cluster.Node) string {
	for _, r := range n.Health().Reasons {
		if strings.HasPrefix(r, "clock skew: ") {
			return r
		}
	}
	return ""
}

// gauge returns the value of the unlabelled gauge name in m's registry.
func gauge(t *testing.T, tn *testcluster.Node, name string) (float64, bool) {
	t.Helper()
	mfs, err := tn.Metrics.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// fires counts the slots a schedule has handled (fired or skipped), in n's
// replica (0 while it has no such schedule).
func fires(n *cluster.Node, name string) (uint64, fsm.Instant) {
	r, _ := n.StaleRead()
	s, ok := r.Schedule(name)
	if !ok {
		return 0, 0
	}
	return s.Fires + s.Skipped, s.LastFire
}

// A leader whose clock jumps 30s ahead of the other voters' fires no
// recurring schedule and expires no lease while it disagrees with them,
// reports the skew in its health and metrics, and resumes both once its
// clock is back. A follower's skewed clock holds nothing.
func TestClockSkewHoldsLeaderTimers(t *testing.T) {
	const window = 2 * time.Second
	c := testcluster.New(t, 3, testcluster.Configure(func(_ int, cfg *cluster.Config) {
		cfg.Engine.Core.HeartbeatWindow = window
		// The test follows one leader throughout: raft timings that keep
		// it leading on a loaded machine.
		cfg.HeartbeatTimeout = 3 * time.Second
		cfg.ElectionTimeout = 3 * time.Second
		cfg.LeaderLeaseTimeout = 1500 * time.Millisecond
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, followers := c.Leader()
	ln := leader.Node
	eng, err := ln.TestEngine()
	require.NoError(t, err)
	require.Eventually(t, func() bool { st := ln.ClockStatus(); return st.Armed && !st.Held },
		10*time.Second, 10*time.Millisecond, "the leader never checked its clock")

	_, err = eng.AddSchedule(ctx, core.ScheduleSpec{Name: "tick", Cron: "@every 1s",
		Task: fsm.Template{Pool: "cron", Kind: "tick"}, Overlap: fsm.OverlapAllow})
	require.NoError(t, err)
	require.Eventually(t, func() bool { n, _ := fires(ln, "tick"); return n >= 2 },
		10*time.Second, 10*time.Millisecond, "the schedule does not fire")

	// One follower 30s ahead: two of three voters agree, nothing is held.
	require.NoError(t, followers[0].Node.FaultClock().Set(30*time.Second, 1))
	before, _ := fires(ln, "tick")
	require.Eventually(t, func() bool { n, _ := fires(ln, "tick"); return n >= before+2 },
		10*time.Second, 10*time.Millisecond, "a follower's skew stopped the leader's fires")
	require.Empty(t, clockReason(ln))
	require.NoError(t, followers[0].Node.FaultClock().Set(0, 1))

	// An attempt whose worker never heartbeats.
	subs, _, err := submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "work", Kind: "quiet"}}}))
	require.NoError(t, err)
	id := subs[0].ID
	grants, err := eng.Poll(ctx, core.Offer{Worker: "w1", Pool: "work", Slots: 1})
	require.NoError(t, err)
	require.Len(t, grants, 1)
	lease := grants[0].Lease

	// The leader's clock jumps 30s ahead: by it, the lease ended long ago
	// and thirty slots are due.
	require.NoError(t, ln.FaultClock().Set(30*time.Second, 1))
	require.Eventually(t, func() bool { return clockReason(ln) != "" },
		10*time.Second, 10*time.Millisecond, "health does not report the skew")
	t.Logf("health: %s", clockReason(ln))
	require.True(t, ln.ClockStatus().Held)
	require.Equal(t, "degraded", ln.Health().Status)
	held, _ := fires(ln, "tick")
	running := func() bool {
		r, _ := ln.StaleRead()
		task, ok := r.Get(id)
		return ok && task.Status == fsm.StatusRunning && task.Lease == lease
	}
	require.True(t, running(), "the lease ended before the hold")

	// Three heartbeat windows pass by the true clock, with other work
	// waking the engine: no fire, no expiry, and the skew stays reported.
	require.Never(t, func() bool {
		if _, _, err := submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "other", Kind: "wake"}}})); err != nil {
			t.Logf("submit while held: %v", err)
			return true
		}
		n, _ := fires(ln, "tick")
		return n != held || !running() || clockReason(ln) == ""
	}, 3*window, 100*time.Millisecond, "a fire or an expiry was committed while the clock was held")
	v, ok := gauge(t, leader, "cronoq_clock_hold")
	require.True(t, ok)
	require.Equal(t, 1.0, v)
	v, ok = gauge(t, leader, "cronoq_clock_skew_seconds")
	require.True(t, ok)
	require.InDelta(t, 30, v, 1)

	// Back: health recovers, the lease is lost, and the schedule fires
	// again, never a slot ahead of the true clock.
	require.NoError(t, ln.FaultClock().Set(0, 1))
	require.Eventually(t, func() bool { return clockReason(ln) == "" && ln.Health().Status == "ok" },
		10*time.Second, 10*time.Millisecond, "health did not recover: %v", ln.Health().Reasons)
	require.Eventually(t, func() bool { return !running() }, 10*time.Second, 10*time.Millisecond, "the lease was not expired after the hold")
	r, _ := ln.StaleRead()
	task, _ := r.Get(id)
	require.Contains(t, task.Error, "lease lost")
	require.Eventually(t, func() bool { n, _ := fires(ln, "tick"); return n > held },
		10*time.Second, 10*time.Millisecond, "the schedule did not fire again")
	_, last := fires(ln, "tick")
	require.False(t, last.Time().After(time.Now().Add(time.Second)), "a slot at %s fired ahead of the true clock", last.Time())
	v, _ = gauge(t, leader, "cronoq_clock_hold")
	require.Equal(t, 0.0, v)
}
