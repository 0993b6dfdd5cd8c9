package fsm

import "fmt"

// ---------------------------------------------------------------------------
// Durable subscriptions (log format 6)
// ---------------------------------------------------------------------------
//
// A subscription takes every task event its filter matches from the entry
// that creates it on: the events are derived from the applied entries (see
// events.go), so every replica holds the same ones under the same cursors,
// and they stay until acked or the subscription is removed. Events are
// taken as the status change is applied, in mutation order: a
// subscription created in the middle of an entry takes the events of the
// mutations after its own.

type (
	subItem struct {
		name string
		s    *Subscription
	}
	// subEvItem is an event held by a subscription. The event is shared
	// by every subscription that holds it and never modified.
	subEvItem struct {
		sub    string
		cursor uint64
		ev     *Event
	}
	// heldItem indexes the held events by task.
	heldItem struct {
		task, sub string
		cursor    uint64
	}
)

func lessSubEv(a, b subEvItem) bool {
	if a.sub != b.sub {
		return a.sub < b.sub
	}
	return a.cursor < b.cursor
}

func lessHeld(a, b heldItem) bool {
	if a.task != b.task {
		return a.task < b.task
	}
	if a.sub != b.sub {
		return a.sub < b.sub
	}
	return a.cursor < b.cursor
}

// putSub replaces subscription record old with new (nil for absent).
func (t *tables) putSub(old, new *Subscription) {
	if new == nil {
		if old != nil {
			t.subs.Delete(subItem{name: old.Name})
		}
		return
	}
	t.subs.ReplaceOrInsert(subItem{name: new.Name, s: new})
}

// holdSubEvent files an event a subscription takes.
func (t *tables) holdSubEvent(it subEvItem) {
	t.subEvs.ReplaceOrInsert(it)
	t.subHeld.ReplaceOrInsert(heldItem{task: it.ev.TaskID, sub: it.sub, cursor: it.cursor})
	t.subCount[it.sub]++
}

// dropSubEvent removes an event a subscription held.
func (t *tables) dropSubEvent(it subEvItem) {
	t.subEvs.Delete(it)
	t.subHeld.Delete(heldItem{task: it.ev.TaskID, sub: it.sub, cursor: it.cursor})
	if n := t.subCount[it.sub] - 1; n > 0 {
		t.subCount[it.sub] = n
	} else {
		delete(t.subCount, it.sub)
	}
}

func (s *State) setSub(old, new *Subscription) {
	s.t.putSub(old, new)
	s.subChanged = true
	s.undo = append(s.undo, undo{kind: undoSub, oldU: old, newU: new})
}

// holdEvent gives ev to every subscription whose filter takes it.
func (s *State) holdEvent(ev *Event) {
	var shared *Event
	s.t.subs.Ascend(func(it subItem) bool {
		if !it.s.Matches(ev) {
			return true
		}
		if shared == nil {
			c := *ev
			shared = &c
		}
		item := subEvItem{sub: it.name, cursor: ev.Cursor, ev: shared}
		s.t.holdSubEvent(item)
		s.subChanged = true
		s.undo = append(s.undo, undo{kind: undoSubEvent, ev: item})
		return true
	})
}

// dropEvents drops the events of subscription name up to cursor upTo
// (inclusive; every event when upTo is the highest cursor).
func (s *State) dropEvents(name string, upTo uint64) {
	var drop []subEvItem
	s.t.subEvs.AscendGreaterOrEqual(subEvItem{sub: name}, func(it subEvItem) bool {
		if it.sub != name || it.cursor > upTo {
			return false
		}
		drop = append(drop, it)
		return true
	})
	for _, it := range drop {
		s.t.dropSubEvent(it)
		s.subChanged = true
		s.undo = append(s.undo, undo{kind: undoSubEventDrop, ev: it})
	}
}

func (s *State) subscription(op, name string) (*Subscription, error) {
	it, ok := s.t.subs.Get(subItem{name: name})
	if !ok {
		return nil, fmt.Errorf("%s %q: no such subscription", op, name)
	}
	return it.s, nil
}

// putSubscription creates a subscription or replaces the settings of one;
// sub is owned by the state from here on. A replacement keeps the cursor,
// the stall, the creation and the events held of the one it replaces; its
// filter applies to the events after it.
func (s *State) putSubscription(index uint64, batchTime Instant, sub *Subscription) error {
	if err := sub.Check(); err != nil {
		return fmt.Errorf("put subscription: %w", err)
	}
	old, ok := s.t.subs.Get(subItem{name: sub.Name})
	if ok {
		o := old.s
		sub.Acked, sub.Stalled, sub.StallReason, sub.StalledAt = o.Acked, o.Stalled, o.StallReason, o.StalledAt
		sub.CreatedAt, sub.CreateIndex = o.CreatedAt, o.CreateIndex
	} else {
		sub.Acked = 0 // nothing before its creation is held
		sub.Stalled, sub.StallReason, sub.StalledAt = false, "", 0
		sub.CreatedAt = instant(sub.CreatedAt, batchTime)
		sub.CreateIndex = index
	}
	sub.ModifyIndex = index
	s.setSub(old.s, sub)
	return nil
}

func (s *State) delSubscription(m *DelSubscription) error {
	cur, err := s.subscription("delete subscription", m.Name)
	if err != nil {
		return err
	}
	s.dropEvents(m.Name, ^uint64(0))
	s.setSub(cur, nil)
	return nil
}

// lastCursor is the highest cursor handed out so far: that of the last
// status change applied, in this entry or before.
func (s *State) lastCursor(index uint64) uint64 { return MakeCursor(index, s.seq) - 1 }

func (s *State) ackSubscription(index uint64, m *AckSubscription) error {
	cur, err := s.subscription("ack subscription", m.Name)
	if err != nil {
		return err
	}
	c := min(m.Cursor, s.lastCursor(index))
	if c <= cur.Acked {
		return nil // acked already: nothing changes
	}
	sub := cur.Clone()
	sub.Acked = c
	sub.Stalled, sub.StallReason, sub.StalledAt = false, "", 0
	sub.ModifyIndex = index
	s.dropEvents(m.Name, c)
	s.setSub(cur, sub)
	return nil
}

func (s *State) stallSubscription(index uint64, at Instant, m *StallSubscription) error {
	cur, err := s.subscription("stall subscription", m.Name)
	if err != nil {
		return err
	}
	sub := cur.Clone()
	sub.Stalled, sub.StallReason, sub.StalledAt = true, m.Reason, at
	sub.ModifyIndex = index
	s.setSub(cur, sub)
	return nil
}

// notifySubscriptions wakes the watchers of the subscriptions when the
// entry just applied changed them.
func (s *State) notifySubscriptions() {
	if !s.subChanged {
		return
	}
	s.subChanged = false
	s.mu.Lock()
	close(s.subWatch)
	s.subWatch = make(chan struct{})
	s.mu.Unlock()
}

// ---------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------

func (t *tables) subscription(name string) (*Subscription, bool) {
	it, ok := t.subs.Get(subItem{name: name})
	return it.s, ok
}

func (t *tables) subscriptionList() []*Subscription {
	out := make([]*Subscription, 0, t.subs.Len())
	t.subs.Ascend(func(it subItem) bool {
		out = append(out, it.s)
		return true
	})
	return out
}

func (t *tables) subscriptionEvents(name string, after uint64, limit int) []Event {
	var out []Event
	if after == ^uint64(0) {
		return nil
	}
	t.subEvs.AscendGreaterOrEqual(subEvItem{sub: name, cursor: after + 1}, func(it subEvItem) bool {
		if it.sub != name || limit > 0 && len(out) >= limit {
			return false
		}
		out = append(out, *it.ev)
		return true
	})
	return out
}

func (t *tables) subscriptionsHolding(taskID string) []string {
	var out []string
	t.subHeld.AscendGreaterOrEqual(heldItem{task: taskID}, func(it heldItem) bool {
		if it.task != taskID {
			return false
		}
		if len(out) == 0 || out[len(out)-1] != it.sub {
			out = append(out, it.sub)
		}
		return true
	})
	return out
}

// Subscription returns the subscription named name.
func (s *State) Subscription(name string) (*Subscription, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.subscription(name)
}

// Subscriptions returns every subscription, by name.
func (s *State) Subscriptions() []*Subscription {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.subscriptionList()
}

// SubscriptionEvents returns, in cursor (log) order, at most limit (<= 0:
// every one) of the events subscription name holds after cursor after.
func (s *State) SubscriptionEvents(name string, after uint64, limit int) []Event {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.subscriptionEvents(name, after, limit)
}

// SubscriptionPending returns how many events subscription name holds
// (not acked yet).
func (s *State) SubscriptionPending(name string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.subCount[name]
}

// SubscriptionsHolding returns, by name, the subscriptions that hold an
// event of task id (it was not acked yet).
func (s *State) SubscriptionsHolding(taskID string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.subscriptionsHolding(taskID)
}

// SubscriptionWatch returns a channel closed once an entry that changes a
// subscription or the events held is applied (or a snapshot restored):
// take it before reading, then wait on it for what comes next.
func (s *State) SubscriptionWatch() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.subWatch
}

// Subscription returns the subscription named name.
func (v *View) Subscription(name string) (*Subscription, bool) { return v.t.subscription(name) }

// Subscriptions returns every subscription, by name.
func (v *View) Subscriptions() []*Subscription { return v.t.subscriptionList() }

// SubscriptionEvents is State.SubscriptionEvents on the view.
func (v *View) SubscriptionEvents(name string, after uint64, limit int) []Event {
	return v.t.subscriptionEvents(name, after, limit)
}

// SubscriptionPending returns how many events subscription name holds.
func (v *View) SubscriptionPending(name string) int { return v.t.subCount[name] }

// SubscriptionsHolding returns the subscriptions that hold an event of
// task id, by name.
func (v *View) SubscriptionsHolding(taskID string) []string { return v.t.subscriptionsHolding(taskID) }
