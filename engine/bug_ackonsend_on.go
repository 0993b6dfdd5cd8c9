//go:build jepsenbug_ackonsend

package engine

// bugAckOnSend turns on a deliberate fault for the fault-injection
// harness's self-test: the leader acks a subscription's events as soon as
// they are sent to a consumer, before the consumer's own ack is durable.
const bugAckOnSend = true
