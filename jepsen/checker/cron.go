package checker

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// span is a wall-time interval [From, To] in unix ns.
type span struct{ From, To int64 }

type schedInfo struct {
	name       string
	period     int64 // ns
	createFrom int64 // invoke of the first add (wall ns)
	createTo   int64 // ack of the first acked add
	created    bool
	// definite paused spans: from a pause's ack to the next resume's invoke.
	paused []span
	// removedAt: ack of an acked remove (wall ns), 0 when never removed.
	removedAt int64
	// uncertain: an op on the schedule whose outcome is unknown.
	uncertain bool
	// finalPauseInvoke: invoke time of the last pause (the end-of-run one).
	lastPauseInvoke int64
}

func parseEvery(expr string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(expr, "@every ")
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(rest))
	return d, err == nil && d > 0
}

// ClockSkew is the largest clock offset any nemesis operation may have
// caused, from the nemesis ops of a history.
func ClockSkew(ops []history.Op) time.Duration {
	var skew int64
	for _, op := range ops {
		if op.Process == "nemesis" && op.F == "clock" && op.Value != nil {
			skew = max(skew, abs64(op.Value.OffsetMS))
		}
	}
	return time.Duration(skew) * time.Millisecond
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Cron checks the recurring schedules: C1 at most one task per (schedule,
// slot); C2 no silent gap (every grid slot up to the cursor fired or was
// recorded as skipped, every recorded fire has its task, and live
// schedules kept firing); C3 no phantom slot (off-grid, before creation,
// inside a definitely paused span or after removal).
func Cron(ops []history.Op, p Params) *Result {
	r := newResult("cron")
	pairs := history.Pairs(ops)
	// Pause spans and creation times compare with slots, which the nodes
	// stamp from their wall clocks: use the harness's wall clock too.
	start := func(pr history.Pair) int64 { return pr.StartWall(p.StartUnixNano) }
	end := func(pr history.Pair) int64 { return pr.EndWall(p.StartUnixNano) }
	skew := int64(ClockSkew(ops)) + int64(time.Second)

	scheds := map[string]*schedInfo{}
	get := func(name string) *schedInfo {
		s := scheds[name]
		if s == nil {
			s = &schedInfo{name: name}
			scheds[name] = s
		}
		return s
	}
	openPause := map[string]int64{} // schedule -> ack of a pause not yet resumed
	grantsBySlot := map[string]map[string]bool{}
	var grantCount int64
	for _, pr := range pairs {
		v := pr.InvokeValue()
		switch pr.F() {
		case workload.CronAdd:
			s := get(v.Schedule)
			if d, ok := parseEvery(v.Cron); ok {
				s.period = int64(d)
			}
			if !s.created {
				if s.createFrom == 0 {
					s.createFrom = start(pr)
				}
				if pr.Type() == history.OK {
					s.created, s.createTo = true, end(pr)
				}
			}
		case workload.CronPause:
			s := get(v.Schedule)
			s.lastPauseInvoke = start(pr)
			switch pr.Type() {
			case history.OK:
				if _, open := openPause[v.Schedule]; !open {
					openPause[v.Schedule] = end(pr)
				}
			case history.Info:
				s.uncertain = true
			}
		case workload.CronResume:
			s := get(v.Schedule)
			switch pr.Type() {
			case history.OK:
				if from, open := openPause[v.Schedule]; open {
					s.paused = append(s.paused, span{from, start(pr)})
					delete(openPause, v.Schedule)
				}
			case history.Info:
				s.uncertain = true
				delete(openPause, v.Schedule)
			}
		case workload.CronRemove:
			s := get(v.Schedule)
			switch pr.Type() {
			case history.OK:
				if s.removedAt == 0 {
					s.removedAt = end(pr)
				}
			case history.Info:
				s.uncertain = true
			}
		case "grant":
			if v.Pool != workload.CronPool || v.Schedule == "" {
				continue
			}
			grantCount++
			k := fmt.Sprintf("%s@%d", v.Schedule, v.Slot)
			if grantsBySlot[k] == nil {
				grantsBySlot[k] = map[string]bool{}
			}
			grantsBySlot[k][v.ID] = true
		}
	}
	for name, from := range openPause {
		s := get(name)
		s.paused = append(s.paused, span{from, 1<<63 - 1})
	}

	all, finalIdx, haveFinal := finalTasks(pairs)
	fi := []int64{finalIdx}
	var finalScheds []history.ScheduleState
	haveScheds := false
	for _, pr := range pairs {
		if pr.F() == workload.FinalSchedules && pr.Type() == history.OK && pr.Completion.Value != nil {
			finalScheds, haveScheds = pr.Completion.Value.Schedules, true
		}
	}
	r.Counts["schedules"] = int64(len(scheds))
	r.Counts["grants"] = grantCount

	// C1 from what workers saw.
	for k, ids := range grantsBySlot {
		if len(ids) > 1 {
			r.fail("C1", nil, "slot %s was executed as %d different tasks: %v", slotName(k), len(ids), sortedKeys(ids))
		}
	}
	if !haveFinal || !haveScheds {
		r.unknown("no final read of tasks and schedules: C1-C3 decided on worker observations only")
		return r
	}

	bySched := map[string][]history.TaskState{}
	var fires int64
	for _, t := range all {
		if t.Pool != workload.CronPool || t.Schedule == "" {
			continue
		}
		fires++
		bySched[t.Schedule] = append(bySched[t.Schedule], t)
	}
	r.Counts["fire_tasks"] = fires

	// C1 from the final state.
	for name, ts := range bySched {
		seen := map[int64]string{}
		for _, t := range ts {
			if prev, ok := seen[t.Slot]; ok {
				r.fail("C1", fi, "schedule %s slot %s has two tasks: %s (key %s) and %s", name, fmtSlot(t.Slot), prev, t.Key, t.ID)
				continue
			}
			seen[t.Slot] = t.ID
		}
	}

	final := map[string]history.ScheduleState{}
	for _, s := range finalScheds {
		final[s.Name] = s
	}
	var skipped int64
	for _, name := range sortedKeys(scheds) {
		s := scheds[name]
		if s.period <= 0 || !s.created {
			continue
		}
		ts := bySched[name]
		fs, listed := final[name]
		// C3: every fired slot is on the grid, after creation, not in a
		// definitely paused span, not after removal, not past the cursor.
		for _, t := range ts {
			switch {
			case t.Slot%s.period != 0:
				r.fail("C3", fi, "schedule %s fired off-grid slot %s (period %s)", name, fmtSlot(t.Slot), time.Duration(s.period))
			case t.Slot <= s.createFrom-skew:
				r.fail("C3", fi, "schedule %s fired slot %s before it was created (%s)", name, fmtSlot(t.Slot), fmtSlot(s.createFrom))
			case s.removedAt != 0 && t.Slot > s.removedAt+skew:
				r.fail("C3", fi, "schedule %s fired slot %s after it was removed (%s)", name, fmtSlot(t.Slot), fmtSlot(s.removedAt))
			case listed && t.Slot > fs.LastFire:
				r.fail("C3", fi, "schedule %s has a task for slot %s past its cursor %s", name, fmtSlot(t.Slot), fmtSlot(fs.LastFire))
			}
			for _, sp := range s.paused {
				if t.Slot > sp.From+skew && t.Slot < sp.To-skew {
					r.fail("C3", fi, "schedule %s fired slot %s while definitely paused (%s .. %s)", name, fmtSlot(t.Slot), fmtSlot(sp.From), fmtSlotOpen(sp.To))
				}
			}
		}
		if s.removedAt != 0 {
			if listed {
				r.fail("C3", fi, "schedule %s was removed but is still listed", name)
			}
			continue
		}
		if !listed {
			if !s.uncertain {
				r.fail("C2", fi, "schedule %s disappeared although never removed", name)
			}
			continue
		}
		skipped += int64(fs.Skipped)
		// C2: the recorded fires have their tasks.
		if int64(len(ts)) != int64(fs.Fires) {
			inv := "C2"
			if int64(len(ts)) > int64(fs.Fires) {
				inv = "C1"
			}
			r.fail(inv, fi, "schedule %s records %d fires but %d fire tasks exist", name, fs.Fires, len(ts))
		}
		// C2: every grid slot from creation to the cursor fired or was
		// recorded as skipped.
		if fs.LastFire != 0 {
			lo := gridCount(s.createTo+int64(500*time.Millisecond), fs.LastFire, s.period)
			hi := gridCount(s.createFrom-int64(500*time.Millisecond), fs.LastFire, s.period)
			got := int64(fs.Fires + fs.Skipped)
			switch {
			case got < lo:
				r.fail("C2", fi, "schedule %s: %d slots up to %s, only %d fired or skipped: %d slots silently missing", name, lo, fmtSlot(fs.LastFire), got, lo-got)
			case got > hi:
				r.fail("C3", fi, "schedule %s: %d fires and skips recorded but only %d slots exist up to %s", name, got, hi, fmtSlot(fs.LastFire))
			}
		}
		// C2: a schedule that was live until the end-of-run pause kept
		// firing until then.
		if s.lastPauseInvoke != 0 && !s.uncertain {
			livePaused := false
			for _, sp := range s.paused {
				if sp.From < s.lastPauseInvoke-int64(5*time.Second) && sp.To >= s.lastPauseInvoke {
					livePaused = true
				}
			}
			due := s.lastPauseInvoke - s.period - int64(3*time.Second) - skew
			if !livePaused && fs.LastFire < due {
				r.fail("C2", fi, "schedule %s stopped firing: last fire %s, but it was live until %s", name, fmtSlot(fs.LastFire), fmtSlot(s.lastPauseInvoke))
			}
		}
	}
	r.Counts["skipped_slots"] = skipped
	return r
}

// gridCount counts the multiples of period in (from, to].
func gridCount(from, to, period int64) int64 {
	if to <= from {
		return 0
	}
	return floorDiv(to, period) - floorDiv(from, period)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func fmtSlot(ns int64) string {
	if ns == 0 {
		return "none"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000")
}

func fmtSlotOpen(ns int64) string {
	if ns == 1<<63-1 {
		return "end"
	}
	return fmtSlot(ns)
}

func slotName(k string) string {
	name, ns, ok := strings.Cut(k, "@")
	if !ok {
		return k
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return k
	}
	return name + "@" + fmtSlot(n)
}
