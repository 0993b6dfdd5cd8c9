package core

import (
	"slices"
	"strings"

	"github.com/cronoq/cronoq/fsm"
)

// RevokeLeases ends every running attempt as if its heartbeat window had
// lapsed: its worker is told to stop, and the task is retried while it has
// attempts left, else it fails with reason. No lease granted before the
// call is current afterwards, so a heartbeat or a completion under one is
// refused with ErrStaleLease. It returns how many attempts it ended; their
// mutations are in the next Output. No timer runs.
//
// A restore from a backup uses it: the leases in a backup were granted by a
// cluster state that no longer exists once the backup replaces it.
func (c *Core) RevokeLeases(reason string) int {
	running := make([]*task, 0, len(c.leases))
	for _, t := range c.leases {
		running = append(running, t)
	}
	// Map order must not reach the output.
	slices.SortFunc(running, func(a, b *task) int { return strings.Compare(a.id, b.id) })
	for _, t := range running {
		c.abort(t, reason)
		c.failAttempt(t, reason, 0, fsm.AttemptLost)
	}
	return len(running)
}
