package engine

import (
	"context"
	"time"

	"github.com/cronoq/cronoq/engine/core"
)

// stepNow reads the clock for a core step, after bringing the core's clock
// hold in line with Config.ClockHold. A release may produce mutations (the
// fires and expiries that came due meanwhile): they are collected with the
// step's own.
func (e *Engine) stepNow() time.Time {
	now := e.cfg.Now()
	if e.cfg.ClockHold == nil {
		return now
	}
	c := e.loop.core
	if held := e.cfg.ClockHold(); held != c.ClockHeld() {
		c.SetClockHold(now, held)
		e.logger.Debug("clock hold changed", "held", held, "held_timers", c.Stats().HeldTimers)
	}
	return now
}

// RecheckClock makes the engine read Config.ClockHold at once rather than
// at its next step: whoever changes what ClockHold reports calls it, so
// that a release runs the fires and expiries that came due meanwhile
// without waiting for other work.
func (e *Engine) RecheckClock(ctx context.Context) error {
	return e.ask(ctx, func(*core.Core, time.Time) {})
}
