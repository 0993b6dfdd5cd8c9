// Package metrics breaks its rule: it imports the engine.
package metrics

import _ "example.com/m/engine"
