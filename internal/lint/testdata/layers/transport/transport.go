// Package transport breaks its rules: it imports the engine core, and it
// uses a write type of the state.
package transport

import (
	_ "example.com/m/engine/core"
	"example.com/m/fsm"
)

var (
	_ fsm.Task     // allowed: a read type
	_ fsm.Mutation // not allowed
)
