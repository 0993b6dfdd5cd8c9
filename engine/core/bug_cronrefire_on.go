//go:build jepsenbug_cronrefire

package core

// bugCronRefire turns on a deliberate fault for the fault-injection harness's
// self-test: a new leader replays every recurring schedule from
// just before its committed cursor, firing the last fired slot again under a
// suffixed slot key.
const bugCronRefire = true
