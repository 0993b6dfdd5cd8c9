//go:build jepsenbug_cronrefire

package fsm

// bugCronRefire turns on a deliberate fault for the fault-injection harness's
// self-test: a Fire whose slot is not after the schedule's cursor is
// applied.
const bugCronRefire = true
