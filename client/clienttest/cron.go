package clienttest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file reads cron expressions the way the cluster does: five fields
// (minute hour day-of-month month day-of-week), an optional leading seconds
// field, the descriptors @yearly, @annually, @monthly, @weekly, @daily,
// @midnight and @hourly, and @every DURATION (whole seconds, at the
// multiples of DURATION since the Unix epoch). Fire times are wall-clock
// times in the schedule's IANA zone; a wall-clock time that a clock change
// skips does not fire.

// errUnknownZone marks an error about the zone rather than the expression.
var errUnknownZone = errors.New("unknown time zone")

// cronExpr is a parsed expression bound to its zone.
type cronExpr struct {
	loc   *time.Location
	every int64 // seconds of an @every expression, 0 otherwise
	// Bit sets of the allowed values of each field.
	second, minute, hour, dom, month, dow uint64
	// domStar and dowStar are set when the day field is "*" or "?": a day
	// then matches when both day fields match, otherwise when either does.
	domStar, dowStar bool
}

// cronField describes one field of an expression.
type cronField struct {
	name     string
	min, max int
	names    map[string]int
}

var (
	secondField = cronField{name: "second", max: 59}
	minuteField = cronField{name: "minute", max: 59}
	hourField   = cronField{name: "hour", max: 23}
	domField    = cronField{name: "day-of-month", min: 1, max: 31}
	monthField  = cronField{name: "month", min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}}
	dowField = cronField{name: "day-of-week", max: 6, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}}
)

var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// parseCron parses expr for zone tz ("" is UTC). Errors about the zone wrap
// errUnknownZone.
func parseCron(expr, tz string) (*cronExpr, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("invalid cron expression %q: %s", expr, fmt.Sprintf(format, args...))
	}
	e := &cronExpr{}
	s := strings.TrimSpace(expr)
	fields := strings.Fields(s)
	switch {
	case s == "":
		return nil, bad("empty expression")
	case strings.HasPrefix(strings.ToUpper(s), "CRON_TZ=") || strings.HasPrefix(strings.ToUpper(s), "TZ="):
		return nil, bad("a zone prefix is not allowed here; give the zone in the tz field")
	case fields[0] == "@every":
		if len(fields) != 2 {
			return nil, bad(`@every takes one duration, e.g. "@every 30s"`)
		}
		d, err := time.ParseDuration(fields[1])
		switch {
		case err != nil:
			return nil, bad("@every: invalid duration %q", fields[1])
		case d < time.Second:
			return nil, bad("@every interval %s is shorter than 1s", d)
		case d%time.Second != 0:
			return nil, bad("@every interval %s is not a whole number of seconds", d)
		}
		e.every = int64(d / time.Second)
	case strings.HasPrefix(s, "@"):
		full, ok := descriptors[strings.ToLower(s)]
		if !ok || len(fields) != 1 {
			return nil, bad("unknown descriptor (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every DURATION)")
		}
		if err := e.setFields(strings.Fields(full)); err != nil {
			return nil, bad("%v", err)
		}
	case len(fields) == 5:
		if err := e.setFields(append([]string{"0"}, fields...)); err != nil {
			return nil, bad("%v", err)
		}
	case len(fields) == 6:
		if err := e.setFields(fields); err != nil {
			return nil, bad("%v", err)
		}
	default:
		return nil, bad("expected 5 or 6 fields")
	}
	loc, err := loadZone(tz)
	if err != nil {
		return nil, err
	}
	e.loc = loc
	if e.every == 0 && e.next(time.Unix(0, 0)).IsZero() {
		return nil, bad("it never fires (no selected month has the selected day of month)")
	}
	return e, nil
}

// loadZone loads an IANA zone; "" and "UTC" are UTC. "Local" is refused: it
// would differ from machine to machine.
func loadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	if tz == "Local" {
		return nil, fmt.Errorf(`%w %q: name an IANA zone such as "Europe/Paris"`, errUnknownZone, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%w %q", errUnknownZone, tz)
	}
	return loc, nil
}

// setFields reads the six fields second to day-of-week.
func (e *cronExpr) setFields(f []string) error {
	specs := []struct {
		field cronField
		bits  *uint64
		star  *bool
	}{
		{secondField, &e.second, nil},
		{minuteField, &e.minute, nil},
		{hourField, &e.hour, nil},
		{domField, &e.dom, &e.domStar},
		{monthField, &e.month, nil},
		{dowField, &e.dow, &e.dowStar},
	}
	for i, sp := range specs {
		bits, star, err := sp.field.parse(f[i])
		if err != nil {
			return fmt.Errorf("%s field %q: %w", sp.field.name, f[i], err)
		}
		*sp.bits = bits
		if sp.star != nil {
			*sp.star = star
		}
	}
	return nil
}

// parse reads one field: a comma-separated list of "*", "?", N, N-M, with an
// optional "/STEP" ("N/STEP" runs from N to the maximum). star reports a
// field that is "*" or "?" without a step.
func (f cronField) parse(s string) (bits uint64, star bool, err error) {
	for part := range strings.SplitSeq(s, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			if step, err = strconv.Atoi(stepText); err != nil || step <= 0 {
				return 0, false, fmt.Errorf("bad step %q", stepText)
			}
		}
		var lo, hi int
		switch {
		case rng == "*" || rng == "?":
			lo, hi = f.min, f.max
			star = step == 1
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			if lo, err = f.value(a); err != nil {
				return 0, false, err
			}
			if hi, err = f.value(b); err != nil {
				return 0, false, err
			}
		default:
			if lo, err = f.value(rng); err != nil {
				return 0, false, err
			}
			hi = lo
			if hasStep {
				hi = f.max
			}
		}
		if lo > hi {
			return 0, false, fmt.Errorf("range %d-%d is backwards", lo, hi)
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, star, nil
}

// value reads one number or name of the field, checking its range.
func (f cronField) value(s string) (int, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("value %d out of range [%d, %d]", v, f.min, f.max)
	}
	return v, nil
}

// cronHorizon bounds the search for the next fire (leap days included).
const cronHorizon = 9 * 366

// next returns the first fire strictly after after, in UTC, or the zero
// time when there is none within the horizon.
func (e *cronExpr) next(after time.Time) time.Time {
	if e.every > 0 {
		k := after.Unix()/e.every + 1
		if after.Unix() < 0 && after.Unix()%e.every != 0 {
			k--
		}
		return time.Unix(k*e.every, 0).UTC()
	}
	local := after.In(e.loc)
	day := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, time.UTC)
	for range cronHorizon {
		if e.dayMatches(day) {
			if t, ok := e.firstInDay(day, after); ok {
				return t
			}
		}
		day = day.AddDate(0, 0, 1)
	}
	return time.Time{}
}

func (e *cronExpr) dayMatches(day time.Time) bool {
	if e.month&(1<<uint(day.Month())) == 0 {
		return false
	}
	domOK := e.dom&(1<<uint(day.Day())) != 0
	dowOK := e.dow&(1<<uint(day.Weekday())) != 0
	if e.domStar || e.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// firstInDay returns the first fire of the (wall-clock) day after after.
func (e *cronExpr) firstInDay(day, after time.Time) (time.Time, bool) {
	for h := range 24 {
		if e.hour&(1<<uint(h)) == 0 {
			continue
		}
		for m := range 60 {
			if e.minute&(1<<uint(m)) == 0 {
				continue
			}
			for s := range 60 {
				if e.second&(1<<uint(s)) == 0 {
					continue
				}
				t := time.Date(day.Year(), day.Month(), day.Day(), h, m, s, 0, e.loc)
				if !t.After(after) {
					continue
				}
				// A wall-clock time skipped by a clock change does not fire.
				if t.Hour() != h || t.Minute() != m || t.Day() != day.Day() {
					continue
				}
				return t.UTC(), true
			}
		}
	}
	return time.Time{}, false
}
