package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cronoq/cronoq/jepsen/checker"
	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nemesis"
	"github.com/cronoq/cronoq/jepsen/nodes"
	"github.com/cronoq/cronoq/jepsen/report"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// runOptions are the flags of `jepsen run`.
type runOptions struct {
	Bin        string        `json:"bin"`
	Schedule   string        `json:"schedule"`
	Duration   time.Duration `json:"duration"`
	Seed       uint64        `json:"seed"`
	Results    string        `json:"results"`
	Out        string        `json:"out,omitempty"`
	Warmup     time.Duration `json:"warmup"`
	Recovery   time.Duration `json:"recovery"`
	Drain      time.Duration `json:"drain"`
	TTL        time.Duration `json:"ttl"`
	KeepData   bool          `json:"keep_data"`
	Budget     time.Duration `json:"budget"`
	LogLevel   string        `json:"log_level"`
	RegTimeout time.Duration `json:"register_check_timeout"`
	// Secure runs the nodes with TLS (client certificates required),
	// gossip encryption and ACLs, and every harness client with the
	// client certificate and the management token.
	Secure bool `json:"secure,omitempty"`
}

// runConfig is config.json.
type runConfig struct {
	Options    runOptions     `json:"options"`
	Params     checker.Params `json:"params"`
	GitCommit  string         `json:"git_commit,omitempty"`
	BinSHA256  string         `json:"bin_sha256,omitempty"`
	HarnessSHA string         `json:"harness_sha256,omitempty"`
	NodeArgs   [][]string     `json:"node_args"`
	Optional   []string       `json:"optional_flags"`
	Missing    []string       `json:"missing_flags,omitempty"`
	StartedAt  string         `json:"started_at"`
}

// Addresses (JEPSEN.md B1): nodes .11-.13, workers .21-.28, clients .31-.44.
var (
	nodeIPs   = []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	workerIPs = []string{"127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24", "127.0.0.25", "127.0.0.26", "127.0.0.27", "127.0.0.28"}
	clientIPs = []string{"127.0.0.31", "127.0.0.32", "127.0.0.33", "127.0.0.34", "127.0.0.35", "127.0.0.36", "127.0.0.37", "127.0.0.38",
		"127.0.0.39", "127.0.0.40", "127.0.0.41", "127.0.0.42", "127.0.0.43", "127.0.0.44"}
)

// optionalFlags are passed to the agent when its -h lists them: the raft
// timing of the test configuration (JEPSEN.md B1), and a small snapshot
// threshold so that a follower cut off for a while is caught up by a
// snapshot (scenario 11).
// Each entry lists the accepted spellings and the value.
var optionalFlags = []struct {
	names    []string
	value    string
	snapshot bool // needed for scenario 11
}{
	{[]string{"raft-heartbeat-timeout"}, "500ms", false},
	{[]string{"raft-election-timeout"}, "500ms", false},
	{[]string{"raft-leader-lease-timeout"}, "250ms", false},
	{[]string{"snapshot-threshold", "raft-snapshot-threshold"}, "200", true},
	{[]string{"snapshot-interval", "raft-snapshot-interval"}, "2s", true},
	{[]string{"trailing-logs", "raft-trailing-logs"}, "100", true},
}

func cmdRun(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var o runOptions
	var seed int64
	fs.StringVar(&o.Bin, "bin", "bin/cronoq-jepsen", "the cronoq binary (built with -tags jepsenfaults)")
	fs.StringVar(&o.Schedule, "schedule", "smoke", "fault schedule: smoke, smoke-secure, soak, or bug-ackearly|bug-noepoch|bug-stalelease|bug-cronrefire|bug-followerread|bug-depdone|bug-laneoverlap|bug-ackonsend")
	fs.DurationVar(&o.Duration, "duration", 30*time.Minute, "length of the fault phase of a soak")
	fs.Int64Var(&seed, "seed", 0, "random seed (0: from the clock)")
	fs.StringVar(&o.Results, "results", "jepsen/results", "folder that receives <UTC-time>-<seed>/")
	fs.StringVar(&o.Out, "out", "", "exact results folder (overrides -results)")
	fs.DurationVar(&o.Warmup, "warmup", 5*time.Second, "traffic before the first fault")
	fs.DurationVar(&o.Recovery, "recovery", 15*time.Second, "traffic after the faults are healed")
	fs.DurationVar(&o.Drain, "drain", 30*time.Second, "longest wait for the queue to drain")
	fs.DurationVar(&o.TTL, "ttl", 3*time.Second, "lease heartbeat window of the nodes")
	fs.BoolVar(&o.KeepData, "keep-data", false, "keep node data dirs even when the run is valid")
	fs.DurationVar(&o.Budget, "budget", 0, "wall-clock budget of the whole run; phases are cut short to fit (0: none)")
	fs.StringVar(&o.LogLevel, "log-level", "info", "node log level")
	fs.DurationVar(&o.RegTimeout, "register-timeout", 15*time.Second, "porcupine time limit")
	fs.BoolVar(&o.Secure, "secure", false, "TLS with client certificates, gossip encryption and ACLs on every node; every harness client uses the client certificate and the management token (material in the run's tls/)")
	if err := fs.Parse(args); err != nil {
		return exitHarness
	}
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	o.Seed = uint64(seed)
	code, err := run(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		return exitHarness
	}
	return code
}

// phase logs progress on stderr.
func phase(start time.Time, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func fileSHA(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain").Output(); err == nil && len(st) > 0 {
		c += "-dirty"
	}
	return c
}

func run(o runOptions) (int, error) {
	start := time.Now()
	if err := nemesis.CheckIsolated(); err != nil {
		return exitHarness, err
	}
	bin, err := filepath.Abs(o.Bin)
	if err != nil {
		return exitHarness, err
	}
	if _, err := os.Stat(bin); err != nil {
		return exitHarness, fmt.Errorf("cronoq binary: %w", err)
	}
	dir := o.Out
	if dir == "" {
		dir = filepath.Join(o.Results, fmt.Sprintf("%s-%d", start.UTC().Format("20060102T150405Z"), o.Seed))
	}
	if err := os.MkdirAll(filepath.Join(dir, "nodes"), 0o755); err != nil {
		return exitHarness, err
	}
	fmt.Fprintf(os.Stderr, "jepsen: run %s, schedule %s, seed %d\n", dir, o.Schedule, o.Seed)

	// Budget: end the fault phase early enough to heal, drain and check.
	deadline := time.Time{}
	if o.Budget > 0 {
		deadline = start.Add(o.Budget)
	}
	left := func() time.Duration {
		if deadline.IsZero() {
			return time.Hour * 24
		}
		return time.Until(deadline)
	}

	netw := &nemesis.Net{}
	if err := netw.Setup(); err != nil {
		return exitHarness, err
	}
	defer netw.Heal()

	help := nodes.HelpText(bin)
	var optional, missing, missingSnapshot []string
	for _, f := range optionalFlags {
		found := false
		for _, name := range f.names {
			if nodes.HasFlag(help, name) {
				optional = append(optional, "-"+name, f.value)
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, "-"+f.names[0])
			if f.snapshot {
				missingSnapshot = append(missingSnapshot, "-"+f.names[0])
			}
		}
	}
	join := make([]string, len(nodeIPs))
	for i, ip := range nodeIPs {
		join[i] = fmt.Sprintf("%s:%d", ip, nodes.GossipPort)
	}
	var sec *secureSetup
	cl := &nodes.Cluster{Admin: nodes.NewAdmin()}
	if o.Secure {
		sec, err = prepareSecure(context.Background(), bin, filepath.Join(dir, "tls"))
		if err != nil {
			return exitHarness, err
		}
		cl.Admin = nodes.NewAdminTLS(sec.Client, sec.Secret)
	}
	var nodeArgs [][]string
	for i, ip := range nodeIPs {
		id := fmt.Sprintf("n%d", i+1)
		spec := nodes.Spec{ID: id, IP: ip, DataDir: filepath.Join(dir, "data", id), LogPath: filepath.Join(dir, "nodes", id+".log")}
		args := []string{"agent", "-node-id", id, "-data-dir", spec.DataDir,
			"-http-addr", spec.HTTPAddr(), "-raft-addr", spec.RaftAddr(), "-gossip-addr", spec.GossipAddr(),
			"-bootstrap-expect", "3", "-join", strings.Join(join, ","),
			"-heartbeat-window", o.TTL.String(), "-hold-timeout", "2s", "-max-pending", "300",
			"-shutdown-timeout", "5s", "-log-level", o.LogLevel}
		args = append(args, optional...)
		if sec != nil {
			args = append(args, sec.agentArgs()...)
		}
		nodeArgs = append(nodeArgs, args)
		cl.Nodes = append(cl.Nodes, nodes.New(spec, bin, args))
	}

	params := checker.Params{StartUnixNano: start.UnixNano(), TTL: o.TTL, Nodes: cl.IDs(), RegisterCheckTimeout: o.RegTimeout}
	cfg := runConfig{Options: o, GitCommit: gitCommit(), BinSHA256: fileSHA(bin), NodeArgs: nodeArgs, Optional: optional, Missing: missing,
		StartedAt: start.UTC().Format(time.RFC3339Nano)}
	if exe, err := os.Executable(); err == nil {
		cfg.HarnessSHA = fileSHA(exe)
	}
	writeConfig := func() {
		b, _ := json.MarshalIndent(cfg, "", "  ")
		_ = os.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'), 0o644)
	}
	cfg.Params = params
	writeConfig()

	rec, err := history.NewRecorder(filepath.Join(dir, "history.jsonl"), start)
	if err != nil {
		return exitHarness, err
	}
	for _, n := range cl.Nodes {
		n.OnCrash = func(id string, err error) {
			rec.Add(history.Op{Process: "harness", Type: history.Info, F: workload.NodeCrash,
				Value: &history.Value{Targets: []string{id}, Detail: fmt.Sprint(err)}})
		}
	}
	// Whatever happens, the nodes die with us: they are killed here, and
	// the namespace's PID 1 kills anything left.
	defer func() {
		cl.ResumeAll()
		_ = cl.KillAll()
	}()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	phase(start, "starting 3 nodes (%s)", filepath.Base(bin))
	if err := cl.StartAll(); err != nil {
		return exitHarness, err
	}
	mon, err := nodes.NewMonitor(cl, filepath.Join(dir, "leaders.jsonl"), start, 200*time.Millisecond)
	if err != nil {
		return exitHarness, err
	}
	monCtx, stopMon := context.WithCancel(context.Background())
	var monWG sync.WaitGroup
	monWG.Add(1)
	go func() {
		defer monWG.Done()
		mon.Run(monCtx)
	}()
	stopMonitor := func() {
		stopMon()
		monWG.Wait()
		_ = mon.Close()
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	leader, err := mon.WaitLeader(wctx)
	wcancel()
	if err != nil {
		stopMonitor()
		_ = rec.Close()
		return exitHarness, fmt.Errorf("cluster did not elect a leader: %w (see %s)", err, filepath.Join(dir, "nodes"))
	}
	if mon.NoAdmin() {
		stopMonitor()
		_ = rec.Close()
		return exitHarness, fmt.Errorf("%s: %w", bin, nodes.ErrNoAdmin)
	}
	phase(start, "leader %s", leader)

	// Workloads.
	env := &workload.Env{Rec: rec, TTL: o.TTL, Seed: o.Seed}
	for _, n := range cl.Nodes {
		env.Nodes = append(env.Nodes, workload.Node{ID: n.ID, Addr: n.HTTPAddr()})
	}
	defer env.Close()
	var secureNotes []string
	if sec != nil {
		env.TLS, env.Token = sec.Client, sec.Secret
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		secureNotes, err = waitSecure(actx, sec, env)
		acancel()
		if err != nil {
			stopMonitor()
			_ = rec.Close()
			return exitHarness, fmt.Errorf("secure setup: %w", err)
		}
		phase(start, "secure: TLS with client certificates, gossip encryption, ACLs; every node knows the management token")
	}
	proc := func(i int) workload.Process {
		return workload.Process{Name: fmt.Sprintf("c%d", i+1), IP: clientIPs[i]}
	}
	queue := workload.NewQueue(env, []workload.Process{proc(0), proc(1), proc(2)}, proc(3))
	reg := workload.NewRegister(env, []workload.Process{proc(4), proc(5), proc(6)}, 20)
	cron := workload.NewCron(env, proc(7), 10)
	flows := workload.NewWorkflows(env, proc(8), proc(9))
	lanes := workload.NewLanes(env, []workload.Process{proc(10), proc(11)})
	delivery := workload.NewDelivery(env, []workload.Process{proc(12), proc(13)})
	raceRand := env.Rand()
	var raceMu sync.Mutex
	workers := map[string]*workload.Worker{}
	var workerNames []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("w%d", i+1)
		workers[name] = workload.NewWorker(env, workload.WorkerConfig{Name: name, IP: workerIPs[i], Pool: workload.QueuePool, Slots: 3,
			Choose: workload.QueueBehavior(o.TTL),
			BeforeComplete: func(g workload.Grant, b workload.Behavior) {
				raceMu.Lock()
				race := b.Outcome == "success" && raceRand.Float64() < 0.05
				raceMu.Unlock()
				if race {
					queue.Race(g)
				}
			}})
		workerNames = append(workerNames, name)
	}
	workers["w4"] = workload.NewWorker(env, workload.WorkerConfig{Name: "w4", IP: workerIPs[3], Pool: workload.CronPool, Slots: 3, Choose: workload.CronBehavior})
	var flowWorkers []string
	for i := 4; i < 6; i++ {
		name := fmt.Sprintf("w%d", i+1)
		workers[name] = workload.NewWorker(env, workload.WorkerConfig{Name: name, IP: workerIPs[i], Pool: workload.WorkflowPool, Slots: 4,
			Choose: workload.WorkflowBehavior(o.TTL)})
		flowWorkers = append(flowWorkers, name)
	}
	var laneWorkers []string
	for i := 6; i < 8; i++ {
		name := fmt.Sprintf("w%d", i+1)
		workers[name] = workload.NewWorker(env, workload.WorkerConfig{Name: name, IP: workerIPs[i], Pool: workload.LanesPool, Slots: 4,
			Choose: workload.LaneBehavior(o.TTL)})
		laneWorkers = append(laneWorkers, name)
	}

	sched, err := nemesis.Named(o.Schedule, workerNames, o.Duration, rand.New(rand.NewPCG(o.Seed, 7)))
	if err != nil {
		stopMonitor()
		_ = rec.Close()
		return exitHarness, err
	}

	setupCtx, setupCancel := context.WithTimeout(ctx, 30*time.Second)
	err = cron.Setup(setupCtx)
	if err == nil {
		// Before any task of the queue pool exists: every terminal event
		// of the run is the subscriptions'.
		err = delivery.Setup(setupCtx)
	}
	setupCancel()
	if err != nil {
		stopMonitor()
		_ = rec.Close()
		return exitHarness, err
	}

	workCtx, stopWorkers := context.WithCancel(context.Background())
	loadCtx, stopLoad := context.WithCancel(ctx)
	var workerWG, loadWG sync.WaitGroup
	for _, w := range workers {
		workerWG.Add(1)
		go func() {
			defer workerWG.Done()
			w.Run(workCtx)
		}()
	}
	loadWG.Add(5)
	go func() {
		defer loadWG.Done()
		queue.Run(loadCtx)
	}()
	go func() {
		defer loadWG.Done()
		delivery.Run(loadCtx)
	}()
	go func() {
		defer loadWG.Done()
		lanes.Run(loadCtx)
	}()
	go func() {
		defer loadWG.Done()
		flows.Run(loadCtx)
	}()
	go func() {
		defer loadWG.Done()
		reg.Run(loadCtx)
	}()

	timings := map[string]float64{}
	mark := func(name string, since time.Time) { timings[name] = time.Since(since).Seconds() }
	tWarm := time.Now()
	phase(start, "warm-up %s", o.Warmup)
	sleepCtx(ctx, o.Warmup)
	mark("warmup", tWarm)

	// Faults.
	nem := &nemesis.Env{Rec: rec, Cluster: cl, Monitor: mon, Net: netw, Workers: workers, Queue: queue, Cron: cron,
		Workflows: flows, WorkflowWorkers: flowWorkers, Lanes: lanes, LaneWorkers: laneWorkers, Delivery: delivery,
		Rand: rand.New(rand.NewPCG(o.Seed, 11)), SnapshotFlags: len(missingSnapshot) == 0}
	tFaults := time.Now()
	params.FaultStart = rec.Now()
	phase(start, "faults: schedule %s", sched.Name)
	faultCtx, faultCancel := context.WithCancel(ctx)
	if !deadline.IsZero() {
		// Keep what the rest needs: heal, recovery, drain, final reads, checks.
		need := o.Recovery + o.Drain + 60*time.Second
		faultCtx, faultCancel = context.WithDeadline(ctx, deadline.Add(-need))
	}
	var cronWG sync.WaitGroup
	cronWG.Add(1)
	go func() {
		defer cronWG.Done()
		cronOps(faultCtx, cron)
	}()
	sched.Run(faultCtx, nem)
	faultCancel()
	cronWG.Wait()
	params.FaultEnd = rec.Now()
	mark("faults", tFaults)

	tHeal := time.Now()
	phase(start, "healing")
	healCtx, healCancel := context.WithTimeout(context.Background(), 40*time.Second)
	if err := nem.HealAll(healCtx); err != nil {
		phase(start, "heal: %v", err)
	}
	leader, err = mon.WaitLeader(healCtx)
	healCancel()
	mark("heal", tHeal)
	harnessErr := error(nil)
	if err != nil {
		harnessErr = fmt.Errorf("no leader after healing: %w", err)
		phase(start, "%v", harnessErr)
	} else {
		phase(start, "leader %s; recovery traffic %s", leader, o.Recovery)
	}

	tRec := time.Now()
	sleepCtx(ctx, min(o.Recovery, max(0, left()-o.Drain-45*time.Second)))
	mark("recovery", tRec)
	queue.StopSubmitting()
	flows.StopSubmitting()
	lanes.StopSubmitting()
	stopLoad()
	loadWG.Wait()

	bg := context.Background()
	tDrain := time.Now()
	phase(start, "draining (at most %s)", o.Drain)
	dctx, dcancel := context.WithTimeout(bg, min(o.Drain, max(5*time.Second, left()-40*time.Second)))
	drained := workload.Drain(dctx, env, "127.0.0.1", workload.QueuePool, workload.CronPool, workload.WorkflowPool, workload.LanesPool)
	dcancel()
	pctx, pcancel := context.WithTimeout(bg, 20*time.Second)
	cron.PauseAll(pctx)
	pcancel()
	dctx, dcancel = context.WithTimeout(bg, 5*time.Second)
	workload.Drain(dctx, env, "127.0.0.1", workload.CronPool)
	dcancel()
	stopWorkers()
	waitTimeout(&workerWG, 10*time.Second)
	// Leases abandoned by the register workload expire now.
	sleepCtx(bg, o.TTL+time.Second)
	mark("drain", tDrain)

	// The queue pool no longer changes: the consumers catch up.
	tCatch := time.Now()
	phase(start, "subscriptions catching up")
	cctx, ccancel := context.WithTimeout(bg, min(20*time.Second, max(5*time.Second, left()-45*time.Second)))
	delivery.CatchUp(cctx)
	ccancel()
	mark("catch-up", tCatch)
	if !drained {
		phase(start, "queue did not drain")
	}

	tFinal := time.Now()
	phase(start, "final reads")
	fctx, fcancel := context.WithTimeout(bg, 30*time.Second)
	if err := workload.ReadFinal(fctx, env, "127.0.0.1"); err != nil {
		phase(start, "final read: %v", err)
	}
	reg.FinalReads(fctx, "127.0.0.1")
	fcancel()
	fctx, fcancel = context.WithTimeout(bg, 30*time.Second)
	if err := workload.ReadWorkflows(fctx, env, "127.0.0.1", flows.Keys(), flows.AckedIDs()); err != nil {
		phase(start, "final read of the workflows: %v", err)
	}
	fcancel()
	collectHashes(bg, rec, cl, mon)
	mark("final", tFinal)

	stopMonitor()
	for _, n := range cl.Nodes {
		_ = n.Stop(5 * time.Second)
	}
	if err := rec.Close(); err != nil {
		return exitHarness, err
	}
	cfg.Params = params
	cfg.Params.DefaultThresholds(time.Duration(params.FaultEnd-params.FaultStart) + o.Warmup + o.Recovery)
	writeConfig()

	tCheck := time.Now()
	phase(start, "checking")
	code, sum, err := check(dir, cfg)
	mark("check", tCheck)
	timings["total"] = time.Since(start).Seconds()
	if sum != nil {
		sum.Timings = timings
		if len(missingSnapshot) > 0 {
			sum.Notes = append(sum.Notes, fmt.Sprintf("the agent lacks %s: an isolated follower is caught up by log replication, not a snapshot, unless one is seen in its log", strings.Join(missingSnapshot, ", ")))
		}
		if len(missing) > len(missingSnapshot) {
			sum.Notes = append(sum.Notes, fmt.Sprintf("the agent lacks some of %s: the nodes run with their default raft timing", strings.Join(missing, ", ")))
		}
		if harnessErr != nil {
			sum.Notes = append(sum.Notes, "harness: "+harnessErr.Error())
		}
		if sec != nil {
			sum.Notes = append(sum.Notes, "secure: nodes with TLS (client certificates required), gossip encryption and ACLs; every harness client with the client certificate and the management token; "+strings.Join(secureNotes, "; "))
		}
		_ = report.Write(dir, sum)
		fmt.Print(report.Text(sum))
	}
	if err != nil {
		return exitHarness, err
	}
	if code == exitValid && !o.KeepData {
		_ = os.RemoveAll(filepath.Join(dir, "data"))
	}
	if harnessErr != nil && code == exitValid {
		return exitHarness, harnessErr
	}
	return code, nil
}

// cronOps pauses, resumes and removes schedules during the faults, at
// fixed offsets from their start.
func cronOps(ctx context.Context, c *workload.Cron) {
	type op struct {
		at   time.Duration
		name string
		do   func(context.Context, string)
	}
	pause := func(ctx context.Context, n string) { c.Pause(ctx, n, true) }
	resume := func(ctx context.Context, n string) { c.Pause(ctx, n, false) }
	ops := []op{
		{5 * time.Second, workload.ScheduleName(3), pause},
		{25 * time.Second, workload.ScheduleName(7), c.Remove},
		{55 * time.Second, workload.ScheduleName(3), resume},
		{60 * time.Second, workload.ScheduleName(8), pause},
	}
	start := time.Now()
	for _, o := range ops {
		if !sleepCtx(ctx, time.Until(start.Add(o.at))) {
			return
		}
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 8*time.Second)
		o.do(octx, o.name)
		cancel()
	}
}

// collectHashes asks the leader for a barrier, then every node for its
// FSM hash once it applied as far, until all answer the same applied index
// (at most 20s), and records the answers.
func collectHashes(ctx context.Context, rec *history.Recorder, cl *nodes.Cluster, mon *nodes.Monitor) {
	done := rec.Invoke("final", workload.FSMHash, "", nil)
	deadline := time.Now().Add(20 * time.Second)
	var hashes map[string]history.NodeHash
	for time.Now().Before(deadline) {
		hashes = map[string]history.NodeHash{}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		leader, err := mon.WaitLeader(lctx)
		cancel()
		if err != nil {
			continue
		}
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lh, err := cl.Admin.Barrier(bctx, cl.Node(leader).HTTPAddr(), 0)
		cancel()
		if err != nil {
			hashes[leader] = history.NodeHash{Err: err.Error()}
			time.Sleep(500 * time.Millisecond)
			continue
		}
		hashes[leader] = history.NodeHash{AppliedIndex: lh.AppliedIndex, Hash: lh.Hash}
		same := true
		for _, n := range cl.Nodes {
			if n.ID == leader {
				continue
			}
			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			h, err := cl.Admin.Barrier(bctx, n.HTTPAddr(), lh.AppliedIndex)
			cancel()
			if err != nil {
				hashes[n.ID] = history.NodeHash{Err: err.Error()}
				same = false
				continue
			}
			hashes[n.ID] = history.NodeHash{AppliedIndex: h.AppliedIndex, Hash: h.Hash}
			if h.AppliedIndex != lh.AppliedIndex {
				same = false
			}
		}
		if same {
			done(history.OK, &history.Value{Hashes: hashes}, nil)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	done(history.Info, &history.Value{Hashes: hashes}, errors.New("nodes did not reach the same applied index"))
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
