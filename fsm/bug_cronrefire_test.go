//go:build jepsenbug_cronrefire

package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// With the cronrefire fault a Fire for a slot at or before the schedule's
// cursor is applied, so one slot can create two tasks.
func TestBugCronRefireSameSlotTwice(t *testing.T) {
	h := newHarness(t)
	slot := baseTime + 60e9
	h.ok(putSchedule("s"))
	first, second := insert(taskID(1), "p", "s@slot"), insert(taskID(2), "p", "s@slot#e2")
	first.Insert.Schedule, first.Insert.Slot = "s", slot
	second.Insert.Schedule, second.Insert.Slot = "s", slot
	h.ok(first, fire("s", slot, 0, taskID(1)))
	h.ok(second, fire("s", slot, 0, taskID(2)))

	sc, ok := h.s.Schedule("s")
	require.True(t, ok)
	require.Equal(t, slot, sc.LastFire)
	require.Equal(t, uint64(2), sc.Fires)
	require.Equal(t, taskID(2), sc.LastTask)
	n := 0
	h.s.View().EachTask(func(task *Task) bool {
		if task.Schedule == "s" && task.Slot == slot {
			n++
		}
		return true
	})
	require.Equal(t, 2, n, "tasks for one slot")

	// An earlier slot moves the cursor back.
	h.ok(fire("s", slot-30e9, 0, ""))
	sc, _ = h.s.Schedule("s")
	require.Equal(t, slot-30e9, sc.LastFire)
}
