package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/client"
)

// connect validates the client flags and returns a Client for them.
func (cf *clientFlags) connect(logger hclog.Logger) (*client.Client, error) {
	addrs, err := cf.validate()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{}
	if logger != nil {
		opts = append(opts, client.WithLogger(logger))
	}
	c, err := client.New(addrs, opts...)
	if err != nil {
		return nil, usagef("invalid -addr: %v", err)
	}
	return c, nil
}

// callCtx bounds a call to the cluster by -rpc-timeout.
func (cf *clientFlags) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cf.rpcTimeout)
}

// callError explains an error of the SDK for people: refused input is a
// usage error, an expired -rpc-timeout and an interrupt are named as such.
func (cf *clientFlags) callError(parent context.Context, err error) error {
	var inv *client.InvalidError
	switch {
	case errors.As(err, &inv):
		return &usageError{msg: err.Error()}
	case parent.Err() != nil:
		return fmt.Errorf("interrupted: %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer within -rpc-timeout %s: %w", cf.rpcTimeout, err)
	}
	return err
}

// taskFlags are the flags describing a task, shared by submit and recurring
// add.
type taskFlags struct {
	pool, kind, key, priority, payload string
	timeout                            time.Duration
	maxAttempts                        int
	labels, tags                       map[string]string
}

func (c *cmd) taskFlags() *taskFlags {
	tf := &taskFlags{priority: client.PriorityNormal, labels: map[string]string{}, tags: map[string]string{}}
	c.fs.StringVar(&tf.pool, "pool", "", "`pool` of the task (required)")
	c.fs.StringVar(&tf.kind, "kind", "", "`kind` of the task, as workers know it (required)")
	c.fs.Var(enumValue{&tf.priority, []string{client.PriorityHigh, client.PriorityNormal, client.PriorityLow}},
		"priority", "priority `class`: high, normal or low")
	c.fs.StringVar(&tf.payload, "payload", "", "payload: `TEXT` as is, @FILE the file's bytes, @- the standard input")
	c.fs.Var(durationValue{&tf.timeout, false}, "timeout", "per-attempt timeout (`DUR`, 0 = none)")
	c.fs.Var(intValue{&tf.maxAttempts, 1}, "max-attempts", "most attempts before the task fails (`N`, default: the cluster's)")
	c.fs.Var(kvValue{tf.labels}, "label", "capacity label `k=v` the worker must offer (repeatable)")
	c.fs.Var(kvValue{tf.tags}, "tag", "tag `k=v` carried to the worker (repeatable)")
	return tf
}

// spec checks the required task flags and builds the spec.
func (tf *taskFlags) spec(c *cmd, s stdio) (client.TaskSpec, error) {
	switch {
	case tf.pool == "":
		return client.TaskSpec{}, c.usageErr("-pool is required")
	case tf.kind == "":
		return client.TaskSpec{}, c.usageErr("-kind is required")
	}
	var payload []byte
	if tf.payload != "" {
		var err error
		if payload, err = readPayload(s, tf.payload); err != nil {
			return client.TaskSpec{}, err
		}
	}
	spec := client.TaskSpec{
		Pool:        tf.pool,
		Kind:        tf.kind,
		Key:         tf.key,
		Priority:    tf.priority,
		Payload:     payload,
		Timeout:     tf.timeout,
		MaxAttempts: tf.maxAttempts,
	}
	if len(tf.labels) > 0 {
		spec.Labels = tf.labels
	}
	if len(tf.tags) > 0 {
		spec.Tags = tf.tags
	}
	return spec, nil
}

func runSubmit(ctx context.Context, s stdio, args []string) error {
	c := newCmd("submit", "cronoq submit -pool P -kind K [flags]", `
Submit a task and print its id. With -key, submitting again with the same key
returns the existing task ("duplicate": true) and changes nothing. With -wait,
wait until the task ends and print it instead; the exit status is then 0 only
if it succeeded (3 if it failed, was cancelled or expired).

JSON output: {"id": "...", "duplicate": false}, or the task object with -wait.`)
	cf := c.clientFlags()
	tf := c.taskFlags()
	c.fs.StringVar(&tf.key, "key", "", "idempotency `key`")
	var delay, waitTimeout time.Duration
	var runAt, deadline time.Time
	var wait bool
	c.fs.Var(durationValue{&delay, false}, "delay", "run the task this long (`DUR`) after submission; excludes -run-at")
	c.fs.Var(timeValue{&runAt}, "run-at", "run the task at this `RFC3339` time; excludes -delay")
	c.fs.Var(timeValue{&deadline}, "deadline", "the task expires if it has not succeeded by this `RFC3339` time")
	c.fs.BoolVar(&wait, "wait", false, "wait until the task ends and print it")
	c.fs.Var(durationValue{&waitTimeout, false}, "wait-timeout", "with -wait, give up waiting after `DUR` (0 = no limit)")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	if c.set("delay") && c.set("run-at") {
		return c.usageErr("-delay and -run-at exclude each other")
	}
	if c.set("wait-timeout") && !wait {
		return c.usageErr("-wait-timeout needs -wait")
	}
	if !deadline.IsZero() && !runAt.IsZero() && deadline.Before(runAt) {
		return c.usageErr("-deadline %s is before -run-at %s", deadline.Format(time.RFC3339), runAt.Format(time.RFC3339))
	}
	spec, err := tf.spec(c, s)
	if err != nil {
		return err
	}
	spec.Delay, spec.RunAt, spec.Deadline = delay, runAt, deadline

	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := cf.callCtx(ctx)
	sub, err := cl.Submit(cctx, spec)
	cancel()
	if err != nil {
		return cf.callError(ctx, err)
	}
	if wait {
		return waitAndShow(ctx, s, cf, cl, sub.ID, "", waitTimeout)
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}{sub.ID, sub.Duplicate})
	}
	if sub.Duplicate {
		fmt.Fprintf(s.Stderr, "cronoq: key %q already names task %s; nothing submitted\n", spec.Key, sub.ID)
	}
	_, err = fmt.Fprintln(s.Stdout, sub.ID)
	return err
}

// taskRef reads the task a command is about: one positional ID, or -key.
func taskRef(c *cmd, key string) (id string, err error) {
	switch {
	case key != "" && len(c.args) > 0:
		return "", c.usageErr("give a task ID or -key, not both")
	case key != "":
		return "", nil
	case len(c.args) == 0:
		return "", c.usageErr("missing task ID (or -key KEY)")
	case len(c.args) > 1:
		return "", c.usageErr("unexpected argument %q", c.args[1])
	case c.args[0] == "":
		return "", c.usageErr("empty task ID")
	}
	return c.args[0], nil
}

// notFound rewrites a not-found error about a task.
func notFound(err error, id, key string) error {
	if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if id != "" {
		return fmt.Errorf("task %s not found", id)
	}
	return fmt.Errorf("no task with key %q", key)
}

func runStatus(ctx context.Context, s stdio, args []string) error {
	c := newCmd("status", "cronoq status ID | cronoq status -key KEY", `
Show a task, by id or by idempotency key.

JSON output: the task object.`)
	cf := c.clientFlags()
	var key string
	c.fs.StringVar(&key, "key", "", "find the task by its idempotency `key`")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	id, err := taskRef(c, key)
	if err != nil {
		return err
	}
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := cf.callCtx(ctx)
	defer cancel()
	var t *client.Task
	if id != "" {
		t, err = cl.Get(cctx, id)
	} else {
		t, err = cl.GetByKey(cctx, key)
	}
	if err != nil {
		return notFound(cf.callError(ctx, err), id, key)
	}
	if t == nil {
		return notFound(client.ErrNotFound, id, key)
	}
	return showTask(s, cf, t)
}

func showTask(s stdio, cf *clientFlags, t *client.Task) error {
	if cf.out.json() {
		return writeJSON(s.Stdout, newTaskJSON(t))
	}
	return writeTaskText(s.Stdout, t)
}

func runWait(ctx context.Context, s stdio, args []string) error {
	c := newCmd("wait", "cronoq wait ID [-timeout DUR] | cronoq wait -key KEY [-timeout DUR]", `
Wait until a task ends (succeeded, failed, cancelled or expired) and show it.
The exit status is 0 only if it succeeded, 3 if it ended otherwise, and 1 if
the wait timed out or failed.

JSON output: the task object once it has ended.`)
	cf := c.clientFlags()
	var key string
	var timeout time.Duration
	c.fs.StringVar(&key, "key", "", "find the task by its idempotency `key`")
	c.fs.Var(durationValue{&timeout, false}, "timeout", "give up after `DUR` (0 = no limit)")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	id, err := taskRef(c, key)
	if err != nil {
		return err
	}
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	return waitAndShow(ctx, s, cf, cl, id, key, timeout)
}

// waitAndShow waits for the task (by id, else by key) to end, shows it, and
// returns a *taskFailedError unless it succeeded.
func waitAndShow(ctx context.Context, s stdio, cf *clientFlags, cl *client.Client, id, key string, timeout time.Duration) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	var t *client.Task
	var err error
	if id != "" {
		t, err = cl.Wait(wctx, id)
	} else {
		t, err = cl.WaitKey(wctx, key)
	}
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			what := "task " + id
			if id == "" {
				what = fmt.Sprintf("task with key %q", key)
			}
			return fmt.Errorf("%s did not end within -timeout %s", what, timeout)
		}
		return notFound(cf.callError(ctx, err), id, key)
	}
	if err := showTask(s, cf, t); err != nil {
		return err
	}
	if t.Status != client.StatusSucceeded {
		return &taskFailedError{id: t.ID, status: t.Status, message: t.Error}
	}
	return nil
}

func runCancel(ctx context.Context, s stdio, args []string) error {
	c := newCmd("cancel", "cronoq cancel ID", `
Cancel a task. A queued task ends at once; a running attempt's lease is revoked
and its worker is told to stop. "cancelled" is true when this call cancelled
the task, false when it had already ended.

JSON output: {"id": "...", "cancelled": true|false}`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	id := c.args[0]
	if id == "" {
		return c.usageErr("empty task ID")
	}
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := cf.callCtx(ctx)
	defer cancel()
	cancelled, err := cl.Cancel(cctx, id)
	if err != nil {
		return notFound(cf.callError(ctx, err), id, "")
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			ID        string `json:"id"`
			Cancelled bool   `json:"cancelled"`
		}{id, cancelled})
	}
	if cancelled {
		_, err = fmt.Fprintf(s.Stdout, "task %s cancelled\n", id)
	} else {
		_, err = fmt.Fprintf(s.Stdout, "task %s had already ended; nothing cancelled\n", id)
	}
	return err
}

// statuses are the task statuses -status accepts.
var statuses = []string{
	client.StatusScheduled, client.StatusQueued, client.StatusRunning, client.StatusRetrying,
	client.StatusSucceeded, client.StatusFailed, client.StatusCancelled, client.StatusExpired,
}

const defaultListLimit = 100

func runList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("list", "cronoq list [-pool P]... [-status S]... [-limit N] [-after ID]", `
List tasks in id (submission) order, filtered by pools and statuses, one page
at a time: when more tasks match, the next page starts after the id given as
"next" (pass it to -after).

Statuses: scheduled, queued, running, retrying, succeeded, failed, cancelled,
expired.

JSON output: {"tasks": [task...], "next": "ID or empty"}`)
	cf := c.clientFlags()
	var opt client.ListOptions
	opt.Limit = defaultListLimit
	c.fs.Var(listValue{&opt.Pools}, "pool", "only tasks of this `pool` (repeatable, or comma-separated)")
	c.fs.Var(statusList{&opt.Statuses}, "status", "only tasks with this `status` (repeatable, or comma-separated)")
	c.fs.Var(intValue{&opt.Limit, 1}, "limit", "at most `N` tasks")
	c.fs.StringVar(&opt.After, "after", "", "start after this task `ID` (the \"next\" of the previous page)")
	c.fs.BoolVar(&opt.Stale, "stale", false, "read from the answering node's replica, which may lag behind the leader")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := cf.callCtx(ctx)
	defer cancel()
	tasks, next, err := cl.List(cctx, opt)
	if err != nil {
		return cf.callError(ctx, err)
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, newListJSON(tasks, next))
	}
	if len(tasks) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no tasks")
		return err
	}
	tb := newTable(s.Stdout, "ID", "POOL", "KIND", "STATUS", "ATTEMPT", "PRIORITY", "SUBMITTED", "ERROR")
	for _, t := range tasks {
		if t == nil {
			continue
		}
		tb.row(t.ID, t.Pool, t.Kind, t.Status, strconv.Itoa(t.Attempt), orDefault(t.Priority, client.PriorityNormal),
			textTime(t.SubmittedAt), truncate(t.Error, 60))
	}
	if err := tb.flush(); err != nil {
		return err
	}
	if next != "" {
		_, err = fmt.Fprintf(s.Stdout, "more: cronoq list -after %s\n", next)
	}
	return err
}

// statusList is the -status flag of list: a listValue restricted to known
// statuses.
type statusList struct{ list *[]string }

func (v statusList) String() string { return listValue(v).String() }

func (v statusList) Set(s string) error {
	var items []string
	if err := (listValue{&items}).Set(s); err != nil {
		return err
	}
	for _, it := range items {
		if err := (enumValue{new(string), statuses}).Set(it); err != nil {
			return fmt.Errorf("unknown status %q: %w", it, err)
		}
	}
	*v.list = append(*v.list, items...)
	return nil
}
