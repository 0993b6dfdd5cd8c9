//go:build jepsenbug_followerread

package transport

// bugFollowerRead turns on a deliberate fault for the fault-injection
// harness's self-test: a task read that asks for linearizability is served
// from the local replica of whichever node received it, like a stale read,
// without going through the leader.
const bugFollowerRead = true
