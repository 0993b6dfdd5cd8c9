package engine

import (
	"sync"
	"sync/atomic"

	"github.com/cronoq/cronoq/engine/core"
)

// Subscription receives the engine's status events, each released once its
// transition is durable. A subscriber that falls behind misses events (the
// engine never waits for it) and is told so by Lagged.
type Subscription struct {
	hub     *hub
	ch      chan core.Event
	dropped atomic.Uint64
	closed  bool // under hub.mu
}

// C delivers the events. It is closed by Close and when the engine stops.
func (s *Subscription) C() <-chan core.Event { return s.ch }

// Lagged reports whether events were dropped because the subscriber fell
// behind.
func (s *Subscription) Lagged() bool { return s.dropped.Load() > 0 }

// Dropped returns how many events the subscriber missed.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription and closes C. It is idempotent.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	close(s.ch)
	for i, o := range h.subs {
		if o == s {
			h.subs = append(h.subs[:i], h.subs[i+1:]...)
			break
		}
	}
}

// Subscribe returns a subscription to status events with room for buffer
// undelivered events (DefaultSubscriptionBuffer when buffer <= 0). After the
// engine stopped its channel is closed at once.
func (e *Engine) Subscribe(buffer int) *Subscription {
	if buffer <= 0 {
		buffer = DefaultSubscriptionBuffer
	}
	h := &e.hub
	s := &Subscription{hub: h, ch: make(chan core.Event, buffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.closed = true
		close(s.ch)
		return s
	}
	h.subs = append(h.subs, s)
	return s
}

// hub fans events out to subscriptions.
type hub struct {
	mu      sync.Mutex
	subs    []*Subscription
	closed  bool
	dropped atomic.Uint64
}

func (h *hub) publish(ev core.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			s.dropped.Add(1)
			h.dropped.Add(1)
		}
	}
}

// close closes every subscription; later ones start closed.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, s := range h.subs {
		s.closed = true
		close(s.ch)
	}
	h.subs = nil
}
