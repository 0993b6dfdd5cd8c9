//go:build !jepsenbug_stalelease

package fsm

// bugStaleLease is off in release builds. The build tag jepsenbug_stalelease turns the
// deliberate fault on, for the fault-injection harness's self-test.
const bugStaleLease = false
