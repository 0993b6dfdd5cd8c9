package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// get fetches a console page of a node with an optional token cookie.
func get(t *testing.T, base, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+base+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.AddCookie(&http.Cookie{Name: "cronoq_token", Value: url.QueryEscape(token)})
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// readSSE reads a console event stream until it has carried until.
func readSSE(t *testing.T, ctx context.Context, base, path, until string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+base+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), until) {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		require.NoError(t, err, "reading the event stream: %s", got.String())
	}
	return got.String()
}

// TestPagesRender loads every page of the console of a follower of a
// three-node cluster, without a browser: the pages are readable as
// rendered by the server.
func TestPagesRender(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Console())
	leader, followers := c.Leader()
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract", Payload: []byte("s3://bucket/<x>")}, Key: "first"})
	require.NoError(t, err)
	// A moment between the first task and the workflow, on the leader's
	// clock (the same machine's).
	first, err := cl.Get(ctx, sub.ID)
	require.NoError(t, err)
	mid := first.SubmittedAt.Add(time.Millisecond)
	require.Eventually(t, func() bool { return time.Now().After(mid.Add(time.Millisecond)) }, time.Second, time.Millisecond)
	wf, err := cl.SubmitWorkflow(ctx, client.WorkflowSpec{Name: "nightly", Steps: []client.Step{
		{Name: "extract", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract"}}},
		{Name: "clean", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "clean"}}, DependsOn: []string{"extract"}},
		{Name: "load", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "load"}}, DependsOn: []string{"clean", "extract"}},
	}})
	require.NoError(t, err)
	_, err = cl.AddSchedule(ctx, client.Schedule{Name: "hourly", Cron: "@hourly", Task: client.Template{Pool: "etl", Kind: "report"}})
	require.NoError(t, err)
	c.Converged()

	base := followers[0].Addr()
	code, body := get(t, base, "/ui/", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<dd id="leader">`+leader.ID+`</dd>`)
	for _, n := range c.Live() {
		require.Contains(t, body, `data-member="`+n.ID+`"`)
		require.Contains(t, body, `data-peer="`+n.ID+`"`)
	}

	code, body = get(t, base, "/ui/pools", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-pool="etl"`)

	code, body = get(t, base, "/ui/tasks?pool=etl", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-task-id="`+sub.ID+`"`)
	// Newest first: the workflow's members come before the first task.
	require.Less(t, strings.Index(body, `data-task-id="`+wf.Tasks["load"]+`"`), strings.Index(body, `data-task-id="`+sub.ID+`"`))

	code, body = get(t, base, "/ui/tasks?key=first", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-task-id="`+sub.ID+`"`)
	require.NotContains(t, body, `data-task-id="`+wf.Tasks["load"]+`"`)

	code, body = get(t, base, "/ui/tasks?limit=2&order=oldest", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 2, strings.Count(body, "<tr data-task-id="))
	require.Contains(t, body, `id="next-page"`)

	code, body = get(t, base, "/ui/tasks?from="+url.QueryEscape(mid.Format(time.RFC3339Nano)), "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 3, strings.Count(body, "<tr data-task-id="), "the workflow's members only")
	require.NotContains(t, body, `data-task-id="`+sub.ID+`"`)
	code, body = get(t, base, "/ui/tasks?to="+url.QueryEscape(mid.Format(time.RFC3339Nano)), "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 1, strings.Count(body, "<tr data-task-id="), "the first task only")
	require.Contains(t, body, `data-task-id="`+sub.ID+`"`)
	code, body = get(t, base, "/ui/tasks?from=1h&limit=1", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 1, strings.Count(body, "<tr data-task-id="))
	require.Contains(t, body, `id="next-page"`)
	code, _ = get(t, base, "/ui/tasks?from=yesterday", "")
	require.Equal(t, http.StatusBadRequest, code)

	code, body = get(t, base, "/ui/tasks?status=nope", "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "status &#34;nope&#34;")

	code, body = get(t, base, "/ui/tasks/"+sub.ID, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "s3://bucket/&lt;x&gt;")
	require.Contains(t, body, `data-status="queued"`)

	code, _ = get(t, base, "/ui/tasks/nosuchtask", "")
	require.Equal(t, http.StatusNotFound, code)

	// The event stream of one task, from the events the node holds.
	sse := readSSE(t, ctx, base, "/ui/events?after=1&task="+sub.ID, `"task_id":"`+sub.ID+`"`)
	require.Contains(t, sse, `"status":"queued"`)
	require.Regexp(t, `id: \d+\ndata: \{"task_id":"`+sub.ID, sse)
	require.NotContains(t, sse, wf.Tasks["load"], "only the task's events")

	code, body = get(t, base, "/ui/workflows", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-workflow-id="`+wf.ID+`"`)

	code, body = get(t, base, "/ui/workflows/"+wf.ID, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<svg id="dag"`)
	require.Equal(t, 3, strings.Count(body, `data-from=`), "three dependency edges")

	code, body = get(t, base, "/ui/schedules", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-schedule="hourly"`)

	code, body = get(t, base, "/ui/static/console.js", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "EventSource")
}

// TestActionsFromFollower posts the console's forms to a follower: the
// writes reach the leader, and a form posted from another site is
// refused.
func TestActionsFromFollower(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Console())
	_, followers := c.Leader()
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract"}})
	require.NoError(t, err)

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, hdr map[string]string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, "http://"+followers[0].Addr()+path, nil)
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp
	}
	resp := post("/ui/tasks/"+sub.ID+"/cancel", map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp = post("/ui/pools/etl/pause", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	p, err := cl.GetPool(ctx, "etl")
	require.NoError(t, err)
	require.True(t, p.Paused)
	resp = post("/ui/pools/etl/resume", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	resp = post("/ui/tasks/"+sub.ID+"/cancel", map[string]string{"Origin": "http://" + followers[0].Addr()})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/ui/tasks/"+sub.ID+"?done=cancelled", resp.Header.Get("Location"))
	task, err := cl.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, task.Status)

	resp = post("/ui/tasks/"+sub.ID+"/retry", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	task, err = cl.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusQueued, task.Status)

	_, err = cl.AddSchedule(ctx, client.Schedule{Name: "hourly", Cron: "@hourly", Task: client.Template{Pool: "etl", Kind: "report"}})
	require.NoError(t, err)
	resp = post("/ui/schedules/hourly/pause", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	scheds, err := cl.ListSchedules(ctx)
	require.NoError(t, err)
	require.Len(t, scheds, 1)
	require.True(t, scheds[0].Paused)

	wf, err := cl.SubmitWorkflow(ctx, client.WorkflowSpec{Name: "w", Steps: []client.Step{
		{Name: "a", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "a"}}},
		{Name: "b", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "b"}}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	resp = post("/ui/workflows/"+wf.ID+"/cancel", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/ui/workflows/"+wf.ID+"?done=2+members+cancelled", resp.Header.Get("Location"))
	w, err := cl.GetWorkflow(ctx, wf.ID)
	require.NoError(t, err)
	require.Equal(t, client.WorkflowCancelled, w.Status)

	resp = post("/ui/tasks/"+sub.ID+"/explode", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestToken checks that the token entered in the console is what its
// calls carry: with ACLs on, a page without a token is refused and the
// same page with the management token is served.
func TestToken(t *testing.T) {
	const secret = "6f1c2e8a-0f4b-4d7e-9a51-3c1d2b7e9f00"
	c := testcluster.New(t, 3, testcluster.Console(), testcluster.ACLs(secret))
	_, followers := c.Leader()
	base := followers[0].Addr()
	code, body := get(t, base, "/ui/pools", "")
	require.Equal(t, http.StatusForbidden, code, body)
	require.Contains(t, body, "permission denied")
	code, body = get(t, base, "/ui/pools", secret)
	require.Equal(t, http.StatusOK, code, body)

	// The event stream without a token ends on the refusal; with the
	// token it starts.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := func(tok, until string) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+base+"/ui/events", nil)
		require.NoError(t, err)
		if tok != "" {
			req.AddCookie(&http.Cookie{Name: "cronoq_token", Value: url.QueryEscape(tok)})
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		buf := make([]byte, 4096)
		var got strings.Builder
		for !strings.Contains(got.String(), until) {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
		}
		if until == "event: failed" {
			// The refusal ends the stream.
			rest, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			got.Write(rest)
		}
		return got.String()
	}
	require.Contains(t, events("", "event: failed"), "permission denied")
	require.Contains(t, events(secret, "event: ready"), "event: ready")

	// The token form sets the cookie and goes back.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm("http://"+base+"/ui/token", url.Values{"token": {secret}, "next": {"/ui/pools"}})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/ui/pools", resp.Header.Get("Location"))
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == "cronoq_token" {
			ck = k
		}
	}
	require.NotNil(t, ck)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
}

// TestPagesWithoutLeader reads a task's and a workflow's page on a node
// that has lost its quorum: both are served from the node's replica, with
// a warning that says so, rather than refused; so is the cluster page.
func TestPagesWithoutLeader(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Console())
	leader, followers := c.Leader()
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract"}})
	require.NoError(t, err)
	wf, err := cl.SubmitWorkflow(ctx, client.WorkflowSpec{Name: "nightly", Steps: []client.Step{
		{Name: "extract", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract"}}},
		{Name: "load", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "load"}}, DependsOn: []string{"extract"}},
	}})
	require.NoError(t, err)
	c.Converged()

	survivor := followers[0]
	c.Stop(followers[1].ID)
	c.Stop(leader.ID)
	base := survivor.Addr()
	start := time.Now()
	code, body := get(t, base, "/ui/tasks/"+sub.ID, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Read from this node's replica: the leader could not be asked")
	require.Contains(t, body, `data-status="queued"`)
	code, body = get(t, base, "/ui/workflows/"+wf.ID, "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Read from this node's replica: the leader could not be asked")
	require.Equal(t, 2, strings.Count(body, `<g class="node`), "both steps drawn")
	t.Logf("both pages served without a leader in %s", time.Since(start))
	// The cluster page shows this node's view: the members, two of them
	// gone.
	code, body = get(t, base, "/ui/", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-member="`+survivor.ID+`"`)
}
