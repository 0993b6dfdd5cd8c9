package cron

import (
	"fmt"
	"testing"
	"time"

	robfig "github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// splitmix is a small seeded PRNG so that every run checks the same cases.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *splitmix) intn(n int64) int64 { return int64(s.next() % uint64(n)) }

var propExprs = []string{
	"* * * * * *",
	"*/7 * * * * *",
	"*/15 * * * *",
	"0 * * * *",
	"30 * * * *",
	"30 1 * * *",
	"30 2 * * *",
	"45 1,2 * * *",
	"0 30 1-3 * * *",
	"0 0 * * 0",
	"@every 7m",
	"@every 45s",
}

var propZones = []string{"", "America/New_York", "Europe/London", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kathmandu"}

// transitions lists instants near which each zone changes its offset, plus
// New York's last day of 2040: past the zone's listed transitions, where Go
// derives periods from the zone's rule (and reports a wrong end on the last
// day of a leap year).
var transitions = map[string][]time.Time{
	"":                    {utcAt(2026, 6, 1, 0, 0, 0)},
	"America/New_York":    {utcAt(2026, 3, 8, 7, 0, 0), utcAt(2026, 11, 1, 6, 0, 0), utcAt(2041, 1, 1, 0, 0, 0), utcAt(2040, 12, 31, 0, 0, 0)},
	"Europe/London":       {utcAt(2026, 3, 29, 1, 0, 0), utcAt(2026, 10, 25, 1, 0, 0)},
	"Australia/Sydney":    {utcAt(2026, 4, 4, 16, 0, 0), utcAt(2026, 10, 3, 16, 0, 0)},
	"Australia/Lord_Howe": {utcAt(2026, 4, 4, 15, 0, 0), utcAt(2026, 10, 3, 15, 30, 0)},
	"Asia/Kathmandu":      {utcAt(2026, 6, 1, 0, 0, 0)},
}

// bruteSlots lists the slots in [a, b] by looking at every second: a second
// is a slot if the zone's wall clock then matches the fields and shows a time
// it has not shown before (a repeated local time counts once).
func bruteSlots(e *Expr, a, b int64) []int64 {
	var out []int64
	if e.step > 0 {
		for u := a; u <= b; u++ {
			if u%e.step == 0 {
				out = append(out, u)
			}
		}
		return out
	}
	const lookBack = 4 * 3600 // longer than any clock change
	maxWall := int64(-1 << 62)
	for u := a - lookBack; u <= b; u++ {
		t := time.Unix(u, 0).In(e.loc)
		_, off := t.Zone()
		wall := u + int64(off)
		fresh := wall > maxWall
		if fresh {
			maxWall = wall
		}
		if u >= a && fresh && bruteMatch(e.spec, t) {
			out = append(out, u)
		}
	}
	return out
}

// bruteMatch reports whether local time t matches the fields, following
// robfig's rules.
func bruteMatch(s *robfig.SpecSchedule, t time.Time) bool {
	has := func(set uint64, v int) bool { return set&(1<<uint(v)) != 0 }
	if !has(s.Second, t.Second()) || !has(s.Minute, t.Minute()) || !has(s.Hour, t.Hour()) || !has(s.Month, int(t.Month())) {
		return false
	}
	dom, dow := has(s.Dom, t.Day()), has(s.Dow, int(t.Weekday()))
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// enumerate lists the slots in [a, b] by calling Next repeatedly.
func enumerate(t *testing.T, e *Expr, a, b int64) []int64 {
	var out []int64
	at := time.Unix(a-1, 0)
	for {
		n := e.Next(at)
		if n.IsZero() || n.Unix() > b {
			return out
		}
		require.True(t, n.After(at))
		out = append(out, n.Unix())
		at = n
		require.Less(t, len(out), 200000, "too many slots to enumerate")
	}
}

// TestSlotsAgainstBruteForce checks Next, prev and count against a
// second-by-second scan, around clock changes and at random.
func TestSlotsAgainstBruteForce(t *testing.T) {
	rng := splitmix(1)
	for _, tz := range propZones {
		windows := append([]time.Time{}, transitions[tz]...)
		windows = append(windows, utcAt(2026, 1, 1, 0, 0, 0).Add(time.Duration(rng.intn(365*86400))*time.Second))
		for _, expr := range propExprs {
			e := mustParse(t, expr, tz)
			for _, mid := range windows {
				a, b := mid.Unix()-2*3600+rng.intn(60), mid.Unix()+2*3600-rng.intn(60)
				name := fmt.Sprintf("%s/%s/%s", expr, tz, mid.Format(time.RFC3339))
				want := bruteSlots(e, a, b)
				require.Equal(t, want, enumerate(t, e, a, b), name)
				n, exact := e.count(a, b)
				require.True(t, exact)
				require.Equal(t, uint64(len(want)), n, name)
				last, ok := e.prev(b, a)
				require.Equal(t, len(want) > 0, ok, name)
				if ok {
					require.Equal(t, want[len(want)-1], last, name)
				}
				for i, s := range want {
					p, ok := e.prev(s, a)
					require.True(t, ok)
					require.Equal(t, s, p, name)
					p, ok = e.prev(s-1, a)
					require.Equal(t, i > 0, ok, name)
					if i > 0 {
						require.Equal(t, want[i-1], p, name)
					}
				}
			}
		}
	}
}

// TestCountAgainstNext checks the arithmetic count and backward search over
// long spans against enumerating with Next.
func TestCountAgainstNext(t *testing.T) {
	tests := []struct {
		expr, tz string
		from, to time.Time
		want     int
	}{
		{expr: "0 9 * * *", tz: "America/New_York", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2036, 1, 1, 0, 0, 0), want: 3652},
		{expr: "30 1 * * *", tz: "America/New_York", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2036, 1, 1, 0, 0, 0), want: 3652},
		// No 02:30 on the ten spring-forward days.
		{expr: "30 2 * * *", tz: "America/New_York", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2036, 1, 1, 0, 0, 0), want: 3652 - 10},
		{expr: "45 1 * * *", tz: "Australia/Lord_Howe", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2031, 1, 1, 0, 0, 0), want: 1826},
		{expr: "15 2 * * *", tz: "Australia/Lord_Howe", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2031, 1, 1, 0, 0, 0), want: 1826 - 5},
		// The first instant counts; the repeated hour does not.
		{expr: "*/10 * * * *", tz: "Europe/London", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2027, 1, 1, 0, 0, 0), want: 365*144 + 1 - 6},
		// Every Sunday: 02:00 exists on both clock-change days.
		{expr: "0 2 * * 0", tz: "Europe/London", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2046, 1, 1, 0, 0, 0), want: 1044},
		{expr: "0 0 1 * *", tz: "Australia/Sydney", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2076, 1, 1, 0, 0, 0), want: 600},
		{expr: "0 0 29 2 *", from: utcAt(1890, 1, 1, 0, 0, 0), to: utcAt(2210, 1, 1, 0, 0, 0), want: 77},
		// Fridays, 13ths, minus four Friday the 13ths.
		{expr: "0 12 13 * 5", tz: "Asia/Kathmandu", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2028, 1, 1, 0, 0, 0), want: 105 + 24 - 4},
		{expr: "@every 7m", tz: "America/New_York", from: utcAt(2026, 1, 1, 0, 0, 0), to: utcAt(2027, 1, 1, 0, 0, 0), want: 365*24*60/7 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.expr+"/"+tc.tz, func(t *testing.T) {
			e := mustParse(t, tc.expr, tc.tz)
			a, b := tc.from.Unix(), tc.to.Unix()
			slots := enumerate(t, e, a, b)
			require.Equal(t, tc.want, len(slots))
			n, exact := e.count(a, b)
			require.True(t, exact)
			require.Equal(t, uint64(len(slots)), n)
			last, ok := e.prev(b, a)
			require.True(t, ok)
			require.Equal(t, slots[len(slots)-1], last)
			// Walk all of them backwards too.
			for i := len(slots) - 1; i > 0; i-- {
				p, ok := e.prev(slots[i]-1, a)
				require.True(t, ok)
				require.Equal(t, slots[i-1], p)
			}
		})
	}
}

// TestPlanProperties drives schedules through random sequences of leader
// looks. Plan must be a pure function, never return a slot twice across
// consecutive plans from the committed cursor, and account for every slot
// between the old cursor and the new one (fired, or counted as skipped in
// the decision that passed over it).
func TestPlanProperties(t *testing.T) {
	rng := splitmix(7)
	policies := []fsm.CatchUp{fsm.CatchUpOnce, fsm.CatchUpSkip, fsm.CatchUpAll}
	limits := []uint32{0, 1, 3, 10}
	for trial := 0; trial < 240; trial++ {
		expr := propExprs[rng.intn(int64(len(propExprs)))]
		tz := propZones[rng.intn(int64(len(propZones)))]
		policy := policies[rng.intn(int64(len(policies)))]
		limit := limits[rng.intn(int64(len(limits)))]
		e := mustParse(t, expr, tz)
		name := fmt.Sprintf("trial %d: %q in %q, policy %d, limit %d", trial, expr, tz, policy, limit)

		// Start shortly before a clock change half of the time.
		created := utcAt(2026, 1, 1, 0, 0, 0).Add(time.Duration(rng.intn(365*86400)) * time.Second)
		if ts := transitions[tz]; rng.intn(2) == 0 {
			created = ts[rng.intn(int64(len(ts)))].Add(-time.Duration(rng.intn(3*3600)) * time.Second)
		}
		created = created.Add(time.Duration(rng.intn(int64(time.Second))))
		cursor, now := created, created
		seen := map[int64]bool{}
		var accounted uint64
		for step := 0; step < 40; step++ {
			switch r := rng.intn(10); {
			case r < 6:
				now = now.Add(time.Duration(rng.intn(120*int64(time.Second))) + time.Nanosecond)
			case r < 9:
				now = now.Add(time.Duration(rng.intn(3 * int64(time.Hour))))
			default:
				now = now.Add(time.Duration(rng.intn(40 * 24 * int64(time.Hour))))
			}
			ds := Plan(e, cursor, now, policy, limit)
			require.Equal(t, ds, Plan(e, cursor, now, policy, limit), name)

			if len(ds) == 0 {
				next := e.Next(cursor)
				require.True(t, next.IsZero() || next.After(now), name)
				continue
			}
			switch policy {
			case fsm.CatchUpOnce:
				require.Len(t, ds, 1, name)
				require.True(t, ds[0].Fire, name)
			case fsm.CatchUpSkip:
				require.Len(t, ds, 1, name)
				require.Equal(t, ds[0].Skipped == 0, ds[0].Fire, name)
			case fsm.CatchUpAll:
				max := int(limit)
				if max == 0 {
					max = DefaultCatchUpLimit
				}
				require.LessOrEqual(t, len(ds), max, name)
			}
			prev := cursor
			for i, d := range ds {
				s := d.Slot.Unix()
				require.Equal(t, time.UTC, d.Slot.Location(), name)
				require.True(t, d.Slot.After(prev), name)
				require.False(t, d.Slot.After(now), name)
				require.True(t, e.Next(d.Slot.Add(-time.Nanosecond)).Equal(d.Slot), "%s: %s is not a slot", name, d.Slot)
				require.False(t, seen[s], "%s: slot %s returned twice", name, d.Slot)
				seen[s] = true
				between, exact := e.count(prev.Unix()+1, s-1)
				require.True(t, exact)
				require.Equal(t, between, uint64(d.Skipped), "%s: decision %d", name, i)
				if i > 0 {
					require.Zero(t, d.Skipped, name)
					require.True(t, d.Fire, name)
				}
				accounted += uint64(d.Skipped) + 1
				prev = d.Slot
			}
			cursor = prev
			require.Nil(t, Plan(e, cursor, now, policy, limit), "%s: slots left due after committing the plan", name)
		}
		total, exact := e.count(created.Unix()+1, cursor.Unix())
		require.True(t, exact)
		require.Equal(t, total, accounted, name)
		require.Equal(t, int(total-uint64(len(seen))), int(accounted)-len(seen), name)
	}
}
