//go:build !jepsenfaults

package transport

import "net/http"

// mountAdmin mounts nothing: release builds have no admin API (see
// admin_on.go, built with the jepsenfaults tag).
func mountAdmin(*http.ServeMux, Backend) {}
