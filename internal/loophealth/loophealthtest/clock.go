// Package loophealthtest holds a manual clock for tests of loops that use
// package loophealth: time moves only when the test advances it, and the
// test can wait until a loop sleeps on it, so backoffs are observed as the
// waits the loop asks for, never by sleeping.
package loophealthtest

import (
	"context"
	"sync"
	"time"

	"github.com/cronoq/cronoq/internal/loophealth"
)

// Clock is a loophealth.Clock moved by Advance. Its timers fire when the
// time passes their deadline.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	changed chan struct{} // closed and replaced when a timer is made or stopped
}

var _ loophealth.Clock = (*Clock)(nil)

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now implements loophealth.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements loophealth.Clock.
func (c *Clock) NewTimer(d time.Duration) loophealth.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1), wait: d}
	if d <= 0 {
		t.ch <- c.now
		t.fired = true
		return t
	}
	c.timers = append(c.timers, t)
	c.notifyLocked()
	return t
}

func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Advance moves the time by d and fires the timers it passes.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.fired = true
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// Waits returns what the pending timers wait for, as asked when they were
// made, in the order they were made.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Duration, len(c.timers))
	for i, t := range c.timers {
		out[i] = t.wait
	}
	return out
}

// AwaitTimers waits until n timers are pending (a loop sleeps on the
// clock) and returns their waits; ctx bounds the wait.
func (c *Clock) AwaitTimers(ctx context.Context, n int) ([]time.Duration, error) {
	for {
		c.mu.Lock()
		if len(c.timers) >= n {
			c.mu.Unlock()
			return c.Waits(), nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

type timer struct {
	c     *Clock
	at    time.Time
	wait  time.Duration
	ch    chan time.Time
	fired bool // guarded by c.mu
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.fired {
		return false
	}
	for i, o := range c.timers {
		if o == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.notifyLocked()
			return true
		}
	}
	return false
}
