// Package w breaks its rule: it imports the cluster.
package w

import (
	_ "example.com/m/client"
	_ "example.com/m/cluster"
)
