package cluster

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

func TestJudgeClock(t *testing.T) {
	const bound = time.Second
	known := func(off, rtt time.Duration) ClockSample { return ClockSample{Known: true, Offset: off, RTT: rtt} }
	unknown := ClockSample{}
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		voters  int
		samples []ClockSample
		agree   int
		median  time.Duration
		skewed  bool
	}{
		{"alone", 1, nil, 1, 0, false},
		{"three agree", 3, []ClockSample{known(10*ms, ms), known(-20*ms, ms)}, 3, -5 * ms, false},
		{"one follower off: a majority still agrees", 3, []ClockSample{known(30*time.Second, ms), known(0, ms)}, 2, 15 * time.Second, false},
		{"leader ahead of both", 3, []ClockSample{known(-30*time.Second, ms), known(-30*time.Second-5*ms, ms)}, 1, -30*time.Second - 2500*time.Microsecond, true},
		{"exactly at the bound agrees", 3, []ClockSample{known(bound, 0), known(-bound, 0)}, 3, 0, false},
		{"just past the bound", 3, []ClockSample{known(bound+ms, 0), known(-bound-ms, 0)}, 1, 0, true},
		{"the round trip is the error bound", 3, []ClockSample{known(bound+40*ms, 100*ms), known(bound+60*ms, 100*ms)}, 2, bound + 50*ms, false},
		{"a slow answer still proves a large skew", 3, []ClockSample{known(30*time.Second, 1500*ms), known(-30*time.Second, 3*time.Second)}, 1, 0, true},
		{"a slow answer proves no small one", 3, []ClockSample{known(1500*ms, 1200*ms), known(1550*ms, 1200*ms)}, 3, 1525 * ms, false},
		{"unreachable voters do not agree", 3, []ClockSample{unknown, unknown}, 1, 0, true},
		{"one unreachable, one agreeing", 3, []ClockSample{unknown, known(0, ms)}, 2, 0, false},
		{"one unreachable, one disagreeing", 3, []ClockSample{unknown, known(5*time.Second, ms)}, 1, 5 * time.Second, true},
		{"five voters, two down", 5, []ClockSample{unknown, unknown, known(0, ms), known(ms, ms)}, 3, ms / 2, false},
		{"five voters, two skewed, one down", 5, []ClockSample{unknown, known(9*time.Second, ms), known(9*time.Second, ms), known(0, ms)}, 2, 9 * time.Second, true},
		{"two voters need both", 2, []ClockSample{known(2*time.Second, ms)}, 1, 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeClock(bound, tc.voters, tc.samples)
			require.Equal(t, tc.agree, v.Agree, "agree")
			require.Equal(t, tc.median, v.Median, "median")
			require.Equal(t, tc.skewed, v.Skewed, "skewed")
			require.Equal(t, tc.voters, v.Voters)
		})
	}
}

func TestClockVerdictReason(t *testing.T) {
	v := judgeClock(time.Second, 3, []ClockSample{{Known: true, Offset: -30 * time.Second}, {}})
	require.Equal(t, "clock skew: leader clock differs from a majority by 30s (ahead of the median of the readings; 1 of 3 voters agree within 1s, 1 without a reading); recurring fires and lease expiries wait", v.reason())
	v = judgeClock(time.Second, 3, []ClockSample{{}, {}})
	require.Contains(t, v.reason(), "clock skew: leader clock cannot be compared with a majority (1 of 3 voters agree within 1s, 2 without a reading)")
}

// settableClock is a wall clock the test moves.
type settableClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *settableClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off).Round(0)
}

func (c *settableClock) set(off time.Duration) {
	c.mu.Lock()
	c.off = off
	c.mu.Unlock()
}

// The guard follows the wall clock while trusted; a step holds it at once
// (it then runs on by the monotonic clock) until a round that started after
// the step agrees; a skewed verdict holds it until an agreeing one.
func TestClockGuard(t *testing.T) {
	wall := &settableClock{}
	g := &clockGuard{raw: wall.now, bound: time.Second, logger: hclog.NewNullLogger()}
	agree := ClockVerdict{Voters: 3, Agree: 3, Known: 2}
	skewed := ClockVerdict{Voters: 3, Agree: 1, Known: 2, Median: -30 * time.Second, Skewed: true}

	// Not armed: a step is followed.
	wall.set(time.Hour)
	require.WithinDuration(t, time.Now().Add(time.Hour), g.Now(), 100*time.Millisecond)
	require.False(t, g.held())
	wall.set(0)
	g.Now()

	before := time.Now()
	require.False(t, g.judged(agree, before))
	require.False(t, g.held())
	require.WithinDuration(t, time.Now(), g.Now(), 100*time.Millisecond)

	// A 30s jump is held at the first reading.
	wall.set(30 * time.Second)
	require.WithinDuration(t, time.Now(), g.Now(), 100*time.Millisecond, "the jump is not followed")
	require.True(t, g.held())
	require.False(t, g.judged(agree, before), "a round that started before the step cannot release it")
	require.True(t, g.held())
	require.WithinDuration(t, time.Now(), g.Now(), 100*time.Millisecond)

	// A round after the step finds the clock skewed: still held.
	require.False(t, g.judged(skewed, time.Now()))
	require.True(t, g.held())

	// Back, and a round agrees: released, the wall clock is followed. A
	// round that started before the step back cannot release it.
	roundStart := time.Now()
	wall.set(0)
	require.WithinDuration(t, time.Now(), g.Now(), 100*time.Millisecond)
	require.False(t, g.judged(agree, roundStart))
	require.True(t, g.held())
	require.True(t, g.judged(agree, time.Now()))
	require.False(t, g.held())
	require.WithinDuration(t, time.Now(), g.Now(), 100*time.Millisecond)

	// A step confirmed by a later round is followed (a clock corrected).
	wall.set(5 * time.Second)
	require.WithinDuration(t, time.Now(), g.Now(), 100*time.Millisecond)
	require.True(t, g.held())
	require.True(t, g.judged(agree, time.Now()))
	require.WithinDuration(t, time.Now().Add(5*time.Second), g.Now(), 100*time.Millisecond)

	// Disarmed (no longer leading): nothing held.
	wall.set(time.Minute)
	g.Now()
	require.True(t, g.held())
	require.True(t, g.disarm())
	require.False(t, g.held())
}
