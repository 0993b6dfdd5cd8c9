// Package engine breaks its rule: it imports the cluster above it.
package engine

import _ "example.com/m/cluster"
