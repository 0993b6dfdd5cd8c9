package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nodes"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// Process is the history process of every nemesis operation.
const Process = "nemesis"

// Env is what the fault injectors act on.
type Env struct {
	Rec     *history.Recorder
	Cluster *nodes.Cluster
	Monitor *nodes.Monitor
	Net     *Net
	Workers map[string]*workload.Worker
	Queue   *workload.Queue
	Cron    *workload.Cron
	// Workflows is the workflow workload, WorkflowWorkers its workers
	// (also in Workers).
	Workflows       *workload.Workflows
	WorkflowWorkers []string
	// Lanes is the ordering workload, LaneWorkers its workers (also in
	// Workers).
	Lanes       *workload.Lanes
	LaneWorkers []string
	// Delivery is the delivery workload (durable subscriptions).
	Delivery *workload.Delivery
	Rand     *rand.Rand
	// SnapshotFlags reports whether the nodes run with a small snapshot
	// threshold (so an isolated follower is caught up by a snapshot).
	SnapshotFlags bool

	mu       sync.Mutex
	clockSet map[string]bool
	diskSet  map[string]bool
	// ran maps scenario numbers (JEPSEN.md section C) to the steps that
	// exercised them.
	ran map[int][]string
}

// MarkRan records that step exercised scenarios.
func (e *Env) MarkRan(step string, scenarios ...int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ran == nil {
		e.ran = map[int][]string{}
	}
	for _, s := range scenarios {
		e.ran[s] = append(e.ran[s], step)
	}
}

// Ran returns the scenarios exercised so far.
func (e *Env) Ran() map[int][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[int][]string{}
	for k, v := range e.ran {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func (e *Env) record(f string, v *history.Value, fn func() error) error {
	done := e.Rec.Invoke(Process, f, "", v)
	err := fn()
	if err != nil {
		done(history.Fail, v, err)
		return err
	}
	done(history.OK, v, nil)
	return nil
}

// Leader returns the current stable leader, waiting up to 10s for one.
func (e *Env) Leader(ctx context.Context) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return e.Monitor.WaitLeader(wctx)
}

// Followers returns the node ids other than leader.
func (e *Env) Followers(leader string) []string {
	var out []string
	for _, id := range e.Cluster.IDs() {
		if id != leader {
			out = append(out, id)
		}
	}
	return out
}

func (e *Env) ip(id string) string {
	if n := e.Cluster.Node(id); n != nil {
		return n.IP
	}
	if w := e.Workers[id]; w != nil {
		return w.IP()
	}
	return id
}

// Partition applies g (keys and values are node or worker names), probes
// every cut link, and records both.
func (e *Env) Partition(ctx context.Context, name string, g map[string][]string, scenarios ...int) error {
	ipg := Grudge{}
	for dst, srcs := range g {
		for _, src := range srcs {
			ipg.Add(e.ip(src), e.ip(dst))
		}
	}
	v := &history.Value{Nemesis: name, Grudge: g, Scenarios: scenarios}
	if err := e.record("partition", v, func() error { return e.Net.Apply(ipg) }); err != nil {
		return err
	}
	return e.probe(ctx, ipg)
}

func (e *Env) probe(ctx context.Context, g Grudge) error {
	done := e.Rec.Invoke(Process, "probe", "", nil)
	res := Probe(ctx, g, nodes.RaftPort, 400*time.Millisecond)
	v := &history.Value{Detail: fmt.Sprintf("%d cut links probed", res.Checked)}
	if len(res.Leaks) > 0 {
		err := fmt.Errorf("cut links still open: %s", strings.Join(res.Leaks, "; "))
		done(history.Fail, v, err)
		return err
	}
	done(history.OK, v, nil)
	return nil
}

// Heal removes every partition.
func (e *Env) Heal(ctx context.Context) error {
	return e.record("heal", &history.Value{}, func() error { return e.Net.Heal() })
}

// Kill kills node id (SIGKILL to its process group).
func (e *Env) Kill(ctx context.Context, id string, scenarios ...int) error {
	return e.record("kill", &history.Value{Targets: []string{id}, Scenarios: scenarios}, func() error {
		return e.Cluster.Node(id).Kill()
	})
}

// Start starts node id on its data dir.
func (e *Env) Start(ctx context.Context, id string) error {
	return e.record("start", &history.Value{Targets: []string{id}}, func() error {
		n := e.Cluster.Node(id)
		if n.Running() {
			return nil
		}
		return n.Start()
	})
}

// Pause stops node id with SIGSTOP.
func (e *Env) Pause(ctx context.Context, id string, scenarios ...int) error {
	return e.record("pause", &history.Value{Targets: []string{id}, Scenarios: scenarios}, func() error {
		return e.Cluster.Node(id).Pause()
	})
}

// Resume continues node id with SIGCONT.
func (e *Env) Resume(ctx context.Context, id string) error {
	return e.record("resume", &history.Value{Targets: []string{id}}, func() error {
		err := e.Cluster.Node(id).Resume()
		if errors.Is(err, nodes.ErrNotRunning) {
			return nil
		}
		return err
	})
}

// Clock sets node id's injected clock. hold is how long it stays so: the
// recorded skew bound is |offset| + |rate-1|*hold.
func (e *Env) Clock(ctx context.Context, id string, offset time.Duration, rate float64, hold time.Duration, scenarios ...int) error {
	bound := offset.Milliseconds()
	if bound < 0 {
		bound = -bound
	}
	drift := (rate - 1) * float64(hold.Milliseconds())
	if drift < 0 {
		drift = -drift
	}
	bound += int64(drift)
	v := &history.Value{Targets: []string{id}, OffsetMS: bound, Rate: rate, Scenarios: scenarios,
		Detail: fmt.Sprintf("offset %s rate %g", offset, rate)}
	return e.record("clock", v, func() error {
		e.mu.Lock()
		if e.clockSet == nil {
			e.clockSet = map[string]bool{}
		}
		e.clockSet[id] = offset != 0 || rate != 1
		e.mu.Unlock()
		return e.Cluster.Admin.Clock(ctx, e.Cluster.Node(id).HTTPAddr(), offset, rate)
	})
}

// Disk sets node id's disk faults.
func (e *Env) Disk(ctx context.Context, id string, delay, stall time.Duration) error {
	v := &history.Value{Targets: []string{id}, Detail: fmt.Sprintf("fsync delay %s, stall %s", delay, stall)}
	return e.record("disk", v, func() error {
		e.mu.Lock()
		if e.diskSet == nil {
			e.diskSet = map[string]bool{}
		}
		e.diskSet[id] = delay > 0 || stall > 0
		e.mu.Unlock()
		return e.Cluster.Admin.Disk(ctx, e.Cluster.Node(id).HTTPAddr(), delay, stall)
	})
}

// Zombie pauses harness worker name for d.
func (e *Env) Zombie(ctx context.Context, name string, d time.Duration, scenarios ...int) error {
	return e.record("zombie", &history.Value{Targets: []string{name}, Scenarios: scenarios, Detail: d.String()}, func() error {
		w := e.Workers[name]
		if w == nil {
			return fmt.Errorf("no worker %s", name)
		}
		w.Zombie(d)
		return nil
	})
}

// HealAll undoes every fault: partitions, pauses, clocks, disks; starts the
// nodes that are down.
func (e *Env) HealAll(ctx context.Context) error {
	var errs []error
	errs = append(errs, e.Heal(ctx))
	for _, n := range e.Cluster.Nodes {
		if n.Paused() {
			errs = append(errs, e.Resume(ctx, n.ID))
		}
	}
	for _, n := range e.Cluster.Nodes {
		if !n.Running() {
			errs = append(errs, e.Start(ctx, n.ID))
		}
	}
	e.mu.Lock()
	var clocks, disks []string
	for id, set := range e.clockSet {
		if set {
			clocks = append(clocks, id)
		}
	}
	for id, set := range e.diskSet {
		if set {
			disks = append(disks, id)
		}
	}
	e.mu.Unlock()
	sort.Strings(clocks)
	sort.Strings(disks)
	for _, id := range clocks {
		errs = append(errs, e.retryAdmin(ctx, func() error { return e.Clock(ctx, id, 0, 1, 0) }))
	}
	for _, id := range disks {
		errs = append(errs, e.retryAdmin(ctx, func() error { return e.Disk(ctx, id, 0, 0) }))
	}
	return errors.Join(errs...)
}

// retryAdmin retries an admin call for up to 15s (a restarted node takes a
// moment to listen).
func (e *Env) retryAdmin(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// SnapshotInstalled reports whether node id's log mentions installing a
// snapshot sent by the leader after offset bytes.
func SnapshotInstalled(logPath string, offset int64) bool {
	b, err := os.ReadFile(logPath)
	if err != nil || int64(len(b)) < offset {
		return false
	}
	s := strings.ToLower(string(b[offset:]))
	return strings.Contains(s, "installed remote snapshot") || strings.Contains(s, "installing snapshot") && strings.Contains(s, "restored")
}

// LogSize is the current size of a file (0 when missing).
func LogSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
