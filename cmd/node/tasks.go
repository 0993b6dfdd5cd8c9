package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cronoq/cronoq/client"
)

func runSubmit(ctx context.Context, s stdio, args []string) error {
	c := newCmd("submit", "cronoq submit -pool P -kind K [flags]", `
Submit a task and print its id. With -key, submitting again with the same key
returns the existing task ("duplicate": true) and changes nothing. With -wait,
wait until the task ends and print it instead; the exit status is then 0 only
if it succeeded (3 if it failed, was cancelled or expired).

-depends-on (repeatable) names a task this one waits for, by ID or as key:KEY
(the task with that idempotency key): the task is blocked until they all end.
With -dependency-policy succeeded (the default) it then runs if they all
succeeded, and ends cancelled without running otherwise; with done, it runs
once they ended, whatever their status.

-ordering-key puts the task in a lane of its pool: the tasks with the same
ordering key run one at a time, in submit order. When one ends without
succeeding, the lane runs on, or, under the pool's ordering policy block,
waits until that task is retried ('cronoq retry') or deleted ('cronoq
delete'). -concurrency-key groups tasks whose running ones the pool's
concurrency key limit caps (see 'cronoq pool set -h').

-external submits a task no worker runs: once ready (its dependencies ended
and its run time reached) it waits until 'cronoq complete' ends it, or its
deadline passes.

A payload refused by the schema of its kind ('cronoq kind set -h') exits 2,
naming the failing JSON path.

JSON output: {"id": "...", "duplicate": false}, or the task object with -wait.`)
	cf := c.clientFlags()
	c.waitsHelp()
	tf := c.templateFlags()
	var spec client.TaskSpec
	var waitTimeout time.Duration
	var wait bool
	c.fs.StringVar(&spec.Key, "key", "", "idempotency `KEY`")
	c.fs.Var(durationValue{&spec.Delay, false}, "delay", "run the task this long (`DUR`) after submission; excludes -run-at")
	c.fs.Var(timeValue{&spec.RunAt}, "run-at", "run the task at this `RFC3339` time; excludes -delay")
	c.fs.Var(timeValue{&spec.Deadline}, "deadline", "the task expires if it has not succeeded by this `RFC3339` time")
	c.fs.Var(taskRefList{&spec.DependsOn}, "depends-on", "wait for the task `ID`, or key:KEY for the task with that key (repeatable)")
	c.fs.Var(enumValue{&spec.DependencyPolicy, []string{client.DependencyPolicySucceeded, client.DependencyPolicyDone}},
		"dependency-policy", "with -depends-on, run once they all succeeded (`POLICY` succeeded, the default) or once they ended (done)")
	c.fs.BoolVar(&spec.External, "external", false, "no worker runs the task: 'cronoq complete' ends it")
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
	if c.set("dependency-policy") && len(spec.DependsOn) == 0 {
		return c.usageErr("-dependency-policy needs -depends-on")
	}
	var err error
	if spec.Template, err = tf.template(c, s); err != nil {
		return err
	}
	if wait {
		cf.waiting(s)
	}
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	sub, err := call(ctx, c, cf, func(ctx context.Context) (client.Submitted, error) { return cl.Submit(ctx, spec) })
	if err != nil {
		return err
	}
	if wait {
		return waitAndShow(ctx, s, c, cf, cl, sub.ID, "", waitTimeout, "wait-timeout")
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

// objectRef reads the task or workflow (what) a command is about: one
// positional ID, or -key.
func objectRef(c *cmd, what, key string) (id string, err error) {
	switch {
	case key != "" && len(c.args) > 0:
		return "", c.usageErr("give a %s ID or -key, not both", what)
	case key != "":
		return "", nil
	case len(c.args) == 0:
		return "", c.usageErr("missing %s ID (or -key KEY)", what)
	case len(c.args) > 1:
		return "", c.usageErr("unexpected argument %q", c.args[1])
	case c.args[0] == "":
		return "", c.usageErr("empty %s ID", what)
	}
	return c.args[0], nil
}

// taskRef is objectRef for a task.
func taskRef(c *cmd, key string) (string, error) { return objectRef(c, "task", key) }

// taskTarget is taskRef for a command that acts on one task and whose
// refusals name it: it returns the reference to send, and narrows the
// command's explanation of a refusal to the reason given for the id or
// key.
func taskTarget(c *cmd, key string) (id string, ref client.TaskRef, err error) {
	if id, err = taskRef(c, key); err != nil {
		return "", ref, err
	}
	ref = client.ByID(id)
	if id == "" {
		ref = client.ByKey(key)
	}
	c.explain = func(field, reason string) string {
		if field == "id" || field == "key" {
			return reason
		}
		return ""
	}
	return id, ref, nil
}

// notFound rewrites a not-found error about a task or workflow (what).
func notFound(err error, what, id, key string) error {
	if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if id != "" {
		return fmt.Errorf("%s %s not found", what, id)
	}
	return fmt.Errorf("no %s with key %q", what, key)
}

func runStatus(ctx context.Context, s stdio, args []string) error {
	c := newCmd("status", "cronoq status ID | cronoq status -key KEY", `
Show a task, by id or by idempotency key.

JSON output: the task object.`)
	cf := c.clientFlags()
	var key string
	c.fs.StringVar(&key, "key", "", "find the task by its idempotency `KEY`")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	id, err := taskRef(c, key)
	if err != nil {
		return err
	}
	t, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Task, error) {
		if id != "" {
			return cl.Get(ctx, id)
		}
		return cl.GetByKey(ctx, key)
	})
	if err != nil {
		return notFound(err, "task", id, key)
	}
	if t == nil {
		return notFound(client.ErrNotFound, "task", id, key)
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
	c.waitsHelp()
	var key string
	var timeout time.Duration
	c.fs.StringVar(&key, "key", "", "find the task by its idempotency `KEY`")
	c.fs.Var(durationValue{&timeout, false}, "timeout", "give up after `DUR` (0 = no limit)")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	id, err := taskRef(c, key)
	if err != nil {
		return err
	}
	cf.waiting(s)
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	return waitAndShow(ctx, s, c, cf, cl, id, key, timeout, "timeout")
}

// waitAndShow waits for the task (by id, else by key) to end, shows it, and
// returns a *taskFailedError unless it succeeded. timeoutFlag names the
// flag that set timeout.
func waitAndShow(ctx context.Context, s stdio, c *cmd, cf *clientFlags, cl *client.Client, id, key string, timeout time.Duration, timeoutFlag string) error {
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
			return fmt.Errorf("%s did not end within -%s %s", what, timeoutFlag, timeout)
		}
		return notFound(cf.callError(ctx, c, err), "task", id, key)
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
	c := newCmd("cancel", "cronoq cancel ID | cronoq cancel -key KEY | cronoq cancel -pool P -status S... [-kind K...]", `
Cancel a task, by id or by idempotency key. A queued task ends at once; a
running attempt's lease is revoked and its worker is told to stop.
"cancelled" is true when this call cancelled the task, false when it had
already ended.

With -pool and -status, cancel every live task of the pool that has one of
the statuses (blocked, scheduled, queued, parked, running, retrying) and,
with -kind, one of the kinds: the tasks that match when the call reaches the
leader are cancelled in batches of at most 500, each its own commit, and a
task that stops matching before its batch comes is left alone. It needs
write on the pool.

JSON output: {"id": "...", "cancelled": true|false}; with -key,
{"id": "...", "cancelled": N} and with -pool {"cancelled": N}, the number
of tasks this call cancelled (0 or 1 with -key).`)
	cf := c.clientFlags()
	var key, pool string
	var sts, kinds []string
	c.fs.StringVar(&key, "key", "", "cancel the task with this idempotency `KEY`")
	c.fs.StringVar(&pool, "pool", "", "cancel the live tasks of this `POOL` that have one of the -status given")
	c.fs.Var(statusList{list: &sts, allowed: liveStatuses}, "status", "with -pool, cancel the tasks with this `STATUS` (repeatable, or comma-separated)")
	c.fs.Var(listValue{&kinds}, "kind", "with -pool, cancel only the tasks of this `KIND` (repeatable, or comma-separated)")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	if pool != "" || c.set("pool") || len(sts) > 0 || len(kinds) > 0 {
		return cancelMany(ctx, s, c, cf, key, pool, sts, kinds)
	}
	id, err := taskRef(c, key)
	if err != nil {
		return err
	}
	res, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.CancelResult, error) {
		if id != "" {
			return cl.CancelTask(ctx, id)
		}
		return cl.CancelTaskKey(ctx, key)
	})
	if err != nil {
		return notFound(err, "task", id, key)
	}
	if res.ID == "" {
		res.ID = id
	}
	if cf.out.json() && id == "" {
		n := 0
		if res.Cancelled {
			n = 1
		}
		return writeJSON(s.Stdout, struct {
			ID        string `json:"id"`
			Cancelled int    `json:"cancelled"`
		}{res.ID, n})
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			ID        string `json:"id"`
			Cancelled bool   `json:"cancelled"`
		}{res.ID, res.Cancelled})
	}
	if res.Cancelled {
		_, err = fmt.Fprintf(s.Stdout, "task %s cancelled\n", res.ID)
	} else {
		_, err = fmt.Fprintf(s.Stdout, "task %s had already ended; nothing cancelled\n", res.ID)
	}
	return err
}

// liveStatuses are the statuses cancel -status accepts.
var liveStatuses = []string{
	client.StatusBlocked, client.StatusScheduled, client.StatusQueued, client.StatusParked, client.StatusRunning, client.StatusRetrying,
}

// cancelMany is cancel -pool: every live task of the pool with one of the
// statuses (and kinds).
func cancelMany(ctx context.Context, s stdio, c *cmd, cf *clientFlags, key, pool string, sts, kinds []string) error {
	switch {
	case key != "" || len(c.args) > 0:
		return c.usageErr("give a task ID, -key, or -pool with -status, not several")
	case pool == "":
		return c.usageErr("-status and -kind need -pool")
	case len(sts) == 0:
		return c.usageErr("-pool needs -status (one or more of %s)", strings.Join(liveStatuses, ", "))
	}
	n, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (int64, error) {
		return cl.CancelMany(ctx, client.CancelFilter{Pool: pool, Statuses: sts, Kinds: kinds})
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			Cancelled int64 `json:"cancelled"`
		}{n})
	}
	noun := "tasks"
	if n == 1 {
		noun = "task"
	}
	_, err = fmt.Fprintf(s.Stdout, "%d %s cancelled\n", n, noun)
	return err
}

// statuses are the task statuses -status accepts.
var statuses = []string{
	client.StatusBlocked, client.StatusScheduled, client.StatusQueued, client.StatusParked, client.StatusRunning,
	client.StatusRetrying, client.StatusSucceeded, client.StatusFailed, client.StatusCancelled, client.StatusExpired,
}

const defaultListLimit = 100

// List orders of -order; newest and oldest are other names of desc and asc.
const (
	orderDesc   = "desc"
	orderAsc    = "asc"
	orderNewest = "newest"
	orderOldest = "oldest"
)

func runList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("list", "cronoq list [-pool P]... [-status S]... [-kind K]... [-order desc|asc] [-limit N] [-after ID]", `
List tasks newest first (in decreasing id, that is submission, order; -order
asc, or oldest, lists them oldest first), filtered by pools, statuses and
kinds, one page at a time: when more tasks match, "next" is the id the page
ended with. Pass it to -after, with the same filters and order, for the
following page; the text output ends with that command line (with the
filters, order, limit and -addr given).

Statuses: blocked (waiting for its dependencies), scheduled, queued, parked
(accepted beyond its pool's pending bound, waiting for room), running,
retrying, succeeded, failed, cancelled, expired.

JSON output: {"tasks": [task...], "next": "ID or empty"}`)
	cf := c.clientFlags()
	var opt client.ListOptions
	opt.Limit = defaultListLimit
	order := orderDesc
	c.fs.Var(listValue{&opt.Pools}, "pool", "only tasks of this `POOL` (repeatable, or comma-separated)")
	c.fs.Var(statusList{list: &opt.Statuses}, "status", "only tasks with this `STATUS` (repeatable, or comma-separated)")
	c.fs.Var(listValue{&opt.Kinds}, "kind", "only tasks of this `KIND` (repeatable, or comma-separated)")
	c.fs.Var(enumValue{&order, []string{orderDesc, orderAsc, orderNewest, orderOldest}}, "order",
		"`ORDER` of the list: desc (newest first, also: newest) or asc (oldest first, also: oldest)")
	c.fs.Var(intValue{&opt.Limit, 1}, "limit", "at most `N` tasks")
	c.fs.StringVar(&opt.After, "after", "",
		"start after this task `ID` in the list's order (the \"next\" of the previous page)")
	c.fs.BoolVar(&opt.Stale, "stale", false, "read from the answering node's replica, which may lag behind the leader")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	opt.NewestFirst = order == orderDesc || order == orderNewest
	type page struct {
		tasks []*client.Task
		next  string
	}
	p, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (page, error) {
		tasks, next, err := cl.List(ctx, opt)
		return page{tasks, next}, err
	})
	if err != nil {
		return err
	}
	tasks, next := p.tasks, p.next
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
		_, err = fmt.Fprintf(s.Stdout, "more: %s\n", c.nextPage(next, "pool", "status", "kind", "order", "limit", "stale", "addr"))
	}
	return err
}

// statusList is the -status flag of list: a listValue restricted to known
// statuses (the task statuses unless allowed is set).
type statusList struct {
	list    *[]string
	allowed []string
}

func (v statusList) String() string { return listValue{v.list}.String() }

func (v statusList) Set(s string) error {
	var items []string
	if err := (listValue{&items}).Set(s); err != nil {
		return err
	}
	allowed := v.allowed
	if allowed == nil {
		allowed = statuses
	}
	for _, it := range items {
		if err := (enumValue{new(string), allowed}).Set(it); err != nil {
			return fmt.Errorf("unknown status %q: %w", it, err)
		}
	}
	*v.list = append(*v.list, items...)
	return nil
}

func runComplete(ctx context.Context, s stdio, args []string) error {
	c := newCmd("complete", "cronoq complete ID [-output TEXT|@FILE] [-fail REASON] | cronoq complete -key KEY ...", `
End an external task (submitted with -external) that waits for its
completion: it succeeds with -output as its output, or fails with -fail
REASON. Its dependents then run as they would after a worker's attempt. A
task that is not external, or not waiting (still blocked or scheduled, or
already ended), is refused.

JSON output: the task object.`)
	cf := c.clientFlags()
	var key, output, reason string
	c.fs.StringVar(&key, "key", "", "find the task by its idempotency `KEY`")
	c.fs.StringVar(&output, "output", "", "output of the task: `TEXT` as is, @FILE the file's bytes, @- the standard input")
	c.fs.StringVar(&reason, "fail", "", "fail the task with this `REASON` instead of completing it")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	id, err := taskRef(c, key)
	if err != nil {
		return err
	}
	fail := c.set("fail")
	switch {
	case fail && c.set("output"):
		return c.usageErr("-fail and -output exclude each other")
	case fail && strings.TrimSpace(reason) == "":
		return c.usageErr("-fail needs a reason")
	}
	var out []byte
	if output != "" {
		if out, err = readBytesFlag(s, "output", output); err != nil {
			return err
		}
	}
	ref := client.ByID(id)
	if id == "" {
		ref = client.ByKey(key)
	}
	t, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Task, error) {
		if fail {
			return cl.Fail(ctx, ref, reason)
		}
		return cl.Complete(ctx, ref, out)
	})
	if errors.Is(err, client.ErrNotWaiting) {
		what := "task " + id
		if id == "" {
			what = fmt.Sprintf("task with key %q", key)
		}
		return fmt.Errorf("%s is not an external task waiting for completion", what)
	}
	if err != nil {
		return notFound(err, "task", id, key)
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, newTaskJSON(t))
	}
	if t.Status == client.StatusFailed {
		_, err = fmt.Fprintf(s.Stdout, "task %s failed: %s\n", t.ID, oneLine(t.Error))
	} else {
		_, err = fmt.Fprintf(s.Stdout, "task %s %s\n", t.ID, t.Status)
	}
	return err
}

func init() {
	register("delete", command{Summary: "Delete an ended task now", Run: runDelete})
}

func runDelete(ctx context.Context, s stdio, args []string) error {
	c := newCmd("delete", "cronoq delete ID | cronoq delete -key KEY", `
Delete an ended task (succeeded, failed, cancelled or expired) now, rather
than at the end of its retention: its record, its output and its key go, and
the ordering lane it blocked ("blocks_lane": true) runs on. A live task is
refused (cancel it first), as are a member of a workflow (it goes with its
workflow) and a task a live task depends on. "deleted" is false when an
earlier attempt of this same call had deleted it (its answer was lost).

JSON output: {"id": "...", "deleted": true|false}`)
	cf := c.clientFlags()
	var key string
	c.fs.StringVar(&key, "key", "", "find the task by its idempotency `KEY`")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	// The refusal of a live task names it: say just that.
	id, ref, err := taskTarget(c, key)
	if err != nil {
		return err
	}
	type result struct {
		id      string
		deleted bool
	}
	r, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (result, error) {
		id, deleted, err := cl.Delete(ctx, ref)
		return result{id, deleted}, err
	})
	if err != nil {
		return notFound(err, "task", id, key)
	}
	if r.id == "" {
		r.id = id
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			ID      string `json:"id"`
			Deleted bool   `json:"deleted"`
		}{r.id, r.deleted})
	}
	name := "task " + r.id
	if r.id == "" {
		name = fmt.Sprintf("task with key %q", key)
	}
	if r.deleted {
		_, err = fmt.Fprintf(s.Stdout, "%s deleted\n", name)
	} else {
		_, err = fmt.Fprintf(s.Stdout, "%s was already deleted\n", name)
	}
	return err
}
