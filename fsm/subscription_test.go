package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func putSub(name string, pools []string, statuses []Status, kinds []string) Mutation {
	return Mutation{PutSubscription: &Subscription{
		Name: name, Pools: pools, Statuses: statuses, Kinds: kinds,
		AckTimeout: 30 * time.Second, MaxDeliveries: 5,
	}}
}

func ackSub(name string, cursor uint64) Mutation {
	return Mutation{AckSubscription: &AckSubscription{Name: name, Cursor: cursor}}
}

func stallSub(name, reason string) Mutation {
	return Mutation{StallSubscription: &StallSubscription{Name: name, Reason: reason, At: baseTime + 7}}
}

func delSub(name string) Mutation { return Mutation{DelSubscription: &DelSubscription{Name: name}} }

// held lists the (task, status) of the events subscription name holds.
func held(s *State, name string) []string {
	var out []string
	for _, ev := range s.SubscriptionEvents(name, 0, 0) {
		out = append(out, fmt.Sprintf("%s:%s", ev.TaskID, ev.Status))
	}
	return out
}

func TestSubscriptionHoldsMatchingEvents(t *testing.T) {
	h := newHarness(t)
	a, b, c := taskID(1), taskID(2), taskID(3)
	h.ok(insert(a, "etl", "")) // before any subscription: held by none
	h.ok(putSub("all", nil, nil, nil), putSub("ends", []string{"etl"}, []Status{StatusSucceeded, StatusFailed}, nil),
		insert(b, "etl", ""))
	k2 := insert(c, "web", "")
	k2.Insert.Kind = "other"
	h.ok(putSub("kind", nil, nil, []string{"other"}), k2, start(a, 1, lease(1, 1)), putWorkflow("wf", ""))
	h.ok(finish(a, lease(1, 1), StatusSucceeded), finish(c, 0, StatusFailed))

	require.Equal(t, []string{b + ":queued", c + ":queued", a + ":running", a + ":succeeded", c + ":failed"}, held(h.s, "all"),
		"every task event after its creation, none of a workflow")
	require.Equal(t, []string{a + ":succeeded"}, held(h.s, "ends"), "the ends of pool etl")
	require.Equal(t, []string{c + ":queued", c + ":failed"}, held(h.s, "kind"), "from its creation in the middle of the entry on")
	require.Equal(t, 5, h.s.SubscriptionPending("all"))
	require.Equal(t, []string{"all", "ends"}, h.s.SubscriptionsHolding(a))
	require.Empty(t, h.s.SubscriptionsHolding(taskID(9)))

	// Cursors grow with the log, and a read resumes after one.
	evs := h.s.SubscriptionEvents("all", 0, 0)
	for i := 1; i < len(evs); i++ {
		require.Less(t, evs[i-1].Cursor, evs[i].Cursor)
	}
	require.Equal(t, evs[2:4], h.s.SubscriptionEvents("all", evs[1].Cursor, 2))
	require.Empty(t, h.s.SubscriptionEvents("all", evs[4].Cursor, 0))
	require.Empty(t, h.s.SubscriptionEvents("nope", 0, 0))
}

func TestSubscriptionAck(t *testing.T) {
	h := newHarness(t)
	a, b := taskID(1), taskID(2)
	h.ok(putSub("s", nil, nil, nil))
	h.ok(insert(a, "p", ""), insert(b, "p", ""))
	h.ok(finish(a, 0, StatusCancelled), stallSub("s", "sent 5 times"))
	evs := h.s.SubscriptionEvents("s", 0, 0)
	require.Len(t, evs, 3)
	sub, _ := h.s.Subscription("s")
	require.True(t, sub.Stalled)
	require.Equal(t, "sent 5 times", sub.StallReason)
	require.Equal(t, baseTime+7, sub.StalledAt)

	// An ack drops the events up to its cursor and clears the stall.
	h.ok(ackSub("s", evs[1].Cursor))
	sub, _ = h.s.Subscription("s")
	require.Equal(t, evs[1].Cursor, sub.Acked)
	require.False(t, sub.Stalled)
	require.Empty(t, sub.StallReason)
	require.Zero(t, sub.StalledAt)
	require.Equal(t, evs[2:], h.s.SubscriptionEvents("s", 0, 0))
	require.Equal(t, []string{"s"}, h.s.SubscriptionsHolding(a))
	require.Empty(t, h.s.SubscriptionsHolding(b))

	// An ack of an old cursor changes nothing, not even the stall.
	h.ok(stallSub("s", "again"))
	before := snapshotBytes(t, h.s)
	modify := sub.ModifyIndex
	h.ok(ackSub("s", evs[0].Cursor))
	sub, _ = h.s.Subscription("s")
	require.True(t, sub.Stalled)
	require.Greater(t, sub.ModifyIndex, modify, "the stall")
	require.Equal(t, before[30:], snapshotBytes(t, h.s)[30:], "only the applied index moved")

	// An ack past the last event acks up to it: later events are held.
	h.ok(ackSub("s", EndCursor(h.index+10)))
	sub, _ = h.s.Subscription("s")
	require.Equal(t, MakeCursor(h.index, 0)-1, sub.Acked)
	require.Zero(t, h.s.SubscriptionPending("s"))
	h.ok(finish(b, 0, StatusCancelled))
	require.Equal(t, []string{b + ":cancelled"}, held(h.s, "s"))

	// An ack in the same entry as events acks those before it only.
	c := taskID(3)
	h.ok(insert(c, "p", ""), ackSub("s", EndCursor(h.index+1)), finish(c, 0, StatusCancelled))
	require.Equal(t, []string{c + ":cancelled"}, held(h.s, "s"))
}

func TestSubscriptionPutKeepsStateAndDelDrops(t *testing.T) {
	h := newHarness(t)
	a := taskID(1)
	h.ok(putSub("s", nil, nil, nil), insert(a, "p", ""))
	first := h.s.SubscriptionEvents("s", 0, 0)
	h.ok(ackSub("s", first[0].Cursor), stallSub("s", "x"))
	created, _ := h.s.Subscription("s")

	// Replaced: a narrower filter applies to later events; the cursor,
	// the stall and the creation stay.
	h.ok(putSub("s", []string{"q"}, nil, nil), start(a, 1, lease(1, 1)))
	sub, _ := h.s.Subscription("s")
	require.Equal(t, []string{"q"}, sub.Pools)
	require.Equal(t, first[0].Cursor, sub.Acked)
	require.True(t, sub.Stalled)
	require.Equal(t, created.CreateIndex, sub.CreateIndex)
	require.Equal(t, created.CreatedAt, sub.CreatedAt)
	require.Equal(t, h.index, sub.ModifyIndex)
	require.Empty(t, held(h.s, "s"))

	h.ok(putSub("s", nil, nil, nil), finish(a, lease(1, 1), StatusSucceeded))
	require.Equal(t, []string{a + ":succeeded"}, held(h.s, "s"))
	h.ok(delSub("s"))
	_, ok := h.s.Subscription("s")
	require.False(t, ok)
	require.Empty(t, held(h.s, "s"))
	require.Empty(t, h.s.SubscriptionsHolding(a))
	require.Zero(t, h.s.SubscriptionPending("s"))

	// Created again, it starts afresh.
	h.ok(putSub("s", nil, nil, nil))
	sub, _ = h.s.Subscription("s")
	require.Zero(t, sub.Acked)
	require.False(t, sub.Stalled)
	require.Equal(t, h.index, sub.CreateIndex)
}

func TestSubscriptionPreconditions(t *testing.T) {
	h := newHarness(t)
	h.ok(putSub("s", nil, nil, nil))
	bad := func(mut func(*Subscription)) Mutation {
		m := putSub("t", nil, nil, nil)
		mut(m.PutSubscription)
		return m
	}
	for name, m := range map[string]Mutation{
		"empty name":                bad(func(s *Subscription) { s.Name = "" }),
		"name with a space":         bad(func(s *Subscription) { s.Name = "a b" }),
		"unsorted pools":            bad(func(s *Subscription) { s.Pools = []string{"b", "a"} }),
		"repeated kind":             bad(func(s *Subscription) { s.Kinds = []string{"a", "a"} }),
		"empty pool":                bad(func(s *Subscription) { s.Pools = []string{""} }),
		"unknown status":            bad(func(s *Subscription) { s.Statuses = []Status{42} }),
		"unsorted statuses":         bad(func(s *Subscription) { s.Statuses = []Status{StatusFailed, StatusQueued} }),
		"negative ack timeout":      bad(func(s *Subscription) { s.AckTimeout = -1 }),
		"secret without a hook":     bad(func(s *Subscription) { s.Secret = "k" }),
		"ack of no subscription":    ackSub("nope", 1),
		"stall of no subscription":  stallSub("nope", ""),
		"delete of no subscription": delSub("nope"),
	} {
		t.Run(name, func(t *testing.T) {
			before := h.s.Hash()
			h.reject(1, insert(taskID(int(h.index)), "p", ""), m)
			require.Equal(t, before, h.s.Hash())
		})
	}
}

// A rejected batch leaves the subscriptions, their events, cursors and
// index as they were.
func TestSubscriptionRollback(t *testing.T) {
	h := newHarness(t)
	a, b := taskID(1), taskID(2)
	h.ok(putSub("s", nil, nil, nil), putSub("gone", nil, nil, nil), insert(a, "p", ""), insert(b, "p", ""))
	evs := h.s.SubscriptionEvents("s", 0, 0)
	before := h.s.Hash()
	watch := h.s.SubscriptionWatch()
	h.reject(5, ackSub("s", evs[0].Cursor), finish(b, 0, StatusCancelled), putSub("new", nil, nil, nil),
		delSub("gone"), stallSub("s", "x"), start(a, 9, 1))
	require.Equal(t, before, h.s.Hash())
	require.Equal(t, []string{"gone", "s"}, h.s.SubscriptionsHolding(a))
	require.Equal(t, 2, h.s.SubscriptionPending("gone"))
	select {
	case <-watch:
		t.Fatal("a rejected batch woke the watchers")
	default:
	}
	h.ok(finish(b, 0, StatusCancelled))
	select {
	case <-watch:
	default:
		t.Fatal("a held event did not wake the watchers")
	}
}

// Replicas with and without an event sink hand out the same cursors and
// hold the same events: the sink changes nothing of the state.
func TestSubscriptionsIgnoreTheSink(t *testing.T) {
	a, b := taskID(1), taskID(2)
	entries := [][]Mutation{
		{insert(a, "p", ""), putWorkflow("wf", ""), putSub("s", nil, nil, nil), insert(b, "p", "")},
		{start(a, 1, lease(1, 1)), finish(b, 0, StatusCancelled)},
		{finish(a, lease(1, 1), StatusSucceeded)},
	}
	withSink, without := newHarness(t), newHarness(t)
	var log sinkLog
	withSink.s.SetEventSink(log.sink)
	for _, ms := range entries {
		withSink.ok(ms...)
		without.ok(ms...)
	}
	require.Equal(t, snapshotBytes(t, without.s), snapshotBytes(t, withSink.s))
	var want []Event
	for _, ev := range log.events {
		if ev.TaskID != "" && CursorIndex(ev.Cursor) > 2 || ev.TaskID == b {
			want = append(want, ev)
		}
	}
	require.Equal(t, want, without.s.SubscriptionEvents("s", 0, 0), "the sink's events, from the subscription on")
}

func TestSubscriptionSnapshotRoundTrip(t *testing.T) {
	s := goldenV6SubsState(t)
	snap := snapshotBytes(t, s)
	require.Equal(t, uint16(6), binary.BigEndian.Uint16(snap[4:6]))
	restored := New()
	watch := restored.SubscriptionWatch()
	require.NoError(t, restored.Restore(bytes.NewReader(snap)))
	select {
	case <-watch:
	default:
		t.Fatal("a restore did not wake the watchers")
	}
	require.Equal(t, s.Subscriptions(), restored.Subscriptions())
	for _, name := range []string{"all", "fails"} {
		require.Equal(t, s.SubscriptionEvents(name, 0, 0), restored.SubscriptionEvents(name, 0, 0))
		require.Equal(t, s.SubscriptionPending(name), restored.SubscriptionPending(name))
	}
	require.Equal(t, s.SubscriptionsHolding("a"), restored.SubscriptionsHolding("a"))

	// A view keeps what it saw.
	v := s.View()
	h := &harness{t: t, s: s, index: s.AppliedIndex(), term: 1}
	h.ok(ackSub("all", EndCursor(h.index)), delSub("fails"))
	require.Len(t, v.Subscriptions(), 2)
	require.Len(t, v.SubscriptionEvents("all", 0, 0), 2)
	require.Equal(t, 1, v.SubscriptionPending("fails"))
	require.Equal(t, []string{"all", "fails"}, v.SubscriptionsHolding("a"))
	require.Empty(t, s.SubscriptionsHolding("a"))

	// Without subscriptions the snapshot goes back to the format its
	// other records need.
	h.ok(delSub("all"))
	require.Equal(t, uint16(1), binary.BigEndian.Uint16(snapshotBytes(t, s)[4:6]))
}

// A node of log format 5 halts on a subscription entry and refuses a
// snapshot holding one, rather than skip it.
func TestSubscriptionsNeedFormat6(t *testing.T) {
	data := batchEntry(t, 1, putSub("s", nil, nil, nil))
	old := NewVersion(5)
	old.Apply(1, 1, bumpEntry(t, 1))
	resp := old.Apply(2, 1, data)
	var halt *HaltError
	require.ErrorAs(t, resp.(error), &halt)
	require.Equal(t, uint16(6), halt.Need)
	require.ErrorIs(t, halt, ErrNewerVersion)

	snap := snapshotBytes(t, goldenV6SubsState(t))
	err := NewVersion(5).Restore(bytes.NewReader(snap))
	require.ErrorIs(t, err, ErrNewerVersion)
}

func TestRestoreRejectsBadSubscriptionRecords(t *testing.T) {
	sub := recordBody(&Subscription{Name: "s", Acked: MakeCursor(5, 0)})
	ev := func(name string, cursor uint64) []byte {
		return recordBody(&SubscriptionEvent{Subscription: name, Cursor: cursor, TaskID: "a", Pool: "p", Kind: "k", Status: StatusQueued})
	}
	end := func(w *snapshotWriter, subs, evs uint64) []byte {
		return w.endV6(subs, evs)
	}
	for _, tc := range []struct {
		name string
		snap []byte
	}{
		{"event of no subscription", end(newSnapshotWriter(6).record(recSub, sub).record(recSubEvent, ev("t", MakeCursor(6, 0))), 1, 1)},
		{"acked event", end(newSnapshotWriter(6).record(recSub, sub).record(recSubEvent, ev("s", MakeCursor(5, 0))), 1, 1)},
		{"events out of order", end(newSnapshotWriter(6).record(recSub, sub).
			record(recSubEvent, ev("s", MakeCursor(7, 0))).record(recSubEvent, ev("s", MakeCursor(6, 0))), 1, 2)},
		{"wrong count", end(newSnapshotWriter(6).record(recSub, sub).record(recSubEvent, ev("s", MakeCursor(6, 0))), 1, 2)},
		{"invalid subscription", end(newSnapshotWriter(6).record(recSub, recordBody(&Subscription{Name: "a b"})), 1, 0)},
		{"subscription in a format 5 snapshot", newSnapshotWriter(5).record(recSub, sub).end(0, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := New().Restore(bytes.NewReader(tc.snap))
			require.ErrorIs(t, err, ErrBadSnapshot)
		})
	}
	good := end(newSnapshotWriter(6).record(recSub, sub).record(recSubEvent, ev("s", MakeCursor(6, 0))), 1, 1)
	s := New()
	require.NoError(t, s.Restore(bytes.NewReader(good)))
	require.Equal(t, []string{"s"}, s.SubscriptionsHolding("a"))
}

// TestSubscriptionsRandom applies random entries of task changes and
// subscription changes to a state with an event sink and one without, and
// checks after each that they agree byte for byte, that every held event
// matches its subscription and follows its cursor, that the task index
// and counts agree with the events held, and that a snapshot restores to
// the same state.
func TestSubscriptionsRandom(t *testing.T) {
	require.Greater(t, subscriptionOps(t, 16, 400), 100)
}

// FuzzSubscriptionOps runs the random entries of TestSubscriptionsRandom
// from the fuzzer's seeds.
func FuzzSubscriptionOps(f *testing.F) {
	f.Add(uint64(16))
	f.Add(uint64(1))
	f.Fuzz(func(t *testing.T, seed uint64) {
		subscriptionOps(t, seed, 60)
	})
}

// subscriptionOps applies rounds random entries drawn from seed (see
// TestSubscriptionsRandom) and returns how many were accepted.
func subscriptionOps(t *testing.T, seed uint64, rounds int) int {
	r := &prng{s: seed}
	h := newHarness(t)
	twin := newHarness(t)
	var log sinkLog
	h.s.SetEventSink(log.sink)
	pools := []string{"p0", "p1"}
	names := []string{"a", "b", "c"}
	var leases uint64
	accepted := 0
	for round := 0; round < rounds; round++ {
		var ms []Mutation
		for i := 0; i < 1+r.intn(6); i++ {
			id := taskID(r.intn(30))
			cur, exists := h.s.Get(id)
			switch op := r.intn(12); {
			case !exists:
				ms = append(ms, insert(id, pools[r.intn(2)], ""))
			case op < 2:
				leases++
				ms = append(ms, start(id, cur.Attempt+1, lease(1, leases)))
			case op < 4:
				ms = append(ms, finish(id, cur.Lease, AllStatuses[4+r.intn(4)]))
			case op == 4:
				ms = append(ms, purge(id))
			case op == 5:
				var st []Status
				if r.coin() {
					st = []Status{StatusSucceeded, StatusFailed}
				}
				var ps []string
				if r.coin() {
					ps = []string{pools[r.intn(2)]}
				}
				ms = append(ms, putSub(names[r.intn(3)], ps, st, nil))
			case op == 6 || op == 7:
				name := names[r.intn(3)]
				evs := h.s.SubscriptionEvents(name, 0, 0)
				c := uint64(r.intn(3))
				if len(evs) > 0 {
					c = evs[r.intn(len(evs))].Cursor
				}
				ms = append(ms, ackSub(name, c))
			case op == 8:
				ms = append(ms, stallSub(names[r.intn(3)], "x"))
			case op == 9:
				ms = append(ms, delSub(names[r.intn(3)]))
			default:
				ms = append(ms, retry(id, cur.Lease, baseTime))
			}
		}
		data := batchEntry(t, 1, ms...)
		resp := h.apply(data)
		require.Equal(t, fmt.Sprint(resp), fmt.Sprint(twin.apply(data)))
		if resp == nil {
			accepted++
		}
		snap := snapshotBytes(t, h.s)
		require.Equal(t, snap, snapshotBytes(t, twin.s), "round %d", round)
		checkIndexes(t, h.s.View())
		holding := map[string][]string{}
		for _, sub := range h.s.Subscriptions() {
			evs := h.s.SubscriptionEvents(sub.Name, 0, 0)
			require.Equal(t, len(evs), h.s.SubscriptionPending(sub.Name))
			for i, ev := range evs {
				require.True(t, sub.Matches(&ev) || sub.ModifyIndex >= CursorIndex(ev.Cursor), "round %d: %s holds %+v", round, sub.Name, ev)
				require.Greater(t, ev.Cursor, sub.Acked)
				require.GreaterOrEqual(t, CursorIndex(ev.Cursor), sub.CreateIndex)
				if i > 0 {
					require.Greater(t, ev.Cursor, evs[i-1].Cursor)
				}
				if hs := holding[ev.TaskID]; len(hs) == 0 || hs[len(hs)-1] != sub.Name {
					holding[ev.TaskID] = append(hs, sub.Name)
				}
			}
		}
		for i := 0; i < 30; i++ {
			require.Equal(t, holding[taskID(i)], h.s.SubscriptionsHolding(taskID(i)), "round %d", round)
		}
		if round%50 == 0 {
			restored := New()
			require.NoError(t, restored.Restore(bytes.NewReader(snap)))
			require.Equal(t, snap[30:], snapshotBytes(t, restored)[30:])
		}
	}
	return accepted
}

// endV6 writes the end marker of log format 6 for a snapshot of
// subscriptions and events only.
func (w *snapshotWriter) endV6(subs, evs uint64) []byte {
	w.buf.WriteByte(recEnd)
	_ = binary.Write(&w.buf, binary.BigEndian, [10]uint64{8: subs, 9: evs})
	return w.buf.Bytes()
}
