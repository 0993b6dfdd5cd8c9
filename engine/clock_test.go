package engine_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// While Config.ClockHold reports true a lease whose heartbeat window ends is
// kept; once it reports false and RecheckClock is called, the lease is lost
// at once, without waiting for other work.
func TestClockHoldKeepsLeasesUntilReleased(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	aborts := make(chan string, 1)
	cfg := engine.Config{
		ClockHold: held.Load,
		OnAbort:   func(worker string, _ uint64, _ string) { aborts <- worker },
	}
	const window = 20 * time.Millisecond
	h := setup(t, cfg, core.Config{HeartbeatWindow: window, MaxAttempts: 3})
	subs, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("k")}))
	require.NoError(t, err)
	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 1})
	require.NoError(t, err)
	require.Len(t, grants, 1)

	// Ten windows pass, with other work waking the engine meanwhile.
	deadline := time.Now().Add(10 * window)
	for time.Now().Before(deadline) {
		_, err := h.eng.CoreStats(h.ctx)
		require.NoError(t, err)
		requireNone(t, aborts)
		time.Sleep(window / 4)
	}
	task, _ := h.state.Get(subs[0].ID)
	require.Equal(t, fsm.StatusRunning, task.Status, "the lease was ended while the clock was held")
	st, err := h.eng.CoreStats(h.ctx)
	require.NoError(t, err)
	require.True(t, st.ClockHeld)
	require.Equal(t, 1, st.HeldTimers)

	held.Store(false)
	require.NoError(t, h.eng.RecheckClock(h.ctx))
	require.Equal(t, "w1", recv(t, aborts), "released: the lease is lost")
	require.Eventually(t, func() bool {
		task, _ := h.state.Get(subs[0].ID)
		return task.Status == fsm.StatusRetrying || task.Status == fsm.StatusQueued
	}, waitFor, time.Millisecond)
}
