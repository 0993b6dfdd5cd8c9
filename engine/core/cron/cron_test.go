package cron

import (
	"testing"
	"time"

	robfig "github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
)

func mustParse(t testing.TB, expr, tz string) *Expr {
	t.Helper()
	e, err := Parse(expr, tz)
	require.NoError(t, err, "Parse(%q, %q)", expr, tz)
	return e
}

func mustZone(t testing.TB, tz string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	require.NoError(t, err)
	return loc
}

func utcAt(y int, mo time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		expr, tz string
		want     string
		zoneErr  bool
	}{
		{expr: "", want: `invalid cron expression "": empty expression`},
		{expr: "   ", want: `invalid cron expression "   ": empty expression`},
		{expr: "* * *", want: `invalid cron expression "* * *": expected 5 or 6 fields`},
		{expr: "* * * * * * *", want: `invalid cron expression "* * * * * * *": expected 5 or 6 fields`},
		{expr: "61 * * * *", want: `invalid cron expression "61 * * * *": minute field "61": end of range (61) above maximum (59): 61`},
		{expr: "0 25 * * *", want: `invalid cron expression "0 25 * * *": hour field "25": end of range (25) above maximum (23): 25`},
		{expr: "0 0 0 * *", want: `invalid cron expression "0 0 0 * *": day-of-month field "0": beginning of range (0) below minimum (1): 0`},
		{expr: "0 0 * 13 *", want: `invalid cron expression "0 0 * 13 *": month field "13": end of range (13) above maximum (12): 13`},
		{expr: "0 0 * * 7", want: `invalid cron expression "0 0 * * 7": day-of-week field "7": end of range (7) above maximum (6): 7`},
		{expr: "60 0 0 * * *", want: `invalid cron expression "60 0 0 * * *": second field "60": end of range (60) above maximum (59): 60`},
		{expr: "*/0 * * * *", want: `invalid cron expression "*/0 * * * *": minute field "*/0": step of range should be a positive number: */0`},
		{expr: "x * * * *", want: `invalid cron expression "x * * * *": minute field "x": failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax`},
		{expr: "0 0 30 2 *", want: `invalid cron expression "0 0 30 2 *": it never fires (no selected month has the selected day of month)`},
		{expr: "0 0 31 4,6,9,11 *", want: `invalid cron expression "0 0 31 4,6,9,11 *": it never fires (no selected month has the selected day of month)`},
		{expr: "CRON_TZ=Europe/Paris 0 9 * * *", want: `invalid cron expression "CRON_TZ=Europe/Paris 0 9 * * *": a CRON_TZ= prefix is not allowed here; give the zone in the tz field`},
		{expr: "TZ=UTC 0 9 * * *", want: `invalid cron expression "TZ=UTC 0 9 * * *": a TZ= prefix is not allowed here; give the zone in the tz field`},
		{expr: "cron_tz=UTC @daily", want: `invalid cron expression "cron_tz=UTC @daily": a CRON_TZ= prefix is not allowed here; give the zone in the tz field`},
		{expr: "@fortnightly", want: `invalid cron expression "@fortnightly": unknown descriptor (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every DURATION)`},
		{expr: "@daily 5", want: `invalid cron expression "@daily 5": a descriptor takes no fields`},
		{expr: "@every", want: `invalid cron expression "@every": @every takes one duration, e.g. "@every 30s"`},
		{expr: "@every 1m 2m", want: `invalid cron expression "@every 1m 2m": @every takes one duration, e.g. "@every 30s"`},
		{expr: "@every soon", want: `invalid cron expression "@every soon": @every: invalid duration "soon"`},
		{expr: "@every 500ms", want: `invalid cron expression "@every 500ms": @every interval 500ms is shorter than 1s`},
		{expr: "@every -5s", want: `invalid cron expression "@every -5s": @every interval -5s is shorter than 1s`},
		{expr: "@every 0s", want: `invalid cron expression "@every 0s": @every interval 0s is shorter than 1s`},
		{expr: "@every 1.5s", want: `invalid cron expression "@every 1.5s": @every interval 1.5s is not a whole number of seconds`},
		{expr: "@every 1m0.001s", want: `invalid cron expression "@every 1m0.001s": @every interval 1m0.001s is not a whole number of seconds`},
		{expr: "0 9 * * *", tz: "Mars/Base", want: `unknown time zone "Mars/Base"`, zoneErr: true},
		{expr: "0 9 * * *", tz: "../etc/passwd", want: `unknown time zone "../etc/passwd"`, zoneErr: true},
		{expr: "0 9 * * *", tz: "Local", want: `unknown time zone "Local": name an IANA zone such as "Europe/Paris"`, zoneErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.expr+"/"+tc.tz, func(t *testing.T) {
			e, err := Parse(tc.expr, tc.tz)
			require.Nil(t, e)
			require.EqualError(t, err, tc.want)
			if tc.zoneErr {
				require.ErrorIs(t, err, ErrUnknownZone)
				require.NotErrorIs(t, err, ErrInvalidExpr)
			} else {
				require.ErrorIs(t, err, ErrInvalidExpr)
				require.NotErrorIs(t, err, ErrUnknownZone)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		expr, tz string
		every    time.Duration
	}{
		{expr: "* * * * *"},
		{expr: " 0  9 * * MON-FRI "},
		{expr: "0 0 29 2 *"}, // leap days exist
		{expr: "0 0 31 * *"},
		{expr: "0 0 30 2 1"}, // day-of-week alone can match: Mondays of February
		{expr: "0 0 ? JAN,jul SUN"},
		{expr: "*/10 * * * * *"},
		{expr: "@yearly"}, {expr: "@annually"}, {expr: "@monthly"}, {expr: "@weekly"},
		{expr: "@daily"}, {expr: "@midnight"}, {expr: "@hourly"},
		{expr: "@every 1s", every: time.Second},
		{expr: "@every 1h30m", every: 90 * time.Minute},
		{expr: "0 9 * * *", tz: "UTC"},
		{expr: "0 9 * * *", tz: "America/New_York"},
		{expr: "@every 1m", tz: "Asia/Kathmandu", every: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.expr+"/"+tc.tz, func(t *testing.T) {
			e := mustParse(t, tc.expr, tc.tz)
			require.Equal(t, tc.expr, e.String())
			require.Equal(t, tc.tz, e.TZ())
			require.Equal(t, tc.every, e.Every())
			want := tc.tz
			if want == "" {
				want = "UTC"
			}
			require.Equal(t, want, e.Location().String())
		})
	}
}

func TestNext(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	tests := []struct {
		name     string
		expr, tz string
		after    time.Time
		want     []time.Time // successive slots: Next(after), Next(that), ...
	}{
		{
			name: "five fields", expr: "*/15 * * * *", after: utcAt(2026, 5, 4, 12, 7, 30),
			want: []time.Time{utcAt(2026, 5, 4, 12, 15, 0), utcAt(2026, 5, 4, 12, 30, 0), utcAt(2026, 5, 4, 12, 45, 0), utcAt(2026, 5, 4, 13, 0, 0)},
		},
		{
			name: "strictly after a slot", expr: "*/15 * * * *", after: utcAt(2026, 5, 4, 12, 15, 0),
			want: []time.Time{utcAt(2026, 5, 4, 12, 30, 0)},
		},
		{
			name: "sub-second after", expr: "*/15 * * * *", after: utcAt(2026, 5, 4, 12, 14, 59).Add(999 * time.Millisecond),
			want: []time.Time{utcAt(2026, 5, 4, 12, 15, 0)},
		},
		{
			name: "weekdays", expr: "0 9 * * 1-5", after: utcAt(2026, 1, 9, 10, 0, 0), // a Friday
			want: []time.Time{utcAt(2026, 1, 12, 9, 0, 0), utcAt(2026, 1, 13, 9, 0, 0)},
		},
		{
			name: "day of month or day of week", expr: "0 0 13 * 5", after: utcAt(2026, 2, 10, 0, 0, 0),
			want: []time.Time{utcAt(2026, 2, 13, 0, 0, 0), utcAt(2026, 2, 20, 0, 0, 0), utcAt(2026, 2, 27, 0, 0, 0), utcAt(2026, 3, 6, 0, 0, 0), utcAt(2026, 3, 13, 0, 0, 0)},
		},
		{
			name: "leap day", expr: "0 0 29 2 *", after: utcAt(2026, 1, 1, 0, 0, 0),
			want: []time.Time{utcAt(2028, 2, 29, 0, 0, 0), utcAt(2032, 2, 29, 0, 0, 0)},
		},
		{
			name: "leap day across 2100", expr: "0 0 29 2 *", after: utcAt(2097, 1, 1, 0, 0, 0),
			want: []time.Time{utcAt(2104, 2, 29, 0, 0, 0)},
		},
		{
			name: "six fields", expr: "*/20 * * * * *", after: utcAt(2026, 5, 4, 12, 0, 0),
			want: []time.Time{utcAt(2026, 5, 4, 12, 0, 20), utcAt(2026, 5, 4, 12, 0, 40), utcAt(2026, 5, 4, 12, 1, 0)},
		},
		{
			name: "six fields exact", expr: "30 0 12 1 * *", after: utcAt(2026, 1, 1, 12, 0, 30),
			want: []time.Time{utcAt(2026, 2, 1, 12, 0, 30), utcAt(2026, 3, 1, 12, 0, 30)},
		},
		{name: "@yearly", expr: "@yearly", after: utcAt(2026, 5, 4, 12, 0, 0), want: []time.Time{utcAt(2027, 1, 1, 0, 0, 0), utcAt(2028, 1, 1, 0, 0, 0)}},
		{name: "@annually", expr: "@annually", after: utcAt(2026, 5, 4, 12, 0, 0), want: []time.Time{utcAt(2027, 1, 1, 0, 0, 0)}},
		{name: "@monthly", expr: "@monthly", after: utcAt(2026, 5, 4, 12, 0, 0), want: []time.Time{utcAt(2026, 6, 1, 0, 0, 0), utcAt(2026, 7, 1, 0, 0, 0)}},
		{name: "@weekly", expr: "@weekly", after: utcAt(2026, 5, 4, 12, 0, 0), want: []time.Time{utcAt(2026, 5, 10, 0, 0, 0), utcAt(2026, 5, 17, 0, 0, 0)}},
		{name: "@daily", expr: "@daily", after: utcAt(2026, 5, 4, 12, 0, 0), want: []time.Time{utcAt(2026, 5, 5, 0, 0, 0), utcAt(2026, 5, 6, 0, 0, 0)}},
		{name: "@midnight", expr: "@midnight", after: utcAt(2026, 5, 4, 12, 0, 0), want: []time.Time{utcAt(2026, 5, 5, 0, 0, 0)}},
		{name: "@hourly", expr: "@hourly", after: utcAt(2026, 5, 4, 12, 0, 0), want: []time.Time{utcAt(2026, 5, 4, 13, 0, 0), utcAt(2026, 5, 4, 14, 0, 0)}},
		{
			name: "@daily in a zone", expr: "@daily", tz: "America/New_York", after: utcAt(2026, 5, 4, 12, 0, 0),
			want: []time.Time{utcAt(2026, 5, 5, 4, 0, 0)},
		},
		{
			name: "@every 30s aligned", expr: "@every 30s", after: utcAt(2026, 5, 4, 12, 0, 7),
			want: []time.Time{utcAt(2026, 5, 4, 12, 0, 30), utcAt(2026, 5, 4, 12, 1, 0), utcAt(2026, 5, 4, 12, 1, 30)},
		},
		{
			name: "@every 30s from a slot", expr: "@every 30s", after: utcAt(2026, 5, 4, 12, 0, 30),
			want: []time.Time{utcAt(2026, 5, 4, 12, 1, 0)},
		},
		{
			// 2026-01-02T00:00:00Z is Unix 1767312000 = 4207885*420 + 300:
			// the next multiple of 7 minutes is 2 minutes later.
			name: "@every 7m aligned to the epoch", expr: "@every 7m", after: utcAt(2026, 1, 2, 0, 0, 0),
			want: []time.Time{utcAt(2026, 1, 2, 0, 2, 0), utcAt(2026, 1, 2, 0, 9, 0), utcAt(2026, 1, 2, 0, 16, 0)},
		},
		{
			name: "@every ignores the zone", expr: "@every 1h", tz: "Asia/Kathmandu", after: utcAt(2026, 5, 4, 12, 10, 0),
			want: []time.Time{utcAt(2026, 5, 4, 13, 0, 0), utcAt(2026, 5, 4, 14, 0, 0)},
		},
		{
			name: "@every before the epoch", expr: "@every 7m", after: time.Unix(-421, 0),
			want: []time.Time{time.Unix(-420, 0).UTC(), time.Unix(0, 0).UTC(), time.Unix(420, 0).UTC()},
		},
		{
			name: "New York 09:00 across spring forward", expr: "0 9 * * *", tz: "America/New_York", after: utcAt(2026, 3, 6, 0, 0, 0),
			want: []time.Time{utcAt(2026, 3, 6, 14, 0, 0), utcAt(2026, 3, 7, 14, 0, 0), utcAt(2026, 3, 8, 13, 0, 0), utcAt(2026, 3, 9, 13, 0, 0)},
		},
		{
			name: "New York 09:00 across fall back", expr: "0 9 * * *", tz: "America/New_York", after: utcAt(2026, 10, 31, 0, 0, 0),
			want: []time.Time{utcAt(2026, 10, 31, 13, 0, 0), utcAt(2026, 11, 1, 14, 0, 0), utcAt(2026, 11, 2, 14, 0, 0)},
		},
		{
			name: "Kathmandu +05:45", expr: "0 9 * * *", tz: "Asia/Kathmandu", after: utcAt(2026, 5, 4, 0, 0, 0),
			want: []time.Time{utcAt(2026, 5, 4, 3, 15, 0), utcAt(2026, 5, 5, 3, 15, 0)},
		},
		{
			// 02:30 does not exist on 2026-03-08 in New York: no fire that day.
			name: "spring forward: nonexistent time skipped", expr: "30 2 * * *", tz: "America/New_York",
			after: time.Date(2026, 3, 7, 0, 0, 0, 0, ny),
			want:  []time.Time{utcAt(2026, 3, 7, 7, 30, 0), utcAt(2026, 3, 9, 6, 30, 0), utcAt(2026, 3, 10, 6, 30, 0)},
		},
		{
			name: "spring forward: every 30 minutes", expr: "*/30 * * * *", tz: "America/New_York", after: utcAt(2026, 3, 8, 5, 45, 0),
			want: []time.Time{utcAt(2026, 3, 8, 6, 0, 0), utcAt(2026, 3, 8, 6, 30, 0), utcAt(2026, 3, 8, 7, 0, 0), utcAt(2026, 3, 8, 7, 30, 0)},
		},
		{
			// 01:00 does not exist on 2026-03-29 in London, but every UTC hour
			// still has its (renamed) hour.
			name: "spring forward: hourly in London", expr: "0 * * * *", tz: "Europe/London", after: utcAt(2026, 3, 28, 23, 30, 0),
			want: []time.Time{utcAt(2026, 3, 29, 0, 0, 0), utcAt(2026, 3, 29, 1, 0, 0), utcAt(2026, 3, 29, 2, 0, 0)},
		},
		{
			// 01:30 happens twice on 2026-11-01 in New York (EDT, then EST):
			// only the first occurrence is a slot.
			name: "fall back: repeated time fires once", expr: "30 1 * * *", tz: "America/New_York",
			after: time.Date(2026, 10, 31, 12, 0, 0, 0, ny),
			want:  []time.Time{utcAt(2026, 11, 1, 5, 30, 0), utcAt(2026, 11, 2, 6, 30, 0), utcAt(2026, 11, 3, 6, 30, 0)},
		},
		{
			name: "fall back: from inside the repeated hour", expr: "30 1 * * *", tz: "America/New_York",
			after: utcAt(2026, 11, 1, 6, 0, 0), // 01:00 EST, the second 01:00
			want:  []time.Time{utcAt(2026, 11, 2, 6, 30, 0)},
		},
		{
			name: "fall back: every 30 minutes", expr: "*/30 * * * *", tz: "America/New_York", after: utcAt(2026, 11, 1, 4, 45, 0),
			want: []time.Time{utcAt(2026, 11, 1, 5, 0, 0), utcAt(2026, 11, 1, 5, 30, 0), utcAt(2026, 11, 1, 7, 0, 0), utcAt(2026, 11, 1, 7, 30, 0)},
		},
		{
			// Lord Howe Island falls back 30 minutes (02:00 +11 -> 01:30 +10:30)
			// on 2026-04-05: 01:45 repeats and fires once.
			name: "fall back by 30 minutes", expr: "45 1 * * *", tz: "Australia/Lord_Howe", after: utcAt(2026, 4, 4, 0, 0, 0),
			want: []time.Time{utcAt(2026, 4, 4, 14, 45, 0), utcAt(2026, 4, 5, 15, 15, 0)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := mustParse(t, tc.expr, tc.tz)
			after := tc.after
			for i, want := range tc.want {
				got := e.Next(after)
				require.True(t, want.Equal(got), "slot %d after %s: want %s, got %s", i, after.UTC(), want.UTC(), got)
				require.Equal(t, time.UTC, got.Location())
				require.Equal(t, got, NextAfter(e, after))
				after = got
			}
		})
	}
}

// TestRobfigFallBackFiresTwice pins the behaviour of the library that this
// package corrects: on its own, robfig fires a repeated local time twice.
func TestRobfigFallBackFiresTwice(t *testing.T) {
	sched, err := parser.Parse("30 1 * * *")
	require.NoError(t, err)
	spec := *sched.(*robfig.SpecSchedule)
	spec.Location = mustZone(t, "America/New_York")
	first := spec.Next(utcAt(2026, 11, 1, 0, 0, 0))
	second := spec.Next(first)
	require.True(t, first.Equal(utcAt(2026, 11, 1, 5, 30, 0)))
	require.True(t, second.Equal(utcAt(2026, 11, 1, 6, 30, 0)))

	e := mustParse(t, "30 1 * * *", "America/New_York")
	require.True(t, e.Next(first).Equal(utcAt(2026, 11, 2, 6, 30, 0)))
}

func TestNextNone(t *testing.T) {
	// Parse refuses expressions that never fire; build one directly to check
	// that Next gives up after its horizon instead of looping.
	sched, err := parser.Parse("0 0 30 2 *")
	require.NoError(t, err)
	spec := *sched.(*robfig.SpecSchedule)
	spec.Location = time.UTC
	for _, tz := range []string{"", "America/New_York"} {
		e := &Expr{src: "0 0 30 2 *", tz: tz, spec: &spec}
		e.loc, err = loadZone(tz)
		require.NoError(t, err)
		require.True(t, e.Next(utcAt(2026, 1, 1, 0, 0, 0)).IsZero(), tz)
		_, ok := e.prev(utcAt(2026, 1, 1, 0, 0, 0).Unix(), utcAt(1900, 1, 1, 0, 0, 0).Unix())
		require.False(t, ok)
		n, exact := e.count(utcAt(1900, 1, 1, 0, 0, 0).Unix(), utcAt(2026, 1, 1, 0, 0, 0).Unix())
		require.True(t, exact)
		require.Zero(t, n)
	}
}
