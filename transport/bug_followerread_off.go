//go:build !jepsenbug_followerread

package transport

// bugFollowerRead is off in release builds. The build tag
// jepsenbug_followerread turns the deliberate fault on, for the
// fault-injection harness's self-test.
const bugFollowerRead = false
