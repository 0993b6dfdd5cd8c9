package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The long haul offers a steady rate to one cronoq cluster for a long time
// (an hour by default) with a short retention, and watches what should
// stay flat: each node's RSS and heap, its garbage collector's pauses and
// the latency of the tasks, minute by minute. Twice during the run one
// follower is stopped long enough for the leader to snapshot and compact
// its log past it, then started again, so that it is caught up by an
// installed snapshot while the load goes on.

// LongHaulResult is everything written to longhaul.json.
type LongHaulResult struct {
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished"`
	Interrupted bool      `json:"interrupted"`
	DurationS   float64   `json:"duration_s"`
	Rate        int       `json:"rate"`
	RetentionS  float64   `json:"retention_s"`
	// MemoryLimitMiB is each agent's -memory-limit.
	MemoryLimitMiB int64  `json:"memory_limit_mib"`
	Config         string `json:"config"`
	Offered        int    `json:"offered"`
	Submitted      int    `json:"submitted"`
	SubmitErrors   int    `json:"submit_errors"`
	FirstError     string `json:"first_error,omitempty"`
	NotSubmitted   int    `json:"not_submitted"`
	Completed      int    `json:"completed"`
	// Lost counts acknowledged submits whose completion was not seen by
	// the end of the drain (lhDrain after the offer, or the interruption):
	// late, or lost; a run that kept up has none.
	Lost       int                `json:"lost"`
	Duplicates int64              `json:"duplicates"`
	P50ms      jf                 `json:"p50_ms"`
	P99ms      jf                 `json:"p99_ms"`
	MaxMs      jf                 `json:"max_ms"`
	Windows    []LongHaulWindow   `json:"windows"`
	Samples    []LongHaulSample   `json:"samples"`
	Outages    []LongHaulOutage   `json:"outages"`
	Nodes      []LongHaulNodeStat `json:"nodes"`
	Machine    MachineInfo        `json:"machine"`
	Fsync      FsyncResult        `json:"fsync"`
}

// LongHaulWindow is the latency of the tasks due within one window
// (a minute), from the due time to the durable completion.
type LongHaulWindow struct {
	StartS    float64 `json:"start_s"`
	Due       int     `json:"due"`
	Completed int     `json:"completed"`
	P50ms     jf      `json:"p50_ms"`
	P99ms     jf      `json:"p99_ms"`
	MaxMs     jf      `json:"max_ms"`
}

// LongHaulSample is one look at every node.
type LongHaulSample struct {
	T float64 `json:"t_s"`
	// Load is the machine's one-minute load average: everything on it
	// shares its cores, the benchmark's clients included.
	Load  float64          `json:"loadavg_1m"`
	Nodes []NodeHaulSample `json:"nodes"`
}

// NodeHaulSample is one node at one sample; a node that is down, or did not
// answer, has Up false and zeros.
type NodeHaulSample struct {
	Up     bool    `json:"up"`
	Leader bool    `json:"leader"`
	RSSMB  float64 `json:"rss_mb"`
	HeapMB float64 `json:"heap_inuse_mb"`
	// GCMaxMs is the longest of the node's last 256 stop-the-world pauses
	// (go_gc_duration_seconds, quantile 1); GCMeanMs the mean pause since
	// the sample before.
	GCMaxMs   float64 `json:"gc_pause_max_ms"`
	GCMeanMs  float64 `json:"gc_pause_mean_ms"`
	GCs       float64 `json:"gcs"`
	GCSumS    float64 `json:"gc_pause_sum_s"`
	Applied   float64 `json:"applied_index"`
	Snapshots int     `json:"snapshots"`
	Installs  int     `json:"installs"`
}

// LongHaulOutage is one follower stopped and started again.
type LongHaulOutage struct {
	Node     string  `json:"node"`
	StoppedS float64 `json:"stopped_s"`
	StartedS float64 `json:"started_s"`
	// CaughtUpS is when its applied index first reached the leader's as
	// sampled just before (0: never seen).
	CaughtUpS float64 `json:"caught_up_s"`
	// Installed reports whether it was caught up by an installed snapshot
	// (its log says "Installed remote snapshot" after the restart).
	Installed bool   `json:"installed_snapshot"`
	Error     string `json:"error,omitempty"`
}

// LongHaulNodeStat sums up one node over the run.
type LongHaulNodeStat struct {
	Node      string `json:"node"`
	Snapshots int    `json:"snapshots_taken"`
	Installs  int    `json:"snapshots_installed"`
	// HeapRefMB is the mean heap in the window that follows the first
	// retention period (from retention + 2 min, for as long as the
	// retention); HeapEndMB the mean over the same length at the end of
	// the run. Growth is their ratio minus one.
	HeapRefMB float64 `json:"heap_ref_mb"`
	HeapEndMB float64 `json:"heap_end_mb"`
	Growth    jf      `json:"heap_growth"`
	RSSMaxMB  float64 `json:"rss_max_mb"`
	GCMaxMs   float64 `json:"gc_pause_max_ms"`
}

const (
	lhWindow     = time.Minute
	lhSubmitters = 64
	lhDrain      = 30 * time.Second
)

// runLongHaul runs the long haul and writes longhaul.md, longhaul.json and
// longhaul.svg into the run's directory.
func runLongHaul(ctx context.Context, env *Env, fs FsyncResult) error {
	o := env.opts
	res := &LongHaulResult{Started: time.Now(), DurationS: o.longHaul.Seconds(), Rate: o.lhRate,
		RetentionS: o.lhRetention.Seconds(), Machine: machineInfo(env), Fsync: fs}
	// An agent's default soft memory limit is half the machine's memory,
	// made for one node per machine; three nodes here share it, so each
	// gets a third of what is available, as an operator colocating them
	// would set. Without it their heaps (-gc-percent 400) outgrow the
	// machine within the first retention period.
	limitMiB := o.lhMemoryLimit >> 20
	if limitMiB == 0 {
		mi, err := readMeminfo()
		if err != nil {
			return err
		}
		limitMiB = mi.Available * 8 / 10 / 3 >> 20
	}
	res.MemoryLimitMiB = limitMiB
	sys := &cronoqSys{env: env, logLevel: "info", extraArgs: []string{"-retention", o.lhRetention.String(), "-memory-limit", fmt.Sprintf("%dMiB", limitMiB)}}
	res.Config = fmt.Sprintf("3 × `bin/cronoq agent` with the default settings but `-retention %s`, `-memory-limit %dMiB` (a third of 80%% of the memory available at the start) and `-log-level info` (to read raft's snapshot lines); "+
		"one task per Submit call from up to %d concurrent callers (the SDK coalesces them), %d-byte payloads, no-op handlers on %d SDK workers × %d slots; "+
		"a sample of every node each %s; one follower stopped (SIGTERM) for %s at a third and at two thirds of the run, then started again",
		o.lhRetention, limitMiB, lhSubmitters, PayloadSize, cronoqWorkers, o.concurrency/cronoqWorkers, o.lhSample, o.lhOutage)
	dir := filepath.Join(env.dataDir, "longhaul")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the long haul's data dir: %w", err)
	}
	env.prog.phase("starting cronoq")
	if err := sys.Start(ctx, dir); err != nil {
		return fmt.Errorf("starting cronoq: %w", err)
	}
	defer func() {
		if err := sys.Stop(); err != nil {
			env.prog.note("stopping cronoq: %v", err)
		}
	}()

	total := int(float64(o.lhRate) * o.longHaul.Seconds())
	const warm = 200
	tr := newTracker(warm + total)
	if err := sys.StartWorkers(ctx, tr.hooks()); err != nil {
		return err
	}
	if err := warmUp(ctx, env, sys, tr, warm); err != nil {
		return err
	}
	res.Offered = total

	// Sampler and outages run beside the offer, until it ends.
	lhCtx, stopSide := context.WithCancel(ctx)
	t0ns := tr.now() + int64(20*time.Millisecond)
	since := func() float64 { return float64(tr.now()-t0ns) / 1e9 }
	var side sync.WaitGroup
	var mu sync.Mutex
	side.Add(2)
	go func() {
		defer side.Done()
		sampleLoop(lhCtx, sys, o.lhSample, since, func(s LongHaulSample) {
			mu.Lock()
			res.Samples = append(res.Samples, s)
			mu.Unlock()
		})
	}()
	go func() {
		defer side.Done()
		for _, at := range []float64{1.0 / 3, 2.0 / 3} {
			wait := time.Duration(at*float64(o.longHaul)) - time.Duration(since()*1e9)
			select {
			case <-lhCtx.Done():
				return
			case <-time.After(wait):
			}
			out := outage(lhCtx, sys, o.lhOutage, since)
			mu.Lock()
			res.Outages = append(res.Outages, out)
			mu.Unlock()
		}
	}()

	var (
		submitted, errCount atomic.Int64
		firstErr            firstError
		doneCount           atomic.Int64
	)
	base := tr.count.Load()
	env.prog.track(fmt.Sprintf("long haul %d/s", o.lhRate), &doneCount, int64(total))
	period := float64(time.Second) / float64(o.lhRate)
	windowEnd := t0ns + int64(o.longHaul)
	cutoff := windowEnd + int64(time.Second)
	for i := 0; i < total; i++ {
		tr.sched[warm+i] = t0ns + int64(float64(i)*period)
	}
	offer(ctx, sys, tr, warm, total, cutoff, lhSubmitters, 4*o.lhRate, &submitted, &errCount, &firstErr,
		func() { doneCount.Store(tr.count.Load() - base) })
	drainEnd := time.Now().Add(lhDrain)
	for tr.count.Load()-base < submitted.Load() && time.Now().Before(drainEnd) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stopSide()
	side.Wait()
	werr := sys.StopWorkers()

	res.Submitted = int(submitted.Load())
	res.SubmitErrors = int(errCount.Load())
	res.NotSubmitted = total - res.Submitted - res.SubmitErrors
	res.Duplicates = tr.dups.Load()
	if e := firstErr.get(); e != nil {
		res.FirstError = e.Error()
	}
	summarizeLongHaul(res, tr, warm, total, t0ns, o)
	res.Finished = time.Now()
	res.Interrupted = ctx.Err() != nil

	if err := writeLongHaul(res, env.runDir, o.outDir); err != nil {
		return err
	}
	fmt.Println(renderLongHaulMarkdown(res))
	return errors.Join(werr, ctx.Err())
}

// summarizeLongHaul computes the latencies, per window and over the run,
// and each node's summary, from the tracker and the samples.
func summarizeLongHaul(res *LongHaulResult, tr *tracker, warm, total int, t0ns int64, o options) {
	var all []float64
	windows := map[int]*struct{ lat []float64 }{}
	nWin := int(math.Ceil(o.longHaul.Seconds() / lhWindow.Seconds()))
	for i := 0; i < total; i++ {
		q := warm + i
		w := int(time.Duration(tr.sched[q]-t0ns) / lhWindow)
		if windows[w] == nil {
			windows[w] = &struct{ lat []float64 }{}
		}
		d := atomic.LoadInt64(&tr.done[q])
		lat := math.Inf(1)
		if d != 0 {
			lat = float64(d-tr.sched[q]) / 1e6
			res.Completed++
		} else if tr.acked[q] != 0 {
			res.Lost++
		}
		windows[w].lat = append(windows[w].lat, lat)
		all = append(all, lat)
	}
	res.P50ms = jf(percentile(all, 0.50))
	res.P99ms = jf(percentile(all, 0.99))
	res.MaxMs = jf(percentile(all, 1))
	for w := 0; w < nWin; w++ {
		win := windows[w]
		if win == nil {
			continue
		}
		lw := LongHaulWindow{StartS: float64(w) * lhWindow.Seconds(), Due: len(win.lat)}
		for _, l := range win.lat {
			if !math.IsInf(l, 1) {
				lw.Completed++
			}
		}
		lw.P50ms, lw.P99ms, lw.MaxMs = jf(percentile(win.lat, 0.5)), jf(percentile(win.lat, 0.99)), jf(percentile(win.lat, 1))
		res.Windows = append(res.Windows, lw)
	}
	if len(res.Samples) == 0 {
		return
	}
	refFrom := o.lhRetention.Seconds() + 120
	span := o.lhRetention.Seconds()
	end := res.Samples[len(res.Samples)-1].T
	for n := range res.Samples[0].Nodes {
		st := LongHaulNodeStat{Node: fmt.Sprintf("n%d", n+1)}
		var ref, last []float64
		for _, s := range res.Samples {
			ns := s.Nodes[n]
			st.Snapshots = max(st.Snapshots, ns.Snapshots)
			st.Installs = max(st.Installs, ns.Installs)
			st.RSSMaxMB = math.Max(st.RSSMaxMB, ns.RSSMB)
			st.GCMaxMs = math.Max(st.GCMaxMs, ns.GCMaxMs)
			if !ns.Up {
				continue
			}
			if s.T >= refFrom && s.T < refFrom+span {
				ref = append(ref, ns.HeapMB)
			}
			if s.T >= end-span && s.T >= refFrom+span {
				last = append(last, ns.HeapMB)
			}
		}
		st.HeapRefMB, st.HeapEndMB = mean(ref), mean(last)
		st.Growth = jf(math.NaN())
		if st.HeapRefMB > 0 && st.HeapEndMB > 0 {
			st.Growth = jf(st.HeapEndMB/st.HeapRefMB - 1)
		}
		res.Nodes = append(res.Nodes, st)
	}
}

func mean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	var s float64
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}

// sampleLoop takes a sample of every node each interval until ctx ends.
func sampleLoop(ctx context.Context, sys *cronoqSys, every time.Duration, since func() float64, emit func(LongHaulSample)) {
	hc := sys.httpClient(2 * time.Second)
	prev := make([]NodeHaulSample, len(sys.http))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := LongHaulSample{T: since(), Load: loadAvg1()}
		for i, addr := range sys.http {
			ns := NodeHaulSample{}
			ns.Snapshots, ns.Installs = snapshotLines(logPath(sys.dir, fmt.Sprintf("cronoq-n%d", i+1)), 0)
			m, err := scrapeMetrics(ctx, hc, sys.scheme()+addr+"/metrics")
			if done, _ := sys.nodes[i].exited(); err == nil && !done {
				ns.Up = true
				ns.Leader = m["cronoq_is_leader"] == 1
				ns.HeapMB = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
				ns.GCMaxMs = m[`go_gc_duration_seconds{quantile="1"}`] * 1e3
				ns.GCs = m["go_gc_duration_seconds_count"]
				ns.GCSumS = m["go_gc_duration_seconds_sum"]
				ns.Applied = m["cronoq_raft_applied_index"]
				if n := ns.GCs - prev[i].GCs; n > 0 && prev[i].Up {
					ns.GCMeanMs = (ns.GCSumS - prev[i].GCSumS) / n * 1e3
				}
				if rss, err := rssBytes(sys.nodes[i].pid); err == nil {
					ns.RSSMB = float64(rss) / (1 << 20)
				}
			}
			prev[i] = ns
			s.Nodes = append(s.Nodes, ns)
		}
		emit(s)
	}
}

// snapshotLines counts, in a node's log from byte offset from on, the
// snapshots it took and those it installed from the leader (raft's own
// info lines).
func snapshotLines(path string, from int64) (taken, installed int) {
	b, err := os.ReadFile(path)
	if err != nil || from > int64(len(b)) {
		return 0, 0
	}
	s := string(b[from:])
	return strings.Count(s, "snapshot complete up to"), strings.Count(s, "Installed remote snapshot")
}

// outage stops one follower for d, starts it again and waits until it has
// caught up with the leader (or the run ends).
func outage(ctx context.Context, sys *cronoqSys, d time.Duration, since func() float64) LongHaulOutage {
	hc := sys.httpClient(2 * time.Second)
	applied := func(i int) (float64, bool, error) {
		m, err := scrapeMetrics(ctx, hc, sys.scheme()+sys.http[i]+"/metrics")
		if err != nil {
			return 0, false, err
		}
		return m["cronoq_raft_applied_index"], m["cronoq_is_leader"] == 1, nil
	}
	// A node may be slow to answer for a moment: look for up to 30 s.
	victim, leader := -1, -1
	for try := 0; try < 30 && ctx.Err() == nil && (victim < 0 || leader < 0); try++ {
		if try > 0 {
			time.Sleep(time.Second)
		}
		victim, leader = -1, -1
		for i := range sys.http {
			if _, isLeader, err := applied(i); err == nil && isLeader {
				leader = i
			} else if err == nil && victim < 0 {
				victim = i
			}
		}
	}
	if victim < 0 || leader < 0 {
		return LongHaulOutage{StoppedS: since(), Error: "no leader and follower to pick"}
	}
	out := LongHaulOutage{Node: fmt.Sprintf("n%d", victim+1), StoppedS: since()}
	if err := sys.stopNode(victim); err != nil {
		out.Error = err.Error()
		return out
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	logFile := logPath(sys.dir, fmt.Sprintf("cronoq-n%d", victim+1))
	var offset int64
	if fi, err := os.Stat(logFile); err == nil {
		offset = fi.Size()
	}
	out.StartedS = since()
	if err := sys.startNode(victim); err != nil {
		out.Error = err.Error()
		return out
	}
	for ctx.Err() == nil {
		target, _, err1 := applied(leader)
		got, _, err2 := applied(victim)
		if err1 == nil && err2 == nil && target > 0 && got >= target {
			out.CaughtUpS = since()
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, inst := snapshotLines(logFile, offset)
	out.Installed = inst > 0
	return out
}

// writeLongHaul writes longhaul.json, longhaul.md and longhaul.svg, and
// points outDir/latest-longhaul at the run.
func writeLongHaul(res *LongHaulResult, dir, outDir string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the long haul: %w", err)
	}
	files := map[string][]byte{
		"longhaul.json": b,
		"longhaul.md":   []byte(renderLongHaulMarkdown(res)),
		"longhaul.svg":  []byte(renderLongHaulChart(res)),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	link := filepath.Join(outDir, "latest-longhaul")
	_ = os.Remove(link)
	if err := os.Symlink(filepath.Base(dir), link); err != nil {
		return fmt.Errorf("linking %s: %w", link, err)
	}
	fmt.Printf("long haul report: %s\n", filepath.Join(dir, "longhaul.md"))
	return nil
}

func renderLongHaulMarkdown(res *LongHaulResult) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# cronoq long haul: %s at %d tasks/s, retention %s\n\n", time.Duration(res.DurationS*1e9), res.Rate, time.Duration(res.RetentionS*1e9))
	w("Started %s, finished %s%s. %d × %s, %d GiB, load average at start %s; fsync p50 %.2f ms, p99 %.2f ms.\n\n", res.Started.Format(time.RFC3339), res.Finished.Format(time.RFC3339),
		map[bool]string{true: " (**interrupted**)"}[res.Interrupted], res.Machine.CPUs, res.Machine.CPUModel, res.Machine.MemoryGiB, res.Machine.LoadAvg, res.Fsync.P50ms, res.Fsync.P99ms)
	w("Settings: %s.\n\n![long haul](longhaul.svg)\n\n", res.Config)
	w("## Tasks\n\n| offered | submitted | submit errors | not submitted | completed | acknowledged, not completed by the end of the drain | duplicates | p50 | p99 | max |\n|---|---|---|---|---|---|---|---|---|---|\n")
	w("| %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n\n", res.Offered, res.Submitted, res.SubmitErrors, res.NotSubmitted, res.Completed, res.Lost, res.Duplicates,
		fmtMs(res.P50ms), fmtMs(res.P99ms), fmtMs(res.MaxMs))
	if res.FirstError != "" {
		w("First submit error: `%s`\n\n", res.FirstError)
	}
	w("Latency runs from a task's due time (open loop) to its durable completion; a task never completed counts as infinite.\n\n")
	w("## Nodes\n\nHeap is `go_memstats_heap_inuse_bytes`; the reference is its mean over one retention period starting 2 minutes after the first retention period ended, the end its mean over the last retention period of the run.\n\n")
	w("| node | snapshots taken | snapshots installed | heap ref (MB) | heap end (MB) | growth | RSS max (MB) | GC pause max (ms) |\n|---|---|---|---|---|---|---|---|\n")
	for _, n := range res.Nodes {
		g := "n/a"
		if !math.IsNaN(float64(n.Growth)) {
			g = fmt.Sprintf("%+.1f%%", 100*float64(n.Growth))
		}
		w("| %s | %d | %d | %.0f | %.0f | %s | %.0f | %.2f |\n", n.Node, n.Snapshots, n.Installs, n.HeapRefMB, n.HeapEndMB, g, n.RSSMaxMB, n.GCMaxMs)
	}
	var loads []float64
	for _, s := range res.Samples {
		loads = append(loads, s.Load)
	}
	if len(loads) > 0 {
		w("\nMachine load average (1 min) over the run: median %.1f, max %.1f on %d cores.\n", percentile(loads, 0.5), percentile(loads, 1), res.Machine.CPUs)
	}
	w("\n## Follower outages\n\n| node | stopped at | started at | caught up at | by an installed snapshot | error |\n|---|---|---|---|---|---|\n")
	for _, o := range res.Outages {
		caught := "never"
		if o.CaughtUpS > 0 {
			caught = fmt.Sprintf("%.0f s (%.1f s after its start)", o.CaughtUpS, o.CaughtUpS-o.StartedS)
		}
		w("| %s | %.0f s | %.0f s | %s | %v | %s |\n", o.Node, o.StoppedS, o.StartedS, caught, o.Installed, o.Error)
	}
	w("\n## Per minute\n\n| minute | due | completed | p50 | p99 | max |\n|---|---|---|---|---|---|\n")
	for _, win := range res.Windows {
		w("| %.0f | %d | %d | %s | %s | %s |\n", win.StartS/60, win.Due, win.Completed, fmtMs(win.P50ms), fmtMs(win.P99ms), fmtMs(win.MaxMs))
	}
	return b.String()
}

// renderLongHaulChart draws three panels over time: RSS per node, GC pause
// (longest of the last 256, per node) and the p99 latency per minute, with
// the outages shaded.
func renderLongHaulChart(res *LongHaulResult) string {
	const (
		W, PH, gap = 1000, 190, 50
		x0, x1     = 80, 960
		font       = `font-family="DejaVu Sans, Arial, sans-serif"`
	)
	colors := []string{"#2b6cb0", "#c05621", "#2f855a"}
	H := 40 + 3*(PH+gap)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", W, H, W, H, font)
	w(`<rect width="%d" height="%d" fill="#fff"/>`+"\n", W, H)
	w(`<text x="%d" y="24" font-size="16" font-weight="bold">cronoq long haul: %d tasks/s for %s, retention %s</text>`+"\n",
		x0-40, res.Rate, time.Duration(res.DurationS*1e9), time.Duration(res.RetentionS*1e9))
	tmax := res.DurationS
	if tmax <= 0 {
		tmax = 1
	}
	xOf := func(t float64) float64 { return x0 + (x1-x0)*math.Max(0, math.Min(t, tmax))/tmax }
	panel := func(i int, title, unit string, series [][2][]float64, names []string) {
		top := 40 + i*(PH+gap) + 20
		bottom := top + PH
		w(`<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", x0, top-6, title)
		for _, o := range res.Outages {
			if o.StartedS > o.StoppedS {
				w(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#edf2f7"/>`+"\n", xOf(o.StoppedS), top, xOf(o.StartedS)-xOf(o.StoppedS), PH)
			}
		}
		maxV := 0.0
		for _, s := range series {
			for _, v := range s[1] {
				if !math.IsInf(v, 0) && !math.IsNaN(v) {
					maxV = math.Max(maxV, v)
				}
			}
		}
		step := niceStep(maxV / 4)
		if step <= 0 {
			step = 1
		}
		ymax := math.Ceil(maxV/step) * step
		if ymax <= 0 {
			ymax = 1
		}
		yOf := func(v float64) float64 { return float64(bottom) - float64(PH)*math.Min(v, ymax)/ymax }
		for v := 0.0; v <= ymax+step/2; v += step {
			w(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", x0, x1, yOf(v), yOf(v))
			w(`<text x="%d" y="%.1f" font-size="10" text-anchor="end">%g %s</text>`+"\n", x0-4, yOf(v)+3, v, unit)
		}
		for t := 0.0; t <= tmax; t += math.Max(60, niceStep(tmax/8)) {
			w(`<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%.0f min</text>`+"\n", xOf(t), bottom+13, t/60)
		}
		for k, s := range series {
			// A gap (NaN: the node was down) ends one line and starts another.
			var pts []string
			flush := func() {
				if len(pts) > 0 {
					w(`<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colors[k%len(colors)], strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for j := range s[0] {
				v := s[1][j]
				if math.IsNaN(v) {
					flush()
					continue
				}
				if math.IsInf(v, 1) {
					v = ymax
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(s[0][j]), yOf(v)))
			}
			flush()
			w(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", x1-60*(len(series)-k), top-6, colors[k%len(colors)], names[k])
		}
	}
	nodes := 0
	if len(res.Samples) > 0 {
		nodes = len(res.Samples[0].Nodes)
	}
	var rss, gc [][2][]float64
	var names []string
	for n := 0; n < nodes; n++ {
		var ts, r, g []float64
		for _, s := range res.Samples {
			ts = append(ts, s.T)
			if !s.Nodes[n].Up {
				r, g = append(r, math.NaN()), append(g, math.NaN())
				continue
			}
			r, g = append(r, s.Nodes[n].RSSMB), append(g, s.Nodes[n].GCMaxMs)
		}
		rss, gc = append(rss, [2][]float64{ts, r}), append(gc, [2][]float64{ts, g})
		names = append(names, fmt.Sprintf("n%d", n+1))
	}
	var wt, p50, p99 []float64
	for _, win := range res.Windows {
		wt = append(wt, win.StartS+lhWindow.Seconds()/2)
		p50, p99 = append(p50, float64(win.P50ms)), append(p99, float64(win.P99ms))
	}
	panel(0, "RSS per node (shaded: a follower stopped)", "MB", rss, names)
	panel(1, "GC pause per node: longest of the last 256", "ms", gc, names)
	panel(2, "Task latency per minute (due time → durable completion)", "ms", [][2][]float64{{wt, p99}, {wt, p50}}, []string{"p99", "p50"})
	w("</svg>\n")
	return b.String()
}

// loadAvg1 is the one-minute load average (0 if unreadable).
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
