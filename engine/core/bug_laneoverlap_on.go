//go:build jepsenbug_laneoverlap

package core

// bugLaneOverlap turns on a deliberate fault for the fault-injection
// harness's self-test: a lane lets its next task through while its head
// runs, so two tasks with the same ordering key may hold leases at once.
const bugLaneOverlap = true
