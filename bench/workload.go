package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// cell is one measurement: a system under one workload, one run.
type cell struct {
	system   string
	workload string // w1 | w2 | w3 | w4 | scale | failover | raft
	rate     int    // W3 offered rate; scale: the retained tasks N
	run      int    // 1-based
}

func (c cell) title(o options) string {
	s := fmt.Sprintf("%s %s", wlName(c.workload), c.system)
	if c.workload == "w3" {
		s = fmt.Sprintf("W3 %d/s %s", c.rate, c.system)
	}
	if c.workload == "raft" {
		s = "bare raft"
	}
	if c.workload == "scale" {
		return scaleTitle(c)
	}
	return fmt.Sprintf("%s (run %d/%d)", s, c.run, o.runs)
}

func wlName(w string) string {
	switch w {
	case "w1":
		return "W1"
	case "w2":
		return "W2"
	case "w3":
		return "W3"
	case "w4":
		return "W4"
	case "failover":
		return "Failover"
	}
	return w
}

// plan lists the cells: runs are outermost, and within a run every
// workload goes through the systems in an order rotated by one per run, so
// that no system always goes first or follows the same neighbour. W4 runs
// only on the systems that have a fan-out (see skipped).
func plan(o options) []cell {
	var queues []string
	for _, s := range o.systems {
		if s != "raft" {
			queues = append(queues, s)
		}
	}
	var cells []cell
	for run := 1; run <= o.runs; run++ {
		order := make([]string, len(queues))
		for i := range queues {
			order[i] = queues[(i+run-1)%len(queues)]
		}
		if contains(o.systems, "raft") {
			cells = append(cells, cell{system: "raft", workload: "raft", run: run})
		}
		for _, w := range o.workloads {
			rates := []int{0}
			if w == "w3" {
				rates = o.w3Rates
			}
			if w == "scale" {
				rates = scaleSizesOfRun(o, run)
			}
			for _, r := range rates {
				for _, s := range order {
					if w == "w4" && fanOutSkip(s) != "" || w == "scale" && scaleSkip(s) != "" || w == "failover" && failoverSkip(s) != "" {
						continue
					}
					cells = append(cells, cell{system: s, workload: w, rate: r, run: run})
				}
			}
		}
	}
	return cells
}

// CellResult is what one cell measured.
type CellResult struct {
	System   string  `json:"system"`
	Workload string  `json:"workload"`
	Rate     int     `json:"rate,omitempty"`
	Run      int     `json:"run"`
	Copies   int     `json:"copies"`
	Error    string  `json:"error,omitempty"`
	WallS    float64 `json:"wall_s"`

	// Server CPU seconds (user+system of the server process trees) during
	// the measured window, and of this process (clients and workers).
	ServerCPUs float64 `json:"server_cpu_s"`
	ClientCPUs float64 `json:"client_cpu_s"`

	W1   *W1Result   `json:"w1,omitempty"`
	W2   *W2Result   `json:"w2,omitempty"`
	W3   *W3Result   `json:"w3,omitempty"`
	W4   *W4Result   `json:"w4,omitempty"`
	Raft *RaftResult `json:"raft,omitempty"`

	// Scale is a scale cell's result (its Rate is the size N).
	Scale    *ScaleResult    `json:"scale,omitempty"`
	Failover *FailoverResult `json:"failover,omitempty"`
}

// W1Result is a burn-down.
type W1Result struct {
	Tasks          int     `json:"tasks"`
	Seconds        float64 `json:"seconds"`
	Rate           float64 `json:"tasks_per_s"`
	PreInsertS     float64 `json:"pre_insert_s"`
	PreInsertRate  float64 `json:"pre_insert_tasks_per_s"`
	PreInsertBatch bool    `json:"pre_insert_batched"`
	StoreCompleted int64   `json:"store_completed"`
	Duplicates     int64   `json:"duplicate_completions"`
	OrderingKeys   int     `json:"ordering_keys,omitempty"`
	// The subscription of cronoq-sub: events read during the burn-down
	// (one per task), their rate from the start of the workers to the
	// last one read, and how long after the last completion that was.
	SubEvents int64   `json:"sub_events,omitempty"`
	SubRate   float64 `json:"sub_events_per_s,omitempty"`
	SubLagMs  float64 `json:"sub_lag_ms,omitempty"`
	// Raft elections during the measured window, from every node's
	// metrics read before the workers start and at the last durable
	// completion (cronoq systems only).
	Elections *ElectionCount `json:"elections_during_w1,omitempty"`
}

// W2Result is the enqueue rates.
type W2Result struct {
	SingleTasks   int     `json:"single_tasks"`
	SingleRate    float64 `json:"single_tasks_per_s"`
	SingleP50ms   float64 `json:"single_p50_ms"`
	SingleP99ms   float64 `json:"single_p99_ms"`
	SingleCPUs    float64 `json:"single_server_cpu_s"`
	Callers       int     `json:"single_callers"`
	BatchTasks    int     `json:"batch_tasks,omitempty"`
	BatchSize     int     `json:"batch_size,omitempty"`
	BatchRate     float64 `json:"batch_tasks_per_s,omitempty"`
	BatchCPUs     float64 `json:"batch_server_cpu_s,omitempty"`
	BatchCallers  int     `json:"batch_callers,omitempty"`
	BatchNotAvail string  `json:"batch_not_available,omitempty"`
}

// W3Result is one open-loop run at one rate.
type W3Result struct {
	Offered      int     `json:"offered"` // tasks scheduled
	OfferedRate  int     `json:"offered_per_s"`
	Submitted    int     `json:"submitted"`     // acknowledged submits
	NotSubmitted int     `json:"not_submitted"` // still queued at the end of the window
	SubmitErrors int     `json:"submit_errors"`
	Completed    int     `json:"completed"` // durable completions seen
	InWindowRate float64 `json:"completed_in_window_per_s"`
	// Latency quantiles; +Inf (null in JSON) when the quantile falls on
	// tasks that never completed.
	P50ms       jf      `json:"p50_ms"`
	P90ms       jf      `json:"p90_ms"`
	P99ms       jf      `json:"p99_ms"`
	MaxMs       jf      `json:"max_ms"`
	SubmitP50ms float64 `json:"submit_p50_ms"`
	SubmitP99ms float64 `json:"submit_p99_ms"`
	// Due → a handler began the task (the dispatch part of the latency).
	StartP50ms float64 `json:"start_p50_ms"`
	StartP99ms float64 `json:"start_p99_ms"`
	Duplicates int64   `json:"duplicate_completions"`
	FirstError string  `json:"first_submit_error,omitempty"`
}

// W4Result is one fan-out: a root task whose completion spawns Children
// no-op children and a continuation that depends on all of them. Times
// run from the submit call of the root.
type W4Result struct {
	Children int `json:"children"`
	// The root's submit acknowledged.
	SubmitAckMs float64 `json:"submit_ack_ms"`
	// The root's completion acknowledged to its worker: it and the
	// children it spawned are committed (0 when the ack was not seen).
	SpawnCommitS float64 `json:"spawn_commit_s"`
	// A handler began the first child.
	FirstChildS float64 `json:"first_child_s"`
	// Client.Wait reported the continuation succeeded.
	Seconds      float64 `json:"seconds"`
	ChildrenRate float64 `json:"children_per_s"` // Children / Seconds
	// Handler runs of children (more than Children if some ran twice), and
	// the dependencies the continuation's grant carried.
	ChildRuns      int64 `json:"child_runs"`
	ThenDeps       int   `json:"continuation_dependencies"`
	StoreCompleted int64 `json:"store_completed"`
}

// skipped lists, per system, the workloads it does not run and why.
func skipped(o options) []Skip {
	out := scaleSkipped(o)
	if !contains(o.workloads, "w4") {
		return out
	}
	for _, s := range o.systems {
		if s == "raft" {
			continue
		}
		if why := fanOutSkip(s); why != "" {
			out = append(out, Skip{System: s, Workload: "w4", Reason: why})
		}
	}
	return out
}

// Skip is a workload a system does not run.
type Skip struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Reason   string `json:"reason"`
}

// runCell starts the system fresh, runs the workload and stops the system.
func runCell(ctx context.Context, env *Env, c cell) (res CellResult) {
	res = CellResult{System: c.system, Workload: c.workload, Rate: c.rate, Run: c.run}
	start := time.Now()
	defer func() { res.WallS = time.Since(start).Seconds() }()
	cctx, cancel := context.WithTimeout(ctx, env.opts.cellTimeout)
	defer cancel()
	name := fmt.Sprintf("%s-%s", c.system, c.workload)
	if c.rate > 0 {
		name += fmt.Sprintf("-%d", c.rate)
	}
	dir := filepath.Join(env.dataDir, fmt.Sprintf("%s-r%d", name, c.run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Error = err.Error()
		return res
	}
	defer func() {
		if !env.opts.keep {
			_ = os.RemoveAll(dir)
		}
	}()

	if c.workload == "scale" {
		runScaleCell(ctx, env, c, dir, &res)
		return res
	}
	if c.workload == "raft" {
		res.Copies = 3
		var cur atomic.Int64
		env.prog.track("applying", &cur, 0)
		rr, err := runRaftBare(cctx, dir, env.opts.raftDuration, env.opts.raftInflight, &cur)
		res.Raft = &rr
		res.ClientCPUs = rr.CPUs
		if err != nil {
			res.Error = err.Error()
		}
		return res
	}

	sys, err := newSystem(env, c.system)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Copies = sys.Copies()
	env.prog.phase("starting " + c.system)
	if err := sys.Start(cctx, dir); err != nil {
		res.Error = "start: " + err.Error()
		if serr := sys.Stop(); serr != nil {
			res.Error += "; stop: " + serr.Error()
		}
		return res
	}
	var werr error
	switch c.workload {
	case "w1":
		werr = runW1(cctx, env, sys, &res)
	case "w2":
		werr = runW2(cctx, env, sys, &res)
	case "w3":
		werr = runW3(cctx, env, sys, c.rate, &res)
	case "w4":
		werr = runW4(cctx, env, sys, &res)
	case "failover":
		werr = runFailover(cctx, env, sys, &res)
	}
	env.prog.phase("stopping " + c.system)
	serr := sys.Stop()
	if werr != nil {
		res.Error = werr.Error()
	}
	if serr != nil {
		if res.Error != "" {
			res.Error += "; "
		}
		res.Error += "stop: " + serr.Error()
	}
	return res
}

// preInsert enqueues tasks [from, to) in batches (or one per call with many
// callers where the system has no batch API).
func preInsert(ctx context.Context, env *Env, sys System, from, to int, cur *atomic.Int64) (batched bool, err error) {
	var next atomic.Int64
	next.Store(int64(from))
	batch := env.opts.batch
	callers := env.opts.w2Callers
	batched = sys.Batches()
	if !batched {
		batch = 1
		callers = env.opts.w2Concurrency
	}
	var wg sync.WaitGroup
	var first firstError
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && first.get() == nil {
				lo := int(next.Add(int64(batch))) - batch
				if lo >= to {
					return
				}
				hi := min(lo+batch, to)
				var err error
				if batched {
					seqs := make([]int, 0, hi-lo)
					for q := lo; q < hi; q++ {
						seqs = append(seqs, q)
					}
					err = sys.EnqueueBatch(ctx, seqs)
				} else {
					err = sys.Enqueue(ctx, lo)
				}
				if err != nil {
					first.set(err)
					return
				}
				cur.Add(int64(hi - lo))
			}
		}()
	}
	wg.Wait()
	if e := first.get(); e != nil {
		return batched, e
	}
	return batched, ctx.Err()
}

func runW1(ctx context.Context, env *Env, sys System, res *CellResult) error {
	n := env.opts.w1Tasks
	w := &W1Result{Tasks: n, OrderingKeys: env.opts.w1OrderingKeys}
	res.W1 = w
	var ins atomic.Int64
	env.prog.track("pre-inserting", &ins, int64(n))
	t0 := time.Now()
	batched, err := preInsert(ctx, env, sys, 0, n, &ins)
	w.PreInsertBatch = batched
	if err != nil {
		return fmt.Errorf("pre-insert: %w", err)
	}
	w.PreInsertS = time.Since(t0).Seconds()
	w.PreInsertRate = float64(n) / w.PreInsertS

	tr := newTracker(n)
	env.prog.trackCount("burning down", &tr.count, int64(n))
	cpu0, self0 := treeCPU(sys.ServerPIDs()), selfCPU()
	waitProf := maybeProfile(ctx, env, sys, res)
	defer func() {
		if err := waitProf(); err != nil {
			env.prog.note("%v", err)
		}
	}()
	var sub *subConsumer
	var subBase int64
	if ss, ok := sys.(subscribed); ok && ss.Subscription() != nil {
		sub = ss.Subscription()
		subBase, _ = sub.Events()
	}
	ec, counted := sys.(electionCounter)
	var el0 map[string]nodeElections
	var el0Err error
	if counted {
		el0, el0Err = ec.ElectionSample(ctx)
	}
	start := tr.now()
	if err := sys.StartWorkers(ctx, tr.hooks()); err != nil {
		return err
	}
	var werr error
	select {
	case <-tr.reached:
	case <-ctx.Done():
		werr = fmt.Errorf("burn-down: %d of %d completed: %w", tr.count.Load(), n, ctx.Err())
	}
	res.ServerCPUs = treeCPU(sys.ServerPIDs()) - cpu0
	res.ClientCPUs = selfCPU() - self0
	if counted {
		// Read at once: the window ends at the last completion.
		el1, err := ec.ElectionSample(ctx)
		switch {
		case el0Err != nil:
			w.Elections = &ElectionCount{Error: "before the window: " + el0Err.Error()}
		case err != nil:
			w.Elections = &ElectionCount{Error: "after the window: " + err.Error()}
		default:
			w.Elections = countElections(el0, el1)
		}
		env.prog.note("%s", w.Elections.Summary())
	}
	end := tr.lastNs.Load()
	w.Seconds = float64(end-start) / 1e9
	if werr == nil {
		w.Rate = float64(n) / w.Seconds
	}
	if sub != nil && werr == nil {
		// Every succeeded task's event, read after its completion.
		env.prog.note("waiting for the subscription's reader")
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		werr = sub.Wait(sctx, subBase+int64(n))
		cancel()
		got, last := sub.Events()
		w.SubEvents = got - subBase
		lastRel := int64(last.Sub(tr.base))
		if werr == nil && lastRel > start {
			w.SubRate = float64(w.SubEvents) / (float64(lastRel-start) / 1e9)
			w.SubLagMs = float64(lastRel-end) / 1e6
		}
		if werr != nil {
			werr = fmt.Errorf("subscription: %w", werr)
		}
	}
	serr := sys.StopWorkers()
	w.Duplicates = tr.dups.Load()
	vctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, verr := sys.Completed(vctx)
	w.StoreCompleted = got
	switch {
	case werr != nil:
		return werr
	case verr != nil:
		return fmt.Errorf("reading the completed count: %w", verr)
	case got < int64(n):
		return fmt.Errorf("the store reports %d completed of %d after the burn-down", got, n)
	}
	return serr
}

func runW2(ctx context.Context, env *Env, sys System, res *CellResult) error {
	o := env.opts
	w := &W2Result{SingleTasks: o.w2Single, Callers: o.w2Concurrency}
	res.W2 = w
	// One task per call, closed loop.
	var cur, next atomic.Int64
	env.prog.track("enqueue one per call", &cur, int64(o.w2Single))
	lats := make([]float64, o.w2Single)
	var first firstError
	var wg sync.WaitGroup
	cpu0, self0 := treeCPU(sys.ServerPIDs()), selfCPU()
	t0 := time.Now()
	for c := 0; c < o.w2Concurrency; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && first.get() == nil {
				q := int(next.Add(1)) - 1
				if q >= o.w2Single {
					return
				}
				s := time.Now()
				if err := sys.Enqueue(ctx, q); err != nil {
					first.set(err)
					return
				}
				lats[q] = float64(time.Since(s)) / 1e6
				cur.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	w.SingleCPUs = treeCPU(sys.ServerPIDs()) - cpu0
	res.ServerCPUs = w.SingleCPUs
	res.ClientCPUs = selfCPU() - self0
	if e := first.get(); e != nil {
		return fmt.Errorf("single enqueue: %w", e)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.SingleRate = float64(o.w2Single) / el
	w.SingleP50ms = percentile(lats, 0.50)
	w.SingleP99ms = percentile(lats, 0.99)

	// Batches.
	if !sys.Batches() {
		w.BatchNotAvail = "no batch enqueue API"
		return nil
	}
	w.BatchTasks, w.BatchSize, w.BatchCallers = o.w2Batched, o.batch, o.w2Callers
	var bcur atomic.Int64
	env.prog.track(fmt.Sprintf("enqueue %d per call", o.batch), &bcur, int64(o.w2Batched))
	cpu0, self0 = treeCPU(sys.ServerPIDs()), selfCPU()
	t0 = time.Now()
	if _, err := preInsert(ctx, env, sys, o.w2Single, o.w2Single+o.w2Batched, &bcur); err != nil {
		return fmt.Errorf("batched enqueue: %w", err)
	}
	w.BatchRate = float64(o.w2Batched) / time.Since(t0).Seconds()
	w.BatchCPUs = treeCPU(sys.ServerPIDs()) - cpu0
	res.ServerCPUs += w.BatchCPUs
	res.ClientCPUs += selfCPU() - self0
	return nil
}

// runW3 offers rate tasks/s for the configured duration, open loop: task i
// is due at t0 + i/rate whether or not earlier submits have returned, and its
// latency runs from that due time to its durable completion, so a system
// that falls behind is charged for the wait. Tasks still waiting for a free
// submitter when the window closes are not submitted and count as never
// completed, as do tasks not completed within the drain time.
func runW3(ctx context.Context, env *Env, sys System, rate int, res *CellResult) error {
	o := env.opts
	total := int(float64(rate) * o.w3Duration.Seconds())
	const warm = 200
	w := &W3Result{Offered: total, OfferedRate: rate}
	res.W3 = w
	tr := newTracker(warm + total)
	if err := sys.StartWorkers(ctx, tr.hooks()); err != nil {
		return err
	}
	if err := warmUp(ctx, env, sys, tr, warm); err != nil {
		return err
	}

	var (
		completedBase = tr.count.Load()
		submitted     atomic.Int64
		errCount      atomic.Int64
		firstErr      firstError
	)
	measured := func() int64 { return tr.count.Load() - completedBase }
	var doneCount atomic.Int64
	env.prog.track(fmt.Sprintf("open loop %d/s", rate), &doneCount, int64(total))
	stopProg := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopProg:
				return
			case <-t.C:
				doneCount.Store(measured())
			}
		}
	}()
	defer close(stopProg)

	t0ns := tr.now() + int64(20*time.Millisecond)
	period := float64(time.Second) / float64(rate)
	windowEnd := t0ns + int64(o.w3Duration)
	// Tasks are still submitted for a second after the window, so that the
	// last ones due are not dropped by a moment's lag.
	cutoff := windowEnd + int64(time.Second)
	for i := 0; i < total; i++ {
		tr.sched[warm+i] = t0ns + int64(float64(i)*period)
	}
	cpu0, self0 := treeCPU(sys.ServerPIDs()), selfCPU()
	waitProf := maybeProfile(ctx, env, sys, res)
	defer func() {
		if err := waitProf(); err != nil {
			env.prog.note("%v", err)
		}
	}()
	offer(ctx, sys, tr, warm, total, cutoff, o.w3Submitters, total, &submitted, &errCount, &firstErr, nil)
	// Drain: wait for the completions of every acknowledged submit.
	drainEnd := time.Now().Add(o.w3Drain)
	for measured() < submitted.Load() && time.Now().Before(drainEnd) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	res.ServerCPUs = treeCPU(sys.ServerPIDs()) - cpu0
	res.ClientCPUs = selfCPU() - self0
	serr := sys.StopWorkers()

	w.Submitted = int(submitted.Load())
	w.SubmitErrors = int(errCount.Load())
	w.NotSubmitted = total - w.Submitted - w.SubmitErrors
	w.Duplicates = tr.dups.Load()
	if e := firstErr.get(); e != nil {
		w.FirstError = e.Error()
	}
	lat := make([]float64, total)
	var sub, started []float64
	inWindow := 0
	for i := 0; i < total; i++ {
		q := warm + i
		d := atomic.LoadInt64(&tr.done[q])
		if tr.acked[q] > 0 {
			sub = append(sub, float64(tr.acked[q]-tr.sched[q])/1e6)
		}
		if s := atomic.LoadInt64(&tr.started[q]); s > 0 {
			started = append(started, float64(s-tr.sched[q])/1e6)
		}
		if d == 0 {
			lat[i] = math.Inf(1)
			continue
		}
		w.Completed++
		if d <= windowEnd {
			inWindow++
		}
		lat[i] = float64(d-tr.sched[q]) / 1e6
	}
	w.InWindowRate = float64(inWindow) / o.w3Duration.Seconds()
	w.P50ms = jf(percentile(lat, 0.50))
	w.P90ms = jf(percentile(lat, 0.90))
	w.P99ms = jf(percentile(lat, 0.99))
	w.MaxMs = jf(percentile(lat, 1))
	w.SubmitP50ms = percentile(sub, 0.50)
	w.SubmitP99ms = percentile(sub, 0.99)
	w.StartP50ms = percentile(started, 0.50)
	w.StartP99ms = percentile(started, 0.99)
	if err := ctx.Err(); err != nil {
		return err
	}
	return serr
}

// offer submits tasks [warm, warm+total) of tr open loop: the pacer
// releases each at its due time (tr.sched, to the millisecond) to one of
// submitters callers, whether or not earlier submits have returned; a task
// still waiting for a caller after cutoff is not submitted. Acknowledged
// submits are stamped in tr.acked and counted in submitted, failures in
// errs and first. tick, when set, runs at every turn of the pacer. It
// returns once every caller is done.
func offer(ctx context.Context, sys System, tr *tracker, warm, total int, cutoff int64, submitters, buffer int,
	submitted, errs *atomic.Int64, first *firstError, tick func()) {
	due := make(chan int, buffer)
	var wg sync.WaitGroup
	for s := 0; s < submitters; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range due {
				if tr.now() > cutoff || ctx.Err() != nil {
					continue // the window closed before a submitter was free
				}
				if err := sys.Enqueue(ctx, q); err != nil {
					errs.Add(1)
					first.set(err)
					continue
				}
				tr.acked[q] = tr.now()
				submitted.Add(1)
			}
		}()
	}
	for i := 0; i < total && ctx.Err() == nil; {
		now := tr.now()
		for i < total && tr.sched[warm+i] <= now {
			due <- warm + i
			i++
		}
		if tick != nil {
			tick()
		}
		if i < total {
			if wait := time.Duration(tr.sched[warm+i] - now); wait > 0 {
				time.Sleep(min(wait, time.Millisecond))
			}
		}
	}
	close(due)
	wg.Wait()
}

// warmUp submits tasks [0, n) one per call and waits until tr has counted
// n completions: the workers are connected and taking tasks.
func warmUp(ctx context.Context, env *Env, sys System, tr *tracker, n int) error {
	env.prog.trackCount("warming up", &tr.count, int64(n))
	for q := 0; q < n; q++ {
		if err := sys.Enqueue(ctx, q); err != nil {
			return fmt.Errorf("warm-up submit: %w", err)
		}
	}
	wdl := time.Now().Add(60 * time.Second)
	for tr.count.Load() < int64(n) {
		if time.Now().After(wdl) {
			return fmt.Errorf("warm-up: %d of %d tasks completed within 60s", tr.count.Load(), n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// runW4 submits one root task whose handler spawns the children, and a
// continuation that depends on all of them, with its completion; the time
// runs from the submit call to the system's wait call reporting the
// continuation succeeded. Along the way: the root's submit acknowledged,
// its completion acknowledged (the children are committed with it), and a
// handler beginning the first child.
func runW4(ctx context.Context, env *Env, sys System, res *CellResult) error {
	fo, ok := sys.(FanOuter)
	if !ok {
		return fmt.Errorf("%s has no fan-out", sys.Name())
	}
	n := env.opts.w4Children
	w := &W4Result{Children: n}
	res.W4 = w
	const warm = 200
	root := warm
	tr := newTracker(warm + 1)
	var childRuns, firstChild atomic.Int64
	type thenRun struct {
		id   string
		deps int
	}
	thenc := make(chan thenRun, 1)
	h := tr.hooks()
	h.Child = func() {
		childRuns.Add(1)
		firstChild.CompareAndSwap(0, tr.now())
	}
	h.Then = func(id string, deps int) {
		select {
		case thenc <- thenRun{id, deps}:
		default:
		}
	}
	if err := sys.StartWorkers(ctx, h); err != nil {
		return err
	}
	if err := warmUp(ctx, env, sys, tr, warm); err != nil {
		return err
	}

	env.prog.track("fan-out: children run", &childRuns, int64(n))
	cpu0, self0 := treeCPU(sys.ServerPIDs()), selfCPU()
	waitProf := maybeProfile(ctx, env, sys, res)
	defer func() {
		if err := waitProf(); err != nil {
			env.prog.note("%v", err)
		}
	}()
	t0 := tr.now()
	id, err := fo.SubmitFanOut(ctx, root, n)
	if err != nil {
		return fmt.Errorf("submitting the root: %w", err)
	}
	w.SubmitAckMs = float64(tr.now()-t0) / 1e6
	// A root that fails (its children refused, say) ends the wait at once.
	rootDone := make(chan error, 1)
	go func() { rootDone <- fo.WaitSucceeded(ctx, id) }()
	rootc := rootDone
	var then thenRun
	for got := false; !got; {
		select {
		case then = <-thenc:
			got = true
		case err := <-rootc:
			if err != nil {
				return fmt.Errorf("root: %w", err)
			}
			rootc = nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for the continuation to start: %d of %d children run: %w", childRuns.Load(), n, ctx.Err())
		}
	}
	if err := fo.WaitSucceeded(ctx, then.id); err != nil {
		return fmt.Errorf("continuation: %w", err)
	}
	end := tr.now()
	res.ServerCPUs = treeCPU(sys.ServerPIDs()) - cpu0
	res.ClientCPUs = selfCPU() - self0
	w.Seconds = float64(end-t0) / 1e9
	w.ChildrenRate = float64(n) / w.Seconds
	if d := atomic.LoadInt64(&tr.done[root]); d > 0 {
		w.SpawnCommitS = float64(d-t0) / 1e9
	}
	if f := firstChild.Load(); f > 0 {
		w.FirstChildS = float64(f-t0) / 1e9
	}
	w.ChildRuns = childRuns.Load()
	w.ThenDeps = then.deps
	serr := sys.StopWorkers()
	vctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, verr := sys.Completed(vctx)
	w.StoreCompleted = got
	want := int64(warm + n + 2) // warm-up, children, root and continuation
	switch {
	case verr != nil:
		return fmt.Errorf("reading the completed count: %w", verr)
	case got < want:
		return fmt.Errorf("the store reports %d completed of %d after the fan-out", got, want)
	case then.deps != n:
		return fmt.Errorf("the continuation's grant carried %d dependencies, not %d", then.deps, n)
	}
	return serr
}

// percentile returns the q-quantile (nearest rank) of vs; +Inf values sort
// last. It sorts vs.
func percentile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	sort.Float64s(vs)
	k := int(math.Ceil(q*float64(len(vs)))) - 1
	return vs[min(max(k, 0), len(vs)-1)]
}

// summary is the one-line result printed when a cell ends.
func (r CellResult) summary() string {
	var s string
	switch {
	case r.W1 != nil && r.W1.Rate > 0:
		s = fmt.Sprintf("%s tasks/s (%d tasks in %.1fs; pre-insert %s tasks/s); server CPU %.1fs", fmtNum(jf(r.W1.Rate)), r.W1.Tasks, r.W1.Seconds, fmtNum(jf(r.W1.PreInsertRate)), r.ServerCPUs)
		if r.W1.OrderingKeys > 0 {
			s += fmt.Sprintf("; %d ordering keys", r.W1.OrderingKeys)
		}
	case r.W2 != nil && r.W2.SingleRate > 0:
		s = fmt.Sprintf("single %s tasks/s (p50 %s ms, p99 %s ms)", fmtNum(jf(r.W2.SingleRate)), fmtMs(jf(r.W2.SingleP50ms)), fmtMs(jf(r.W2.SingleP99ms)))
		if r.W2.BatchRate > 0 {
			s += fmt.Sprintf(", batched %s tasks/s", fmtNum(jf(r.W2.BatchRate)))
		}
	case r.W3 != nil:
		s = fmt.Sprintf("completed %s/s in window, p50 %s ms, p99 %s ms, %d of %d never completed (submit acked p50 %s / p99 %s ms, handler started p50 %s / p99 %s ms)",
			fmtNum(jf(r.W3.InWindowRate)), fmtMs(r.W3.P50ms), fmtMs(r.W3.P99ms), r.W3.Offered-r.W3.Completed, r.W3.Offered,
			fmtMs(jf(r.W3.SubmitP50ms)), fmtMs(jf(r.W3.SubmitP99ms)), fmtMs(jf(r.W3.StartP50ms)), fmtMs(jf(r.W3.StartP99ms)))
	case r.W4 != nil && r.W4.Seconds > 0:
		s = fmt.Sprintf("%d children and the continuation in %.2fs (%s children/s); submit acked %s ms, spawn committed %.2fs, first child started %.2fs; server CPU %.1fs",
			r.W4.Children, r.W4.Seconds, fmtNum(jf(r.W4.ChildrenRate)), fmtMs(jf(r.W4.SubmitAckMs)), r.W4.SpawnCommitS, r.W4.FirstChildS, r.ServerCPUs)
	case r.Scale != nil:
		s = r.Scale.summary()
	case r.Failover != nil && len(r.Failover.Trials) > 0:
		s = r.Failover.line()
	case r.Raft != nil && r.Raft.Rate > 0:
		s = fmt.Sprintf("%s applies/s (p50 %s ms, p99 %s ms)", fmtNum(jf(r.Raft.Rate)), fmtMs(jf(r.Raft.P50ms)), fmtMs(jf(r.Raft.P99ms)))
	}
	if r.Error != "" {
		if s != "" {
			s += "; "
		}
		s += "ERROR: " + r.Error
	}
	return s
}
