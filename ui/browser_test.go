package ui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// browserTimeout bounds each browser test.
const browserTimeout = 60 * time.Second

// browser starts a headless chromium for the test and returns its context,
// bounded by browserTimeout. Without chromium the test is skipped, unless
// CRONOQ_REQUIRE_BROWSER is set (as CI does): then it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CRONOQ_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium is not installed (apt-get install -y chromium) and CRONOQ_REQUIRE_BROWSER is set")
		}
		t.Skip("chromium is not installed (apt-get install -y chromium): the browser tests of the console are skipped; set CRONOQ_REQUIRE_BROWSER=1 to fail instead")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, browserTimeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Do(ctx), "starting %s", path)
	return ctx
}

// artifacts is where screenshots go: $CRONOQ_UI_ARTIFACTS, or the test's
// temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CRONOQ_UI_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// screenshot saves a full-page PNG of the current page.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err, "screenshot %s", name)
	path := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// waitText waits until the text of the element sel satisfies ok.
func waitText(ctx context.Context, sel string, ok func(string) bool) (string, error) {
	var last string
	for {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(function(){var e=document.querySelector(%q);return e?e.textContent:"";})()`, sel)))
		if err != nil {
			return last, err
		}
		last = strings.TrimSpace(text)
		if ok(last) {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for %s (last text %q): %w", sel, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitCount waits until the page has n elements matching sel.
func waitCount(ctx context.Context, sel string, n int) error {
	last := -1
	for {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		if err != nil {
			return err
		}
		if last = got; got == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d of %s (last count %d): %w", n, sel, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// click clicks the element sel in the page itself: a refresh may swap
// the element between a lookup and a click done through the protocol.
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(function(){var e=document.querySelector(%q);if(!e){return false;}e.click();return true;})()`, sel)))
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("clicking %s: no such element", sel)
		}
		return nil
	})
}

// notReloaded reports whether the marker set by markPage is still there:
// the page was updated in place, not loaded again.
const markPage = `window.__cronoqMark = 1`
const notReloaded = `window.__cronoqMark === 1`

// TestBrowserLiveTasksAndCancel drives the console of a follower of a
// three-node cluster in chromium: it loads and shows the leader; a task
// submitted through the API appears on the tasks page without a reload;
// cancelling it from its page cancels it.
func TestBrowserLiveTasksAndCancel(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	c := testcluster.New(t, 3, testcluster.Console())
	leader, followers := c.Leader()
	cl := c.Client()
	base := "http://" + followers[0].Addr()

	// The console loads and shows the cluster.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/")))
	got, err := waitText(ctx, "#leader", func(s string) bool { return s == leader.ID })
	require.NoError(t, err, "leader shown: %q", got)
	require.NoError(t, waitCount(ctx, "#members tbody tr[data-member]", 3), "the three members shown")
	screenshot(t, ctx, dir, "cluster")

	// A task submitted through the API appears live.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/tasks?pool=etl")))
	_, err = waitText(ctx, "#live-status", func(s string) bool { return s == "live" })
	require.NoError(t, err, "the event stream connects")
	_, err = chromedp.Run(ctx, chromedp.Evaluate[int](markPage))
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sub, err := cl.Submit(sctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract", Payload: []byte(`{"source":"s3://bucket/2026-12-03"}`)}, Key: "extract-2026-12-03"})
	require.NoError(t, err)
	row := fmt.Sprintf(`#tasks tr[data-task-id=%q]`, sub.ID)
	// Sooner than the page's fallback refresh (every 10 s): the event
	// brought it.
	lctx, lcancel := context.WithTimeout(ctx, 8*time.Second)
	defer lcancel()
	require.NoError(t, chromedp.Do(lctx, chromedp.WaitVisible(chromedp.CSS(row))), "the submitted task appears")
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](notReloaded))
	require.NoError(t, err)
	require.True(t, same, "the page was updated in place, not reloaded")
	for i := range 4 {
		_, err := cl.Submit(sctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: []string{"clean", "load", "report", "extract"}[i]}})
		require.NoError(t, err)
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#tasks tbody tr:nth-child(5)`))))
	screenshot(t, ctx, dir, "tasks")

	// Cancelling it from its page cancels it.
	require.NoError(t, chromedp.Do(ctx,
		click(row+" a"),
		chromedp.WaitVisible(chromedp.CSS(`#task-status[data-status="queued"]`)),
		click(`#cancel`),
		chromedp.WaitVisible(chromedp.CSS(`#task-status[data-status="cancelled"]`)),
	))
	// Its page lists its events: those the node held when the page
	// loaded, from its submission to its cancel.
	_, err = waitText(ctx, "#events", func(s string) bool {
		return strings.Contains(s, "queued") && strings.Contains(s, "cancelled")
	})
	require.NoError(t, err, "the task's events listed")
	flash, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#flash`)))
	require.NoError(t, err)
	require.Equal(t, "cancelled", flash)
	task, err := cl.Get(sctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, task.Status, "cancelled in the cluster")
	screenshot(t, ctx, dir, "task")
}

// TestBrowserLeaderStopped keeps the cluster page of a follower open while
// the leader is stopped: the page shows the new leader without a reload,
// and the console keeps working (a pool paused from it is paused).
func TestBrowserLeaderStopped(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	c := testcluster.New(t, 3, testcluster.Console())
	leader, followers := c.Leader()
	cl := c.Client(followers...)
	base := "http://" + followers[0].Addr()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := cl.Submit(sctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract"}})
	require.NoError(t, err)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/")))
	_, err = waitText(ctx, "#leader", func(s string) bool { return s == leader.ID })
	require.NoError(t, err)
	_, err = chromedp.Run(ctx, chromedp.Evaluate[int](markPage))
	require.NoError(t, err)

	c.Stop(leader.ID)
	newLeader, _ := c.Leader()
	require.NotEqual(t, leader.ID, newLeader.ID)
	got, err := waitText(ctx, "#leader", func(s string) bool { return s == newLeader.ID })
	require.NoError(t, err, "the new leader shown: %q", got)
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](notReloaded))
	require.NoError(t, err)
	require.True(t, same, "the page was updated in place, not reloaded")
	_, err = waitText(ctx, fmt.Sprintf(`#members tr[data-member=%q] .st`, leader.ID), func(s string) bool { return s == "left" || s == "failed" })
	require.NoError(t, err, "the stopped leader is shown as gone")
	screenshot(t, ctx, dir, "cluster-after-failover")

	// Still working: a write from the page reaches the new leader.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/pools"),
		chromedp.WaitVisible(chromedp.CSS(`#pools tr[data-pool="etl"] button`)),
		click(`#pools tr[data-pool="etl"] button`),
		chromedp.WaitVisible(chromedp.CSS(`#flash`)),
		chromedp.WaitVisible(chromedp.CSS(`#pools tr[data-pool="etl"] .st-paused`)),
	))
	p, err := cl.GetPool(sctx, "etl")
	require.NoError(t, err)
	require.True(t, p.Paused, "paused in the cluster")
	screenshot(t, ctx, dir, "pools")
}

// TestBrowserWorkflow opens a workflow's page before a worker runs it: its
// DAG shows each step's status, updated in place as the steps run.
func TestBrowserWorkflow(t *testing.T) {
	ctx := browser(t)
	dir := artifacts(t)
	c := testcluster.New(t, 3, testcluster.Console())
	_, followers := c.Leader()
	cl := c.Client()
	base := "http://" + followers[0].Addr()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	step := func(name, kind string, deps ...string) client.Step {
		return client.Step{Name: name, Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: kind}}, DependsOn: deps}
	}
	wf, err := cl.SubmitWorkflow(sctx, client.WorkflowSpec{Name: "nightly", Steps: []client.Step{
		step("extract", "extract"),
		step("clean", "clean", "extract"),
		step("validate", "validate", "extract"),
		step("load", "load", "clean", "validate"),
		step("report", "report", "load"),
	}})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/workflows/"+wf.ID)))
	_, err = waitText(ctx, "#live-status", func(s string) bool { return s == "live" })
	require.NoError(t, err)
	_, err = chromedp.Run(ctx, chromedp.Evaluate[int](markPage))
	require.NoError(t, err)
	require.NoError(t, waitCount(ctx, "#dag g.node", 5), "the five steps drawn")
	require.NoError(t, waitCount(ctx, "#dag path.edge", 5), "the five dependencies drawn")

	// A worker runs the steps; "load" waits for the test.
	release := make(chan struct{})
	done := func(context.Context, *client.Job) ([]byte, error) { return []byte("ok"), nil }
	w, err := cl.NewWorker(client.WorkerConfig{Pool: "etl", ID: "etl-worker-1", Handlers: map[string]client.Handler{
		"extract": client.HandlerFunc(done), "clean": client.HandlerFunc(done), "validate": client.HandlerFunc(done),
		"report": client.HandlerFunc(done),
		"load": client.HandlerFunc(func(ctx context.Context, _ *client.Job) ([]byte, error) {
			select {
			case <-release:
				return []byte("loaded 1204 rows"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
	}})
	require.NoError(t, err)
	released := false
	releaseOnce := func() {
		if !released {
			released = true
			close(release)
		}
	}
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		releaseOnce()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})

	nodeWith := func(id, status string) string {
		return fmt.Sprintf(`#dag a[data-task-id=%q] g.st-%s`, id, status)
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(nodeWith(wf.Tasks["extract"], "succeeded"))),
		chromedp.WaitVisible(chromedp.CSS(nodeWith(wf.Tasks["validate"], "succeeded"))),
		chromedp.WaitVisible(chromedp.CSS(nodeWith(wf.Tasks["load"], "running"))),
	), "the steps' statuses shown as they run")
	screenshot(t, ctx, dir, "workflow")

	releaseOnce()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(nodeWith(wf.Tasks["report"], "succeeded"))),
		chromedp.WaitVisible(chromedp.CSS(`#workflow-status .st-succeeded`)),
	))
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](notReloaded))
	require.NoError(t, err)
	require.True(t, same, "the page was updated in place, not reloaded")
	got, err := cl.GetWorkflow(sctx, wf.ID)
	require.NoError(t, err)
	require.Equal(t, client.WorkflowSucceeded, got.Status)
}
