//go:build jepsenbug_stalelease

package fsm

// bugStaleLease turns on a deliberate fault for the fault-injection harness's
// self-test: a Retry or Finish naming a lease that is not the running
// attempt's current one is applied.
const bugStaleLease = true
