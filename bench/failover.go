package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cronoq/cronoq/client"
)

// The failover workload (cronoq only): trials of killing the leader of the
// three agents with SIGKILL and timing, from the kill, the first submit
// acknowledged through the two survivors.
const (
	// failoverCallTimeout bounds each submit of the survivors' client: a
	// call held by a node without a leader is answered shortly before it
	// (the node's hold ends 200 ms before the caller's deadline), and the
	// next call follows at once.
	failoverCallTimeout = 500 * time.Millisecond
	// failoverPoll is how often the survivors' /v1/health is read.
	failoverPoll = 10 * time.Millisecond
	// failoverSteady is the interval of the light steady submits that run
	// through every trial, through a client that knows all three nodes.
	failoverSteady = 20 * time.Millisecond
	// failoverGiveUp ends a trial that sees no acknowledged submit.
	failoverGiveUp = 30 * time.Second
)

// FailoverResult is the trials of one failover cell.
type FailoverResult struct {
	Trials []FailoverTrial `json:"trials"`
	// Over the trials: kill → first submit acknowledged through the
	// survivors, in seconds.
	MedianS float64 `json:"median_s"`
	MinS    float64 `json:"min_s"`
	MaxS    float64 `json:"max_s"`
	// Medians of the breakdown over the trials, in seconds from the kill.
	LeaderLostS  float64 `json:"leader_lost_median_s"`
	NewLeaderS   float64 `json:"new_leader_median_s"`
	SteadyFailed int     `json:"steady_submits_failed"`
}

// FailoverTrial is one kill of the leader. Times are seconds from the
// SIGKILL.
type FailoverTrial struct {
	Killed string `json:"killed"`     // node id of the leader killed
	Leader string `json:"new_leader"` // node id of the next leader
	// The first survivor's /v1/health reporting no leader (its raft
	// heartbeat timeout passed): 0 when no poll saw that moment.
	LeaderLostS float64 `json:"leader_lost_s"`
	// The first survivor's /v1/health naming a leader other than the
	// killed one.
	NewLeaderS float64 `json:"new_leader_s"`
	// The first submit acknowledged through the survivors.
	AckS float64 `json:"ack_s"`
	// Submit calls of the survivors' client that failed before it.
	FailedCalls int `json:"failed_calls"`
	// The killed node back (same data dir) and every node reporting a
	// leader and status ok, from its restart.
	RejoinS float64 `json:"rejoin_s"`
}

// health is the part of /v1/health the trials read.
type failoverHealth struct {
	Leader string `json:"leader"`
	Status string `json:"status"`
}

func (s *cronoqSys) health(hc *http.Client, addr string) (failoverHealth, error) {
	var h failoverHealth
	resp, err := hc.Get(s.scheme() + addr + "/v1/health")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h, err
}

// leaderIndex returns the index of the node every node names as the
// leader.
func (s *cronoqSys) leaderIndex(ctx context.Context) (int, error) {
	hc := s.httpClient(time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		names := map[string]int{}
		for _, addr := range s.http {
			if h, err := s.health(hc, addr); err == nil && h.Leader != "" {
				names[h.Leader]++
			}
		}
		for name, n := range names {
			if n == len(s.http) {
				for i := range s.nodes {
					if fmt.Sprintf("n%d", i+1) == name {
						return i, nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the nodes do not agree on a leader within 30s: %v", names)
		}
		if !sleepFor(ctx, 50*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runFailover runs -failover-trials kills of the leader on a started
// cronoq cluster.
func runFailover(ctx context.Context, env *Env, sys System, res *CellResult) error {
	s, ok := sys.(*cronoqSys)
	if !ok || s.sec != nil || s.subscribe {
		return fmt.Errorf("failover: %s is not the cronoq system", sys.Name())
	}
	fr := &FailoverResult{}
	res.Failover = fr
	n := env.opts.failoverTrials
	var done atomic.Int64
	env.prog.track("killing the leader", &done, int64(n))

	// Light steady submits, through a client that knows every node.
	steady, err := client.New(s.http)
	if err != nil {
		return fmt.Errorf("creating the steady client: %w", err)
	}
	defer steady.Close()
	sctx, stopSteady := context.WithCancel(ctx)
	var steadyWG sync.WaitGroup
	var steadyFailed atomic.Int64
	steadyWG.Add(1)
	go func() {
		defer steadyWG.Done()
		t := time.NewTicker(failoverSteady)
		defer t.Stop()
		for seq := 1_000_000; ; seq++ {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(sctx, 5*time.Second)
			if _, err := steady.Submit(cctx, s.spec(seq)); err != nil && sctx.Err() == nil {
				steadyFailed.Add(1)
			}
			cancel()
		}
	}()
	defer func() {
		stopSteady()
		steadyWG.Wait()
		fr.SteadyFailed = int(steadyFailed.Load())
		fr.summarize()
	}()

	for i := 0; i < n; i++ {
		tr, err := s.failoverTrial(ctx, env, 2_000_000+i*1000)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		fr.Trials = append(fr.Trials, tr)
		done.Add(1)
	}
	return nil
}

// failoverTrial kills the leader, times the failover and brings the node
// back.
func (s *cronoqSys) failoverTrial(ctx context.Context, env *Env, seq int) (FailoverTrial, error) {
	var tr FailoverTrial
	// Let the cluster settle (a restarted node catches up) before the kill.
	if !sleepFor(ctx, time.Second) {
		return tr, ctx.Err()
	}
	li, err := s.leaderIndex(ctx)
	if err != nil {
		return tr, err
	}
	killed := fmt.Sprintf("n%d", li+1)
	tr.Killed = killed
	var survivors []string
	for i, a := range s.http {
		if i != li {
			survivors = append(survivors, a)
		}
	}
	c, err := client.New(survivors)
	if err != nil {
		return tr, fmt.Errorf("creating the survivors' client: %w", err)
	}
	defer c.Close()
	// One submit first, so that its connections are made before the kill.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = c.Submit(wctx, s.spec(seq))
	cancel()
	if err != nil {
		return tr, fmt.Errorf("submitting through the survivors before the kill: %w", err)
	}

	t0 := time.Now()
	if err := syscall.Kill(s.nodes[li].pid, syscall.SIGKILL); err != nil {
		return tr, fmt.Errorf("killing the leader %s: %w", killed, err)
	}

	// The survivors' health, until a new leader is named.
	pctx, stopPoll := context.WithCancel(ctx)
	var pollWG sync.WaitGroup
	var mu sync.Mutex
	pollWG.Add(len(survivors))
	for _, addr := range survivors {
		go func() {
			defer pollWG.Done()
			hc := s.httpClient(time.Second)
			for {
				h, err := s.health(hc, addr)
				at := time.Since(t0).Seconds()
				if err == nil {
					mu.Lock()
					if h.Leader == "" && tr.LeaderLostS == 0 {
						tr.LeaderLostS = at
					}
					if h.Leader != "" && h.Leader != killed && tr.NewLeaderS == 0 {
						tr.NewLeaderS, tr.Leader = at, h.Leader
					}
					got := tr.NewLeaderS != 0
					mu.Unlock()
					if got {
						return
					}
				}
				if !sleepFor(pctx, failoverPoll) {
					return
				}
			}
		}()
	}

	// Submits in a tight loop through the survivors.
	var ackErr error
	for k := 1; ; k++ {
		if time.Since(t0) > failoverGiveUp {
			ackErr = fmt.Errorf("no submit acknowledged through the survivors within %s", failoverGiveUp)
			break
		}
		cctx, cancel := context.WithTimeout(ctx, failoverCallTimeout)
		_, err := c.Submit(cctx, s.spec(seq+k))
		cancel()
		if err == nil {
			tr.AckS = time.Since(t0).Seconds()
			break
		}
		if ctx.Err() != nil {
			ackErr = ctx.Err()
			break
		}
		tr.FailedCalls++
	}
	// The new leader is named by now, or soon after.
	pctx2, cancelWait := context.WithTimeout(ctx, 5*time.Second)
	go func() {
		<-pctx2.Done()
		stopPoll()
	}()
	pollWG.Wait()
	cancelWait()
	stopPoll()

	// The killed node comes back with its data dir.
	if err := s.env.procs.stop(s.nodes[li], syscall.SIGKILL, 10*time.Second); err != nil {
		return tr, fmt.Errorf("reaping the killed leader: %w", err)
	}
	r0 := time.Now()
	if err := s.startNode(li); err != nil {
		return tr, fmt.Errorf("restarting %s: %w", killed, err)
	}
	if err := s.waitReady(ctx); err != nil {
		return tr, fmt.Errorf("after restarting %s: %w", killed, err)
	}
	tr.RejoinS = time.Since(r0).Seconds()
	return tr, ackErr
}

// summarize sets the median, min and max over the trials.
func (fr *FailoverResult) summarize() {
	var ack, lost, lead []float64
	for _, t := range fr.Trials {
		ack = append(ack, t.AckS)
		if t.LeaderLostS > 0 {
			lost = append(lost, t.LeaderLostS)
		}
		if t.NewLeaderS > 0 {
			lead = append(lead, t.NewLeaderS)
		}
	}
	if len(ack) == 0 {
		return
	}
	st := statOf(ack)
	fr.MedianS, fr.MinS, fr.MaxS = float64(st.Median), float64(st.Min), float64(st.Max)
	if len(lost) > 0 {
		fr.LeaderLostS = float64(statOf(lost).Median)
	}
	if len(lead) > 0 {
		fr.NewLeaderS = float64(statOf(lead).Median)
	}
}

// addMetrics adds the cell's metrics to its summary.
func (fr *FailoverResult) addMetrics(add func(string, float64)) {
	if len(fr.Trials) == 0 {
		return
	}
	add("failover_median_s", fr.MedianS)
	add("failover_min_s", fr.MinS)
	add("failover_max_s", fr.MaxS)
	add("leader_lost_median_s", fr.LeaderLostS)
	add("new_leader_median_s", fr.NewLeaderS)
}

func (fr *FailoverResult) line() string {
	return fmt.Sprintf("%d trials: kill -> first submit acked through the survivors median %.2fs (min %.2f, max %.2f); leader lost at %.2fs, new leader named at %.2fs (medians)",
		len(fr.Trials), fr.MedianS, fr.MinS, fr.MaxS, fr.LeaderLostS, fr.NewLeaderS)
}

// renderFailover renders the failover section: every trial of every run,
// and the median, min and max over all of them.
func renderFailover(rep *Report) string {
	var cells []CellResult
	for _, c := range rep.Cells {
		if c.Workload == "failover" && c.Failover != nil {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## Failover — SIGKILL of the leader of three nodes, default raft timings\n\n")
	var all []float64
	for _, c := range cells {
		for _, t := range c.Failover.Trials {
			all = append(all, t.AckS)
		}
	}
	if len(all) > 0 {
		st := statOf(all)
		w("Kill → first submit acknowledged through the survivors, over %d trials: **median %.2f s** (min %.2f, max %.2f).\n\n", len(all), float64(st.Median), float64(st.Min), float64(st.Max))
	}
	w("| run | trial | killed | new leader | leader lost s | new leader named s | first ack s | failed calls | rejoin s |\n")
	w("|---:|---:|---|---|---:|---:|---:|---:|---:|\n")
	for _, c := range cells {
		for i, t := range c.Failover.Trials {
			w("| %d | %d | %s | %s | %s | %.2f | **%.2f** | %d | %.1f |\n", c.Run, i+1, t.Killed, t.Leader, fmtLost(t.LeaderLostS), t.NewLeaderS, t.AckS, t.FailedCalls, t.RejoinS)
		}
	}
	w("\nEach trial: the leader (named by every node's /v1/health) gets SIGKILL; a fresh SDK client given only the two survivors' addresses (one submit made through it before the kill) submits one task per call in a tight loop, each call bounded by %s; "+
		"times run from the kill: *leader lost* when a survivor's /v1/health first reports no leader (its raft heartbeat timeout passed), *new leader named* when one first names another node, *first ack* when a submit returns. "+
		"/v1/health is read every %s. One submit every %s runs through a client of all three nodes all along. Then the killed node is restarted with its data dir and every node must report a leader and status ok (*rejoin*), and 1 s passes before the next kill.\n\n",
		failoverCallTimeout, failoverPoll, failoverSteady)
	var errs []string
	for _, c := range cells {
		if c.Error != "" {
			errs = append(errs, fmt.Sprintf("run %d: %s", c.Run, c.Error))
		}
	}
	if len(errs) > 0 {
		w("Failed: %s.\n\n", strings.Join(errs, "; "))
	}
	return b.String()
}

func fmtLost(v float64) string {
	if v == 0 || math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

// failoverSkip says why a system has no failover cells ("" when it has).
func failoverSkip(name string) string {
	if name == "cronoq" {
		return ""
	}
	return "the failover trials run on cronoq only"
}
