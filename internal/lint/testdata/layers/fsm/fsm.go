// Package fsm breaks its rule: it imports a package of the module.
package fsm

import _ "example.com/m/metrics"

// Task is read by the server.
type Task struct{}

// Mutation is a write path.
type Mutation struct{}
