//go:build jepsenbug_stalelease

package core

// bugStaleLease turns on a deliberate fault for the fault-injection harness's
// self-test: a completion under a lease that is no longer current
// (revoked, lost, or granted before a failover) is taken as if it were.
const bugStaleLease = true
