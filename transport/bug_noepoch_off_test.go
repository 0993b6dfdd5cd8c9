//go:build jepsenfaults && !jepsenbug_noepoch

package transport_test

// noEpochBug tells the tests whether the FSM was built with the noepoch
// fault (which skips the epoch check of commit batches).
const noEpochBug = false
