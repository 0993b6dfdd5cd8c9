//go:build !jepsenbug_depdone

package core

// bugDepDone is off in release builds. The build tag jepsenbug_depdone turns
// the deliberate fault on, for the fault-injection harness's self-test.
const bugDepDone = false
