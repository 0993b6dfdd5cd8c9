//go:build !jepsenbug_laneoverlap

package core

// bugLaneOverlap is off in release builds. The build tag
// jepsenbug_laneoverlap turns the deliberate fault on, for the
// fault-injection harness's self-test.
const bugLaneOverlap = false
