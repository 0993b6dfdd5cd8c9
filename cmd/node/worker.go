package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/execworker"
)

func runWorker(ctx context.Context, s stdio, args []string) error {
	c := newCmd("worker", "cronoq worker -pool P -handler KIND=COMMAND... [flags]", `
Take tasks of pool P from the cluster and run each with the shell command of
its kind's -handler (as /bin/sh -c COMMAND), until SIGINT or SIGTERM; then take
no more tasks, let the running ones finish and exit 0.

Each command gets the task's payload on stdin and CRONOQ_TASK_ID,
CRONOQ_ATTEMPT, CRONOQ_LEASE (the attempt's fencing token), CRONOQ_POOL and
CRONOQ_KIND in its environment, and runs in a fresh directory ROOT/<task id>
(removed afterwards) in a process group of its own; processes it leaves
behind in that group are killed when it exits. Its stdout (at most
-max-output bytes, else the attempt fails) is the task's output. Exit status 0
succeeds; 75 fails retryably; anything else, or a fatal signal, fails the task
with the tail of stderr as its error. When the attempt is cancelled or times
out, the process group gets SIGTERM, then SIGKILL after -kill-grace.

Dependencies: CRONOQ_DEPS_DIR names a directory (created for the attempt,
removed after it) holding one file per dependency of the task, its output,
named by the dependency's step name, else by its task id.

Spawning: CRONOQ_SPAWN names an empty file the command may write steps to,
one JSON object per line with the fields of a workflow step ('cronoq workflow
submit -h'; "name" optional, "depends_on" naming earlier lines or steps of
the workflow); one line may set "then": true, a continuation depending on all
the others. For example:

  echo '{"name": "part-1", "pool": "etl", "kind": "convert", "payload": "a"}' >>"$CRONOQ_SPAWN"
  echo '{"name": "merge", "pool": "etl", "kind": "merge", "then": true}' >>"$CRONOQ_SPAWN"

They are inserted in the task's workflow (one is created for a task outside
any) with the attempt's success, and only then; a malformed line fails the
attempt permanently, naming the line.

The worker heartbeats its leases while commands run and reconnects to another
node of -addr when it loses its node. It logs on stderr (JSON with -o json).

Tracing: with -otlp-endpoint, the attempt of a task whose tags carry a W3C
traceparent is a span (cronoq.attempt) exported over OTLP/HTTP, a child of the
node's dispatch span, and the command gets TRACEPARENT (and TRACESTATE) naming
it in its environment, to continue the trace. See docs/tracing.md.`)
	cf := c.addrFlags()
	var (
		pool, workdir, id string
		logLevel          = "info"
		concurrency       = client.DefaultConcurrency
		maxOutput         = execworker.DefaultMaxOutput
		killGrace         = execworker.DefaultKillGrace
		maxSpawn          = execworker.DefaultMaxSpawn
		labels            = map[string]string{}
		handlers          = map[string]string{}
		tc                = traceConfig{ratio: defaultTraceRatio}
	)
	c.fs.StringVar(&pool, "pool", "", "`POOL` to take tasks from (required)")
	c.fs.Var(intValue{&concurrency, 1}, "concurrency", "run at most `N` tasks at once")
	c.fs.Var(kvValue{labels}, "label", "capacity label `KEY=VALUE` this worker offers (repeatable)")
	c.fs.Var(handlerValue{handlers}, "handler", "run tasks of kind KIND with COMMAND (`KIND=COMMAND`, repeatable; at least one)")
	c.fs.StringVar(&workdir, "workdir", "", "`ROOT` of the per-task working directories (default: a temporary directory, removed on exit)")
	c.fs.Var(sizeValue{&maxOutput}, "max-output", "most a command may write to stdout, `SIZE` (such as 1MiB, 64k or 1000)")
	c.fs.Var(sizeValue{&maxSpawn}, "max-spawn", "most a command may write to its spawn file, `SIZE`")
	c.fs.Var(durationValue{&killGrace, true}, "kill-grace", "time between SIGTERM and SIGKILL when stopping a command (`DUR`)")
	c.fs.StringVar(&id, "id", "", "worker `NAME` shown to the cluster (default HOST-PID-RANDOM)")
	c.fs.Var(enumValue{&logLevel, []string{"trace", "debug", "info", "warn", "error"}}, "log-level",
		"`LEVEL` of the log: trace, debug, info, warn or error")
	traceFlags(c.fs, &tc, "the attempts of traced tasks")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	switch {
	case pool == "":
		return c.usageErr("-pool is required")
	case len(handlers) == 0:
		return c.usageErr("at least one -handler KIND=COMMAND is required")
	}
	if err := tc.validate(); err != nil {
		return c.usageErr("%v", err)
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "cronoq",
		Output:     s.Stderr,
		Level:      hclog.LevelFromString(logLevel),
		JSONFormat: cf.out.json(),
	})

	// The worker logs itself that it cannot connect (see client.Worker).
	cf.waits = true
	cl, err := cf.connect(logger)
	if err != nil {
		return err
	}
	defer cl.Close()
	tp, err := tc.tracerProvider(ctx, logger.Named("tracing"), attribute.String("service.name", "cronoq-worker"),
		attribute.String("service.version", agentVersion()), attribute.String("cronoq.pool", pool))
	if err != nil {
		return err
	}
	defer shutdownTracing(tp, logger)

	root := workdir
	if root == "" {
		if root, err = os.MkdirTemp("", "cronoq-worker-"); err != nil {
			return fmt.Errorf("creating work directory root: %w", err)
		}
		defer func() {
			if err := os.RemoveAll(root); err != nil {
				logger.Warn("removing work directory root", "dir", root, "error", err)
			}
		}()
	} else if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("creating -workdir: %w", err)
	}

	hs := make(map[string]client.Handler, len(handlers))
	kinds := make([]string, 0, len(handlers))
	for kind, command := range handlers {
		h, err := execworker.New(execworker.Config{
			Command:   command,
			Root:      root,
			MaxOutput: maxOutput,
			KillGrace: killGrace,
			MaxSpawn:  maxSpawn,
			Logger:    logger.Named("exec"),
		})
		if err != nil {
			return fmt.Errorf("handler for kind %q: %w", kind, err)
		}
		hs[kind] = h
		kinds = append(kinds, kind)
	}
	sort.Strings(kinds)
	wcfg := client.WorkerConfig{
		Pool:        pool,
		Labels:      labels,
		Concurrency: concurrency,
		Handlers:    hs,
		ID:          id,
		Logger:      logger,
	}
	if tp != nil {
		wcfg.TracerProvider = tp
	}
	w, err := cl.NewWorker(wcfg)
	if err != nil {
		return err
	}
	logger.Info("worker started", "worker", w.ID(), "pool", pool, "kinds", kinds, "concurrency", concurrency,
		"workdir", root, "addr", cf.addr)
	started := time.Now()
	if err := w.Run(ctx); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	logger.Info("worker stopped", "worker", w.ID(), "uptime", time.Since(started).Round(time.Second))
	return nil
}
