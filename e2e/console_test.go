package e2e

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// consoleGet fetches a page of a node's web console, with the cluster's
// token (if any) in the console's cookie.
func consoleGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, scheme+addr+path, nil)
	require.NoError(t, err)
	if secure.token != "" {
		req.AddCookie(&http.Cookie{Name: "cronoq_token", Value: url.QueryEscape(secure.token)})
	}
	resp, err := httpc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, buf.String()
}

// TestConsoleOnEveryAgent checks that every agent serves the web console
// at /ui/ (over TLS and with the caller's token when the cluster is
// secure): its pages show the cluster's leader and the tasks, and a task
// cancelled from a follower's console is cancelled.
func TestConsoleOnEveryAgent(t *testing.T) {
	c := newCluster(t)
	leader, followers := c.followers()
	id := c.submit(t, "-pool", "console", "-kind", "noop")

	for _, n := range c.alive() {
		code, body := consoleGet(t, n.httpAddr, "/ui/")
		require.Equal(t, http.StatusOK, code, "%s: %s", n.id, body)
		require.Contains(t, body, `<dd id="leader">`+leader.id+`</dd>`, n.id)
		require.Contains(t, body, `<dd id="node">`+n.id+`</dd>`, n.id)
		eventually(t, 10*time.Second, func() (bool, string) {
			code, body := consoleGet(t, n.httpAddr, "/ui/tasks?pool=console")
			return code == http.StatusOK && strings.Contains(body, `data-task-id="`+id+`"`), body
		})
	}

	req, err := http.NewRequest(http.MethodPost, scheme+followers[0].httpAddr+"/ui/tasks/"+id+"/cancel", nil)
	require.NoError(t, err)
	if secure.token != "" {
		req.AddCookie(&http.Cookie{Name: "cronoq_token", Value: url.QueryEscape(secure.token)})
	}
	resp, err := httpc.Do(req) // follows the redirect to the task's page
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "cancelled", c.status(t, id).Status)
}
