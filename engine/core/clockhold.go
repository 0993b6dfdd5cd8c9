package core

import (
	"time"
)

// A clock hold is an input of the core, set by its driver while the clock
// the core is given cannot be trusted (the leader's clock disagrees with a
// majority of the cluster's). While held, the timers that end or start work
// on the strength of the clock alone wait: recurring schedules do not fire,
// running attempts are not ended for a missed heartbeat window or an
// attempt timeout, and subscriptions neither send again nor stall for a
// missed ack. Everything else goes on: delayed and retrying tasks
// become ready at their run time, deadlines expire tasks, retention purges
// ended ones, rate limits refill, and commands are served as usual
// (heartbeats extend leases, completions end attempts).
//
// A held timer is kept aside, not dropped. When the hold is released every
// timer kept aside is put back and runs at once if it is due by then: a
// schedule fires its due slots under its catch-up policy, an attempt whose
// heartbeat window ended (and was not extended by a heartbeat meanwhile)
// loses its lease.

// heldByClock reports whether timers of kind k wait while the clock is held.
func heldByClock(k timerKind) bool {
	return k == tmFire || k == tmLease || k == tmTimeout || k == tmRedeliver
}

// SetClockHold holds (held true) or releases the timers that act on the
// clock alone (see above). Setting the state the core is in changes
// nothing; a release runs every timer that came due meanwhile, so its
// output must be collected like any other step's.
func (c *Core) SetClockHold(now time.Time, held bool) {
	if held == c.clockHold {
		c.begin(now)
		c.serve()
		return
	}
	c.clockHold = held
	if !held {
		for _, tm := range c.heldTimers {
			c.timers.push(tm)
		}
		clear(c.heldTimers)
		c.heldTimers = c.heldTimers[:0]
	}
	c.begin(now)
	c.serve()
}

// ClockHeld reports whether the clock is held (see SetClockHold).
func (c *Core) ClockHeld() bool { return c.clockHold }
