package cron

import (
	"math"
	"math/bits"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// Slot arithmetic works on Unix seconds (slots are whole seconds).
//
// A zone's history is a sequence of periods of constant UTC offset (Go's
// time.Time.ZoneBounds). Inside one period the local wall clock is the
// instant plus the offset, so the slots of the period are the instants whose
// "naive" wall time (instant + offset, read as UTC) matches the fields. Local
// times skipped by a forward change belong to no period and so are never
// slots. After a backward change by d, the first d seconds of the new period
// repeat wall times of the previous one; they are left out, so a repeated
// local time is a slot only at its first occurrence.
//
// Forward search uses robfig's SpecSchedule.Next on naive times (in UTC,
// where it has no DST behaviour of its own). Backward search and counting
// use the same field bit sets directly, so that long spans cost work per
// day, never per slot.

const secondsPerDay = 86400

// maxSpanDays bounds counting and backward search: a span longer than this
// (about 2,870 years) is not counted exactly (see count).
const maxSpanDays = 1 << 20

// starBit is robfig's marker for a field given as "*" or "?".
const starBit = 1 << 63

// period is one stretch of constant UTC offset of a zone, in Unix seconds.
type period struct {
	off      int64 // UTC offset, seconds
	first    int64 // first instant that can hold a slot (repeats excluded)
	hasFirst bool  // false: the period reaches back to the beginning of time
	end      int64 // first instant after the period
	hasEnd   bool  // false: the period goes on forever
	start    int64 // first instant of the period (when hasFirst)
}

// periodAt returns the period of e's zone that contains instant u.
func (e *Expr) periodAt(u int64) period {
	t := time.Unix(u, 0).In(e.loc)
	_, off := t.Zone()
	p := period{off: int64(off)}
	start, end := t.ZoneBounds()
	if !start.IsZero() {
		p.hasFirst = true
		p.start = min(start.Unix(), u)
		p.first = p.start
		_, prevOff := time.Unix(p.start-1, 0).In(e.loc).Zone()
		if back := int64(prevOff) - int64(off); back > 0 {
			p.first += back // wall times already shown by the previous period
		}
	}
	if !end.IsZero() {
		p.hasEnd = true
		p.end = end.Unix()
		if p.end <= u {
			p.end = e.repairEnd(u, off)
		}
	}
	return p
}

// repairEnd returns an end for the period containing u when ZoneBounds
// reported one at or before u. Beyond a zone's last listed transition, Go
// derives the bounds from the zone's rule, and away from a transition it
// reports the start and end of the (UTC) year, computed as 365 days: in a
// leap year the "end" is December 31, before the instants it is asked about.
// The offset really holds until the next year then; anything else falls back
// to a one-second period, which is correct if slow.
func (e *Expr) repairEnd(u int64, off int) int64 {
	y := time.Unix(u, 0).UTC().Year()
	end := time.Date(y+1, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
	if _, o := time.Unix(end-1, 0).In(e.loc).Zone(); o == off {
		if s, _ := time.Unix(end-1, 0).In(e.loc).ZoneBounds(); !s.IsZero() && s.Unix() <= u {
			return end
		}
	}
	return u + 1
}

// next returns the first slot u with lo <= u < limit.
func (e *Expr) next(lo, limit int64) (int64, bool) {
	if e.step > 0 {
		u := ceilDiv(lo, e.step) * e.step
		return u, u < limit
	}
	u := lo
	for u < limit {
		p := e.periodAt(u)
		from := u
		if p.hasFirst && p.first > from {
			from = p.first
		}
		to := limit
		if p.hasEnd && p.end < to {
			to = p.end
		}
		if from < to {
			if w, ok := e.nextNaive(from+p.off, to+p.off); ok {
				return w - p.off, true
			}
		}
		if !p.hasEnd {
			break
		}
		u = p.end
	}
	return 0, false
}

// nextNaive returns the first matching naive wall time w with
// lo <= w < limit, using robfig's search (which looks at most five years
// ahead per call).
func (e *Expr) nextNaive(lo, limit int64) (int64, bool) {
	t := time.Unix(lo, 0).UTC().Add(-time.Nanosecond)
	for {
		r := e.spec.Next(t)
		if !r.IsZero() {
			w := r.Unix()
			return w, w < limit
		}
		// Nothing in the five years after t: resume from there.
		resume := time.Date(t.Year()+5, time.January, 1, 0, 0, 0, 0, time.UTC)
		if resume.Unix() >= limit {
			return 0, false
		}
		t = resume.Add(-time.Nanosecond)
	}
}

// prev returns the last slot u with lo <= u <= hi.
func (e *Expr) prev(hi, lo int64) (int64, bool) {
	if lo > hi {
		return 0, false
	}
	if e.step > 0 {
		u := floorDiv(hi, e.step) * e.step
		return u, u >= lo
	}
	if hi-lo > maxSpanDays*secondsPerDay {
		lo = hi - maxSpanDays*secondsPerDay
	}
	u := hi
	for u >= lo {
		p := e.periodAt(u)
		from := lo
		if p.hasFirst && p.first > from {
			from = p.first
		}
		if from <= u {
			if w, ok := e.prevNaive(u+p.off, from+p.off); ok {
				return w - p.off, true
			}
		}
		if !p.hasFirst {
			break
		}
		u = p.start - 1
	}
	return 0, false
}

// count returns the number of slots u with lo <= u <= hi. exact is false if
// the span exceeds maxSpanDays for a field expression; n then counts only the
// last maxSpanDays of it.
func (e *Expr) count(lo, hi int64) (n uint64, exact bool) {
	if lo > hi {
		return 0, true
	}
	if e.step > 0 {
		return uint64(floorDiv(hi, e.step) - floorDiv(lo-1, e.step)), true
	}
	exact = true
	if hi-lo > maxSpanDays*secondsPerDay {
		lo = hi - maxSpanDays*secondsPerDay
		exact = false
	}
	u := lo
	for u <= hi {
		p := e.periodAt(u)
		from := u
		if p.hasFirst && p.first > from {
			from = p.first
		}
		to := hi
		if p.hasEnd && p.end-1 < to {
			to = p.end - 1
		}
		if from <= to {
			n = satAdd(n, e.countNaive(from+p.off, to+p.off))
		}
		if !p.hasEnd {
			break
		}
		u = p.end
	}
	return n, exact
}

// countNaive counts the matching naive wall times w with lo <= w <= hi.
func (e *Expr) countNaive(lo, hi int64) uint64 {
	f := e.fieldsOf()
	perDay := uint64(bits.OnesCount64(f.hour)) * uint64(bits.OnesCount64(f.minute)) * uint64(bits.OnesCount64(f.sec))
	dLo, dHi := floorDiv(lo, secondsPerDay), floorDiv(hi, secondsPerDay)
	var n uint64
	for d := dLo; d <= dHi; d++ {
		if !f.dayMatches(d) {
			continue
		}
		a, b := int64(0), int64(secondsPerDay-1)
		if d == dLo {
			a = lo - d*secondsPerDay
		}
		if d == dHi {
			b = hi - d*secondsPerDay
		}
		if a == 0 && b == secondsPerDay-1 {
			n = satAdd(n, perDay)
		} else {
			n = satAdd(n, f.todBefore(b+1)-f.todBefore(a))
		}
	}
	return n
}

// prevNaive returns the last matching naive wall time w with lo <= w <= hi.
func (e *Expr) prevNaive(hi, lo int64) (int64, bool) {
	f := e.fieldsOf()
	dLo, dHi := floorDiv(lo, secondsPerDay), floorDiv(hi, secondsPerDay)
	for d := dHi; d >= dLo; d-- {
		if !f.dayMatches(d) {
			continue
		}
		limit := int64(secondsPerDay - 1)
		if d == dHi {
			limit = hi - d*secondsPerDay
		}
		tod, ok := f.lastTOD(limit)
		if !ok {
			continue
		}
		w := d*secondsPerDay + tod
		return w, w >= lo
	}
	return 0, false
}

// fields are robfig's bit sets with the star marker removed.
type fields struct {
	sec, minute, hour, dom, month, dow uint64
	domStar, dowStar                   bool
}

func (e *Expr) fieldsOf() fields {
	s := e.spec
	return fields{
		sec:     s.Second & upTo(59),
		minute:  s.Minute & upTo(59),
		hour:    s.Hour & upTo(23),
		dom:     s.Dom & upTo(31),
		month:   s.Month & upTo(12),
		dow:     s.Dow & upTo(6),
		domStar: s.Dom&starBit != 0,
		dowStar: s.Dow&starBit != 0,
	}
}

// dayMatches reports whether day number d (days since 1970-01-01) matches
// the month, day-of-month and day-of-week fields, with robfig's rule: if
// either day field is "*" both must match, otherwise either may.
func (f fields) dayMatches(d int64) bool {
	t := time.Unix(d*secondsPerDay, 0).UTC()
	_, month, day := t.Date()
	if f.month&(1<<uint(month)) == 0 {
		return false
	}
	domMatch := f.dom&(1<<uint(day)) != 0
	dowMatch := f.dow&(1<<uint(t.Weekday())) != 0
	if f.domStar || f.dowStar {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// todBefore counts the matching times of day (seconds since midnight) below
// tod, 0 <= tod <= 86400.
func (f fields) todBefore(tod int64) uint64 {
	h, m, s := tod/3600, tod%3600/60, tod%60
	nm, ns := uint64(bits.OnesCount64(f.minute)), uint64(bits.OnesCount64(f.sec))
	n := uint64(bits.OnesCount64(f.hour&below(h))) * nm * ns
	if h < 24 && f.hour&(1<<uint(h)) != 0 {
		n += uint64(bits.OnesCount64(f.minute&below(m))) * ns
		if f.minute&(1<<uint(m)) != 0 {
			n += uint64(bits.OnesCount64(f.sec & below(s)))
		}
	}
	return n
}

// lastTOD returns the last matching time of day at or before limit
// (0 <= limit < 86400).
func (f fields) lastTOD(limit int64) (int64, bool) {
	lh, lm, ls := limit/3600, limit%3600/60, limit%60
	for hs := f.hour & upTo(lh); hs != 0; hs &^= 1 << uint(top(hs)) {
		h := top(hs)
		mLimit := int64(59)
		if h == lh {
			mLimit = lm
		}
		for ms := f.minute & upTo(mLimit); ms != 0; ms &^= 1 << uint(top(ms)) {
			m := top(ms)
			sLimit := int64(59)
			if h == lh && m == lm {
				sLimit = ls
			}
			if ss := f.sec & upTo(sLimit); ss != 0 {
				return h*3600 + m*60 + top(ss), true
			}
		}
	}
	return 0, false
}

// neverFires reports whether a field expression has no slot in any year:
// the day of month is restricted (and must match, as day-of-week is "*") to
// days that none of the selected months has.
func neverFires(s *robfig.SpecSchedule) bool {
	if s.Dom&starBit != 0 || s.Dow&starBit == 0 {
		return false // every day, or day-of-week alone can match
	}
	daysIn := [13]uint{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := uint(1); m <= 12; m++ {
		if s.Month&(1<<m) != 0 && s.Dom&upTo(int64(daysIn[m])) != 0 {
			return false
		}
	}
	return true
}

// upTo returns the bits 0..n set (none for n < 0).
func upTo(n int64) uint64 {
	if n < 0 {
		return 0
	}
	if n >= 63 {
		return math.MaxUint64
	}
	return 1<<uint(n+1) - 1
}

// below returns the bits 0..n-1 set.
func below(n int64) uint64 { return upTo(n - 1) }

// top returns the index of the highest set bit of a non-zero x.
func top(x uint64) int64 { return int64(bits.Len64(x) - 1) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}
