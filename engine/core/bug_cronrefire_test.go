//go:build jepsenbug_cronrefire

package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// With the cron re-fire fault, a new leader fires the slot its predecessor
// already fired: two tasks for one (schedule, slot).
func TestBugCronRefireFiresCommittedSlotAgain(t *testing.T) {
	r := newReplica(t)
	cfg := Config{Seed: 1}
	c, err := New(cfg, r.epoch, t0)
	require.NoError(t, err)
	now := t0
	c.AddSchedule(now, 1, ScheduleSpec{Name: "s", Cron: "*/10 * * * * *", Task: fsm.Template{Pool: "p", Kind: "cron"}, Overlap: fsm.OverlapAllow})
	r.commit(c, now)

	slot := t0.Add(10 * time.Second)
	now = slot.Add(time.Second)
	c.Tick(now)
	r.commit(c, now)
	sc, ok := r.state.Schedule("s")
	require.True(t, ok)
	require.Equal(t, fsm.InstantOf(slot), sc.LastFire)
	require.Equal(t, uint64(1), sc.Fires)

	// The leader changes before the next slot.
	now = now.Add(2 * time.Second)
	r.bump(now)
	c, err = Recover(cfg, r.state.View(), r.epoch, now)
	require.NoError(t, err)
	c.Tick(now)
	o := r.commit(c, now)
	require.Len(t, o.Mutations, 2, "insert and fire")
	require.Equal(t, fsm.InstantOf(slot), o.Mutations[1].Fire.Slot)

	var keys []string
	r.state.View().EachTask(func(task *fsm.Task) bool {
		if task.Schedule == "s" && task.Slot == fsm.InstantOf(slot) {
			keys = append(keys, task.Key)
		}
		return true
	})
	require.Equal(t, []string{"s@" + slot.Format(time.RFC3339), "s@" + slot.Format(time.RFC3339) + "#e2"}, keys)
	sc, _ = r.state.Schedule("s")
	require.Equal(t, uint64(2), sc.Fires)
	require.Equal(t, fsm.InstantOf(slot), sc.LastFire, "the cursor does not move back")

	// The next slot fires once, as usual.
	now = slot.Add(10 * time.Second)
	c.Tick(now)
	o = r.commit(c, now)
	require.Len(t, o.Mutations, 2)
	require.Equal(t, fsm.InstantOf(now), o.Mutations[1].Fire.Slot)
}
