package engine_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/engine/enginetest"
	"github.com/cronoq/cronoq/fsm"
)

// benchBatch is the size of one submit, one poll's slots and one
// completion hand-over: what a client's EnqueueMany and a busy worker send.
const benchBatch = 1000

// benchPayload is the payload of every benchmark task.
var benchPayload = make([]byte, 64)

// benchEngine is an engine at epoch 1 over an in-memory log that applies
// every entry to an fsm.State and keeps no copy of it (a raft log keeps its
// entries on disk).
type benchEngine struct {
	state *fsm.State
	log   *enginetest.Log
	eng   *engine.Engine
}

// startBenchEngine starts one; a zero retention keeps ended tasks for the
// core's default (24h).
func startBenchEngine(b *testing.B, ctx context.Context, maxPending int, retention time.Duration) *benchEngine {
	b.Helper()
	state := fsm.New()
	log := enginetest.New(state)
	log.Discard()
	if err := log.BumpEpoch(ctx, 1, "n1"); err != nil {
		log.Close()
		b.Fatalf("starting the log: %v", err)
	}
	c, err := core.New(core.Config{Seed: 1, Retention: retention, DefaultPool: core.PoolConfig{Bounds: core.Bounds{MaxPending: maxPending}}}, 1, time.Now())
	if err != nil {
		log.Close()
		b.Fatalf("building the core: %v", err)
	}
	eng := engine.New(engine.Config{}, c, log)
	if err := eng.Start(ctx); err != nil {
		log.Close()
		b.Fatalf("starting the engine: %v", err)
	}
	return &benchEngine{state: state, log: log, eng: eng}
}

func (be *benchEngine) stop(b *testing.B) {
	b.Helper()
	err := be.eng.Stop(context.Background())
	be.log.Close()
	if err != nil {
		b.Fatalf("stopping the engine: %v", err)
	}
}

// submitBatch submits n tasks of pool "p" in one SubmitMany call and fails
// on any refusal.
func submitBatch(ctx context.Context, eng *engine.Engine, n int) error {
	specs := make([]core.Spec, n)
	for i := range specs {
		specs[i] = core.Spec{Template: fsm.Template{Pool: "p", Kind: "k", Payload: benchPayload}}
	}
	res, err := eng.Submit(ctx, core.SubmitMany, specs)
	if err != nil {
		return fmt.Errorf("submitting %d tasks: %w", n, err)
	}
	for i, err := range res.Errs {
		if err != nil {
			return fmt.Errorf("submitting task %d of %d: %w", i, n, err)
		}
	}
	return nil
}

// BenchmarkLifecycle measures the throughput of whole task lifecycles on
// the leader without a network or a disk: submit, dispatch and successful
// completion, each through the engine's driver and the core, encoded as
// commit-batch log entries, appended to the in-memory log and applied to the
// FSM, every reply released only once its entry is applied. One op is one
// task. A client submits batches of 1,000 (SubmitMany, a 64-byte payload
// each) while, at the same time, one worker polls with 1,000 slots and
// completes what it was granted in one CompleteMany, as the SDK does, so
// that the engine commits submits, leases and completions together. Ended
// tasks stay retained, as they do in a cluster. It reports tasks/s; run it
// with -benchtime 200000x or more so that group commit reaches its steady
// state.
func BenchmarkLifecycle(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	be := startBenchEngine(b, ctx, 1<<30, 0)
	defer be.stop(b)

	total := b.N
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := runLifecycles(ctx, cancel, be, total, nil); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	checkEnded(b, ctx, be, total)
	b.ReportMetric(float64(total)/elapsed.Seconds(), "tasks/s")
}

// runLifecycles runs total task lifecycles through be: a client submits
// them in SubmitMany calls of 1,000 while, at the same time, one worker
// polls with 1,000 slots and completes what it was granted in one
// CompleteMany, each attempt succeeding with output. The first error
// cancels ctx (through cancel) and is returned.
func runLifecycles(ctx context.Context, cancel context.CancelFunc, be *benchEngine, total int, output []byte) error {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { // the client
		defer wg.Done()
		for left := total; left > 0; {
			n := min(left, benchBatch)
			if err := submitBatch(ctx, be.eng, n); err != nil {
				errs <- err
				cancel()
				return
			}
			left -= n
		}
	}()
	go func() { // the worker
		defer wg.Done()
		cs := make([]engine.Completion, 0, benchBatch)
		for done := 0; done < total; {
			grants, err := be.eng.Poll(ctx, core.Offer{Worker: "w", Pool: "p", Slots: benchBatch})
			if err != nil {
				errs <- fmt.Errorf("polling after %d tasks: %w", done, err)
				cancel()
				return
			}
			cs = cs[:0]
			for _, g := range grants {
				cs = append(cs, engine.Completion{Lease: g.Lease, Outcome: core.Outcome{Kind: core.OutcomeSuccess, Output: output}})
			}
			for i, err := range be.eng.CompleteMany(ctx, cs) {
				if err != nil {
					errs <- fmt.Errorf("completing lease %d: %w", cs[i].Lease, err)
					cancel()
					return
				}
			}
			done += len(grants)
		}
	}()
	wg.Wait()
	close(errs)
	return <-errs // nil when none was sent
}

// checkEnded fails b unless every one of total tasks ended succeeded, in
// the core and in the FSM: the lifecycles ran for real.
func checkEnded(b *testing.B, ctx context.Context, be *benchEngine, total int) {
	b.Helper()
	if st, err := be.eng.CoreStats(ctx); err != nil {
		b.Fatalf("reading the core's stats: %v", err)
	} else if st.Queued != 0 || st.Running != 0 {
		b.Fatalf("after %d lifecycles %d tasks are queued and %d running", total, st.Queued, st.Running)
	}
	if got := fsmCount(be.state, fsm.StatusSucceeded); got != total {
		b.Fatalf("%d tasks succeeded in the FSM, want %d", got, total)
	}
}

// fsmCount is the number of tasks in the FSM with the given status.
func fsmCount(state *fsm.State, status fsm.Status) int {
	n := 0
	for _, pc := range state.Counts() {
		n += int(pc.ByStatus[status])
	}
	return n
}

// pendingTasks is how many tasks BenchmarkPending1M queues: 1,000,000,
// 100,000 with -short, or CRONOQ_BENCH_PENDING.
func pendingTasks(b *testing.B) int { return benchTasks(b, "CRONOQ_BENCH_PENDING") }

// benchTasks is how many tasks a memory benchmark keeps: the number in the
// environment variable env if set, else 100,000 with -short, else
// 1,000,000.
func benchTasks(b *testing.B, env string) int {
	if s := os.Getenv(env); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number of tasks", env, s)
		}
		return n
	}
	if testing.Short() {
		return 100_000
	}
	return 1_000_000
}

// liveHeap is the heap in use by reachable objects after two full
// collections (the second one frees what the first one's finalizers
// released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// writeHeapProfile writes the heap profile as it is now (in use: what the
// queued tasks hold, which -memprofile, written once everything is freed,
// cannot show) to path.
func writeHeapProfile(b *testing.B, path string) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatalf("creating the heap profile: %v", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		b.Fatalf("writing the heap profile %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		b.Fatalf("writing the heap profile %s: %v", path, err)
	}
}

// heldPerTask measures what the n tasks in place in be hold, with the
// live heap before the first submit: perTask in engine and FSM, fsmPerTask
// in the FSM alone once be is stopped and dropped (what a follower holds),
// each less excluded bytes per task, and growth, the whole heap growth.
// CRONOQ_BENCH_HEAPPROFILE=<file> writes the heap profile with every task
// in place.
func heldPerTask(b *testing.B, be *benchEngine, cancel context.CancelFunc, before uint64, n int, excluded float64) (perTask, fsmPerTask, growth float64) {
	b.Helper()
	after := liveHeap()
	if path := os.Getenv("CRONOQ_BENCH_HEAPPROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
	growth = float64(after) - float64(before)
	perTask = growth/float64(n) - excluded
	state := be.state
	be.stop(b)
	cancel()
	fsmOnly := liveHeap()
	runtime.KeepAlive(state)
	fsmPerTask = (float64(fsmOnly)-float64(before))/float64(n) - excluded
	return perTask, fsmPerTask, growth
}

// BenchmarkPending1M measures the memory the leader holds per pending task:
// the engine's core plus the FSM state, payload excluded. Each op starts a
// fresh engine over the in-memory log (which keeps no copy of its entries),
// submits 1,000,000 tasks with a 64-byte payload in SubmitMany calls of
// 1,000, as a client's EnqueueMany does, so that each is queued in the core
// and inserted into the FSM by applying the commit batches, and compares
// the live heap (HeapAlloc after two collections) with all of them queued
// against the heap before the first submit. It reports bytes/task with the
// payload subtracted once per task (the FSM holds it; the core does not),
// fsm-bytes/task, the same once the engine and its core are dropped and
// only the FSM is left (what a follower holds), and heap-MB, the whole
// growth. Run it with -benchtime 1x; -short or
// CRONOQ_BENCH_PENDING=<n> queue fewer tasks, and
// CRONOQ_BENCH_HEAPPROFILE=<file> writes the heap profile with every task
// queued.
func BenchmarkPending1M(b *testing.B) {
	n := pendingTasks(b)
	var perTask, fsmPerTask, growth float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx, cancel := context.WithCancel(context.Background())
		be := startBenchEngine(b, ctx, 2*n, 0)
		before := liveHeap()
		b.StartTimer()

		for left := n; left > 0; {
			k := min(left, benchBatch)
			if err := submitBatch(ctx, be.eng, k); err != nil {
				b.Fatal(err)
			}
			left -= k
		}

		b.StopTimer()
		st, err := be.eng.CoreStats(ctx)
		if err != nil {
			b.Fatalf("reading the core's stats: %v", err)
		}
		if st.Queued != n {
			b.Fatalf("%d tasks queued in the core, want %d", st.Queued, n)
		}
		if got := fsmCount(be.state, fsm.StatusQueued); got != n {
			b.Fatalf("%d tasks queued in the FSM, want %d", got, n)
		}
		perTask, fsmPerTask, growth = heldPerTask(b, be, cancel, before, n, float64(len(benchPayload)))
		b.StartTimer()
	}
	b.ReportMetric(perTask, "bytes/task")
	b.ReportMetric(fsmPerTask, "fsm-bytes/task")
	b.ReportMetric(growth/(1<<20), "heap-MB")
}

// benchOutput is the output of every task of BenchmarkRetained.
var benchOutput = make([]byte, 64)

// BenchmarkRetained measures the memory the leader holds per ended task
// kept for its retention: the engine's core plus the FSM state, payload and
// output excluded. Each op starts a fresh engine (retention 24h) over the
// in-memory log (which keeps no copy of its entries) and runs 1,000,000
// lifecycles as BenchmarkLifecycle does, each task with a 64-byte payload
// and succeeding with a 64-byte output, and compares the live heap
// (HeapAlloc after two collections) with all of them ended and retained
// against the heap before the first submit. It reports bytes/task with the
// payload and the output subtracted once per task (the FSM holds them; the
// core does not), fsm-bytes/task, the same once the engine and its core are
// dropped and only the FSM is left (what a follower holds), and heap-MB,
// the whole growth. Run it with -benchtime 1x; -short or
// CRONOQ_BENCH_RETAINED=<n> run fewer tasks, and
// CRONOQ_BENCH_HEAPPROFILE=<file> writes the heap profile with every task
// retained.
func BenchmarkRetained(b *testing.B) {
	n := benchTasks(b, "CRONOQ_BENCH_RETAINED")
	excluded := float64(len(benchPayload) + len(benchOutput))
	var perTask, fsmPerTask, growth float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx, cancel := context.WithCancel(context.Background())
		be := startBenchEngine(b, ctx, 2*n, 24*time.Hour)
		before := liveHeap()
		b.StartTimer()

		if err := runLifecycles(ctx, cancel, be, n, benchOutput); err != nil {
			b.Fatal(err)
		}

		b.StopTimer()
		checkEnded(b, ctx, be, n)
		st, err := be.eng.CoreStats(ctx)
		if err != nil {
			b.Fatalf("reading the core's stats: %v", err)
		}
		if st.Tasks != n {
			b.Fatalf("the core knows %d tasks, want %d retained", st.Tasks, n)
		}
		if got := fsmCount(be.state, fsm.StatusSucceeded); got != n {
			b.Fatalf("%d tasks succeeded in the FSM, want %d", got, n)
		}
		perTask, fsmPerTask, growth = heldPerTask(b, be, cancel, before, n, excluded)
		b.StartTimer()
	}
	b.ReportMetric(perTask, "bytes/task")
	b.ReportMetric(fsmPerTask, "fsm-bytes/task")
	b.ReportMetric(growth/(1<<20), "heap-MB")
}
