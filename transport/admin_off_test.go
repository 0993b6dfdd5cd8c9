//go:build !jepsenfaults

package transport_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A release build serves no admin API.
func TestNoAdminAPIInReleaseBuilds(t *testing.T) {
	c := newTestCluster(t, 1, 3, 100*time.Millisecond) // never forms: no raft traffic needed
	n := c.Live()[0]
	for _, path := range []string{"/admin/raft", "/admin/fsm/hash", "/admin/clock", "/admin/disk"} {
		code, _ := httpGet(t, n, path)
		require.Equal(t, http.StatusNotFound, code, path)
	}
	for _, path := range []string{"/admin/barrier", "/admin/clock", "/admin/disk"} {
		resp, err := http.Post("http://"+n.Addr()+path, "application/json", strings.NewReader(`{"offset_ms":1000}`))
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
	// The profiler is off unless the agent asks for it (-enable-debug).
	code, _ := httpGet(t, n, "/debug/pprof/")
	require.Equal(t, http.StatusNotFound, code, "/debug/pprof/")
	// The node still serves the rest.
	code, _ = httpGet(t, n, "/v1/health")
	require.Equal(t, http.StatusServiceUnavailable, code)
}
