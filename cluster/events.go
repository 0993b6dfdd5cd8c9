package cluster

import (
	"context"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cronoq/cronoq/fsm"
)

// Every node serves the status events from its own replica: the state
// derives them from the entries it applies (see fsm.Event), and the node's
// EventHub keeps the latest of them for its subscribers. An event is
// released once its entry is applied on this node, so it is durable; every
// node derives the same events with the same cursors, in log order.

// Event is one status transition, with its cursor.
type Event = fsm.Event

// DefaultEventHistory is how many of the latest events a node keeps: a
// subscriber that falls further behind, or resumes from an older cursor,
// is told it lagged.
const DefaultEventHistory = 16384

// EventHub keeps the latest events a node applied, in log order, and hands
// them to subscribers. Publishing never waits for a subscriber: each reads
// the history at its own pace, and one that falls behind what the history
// holds skips to its oldest event and is told so.
type EventHub struct {
	mu   sync.Mutex
	ring []Event // the history, circular
	head int     // position of the oldest event held
	n    int     // events held
	// first is the sequence number of the oldest event held, pub the one
	// of the next event published (events are numbered from 0 as they
	// are published).
	first, pub uint64
	// floor: every event with a cursor above it is held or still to come.
	floor uint64
	// tip is the cursor of the last event published (or the floor, after
	// a restore).
	tip uint64
	// resets counts the restores: the state was replaced by a snapshot,
	// whose events were never derived.
	resets uint64
	// wake is closed at the next publish or close, when someone waits.
	wake   chan struct{}
	closed bool

	lags    atomic.Uint64 // gaps reported to subscribers
	dropped atomic.Uint64 // events subscribers skipped for lagging
}

// NewEventHub returns a hub keeping the latest history events
// (DefaultEventHistory when history <= 0).
func NewEventHub(history int) *EventHub {
	if history <= 0 {
		history = DefaultEventHistory
	}
	return &EventHub{ring: make([]Event, history)}
}

// Publish adds the events of the entry applied at index (an fsm.EventSink:
// it never blocks on a subscriber).
func (h *EventHub) Publish(_ uint64, evs []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range evs {
		if h.n == len(h.ring) {
			h.floor = h.ring[h.head].Cursor
			h.ring[h.head] = Event{}
			h.head = (h.head + 1) % len(h.ring)
			h.n--
			h.first++
		}
		h.ring[(h.head+h.n)%len(h.ring)] = ev
		h.n++
		h.pub++
		h.tip = ev.Cursor
	}
	h.wakeLocked()
}

// Restored tells the hub that the state was replaced by a snapshot of the
// entries up to index: the events of the entries it skipped were never
// derived, so the history starts over after it and every subscriber is
// told it lagged.
func (h *EventHub) Restored(index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.ring)
	h.head, h.n = 0, 0
	h.first = h.pub
	h.floor = fsm.EndCursor(index)
	h.tip = h.floor
	h.resets++
	h.wakeLocked()
}

// Close ends every subscription: their Next answers ErrShutdown once they
// have read what is held.
func (h *EventHub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.wakeLocked()
}

func (h *EventHub) wakeLocked() {
	if h.wake != nil {
		close(h.wake)
		h.wake = nil
	}
}

// at returns the event numbered seq, which must be held.
func (h *EventHub) at(seq uint64) *Event {
	return &h.ring[(h.head+int(seq-h.first))%len(h.ring)]
}

// EventHubStats are the hub's counts since it started.
type EventHubStats struct {
	Published uint64 // events published
	Held      int    // events in the history
	Lags      uint64 // gaps reported to subscribers
	Dropped   uint64 // events subscribers skipped, as far as counted
}

// Stats returns the hub's counts.
func (h *EventHub) Stats() EventHubStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return EventHubStats{Published: h.pub, Held: h.n, Lags: h.lags.Load(), Dropped: h.dropped.Load()}
}

// Subscribe returns a subscription to the events after cursor after: with
// after 0, the events published from now on; otherwise the events with a
// cursor above after, starting with a gap when the hub no longer holds (or
// never had) all of them. An after beyond the last event published skips
// the events up to it as they come.
func (h *EventHub) Subscribe(after uint64) *EventSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &EventSub{hub: h, resets: h.resets}
	switch {
	case after == 0:
		s.after, s.seq = h.tip, h.pub
	case after < h.floor:
		s.gap = true
		s.after, s.seq = h.floor, h.first
	default:
		// The first event held after the cursor (the history is in
		// cursor order).
		i := sort.Search(h.n, func(i int) bool { return h.at(h.first+uint64(i)).Cursor > after })
		s.after, s.seq = after, h.first+uint64(i)
	}
	return s
}

// EventSub is one subscriber's place in a hub's history. It is used by one
// goroutine at a time.
type EventSub struct {
	hub *EventHub
	// seq is the number of the next event to read; after the cursor of the
	// last event read (events at or below it are skipped).
	seq, after uint64
	resets     uint64
	gap        bool // a gap to report before the next events
	dropped    uint64
	closed     bool
}

// Next returns the next events, at most cap(buf) of them (appended to
// buf[:0]), waiting until there is one. gap reports that events were
// missed before them: the subscriber fell further behind than the history
// holds, or resumed from a cursor older than it, or the state was replaced
// by a snapshot. It answers ctx's error when ctx ends first, and
// ErrShutdown once the hub is closed and everything held was read.
func (s *EventSub) Next(ctx context.Context, buf []Event) (evs []Event, gap bool, err error) {
	limit := max(cap(buf), 1)
	evs = buf[:0]
	h := s.hub
	for {
		h.mu.Lock()
		if s.closed {
			h.mu.Unlock()
			return nil, false, ErrShutdown
		}
		if s.resets != h.resets {
			s.resets = h.resets
			s.gap = true
		}
		if s.seq < h.first {
			// Events it had not read left the history.
			s.gap = true
			s.dropped += h.first - s.seq
			h.dropped.Add(h.first - s.seq)
			s.seq = h.first
		}
		for s.seq < h.pub && len(evs) < limit {
			ev := h.at(s.seq)
			s.seq++
			if ev.Cursor <= s.after {
				continue
			}
			evs = append(evs, *ev)
			s.after = ev.Cursor
		}
		gap = s.gap
		if len(evs) > 0 || gap {
			s.gap = false
			if gap {
				h.lags.Add(1)
			}
			h.mu.Unlock()
			return evs, gap, nil
		}
		if h.closed {
			h.mu.Unlock()
			return nil, false, ErrShutdown
		}
		if h.wake == nil {
			h.wake = make(chan struct{})
		}
		wake := h.wake
		h.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// Dropped returns how many events the subscriber skipped because it fell
// behind the history (not counting what a restore or an old cursor
// skipped, which is not known).
func (s *EventSub) Dropped() uint64 {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.dropped
}

// Close ends the subscription: Next answers ErrShutdown. It is idempotent.
func (s *EventSub) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.closed = true
	s.hub.wakeLocked() // a Next waiting returns
}

// Subscribe subscribes to the status events this node applies, after
// cursor after (0: from now on); see EventHub.Subscribe. Any node serves
// it, leader or not.
func (n *Node) Subscribe(after uint64) *EventSub { return n.events.Subscribe(after) }

// eventFSM is the raft FSM of a node: the state's, telling the event hub
// when a snapshot replaced the state.
type eventFSM struct {
	*fsm.RaftFSM
	hub *EventHub
}

// Restore restores the snapshot and, once it is in place, restarts the
// hub's history after it.
func (f eventFSM) Restore(rc io.ReadCloser) error {
	if err := f.RaftFSM.Restore(rc); err != nil {
		return err
	}
	f.hub.Restored(f.State().AppliedIndex())
	return nil
}
