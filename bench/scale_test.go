package main

import (
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSizes(t *testing.T) {
	got, err := parseSizes(" 1_000_000, 100000,10000000,100000 ")
	require.NoError(t, err)
	require.Equal(t, []int{100000, 1000000, 10000000}, got)
	for _, bad := range []string{"", " , ", "100k", "0", "-5", "1e6"} {
		_, err := parseSizes(bad)
		require.Error(t, err, bad)
	}
}

func TestScaleFlags(t *testing.T) {
	o, err := parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, []string{"w1", "w2", "w3", "w4", "scale", "failover"}, o.workloads)
	require.Equal(t, []int{100000, 1000000, 10000000}, o.scaleSizes)

	o, err = parseFlags([]string{"-workloads", "scale", "-scale-sizes", "100000,20000"})
	require.NoError(t, err)
	require.Equal(t, []int{20000, 100000}, o.scaleSizes)

	_, err = parseFlags([]string{"-scale-sizes", "lots"})
	require.ErrorContains(t, err, `bad size "lots" in -scale-sizes`)
	o, err = parseFlags([]string{"-quick"})
	require.NoError(t, err)
	require.Equal(t, []string{"w1"}, o.workloads)
}

func TestScalePlanRunsOnceOnCronoqOnly(t *testing.T) {
	o := options{runs: 2, systems: []string{"cronoq", "river", "cronoq-secure", "raft"}, workloads: []string{"scale"}, scaleSizes: []int{20000, 100000}}
	require.Equal(t, []cell{
		{system: "raft", workload: "raft", run: 1},
		{system: "cronoq", workload: "scale", rate: 20000, run: 1},
		{system: "cronoq", workload: "scale", rate: 100000, run: 1},
		{system: "raft", workload: "raft", run: 2},
	}, plan(o))
	require.Equal(t, []Skip{
		{System: "river", Workload: "scale", Reason: "the scale curves are measured on cronoq only"},
		{System: "cronoq-secure", Workload: "scale", Reason: "the scale curves are measured on cronoq only"},
	}, skipped(o))
	require.Equal(t, "scale 100,000 retained tasks cronoq", cell{system: "cronoq", workload: "scale", rate: 100000, run: 1}.title(o))
}

func TestCatchUpSize(t *testing.T) {
	require.Equal(t, 1000000, catchUpSize([]int{100000, 1000000, 10000000}))
	require.Equal(t, 100000, catchUpSize([]int{20000, 100000}))
	require.Equal(t, 100000, catchUpSize([]int{20000, 100000, 5000000}))
	require.Equal(t, 2000000, catchUpSize([]int{5000000, 2000000}))
	require.Equal(t, 0, catchUpSize(nil))
}

func TestParseMeminfo(t *testing.T) {
	mi, err := parseMeminfo(strings.NewReader("MemTotal:       24683568 kB\nMemFree:         1000 kB\nMemAvailable:   21176348 kB\nHugePages_Total:       0\n"))
	require.NoError(t, err)
	require.Equal(t, meminfo{Total: 24683568 * 1024, Available: 21176348 * 1024}, mi)
	_, err = parseMeminfo(strings.NewReader("MemTotal: 10 kB\n"))
	require.Error(t, err)
}

func TestMemoryProjection(t *testing.T) {
	_, ok := projectHeap(nil, 1000)
	require.False(t, ok)
	_, ok = projectHeap(&ScaleResult{Tasks: 100, NotRun: "not run: x"}, 1000)
	require.False(t, ok)

	prev := &ScaleResult{
		Tasks: 100000,
		Empty: []NodeMem{{HeapAlloc: 10e6}, {HeapAlloc: 10e6}, {HeapAlloc: 20e6}},
		// The larger follower's bytes count for both followers.
		LeaderBytesPerTask: 1500, FollowerBytesPerTask: 800, FollowerMaxBytesPerTask: 900,
	}
	p, ok := projectHeap(prev, 10_000_000)
	require.True(t, ok)
	require.InDelta(t, 40e6+10e6*(1500+2*900), p, 1)

	// 33 GB does not fit in 80% of 24 GB; 10 GB does.
	require.Equal(t, "not run: projected heap of 3 nodes 33.0 GB > 19.2 GB available (80% of 24.0 GB)", fitReason("heap of 3 nodes", p, 24e9))
	require.Empty(t, fitReason("heap of 3 nodes", 10e9, 24e9))
	require.Empty(t, fitReason("heap of 3 nodes", 19.2e9, 24e9))

	d, ok := projectDisk(&ScaleResult{Tasks: 100000, DiskBytes: 500e6}, 1000000)
	require.True(t, ok)
	require.InDelta(t, 5e9, d, 1)
	_, ok = projectDisk(&ScaleResult{Tasks: 100000}, 1000000)
	require.False(t, ok)

	args := scaleAgentArgs(options{}, 6<<30)
	require.Equal(t, []string{"-raft-trailing-logs", "1024", "-memory-limit", "6144MiB", "-enable-debug"}, args)
	require.NotContains(t, scaleAgentArgs(options{profile: time.Second}, 6<<30), "-enable-debug")
}

func TestSeriesSum(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# TYPE go_memstats_heap_alloc_bytes gauge
go_memstats_heap_alloc_bytes 1.234567e+09
go_memstats_heap_alloc_bytes_total 5
cronoq_raft_rpc_installSnapshot{quantile="0.5"} 1200.5
cronoq_raft_rpc_installSnapshot_count{peer="n1"} 1
cronoq_raft_rpc_installSnapshot_count{peer="n3"} 2
`))
	require.NoError(t, err)
	v, ok := seriesSum(m, "go_memstats_heap_alloc_bytes")
	require.True(t, ok)
	require.Equal(t, 1.234567e9, v)
	v, ok = seriesSum(m, "cronoq_raft_rpc_installSnapshot_count")
	require.True(t, ok)
	require.Equal(t, 3.0, v)
	_, ok = seriesSum(m, "process_resident_memory_bytes")
	require.False(t, ok)
}

func TestFillWindowed(t *testing.T) {
	// The workers complete a chunk only once it is submitted; the fill
	// never lets more than the window be pending.
	var done atomic.Int64
	var submitted, maxPending int64
	var calls [][2]int
	err := fillWindowed(context.Background(), 23, 5, 10, &done, func(lo, hi int) error {
		calls = append(calls, [2]int{lo, hi})
		submitted = int64(hi)
		maxPending = max(maxPending, submitted-done.Load())
		go func() { done.Add(int64(hi - lo)) }()
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, [][2]int{{0, 5}, {5, 10}, {10, 15}, {15, 20}, {20, 23}}, calls)
	require.LessOrEqual(t, maxPending, int64(10+5))

	// Nothing completes: it stops at the window until the context ends.
	var none atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls = nil
	err = fillWindowed(ctx, 100, 5, 10, &none, func(lo, hi int) error {
		calls = append(calls, [2]int{lo, hi})
		return nil
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, calls, 3) // 0, 5 and 10 pending at most before each
	require.ErrorContains(t, fillWindowed(context.Background(), 10, 5, 10, &none, func(int, int) error { return errors.New("refused") }), "refused")
}

func TestPerTask(t *testing.T) {
	empty := []NodeMem{{Node: "n1", HeapAlloc: 10e6}, {Node: "n2", HeapAlloc: 12e6, Leader: true}, {Node: "n3", HeapAlloc: 10e6}}
	filled := []NodeMem{{Node: "n1", HeapAlloc: 110e6}, {Node: "n2", HeapAlloc: 212e6, Leader: true}, {Node: "n3", HeapAlloc: 130e6}}
	l, f, fmax := perTask(empty, filled, 100000)
	require.InDelta(t, 2000, l, 1e-9)
	require.InDelta(t, 1100, f, 1e-9)
	require.InDelta(t, 1200, fmax, 1e-9)
}

func scaleReport() *Report {
	return &Report{
		Options: map[string]any{"w1_tasks": 100000, "batch": 1000, "w2_batch_callers": 4, "scale_sizes": []int{100000, 1000000, 10000000}},
		Skipped: []Skip{{System: "river", Workload: "scale", Reason: "the scale curves are measured on cronoq only"}},
		Cells: []CellResult{
			{System: "cronoq", Workload: "scale", Rate: 10000000, Run: 1, Copies: 3, Scale: &ScaleResult{Tasks: 10000000,
				NotRun: "not run: projected heap of 3 nodes 38.0 GB > 19.0 GB available (80% of 23.8 GB)"}},
			{System: "cronoq", Workload: "scale", Rate: 100000, Run: 1, Copies: 3, Scale: &ScaleResult{Tasks: 100000,
				FillSeconds: 4, FillRate: 25000, SubmitSeconds: 3, SubmitRate: 33333, StoreEnded: 100000,
				Empty:              []NodeMem{{Node: "n1", Leader: true, HeapAlloc: 10e6}, {Node: "n2", HeapAlloc: 8e6}, {Node: "n3", HeapAlloc: 8e6}},
				Filled:             []NodeMem{{Node: "n1", Leader: true, HeapAlloc: 210e6}, {Node: "n2", HeapAlloc: 108e6}, {Node: "n3", HeapAlloc: 118e6}},
				LeaderBytesPerTask: 2000, FollowerBytesPerTask: 1050, FollowerMaxBytesPerTask: 1100,
				W1:            &W1Result{Tasks: 100000, Seconds: 4, Rate: 25000},
				SnapshotBytes: 60e6, SnapshotSeconds: 1.5, SnapshotIndex: 900,
				RestoreSeconds: 2.25, RestoreAllSeconds: 3.5, RestoredTasks: 200000, DiskBytes: 400e6}},
			{System: "cronoq", Workload: "scale", Rate: 1000000, Run: 1, Copies: 3, Error: "catch-up: n2 not caught up", Scale: &ScaleResult{Tasks: 1000000,
				FillRate: 20000, LeaderBytesPerTask: 1900, FollowerBytesPerTask: 1000,
				Filled:  []NodeMem{{Node: "n1", Leader: true}, {Node: "n2"}, {Node: "n3"}},
				W1:      &W1Result{Tasks: 100000, Seconds: 5, Rate: 20000},
				CatchUp: &CatchUpResult{Node: "n2", Seconds: 12.5, InstallSnapshots: 1, HealthSeconds: 1}}},
		},
	}
}

func TestRenderScale(t *testing.T) {
	rep := scaleReport()
	md := renderTables(rep)
	require.Contains(t, md, "## Scale — cronoq holding N retained ended tasks")
	require.Contains(t, md, "![scale curves](scale.svg)")
	// Rows by size, ascending, whatever the order of the cells.
	i100k := strings.Index(md, "| 100,000 | 25,000 | **2,000** | **1,050** | **25,000** | 60.0 MB | 1.50 | 2.25 / 3.50 | not timed at this size |")
	i1m := strings.Index(md, "| 1,000,000 | 20,000 | **1,900** | **1,000** | **20,000** | — | — | — | 12.50 (by snapshot) |")
	i10m := strings.Index(md, "| 10,000,000 | not run: projected heap of 3 nodes 38.0 GB > 19.0 GB available (80% of 23.8 GB) |")
	require.True(t, i100k >= 0 && i1m > i100k && i10m > i1m, md)
	require.Contains(t, md, "**1,000,000 retained tasks** — failed: catch-up: n2 not caught up")
	require.Contains(t, md, "- n1 (leader): heap 10.0 MB → 210.0 MB after the fill")
	require.Contains(t, md, "heap per task without the 256-byte payload: leader 1,744 B, followers 794 B (largest 844 B)")
	require.Contains(t, md, "restored (200,000 tasks) in 2.25 s, every node at the restored index after 3.50 s")
	require.Contains(t, md, "*caught up* (at 1,000,000 only)")
	require.Contains(t, md, "Not run on river: the scale curves are measured on cronoq only.")

	require.Empty(t, renderScale(&Report{}))
	require.Contains(t, rep.Cells[0].summary(), "10,000,000 tasks: not run: projected heap")
	require.Contains(t, rep.Cells[1].summary(), "100,000 tasks: fill 25,000 tasks/s; heap per task leader 2,000 B, followers 1,050 B; W1 25,000 tasks/s; snapshot 60.0 MB in 1.50s; restore 2.25s (every node 3.50s)")
	require.Contains(t, rep.Cells[2].summary(), "catch-up of a wiped follower 12.50s (by snapshot)")
	require.Contains(t, (&CatchUpResult{Seconds: 1}).how(), "by replaying the log")
}

func TestScaleChart(t *testing.T) {
	svg := renderScaleChart(scaleReport())
	// It is well-formed XML with both panels, the points measured and the
	// size not run marked.
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
	}
	require.Contains(t, svg, "Throughput on top of N retained tasks")
	require.Contains(t, svg, "Heap per retained task")
	require.Contains(t, svg, ">25,000<")
	require.Contains(t, svg, ">2,000<")
	require.Contains(t, svg, "not run")
	require.Equal(t, 2+2, strings.Count(svg, "<polyline"))

	dir := t.TempDir()
	rep := scaleReport()
	paths, err := writeReport(rep, dir, dir)
	require.NoError(t, err)
	require.Contains(t, paths, filepath.Join(dir, "scale.svg"))
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"leader_heap_bytes_per_task": 2000`)

	paths, err = writeReport(&Report{Options: map[string]any{}}, dir, dir)
	require.NoError(t, err)
	require.NotContains(t, paths, filepath.Join(dir, "scale.svg"))
}

func TestScaleSizeNotRunWhenItDoesNotFit(t *testing.T) {
	mi, err := readMeminfo()
	require.NoError(t, err)
	// A previous size whose bytes per task put this one far over the
	// machine's memory: nothing is started.
	env := &Env{opts: options{scaleSizes: []int{1000, 1000000}}, scalePrev: &ScaleResult{
		Tasks: 1000, Empty: []NodeMem{{HeapAlloc: 1}, {HeapAlloc: 1}, {HeapAlloc: 1}},
		LeaderBytesPerTask: float64(mi.Total), FollowerBytesPerTask: 1, FollowerMaxBytesPerTask: 1,
	}}
	var res CellResult
	runScaleCell(context.Background(), env, cell{system: "cronoq", workload: "scale", rate: 1000000, run: 1}, t.TempDir(), &res)
	require.Empty(t, res.Error)
	require.Contains(t, res.Scale.NotRun, "not run: projected heap of 3 nodes ")
	require.Contains(t, res.Scale.NotRun, "available (80% of ")
	require.Equal(t, mi.Total, res.Scale.MemTotal)

	// A size stopped by the watchdog stops the larger ones.
	env.scalePrev = &ScaleResult{Tasks: 1000, MemoryStop: "memory low: MemAvailable fell to 2.0 GB, under 2.5 GB (10% of the machine's memory)"}
	res = CellResult{}
	runScaleCell(context.Background(), env, cell{system: "cronoq", workload: "scale", rate: 1000000, run: 1}, t.TempDir(), &res)
	require.Equal(t, "not run: the 1,000-task size was stopped (memory low: MemAvailable fell to 2.0 GB, under 2.5 GB (10% of the machine's memory))", res.Scale.NotRun)
}

func TestMemWatchStopsUnderTheFloor(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		memWatch(ctx, cancel, 1<<62, time.Millisecond)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not stop the cell")
	}
	require.ErrorIs(t, context.Cause(ctx), errMemoryLow)
	require.Contains(t, context.Cause(ctx).Error(), "memory low: MemAvailable fell to ")

	// Above the floor it only returns with its context.
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		memWatch(ctx2, cancel2, 1, time.Millisecond)
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, context.Cause(ctx2))
	cancel2(nil)
	<-done2
}

// TestDecades checks the plot's log10 range: whole decades around the
// values, one at least, values under 1 taken as 1.
func TestDecades(t *testing.T) {
	for _, tc := range []struct {
		vs     []float64
		lo, hi float64
	}{
		{nil, 0, 1},
		{[]float64{100_000}, 5, 6},
		{[]float64{100_000, 1_000_000, 10_000_000}, 5, 7},
		{[]float64{20_000, 100_000}, 4, 5},
		{[]float64{0.5, 30}, 0, 2},
	} {
		lo, hi := decades(tc.vs)
		require.Equal(t, tc.lo, lo, "%v", tc.vs)
		require.Equal(t, tc.hi, hi, "%v", tc.vs)
	}
}
