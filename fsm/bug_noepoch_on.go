//go:build jepsenbug_noepoch

package fsm

// bugNoEpoch turns on a deliberate fault for the fault-injection harness's
// self-test: commit batches are applied whatever their epoch.
const bugNoEpoch = true
