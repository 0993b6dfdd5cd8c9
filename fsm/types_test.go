package fsm

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestInstant holds the conversions between Instant and time.Time (0 is
// the zero time both ways, the rest is Unix nanoseconds in UTC) and
// Instant arithmetic (Add saturates instead of wrapping).
func TestInstant(t *testing.T) {
	require.Equal(t, Instant(0), InstantOf(time.Time{}))
	require.True(t, Instant(0).Time().IsZero())
	require.True(t, Instant(0).IsZero())
	require.False(t, baseTime.IsZero())

	at := time.Date(2023, 11, 14, 22, 13, 20, 5, time.FixedZone("x", 3600))
	require.Equal(t, Instant(at.UnixNano()), InstantOf(at))
	require.Equal(t, at.UTC(), InstantOf(at).Time())
	require.Equal(t, time.UTC, InstantOf(at).Time().Location())
	require.Equal(t, Instant(-1), InstantOf(time.Unix(0, -1)))

	tests := []struct {
		i    Instant
		d    time.Duration
		want Instant
	}{
		{baseTime, time.Second, baseTime + 1e9},
		{baseTime, -time.Second, baseTime - 1e9},
		{math.MaxInt64 - 1, 2, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MinInt64 + 1, -2, math.MinInt64},
		{math.MinInt64, math.MinInt64, math.MinInt64},
		{math.MinInt64, math.MaxInt64, -1},
		{math.MaxInt64, math.MinInt64, -1},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.i.Add(tc.d), "%d + %d", tc.i, tc.d)
	}
	require.Equal(t, 5*time.Second, (baseTime + 5e9).Sub(baseTime))
	require.Equal(t, -5*time.Second, baseTime.Sub(baseTime+5e9))
}
