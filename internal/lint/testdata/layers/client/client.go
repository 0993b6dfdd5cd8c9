// Package client breaks its rule: it imports the API server.
package client

import (
	_ "example.com/m/api/v1"
	_ "example.com/m/transport"
)
