//go:build !jepsenbug_cronrefire

package core

// bugCronRefire is off in release builds. The build tag jepsenbug_cronrefire turns the
// deliberate fault on, for the fault-injection harness's self-test.
const bugCronRefire = false
