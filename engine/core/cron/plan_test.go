package cron

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

func TestPlan(t *testing.T) {
	base := utcAt(2026, 5, 4, 12, 0, 0)
	at := func(min, sec int) time.Time {
		return base.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second)
	}
	fire := func(slot time.Time, skipped uint32) Decision {
		return Decision{Slot: slot, Skipped: skipped, Fire: true}
	}
	minutes := func(from, to int) []Decision {
		var out []Decision
		for m := from; m <= to; m++ {
			out = append(out, fire(at(m, 0), 0))
		}
		return out
	}
	tests := []struct {
		name        string
		expr, tz    string
		cursor, now time.Time
		policy      fsm.CatchUp
		limit       uint32
		want        []Decision
	}{
		{name: "nothing due yet", expr: "* * * * *", cursor: at(0, 0), now: at(0, 59)},
		{name: "now equals cursor", expr: "* * * * *", cursor: at(0, 0), now: at(0, 0)},
		{name: "now before cursor", expr: "* * * * *", cursor: at(5, 0), now: at(1, 0)},
		{name: "one due, now on the slot", expr: "* * * * *", cursor: at(0, 30), now: at(1, 0), want: []Decision{fire(at(1, 0), 0)}},
		{name: "one due, later", expr: "* * * * *", cursor: at(0, 0), now: at(1, 59), want: []Decision{fire(at(1, 0), 0)}},
		{name: "one due under skip still fires", expr: "* * * * *", cursor: at(0, 0), now: at(1, 30), policy: fsm.CatchUpSkip, want: []Decision{fire(at(1, 0), 0)}},
		{name: "one due under all", expr: "* * * * *", cursor: at(0, 0), now: at(1, 30), policy: fsm.CatchUpAll, want: []Decision{fire(at(1, 0), 0)}},
		{name: "once", expr: "* * * * *", cursor: at(0, 0), now: at(10, 30), policy: fsm.CatchUpOnce, want: []Decision{fire(at(10, 0), 9)}},
		{name: "unknown policy acts as once", expr: "* * * * *", cursor: at(0, 0), now: at(10, 30), policy: fsm.CatchUp(9), want: []Decision{fire(at(10, 0), 9)}},
		{name: "skip", expr: "* * * * *", cursor: at(0, 0), now: at(10, 30), policy: fsm.CatchUpSkip, want: []Decision{{Slot: at(10, 0), Skipped: 9, Fire: false}}},
		{name: "all within the default limit", expr: "* * * * *", cursor: at(0, 0), now: at(10, 30), policy: fsm.CatchUpAll, want: minutes(1, 10)},
		{name: "all with limit 10 and 10 due", expr: "* * * * *", cursor: at(0, 0), now: at(10, 30), policy: fsm.CatchUpAll, limit: 10, want: minutes(1, 10)},
		{
			name: "all beyond the limit fires the last ones", expr: "* * * * *", cursor: at(0, 0), now: at(10, 30), policy: fsm.CatchUpAll, limit: 3,
			want: []Decision{fire(at(8, 0), 7), fire(at(9, 0), 0), fire(at(10, 0), 0)},
		},
		{
			name: "all with limit 1", expr: "* * * * *", cursor: at(0, 0), now: at(10, 30), policy: fsm.CatchUpAll, limit: 1,
			want: []Decision{fire(at(10, 0), 9)},
		},
		{
			name: "cursor with nanoseconds", expr: "* * * * *", cursor: at(1, 0).Add(-time.Nanosecond), now: at(2, 0), policy: fsm.CatchUpAll,
			want: []Decision{fire(at(1, 0), 0), fire(at(2, 0), 0)},
		},
		{
			name: "@every 30s from 12:00:07", expr: "@every 30s", cursor: at(0, 7), now: at(5, 0), policy: fsm.CatchUpOnce,
			want: []Decision{fire(at(5, 0), 9)},
		},
		{
			name: "@every 30s all, limit 2", expr: "@every 30s", cursor: at(0, 7), now: at(5, 10), policy: fsm.CatchUpAll, limit: 2,
			want: []Decision{fire(at(4, 30), 8), fire(at(5, 0), 0)},
		},
		{
			// 2026-03-08 in New York: 01:30 EST and 03:30 EDT are due, 02:30 does not exist.
			name: "across spring forward", expr: "30 * * * *", tz: "America/New_York",
			cursor: utcAt(2026, 3, 8, 6, 0, 0), now: utcAt(2026, 3, 8, 8, 0, 0), policy: fsm.CatchUpAll,
			want: []Decision{fire(utcAt(2026, 3, 8, 6, 30, 0), 0), fire(utcAt(2026, 3, 8, 7, 30, 0), 0)},
		},
		{
			// 2026-11-01 in New York: 01:30 EDT fires, 01:30 EST is no slot, 02:30 EST is.
			name: "across fall back", expr: "30 * * * *", tz: "America/New_York",
			cursor: utcAt(2026, 11, 1, 5, 0, 0), now: utcAt(2026, 11, 1, 8, 0, 0), policy: fsm.CatchUpAll,
			want: []Decision{fire(utcAt(2026, 11, 1, 5, 30, 0), 0), fire(utcAt(2026, 11, 1, 7, 30, 0), 0)},
		},
		{
			name: "daily across a week in New York", expr: "0 9 * * *", tz: "America/New_York",
			cursor: utcAt(2026, 3, 5, 0, 0, 0), now: utcAt(2026, 3, 12, 0, 0, 0), policy: fsm.CatchUpSkip,
			want: []Decision{{Slot: utcAt(2026, 3, 11, 13, 0, 0), Skipped: 6, Fire: false}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := mustParse(t, tc.expr, tc.tz)
			got := Plan(e, tc.cursor, tc.now, tc.policy, tc.limit)
			require.Equal(t, tc.want, got)
		})
	}
	require.Nil(t, Plan(nil, base, base.Add(time.Hour), fsm.CatchUpOnce, 0))
}

func TestPlanLimitClamped(t *testing.T) {
	e := mustParse(t, "* * * * * *", "")
	cursor := utcAt(2026, 5, 4, 12, 0, 0)
	now := cursor.Add(time.Hour)
	got := Plan(e, cursor, now, fsm.CatchUpAll, 5000)
	require.Len(t, got, MaxCatchUpLimit)
	require.Equal(t, uint32(3600-MaxCatchUpLimit), got[0].Skipped)
	require.Equal(t, now.Add(-(MaxCatchUpLimit-1)*time.Second), got[0].Slot)
	for i, d := range got {
		require.True(t, d.Fire)
		require.Equal(t, now.Add(time.Duration(i-MaxCatchUpLimit+1)*time.Second), d.Slot)
		if i > 0 {
			require.Zero(t, d.Skipped)
		}
	}
	got = Plan(e, cursor, now, fsm.CatchUpAll, 0)
	require.Len(t, got, DefaultCatchUpLimit)
	require.Equal(t, uint32(3600-DefaultCatchUpLimit), got[0].Skipped)
}

// TestPlanLongOutage plans ten years of missed per-second slots: the count is
// exact (it drops the 3,600 repeated seconds of every fall-back night in New
// York) and costs work per day, not per slot.
func TestPlanLongOutage(t *testing.T) {
	const days = 3652 // 2026-01-01 .. 2036-01-01, two leap days
	cursor := utcAt(2026, 1, 1, 0, 0, 0)
	now := utcAt(2036, 1, 1, 0, 0, 0)
	tests := []struct {
		expr, tz string
		due      uint64
	}{
		{expr: "* * * * * *", due: days * 86400},
		{expr: "* * * * * *", tz: "America/New_York", due: days*86400 - 10*3600},
		{expr: "*/2 * * * * *", tz: "Australia/Lord_Howe", due: days*43200 - 10*900},
		{expr: "@every 1s", tz: "America/New_York", due: days * 86400},
	}
	for _, tc := range tests {
		t.Run(tc.expr+"/"+tc.tz, func(t *testing.T) {
			e := mustParse(t, tc.expr, tc.tz)
			n, exact := e.count(cursor.Unix()+1, now.Unix())
			require.True(t, exact)
			require.Equal(t, tc.due, n)

			once := Plan(e, cursor, now, fsm.CatchUpOnce, 0)
			require.Equal(t, []Decision{{Slot: now, Skipped: uint32(tc.due - 1), Fire: true}}, once)

			all := Plan(e, cursor, now, fsm.CatchUpAll, MaxCatchUpLimit)
			require.Len(t, all, MaxCatchUpLimit)
			require.Equal(t, uint32(tc.due-MaxCatchUpLimit), all[0].Skipped)
			require.Equal(t, now, all[len(all)-1].Slot)
			step := time.Second
			if tc.expr == "*/2 * * * * *" {
				step = 2 * time.Second
			}
			for i := 1; i < len(all); i++ {
				require.Equal(t, step, all[i].Slot.Sub(all[i-1].Slot))
			}

		})
	}
}

func TestPlanSaturates(t *testing.T) {
	// 200 years of per-second slots exceed a uint32 Skipped.
	e := mustParse(t, "* * * * * *", "")
	cursor := utcAt(1900, 1, 1, 0, 0, 0)
	now := utcAt(2100, 1, 1, 0, 0, 0)
	got := Plan(e, cursor, now, fsm.CatchUpOnce, 0)
	require.Equal(t, []Decision{{Slot: now, Skipped: math.MaxUint32, Fire: true}}, got)
	every := mustParse(t, "@every 1s", "")
	require.Equal(t, got, Plan(every, cursor, now, fsm.CatchUpOnce, 0))
}
