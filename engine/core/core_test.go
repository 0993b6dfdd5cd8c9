package core

import (
	"math"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

func TestIDEncodingRoundTrip(t *testing.T) {
	for _, b := range [][16]byte{
		{},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
	} {
		s := encodeID(b)
		require.Len(t, s, IDLen)
		got, ok := decodeID(s)
		require.True(t, ok, s)
		require.Equal(t, b, got)
	}
	require.Equal(t, "00000000000000000000000000", encodeID([16]byte{}))
	require.Equal(t, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", encodeID([16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}))
	for _, bad := range []string{"", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "0000000000000000000000000U", "0000000000000000000000000a", "000"} {
		_, ok := decodeID(bad)
		require.False(t, ok, bad)
	}
}

func TestIDLayout(t *testing.T) {
	id := makeID(0x0102030405, 7, 0x0a0b0c)
	b, ok := decodeID(id)
	require.True(t, ok)
	require.Equal(t, [16]byte{0, 0x01, 0x02, 0x03, 0x04, 0x05, 0, 0, 0, 7, 0, 0, 0, 0x0a, 0x0b, 0x0c}, b)
	ms, ok := idMillis(id)
	require.True(t, ok)
	require.Equal(t, uint64(0x0102030405), ms)
}

// TestIDsStrictlyIncrease checks that ids sort in creation order whatever the
// clock does, including across a recovery into a new epoch at an earlier
// millisecond.
func TestIDsStrictlyIncrease(t *testing.T) {
	g := idGen{epoch: 3}
	var ids []string
	clock := []uint64{1000, 1000, 1000, 999, 500, 1001, 1001, 2000, 1500}
	for _, ms := range clock {
		ids = append(ids, g.next(ms))
	}
	require.True(t, sort.StringsAreSorted(ids))
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i-1], ids[i])
	}
	// A new epoch at the same or an earlier clock still sorts after.
	g2 := idGen{epoch: 4}
	for _, id := range ids {
		g2.observe(id)
	}
	next := g2.next(100)
	require.Greater(t, next, ids[len(ids)-1])
	ms, _ := idMillis(next)
	require.Equal(t, uint64(2000), ms, "same ms as the highest id, higher epoch")

	// Recovering at the same epoch (no epoch to order by) moves to the next ms.
	g3 := idGen{epoch: 3}
	g3.observe(ids[len(ids)-1])
	next = g3.next(2000)
	require.Greater(t, next, ids[len(ids)-1])
	ms, _ = idMillis(next)
	require.Equal(t, uint64(2001), ms)

	// An id from the future (a leader whose clock ran ahead) is ordered
	// against too.
	g4 := idGen{epoch: 5}
	future := makeID(9_000_000, 4, 77)
	g4.observe(future)
	require.Greater(t, g4.next(5), future)
}

func TestBackoffBoundsAndDoubling(t *testing.T) {
	bo := fsm.Backoff{Initial: time.Second, Max: 5 * time.Minute, Jitter: 0.2}
	r := splitmix64{s: 42}
	for attempt := uint32(1); attempt <= 40; attempt++ {
		base := float64(time.Second) * math.Pow(2, float64(attempt-1))
		base = math.Min(base, float64(5*time.Minute))
		for i := 0; i < 200; i++ {
			d := float64(backoffDelay(bo, attempt, &r))
			require.GreaterOrEqual(t, d, base*0.8-1, "attempt %d", attempt)
			require.LessOrEqual(t, d, base*1.2, "attempt %d", attempt)
		}
	}
	noJitter := fsm.Backoff{Initial: time.Second, Max: 10 * time.Second}
	var got []time.Duration
	for attempt := uint32(1); attempt <= 6; attempt++ {
		got = append(got, backoffDelay(noJitter, attempt, &r))
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}, got)
	// Huge attempt numbers and caps do not overflow.
	huge := fsm.Backoff{Initial: 1, Max: math.MaxInt64}
	require.Equal(t, time.Duration(math.MaxInt64), backoffDelay(huge, 1000, &r))
	// The jitter spreads: not every draw is the same.
	seen := map[time.Duration]bool{}
	for i := 0; i < 20; i++ {
		seen[backoffDelay(bo, 1, &r)] = true
	}
	require.Greater(t, len(seen), 10)
}

func TestBackoffJitterIsSeeded(t *testing.T) {
	bo := fsm.Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.5}
	a, b, c := splitmix64{s: 7}, splitmix64{s: 7}, splitmix64{s: 8}
	var da, db, dc []time.Duration
	for i := uint32(1); i < 10; i++ {
		da = append(da, backoffDelay(bo, i, &a))
		db = append(db, backoffDelay(bo, i, &b))
		dc = append(dc, backoffDelay(bo, i, &c))
	}
	require.Equal(t, da, db)
	require.NotEqual(t, da, dc)
}

func TestLabelsSubset(t *testing.T) {
	kv := func(pairs ...string) []fsm.KV {
		var out []fsm.KV
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, fsm.KV{K: pairs[i], V: pairs[i+1]})
		}
		return out
	}
	cases := []struct {
		need, have []fsm.KV
		ok         bool
	}{
		{nil, nil, true},
		{nil, kv("gpu", "1"), true},
		{kv("gpu", "1"), nil, false},
		{kv("gpu", "1"), kv("gpu", "1"), true},
		{kv("gpu", "1"), kv("gpu", "2"), false},
		{kv("gpu", "1"), kv("arch", "arm", "gpu", "1", "zone", "a"), true},
		{kv("arch", "arm", "zone", "a"), kv("arch", "arm", "gpu", "1", "zone", "a"), true},
		{kv("arch", "arm", "zone", "b"), kv("arch", "arm", "gpu", "1", "zone", "a"), false},
		{kv("zone", "a"), kv("arch", "arm"), false},
		{kv("a", "1", "b", "2"), kv("b", "2"), false},
	}
	for i, tc := range cases {
		require.Equal(t, tc.ok, labelsSubset(tc.need, tc.have), "case %d", i)
	}
}

func TestLabelSigInjective(t *testing.T) {
	a := labelSig([]fsm.KV{{K: "a", V: "b:1"}})
	b := labelSig([]fsm.KV{{K: "a", V: "b"}, {K: "1", V: ""}})
	c := labelSig([]fsm.KV{{K: "a:", V: "b"}})
	require.NotEqual(t, a, b)
	require.NotEqual(t, a, c)
	require.Equal(t, "", labelSig(nil))
}

func TestNormalizeKVs(t *testing.T) {
	out, err := normalizeKVs("labels", []fsm.KV{{K: "z", V: "1"}, {K: "a", V: "2"}})
	require.NoError(t, err)
	require.Equal(t, []fsm.KV{{K: "a", V: "2"}, {K: "z", V: "1"}}, out)

	_, err = normalizeKVs("labels", []fsm.KV{{K: "z", V: "1"}, {K: "z", V: "2"}})
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "labels", ie.Field)

	_, err = normalizeKVs("tags", []fsm.KV{{K: "", V: "1"}})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "tags", ie.Field)
}

func TestTimerOrder(t *testing.T) {
	var h timerHeap
	in := []timer{
		{when: 5, kind: tmReady, id: "b"},
		{when: 5, kind: tmDeadline, id: "z"},
		{when: 1, kind: tmFire, id: "s"},
		{when: 5, kind: tmReady, id: "a"},
		{when: 5, kind: tmReady, id: "a", gen: 2},
		{when: 3, kind: tmLease, id: "c", gen: 9},
	}
	for _, tm := range in {
		h.push(tm)
	}
	var out []timer
	for h.Len() > 0 {
		out = append(out, h.pop())
	}
	require.Equal(t, []timer{
		{when: 1, kind: tmFire, id: "s"},
		{when: 3, kind: tmLease, id: "c", gen: 9},
		{when: 5, kind: tmDeadline, id: "z"},
		{when: 5, kind: tmReady, id: "a"},
		{when: 5, kind: tmReady, id: "a", gen: 2},
		{when: 5, kind: tmReady, id: "b"},
	}, out)
}

func TestNewValidates(t *testing.T) {
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := New(Config{}, 0, now)
	require.Error(t, err)
	_, err = New(Config{}, 1<<32, now)
	require.Error(t, err)
	_, err = New(Config{FixedPools: true}, 1, now)
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "Pools", ie.Field)
	c, err := New(Config{}, 1, now)
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.Epoch())
	_, ok := c.NextWake()
	require.False(t, ok)
	require.True(t, func() bool { o := c.Ready(); return o.Empty() }())
}
