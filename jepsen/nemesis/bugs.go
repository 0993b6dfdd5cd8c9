package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nodes"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// The targeted schedules of the self-test: each makes one deliberate bug
// of the product observable on purpose, not by luck.

// ackEarly: submitters are pinned to the leader, which is then cut from
// its followers and killed before the partition heals. Replies released
// before their batch is durable name tasks that the new leader never saw.
func ackEarly() Step {
	return Step{Name: "pinned-submits-to-isolated-leader+kill", Scenarios: []int{2, 8}, Gap: 4 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			l, err := e.Leader(ctx)
			if err != nil {
				return err
			}
			bg := context.WithoutCancel(ctx)
			e.Queue.Pin(l)
			defer e.Queue.Pin("")
			hold(ctx, time.Second)
			g := map[string][]string{}
			for _, f := range e.Followers(l) {
				g[f] = append(g[f], l)
				g[l] = append(g[l], f)
			}
			if err := e.Partition(ctx, "isolate leader "+l+" with submitters pinned to it", g, 2); err != nil {
				_ = e.Heal(bg)
				return err
			}
			hold(ctx, 3*time.Second)
			e.Queue.Pin("")
			kerr := e.Kill(ctx, l, 8)
			_ = e.Heal(bg)
			hold(ctx, 2*time.Second)
			serr := e.Start(bg, l)
			if kerr != nil {
				return kerr
			}
			return serr
		}}
}

// staleLease: the zombie worker takes three high-priority tasks and holds
// them (slow attempts, heartbeated) while the other workers take nothing;
// then it is paused past the leases' TTL. The tasks are retried and, being
// high priority, re-leased first to the other workers, which now run slow
// attempts. When the zombie resumes it completes under its expired leases
// while the new attempts still run: a correct cluster refuses those
// completions as stale.
func staleLease(zombie string, others []string) Step {
	return Step{Name: "zombie-worker-completes-late", Scenarios: []int{6}, Gap: 3 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			z := e.Workers[zombie]
			all := append([]string{zombie}, others...)
			defer func() {
				for _, w := range all {
					e.Workers[w].SetSlow(0)
					e.Workers[w].SetIdle(false)
				}
				e.Queue.Hold(false)
			}()
			// Quiesce: no new submits, no new grants; attempts in hand end.
			e.Queue.Hold(true)
			for _, w := range all {
				e.Workers[w].SetIdle(true)
			}
			// The zombie must have all its slots free (an attempt that
			// outlives its lease takes a few seconds).
			for i := 0; i < 80 && z.Free() < z.Slots() && ctx.Err() == nil; i++ {
				hold(ctx, 100*time.Millisecond)
			}
			// The zombie takes the three high-priority tasks and runs them
			// slowly (heartbeated).
			z.SetSlow(8 * time.Second)
			if n := e.Queue.Burst(ctx, z.Slots(), "high"); n == 0 {
				return errors.New("no high-priority task was acknowledged")
			}
			z.SetIdle(false)
			hold(ctx, time.Second)
			if err := e.Zombie(ctx, zombie, 12*time.Second, 6); err != nil {
				return err
			}
			// Its leases expire after the TTL and the tasks are retried after
			// their backoff; being high priority, they go first to the other
			// workers, which now run slowly.
			hold(ctx, 3*time.Second+2500*time.Millisecond)
			for _, w := range others {
				e.Workers[w].SetSlow(20 * time.Second)
				e.Workers[w].SetIdle(false)
			}
			// The zombie resumes and completes under its old leases.
			hold(ctx, 9*time.Second)
			return nil
		}}
}

// cronRefire: the leader is killed just after a slot; a new leader takes
// over and must not fire that slot again.
func cronRefire() Step {
	return Step{Name: "kill-leader-after-cron-slot", Scenarios: []int{9}, Gap: 4 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			l, err := e.Leader(ctx)
			if err != nil {
				return err
			}
			next := time.Now().Truncate(time.Second).Add(time.Second + 60*time.Millisecond)
			hold(ctx, time.Until(next))
			if err := e.Kill(ctx, l, 9); err != nil {
				return err
			}
			hold(ctx, 2*time.Second)
			return e.Start(context.WithoutCancel(ctx), l)
		}}
}

// followerRead: a follower is cut off while the register workload keeps
// writing through the leader and reading from every node.
func followerRead(d time.Duration) Step {
	return isolate("isolate-follower-for-reads", pickFollower, d, 5)
}

func bugSchedules(workers []string) map[string]Schedule {
	others := workers[1:3]
	return map[string]Schedule{
		"bug-ackearly":     {Name: "bug-ackearly", Steps: []Step{ackEarly(), ackEarly(), ackEarly()}},
		"bug-noepoch":      {Name: "bug-noepoch", Steps: []Step{noEpoch(), staleInsert(), noEpoch(), staleInsert()}},
		"bug-stalelease":   {Name: "bug-stalelease", Steps: []Step{staleLease(workers[0], others), staleLease(workers[0], others)}},
		"bug-cronrefire":   {Name: "bug-cronrefire", Steps: []Step{cronRefire(), cronRefire(), cronRefire()}},
		"bug-followerread": {Name: "bug-followerread", Steps: []Step{followerRead(8 * time.Second), followerRead(8 * time.Second)}},
		"bug-depdone": {Name: "bug-depdone", Steps: []Step{
			doomedWorkflows(4), killNode("kill-leader", pickLeader, 2*time.Second, 2, 3, 8), doomedWorkflows(4),
		}},
		"bug-laneoverlap": {Name: "bug-laneoverlap", Steps: []Step{
			laneBursts(4), killNode("kill-leader", pickLeader, 2*time.Second, 2, 3, 8), laneBursts(4),
		}},
		"bug-ackonsend": {Name: "bug-ackonsend", Steps: []Step{
			consumerCrashes(8 * time.Second), killNode("kill-leader", pickLeader, 2*time.Second, 2, 3, 8), consumerCrashes(8 * time.Second),
		}},
	}
}

// noEpoch: the leader is paused with work in flight, the others elect a
// new leader, which is paused in turn while the old one resumes: the old
// leader's engine wakes up with batches of its deposed epoch.
func noEpoch() Step {
	return Step{Name: "pause-leader-then-new-leader", Scenarios: []int{7}, Gap: 4 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			l1, err := e.Leader(ctx)
			if err != nil {
				return err
			}
			bg := context.WithoutCancel(ctx)
			if err := e.Pause(ctx, l1, 7); err != nil {
				return err
			}
			defer e.Resume(bg, l1)
			var l2 string
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s := e.Monitor.Poll(ctx)
				if s.Leader != "" && s.Leader != l1 {
					l2 = s.Leader
					break
				}
				hold(ctx, 100*time.Millisecond)
			}
			if l2 == "" {
				return nil
			}
			if err := e.Pause(ctx, l2, 7); err != nil {
				return err
			}
			defer e.Resume(bg, l2)
			if err := e.Resume(ctx, l1); err != nil {
				return err
			}
			hold(ctx, 4*time.Second)
			return nil
		}}
}

// StaleInsertKey is the key of the task the stale-insert failpoint asks a
// deposed epoch to insert. No client submits it, so the queue checker
// reports it (Q2) if the FSM ever applies the batch.
const StaleInsertKey = "stale-epoch-probe"

// staleInsert asks the leader, through the admin failpoint
// "stale-insert", to append a batch stamped with the epoch before its own
// that inserts a task into the queue pool. The FSM must refuse it (stale
// epoch). Builds without the failpoint answer 404: the step records that
// and does nothing.
func staleInsert() Step {
	return Step{Name: "stale-epoch-batch-failpoint", Scenarios: []int{7}, Gap: 3 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			l, err := e.Leader(ctx)
			if err != nil {
				return err
			}
			body := map[string]string{"pool": workload.QueuePool, "key": StaleInsertKey}
			v := &history.Value{Targets: []string{l}, Pool: workload.QueuePool, Key: StaleInsertKey}
			done := e.Rec.Invoke(Process, "failpoint", "", v)
			var ans nodes.StaleInsert
			err = e.Cluster.Admin.Failpoint(ctx, e.Cluster.Node(l).HTTPAddr(), "stale-insert", body, &ans)
			switch {
			case errors.Is(err, nodes.ErrNoAdmin):
				done(history.Info, v, errors.New("this build has no stale-insert failpoint"))
				return nil
			case err != nil:
				done(history.Fail, v, err)
				return err
			}
			// The verdict is the checkers' (an applied batch leaves a task
			// nobody submitted); the answer is recorded for the report.
			res := *v
			res.ID = ans.ID
			res.Detail = fmt.Sprintf("batch of epoch %d applied=%v", ans.Epoch, ans.Applied)
			if ans.Error != "" {
				res.Detail += ": " + ans.Error
			}
			done(history.OK, &res, nil)
			return nil
		}}
}

// doomedWorkflows has the workflow workload submit n workflows whose first
// step fails for good, and lets them run: under policy succeeded its
// dependents must end cancelled without ever being granted (a build that
// releases them instead is caught by W1/W2).
func doomedWorkflows(n int) Step {
	return Step{Name: "doomed-workflows", Gap: 2 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			if e.Workflows == nil {
				return errors.New("no workflow workload")
			}
			e.Workflows.Doom(n)
			hold(ctx, 8*time.Second)
			return nil
		}}
}

// consumerCrashes has the delivery workload's consumers discard a third
// of their reads unprocessed for d, as consumers that crash do: a build
// that acks a subscription's events as they are sent never sends those
// again (D1).
func consumerCrashes(d time.Duration) Step {
	return Step{Name: "consumer-crashes", Gap: 2 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			if e.Delivery == nil {
				return errors.New("no delivery workload")
			}
			e.Delivery.SetDropRate(0.3)
			defer e.Delivery.SetDropRate(workload.DefaultDropRate)
			hold(ctx, d)
			return nil
		}}
}

// laneBursts has the ordering workload submit, rounds times, one atomic
// batch of five tasks on each of two ordering keys, so that those lanes
// hold tasks waiting behind a running head while the lane workers have
// free slots: a build that lets a lane's next task through while its head
// runs is caught by O1 (and O2 when the head is retried).
func laneBursts(rounds int) Step {
	return Step{Name: "lane-bursts", Gap: 2 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			if e.Lanes == nil {
				return errors.New("no ordering workload")
			}
			acked := 0
			for range rounds {
				i := e.Rand.IntN(workload.NumLaneKeys)
				keys := []string{workload.LaneKey(i), workload.LaneKey((i + 1 + e.Rand.IntN(workload.NumLaneKeys-1)) % workload.NumLaneKeys)}
				acked += e.Lanes.Burst(ctx, keys, 5)
				if !hold(ctx, 1500*time.Millisecond) {
					break
				}
			}
			hold(ctx, 3*time.Second)
			if acked == 0 {
				return errors.New("no burst of the ordering workload was acknowledged")
			}
			return nil
		}}
}
