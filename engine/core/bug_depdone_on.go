//go:build jepsenbug_depdone

package core

// bugDepDone turns on a deliberate fault for the fault-injection harness's
// self-test: under policy succeeded, a dependency that ends without success
// releases its dependents, as if their policy were done, instead of ending
// them cancelled.
const bugDepDone = true
