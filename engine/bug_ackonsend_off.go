//go:build !jepsenbug_ackonsend

package engine

// bugAckOnSend is off in release builds. The build tag jepsenbug_ackonsend
// turns the deliberate fault on, for the fault-injection harness's
// self-test.
const bugAckOnSend = false
