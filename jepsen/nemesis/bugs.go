package nemesis

import (
	"context"
	"time"
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

// staleLease: two workers are made slow (long, heartbeated attempts) and
// the third is paused past its leases' TTL: its tasks are re-leased to the
// slow workers, and it completes them late under its expired leases while
// the new attempts still run.
func staleLease(zombie string, slow []string, d time.Duration) Step {
	return Step{Name: "zombie-worker-completes-late", Scenarios: []int{6}, Gap: 3 * time.Second,
		Run: func(ctx context.Context, e *Env) error {
			for _, w := range slow {
				e.Workers[w].SetSlow(d + 4*time.Second)
			}
			defer func() {
				for _, w := range slow {
					e.Workers[w].SetSlow(0)
				}
			}()
			hold(ctx, time.Second)
			if err := e.Zombie(ctx, zombie, d, 6); err != nil {
				return err
			}
			hold(ctx, d+3*time.Second)
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
	slow := workers[1:3]
	return map[string]Schedule{
		"bug-ackearly":     {Name: "bug-ackearly", Steps: []Step{ackEarly(), ackEarly(), ackEarly()}},
		"bug-noepoch":      {Name: "bug-noepoch", Steps: []Step{noEpoch(), noEpoch(), noEpoch()}},
		"bug-stalelease":   {Name: "bug-stalelease", Steps: []Step{staleLease(workers[0], slow, 8*time.Second), staleLease(workers[0], slow, 8*time.Second)}},
		"bug-cronrefire":   {Name: "bug-cronrefire", Steps: []Step{cronRefire(), cronRefire(), cronRefire()}},
		"bug-followerread": {Name: "bug-followerread", Steps: []Step{followerRead(8 * time.Second), followerRead(8 * time.Second)}},
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
