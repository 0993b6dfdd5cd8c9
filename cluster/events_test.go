package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// evs returns one event per seq of the entry at index, the task id naming
// both.
func evs(index uint64, n int) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{Cursor: fsm.MakeCursor(index, i), TaskID: taskName(index, i), Status: fsm.StatusQueued}
	}
	return out
}

func taskName(index uint64, seq int) string {
	return string(rune('a'+index-1)) + string(rune('0'+seq))
}

// answer turns one answer of Next into the task ids, with "lag" first
// where it reports a gap.
func answer(got []Event, gap bool) []string {
	var out []string
	if gap {
		out = append(out, "lag")
	}
	for _, ev := range got {
		out = append(out, ev.TaskID)
	}
	return out
}

// read takes one answer of Next, which must come at once.
func read(t *testing.T, s *EventSub, max int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, gap, err := s.Next(ctx, make([]Event, 0, max))
	require.NoError(t, err)
	return answer(got, gap)
}

// drain takes the answers of Next until it would wait.
func drain(t *testing.T, s *EventSub, max int) [][]string {
	t.Helper()
	var out [][]string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		got, gap, err := s.Next(ctx, make([]Event, 0, max))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return out
		}
		require.NoError(t, err)
		out = append(out, answer(got, gap))
	}
}

func TestEventHubSubscriptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		// history is the hub's size; before the entries published before
		// subscribing (entries at index 1, 2, ... with that many events),
		// after the ones after.
		history       int
		before, after []int
		from          func(*EventHub) uint64 // the cursor to resume after
		max           int                    // events per Next
		want          [][]string             // each Next's answer
	}{
		{
			name: "live: only what comes after", history: 8,
			before: []int{2}, after: []int{1, 2}, max: 16,
			want: [][]string{{"b0", "c0", "c1"}},
		},
		{
			name: "batches bounded by the buffer", history: 8,
			after: []int{3, 1}, max: 2,
			want: [][]string{{"a0", "a1"}, {"a2", "b0"}},
		},
		{
			name: "resume after a held cursor", history: 8,
			before: []int{2, 2}, after: []int{1}, max: 16,
			from: func(*EventHub) uint64 { return fsm.MakeCursor(1, 1) },
			want: [][]string{{"b0", "b1", "c0"}},
		},
		{
			name: "resume after an entry's end", history: 8,
			before: []int{2, 2}, max: 16,
			from: func(*EventHub) uint64 { return fsm.EndCursor(1) },
			want: [][]string{{"b0", "b1"}},
		},
		{
			name: "resume from the last cursor the history let go", history: 3,
			before: []int{2, 2}, max: 16,
			from: func(*EventHub) uint64 { return fsm.MakeCursor(1, 0) },
			want: [][]string{{"a1", "b0", "b1"}},
		},
		{
			name: "resume from a cursor the history no longer holds", history: 2,
			before: []int{2, 2}, max: 16,
			from: func(*EventHub) uint64 { return fsm.MakeCursor(1, 0) },
			want: [][]string{{"lag", "b0", "b1"}},
		},
		{
			name: "resume ahead of this node skips what it has seen", history: 8,
			before: []int{1}, after: []int{2, 2}, max: 16,
			from: func(*EventHub) uint64 { return fsm.MakeCursor(2, 0) },
			want: [][]string{{"b1", "c0", "c1"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewEventHub(tc.history)
			index := uint64(0)
			publish := func(counts []int) {
				for _, n := range counts {
					index++
					h.Publish(index, evs(index, n))
				}
			}
			publish(tc.before)
			after := uint64(0)
			if tc.from != nil {
				after = tc.from(h)
			}
			s := h.Subscribe(after)
			defer s.Close()
			publish(tc.after)
			require.Equal(t, tc.want, drain(t, s, tc.max))
		})
	}
}

// A subscriber that falls behind the history skips to its oldest event,
// told so once, with the count of what it missed; publishing never waits
// for it.
func TestEventHubLaggingSubscriber(t *testing.T) {
	h := NewEventHub(4)
	slow := h.Subscribe(0)
	fast := h.Subscribe(0)
	for i := uint64(1); i <= 3; i++ {
		h.Publish(i, evs(i, 2))
		require.Equal(t, []string{taskName(i, 0), taskName(i, 1)}, read(t, fast, 16))
	}
	require.Equal(t, []string{"lag", "b0", "b1", "c0", "c1"}, read(t, slow, 16))
	require.EqualValues(t, 2, slow.Dropped())
	require.Zero(t, fast.Dropped())
	h.Publish(4, evs(4, 1))
	require.Equal(t, []string{"d0"}, read(t, slow, 16), "one gap, reported once")
	st := h.Stats()
	require.Equal(t, EventHubStats{Published: 7, Held: 4, Lags: 1, Dropped: 2}, st)
}

// A snapshot replacing the state skips entries whose events were never
// derived: every subscriber is told, and a resume from before it lags.
func TestEventHubRestore(t *testing.T) {
	h := NewEventHub(8)
	h.Publish(1, evs(1, 2))
	s := h.Subscribe(0)
	h.Publish(2, evs(2, 1))
	h.Restored(5)
	h.Publish(6, evs(6, 1))
	require.Equal(t, []string{"lag", "f0"}, read(t, s, 16))

	require.Equal(t, []string{"lag", "f0"}, read(t, h.Subscribe(fsm.MakeCursor(2, 0)), 16))
	require.Equal(t, []string{"f0"}, read(t, h.Subscribe(fsm.EndCursor(5)), 16))
}

// Next waits for the next publish, and ends with the hub (after what is
// held) or the subscription.
func TestEventHubWaitAndClose(t *testing.T) {
	h := NewEventHub(8)
	s := h.Subscribe(0)
	got := make(chan []string, 1)
	go func() {
		evs, _, _ := s.Next(context.Background(), make([]Event, 0, 4))
		var ids []string
		for _, ev := range evs {
			ids = append(ids, ev.TaskID)
		}
		got <- ids
	}()
	h.Publish(1, evs(1, 1))
	select {
	case ids := <-got:
		require.Equal(t, []string{"a0"}, ids)
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not wake")
	}

	h.Publish(2, evs(2, 1))
	h.Close()
	require.Equal(t, []string{"b0"}, read(t, s, 4), "what is held is read first")
	_, _, err := s.Next(context.Background(), nil)
	require.ErrorIs(t, err, ErrShutdown)

	s2 := NewEventHub(8).Subscribe(0)
	done := make(chan error, 1)
	go func() {
		_, _, err := s2.Next(context.Background(), nil)
		done <- err
	}()
	s2.Close()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrShutdown)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end Next")
	}
}
