//go:build jepsenbug_ackearly

package engine

// bugAckEarly turns on a deliberate fault for the fault-injection harness's
// self-test: a submit's reply is released as soon as the core
// answers, before its batch is durable.
const bugAckEarly = true
