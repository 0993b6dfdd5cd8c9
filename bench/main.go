// Command bench runs the side-by-side benchmark of cronoq against River (on
// PostgreSQL) and asynq (on Redis), plus a bare hashicorp/raft cluster as the
// limit of a replicated log, on this machine, and writes a report.
//
// It installs what it needs from Debian's packages when missing, starts every
// server on 127.0.0.1 with its data under the results directory, runs the
// workloads with the systems alternated, stops every process it started by
// pid however the run ends, and writes report.md, report.json and chart.svg.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line settings of one benchmark run.
type options struct {
	quick       bool
	runs        int
	systems     []string
	workloads   []string
	concurrency int
	batch       int

	w1Tasks int
	// w1OrderingKeys, when positive, gives W1's tasks ordering keys
	// (cronoq only): task seq gets key seq mod w1OrderingKeys.
	w1OrderingKeys int

	w2Single      int
	w2Batched     int
	w2Concurrency int
	w2Callers     int

	w3Rates      []int
	w3Duration   time.Duration
	w3Drain      time.Duration
	w3Submitters int

	w4Children int

	// scaleSizes are the retained-task counts of the scale curves
	// (cronoq only; see scale.go), ascending.
	scaleSizes     []int
	failoverTrials int

	raftDuration time.Duration
	raftInflight int

	cellTimeout time.Duration
	cronoqBin   string
	outDir      string
	keep        bool
	noInstall   bool
	asynqCheck  time.Duration
	riverConns  int
	// The tuned peers' settings (river-tuned, asynq-*-tuned).
	riverTuned riverTuning
	asynqTuned asynqTuning
	profile    time.Duration

	// The long haul (-long-haul), run instead of the workloads.
	longHaul    time.Duration
	lhRate      int
	lhRetention time.Duration
	lhSample    time.Duration
	lhOutage    time.Duration
	// lhMemoryLimit is each agent's -memory-limit in the long haul (0: a
	// third of 80% of the available memory).
	lhMemoryLimit int64
}

const usage = `Usage: cronoq-bench [-quick] [flags]

Runs cronoq, River (PostgreSQL, synchronous_commit=on), asynq (Redis AOF with
appendfsync always and everysec) and a bare three-node hashicorp/raft cluster
through the same workloads on this machine, and writes report.md, report.json
and chart.svg under -out/<timestamp>/ (and -out/latest). River and asynq run
twice: with their library defaults and tuned (river-tuned, asynq-always-tuned,
asynq-everysec-tuned: the -river-tuned-* and -asynq-tuned-* flags).

  W1  burn-down: pre-insert N no-op tasks (256-byte payloads), then start the
      workers; rate = N / (worker start -> last durable completion)
  W2  enqueue rate: one task per call (closed loop, -w2-concurrency callers)
      and batches of -batch tasks per call
  W3  open loop at each of -w3-rates tasks/s for -w3-duration; latency from
      the scheduled submit time to the durable completion (p50/p99)
  W4  fan-out (cronoq only): one task whose handler spawns -w4-children no-op
      children and a continuation that depends on all of them; time from the
      submit call to the continuation reported succeeded by Client.Wait
  scale  (cronoq only, first run only) for each of -scale-sizes N, a fresh
      cluster holding N retained ended tasks: fill rate, heap bytes per
      task on the leader and a follower, W1 on top, snapshot save and
      restore, and (at 1,000,000) a wiped follower's catch-up
  failover (cronoq only): -failover-trials kills of the leader with SIGKILL;
      time from the kill to the first submit acknowledged through the survivors

-quick runs W1 only, at 20,000 tasks, three runs per system.

Flags:
`

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("cronoq-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	var o options
	var systems, workloads, rates, sizes string
	fs.BoolVar(&o.quick, "quick", false, "W1 only at 20,000 tasks (overrides -workloads and -w1-tasks; 3 runs unless -runs is given)")
	fs.IntVar(&o.runs, "runs", 3, "runs per cell (systems alternated between runs)")
	fs.StringVar(&systems, "systems", strings.Join(defaultSystems, ","), "comma-separated `LIST` of systems (also cronoq-secure: cronoq with TLS, client certificates and ACLs; cronoq-sub: cronoq with a durable subscription read and acked all along)")
	fs.StringVar(&workloads, "workloads", "w1,w2,w3,w4,scale,failover", "comma-separated `LIST` of workloads (w1, w2, w3, w4, scale, failover)")
	fs.IntVar(&o.concurrency, "concurrency", 1024, "worker slots per system (cronoq: split over 4 SDK workers)")
	fs.IntVar(&o.batch, "batch", 1000, "tasks per batched enqueue call (pre-insert and W2)")
	fs.IntVar(&o.w1Tasks, "w1-tasks", 100000, "W1: tasks pre-inserted and burned down")
	fs.IntVar(&o.w1OrderingKeys, "w1-ordering-keys", 0, "W1 (cronoq only): give the tasks `N` distinct ordering keys, round robin (1: a single lane, one task at a time; 0: none)")
	fs.IntVar(&o.w2Single, "w2-single", 20000, "W2: tasks enqueued one per call")
	fs.IntVar(&o.w2Batched, "w2-batched", 100000, "W2: tasks enqueued in batches")
	fs.IntVar(&o.w2Concurrency, "w2-concurrency", 64, "W2: concurrent callers for one-per-call enqueues")
	fs.IntVar(&o.w2Callers, "w2-batch-callers", 4, "W2 and pre-insert: concurrent batched calls")
	fs.StringVar(&rates, "w3-rates", "1000,5000,10000", "W3: offered `RATES` in tasks/s")
	fs.DurationVar(&o.w3Duration, "w3-duration", 60*time.Second, "W3: how long each rate is offered")
	fs.DurationVar(&o.w3Drain, "w3-drain", 30*time.Second, "W3: how long to wait for the last completions after the offer ends")
	fs.IntVar(&o.w3Submitters, "w3-submitters", 512, "W3: concurrent submit calls at most")
	fs.IntVar(&o.w4Children, "w4-children", 10000, "W4: children the root task spawns with its completion")
	fs.StringVar(&sizes, "scale-sizes", "100000,1000000,10000000", "scale: retained ended tasks `SIZES`, one fresh cluster each (a size whose projected memory does not fit is not run)")
	fs.IntVar(&o.failoverTrials, "failover-trials", 10, "failover: kills of the leader per run")
	fs.DurationVar(&o.raftDuration, "raft-duration", 15*time.Second, "bare raft: measured time per run")
	fs.IntVar(&o.raftInflight, "raft-inflight", 1024, "bare raft: applies in flight")
	fs.DurationVar(&o.cellTimeout, "cell-timeout", 10*time.Minute, "give up on one cell after this long")
	fs.StringVar(&o.cronoqBin, "cronoq", "", "path of the cronoq binary (default: bin/cronoq of the repository)")
	fs.StringVar(&o.outDir, "out", "", "results directory (default: bench/results of the repository)")
	fs.BoolVar(&o.keep, "keep", false, "keep the servers' data directories")
	fs.BoolVar(&o.noInstall, "no-install", false, "do not install missing Debian packages")
	fs.DurationVar(&o.asynqCheck, "asynq-task-check-interval", time.Second, "asynq Config.TaskCheckInterval (library default 1s)")
	fs.IntVar(&o.riverConns, "river-pool", 32, "River: pgx pool size")
	fs.DurationVar(&o.riverTuned.fetchCooldown, "river-tuned-fetch-cooldown", 2*time.Millisecond, "river-tuned: Config.FetchCooldown (library default 100ms, minimum 1ms)")
	fs.DurationVar(&o.riverTuned.fetchPollInterval, "river-tuned-fetch-poll-interval", 20*time.Millisecond, "river-tuned: Config.FetchPollInterval (library default 1s, minimum 1ms, not below the cooldown)")
	fs.IntVar(&o.riverTuned.pool, "river-tuned-pool", 80, "river-tuned: pgx pool size (W2's 64 callers plus 16 for River's own connections)")
	fs.DurationVar(&o.asynqTuned.taskCheckInterval, "asynq-tuned-task-check-interval", 10*time.Millisecond, "asynq-*-tuned: Config.TaskCheckInterval (library default 1s; must be positive)")
	fs.IntVar(&o.asynqTuned.pool, "asynq-tuned-pool", 0, "asynq-*-tuned: go-redis PoolSize of the server's client (0: one per handler slot, -concurrency)")
	fs.DurationVar(&o.profile, "profile", 0, "record CPU profiles of the servers (cronoq: every node, with -enable-debug) and of this process for this `LONG` from the start of W1's burn-down, of W3's window and of W4's submit, into profiles/<cell>/ of the results (0 = off)")
	fs.DurationVar(&o.longHaul, "long-haul", 0, "run the long haul instead of the workloads, for `DUR` (cronoq only; make bench-longhaul runs it for 1h): -long-haul-rate tasks/s open loop with -long-haul-retention, "+
		"sampling every node's RSS, heap, GC pauses and applied index, and stopping a follower for -long-haul-outage at a third and two thirds of the run; writes longhaul.md, .json and .svg (0 = off)")
	fs.IntVar(&o.lhRate, "long-haul-rate", 2000, "long haul: offered tasks/s")
	fs.DurationVar(&o.lhRetention, "long-haul-retention", 10*time.Minute, "long haul: the agents' -retention")
	fs.DurationVar(&o.lhSample, "long-haul-sample", 10*time.Second, "long haul: how often every node is sampled")
	fs.DurationVar(&o.lhOutage, "long-haul-outage", 4*time.Minute, "long haul: how long a follower stays stopped, twice (long enough for the leader to snapshot and compact past it, so that it is caught up by an installed snapshot)")
	fs.Func("long-haul-memory-limit", "long haul: each agent's -memory-limit, in `MiB` (default: a third of 80% of the memory available at the start: the agents' default, half the machine each, is for one node per machine)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 64 {
			return fmt.Errorf("want a number of MiB, at least 64")
		}
		o.lhMemoryLimit = n << 20
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.systems = splitList(systems)
	o.workloads = splitList(workloads)
	for _, s := range o.systems {
		if !contains(allSystems, s) {
			return o, fmt.Errorf("unknown system %q (known: %s)", s, strings.Join(allSystems, ", "))
		}
	}
	for _, w := range o.workloads {
		if !contains([]string{"w1", "w2", "w3", "w4", "scale", "failover"}, w) {
			return o, fmt.Errorf("unknown workload %q (known: w1, w2, w3, w4, scale, failover)", w)
		}
	}
	for _, r := range splitList(rates) {
		n, err := strconv.Atoi(r)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("bad rate %q in -w3-rates", r)
		}
		o.w3Rates = append(o.w3Rates, n)
	}
	scaleSizes, err := parseSizes(sizes)
	if err != nil {
		return o, err
	}
	o.scaleSizes = scaleSizes
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.longHaul > 0 {
		o.systems, o.workloads = []string{"cronoq"}, nil
		switch {
		case o.lhRate < 1:
			return o, errors.New("-long-haul-rate must be positive")
		case o.lhSample <= 0 || o.lhRetention <= 0 || o.lhOutage < 0:
			return o, errors.New("-long-haul-sample and -long-haul-retention must be positive, -long-haul-outage not negative")
		case o.lhOutage*3 >= o.longHaul:
			return o, errors.New("-long-haul-outage must be under a third of -long-haul")
		}
	}
	if o.quick {
		if !set["runs"] {
			o.runs = 3
		}
		o.workloads = []string{"w1"}
		o.w1Tasks = 20000
		o.raftDuration = 3 * time.Second
	}
	switch {
	case o.runs < 1:
		return o, errors.New("-runs must be at least 1")
	case o.concurrency < 4:
		return o, errors.New("-concurrency must be at least 4")
	case o.batch < 1 || o.w1Tasks < 1:
		return o, errors.New("-batch and -w1-tasks must be positive")
	case o.w4Children < 1:
		return o, errors.New("-w4-children must be positive")
	case o.failoverTrials < 1:
		return o, errors.New("-failover-trials must be positive")
	case o.w1OrderingKeys < 0:
		return o, errors.New("-w1-ordering-keys must not be negative")
	case o.w1OrderingKeys > 0 && !onlyCronoq(o.systems):
		return o, errors.New("-w1-ordering-keys needs -systems cronoq (or cronoq-secure): the other systems have no ordering keys")
	case o.profile < 0:
		return o, errors.New("-profile must not be negative")
	case o.riverTuned.fetchCooldown < riverMinInterval || o.riverTuned.fetchPollInterval < riverMinInterval:
		return o, fmt.Errorf("-river-tuned-fetch-cooldown and -river-tuned-fetch-poll-interval must be at least %s (River's minimum)", riverMinInterval)
	case o.riverTuned.fetchPollInterval < o.riverTuned.fetchCooldown:
		return o, errors.New("-river-tuned-fetch-poll-interval must not be shorter than -river-tuned-fetch-cooldown (River refuses it)")
	case o.riverTuned.pool < 1 || o.riverConns < 1:
		return o, errors.New("-river-pool and -river-tuned-pool must be positive")
	case o.asynqCheck <= 0 || o.asynqTuned.taskCheckInterval <= 0:
		return o, errors.New("-asynq-task-check-interval and -asynq-tuned-task-check-interval must be positive (asynq replaces anything else by 1s)")
	case o.asynqTuned.pool < 0:
		return o, errors.New("-asynq-tuned-pool must not be negative")
	}
	return o, nil
}

// onlyCronoq reports whether every system is a cronoq cluster.
func onlyCronoq(systems []string) bool {
	for _, s := range systems {
		if !isCronoq(s) {
			return false
		}
	}
	return len(systems) > 0
}

// onlyNonCronoq reports whether no system is a cronoq cluster.
func onlyNonCronoq(systems []string) bool {
	for _, s := range systems {
		if isCronoq(s) {
			return false
		}
	}
	return true
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, strings.ToLower(f))
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cronoq-bench:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "cronoq-bench:", err)
		os.Exit(1)
	}
}

func run(o options) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	root, err := repoRoot()
	if err != nil {
		return err
	}
	if o.cronoqBin == "" {
		o.cronoqBin = filepath.Join(root, "bin", "cronoq")
	}
	if o.outDir == "" {
		o.outDir = filepath.Join(root, "bench", "results")
	}
	if o.cronoqBin, err = filepath.Abs(o.cronoqBin); err != nil {
		return fmt.Errorf("resolving -cronoq: %w", err)
	}
	if o.outDir, err = filepath.Abs(o.outDir); err != nil {
		return fmt.Errorf("resolving -out: %w", err)
	}
	if _, err := os.Stat(o.cronoqBin); err != nil && !onlyNonCronoq(o.systems) {
		return fmt.Errorf("cronoq binary: %w (run make build)", err)
	}
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return fmt.Errorf("creating results dir: %w", err)
	}
	// The results dir must be reachable by the postgres user.
	if err := os.Chmod(o.outDir, 0o755); err != nil {
		return fmt.Errorf("opening results dir to the postgres user: %w", err)
	}

	// Processes and data left by an earlier run that was killed hard go first.
	reapStale(o.outDir)
	started := time.Now()
	stamp := started.Format("20060102-150405")
	env := &Env{opts: o, root: root}
	env.runDir = filepath.Join(o.outDir, stamp)
	env.dataDir = filepath.Join(env.runDir, "data")
	env.procs = newProcs(o.outDir, stamp, env.dataDir)
	// However the run ends (error, interrupt, panic): stop every process
	// still running, then remove the data.
	shutdown := func() {
		env.procs.stopAll()
		for _, f := range env.cleanup {
			f()
		}
		if !o.keep {
			_ = os.RemoveAll(env.dataDir)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			shutdown()
			panic(r)
		}
		shutdown()
	}()
	if err := os.MkdirAll(env.dataDir, 0o755); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}

	prog := newProgress(os.Stderr)
	env.prog = prog
	defer prog.finish()

	prog.note("results in %s", env.runDir)
	if err := env.prepare(ctx); err != nil {
		return err
	}

	rep := &Report{Started: started, Options: reportOptions(o), Machine: machineInfo(env), Skipped: skipped(o)}
	for _, sk := range rep.Skipped {
		prog.note("%s: %s skipped (%s)", wlName(sk.Workload), sk.System, sk.Reason)
	}
	prog.phase("measuring fsync latency of " + env.dataDir)
	fs, err := fsyncProbe(ctx, env.dataDir, 300)
	if err != nil {
		return fmt.Errorf("measuring fsync latency: %w", err)
	}
	rep.Fsync = fs
	prog.note("fsync latency on %s (%s): p50 %.2f ms, p99 %.2f ms (%d × 4 KiB write+fsync)", fs.FS, fs.Dir, fs.P50ms, fs.P99ms, fs.Samples)

	if o.longHaul > 0 {
		prog.note("long haul: %d tasks/s for %s, retention %s", o.lhRate, o.longHaul, o.lhRetention)
		return runLongHaul(ctx, env, fs)
	}

	cells := plan(o)
	planned := map[string]bool{}
	for _, c := range cells {
		planned[c.system] = true
	}
	for _, name := range o.systems {
		if name == "raft" || !planned[name] {
			continue
		}
		sys, err := newSystem(env, name)
		if err != nil {
			return err
		}
		info := SystemInfo{Name: sys.Name(), Copies: sys.Copies(), Durability: sys.Durability(), Config: sys.Config()}
		if st, ok := sys.(settinger); ok {
			info.Settings = st.Settings()
		}
		rep.Systems = append(rep.Systems, info)
	}
	prog.setCells(len(cells))
	for i, c := range cells {
		if ctx.Err() != nil {
			break
		}
		prog.startCell(i, c.title(o))
		res := runCell(ctx, env, c)
		rep.Cells = append(rep.Cells, res)
		appendJSONL(filepath.Join(env.runDir, "cells.jsonl"), res)
		prog.note("%s: %s", c.title(o), res.summary())
	}
	rep.Finished = time.Now()
	rep.Interrupted = ctx.Err() != nil
	rep.Versions = versions(env)
	prog.finish()

	paths, werr := writeReport(rep, env.runDir, o.outDir)
	if werr != nil {
		return werr
	}
	fmt.Println(renderTables(rep))
	fmt.Printf("report: %s\n", strings.Join(paths, ", "))
	fmt.Printf("total time: %s\n", time.Since(started).Round(time.Second))
	if rep.Interrupted {
		return errors.New("interrupted: the report holds the cells that finished")
	}
	return nil
}

// repoRoot finds the repository root: the first directory up from the
// working directory that holds bench/go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bench", "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("finding the repository: no bench/go.mod above %s", dir)
		}
	}
}

// appendJSONL appends one cell's result to a file as it finishes, so that
// the numbers survive a run that dies before writing its report.
func appendJSONL(path string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}
