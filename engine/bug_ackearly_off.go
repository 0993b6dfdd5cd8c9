//go:build !jepsenbug_ackearly

package engine

// bugAckEarly is off in release builds. The build tag jepsenbug_ackearly turns the
// deliberate fault on, for the fault-injection harness's self-test.
const bugAckEarly = false
