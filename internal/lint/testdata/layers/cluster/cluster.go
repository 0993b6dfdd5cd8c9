// Package cluster breaks its rule: it imports the API server above it,
// and keeps it too (allowed: the engine below it).
package cluster

import (
	_ "example.com/m/engine"
	_ "example.com/m/transport"
)
