// Package core breaks its rule: it imports the driver above it.
package core

import _ "example.com/m/engine"
