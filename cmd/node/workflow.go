package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronoq/cronoq/client"
)

// workflowCommands are the subcommands of `cronoq workflow`.
var workflowCommands = map[string]command{
	"submit": {Summary: "Submit a workflow from a JSON or HCL file", Run: runWorkflowSubmit},
	"status": {Summary: "Show a workflow and its tasks", Run: runWorkflowStatus},
	"wait":   {Summary: "Wait until a workflow ends and show it", Run: runWorkflowWait},
	"cancel": {Summary: "Cancel every live task of a workflow", Run: runWorkflowCancel},
	"list":   {Summary: "List workflows, filtered by status, page by page", Run: runWorkflowList},
}

// workflowStatuses are the workflow statuses -status accepts.
var workflowStatuses = []string{client.WorkflowRunning, client.WorkflowSucceeded, client.WorkflowFailed, client.WorkflowCancelled}

// runWorkflow dispatches `cronoq workflow`; without a subcommand it prints
// its help.
func runWorkflow(ctx context.Context, s stdio, args []string) error {
	if len(args) == 0 {
		args = []string{"-h"}
	}
	return dispatch(ctx, s, "cronoq workflow", workflowCommands, args)
}

func runWorkflowSubmit(ctx context.Context, s stdio, args []string) error {
	c := newCmd("workflow submit", "cronoq workflow submit -f FILE [-key KEY] [-wait]", `
Submit the workflow of FILE: its steps are inserted at once, each task blocked
until the steps it depends on end, and print its id. With -key, submitting
again with the same key returns the existing workflow ("duplicate": true) and
changes nothing. With -wait, wait until the workflow ends and print it
instead; the exit status is then 0 only if it succeeded (3 if it failed or was
cancelled).
`+workflowFileHelp+`

JSON output: {"id": "...", "duplicate": false, "key": "...", "tasks": {"extract":
"ID", ...}}, or the workflow object with -wait.`)
	cf := c.clientFlags()
	c.waitsHelp()
	var file, key string
	var wait bool
	var waitTimeout time.Duration
	c.fs.StringVar(&file, "f", "", "the workflow `FILE` (.json or .hcl; - for stdin)")
	c.fs.StringVar(&key, "key", "", "idempotency `KEY`")
	c.fs.BoolVar(&wait, "wait", false, "wait until the workflow ends and print it")
	c.fs.Var(durationValue{&waitTimeout, false}, "wait-timeout", "with -wait, give up waiting after `DUR` (0 = no limit)")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	if file == "" {
		return c.usageErr("-f FILE is required")
	}
	if c.set("wait-timeout") && !wait {
		return c.usageErr("-wait-timeout needs -wait")
	}
	name, steps, err := readWorkflowFile(s, "f", file)
	if err != nil {
		return err
	}
	c.explain = explainWorkflowField("f", file, steps)
	if wait {
		cf.waiting(s)
	}
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	spec := client.WorkflowSpec{Name: name, Key: key, Steps: steps}
	sub, err := call(ctx, c, cf, func(ctx context.Context) (*client.WorkflowSubmitted, error) { return cl.SubmitWorkflow(ctx, spec) })
	if err != nil {
		return err
	}
	if wait {
		return waitWorkflowAndShow(ctx, s, c, cf, cl, sub.ID, waitTimeout, "wait-timeout")
	}
	if cf.out.json() {
		tasks := sub.Tasks
		if tasks == nil {
			tasks = map[string]string{}
		}
		return writeJSON(s.Stdout, struct {
			ID        string            `json:"id"`
			Duplicate bool              `json:"duplicate"`
			Key       string            `json:"key"`
			Tasks     map[string]string `json:"tasks"`
		}{sub.ID, sub.Duplicate, sub.Key, tasks})
	}
	if sub.Duplicate {
		fmt.Fprintf(s.Stderr, "cronoq: key %q already names workflow %s; nothing submitted\n", key, sub.ID)
	}
	_, err = fmt.Fprintln(s.Stdout, sub.ID)
	return err
}

func runWorkflowStatus(ctx context.Context, s stdio, args []string) error {
	c := newCmd("workflow status", "cronoq workflow status ID | cronoq workflow status -key KEY", `
Show a workflow and its tasks, by id or by idempotency key.

JSON output: the workflow object, {"id", "name", "key", "status":
"running|succeeded|failed|cancelled", "submitted_at", "updated_at",
"finished_at", "schedule", "slot", "parent", "tasks": [task...]}.`)
	cf := c.clientFlags()
	var key string
	c.fs.StringVar(&key, "key", "", "find the workflow by its idempotency `KEY`")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	id, err := objectRef(c, "workflow", key)
	if err != nil {
		return err
	}
	w, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Workflow, error) {
		if id != "" {
			return cl.GetWorkflow(ctx, id)
		}
		return cl.GetWorkflowByKey(ctx, key)
	})
	if err != nil {
		return notFound(err, "workflow", id, key)
	}
	if w == nil {
		return notFound(client.ErrNotFound, "workflow", id, key)
	}
	return showWorkflow(s, cf, w)
}

func showWorkflow(s stdio, cf *clientFlags, w *client.Workflow) error {
	if cf.out.json() {
		return writeJSON(s.Stdout, newWorkflowObjectJSON(w))
	}
	return writeWorkflowText(s.Stdout, w)
}

func runWorkflowWait(ctx context.Context, s stdio, args []string) error {
	c := newCmd("workflow wait", "cronoq workflow wait ID [-timeout DUR] | cronoq workflow wait -key KEY [-timeout DUR]", `
Wait until a workflow ends (succeeded, failed or cancelled) and show it. The
exit status is 0 only if it succeeded, 3 if it ended otherwise, and 1 if the
wait timed out or failed.

JSON output: the workflow object once it has ended.`)
	cf := c.clientFlags()
	c.waitsHelp()
	var key string
	var timeout time.Duration
	c.fs.StringVar(&key, "key", "", "find the workflow by its idempotency `KEY`")
	c.fs.Var(durationValue{&timeout, false}, "timeout", "give up after `DUR` (0 = no limit)")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	id, err := objectRef(c, "workflow", key)
	if err != nil {
		return err
	}
	cf.waiting(s)
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	if id == "" {
		w, err := call(ctx, c, cf, func(ctx context.Context) (*client.Workflow, error) { return cl.GetWorkflowByKey(ctx, key) })
		if err != nil {
			return notFound(err, "workflow", "", key)
		}
		id = w.ID
	}
	return waitWorkflowAndShow(ctx, s, c, cf, cl, id, timeout, "timeout")
}

// waitWorkflowAndShow waits for the workflow to end, shows it, and returns
// a *taskFailedError unless it succeeded. timeoutFlag names the flag that
// set timeout.
func waitWorkflowAndShow(ctx context.Context, s stdio, c *cmd, cf *clientFlags, cl *client.Client, id string, timeout time.Duration, timeoutFlag string) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	w, err := cl.WaitWorkflow(wctx, id)
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return fmt.Errorf("workflow %s did not end within -%s %s", id, timeoutFlag, timeout)
		}
		return notFound(cf.callError(ctx, c, err), "workflow", id, "")
	}
	if err := showWorkflow(s, cf, w); err != nil {
		return err
	}
	if w.Status != client.WorkflowSucceeded {
		return &taskFailedError{noun: "workflow", id: w.ID, status: w.Status, message: workflowCause(w)}
	}
	return nil
}

// workflowCause explains why a workflow did not succeed: the first member
// to end failed or expired, else the first cancelled one.
func workflowCause(w *client.Workflow) string {
	var failed, cancelled *client.Task
	for _, t := range w.Tasks {
		if t == nil {
			continue
		}
		switch t.Status {
		case client.StatusFailed, client.StatusExpired:
			if failed == nil || t.FinishedAt.Before(failed.FinishedAt) {
				failed = t
			}
		case client.StatusCancelled:
			if cancelled == nil || t.FinishedAt.Before(cancelled.FinishedAt) {
				cancelled = t
			}
		}
	}
	t := failed
	if t == nil {
		t = cancelled
	}
	if t == nil {
		return ""
	}
	msg := "step " + t.Step + " " + t.Status
	if t.Step == "" {
		msg = "task " + t.ID + " " + t.Status
	}
	if t.Error != "" {
		msg += ": " + t.Error
	}
	return msg
}

func runWorkflowCancel(ctx context.Context, s stdio, args []string) error {
	c := newCmd("workflow cancel", "cronoq workflow cancel ID", `
Cancel a workflow: every live task of it ends cancelled at once (running
attempts are told to stop), and so does the workflow. "cancelled" counts the
tasks this call ended: 0 when the workflow had already ended.

JSON output: {"id": "...", "cancelled": N}`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	id := c.args[0]
	if id == "" {
		return c.usageErr("empty workflow ID")
	}
	n, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (int, error) { return cl.CancelWorkflow(ctx, id) })
	if err != nil {
		return notFound(err, "workflow", id, "")
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			ID        string `json:"id"`
			Cancelled int    `json:"cancelled"`
		}{id, n})
	}
	switch n {
	case 0:
		_, err = fmt.Fprintf(s.Stdout, "workflow %s: no live task; nothing cancelled\n", id)
	case 1:
		_, err = fmt.Fprintf(s.Stdout, "workflow %s cancelled: 1 task ended\n", id)
	default:
		_, err = fmt.Fprintf(s.Stdout, "workflow %s cancelled: %d tasks ended\n", id, n)
	}
	return err
}

func runWorkflowList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("workflow list", "cronoq workflow list [-status S]... [-limit N] [-after ID]", `
List workflows in id (submission) order, without their tasks, filtered by
statuses, one page at a time: when more workflows match, the next page starts
after the id given as "next" (pass it to -after).

Statuses: running, succeeded, failed, cancelled.

JSON output: {"workflows": [{"id", "name", "key", "status", "submitted_at",
"updated_at", "finished_at", "schedule", "slot", "parent"}...], "next": "ID or
empty"}`)
	cf := c.clientFlags()
	var opt client.WorkflowListOptions
	opt.Limit = defaultListLimit
	c.fs.Var(statusList{list: &opt.Statuses, allowed: workflowStatuses}, "status",
		"only workflows with this `STATUS` (repeatable, or comma-separated)")
	c.fs.Var(intValue{&opt.Limit, 1}, "limit", "at most `N` workflows")
	c.fs.StringVar(&opt.After, "after", "", "start after this workflow `ID` (the \"next\" of the previous page)")
	c.fs.BoolVar(&opt.Stale, "stale", false, "read from the answering node's replica, which may lag behind the leader")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	type page struct {
		ws   []*client.Workflow
		next string
	}
	p, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (page, error) {
		ws, next, err := cl.ListWorkflows(ctx, opt)
		return page{ws, next}, err
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, newWorkflowListJSON(p.ws, p.next))
	}
	if len(p.ws) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no workflows")
		return err
	}
	tb := newTable(s.Stdout, "ID", "NAME", "STATUS", "SUBMITTED", "FINISHED", "SCHEDULE")
	for _, w := range p.ws {
		if w != nil {
			tb.row(w.ID, w.Name, w.Status, textTime(w.SubmittedAt), textTime(w.FinishedAt), w.Schedule)
		}
	}
	if err := tb.flush(); err != nil {
		return err
	}
	if p.next != "" {
		_, err = fmt.Fprintf(s.Stdout, "more: %s\n", c.nextPage(p.next, "status", "limit", "stale", "addr"))
	}
	return err
}

// writeWorkflowText writes a workflow as "field: value" lines, then its
// tasks as a table whose DEPENDS ON column names members by step.
func writeWorkflowText(w io.Writer, wf *client.Workflow) error {
	type field struct{ name, value string }
	fields := []field{
		{"id", wf.ID},
		{"name", wf.Name},
		{"key", wf.Key},
		{"status", wf.Status},
		{"submitted at", timeOrEmpty(wf.SubmittedAt)},
		{"finished at", timeOrEmpty(wf.FinishedAt)},
		{"schedule", wf.Schedule},
		{"slot", timeOrEmpty(wf.Slot)},
		{"parent", wf.Parent},
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, f := range fields {
		if f.value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", f.name, oneLine(f.value))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	if len(wf.Tasks) == 0 {
		return nil
	}
	steps := make(map[string]string, len(wf.Tasks))
	for _, t := range wf.Tasks {
		if t != nil && t.Step != "" {
			steps[t.ID] = t.Step
		}
	}
	fmt.Fprintln(w)
	tb := newTable(w, "STEP", "ID", "POOL", "KIND", "STATUS", "ATTEMPT", "DEPENDS ON", "ERROR")
	for _, t := range wf.Tasks {
		if t == nil {
			continue
		}
		deps := make([]string, len(t.DependsOn))
		for i, id := range t.DependsOn {
			deps[i] = id
			if st, ok := steps[id]; ok {
				deps[i] = st
			}
		}
		tb.row(t.Step, t.ID, t.Pool, t.Kind, t.Status, strconv.Itoa(t.Attempt), strings.Join(deps, ","), truncate(t.Error, 60))
	}
	return tb.flush()
}
