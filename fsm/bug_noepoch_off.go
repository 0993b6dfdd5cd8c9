//go:build !jepsenbug_noepoch

package fsm

// bugNoEpoch is off in release builds. The build tag jepsenbug_noepoch turns the
// deliberate fault on, for the fault-injection harness's self-test.
const bugNoEpoch = false
