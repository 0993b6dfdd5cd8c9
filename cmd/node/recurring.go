package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cronoq/cronoq/client"
)

// recurringCommands are the subcommands of `cronoq recurring`.
var recurringCommands = map[string]command{
	"add":    {Summary: "Create or replace a recurring schedule", Run: runRecurringAdd},
	"list":   {Summary: "List the recurring schedules", Run: runRecurringList},
	"rm":     {Summary: "Remove a recurring schedule", Run: runRecurringRm},
	"pause":  {Summary: "Pause a recurring schedule (it fires no more until resumed)", Run: runRecurringPause},
	"resume": {Summary: "Resume a paused recurring schedule", Run: runRecurringResume},
}

func runRecurring(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq recurring", recurringCommands, args)
}

func runRecurringAdd(ctx context.Context, s stdio, args []string) error {
	c := newCmd("recurring add", "cronoq recurring add NAME -cron EXPR [-tz ZONE] (-pool P -kind K | -workflow FILE) [flags]", `
Create the recurring schedule NAME, or replace the one of that name. At each
fire it submits a task built from the task flags (-pool, -kind, -payload, ...),
or, with -workflow FILE, the whole workflow of FILE (see 'cronoq workflow
submit -h' for its format; its "name" names the workflows fired, default NAME).
-workflow excludes the task flags, and its steps take no delay, run_at or
deadline: they are ready at each fire instant, once their dependencies end.

EXPR is five cron fields (minute hour day-of-month month day-of-week), six with
a leading seconds field, or a descriptor: @yearly, @monthly, @weekly, @daily,
@hourly, @every DUR (aligned to multiples of DUR since the Unix epoch). Fire
times are read in the IANA zone -tz (default UTC).

-overlap: skip a fire while the previous task is still live (skip, the
default), or fire anyway (allow). -catch-up: what to do about fires missed
while the cluster had no leader: fire once (once, the default), skip them
(skip), or fire them all up to -catch-up-limit (all).

JSON output: {"name": "...", "next_fire": RFC3339}`)
	cf := c.clientFlags()
	tf := c.templateFlags()
	var sched client.Schedule
	sched.Overlap, sched.CatchUp = client.OverlapSkip, client.CatchUpOnce
	c.fs.StringVar(&sched.Cron, "cron", "", "cron `EXPR` (required)")
	c.fs.StringVar(&sched.TZ, "tz", "", "IANA time `ZONE` of the expression, such as Europe/Paris (default UTC)")
	c.fs.Var(enumValue{&sched.Overlap, []string{client.OverlapSkip, client.OverlapAllow}}, "overlap",
		"`POLICY` while the previous task is live: skip or allow")
	c.fs.Var(enumValue{&sched.CatchUp, []string{client.CatchUpOnce, client.CatchUpSkip, client.CatchUpAll}}, "catch-up",
		"`POLICY` for fires missed without a leader: once, skip or all")
	c.fs.Var(intValue{&sched.CatchUpLimit, 1}, "catch-up-limit", "with -catch-up all, at most `N` missed fires (default: the cluster's)")
	c.fs.BoolVar(&sched.Paused, "paused", false, "create the schedule paused")
	var workflow string
	c.fs.StringVar(&workflow, "workflow", "", "fire the workflow of `FILE` (.json or .hcl; - for stdin) instead of a task")
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	sched.Name = c.args[0]
	if sched.Name == "" {
		return c.usageErr("empty schedule NAME")
	}
	if sched.Cron == "" {
		return c.usageErr("-cron is required")
	}
	if c.set("catch-up-limit") && sched.CatchUp != client.CatchUpAll {
		return c.usageErr("-catch-up-limit needs -catch-up all")
	}
	var err error
	if c.set("workflow") {
		if err := recurringWorkflow(c, s, workflow, &sched); err != nil {
			return err
		}
	} else if sched.Task, err = tf.template(c, s); err != nil {
		return err
	}
	next, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (time.Time, error) { return cl.AddSchedule(ctx, sched) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			Name     string  `json:"name"`
			NextFire *string `json:"next_fire"`
		}{sched.Name, jsonTime(next)})
	}
	if next.IsZero() {
		_, err = fmt.Fprintf(s.Stdout, "schedule %s saved; no next fire\n", sched.Name)
	} else {
		_, err = fmt.Fprintf(s.Stdout, "schedule %s saved; next fire at %s\n", sched.Name, textTime(next))
	}
	return err
}

// templateFlagNames are the flags of templateFlags, which -workflow
// excludes.
var templateFlagNames = []string{"pool", "kind", "priority", "payload", "timeout", "max-attempts", "label", "tag",
	"ordering-key", "concurrency-key"}

// recurringWorkflow sets the workflow of sched from the file of -workflow.
func recurringWorkflow(c *cmd, s stdio, path string, sched *client.Schedule) error {
	for _, f := range templateFlagNames {
		if c.set(f) {
			return c.usageErr("-workflow and -%s exclude each other (the workflow file describes its tasks)", f)
		}
	}
	if path == "" {
		return c.usageErr("empty -workflow FILE")
	}
	name, steps, err := readWorkflowFile(s, "workflow", path)
	if err != nil {
		return err
	}
	for _, st := range steps {
		for _, f := range []struct {
			name string
			set  bool
		}{{"delay", st.Task.Delay != 0}, {"run_at", !st.Task.RunAt.IsZero()}, {"deadline", !st.Task.Deadline.IsZero()}} {
			if f.set {
				return usagef("invalid -workflow %s: step %q: %s: not for a recurring workflow (its steps are ready at each fire instant)", path, st.Name, f.name)
			}
		}
	}
	sched.Workflow, sched.Steps = name, steps
	c.explain = explainWorkflowField("workflow", path, steps)
	return nil
}

func runRecurringList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("recurring list", "cronoq recurring list", `
List the recurring schedules. A schedule firing a workflow has no pool or
kind; "workflow" names it and "steps" counts its steps.

JSON output: [{"name", "cron", "tz", "pool", "kind", "next_fire", "last_fire",
"paused", "overlap", "catch_up", "catch_up_limit", "fires", "skipped",
"last_task", "workflow", "steps"}...]`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	scheds, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]client.Schedule, error) { return cl.ListSchedules(ctx) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		out := make([]scheduleJSON, 0, len(scheds))
		for _, sc := range scheds {
			out = append(out, newScheduleJSON(sc))
		}
		return writeJSON(s.Stdout, out)
	}
	if len(scheds) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no schedules")
		return err
	}
	tb := newTable(s.Stdout, "NAME", "CRON", "TZ", "POOL", "KIND", "WORKFLOW", "NEXT FIRE", "LAST FIRE", "FIRES", "PAUSED")
	for _, sc := range scheds {
		paused := "no"
		if sc.Paused {
			paused = "yes"
		}
		tb.row(sc.Name, sc.Cron, zoneName(sc.TZ), sc.Task.Pool, sc.Task.Kind, workflowText(sc), textTime(sc.NextFire),
			textTime(sc.LastFire), strconv.FormatUint(sc.Fires, 10), paused)
	}
	return tb.flush()
}

func runRecurringRm(ctx context.Context, s stdio, args []string) error {
	c := newCmd("recurring rm", "cronoq recurring rm NAME", `
Remove a recurring schedule. Tasks it already submitted are not affected.
"removed" is false when there was no schedule of that name.

JSON output: {"name": "...", "removed": true|false}`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	return removeNamed(ctx, s, c, cf, "schedule", (*client.Client).RemoveSchedule)
}

func runRecurringPause(ctx context.Context, s stdio, args []string) error {
	return pauseSchedule(ctx, s, args, true)
}

func runRecurringResume(ctx context.Context, s stdio, args []string) error {
	return pauseSchedule(ctx, s, args, false)
}

func pauseSchedule(ctx context.Context, s stdio, args []string, pause bool) error {
	name, about := "resume", `
Resume a paused recurring schedule: it fires again from its next fire time.

JSON output: {"name": "...", "paused": false}`
	if pause {
		name, about = "pause", `
Pause a recurring schedule: it does not fire until resumed.

JSON output: {"name": "...", "paused": true}`
	}
	c := newCmd("recurring "+name, "cronoq recurring "+name+" NAME", about)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	sname := c.args[0]
	if sname == "" {
		return c.usageErr("empty schedule NAME")
	}
	paused, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (bool, error) { return cl.PauseSchedule(ctx, sname, pause) })
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("no schedule %s", sname)
	}
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			Name   string `json:"name"`
			Paused bool   `json:"paused"`
		}{sname, paused})
	}
	state := "active"
	if paused {
		state = "paused"
	}
	_, err = fmt.Fprintf(s.Stdout, "schedule %s %s\n", sname, state)
	return err
}

// workflowText names the workflow a schedule fires, with its number of
// steps; "" for a schedule firing a task.
func workflowText(sc client.Schedule) string {
	if len(sc.Steps) == 0 {
		return ""
	}
	name := orDefault(sc.Workflow, sc.Name)
	if len(sc.Steps) == 1 {
		return name + " (1 step)"
	}
	return fmt.Sprintf("%s (%d steps)", name, len(sc.Steps))
}

// removeNamed is the body of an "rm NAME" command: it removes the object
// (what: "schedule", "subscription") named by the one argument with rm and
// prints {"name", "removed"}, or a line saying what happened.
func removeNamed(ctx context.Context, s stdio, c *cmd, cf *clientFlags, what string,
	rm func(cl *client.Client, ctx context.Context, name string) (bool, error)) error {
	name := c.args[0]
	if name == "" {
		return c.usageErr("empty %s NAME", what)
	}
	removed, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (bool, error) { return rm(cl, ctx, name) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			Name    string `json:"name"`
			Removed bool   `json:"removed"`
		}{name, removed})
	}
	if removed {
		_, err = fmt.Fprintf(s.Stdout, "%s %s removed\n", what, name)
	} else {
		_, err = fmt.Fprintf(s.Stdout, "no %s %s; nothing removed\n", what, name)
	}
	return err
}
