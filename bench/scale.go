package main

// The scale curves (workload "scale", cronoq only, in the first run only):
// for each size N of -scale-sizes, a fresh three-node cluster is filled with
// N retained ended tasks, and the benchmark measures, in this order:
//
//  1. the fill: N no-op tasks (256-byte payloads) submitted in batches while
//     no-op workers complete them, with at most scaleFillWindow pending;
//     rate = N / (first submit → last durable completion). With the agent's default retention (24 h) they all stay.
//  2. the heap per retained task on each node: a forced GC (GET
//     /debug/pprof/heap?gc=1, served with -enable-debug), then
//     go_memstats_heap_alloc_bytes from /metrics, minus the same on the
//     empty cluster, divided by N.
//  3. W1 on top of them (runW1, -w1-tasks).
//  4. a snapshot: `cronoq operator snapshot save` through the SDK
//     (Client.SnapshotSave: a barrier, raft's own snapshot on the leader,
//     streamed to a file); time and size of the file.
//  5. at one size (catchUpSize) a wiped follower's catch-up: the follower is
//     stopped, its data dir removed and it is started again with the same id
//     and addresses; time from its start until its applied index reaches
//     the leader's, and whether the leader sent it a snapshot.
//  6. a restore of that file into the cluster (Client.SnapshotRestore, as
//     `cronoq operator snapshot restore`): time to the answer (the leader
//     serves the restored state again) and until all three nodes applied it.
//
// Before a size, its memory is projected from the bytes per task measured
// at the previous size; a size that would not fit in 80% of MemAvailable
// is not run, and while a size runs a watchdog stops it if MemAvailable
// falls under 10% of the machine's memory.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// scaleCatchUpSize is the size at which a wiped follower's catch-up is
	// timed (or, without it, see catchUpSize).
	scaleCatchUpSize = 1_000_000
	// scaleTrailingLogs is the agents' -raft-trailing-logs in the scale
	// cells: after the snapshot the leader keeps this many log entries, so
	// that a wiped follower is caught up by a snapshot, not by replaying a
	// log that still holds every entry since the cluster started.
	scaleTrailingLogs = 1024
	// scaleHeadroom is the share of MemAvailable a size may use (20%
	// headroom), and of the disk's free space.
	scaleHeadroom = 0.8
	// scaleFloor is the share of the machine's memory under which
	// MemAvailable stops a running size.
	scaleFloor = 0.10
	// scaleFillChunk and scaleFillWindow: the fill submits in chunks of
	// 50,000 tasks, each once at most 200,000 submitted tasks are pending.
	scaleFillChunk  = 50_000
	scaleFillWindow = 200_000
	// scaleNodes is the cluster's size.
	scaleNodes = 3
)

// ScaleResult is one size of the scale curves.
type ScaleResult struct {
	Tasks int `json:"retained_tasks"` // N
	// NotRun says why the size was not run (its memory or disk projection
	// did not fit).
	NotRun string `json:"not_run,omitempty"`

	MemTotal      int64   `json:"mem_total_bytes"`
	MemAvailable  int64   `json:"mem_available_bytes"`     // before the cluster started
	ProjectedHeap float64 `json:"projected_heap_bytes"`    // 3 nodes, from the previous size (0: none)
	ProjectedDisk float64 `json:"projected_disk_bytes"`    // from the previous size (0: none)
	MemoryLimit   int64   `json:"node_memory_limit_bytes"` // each agent's -memory-limit

	// The fill.
	FillSeconds   float64 `json:"fill_s"`
	FillRate      float64 `json:"fill_tasks_per_s"`
	SubmitSeconds float64 `json:"fill_submit_s"`
	SubmitRate    float64 `json:"fill_submit_tasks_per_s"`
	StoreEnded    int64   `json:"store_succeeded_after_fill"`

	// Heap of each node on the empty cluster and after the fill (after a
	// forced GC), and per retained task.
	Empty                   []NodeMem `json:"empty"`
	Filled                  []NodeMem `json:"filled"`
	LeaderBytesPerTask      float64   `json:"leader_heap_bytes_per_task"`
	FollowerBytesPerTask    float64   `json:"follower_heap_bytes_per_task"` // mean of the followers
	FollowerMaxBytesPerTask float64   `json:"follower_max_heap_bytes_per_task"`

	// W1 on top of the retained tasks.
	W1 *W1Result `json:"w1,omitempty"`

	// The snapshot (backup file) saved after W1.
	SnapshotBytes   int64   `json:"snapshot_bytes"`
	SnapshotIndex   uint64  `json:"snapshot_index"`
	SnapshotSeconds float64 `json:"snapshot_save_s"`

	// The restore of that file into the cluster.
	RestoreSeconds    float64 `json:"restore_s"`     // the call answered: the leader serves the restored state
	RestoreAllSeconds float64 `json:"restore_all_s"` // every node applied the restored snapshot
	RestoredTasks     int     `json:"restored_tasks"`

	// A wiped follower's catch-up (at one size only).
	CatchUp *CatchUpResult `json:"catch_up,omitempty"`

	// Bytes on disk of the cell (3 data dirs and the backup file) at the end.
	DiskBytes int64 `json:"disk_bytes"`
	// MemoryStop says why the watchdog stopped the size ("" if it did not);
	// the larger sizes are then not run.
	MemoryStop string `json:"memory_stop,omitempty"`
}

// errMemoryLow is the cause of a size stopped by the memory watchdog.
var errMemoryLow = errors.New("memory low")

// NodeMem is one node's memory after a forced GC.
type NodeMem struct {
	Node      string  `json:"node"`
	Leader    bool    `json:"leader"`
	HeapAlloc float64 `json:"heap_alloc_bytes"` // go_memstats_heap_alloc_bytes
	HeapInuse float64 `json:"heap_inuse_bytes"` // go_memstats_heap_inuse_bytes
	RSS       float64 `json:"rss_bytes"`        // process_resident_memory_bytes
}

// CatchUpResult is a wiped follower caught up by the leader.
type CatchUpResult struct {
	Node string `json:"node"`
	// From the start of its process: its health answered ok, and its
	// applied index reached the leader's.
	HealthSeconds float64 `json:"health_ok_s"`
	Seconds       float64 `json:"caught_up_s"`
	AppliedIndex  uint64  `json:"applied_index"`
	// InstallSnapshots counts the snapshots the node received
	// (cronoq_raft_rpc_installSnapshot_count): 0 means it was caught up
	// by replaying the log.
	InstallSnapshots float64 `json:"install_snapshots"`
}

// parseSizes reads -scale-sizes: positive integers ("_" allowed between
// digits), returned ascending without repeats.
func parseSizes(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad size %q in -scale-sizes", f)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-scale-sizes is empty")
	}
	sort.Ints(out)
	return out, nil
}

// scaleSizesOfRun are the sizes planned in run: the scale cells run once,
// in the first run.
func scaleSizesOfRun(o options, run int) []int {
	if run != 1 {
		return nil
	}
	return o.scaleSizes
}

// scaleSkip says why a system does not run the scale cells, "" for cronoq.
func scaleSkip(name string) string {
	if name == "cronoq" {
		return ""
	}
	return "the scale curves are measured on cronoq only"
}

// scaleSkipped lists the systems that do not run the scale cells.
func scaleSkipped(o options) []Skip {
	if !contains(o.workloads, "scale") {
		return nil
	}
	var out []Skip
	for _, s := range o.systems {
		if s == "raft" {
			continue
		}
		if why := scaleSkip(s); why != "" {
			out = append(out, Skip{System: s, Workload: "scale", Reason: why})
		}
	}
	return out
}

func scaleTitle(c cell) string {
	return fmt.Sprintf("scale %s retained tasks %s", fmtNum(jf(c.rate)), c.system)
}

// catchUpSize is the size at which the catch-up is timed: 1,000,000 when
// it is one of the sizes, else the largest size under it, else the
// smallest.
func catchUpSize(sizes []int) int {
	best := 0
	for _, n := range sizes {
		if n == scaleCatchUpSize {
			return n
		}
		if n < scaleCatchUpSize && n > best {
			best = n
		}
	}
	if best == 0 && len(sizes) > 0 {
		best = sizes[0]
		for _, n := range sizes {
			best = min(best, n)
		}
	}
	return best
}

// meminfo is what /proc/meminfo says of the machine's memory.
type meminfo struct {
	Total, Available int64 // bytes
}

func parseMeminfo(r io.Reader) (meminfo, error) {
	var mi meminfo
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) >= 3 && strings.EqualFold(f[2], "kB") {
			v *= 1024
		}
		switch f[0] {
		case "MemTotal:":
			mi.Total = v
		case "MemAvailable:":
			mi.Available = v
		}
	}
	if err := sc.Err(); err != nil {
		return mi, fmt.Errorf("reading /proc/meminfo: %w", err)
	}
	if mi.Total == 0 || mi.Available == 0 {
		return mi, errors.New("reading /proc/meminfo: no MemTotal or MemAvailable")
	}
	return mi, nil
}

func readMeminfo() (meminfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return meminfo{}, fmt.Errorf("reading the machine's memory: %w", err)
	}
	defer f.Close()
	return parseMeminfo(f)
}

// projectHeap is the live heap the three nodes are expected to hold with n
// retained tasks, from the empty cluster's heap and the bytes per task
// measured at a previous size (the leader's for one node, the larger
// follower's for the other two); ok is false without such a measurement.
func projectHeap(prev *ScaleResult, n int) (bytes float64, ok bool) {
	if prev == nil || prev.NotRun != "" || prev.LeaderBytesPerTask <= 0 || len(prev.Empty) != scaleNodes {
		return 0, false
	}
	for _, m := range prev.Empty {
		bytes += m.HeapAlloc
	}
	follower := max(prev.FollowerMaxBytesPerTask, prev.FollowerBytesPerTask)
	bytes += float64(n) * (prev.LeaderBytesPerTask + float64(scaleNodes-1)*follower)
	return bytes, true
}

// projectDisk is the disk a size is expected to take, from the bytes on
// disk per task of a previous size.
func projectDisk(prev *ScaleResult, n int) (bytes float64, ok bool) {
	if prev == nil || prev.NotRun != "" || prev.DiskBytes <= 0 || prev.Tasks <= 0 {
		return 0, false
	}
	return float64(prev.DiskBytes) / float64(prev.Tasks) * float64(n), true
}

// fitReason says why a size projected to need need bytes of avail does
// not fit in scaleHeadroom of it ("" when it fits).
func fitReason(what string, need float64, avail int64) string {
	budget := scaleHeadroom * float64(avail)
	if need <= budget {
		return ""
	}
	return fmt.Sprintf("not run: projected %s %s > %s available (%.0f%% of %s)",
		what, fmtBytes(need), fmtBytes(budget), scaleHeadroom*100, fmtBytes(float64(avail)))
}

// fmtBytes formats a byte count in decimal units.
func fmtBytes(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case v >= 1e9:
		return fmt.Sprintf("%.1f GB", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%.0f B", v)
}

// scaleAgentArgs are the agents' settings in the scale cells, beyond the
// production defaults: -enable-debug (the forced GC), -raft-trailing-logs
// (see scaleTrailingLogs) and each node's share of the memory budget as its
// -memory-limit, so that three collectors on one machine stay within it.
func scaleAgentArgs(o options, memLimit int64) []string {
	args := []string{"-raft-trailing-logs", strconv.Itoa(scaleTrailingLogs), "-memory-limit", fmt.Sprintf("%dMiB", memLimit>>20)}
	if o.profile <= 0 {
		args = append(args, "-enable-debug")
	}
	return args
}

// scaleTimeout bounds one size: -cell-timeout plus a millisecond per task.
func scaleTimeout(o options, n int) time.Duration {
	return o.cellTimeout + time.Duration(n)*time.Millisecond
}

// freeDisk is the space left to an unprivileged writer on dir's filesystem.
func freeDisk(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("reading the free space of %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// dirBytes sums the sizes of the files under dir.
func dirBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			total += info.Size()
		}
		return nil
	})
	return total
}

// runScaleCell runs one size: the projection, then a fresh cluster through
// the steps above, under a memory watchdog.
func runScaleCell(parent context.Context, env *Env, c cell, dir string, res *CellResult) {
	n := c.rate
	sr := &ScaleResult{Tasks: n}
	res.Scale = sr
	res.Copies = scaleNodes
	o := env.opts

	mi, err := readMeminfo()
	if err != nil {
		res.Error = err.Error()
		return
	}
	sr.MemTotal, sr.MemAvailable = mi.Total, mi.Available
	prev := env.scalePrev
	if prev != nil && prev.MemoryStop != "" {
		sr.NotRun = fmt.Sprintf("not run: the %s-task size was stopped (%s)", fmtNum(jf(prev.Tasks)), prev.MemoryStop)
		return
	}
	if p, ok := projectHeap(prev, n); ok {
		sr.ProjectedHeap = p
		if why := fitReason("heap of 3 nodes", p, mi.Available); why != "" {
			sr.NotRun = why
			return
		}
	}
	if p, ok := projectDisk(prev, n); ok {
		sr.ProjectedDisk = p
		free, err := freeDisk(dir)
		if err != nil {
			res.Error = err.Error()
			return
		}
		if why := fitReason("disk", p, free); why != "" {
			sr.NotRun = why
			return
		}
	}
	sr.MemoryLimit = int64(scaleHeadroom * float64(mi.Available) / scaleNodes)

	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	ctx, cancelT := context.WithTimeout(ctx, scaleTimeout(o, n))
	defer cancelT()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		memWatch(ctx, cancel, int64(scaleFloor*float64(mi.Total)), 500*time.Millisecond)
	}()
	defer wg.Wait()
	defer cancel(nil) // stops the watchdog before waiting for it

	sys := &cronoqSys{env: env, extraArgs: scaleAgentArgs(o, sr.MemoryLimit)}
	env.prog.phase("starting cronoq")
	err = sys.Start(ctx, dir)
	if err == nil {
		err = scaleSteps(ctx, env, sys, dir, n, catchUpSize(o.scaleSizes) == n, res)
	}
	sr.DiskBytes = dirBytes(dir)
	env.prog.phase("stopping cronoq")
	serr := sys.Stop()
	cause := context.Cause(ctx)
	if err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	if errors.Is(cause, errMemoryLow) {
		sr.MemoryStop = cause.Error()
	}
	if err != nil {
		res.Error = err.Error()
	}
	if serr != nil {
		if res.Error != "" {
			res.Error += "; "
		}
		res.Error += "stop: " + serr.Error()
	}
	if sr.LeaderBytesPerTask > 0 || sr.MemoryStop != "" {
		env.scalePrev = sr
	}
}

// memWatch cancels the cell when MemAvailable falls under floor bytes.
func memWatch(ctx context.Context, cancel context.CancelCauseFunc, floor int64, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mi, err := readMeminfo()
		if err == nil && mi.Available < floor {
			cancel(fmt.Errorf("%w: MemAvailable fell to %s, under %s (%.0f%% of the machine's memory)",
				errMemoryLow, fmtBytes(float64(mi.Available)), fmtBytes(float64(floor)), scaleFloor*100))
			return
		}
	}
}

// scaleSteps runs the steps of one size on the started cluster.
func scaleSteps(ctx context.Context, env *Env, sys *cronoqSys, dir string, n int, catchUp bool, res *CellResult) error {
	sr := res.Scale
	hc := sys.httpClient(30 * time.Second)
	empty, err := nodesMemory(ctx, sys, hc)
	if err != nil {
		return fmt.Errorf("memory of the empty cluster: %w", err)
	}
	sr.Empty = empty

	if err := fillRetained(ctx, env, sys, n, sr); err != nil {
		return err
	}
	env.prog.phase("forcing a GC on every node")
	filled, err := nodesMemory(ctx, sys, hc)
	if err != nil {
		return fmt.Errorf("memory after the fill: %w", err)
	}
	sr.Filled = filled
	sr.LeaderBytesPerTask, sr.FollowerBytesPerTask, sr.FollowerMaxBytesPerTask = perTask(empty, filled, n)

	w1 := CellResult{System: res.System, Workload: "scale-w1", Rate: n, Run: res.Run}
	err = runW1(ctx, env, sys, &w1)
	sr.W1 = w1.W1
	res.ServerCPUs, res.ClientCPUs = w1.ServerCPUs, w1.ClientCPUs
	if err != nil {
		return fmt.Errorf("W1: %w", err)
	}

	env.prog.phase("saving a snapshot")
	path := filepath.Join(dir, "backup.snap")
	if err := saveSnapshot(ctx, sys, path, sr); err != nil {
		return err
	}
	if catchUp {
		env.prog.phase("catching up a wiped follower")
		cu, err := catchUpFollower(ctx, sys, hc)
		sr.CatchUp = cu
		if err != nil {
			return fmt.Errorf("catch-up: %w", err)
		}
	}
	env.prog.phase("restoring the snapshot")
	return restoreSnapshot(ctx, sys, hc, path, sr)
}

// perTask is the heap per task of the leader and of the followers (their
// mean and the larger), from node memories before and after n tasks. A
// node that changed its role between the two is counted in its role after.
func perTask(empty, filled []NodeMem, n int) (leader, follower, followerMax float64) {
	var sum float64
	var k int
	for i, f := range filled {
		if i >= len(empty) || n <= 0 {
			break
		}
		d := (f.HeapAlloc - empty[i].HeapAlloc) / float64(n)
		if f.Leader {
			leader = d
			continue
		}
		sum += d
		k++
		followerMax = max(followerMax, d)
	}
	if k > 0 {
		follower = sum / float64(k)
	}
	return leader, follower, followerMax
}

// fillRetained submits n no-op tasks in batches with workers running and
// waits until every completion is durable.
func fillRetained(ctx context.Context, env *Env, sys *cronoqSys, n int, sr *ScaleResult) error {
	var done atomic.Int64
	reached := make(chan struct{})
	h := Hooks{
		Start: func(int) {},
		Done: func(int) {
			if done.Add(1) == int64(n) {
				close(reached)
			}
		},
	}
	if err := sys.StartWorkers(ctx, h); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	env.prog.trackCount(fmt.Sprintf("filling %s tasks: completed", fmtNum(jf(n))), &done, int64(n))
	var ins atomic.Int64
	t0 := time.Now()
	// The fill's tasks are numbered after W1's, so that no number is used
	// twice in the cell.
	base := env.opts.w1Tasks
	err := fillWindowed(ctx, n, scaleFillChunk, scaleFillWindow, &done, func(lo, hi int) error {
		_, err := preInsert(ctx, env, sys, base+lo, base+hi, &ins)
		return err
	})
	sr.SubmitSeconds = time.Since(t0).Seconds()
	if err == nil {
		sr.SubmitRate = float64(n) / sr.SubmitSeconds
		select {
		case <-reached:
			sr.FillSeconds = time.Since(t0).Seconds()
			sr.FillRate = float64(n) / sr.FillSeconds
		case <-ctx.Done():
			err = fmt.Errorf("%d of %d completed: %w", done.Load(), n, ctx.Err())
		}
	}
	serr := sys.StopWorkers()
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("fill: stopping the workers: %w", serr)
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := sys.Completed(vctx)
	sr.StoreEnded = got
	switch {
	case err != nil:
		return fmt.Errorf("fill: reading the completed count: %w", err)
	case got < int64(n):
		return fmt.Errorf("fill: the store reports %d succeeded of %d", got, n)
	}
	return nil
}

// fillWindowed submits tasks [0, n) in chunks of chunk with submit, each
// once no more than window submitted tasks are not done yet, so that the
// queue of pending tasks (which take more memory than ended ones) stays
// bounded whatever n.
func fillWindowed(ctx context.Context, n, chunk, window int, done *atomic.Int64, submit func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += chunk {
		for int64(lo)-done.Load() > int64(window) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err := submit(lo, min(lo+chunk, n)); err != nil {
			return err
		}
	}
	return nil
}

// healthOf is what the benchmark reads of GET /v1/health.
type healthOf struct {
	Node      string `json:"node"`
	Leader    string `json:"leader"`
	Status    string `json:"status"`
	RaftState string `json:"raft_state"`
	Applied   uint64 `json:"applied_index"`
	code      int
}

func getHealth(ctx context.Context, hc *http.Client, url string) (healthOf, error) {
	var h healthOf
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/health", nil)
	if err != nil {
		return h, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	h.code = resp.StatusCode
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h, fmt.Errorf("reading the health of %s: %w", url, err)
	}
	return h, nil
}

// getText GETs url and returns its body.
func getText(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return b, nil
}

// seriesSum sums the series of metric name in a scrape, whatever their
// labels; ok is false when there is none.
func seriesSum(m promSample, name string) (sum float64, ok bool) {
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
			ok = true
		}
	}
	return sum, ok
}

// nodesMemory forces a GC on every node and reads its heap and RSS.
func nodesMemory(ctx context.Context, sys *cronoqSys, hc *http.Client) ([]NodeMem, error) {
	out := make([]NodeMem, len(sys.http))
	for i, addr := range sys.http {
		base := sys.scheme() + addr
		h, err := getHealth(ctx, hc, base)
		if err != nil {
			return nil, err
		}
		if _, err := getText(ctx, hc, base+"/debug/pprof/heap?gc=1"); err != nil {
			return nil, fmt.Errorf("forcing a GC on %s: %w", h.Node, err)
		}
		m, err := scrapeMetrics(ctx, hc, base+"/metrics")
		if err != nil {
			return nil, err
		}
		heap, ok := seriesSum(m, "go_memstats_heap_alloc_bytes")
		if !ok {
			return nil, fmt.Errorf("metrics of %s: no go_memstats_heap_alloc_bytes", h.Node)
		}
		inuse, _ := seriesSum(m, "go_memstats_heap_inuse_bytes")
		rss, _ := seriesSum(m, "process_resident_memory_bytes")
		out[i] = NodeMem{Node: h.Node, Leader: h.Node != "" && h.Node == h.Leader, HeapAlloc: heap, HeapInuse: inuse, RSS: rss}
	}
	return out, nil
}

// saveSnapshot saves a backup file of the cluster to path, as `cronoq
// operator snapshot save` does, and times it to the file written and
// fsync'd.
func saveSnapshot(ctx context.Context, sys *cronoqSys, path string, sr *ScaleResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	t0 := time.Now()
	size, err := sys.submit[0].SnapshotSave(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	el := time.Since(t0).Seconds()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	sr.SnapshotBytes, sr.SnapshotSeconds = size, el
	return nil
}

// restoreSnapshot restores the backup file into the cluster and times the
// call, then the wait until every node applied the restored snapshot.
func restoreSnapshot(ctx context.Context, sys *cronoqSys, hc *http.Client, path string, sr *ScaleResult) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	t0 := time.Now()
	rr, err := sys.submit[0].SnapshotRestore(ctx, f)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	sr.RestoreSeconds = time.Since(t0).Seconds()
	sr.SnapshotIndex = rr.Index
	sr.RestoredTasks = rr.Tasks
	for {
		all := true
		for _, addr := range sys.http {
			h, err := getHealth(ctx, hc, sys.scheme()+addr)
			if err != nil || h.Applied < rr.RaftIndex {
				all = false
				break
			}
		}
		if all {
			sr.RestoreAllSeconds = time.Since(t0).Seconds()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restore: waiting for every node to apply index %d: %w", rr.RaftIndex, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// catchUpFollower stops a follower, removes its data dir, starts it again
// with the same command line (stopNode, startNode) and times it until its applied index reaches
// the leader's.
func catchUpFollower(ctx context.Context, sys *cronoqSys, hc *http.Client) (*CatchUpResult, error) {
	leader, follower := -1, -1
	for i, addr := range sys.http {
		h, err := getHealth(ctx, hc, sys.scheme()+addr)
		if err != nil {
			return nil, err
		}
		switch {
		case h.Node == h.Leader && leader < 0:
			leader = i
		case h.Node != h.Leader && follower < 0:
			follower = i
		}
	}
	if leader < 0 || follower < 0 {
		return nil, errors.New("no leader and follower to be found")
	}
	id := fmt.Sprintf("n%d", follower+1)
	cu := &CatchUpResult{Node: id}
	if err := sys.stopNode(follower); err != nil {
		return cu, fmt.Errorf("stopping %s: %w", id, err)
	}
	if err := os.RemoveAll(filepath.Join(sys.dir, id)); err != nil {
		return cu, fmt.Errorf("removing the data of %s: %w", id, err)
	}
	lbase, fbase := sys.scheme()+sys.http[leader], sys.scheme()+sys.http[follower]
	t0 := time.Now()
	if err := sys.startNode(follower); err != nil {
		return cu, fmt.Errorf("starting %s again: %w", id, err)
	}
	np := sys.nodes[follower]
	for {
		if done, werr := np.exited(); done {
			return cu, fmt.Errorf("%s exited: %v: %s", id, werr, tailFile(logPath(sys.dir, np.name), 1500))
		}
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		fh, ferr := getHealth(hctx, hc, fbase)
		lh, lerr := getHealth(hctx, hc, lbase)
		cancel()
		if ferr == nil && cu.HealthSeconds == 0 && fh.code == http.StatusOK && fh.Status == "ok" {
			cu.HealthSeconds = time.Since(t0).Seconds()
		}
		if ferr == nil && lerr == nil && fh.Applied > 0 && fh.Applied >= lh.Applied {
			cu.Seconds = time.Since(t0).Seconds()
			cu.AppliedIndex = fh.Applied
			break
		}
		select {
		case <-ctx.Done():
			return cu, fmt.Errorf("%s not caught up: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	m, err := scrapeMetrics(ctx, hc, fbase+"/metrics")
	if err != nil {
		return cu, err
	}
	cu.InstallSnapshots, _ = seriesSum(m, "cronoq_raft_rpc_installSnapshot_count")
	// Its health, which a follower reaches in the same state as before.
	for cu.HealthSeconds == 0 {
		fh, err := getHealth(ctx, hc, fbase)
		if err == nil && fh.code == http.StatusOK && fh.Status == "ok" {
			cu.HealthSeconds = time.Since(t0).Seconds()
			break
		}
		select {
		case <-ctx.Done():
			return cu, fmt.Errorf("%s caught up but its health is not ok: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return cu, nil
}

// summary is the one-line result printed when a scale cell ends.
func (sr *ScaleResult) summary() string {
	if sr.NotRun != "" {
		return fmt.Sprintf("%s tasks: %s", fmtNum(jf(sr.Tasks)), sr.NotRun)
	}
	s := fmt.Sprintf("%s tasks: fill %s tasks/s; heap per task leader %s B, followers %s B",
		fmtNum(jf(sr.Tasks)), fmtNum(jf(sr.FillRate)), fmtNum(jf(sr.LeaderBytesPerTask)), fmtNum(jf(sr.FollowerBytesPerTask)))
	if sr.W1 != nil && sr.W1.Rate > 0 {
		s += fmt.Sprintf("; W1 %s tasks/s", fmtNum(jf(sr.W1.Rate)))
	}
	if sr.SnapshotBytes > 0 {
		s += fmt.Sprintf("; snapshot %s in %.2fs", fmtBytes(float64(sr.SnapshotBytes)), sr.SnapshotSeconds)
	}
	if sr.RestoreSeconds > 0 {
		s += fmt.Sprintf("; restore %.2fs (every node %.2fs)", sr.RestoreSeconds, sr.RestoreAllSeconds)
	}
	if cu := sr.CatchUp; cu != nil && cu.Seconds > 0 {
		s += fmt.Sprintf("; catch-up of a wiped follower %.2fs (%s)", cu.Seconds, cu.how())
	}
	return s
}

// how says how the follower was caught up.
func (cu *CatchUpResult) how() string {
	if cu.InstallSnapshots > 0 {
		return "by snapshot"
	}
	return "by replaying the log: no snapshot was sent"
}

// scaleCells are the scale cells of the report, by size.
func scaleCells(rep *Report) []CellResult {
	var out []CellResult
	for _, c := range rep.Cells {
		if c.Workload == "scale" && c.Scale != nil {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Scale.Tasks < out[j].Scale.Tasks })
	return out
}

// renderScale renders the scale curves' section ("" without scale cells).
func renderScale(rep *Report) string {
	cells := scaleCells(rep)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	var skips []string
	for _, sk := range rep.Skipped {
		if sk.Workload == "scale" {
			skips = append(skips, sk.System)
		}
	}
	if len(cells) == 0 && len(skips) == 0 {
		return ""
	}
	w("## Scale — cronoq holding N retained ended tasks\n\n")
	if len(cells) > 0 {
		w("![scale curves](scale.svg)\n\n")
		w("| retained tasks N | fill tasks/s | heap B/task leader | heap B/task followers (mean) | W1 tasks/s | snapshot size | snapshot save s | restore s (answered / every node) | wiped follower caught up s |\n")
		w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range cells {
			sr := c.Scale
			if sr.NotRun != "" {
				w("| %s | %s |  |  |  |  |  |  |  |\n", fmtNum(jf(sr.Tasks)), sr.NotRun)
				continue
			}
			w1 := "—"
			if sr.W1 != nil && sr.W1.Rate > 0 {
				w1 = "**" + fmtNum(jf(sr.W1.Rate)) + "**"
			}
			snap, save, restore := "—", "—", "—"
			if sr.SnapshotBytes > 0 {
				snap, save = fmtBytes(float64(sr.SnapshotBytes)), fmtSec2(jf(sr.SnapshotSeconds))
			}
			if sr.RestoreSeconds > 0 {
				restore = fmtSec2(jf(sr.RestoreSeconds)) + " / " + fmtSec2(jf(sr.RestoreAllSeconds))
			}
			cu := "not timed at this size"
			if sr.CatchUp != nil {
				cu = "failed"
				if sr.CatchUp.Seconds > 0 {
					cu = fmtSec2(jf(sr.CatchUp.Seconds)) + " (" + sr.CatchUp.how() + ")"
				}
			}
			fill := "—"
			if sr.FillRate > 0 {
				fill = fmtNum(jf(sr.FillRate))
			}
			lb, fb := "—", "—"
			if len(sr.Filled) > 0 {
				lb, fb = "**"+fmtNum(jf(sr.LeaderBytesPerTask))+"**", "**"+fmtNum(jf(sr.FollowerBytesPerTask))+"**"
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", fmtNum(jf(sr.Tasks)), fill, lb, fb, w1, snap, save, restore, cu)
		}
		w("\n")
		for _, c := range cells {
			sr := c.Scale
			if sr.NotRun != "" {
				continue
			}
			w("**%s retained tasks**", fmtNum(jf(sr.Tasks)))
			if c.Error != "" {
				w(" — failed: %s", c.Error)
			}
			w("\n\n")
			if sr.FillRate > 0 {
				w("- fill: %s tasks in %.1f s (submits acknowledged after %.1f s, %s tasks/s); the store reports %s succeeded\n",
					fmtNum(jf(sr.Tasks)), sr.FillSeconds, sr.SubmitSeconds, fmtNum(jf(sr.SubmitRate)), fmtNum(jf(sr.StoreEnded)))
			}
			for i, m := range sr.Filled {
				role := "follower"
				if m.Leader {
					role = "leader"
				}
				var e NodeMem
				if i < len(sr.Empty) {
					e = sr.Empty[i]
				}
				w("- %s (%s): heap %s → %s after the fill (in use %s → %s), RSS %s → %s\n", m.Node, role,
					fmtBytes(e.HeapAlloc), fmtBytes(m.HeapAlloc), fmtBytes(e.HeapInuse), fmtBytes(m.HeapInuse), fmtBytes(e.RSS), fmtBytes(m.RSS))
			}
			if len(sr.Filled) > 0 {
				w("- heap per task without the %d-byte payload: leader %s B, followers %s B (largest %s B)\n", PayloadSize,
					fmtNum(jf(sr.LeaderBytesPerTask-PayloadSize)), fmtNum(jf(sr.FollowerBytesPerTask-PayloadSize)), fmtNum(jf(sr.FollowerMaxBytesPerTask-PayloadSize)))
			}
			if sr.W1 != nil && sr.W1.Rate > 0 {
				w("- W1: %s tasks burned down in %.2f s (pre-insert %s tasks/s)\n", fmtNum(jf(sr.W1.Tasks)), sr.W1.Seconds, fmtNum(jf(sr.W1.PreInsertRate)))
			}
			if sr.RestoreSeconds > 0 {
				w("- snapshot at raft index %d: %s (%s B per task), saved in %.2f s; restored (%s tasks) in %.2f s, every node at the restored index after %.2f s\n",
					sr.SnapshotIndex, fmtBytes(float64(sr.SnapshotBytes)), fmtNum(jf(float64(sr.SnapshotBytes)/float64(sr.Tasks+w1Tasks(sr)))), sr.SnapshotSeconds,
					fmtNum(jf(sr.RestoredTasks)), sr.RestoreSeconds, sr.RestoreAllSeconds)
			}
			if cu := sr.CatchUp; cu != nil && cu.Seconds > 0 {
				w("- catch-up: %s, stopped, its data dir removed and started again with the same id and addresses, reached the leader's applied index (%d) %.2f s after its start, %s (installSnapshot RPCs received: %.0f); its health was ok after %.2f s\n",
					cu.Node, cu.AppliedIndex, cu.Seconds, cu.how(), cu.InstallSnapshots, cu.HealthSeconds)
			}
			w("- each node's -memory-limit %s; MemAvailable %s before the start", fmtBytes(float64(sr.MemoryLimit)), fmtBytes(float64(sr.MemAvailable)))
			if sr.ProjectedHeap > 0 {
				w("; projected heap of the 3 nodes from the previous size %s", fmtBytes(sr.ProjectedHeap))
			}
			w("; %s on disk at the end (3 data dirs and the backup file)\n\n", fmtBytes(float64(sr.DiskBytes)))
		}
	}
	w("How: each size runs once, in the first run, on a fresh 3-node cluster (agent defaults, retention 24 h, plus `-enable-debug`, `-raft-trailing-logs %d` and each node's `-memory-limit` at a third of 80%% of MemAvailable). "+
		"*fill*: N no-op tasks (%d-byte payloads) submitted in batches of %v from %v callers while the workers complete them, a chunk of 50,000 at a time once at most 200,000 submitted are not done; rate = N / (first submit → last durable completion). "+
		"*heap B/task*: after a forced GC on every node (GET /debug/pprof/heap?gc=1), go_memstats_heap_alloc_bytes from /metrics minus the same on the empty cluster, divided by N (payload included). "+
		"*W1*: the W1 burn-down of %v tasks on top of the N retained ones. "+
		"*snapshot*: `cronoq operator snapshot save` through the SDK (a barrier, raft's snapshot on the leader, streamed to a file, fsync'd); *restore*: `cronoq operator snapshot restore` of that file into the running cluster, until the call answers (the leader serves the restored state) and until every node's applied index reaches the restored snapshot's. "+
		"*caught up* (at %s only): a follower is stopped, its data dir removed, and it is started again with the same id and addresses; time from its start until its applied index reaches the leader's; whether the leader sent it a snapshot is read from its cronoq_raft_rpc_installSnapshot_count. "+
		"A size is not run when its heap, projected from the previous size's bytes per task, exceeds 80%% of MemAvailable (or its disk 80%% of the free space), and is stopped if MemAvailable falls under %.0f%% of the machine's memory.\n\n",
		scaleTrailingLogs, PayloadSize, rep.Options["batch"], rep.Options["w2_batch_callers"], rep.Options["w1_tasks"], fmtNum(jf(catchUpOf(rep))), scaleFloor*100)
	if len(skips) > 0 {
		w("Not run on %s: the scale curves are measured on cronoq only.\n\n", strings.Join(skips, ", "))
	}
	return b.String()
}

// w1Tasks is the number of W1 tasks run on top of a size.
func w1Tasks(sr *ScaleResult) int {
	if sr.W1 == nil {
		return 0
	}
	return sr.W1.Tasks
}

// catchUpOf is the catch-up size of the report's scale sizes.
func catchUpOf(rep *Report) int {
	if sizes, ok := rep.Options["scale_sizes"].([]int); ok {
		return catchUpSize(sizes)
	}
	var sizes []int
	for _, c := range scaleCells(rep) {
		sizes = append(sizes, c.Scale.Tasks)
	}
	return catchUpSize(sizes)
}

// writeScaleChart writes scale.svg into dir when the report has scale
// cells, and returns its path ("" otherwise).
func writeScaleChart(rep *Report, dir string) (string, error) {
	if len(scaleCells(rep)) == 0 {
		return "", nil
	}
	p := filepath.Join(dir, "scale.svg")
	if err := os.WriteFile(p, []byte(renderScaleChart(rep)), 0o644); err != nil {
		return "", fmt.Errorf("writing scale.svg: %w", err)
	}
	return p, nil
}

// renderScaleChart draws scale.svg: W1 tasks/s and fill tasks/s against N
// (left) and heap bytes per retained task of the leader and the followers
// against N (right), N on a log scale.
func renderScaleChart(rep *Report) string {
	const (
		W, H        = 1120, 480
		top, bottom = 60, 390
		lx0, lx1    = 80, 500
		rx0, rx1    = 610, 1090
		font        = `font-family="DejaVu Sans, Arial, sans-serif"`
		tick        = 11
	)
	cells := scaleCells(rep)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", W, H, W, H, font)
	w(`<rect width="%d" height="%d" fill="#fff"/>`+"\n", W, H)
	w(`<text x="%d" y="24" font-size="17" font-weight="bold">cronoq (3 copies) holding N retained ended tasks — fsync p50 %.2f ms, p99 %.2f ms</text>`+"\n", lx0-50, rep.Fsync.P50ms, rep.Fsync.P99ms)

	var ns []float64
	for _, c := range cells {
		ns = append(ns, float64(c.Scale.Tasks))
	}
	lo, hi := decades(ns)
	type series struct {
		name, color string
		dash        string
		val         func(*ScaleResult) float64
	}
	panel := func(x0, x1 int, title, unit string, ss []series) {
		w(`<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", x0, top-14, html.EscapeString(title))
		maxV := 0.0
		for _, c := range cells {
			for _, s := range ss {
				if v := s.val(c.Scale); v > 0 && !math.IsInf(v, 0) {
					maxV = math.Max(maxV, v)
				}
			}
		}
		maxV *= 1.1 // room for the labels above the highest point
		step := niceStep(maxV / 5)
		if step <= 0 {
			step = 1
		}
		ymax := math.Max(math.Ceil(maxV/step)*step, step)
		x := func(n float64) float64 {
			return float64(x0) + (math.Log10(n)-lo)/(hi-lo)*float64(x1-x0)
		}
		y := func(v float64) float64 { return bottom - v/ymax*float64(bottom-top) }
		for v := 0.0; v <= ymax+step/2; v += step {
			w(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", x0, x1, y(v), y(v))
			w(`<text x="%d" y="%.1f" font-size="%d" text-anchor="end" fill="#4a5568">%s</text>`+"\n", x0-6, y(v)+4, tick, fmtNum(jf(v)))
		}
		for e := lo; e <= hi; e++ {
			xv := x(math.Pow(10, e))
			w(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#e2e8f0"/>`+"\n", xv, xv, top, bottom)
			w(`<text x="%.1f" y="%d" font-size="%d" text-anchor="middle" fill="#4a5568">%s</text>`+"\n", xv, bottom+16, tick, fmtNum(jf(math.Pow(10, e))))
		}
		w(`<text x="%d" y="%d" font-size="11" text-anchor="middle" fill="#4a5568">retained tasks N (log scale)</text>`+"\n", (x0+x1)/2, bottom+32)
		w(`<text x="%d" y="%d" font-size="11" fill="#4a5568" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>`+"\n",
			x0-62, (top+bottom)/2, x0-62, (top+bottom)/2, html.EscapeString(unit))
		for _, c := range cells {
			if c.Scale.NotRun != "" {
				xv := x(float64(c.Scale.Tasks))
				w(`<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#c53030">not run</text>`+"\n", xv, bottom-6)
			}
		}
		for si, s := range ss {
			var pts []string
			for _, c := range cells {
				v := s.val(c.Scale)
				if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
					continue
				}
				xv, yv := x(float64(c.Scale.Tasks)), y(v)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xv, yv))
				w(`<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", xv, yv, s.color)
				w(`<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle" fill="%s">%s</text>`+"\n", xv, yv-8, s.color, fmtNum(jf(v)))
			}
			if len(pts) > 1 {
				w(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", strings.Join(pts, " "), s.color, s.dash)
			}
			lx := x0 + 10 + si*150
			w(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/><text x="%d" y="%d" font-size="12">%s</text>`+"\n",
				lx, lx+20, H-36, H-36, s.color, s.dash, lx+26, H-32, html.EscapeString(s.name))
		}
		w(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#1a202c"/>`+"\n", x0, x1, bottom, bottom)
	}
	panel(lx0, lx1, "Throughput on top of N retained tasks", "tasks/s", []series{
		{"W1 burn-down", sysColor["cronoq"], "", func(sr *ScaleResult) float64 {
			if sr.W1 == nil {
				return 0
			}
			return sr.W1.Rate
		}},
		{"fill (submit → done)", "#718096", "6 4", func(sr *ScaleResult) float64 { return sr.FillRate }},
	})
	panel(rx0, rx1, "Heap per retained task (after a forced GC)", "bytes/task, 256-byte payload included", []series{
		{"leader", "#2c5282", "", func(sr *ScaleResult) float64 {
			if len(sr.Filled) == 0 {
				return 0
			}
			return sr.LeaderBytesPerTask
		}},
		{"followers (mean)", "#4299e1", "6 4", func(sr *ScaleResult) float64 {
			if len(sr.Filled) == 0 {
				return 0
			}
			return sr.FollowerBytesPerTask
		}},
	})
	w("</svg>\n")
	return b.String()
}

// decades is the log10 range, in whole decades, that the values (at
// least 1 each) span: one decade at least, [0, 1] for none.
func decades(vs []float64) (lo, hi float64) {
	if len(vs) == 0 {
		return 0, 1
	}
	lo = math.Floor(math.Log10(math.Max(slices.Min(vs), 1)))
	hi = math.Ceil(math.Log10(math.Max(slices.Max(vs), 1)))
	return lo, max(hi, lo+1)
}
