package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/cronoq/cronoq/jepsen/history"
)

// Scenarios names the scenarios of JEPSEN.md section C.
var Scenarios = map[int]string{
	1:  "isolated leader, worker still attached",
	2:  "leader change during an in-flight batch",
	3:  "dispatch before commit",
	4:  "heartbeats to a stale leader",
	5:  "stale status read",
	6:  "paused worker (GC-pause analogue)",
	7:  "paused leader resumes",
	8:  "kill -9 between commit and reply",
	9:  "cron slot at failover plus clock skew",
	10: "clock jump or fast clock on the leader",
	11: "snapshot install after a long partition",
	12: "cancel racing completion across failover, then whole-cluster kill",
}

// Step is one fault of a schedule: Run injects it, holds it and undoes it.
type Step struct {
	Name      string
	Scenarios []int
	Run       func(ctx context.Context, e *Env) error
	// Gap is the quiet time after the step.
	Gap time.Duration
}

// Schedule is a named sequence of steps.
type Schedule struct {
	Name  string
	Steps []Step
	// Repeat the steps until the fault phase lasted this long (0: once).
	Until time.Duration
}

// Run executes the schedule. A failing step is recorded and the schedule
// goes on; every step undoes its own fault.
func (s Schedule) Run(ctx context.Context, e *Env) {
	start := time.Now()
	for round := 0; ctx.Err() == nil; round++ {
		for _, st := range s.Steps {
			if ctx.Err() != nil {
				return
			}
			if s.Until > 0 && time.Since(start) >= s.Until {
				return
			}
			done := e.Rec.Invoke(Process, "step", "", &history.Value{Nemesis: st.Name, Scenarios: st.Scenarios})
			err := st.Run(ctx, e)
			if err != nil {
				done(history.Fail, &history.Value{Nemesis: st.Name, Scenarios: st.Scenarios}, err)
			} else {
				done(history.OK, &history.Value{Nemesis: st.Name, Scenarios: st.Scenarios}, nil)
				e.MarkRan(st.Name, st.Scenarios...)
			}
			if !hold(ctx, st.Gap) {
				return
			}
		}
		if s.Until == 0 {
			return
		}
	}
}

func hold(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// The steps. Each undoes what it did, also when ctx ends early.

func isolateLeaderWithWorker(worker string, d time.Duration) Step {
	return Step{Name: "isolate-leader+" + worker, Scenarios: []int{1, 4, 5}, Gap: 2 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			l, err := e.Leader(ctx)
			if err != nil {
				return err
			}
			g := map[string][]string{}
			for _, f := range e.Followers(l) {
				g[f] = append(g[f], l, worker)
				g[l] = append(g[l], f)
				g[worker] = append(g[worker], f)
			}
			defer e.Heal(context.WithoutCancel(ctx))
			if err := e.Partition(ctx, "isolate leader "+l+" with "+worker+" attached only to it", g, 1, 4); err != nil {
				return err
			}
			hold(ctx, d)
			return nil
		}}
}

func isolate(name string, pick func(ctx context.Context, e *Env) (string, error), d time.Duration, scenarios ...int) Step {
	return Step{Name: name, Scenarios: scenarios, Gap: 2 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			n, err := pick(ctx, e)
			if err != nil {
				return err
			}
			g := map[string][]string{}
			for _, o := range e.Followers(n) {
				g[o] = append(g[o], n)
				g[n] = append(g[n], o)
			}
			defer e.Heal(context.WithoutCancel(ctx))
			if err := e.Partition(ctx, "isolate "+n, g, scenarios...); err != nil {
				return err
			}
			hold(ctx, d)
			return nil
		}}
}

func pickLeader(ctx context.Context, e *Env) (string, error) { return e.Leader(ctx) }

func pickFollower(ctx context.Context, e *Env) (string, error) {
	l, err := e.Leader(ctx)
	if err != nil {
		return "", err
	}
	fs := e.Followers(l)
	return fs[e.Rand.IntN(len(fs))], nil
}

func pickAny(_ context.Context, e *Env) (string, error) {
	ids := e.Cluster.IDs()
	return ids[e.Rand.IntN(len(ids))], nil
}

// bridge cuts the leader from one follower; the other follower bridges.
func bridge(d time.Duration) Step {
	return Step{Name: "bridge", Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		fs := e.Followers(l)
		g := map[string][]string{l: {fs[0]}, fs[0]: {l}}
		defer e.Heal(context.WithoutCancel(ctx))
		if err := e.Partition(ctx, fmt.Sprintf("bridge: %s and %s cut, %s bridges", l, fs[0], fs[1]), g); err != nil {
			return err
		}
		hold(ctx, d)
		return nil
	}}
}

// ring drops n1->n2, n2->n3, n3->n1: every node still has a majority
// component of its own view (a one-way cycle).
func ring(d time.Duration) Step {
	return Step{Name: "majorities-ring", Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		ids := e.Cluster.IDs()
		g := map[string][]string{}
		for i, src := range ids {
			dst := ids[(i+1)%len(ids)]
			g[dst] = append(g[dst], src)
		}
		defer e.Heal(context.WithoutCancel(ctx))
		if err := e.Partition(ctx, "one-way ring "+fmt.Sprint(ids), g); err != nil {
			return err
		}
		hold(ctx, d)
		return nil
	}}
}

// oneWayLeaderOut drops what the leader sends to its followers; it still
// hears them.
func oneWayLeaderOut(d time.Duration) Step {
	return Step{Name: "one-way-leader-out", Scenarios: []int{4}, Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		g := map[string][]string{}
		for _, f := range e.Followers(l) {
			g[f] = append(g[f], l)
		}
		defer e.Heal(context.WithoutCancel(ctx))
		if err := e.Partition(ctx, "one-way: "+l+" cannot send to its followers", g, 4); err != nil {
			return err
		}
		hold(ctx, d)
		return nil
	}}
}

// workerSideCut: half the workers see only the old leader, which is cut
// from its followers.
func workerSideCut(workers []string, d time.Duration) Step {
	return Step{Name: "worker-side-cut", Scenarios: []int{1, 4}, Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		g := map[string][]string{}
		half := workers[:max(1, len(workers)/2)]
		for _, f := range e.Followers(l) {
			g[f] = append(g[f], l)
			g[l] = append(g[l], f)
			for _, w := range half {
				g[f] = append(g[f], w)
				g[w] = append(g[w], f)
			}
		}
		defer e.Heal(context.WithoutCancel(ctx))
		if err := e.Partition(ctx, fmt.Sprintf("workers %v reach only the old leader %s", half, l), g, 1, 4); err != nil {
			return err
		}
		hold(ctx, d)
		return nil
	}}
}

func killNode(name string, pick func(ctx context.Context, e *Env) (string, error), down time.Duration, scenarios ...int) Step {
	return Step{Name: name, Scenarios: scenarios, Gap: 3 * time.Second, Run: func(ctx context.Context, e *Env) error {
		n, err := pick(ctx, e)
		if err != nil {
			return err
		}
		if err := e.Kill(ctx, n, scenarios...); err != nil {
			return err
		}
		hold(ctx, down)
		return e.Start(context.WithoutCancel(ctx), n)
	}}
}

func killAll(down time.Duration) Step {
	return Step{Name: "kill-all", Scenarios: []int{12}, Gap: 3 * time.Second, Run: func(ctx context.Context, e *Env) error {
		for _, id := range e.Cluster.IDs() {
			if err := e.Kill(ctx, id, 12); err != nil {
				return err
			}
		}
		hold(ctx, down)
		for _, id := range e.Cluster.IDs() {
			if err := e.Start(context.WithoutCancel(ctx), id); err != nil {
				return err
			}
		}
		return nil
	}}
}

func pauseNode(name string, pick func(ctx context.Context, e *Env) (string, error), d time.Duration, zombie string, scenarios ...int) Step {
	if zombie != "" {
		scenarios = append(scenarios, 6)
	}
	return Step{Name: name, Scenarios: scenarios, Gap: 3 * time.Second, Run: func(ctx context.Context, e *Env) error {
		n, err := pick(ctx, e)
		if err != nil {
			return err
		}
		if zombie != "" {
			if err := e.Zombie(ctx, zombie, d+2*time.Second, 6); err != nil {
				return err
			}
			// A workflow worker too: its spawns complete late, from
			// leases that expired meanwhile.
			if len(e.WorkflowWorkers) > 0 {
				if err := e.Zombie(ctx, e.WorkflowWorkers[0], d+2*time.Second, 6); err != nil {
					return err
				}
			}
			// And an ordering worker: its leases expire while it sleeps,
			// their tasks are granted again (or, out of attempts, the
			// next tasks of their lanes run) and its attempts complete
			// stale.
			if len(e.LaneWorkers) > 0 {
				if err := e.Zombie(ctx, e.LaneWorkers[0], d+2*time.Second, 6); err != nil {
					return err
				}
			}
		}
		if err := e.Pause(ctx, n, scenarios...); err != nil {
			return err
		}
		hold(ctx, d)
		return e.Resume(context.WithoutCancel(ctx), n)
	}}
}

// zombieLaneWorker makes an ordering worker, picked when the step runs,
// a zombie.
func zombieLaneWorker(d time.Duration) Step {
	return Step{Name: "zombie-lane-worker", Scenarios: []int{6}, Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		if len(e.LaneWorkers) == 0 {
			return nil
		}
		if err := e.Zombie(ctx, e.LaneWorkers[e.Rand.IntN(len(e.LaneWorkers))], d, 6); err != nil {
			return err
		}
		hold(ctx, d+time.Second)
		return nil
	}}
}

// zombieWorkflowWorker makes a workflow worker, picked when the step runs,
// a zombie.
func zombieWorkflowWorker(d time.Duration) Step {
	return Step{Name: "zombie-workflow-worker", Scenarios: []int{6}, Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		if len(e.WorkflowWorkers) == 0 {
			return nil
		}
		if err := e.Zombie(ctx, e.WorkflowWorkers[e.Rand.IntN(len(e.WorkflowWorkers))], d, 6); err != nil {
			return err
		}
		hold(ctx, d+time.Second)
		return nil
	}}
}

func zombieWorker(w string, d time.Duration) Step {
	return Step{Name: "zombie-" + w, Scenarios: []int{6}, Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		if err := e.Zombie(ctx, w, d, 6); err != nil {
			return err
		}
		hold(ctx, d+time.Second)
		return nil
	}}
}

// cronSlotKill puts the followers' clocks behind, kills the leader just
// after a slot, and lets a lagging-clock follower take over.
func cronSlotKill(behind time.Duration) Step {
	return Step{Name: "cron-slot-kill+skew", Scenarios: []int{9, 2}, Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		fs := e.Followers(l)
		bg := context.WithoutCancel(ctx)
		for _, f := range fs {
			if err := e.Clock(ctx, f, -behind, 1, 0, 9); err != nil {
				return err
			}
		}
		defer func() {
			for _, f := range fs {
				_ = e.retryAdmin(bg, func() error { return e.Clock(bg, f, 0, 1, 0) })
			}
		}()
		// Just after a whole second: every schedule's grid has a slot there.
		now := time.Now()
		next := now.Truncate(time.Second).Add(time.Second + 40*time.Millisecond)
		hold(ctx, time.Until(next))
		if err := e.Kill(ctx, l, 9, 2); err != nil {
			return err
		}
		hold(ctx, 3*time.Second)
		if err := e.Start(bg, l); err != nil {
			return err
		}
		hold(ctx, 5*time.Second)
		return nil
	}}
}

// clockJump moves the leader's clock ahead, then runs it fast.
func clockJump(ahead time.Duration, d time.Duration) Step {
	return Step{Name: "clock-jump+fast", Scenarios: []int{10}, Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		bg := context.WithoutCancel(ctx)
		if err := e.Clock(ctx, l, ahead, 1, d, 10); err != nil {
			return err
		}
		hold(ctx, d)
		if err := e.retryAdmin(bg, func() error { return e.Clock(bg, l, 0, 1, 0) }); err != nil {
			return err
		}
		l2, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		if err := e.Clock(ctx, l2, 0, 2, d, 10); err != nil {
			return err
		}
		hold(ctx, d)
		return e.retryAdmin(bg, func() error { return e.Clock(bg, l2, 0, 1, 0) })
	}}
}

func slowDisk(delay, stall, d time.Duration) Step {
	return Step{Name: "slow-disk-leader", Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		bg := context.WithoutCancel(ctx)
		if err := e.Disk(ctx, l, delay, stall); err != nil {
			return err
		}
		hold(ctx, d)
		return e.retryAdmin(bg, func() error { return e.Disk(bg, l, 0, 0) })
	}}
}

// diskStallKill stalls the leader's disk and kills it during the stall.
func diskStallKill() Step {
	return Step{Name: "disk-stall+kill", Scenarios: []int{2, 8}, Gap: 3 * time.Second, Run: func(ctx context.Context, e *Env) error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		bg := context.WithoutCancel(ctx)
		if err := e.Disk(ctx, l, 100*time.Millisecond, 3*time.Second); err != nil {
			return err
		}
		hold(ctx, 1500*time.Millisecond)
		if err := e.Kill(ctx, l, 2, 8); err != nil {
			return err
		}
		hold(ctx, 2*time.Second)
		if err := e.Start(bg, l); err != nil {
			return err
		}
		return e.retryAdmin(bg, func() error { return e.Disk(bg, l, 0, 0) })
	}}
}

// isolateUntilSnapshot cuts a follower off long enough for the leader to
// compact its log, so that it is caught up by a snapshot.
func isolateUntilSnapshot(d time.Duration) Step {
	return Step{Name: "isolate-follower-until-snapshot", Gap: 2 * time.Second, Run: func(ctx context.Context, e *Env) error {
		f, err := pickFollower(ctx, e)
		if err != nil {
			return err
		}
		logPath := e.Cluster.Node(f).LogPath
		off := LogSize(logPath)
		g := map[string][]string{}
		for _, o := range e.Followers(f) {
			g[o] = append(g[o], f)
			g[f] = append(g[f], o)
		}
		err = e.Partition(ctx, "isolate follower "+f+" until the leader snapshots", g, 11)
		if err == nil {
			hold(ctx, d)
		}
		_ = e.Heal(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		// Give it time to catch up, then look for the snapshot install.
		for i := 0; i < 16 && ctx.Err() == nil; i++ {
			if SnapshotInstalled(logPath, off) {
				e.MarkRan("isolate-follower-until-snapshot", 11)
				e.Rec.Add(history.Op{Process: Process, Type: history.OK, F: "snapshot-installed", Value: &history.Value{Targets: []string{f}, Scenarios: []int{11}}})
				return nil
			}
			hold(ctx, 500*time.Millisecond)
		}
		e.Rec.Add(history.Op{Process: Process, Type: history.Info, F: "snapshot-installed", Value: &history.Value{Targets: []string{f},
			Detail: fmt.Sprintf("no snapshot install seen in %s's log (snapshot flags available: %v)", f, e.SnapshotFlags)}})
		return nil
	}}
}

// Smoke is the fixed CI schedule: at least one of every fault kind, and
// the targeted scenarios.
func Smoke(workers []string) Schedule {
	return Schedule{Name: "smoke", Steps: []Step{
		isolateLeaderWithWorker(workers[0], 6*time.Second),
		killNode("kill-leader", pickLeader, 2*time.Second, 2, 3, 8),
		pauseNode("pause-leader+zombie-worker", pickLeader, 5*time.Second, workers[1], 7),
		cronSlotKill(5 * time.Second),
		clockJump(8*time.Second, 4*time.Second),
		slowDisk(150*time.Millisecond, 2*time.Second, 4*time.Second),
		bridge(4 * time.Second),
		ring(4 * time.Second),
		oneWayLeaderOut(4 * time.Second),
		isolateUntilSnapshot(10 * time.Second),
		killAll(2 * time.Second),
	}}
}

// SmokeSecure is the short CI schedule of the run with TLS, gossip
// encryption and ACLs on: the faults that make the nodes and the clients
// reconnect and re-verify (a partition, a leader kill, a paused leader, a
// clock jump the leader's clock guard reads over TLS) and a whole-cluster
// restart, after which the ACL state and the gossip keyring come back from
// the data dirs.
func SmokeSecure(workers []string) Schedule {
	return Schedule{Name: "smoke-secure", Steps: []Step{
		isolateLeaderWithWorker(workers[0], 5*time.Second),
		killNode("kill-leader", pickLeader, 2*time.Second, 2, 3, 8),
		pauseNode("pause-leader+zombie-worker", pickLeader, 4*time.Second, workers[1], 7),
		clockJump(8*time.Second, 4*time.Second),
		killAll(2 * time.Second),
	}}
}

// Soak returns a random schedule of length d: the whole catalogue,
// reshuffled every round, quiet about a quarter of the time.
func Soak(workers []string, d time.Duration, r *rand.Rand) Schedule {
	hold := func() time.Duration { return time.Duration(5+r.IntN(11)) * time.Second }
	catalogue := []Step{
		isolateLeaderWithWorker(workers[0], hold()),
		isolate("isolate-random", pickAny, hold(), 5),
		isolate("isolate-follower", pickFollower, hold(), 5),
		isolate("isolate-leader", pickLeader, hold(), 2, 5),
		bridge(hold()),
		ring(hold()),
		oneWayLeaderOut(hold()),
		workerSideCut(workers, hold()),
		killNode("kill-leader", pickLeader, time.Duration(r.IntN(5))*time.Second, 2, 3, 8),
		killNode("kill-random", pickAny, time.Duration(r.IntN(5))*time.Second, 8),
		killAll(time.Duration(1+r.IntN(4)) * time.Second),
		pauseNode("pause-leader", pickLeader, time.Duration(3+r.IntN(15))*time.Second, "", 7),
		pauseNode("pause-follower", pickFollower, time.Duration(3+r.IntN(15))*time.Second, ""),
		zombieWorker(workers[r.IntN(len(workers))], time.Duration(4+r.IntN(10))*time.Second),
		zombieWorkflowWorker(time.Duration(4+r.IntN(10)) * time.Second),
		zombieLaneWorker(time.Duration(4+r.IntN(10)) * time.Second),
		cronSlotKill(time.Duration(5+r.IntN(25)) * time.Second),
		clockJump(time.Duration(5+r.IntN(55))*time.Second, hold()),
		slowDisk(time.Duration(50+r.IntN(250))*time.Millisecond, time.Duration(r.IntN(4))*time.Second, hold()),
		diskStallKill(),
		isolateUntilSnapshot(time.Duration(15+r.IntN(15)) * time.Second),
	}
	var steps []Step
	var total time.Duration
	for total < d {
		perm := r.Perm(len(catalogue))
		for _, i := range perm {
			st := catalogue[i]
			// Quiet a quarter of the time.
			st.Gap = time.Duration(2+r.IntN(6)) * time.Second
			steps = append(steps, st)
			total += 12 * time.Second
		}
	}
	return Schedule{Name: "soak", Steps: steps, Until: d}
}

// Named returns a schedule by name: smoke, soak, or one of the targeted
// self-test schedules (bug-ackearly, bug-noepoch, bug-stalelease,
// bug-cronrefire, bug-followerread, bug-depdone, bug-laneoverlap).
func Named(name string, workers []string, d time.Duration, r *rand.Rand) (Schedule, error) {
	switch name {
	case "smoke":
		return Smoke(workers), nil
	case "smoke-secure":
		return SmokeSecure(workers), nil
	case "soak":
		return Soak(workers, d, r), nil
	}
	if s, ok := bugSchedules(workers)[name]; ok {
		return s, nil
	}
	names := []string{"smoke", "smoke-secure", "soak"}
	for n := range bugSchedules(workers) {
		names = append(names, n)
	}
	sort.Strings(names)
	return Schedule{}, fmt.Errorf("unknown schedule %q (known: %v)", name, names)
}
