//go:build !jepsenbug_cronrefire

package fsm

// bugCronRefire is off in release builds. The build tag jepsenbug_cronrefire turns the
// deliberate fault on, for the fault-injection harness's self-test.
const bugCronRefire = false
