package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// jf is a float that encodes +Inf (never completed) as JSON null.
type jf float64

func (f jf) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// Report is everything written to report.json.
type Report struct {
	Started     time.Time         `json:"started"`
	Finished    time.Time         `json:"finished"`
	Interrupted bool              `json:"interrupted"`
	Machine     MachineInfo       `json:"machine"`
	Fsync       FsyncResult       `json:"fsync"`
	Options     map[string]any    `json:"options"`
	Versions    map[string]string `json:"versions"`
	Systems     []SystemInfo      `json:"systems"`
	Skipped     []Skip            `json:"skipped,omitempty"`
	Summary     []Summary         `json:"summary"`
	Cells       []CellResult      `json:"cells"`
}

// SystemInfo describes a system as measured.
type SystemInfo struct {
	Name       string    `json:"name"`
	Copies     int       `json:"copies"`
	Durability string    `json:"durability"`
	Config     string    `json:"config"`
	Settings   []Setting `json:"settings,omitempty"`
}

// Stat is the median and spread of one metric over the runs.
type Stat struct {
	Median jf  `json:"median"`
	Min    jf  `json:"min"`
	Max    jf  `json:"max"`
	N      int `json:"runs"`
}

func statOf(vs []float64) Stat {
	if len(vs) == 0 {
		return Stat{Median: jf(math.NaN()), Min: jf(math.NaN()), Max: jf(math.NaN())}
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: jf(med), Min: jf(s[0]), Max: jf(s[len(s)-1]), N: len(s)}
}

func (s Stat) ok() bool { return s.N > 0 }

// Summary aggregates the runs of one system under one workload (and rate).
type Summary struct {
	System   string          `json:"system"`
	Copies   int             `json:"copies"`
	Workload string          `json:"workload"`
	Rate     int             `json:"rate,omitempty"`
	Runs     int             `json:"runs"`
	Failed   int             `json:"failed_runs"`
	Metrics  map[string]Stat `json:"metrics"`
}

func reportOptions(o options) map[string]any {
	return map[string]any{
		"quick": o.quick, "runs": o.runs, "systems": o.systems, "workloads": o.workloads,
		"worker_concurrency": o.concurrency, "batch": o.batch, "payload_bytes": PayloadSize,
		"w1_tasks": o.w1Tasks, "w1_ordering_keys": o.w1OrderingKeys, "w2_single": o.w2Single, "w2_batched": o.w2Batched,
		"w2_concurrency": o.w2Concurrency, "w2_batch_callers": o.w2Callers,
		"w3_rates": o.w3Rates, "w3_duration": o.w3Duration.String(), "w3_drain": o.w3Drain.String(),
		"w3_submitters": o.w3Submitters, "w4_children": o.w4Children, "scale_sizes": o.scaleSizes, "failover_trials": o.failoverTrials,
		"raft_duration": o.raftDuration.String(), "raft_inflight": o.raftInflight,
		"river_pool": o.riverConns, "asynq_task_check_interval": o.asynqCheck.String(),
		"river_tuned_fetch_cooldown": o.riverTuned.fetchCooldown.String(), "river_tuned_fetch_poll_interval": o.riverTuned.fetchPollInterval.String(),
		"river_tuned_pool": o.riverTuned.pool, "asynq_tuned_task_check_interval": o.asynqTuned.taskCheckInterval.String(),
		"asynq_tuned_pool": o.asynqTuned.pool,
	}
}

// summarize groups the cells and takes median and spread of each metric
// over the runs that finished without error.
func summarize(rep *Report) {
	type key struct {
		sys, wl string
		rate    int
	}
	groups := map[key][]CellResult{}
	var order []key
	for _, c := range rep.Cells {
		k := key{c.System, c.Workload, c.Rate}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	sysIdx := func(s string) int {
		for i, x := range allSystems {
			if x == s {
				return i
			}
		}
		return len(allSystems)
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.wl != b.wl {
			return a.wl < b.wl
		}
		if a.rate != b.rate {
			return a.rate < b.rate
		}
		return sysIdx(a.sys) < sysIdx(b.sys)
	})
	rep.Summary = nil
	for _, k := range order {
		cs := groups[k]
		sm := Summary{System: k.sys, Workload: k.wl, Rate: k.rate, Runs: len(cs), Metrics: map[string]Stat{}}
		vals := map[string][]float64{}
		add := func(name string, v float64) { vals[name] = append(vals[name], v) }
		for _, c := range cs {
			sm.Copies = c.Copies
			if c.Error != "" {
				sm.Failed++
				continue
			}
			add("server_cpu_s", c.ServerCPUs)
			add("client_cpu_s", c.ClientCPUs)
			switch {
			case c.W1 != nil:
				add("tasks_per_s", c.W1.Rate)
				add("seconds", c.W1.Seconds)
				add("pre_insert_tasks_per_s", c.W1.PreInsertRate)
				add("server_cpu_us_per_task", c.ServerCPUs/float64(c.W1.Tasks)*1e6)
				if e := c.W1.Elections; e != nil && e.Error == "" {
					add("elections", float64(e.Elections))
				}
			case c.W2 != nil:
				add("single_tasks_per_s", c.W2.SingleRate)
				add("single_p50_ms", c.W2.SingleP50ms)
				add("single_p99_ms", c.W2.SingleP99ms)
				if c.W2.BatchNotAvail == "" {
					add("batch_tasks_per_s", c.W2.BatchRate)
				}
			case c.W3 != nil:
				add("completed_in_window_per_s", c.W3.InWindowRate)
				add("p50_ms", float64(c.W3.P50ms))
				add("p90_ms", float64(c.W3.P90ms))
				add("p99_ms", float64(c.W3.P99ms))
				add("submit_p50_ms", c.W3.SubmitP50ms)
				add("submit_p99_ms", c.W3.SubmitP99ms)
				add("start_p50_ms", c.W3.StartP50ms)
				add("start_p99_ms", c.W3.StartP99ms)
				add("not_completed", float64(c.W3.Offered-c.W3.Completed))
			case c.W4 != nil:
				add("seconds", c.W4.Seconds)
				add("children_per_s", c.W4.ChildrenRate)
				add("submit_ack_ms", c.W4.SubmitAckMs)
				add("spawn_commit_s", c.W4.SpawnCommitS)
				add("first_child_s", c.W4.FirstChildS)
			case c.Failover != nil:
				c.Failover.addMetrics(add)
			case c.Raft != nil:
				add("applies_per_s", c.Raft.Rate)
				add("apply_p50_ms", c.Raft.P50ms)
				add("apply_p99_ms", c.Raft.P99ms)
			}
		}
		for name, v := range vals {
			sm.Metrics[name] = statOf(v)
		}
		rep.Summary = append(rep.Summary, sm)
	}
}

func (rep *Report) find(sys, wl string, rate int) *Summary {
	for i := range rep.Summary {
		s := &rep.Summary[i]
		if s.System == sys && s.Workload == wl && s.Rate == rate {
			return s
		}
	}
	return nil
}

// writeReport writes report.md, report.json and chart.svg into dir, and
// points outDir/latest at dir.
func writeReport(rep *Report, dir, outDir string) ([]string, error) {
	summarize(rep)
	var paths []string
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding report.json: %w", err)
	}
	files := map[string][]byte{
		"report.json": js,
		"report.md":   []byte(renderMarkdown(rep)),
		"chart.svg":   []byte(renderChart(rep)),
	}
	for _, name := range []string{"report.md", "report.json", "chart.svg"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
		paths = append(paths, p)
	}
	if p, err := writeScaleChart(rep, dir); err != nil {
		return nil, err
	} else if p != "" {
		paths = append(paths, p)
	}
	latest := filepath.Join(outDir, "latest")
	_ = os.Remove(latest)
	_ = os.Symlink(filepath.Base(dir), latest)
	return paths, nil
}

// fmtNum formats a rate or count with thousands separators.
func fmtNum(v jf) string {
	f := float64(v)
	if math.IsInf(f, 1) {
		return "n/c"
	}
	if math.IsNaN(f) {
		return "—"
	}
	n := int64(math.Round(f))
	s := fmt.Sprintf("%d", n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtMs formats milliseconds; +Inf means the quantile never completed.
func fmtMs(v jf) string {
	f := float64(v)
	switch {
	case math.IsInf(f, 1):
		return "n/c"
	case math.IsNaN(f):
		return "—"
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	}
	return fmt.Sprintf("%.2f", f)
}

func fmtSec(v jf) string {
	if math.IsNaN(float64(v)) {
		return "—"
	}
	return fmt.Sprintf("%.1f", float64(v))
}

// spread formats min–max of a stat when there was more than one run.
func spread(s Stat, f func(jf) string) string {
	if s.N < 2 {
		return "—"
	}
	return f(s.Min) + "–" + f(s.Max)
}

func copiesCell(sys string, copies int) string {
	switch {
	case copies == 3:
		return "3 (raft, fsync on every node)"
	case strings.HasPrefix(sys, "asynq-everysec"):
		return "1 (fsync ≤1 s later)"
	default:
		return "1"
	}
}

func renderMarkdown(rep *Report) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# cronoq vs River vs asynq — %s\n\n", rep.Started.Format("2006-01-02 15:04 MST"))
	if rep.Interrupted {
		w("**Interrupted**: only the cells that finished are reported.\n\n")
	}
	m := rep.Machine
	w("Machine: %d CPUs (%s), %d GiB, %s, kernel %s, %s; load average at start %s.\n\n", m.CPUs, m.CPUModel, m.MemoryGiB, m.OS, m.Kernel, m.GoVersion, m.LoadAvg)
	f := rep.Fsync
	w("**Disk fsync latency** (%d × 4 KiB write + fsync on %s, the filesystem of every server's data): **p50 %.2f ms, p99 %.2f ms** (max %.2f ms).\n\n",
		f.Samples, f.FS, f.P50ms, f.P99ms, f.MaxMs)
	w("**Copies**: cronoq keeps **three** copies of every acknowledged write (a 3-node raft cluster, fsync on every node, acknowledged once a majority has it); " +
		"River and asynq keep **one** (one PostgreSQL or Redis server). asynq-everysec(-tuned) acknowledges before its fsync. " +
		"The peers run with their library defaults and, in the *-tuned rows, tuned for latency and throughput (see \"Peer settings\"). " +
		"Every server, client and worker runs on this one machine, so the three cronoq nodes share its CPUs and disk.\n\n")
	w("Runs per cell: %v; systems alternated (the order rotates every run); each cell starts its servers from empty data dirs. Numbers are the median over the runs, with the spread (min–max) beside them. Payloads are %d bytes; workers are no-ops with %v slots per system.\n\n",
		rep.Options["runs"], PayloadSize, rep.Options["worker_concurrency"])
	w("%s\n", renderTables(rep))

	w("%s", renderPeerSettings(rep))
	w("## Systems and settings\n\n")
	for _, s := range rep.Systems {
		w("- **%s** — %d cop%s. %s.\n  Settings: %s.\n", s.Name, s.Copies, map[bool]string{true: "y", false: "ies"}[s.Copies == 1], s.Durability, s.Config)
	}
	w("- **bare raft** — 3 in-process hashicorp/raft nodes in the benchmark process, raft-boltdb v2 with fsync, log cache 512, TCP transport on loopback, raft.DefaultConfig: the storage and settings a cronoq agent uses, with a counting FSM. It applies one %d-byte entry per Apply with %v applies in flight: the limit of a replicated log that commits one entry per task on this disk.\n\n", PayloadSize, rep.Options["raft_inflight"])

	w("## How each number is measured\n\n")
	w("- **W1 burn-down**: %v tasks are pre-inserted (batches of %v where the API has batches, else %v concurrent single enqueues), then the workers start; rate = tasks / (worker start → the last durable completion). A completion counts when the worker learns it is durable: cronoq's CompleteAck from the leader (sent after the commit), River's JobCompleted event (sent after the completer's UPDATE commits), the reply to asynq's \"done\" script (sent after Redis's AOF write). The store's own completed count is checked afterwards.\n", rep.Options["w1_tasks"], rep.Options["batch"], rep.Options["w2_concurrency"])
	w("- **W2 enqueue**: %v tasks one per call from %v concurrent callers (closed loop; p50/p99 of a call), then %v tasks in batches of %v from %v concurrent callers, no workers running.\n", rep.Options["w2_single"], rep.Options["w2_concurrency"], rep.Options["w2_batched"], rep.Options["batch"], rep.Options["w2_batch_callers"])
	w("- **W3 open loop**: after 200 warm-up tasks, task i is due at t0 + i/rate for %v, submitted one per call by up to %v concurrent submitters; latency runs from its due time (not from when a submitter got to it) to its durable completion. Tasks still waiting for a submitter when the window closes, and tasks not completed within %v after it, count as never completed (n/c); a quantile that falls on them shows n/c. \"completed/s\" counts completions inside the window.\n", rep.Options["w3_duration"], rep.Options["w3_submitters"], rep.Options["w3_drain"])
	if hasW4(rep) {
		w("- **W4 fan-out** (cronoq only): after 200 warm-up tasks, one root task is submitted; its handler spawns %v no-op children (no payload) and a continuation that depends on every one of them, all in its one completion (the SDK's Job.Spawn and Job.Then), which inserts them in the commit of the root's success. The time runs from the submit call to Client.Wait reporting the continuation succeeded; children/s = children / that time. Along the way: the root's submit acknowledged, its completion acknowledged to its worker (*spawn committed*: the children are committed with it), and a handler beginning the first child. Afterwards the store's succeeded count and the number of dependencies the continuation's grant carried are checked.\n", rep.Options["w4_children"])
	}
	w("- **CPU**: user+system seconds of the server process trees (/proc/PID/stat utime+stime, plus reaped children) over the measured window; client CPU is this benchmark process (submitters and workers of the system under test).\n\n")

	w("## Versions\n\n")
	keys := make([]string, 0, len(rep.Versions))
	for k := range rep.Versions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w("- %s: %s\n", k, rep.Versions[k])
	}
	var errs []string
	for _, c := range rep.Cells {
		if c.Error != "" {
			errs = append(errs, fmt.Sprintf("- %s %s run %d: %s", c.System, cellWl(c), c.Run, c.Error))
		}
	}
	if len(errs) > 0 {
		w("\n## Failed or incomplete cells\n\n%s\n", strings.Join(errs, "\n"))
	}
	w("\nStarted %s, finished %s (%s).\n", rep.Started.Format(time.RFC3339), rep.Finished.Format(time.RFC3339), rep.Finished.Sub(rep.Started).Round(time.Second))
	return b.String()
}

// hasW4 reports whether the report has W4 cells or W4 skipped.
func hasW4(rep *Report) bool {
	for _, c := range rep.Cells {
		if c.Workload == "w4" {
			return true
		}
	}
	for _, sk := range rep.Skipped {
		if sk.Workload == "w4" {
			return true
		}
	}
	return false
}

// perRun lists one metric of the runs of a system under a workload, in
// run order ("failed" for a run that did not finish).
func perRun(rep *Report, sys, wl string, f func(CellResult) string) string {
	var out []string
	for _, c := range rep.Cells {
		if c.System != sys || c.Workload != wl {
			continue
		}
		if c.Error != "" {
			out = append(out, "failed")
			continue
		}
		out = append(out, f(c))
	}
	return strings.Join(out, " / ")
}

// fmtSec2 formats seconds to the hundredth.
func fmtSec2(v jf) string {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f", float64(v))
}

func cellWl(c CellResult) string {
	if c.Workload == "w3" {
		return fmt.Sprintf("W3 %d/s", c.Rate)
	}
	return wlName(c.Workload)
}

// renderTables renders the result tables (also printed on stdout).
func renderTables(rep *Report) string {
	if rep.Summary == nil {
		summarize(rep)
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	has := func(wl string) bool {
		for _, s := range rep.Summary {
			if s.Workload == wl {
				return true
			}
		}
		return false
	}
	systems := func(wl string, rate int) []*Summary {
		var out []*Summary
		for _, name := range allSystems {
			if s := rep.find(name, wl, rate); s != nil {
				out = append(out, s)
			}
		}
		return out
	}
	if has("w1") {
		w("## W1 — burn-down of %v pre-inserted no-op tasks\n\n", rep.Options["w1_tasks"])
		w("| system | copies | tasks/s | spread | runs ok | server CPU s | server CPU µs/task | client CPU s | pre-insert tasks/s | elections during W1, per run |\n")
		w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range systems("w1", 0) {
			r := s.Metrics["tasks_per_s"]
			w("| %s | %s | **%s** | %s | %d/%d | %s | %s | %s | %s | %s |\n", s.System, copiesCell(s.System, s.Copies),
				fmtNum(r.Median), spread(r, fmtNum), s.Runs-s.Failed, s.Runs,
				fmtSec(s.Metrics["server_cpu_s"].Median), fmtNum(s.Metrics["server_cpu_us_per_task"].Median),
				fmtSec(s.Metrics["client_cpu_s"].Median), fmtNum(s.Metrics["pre_insert_tasks_per_s"].Median),
				electionsCell(rep, s.System))
		}
		w("\n")
		w("%s", renderElections(rep))
	}
	if has("raft") {
		w("## Replicated-log limit — bare hashicorp/raft, 3 nodes, %d-byte entries, %v in flight\n\n", PayloadSize, rep.Options["raft_inflight"])
		w("| harness | copies | applies/s | spread | apply p50 ms | apply p99 ms | CPU s (all 3 nodes) |\n")
		w("|---|---|---:|---:|---:|---:|---:|\n")
		if s := rep.find("raft", "raft", 0); s != nil {
			r := s.Metrics["applies_per_s"]
			w("| bare raft | 3 (fsync on every node) | **%s** | %s | %s | %s | %s |\n", fmtNum(r.Median), spread(r, fmtNum),
				fmtMs(s.Metrics["apply_p50_ms"].Median), fmtMs(s.Metrics["apply_p99_ms"].Median), fmtSec(s.Metrics["client_cpu_s"].Median))
		}
		w("\n")
	}
	if has("w2") {
		w("## W2 — enqueue rate\n\n")
		w("| system | copies | one per call: tasks/s | spread | call p50 ms | call p99 ms | batched (%v/call): tasks/s | spread |\n", rep.Options["batch"])
		w("|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range systems("w2", 0) {
			r := s.Metrics["single_tasks_per_s"]
			bt := s.Metrics["batch_tasks_per_s"]
			batch, bspread := "n/a (no batch API)", "—"
			if bt.ok() {
				batch, bspread = "**"+fmtNum(bt.Median)+"**", spread(bt, fmtNum)
			}
			w("| %s | %s | **%s** | %s | %s | %s | %s | %s |\n", s.System, copiesCell(s.System, s.Copies),
				fmtNum(r.Median), spread(r, fmtNum), fmtMs(s.Metrics["single_p50_ms"].Median), fmtMs(s.Metrics["single_p99_ms"].Median), batch, bspread)
		}
		w("\n")
	}
	if has("w3") {
		w("## W3 — open loop, submit → durable completion\n\n")
		w("| system | copies | offered/s | completed/s in window | p50 ms | p99 ms | p99 spread | never completed | submit p99 ms | started p50 / p99 ms | server CPU s |\n")
		w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, rate := range w3Rates(rep) {
			for _, s := range systems("w3", rate) {
				p99 := s.Metrics["p99_ms"]
				w("| %s | %s | %s | %s | **%s** | **%s** | %s | %s | %s | %s / %s | %s |\n", s.System, copiesCell(s.System, s.Copies),
					fmtNum(jf(rate)), fmtNum(s.Metrics["completed_in_window_per_s"].Median),
					fmtMs(s.Metrics["p50_ms"].Median), fmtMs(p99.Median), spread(p99, fmtMs),
					fmtNum(s.Metrics["not_completed"].Median), fmtMs(s.Metrics["submit_p99_ms"].Median),
					fmtMs(s.Metrics["start_p50_ms"].Median), fmtMs(s.Metrics["start_p99_ms"].Median), fmtSec(s.Metrics["server_cpu_s"].Median))
			}
		}
		w("\n")
		w("W3 latencies run from a task's due time: *submit* to the acknowledgement of its submit, *started* to a handler beginning it, and p50/p99 to its durable completion.\n\n")
	}
	if hasW4(rep) {
		w("## W4 — fan-out: one task spawns %v no-op children and a continuation that depends on all of them\n\n", rep.Options["w4_children"])
		if ss := systems("w4", 0); len(ss) > 0 {
			w("| system | copies | submit → continuation succeeded s | spread | per run s | children/s | spread | submit acked ms | spawn committed s | first child started s | runs ok | server CPU s |\n")
			w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, s := range ss {
				t, r := s.Metrics["seconds"], s.Metrics["children_per_s"]
				runs := perRun(rep, s.System, "w4", func(c CellResult) string { return fmtSec2(jf(c.W4.Seconds)) })
				w("| %s | %s | **%s** | %s | %s | **%s** | %s | %s | %s | %s | %d/%d | %s |\n", s.System, copiesCell(s.System, s.Copies),
					fmtSec2(t.Median), spread(t, fmtSec2), runs, fmtNum(r.Median), spread(r, fmtNum),
					fmtMs(s.Metrics["submit_ack_ms"].Median), fmtSec2(s.Metrics["spawn_commit_s"].Median), fmtSec2(s.Metrics["first_child_s"].Median),
					s.Runs-s.Failed, s.Runs, fmtSec(s.Metrics["server_cpu_s"].Median))
			}
			w("\n")
		}
		var why []string
		by := map[string][]string{}
		for _, sk := range rep.Skipped {
			if sk.Workload != "w4" {
				continue
			}
			if by[sk.Reason] == nil {
				why = append(why, sk.Reason)
			}
			by[sk.Reason] = append(by[sk.Reason], sk.System)
		}
		for _, r := range why {
			w("Not run on %s: %s.\n\n", strings.Join(by[r], ", "), r)
		}
	}
	w("%s", renderFailover(rep))
	w("%s", renderSecureAB(rep))
	w("%s", renderSubAB(rep))
	w("%s", renderScale(rep))
	w("Fsync latency of this disk: p50 %.2f ms, p99 %.2f ms. River and asynq keep one copy of each task; cronoq keeps three.\n", rep.Fsync.P50ms, rep.Fsync.P99ms)
	return b.String()
}

// electionsCell lists the elections during each W1 run of a cronoq
// system ("n/a" for the peers, "?" for a run whose count failed).
func electionsCell(rep *Report, sys string) string {
	if !isCronoq(sys) {
		return "n/a (no raft)"
	}
	return perRun(rep, sys, "w1", func(c CellResult) string {
		switch e := c.W1.Elections; {
		case e == nil || e.Error != "":
			return "?"
		default:
			return strconv.Itoa(e.Elections)
		}
	})
}

// renderElections lists, per W1 cell of a cronoq system, the raft
// elections during its measured window.
func renderElections(rep *Report) string {
	var lines []string
	for _, c := range rep.Cells {
		if c.Workload != "w1" || !isCronoq(c.System) || c.W1 == nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("- %s run %d: %s", c.System, c.Run, c.W1.Elections.Summary()))
	}
	if len(lines) == 0 {
		return ""
	}
	return "Raft elections during each W1 burn-down (every node's `/metrics` read just before the workers start and at the last durable completion: " +
		"elections = increase of `cronoq_raft_state_candidate` summed over the nodes, won = of `cronoq_raft_state_leader`, leader changes = the largest increase of " +
		"`cronoq_leader_changes_total` on a node, epoch = of `cronoq_epoch`):\n\n" + strings.Join(lines, "\n") + "\n\n"
}

// renderPeerSettings sets the settings of each peer library's systems side
// by side, default and tuned.
func renderPeerSettings(rep *Report) string {
	var b strings.Builder
	for _, lib := range []string{"river", "asynq"} {
		var cols []SystemInfo
		for _, si := range rep.Systems {
			if strings.HasPrefix(si.Name, lib) && len(si.Settings) > 0 {
				cols = append(cols, si)
			}
		}
		if len(cols) == 0 {
			continue
		}
		var names []string
		vals := map[string]map[string]string{}
		for _, si := range cols {
			for _, st := range si.Settings {
				if vals[st.Name] == nil {
					names = append(names, st.Name)
					vals[st.Name] = map[string]string{}
				}
				vals[st.Name][si.Name] = st.Value
			}
		}
		fmt.Fprintf(&b, "| %s setting |", lib)
		for _, si := range cols {
			fmt.Fprintf(&b, " %s |", si.Name)
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
		for _, n := range names {
			fmt.Fprintf(&b, "| %s |", n)
			for _, si := range cols {
				v, ok := vals[n][si.Name]
				if !ok {
					v = "—"
				}
				fmt.Fprintf(&b, " %s |", strings.ReplaceAll(v, "|", "\\|"))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return ""
	}
	return "## Peer settings: library defaults and tuned\n\n" +
		"Each peer runs with its library's defaults and tuned for low latency and high throughput after its own documentation (the *-tuned systems; " +
		"the sources are in `bench/river.go` and `bench/asynq.go` and in bench/README.md). Both rows of a library run the same server and the same workers otherwise.\n\n" +
		b.String()
}

func w3Rates(rep *Report) []int {
	seen := map[int]bool{}
	var rates []int
	for _, s := range rep.Summary {
		if s.Workload == "w3" && !seen[s.Rate] {
			seen[s.Rate] = true
			rates = append(rates, s.Rate)
		}
	}
	sort.Ints(rates)
	return rates
}
