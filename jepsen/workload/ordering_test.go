package workload

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLanePayload(t *testing.T) {
	p := LanePayload(LaneKey(3), "o-c11-7-2")
	require.Equal(t, "lane-3", LaneKeyOf(p))
	require.Equal(t, "", LaneKeyOf("p-c1-1"))
	require.Equal(t, "", LaneKeyOf(StepPayload("k", "s0", ModeOK)))
}

// Ordering attempts are short; some fail retryably, a few for good, and a
// few outlive their lease.
func TestLaneBehavior(t *testing.T) {
	ttl := 3 * time.Second
	choose := LaneBehavior(ttl)
	r := rand.New(rand.NewPCG(5, 6))
	outcomes := map[string]int{}
	outlived := 0
	for range 20000 {
		b := choose(r, Grant{Payload: LanePayload("lane-0", "k")})
		outcomes[b.Outcome]++
		if b.Outlive {
			outlived++
			require.Greater(t, b.Exec, ttl)
			require.Equal(t, "success", b.Outcome)
			continue
		}
		require.GreaterOrEqual(t, b.Exec, 5*time.Millisecond)
		require.LessOrEqual(t, b.Exec, 50*time.Millisecond)
		require.Empty(t, b.Children)
	}
	require.InDelta(t, 0.10, float64(outcomes["retryable"])/20000, 0.01)
	require.InDelta(t, 0.02, float64(outcomes["permanent"])/20000, 0.005)
	require.InDelta(t, 0.01, float64(outlived)/20000, 0.004)
}
