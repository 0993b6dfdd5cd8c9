package checker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// The run starts on a whole 2s boundary; history time t is wall start+t.
const cronStart = int64(1_000_000) * int64(time.Second)

type cronHist struct {
	hb
	tasks []history.TaskState
}

func sec(s float64) int64 { return int64(s * float64(time.Second)) }

func (c *cronHist) at(t int64) { c.t = t - int64(time.Millisecond) }

func (c *cronHist) fire(slot float64, id string) {
	c.tasks = append(c.tasks, history.TaskState{ID: id, Pool: workload.CronPool, Key: "k" + id, Status: "succeeded",
		Schedule: "cron-1", Slot: cronStart + sec(slot)})
}

func (c *cronHist) finish(pauseAt float64, lastFire float64, fires, skipped uint64) []history.Op {
	c.at(sec(pauseAt))
	c.call("c8", workload.CronPause, &history.Value{Schedule: "cron-1"}, history.OK, &history.Value{Schedule: "cron-1", Paused: ptr(true)})
	c.call("final", workload.FinalTasks, nil, history.OK, &history.Value{Tasks: c.tasks})
	c.call("final", workload.FinalSchedules, nil, history.OK, &history.Value{Schedules: []history.ScheduleState{{
		Name: "cron-1", Cron: "@every 2s", Paused: true, LastFire: cronStart + sec(lastFire), Fires: fires, Skipped: skipped,
	}}})
	return c.ops
}

func newCron() *cronHist {
	c := &cronHist{}
	c.call("c8", workload.CronAdd, &history.Value{Schedule: "cron-1", Cron: "@every 2s", Pool: workload.CronPool}, history.OK, &history.Value{Schedule: "cron-1"})
	return c
}

func cronParams() Params { return Params{StartUnixNano: cronStart} }

func TestCronCleanHistoryIsValid(t *testing.T) {
	c := newCron()
	c.fire(2, "a")
	c.fire(4, "b")
	c.fire(6, "c")
	c.fire(10, "e") // slot 8 skipped (overlap)
	r := Cron(c.finish(11, 10, 4, 1), cronParams())
	require.Equal(t, Valid, r.Valid, "%+v", r)
}

func TestCronAnomalies(t *testing.T) {
	tests := []struct {
		name  string
		build func() []history.Op
		inv   string
	}{
		{"two tasks for one slot", func() []history.Op {
			c := newCron()
			c.fire(2, "a")
			c.fire(4, "b")
			c.fire(4, "b2")
			c.fire(6, "c")
			c.fire(8, "d")
			return c.finish(9, 8, 5, 0)
		}, "C1"},
		{"silent gap", func() []history.Op {
			c := newCron()
			c.fire(2, "a")
			c.fire(4, "b")
			c.fire(10, "e")
			return c.finish(11, 10, 3, 0)
		}, "C2"},
		{"recorded fire without its task", func() []history.Op {
			c := newCron()
			c.fire(2, "a")
			c.fire(4, "b")
			return c.finish(5, 4, 3, 0)
		}, "C2"},
		{"schedule stopped firing", func() []history.Op {
			c := newCron()
			c.fire(2, "a")
			c.fire(4, "b")
			return c.finish(30, 4, 2, 0)
		}, "C2"},
		{"off-grid slot", func() []history.Op {
			c := newCron()
			c.fire(2, "a")
			c.fire(3, "x")
			c.fire(4, "b")
			return c.finish(5, 4, 3, 0)
		}, "C3"},
		{"fire while definitely paused", func() []history.Op {
			c := newCron()
			c.fire(2, "a")
			c.at(sec(3))
			c.call("c8", workload.CronPause, &history.Value{Schedule: "cron-1"}, history.OK, &history.Value{Schedule: "cron-1", Paused: ptr(true)})
			c.fire(20, "p")
			c.at(sec(40))
			c.call("c8", workload.CronResume, &history.Value{Schedule: "cron-1"}, history.OK, &history.Value{Schedule: "cron-1", Paused: ptr(false)})
			c.fire(42, "q")
			return c.finish(43, 42, 3, 18)
		}, "C3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Cron(tc.build(), cronParams())
			require.Equal(t, Invalid, r.Valid, "%+v", r)
			require.True(t, hasInvariant(r, tc.inv), "want %s, got %v: %+v", tc.inv, r.AnomalyCount, r.Anomalies)
		})
	}
}

func TestCronWorkerSawTwoTasksForOneSlot(t *testing.T) {
	h := &hb{}
	for _, id := range []string{"a", "b"} {
		h.add("w4", history.OK, "grant", &history.Value{Pool: workload.CronPool, ID: id, Schedule: "cron-1", Slot: cronStart + sec(2)})
	}
	r := Cron(h.ops, cronParams())
	require.Equal(t, Invalid, r.Valid)
	require.True(t, hasInvariant(r, "C1"))
}

// Pause spans are placed by the wall clock recorded with each op, not by
// start + monotonic time: when the machine's wall clock ran ahead of the
// monotonic one, a slot fired just before the pause (by the wall clock)
// lies after start + the pause's monotonic time, and is no anomaly.
func TestCronPauseSpansUseTheRecordedWallClock(t *testing.T) {
	build := func(drift int64) []history.Op {
		c := newCron()
		c.fire(2, "a")
		c.fire(4, "b")
		c.fire(6, "c")
		c.fire(8, "d")
		c.fire(20, "e") // fired at wall 20, when start + t was 7
		n := len(c.ops)
		ops := c.finish(7, 20, 5, 5)
		for i := range ops {
			ops[i].Wall = cronStart + ops[i].Time
			if i >= n { // the wall clock was stepped before the pause
				ops[i].Wall += drift
			}
		}
		return ops
	}
	r := Cron(build(sec(14)), cronParams())
	require.False(t, hasInvariant(r, "C3"), "%+v", r.Anomalies)
	r = Cron(build(0), cronParams())
	require.True(t, hasInvariant(r, "C3"), "without the drift, slot 20 is inside the pause: %+v", r.Anomalies)
}
