package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/jepsen/history"
)

// Final-read operation names.
const (
	FinalTasks     = "final-tasks"
	FinalSchedules = "final-schedules"
	FSMHash        = "fsm-hash"
	// NodeCrash records a node process that exited without the harness
	// killing or stopping it.
	NodeCrash = "node-crash"
	DrainOp   = "drain"
)

// TaskState converts an SDK task for the history.
func TaskState(t *client.Task) history.TaskState {
	ts := history.TaskState{
		ID: t.ID, Pool: t.Pool, Key: t.Key, Status: t.Status, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts,
		Lease: t.Lease, Payload: string(t.Payload), Output: string(t.Output), Error: t.Error, Schedule: t.Schedule,
		Workflow: t.Workflow, Step: t.Step, Parent: t.Parent, DependsOn: t.DependsOn, OrderingKey: t.OrderingKey,
	}
	if len(t.DependsOn) > 0 {
		ts.Policy = client.DependencyPolicySucceeded
		if t.DependencyPolicy == client.DependencyPolicyDone {
			ts.Policy = client.DependencyPolicyDone
		}
	}
	if !t.Slot.IsZero() {
		ts.Slot = t.Slot.UnixNano()
	}
	return ts
}

// Drain waits until no task of pools is pending or running, or ctx ends;
// it records how it went.
func Drain(ctx context.Context, env *Env, ip string, pools ...string) bool {
	c, err := env.ClientAll(ip)
	if err != nil {
		return false
	}
	done := env.Rec.Invoke("final", DrainOp, "", &history.Value{Detail: fmt.Sprint(pools)})
	var last map[string]int64
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		counts, err := c.Counts(actx)
		cancel()
		if err == nil {
			live := map[string]int64{}
			n := int64(0)
			for _, p := range pools {
				for st, k := range counts[p] {
					switch st {
					case client.StatusSucceeded, client.StatusFailed, client.StatusCancelled, client.StatusExpired:
					default:
						if k > 0 {
							live[p+"/"+st] = k
							n += k
						}
					}
				}
			}
			last = live
			if n == 0 {
				done(history.OK, &history.Value{Counts: live}, nil)
				return true
			}
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			done(history.Info, &history.Value{Counts: last}, fmt.Errorf("drain incomplete: %v", last))
			return false
		}
	}
}

// ReadFinal lists every task and every schedule through the leader and
// records them. It retries each read until ctx ends.
func ReadFinal(ctx context.Context, env *Env, ip string) error {
	c, err := env.ClientAll(ip)
	if err != nil {
		return err
	}
	var tasks []history.TaskState
	done := env.Rec.Invoke("final", FinalTasks, "", nil)
	after := ""
	for {
		var page []*client.Task
		var next string
		err := retry(ctx, func(actx context.Context) error {
			var e error
			page, next, e = c.List(actx, client.ListOptions{After: after, Limit: 500})
			return e
		})
		if err != nil {
			done(history.Info, nil, err)
			return fmt.Errorf("listing tasks: %w", err)
		}
		for _, t := range page {
			tasks = append(tasks, TaskState(t))
		}
		if next == "" || len(page) == 0 {
			break
		}
		after = next
	}
	done(history.OK, &history.Value{Tasks: tasks}, nil)

	done = env.Rec.Invoke("final", FinalSchedules, "", nil)
	var scheds []client.Schedule
	err = retry(ctx, func(actx context.Context) error {
		var e error
		scheds, e = c.ListSchedules(actx)
		return e
	})
	if err != nil {
		done(history.Info, nil, err)
		return fmt.Errorf("listing schedules: %w", err)
	}
	var out []history.ScheduleState
	for _, s := range scheds {
		ss := history.ScheduleState{Name: s.Name, Cron: s.Cron, Paused: s.Paused, Fires: s.Fires, Skipped: s.Skipped, LastTask: s.LastTask}
		if !s.LastFire.IsZero() {
			ss.LastFire = s.LastFire.UnixNano()
		}
		if !s.NextFire.IsZero() {
			ss.NextFire = s.NextFire.UnixNano()
		}
		out = append(out, ss)
	}
	done(history.OK, &history.Value{Schedules: out}, nil)
	return nil
}

func retry(ctx context.Context, fn func(context.Context) error) error {
	var err error
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		sleepCtx(ctx, 300*time.Millisecond)
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}
