// Package cron turns a recurring schedule's expression and time zone into
// fire instants ("slots") and plans which due slots a schedule fires.
//
// Expressions are parsed by github.com/robfig/cron/v3: the standard five
// fields (minute hour day-of-month month day-of-week), an optional leading
// seconds field, and the descriptors @yearly (@annually), @monthly, @weekly,
// @daily (@midnight), @hourly and @every DURATION. The zone is an IANA name;
// "" means UTC.
//
// The slots of an expression are a fixed set of instants that depends only on
// the expression and the zone, never on when somebody looks:
//
//   - A field expression matches local wall-clock times in the zone. A slot is
//     the instant at which the zone's wall clock shows a matching time.
//   - A local time that does not exist (skipped by a forward clock change,
//     e.g. 02:30 on a spring-forward night in America/New_York) is not a slot:
//     that day has no fire for it. Fires are never moved to another time.
//   - A local time that occurs twice (a backward clock change, e.g. 01:30 on a
//     fall-back night) is a slot only at its first occurrence. This applies
//     to every expression alike: "*/30 * * * *" fires at 01:00 and 01:30
//     daylight time and next at 02:00 standard time.
//   - @every d fires at the instants k*d since the Unix epoch (k an integer),
//     whatever the zone: "@every 7m" fires at the multiples of seven minutes
//     of Unix time, not seven minutes after the schedule was made.
//
// Slots are whole seconds. All instants this package returns are in UTC.
//
// The package is part of the deterministic core: it reads no clock, uses no
// randomness and starts no goroutines. Slot computation uses the time zone
// database of the running process, so nodes should ship the same tzdata; the
// slots a leader decides are recorded in the log, which keeps replicas
// consistent even if they do not.
package cron

import (
	"errors"
	"fmt"
	"strings"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// ErrInvalidExpr is wrapped by every error that reports a malformed cron
// expression.
var ErrInvalidExpr = errors.New("invalid cron expression")

// ErrUnknownZone is wrapped by every error that reports an unusable time zone
// name.
var ErrUnknownZone = errors.New("unknown time zone")

// parser accepts five fields, an optional leading seconds field, and
// descriptors. @every is handled by this package (see Parse).
var parser = robfig.NewParser(robfig.SecondOptional | robfig.Minute | robfig.Hour |
	robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)

// fieldParsers parse one field each, in the order of a six-field expression.
// They are used only to name the field an error is about.
var fieldParsers = []struct {
	name string
	p    robfig.Parser
}{
	{"second", robfig.NewParser(robfig.Second)},
	{"minute", robfig.NewParser(robfig.Minute)},
	{"hour", robfig.NewParser(robfig.Hour)},
	{"day-of-month", robfig.NewParser(robfig.Dom)},
	{"month", robfig.NewParser(robfig.Month)},
	{"day-of-week", robfig.NewParser(robfig.Dow)},
}

// Expr is a parsed schedule expression bound to its time zone. It is
// immutable and safe for concurrent use.
type Expr struct {
	src  string
	tz   string
	loc  *time.Location
	step int64 // @every interval in seconds; 0 for a field expression

	// spec holds the field bit sets. Its Location is UTC: it is matched
	// against "naive" wall-clock times (the local clock reading written as
	// if it were UTC), and this package maps them to instants itself.
	spec *robfig.SpecSchedule
}

// Parse parses a cron expression for the IANA time zone tz ("" = UTC).
//
// Errors wrap ErrInvalidExpr or ErrUnknownZone and read, for example,
//
//	invalid cron expression "* * *": expected 5 or 6 fields
//	unknown time zone "Mars/Base"
//
// A "CRON_TZ=" or "TZ=" prefix inside expr is refused: the zone belongs in
// tz. An expression that can never fire (such as "0 0 30 2 *", February 30)
// is refused too. @every takes a Go duration (time.ParseDuration) of at least
// one second and a whole number of seconds ("@every 1m30s", not
// "@every 1.5s").
func Parse(expr, tz string) (*Expr, error) {
	e := &Expr{src: expr, tz: tz}
	if err := e.parseExpr(); err != nil {
		return nil, err
	}
	loc, err := loadZone(tz)
	if err != nil {
		return nil, err
	}
	e.loc = loc
	return e, nil
}

func (e *Expr) parseExpr() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidExpr, e.src, fmt.Sprintf(format, args...))
	}
	s := strings.TrimSpace(e.src)
	if s == "" {
		return bad("empty expression")
	}
	upper := strings.ToUpper(s)
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if strings.HasPrefix(upper, prefix) {
			return bad("a %s prefix is not allowed here; give the zone in the tz field", prefix)
		}
	}
	fields := strings.Fields(s)
	if fields[0] == "@every" {
		if len(fields) != 2 {
			return bad("@every takes one duration, e.g. \"@every 30s\"")
		}
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			return bad("@every: invalid duration %q", fields[1])
		}
		if d < time.Second {
			return bad("@every interval %s is shorter than 1s", d)
		}
		if d%time.Second != 0 {
			return bad("@every interval %s is not a whole number of seconds", d)
		}
		e.step = int64(d / time.Second)
		return nil
	}
	if strings.HasPrefix(s, "@") {
		if len(fields) != 1 {
			return bad("a descriptor takes no fields")
		}
		sched, err := parser.Parse(s)
		if err != nil {
			return bad("unknown descriptor (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every DURATION)")
		}
		return e.setSpec(sched, bad)
	}
	if len(fields) != 5 && len(fields) != 6 {
		return bad("expected 5 or 6 fields")
	}
	sched, err := parser.Parse(strings.Join(fields, " "))
	if err != nil {
		return bad("%s", fieldError(fields, err))
	}
	return e.setSpec(sched, bad)
}

// fieldError names the first field of fields that does not parse, falling
// back to the whole-expression error.
func fieldError(fields []string, whole error) string {
	offset := 0
	if len(fields) == 5 {
		offset = 1 // no seconds field
	}
	for i, f := range fields {
		fp := fieldParsers[i+offset]
		if _, err := fp.p.Parse(f); err != nil {
			return fmt.Sprintf("%s field %q: %v", fp.name, f, err)
		}
	}
	return whole.Error()
}

func (e *Expr) setSpec(sched robfig.Schedule, bad func(string, ...any) error) error {
	spec, ok := sched.(*robfig.SpecSchedule)
	if !ok {
		return bad("unsupported schedule type %T", sched)
	}
	c := *spec
	c.Location = time.UTC
	e.spec = &c
	if neverFires(&c) {
		return bad("it never fires (no selected month has the selected day of month)")
	}
	return nil
}

// loadZone loads an IANA zone; "" and "UTC" are UTC. "Local" is refused: it
// would differ from node to node.
func loadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	if tz == "Local" {
		return nil, fmt.Errorf("%w %q: name an IANA zone such as \"Europe/Paris\"", ErrUnknownZone, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownZone, tz)
	}
	return loc, nil
}

// String returns the expression as it was given to Parse.
func (e *Expr) String() string { return e.src }

// TZ returns the zone name as it was given to Parse ("" = UTC).
func (e *Expr) TZ() string { return e.tz }

// Location returns the zone the expression is evaluated in.
func (e *Expr) Location() *time.Location { return e.loc }

// Every returns the interval of an @every expression, or 0 for any other
// expression.
func (e *Expr) Every() time.Duration { return time.Duration(e.step) * time.Second }

// NextHorizon bounds the search of Next: if no slot exists within this span
// after the given instant, Next reports none.
const NextHorizon = 100 * 366 * 24 * time.Hour

// Next returns the first slot strictly after after, in UTC, or the zero time
// if there is none within NextHorizon. It depends only on the expression, the
// zone and after (see the package documentation for the DST rules).
func (e *Expr) Next(after time.Time) time.Time {
	lo := after.Unix() + 1 // slots are whole seconds: the first candidate
	u, ok := e.next(lo, lo+int64(NextHorizon/time.Second))
	if !ok {
		return time.Time{}
	}
	return time.Unix(u, 0).UTC()
}

// NextAfter returns the next fire of a schedule whose committed cursor (last
// fire, or creation instant if it never fired) is cursor: e.Next(cursor). It
// is what users are shown as "next_fire".
func NextAfter(e *Expr, cursor time.Time) time.Time { return e.Next(cursor) }
