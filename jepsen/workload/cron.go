package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/jepsen/history"
)

// CronPool is the pool every schedule's tasks go to.
const CronPool = "cron"

// Cron operation names.
const (
	CronAdd    = "cron-add"
	CronPause  = "cron-pause"
	CronResume = "cron-resume"
	CronRemove = "cron-remove"
)

// Cron is the recurring-schedule workload: schedules of @every 1s..5s, some
// paused, resumed or removed during the run, and a worker that completes
// their fires.
type Cron struct {
	env  *Env
	proc Process
	n    int
}

// NewCron returns the workload with n schedules.
func NewCron(env *Env, proc Process, n int) *Cron { return &Cron{env: env, proc: proc, n: n} }

// ScheduleName is the name of schedule i.
func ScheduleName(i int) string { return fmt.Sprintf("cron-%d", i) }

// Period is the period of schedule i.
func Period(i int) time.Duration { return time.Duration(1+i%5) * time.Second }

// Setup creates the schedules (retrying unknown outcomes; adding is
// idempotent by name). Half allow overlapping fires, half skip them.
func (c *Cron) Setup(ctx context.Context) error {
	cl, err := c.env.ClientAll(c.proc.IP)
	if err != nil {
		return err
	}
	for i := range c.n {
		name := ScheduleName(i)
		s := client.Schedule{
			Name: name, Cron: fmt.Sprintf("@every %ds", int(Period(i)/time.Second)),
			Task: client.Template{Pool: CronPool, Kind: "cron", Payload: []byte(name), MaxAttempts: 3},
		}
		if i%2 == 1 {
			s.Overlap = client.OverlapAllow
		}
		ok := false
		for try := 0; try < 5 && !ok; try++ {
			done := c.env.Rec.Invoke(c.proc.Name, CronAdd, "", &history.Value{Schedule: name, Cron: s.Cron, Pool: CronPool})
			actx, cancel := context.WithTimeout(ctx, 4*time.Second)
			next, err := cl.AddSchedule(actx, s)
			cancel()
			t := Outcome(err)
			done(t, &history.Value{Schedule: name, Slot: next.UnixNano()}, err)
			ok = t == history.OK
		}
		if !ok {
			return fmt.Errorf("adding schedule %s: no acknowledgement after 5 tries", name)
		}
	}
	return nil
}

// Pause pauses (or resumes) schedule name, recorded.
func (c *Cron) Pause(ctx context.Context, name string, paused bool) {
	cl, err := c.env.ClientAll(c.proc.IP)
	if err != nil {
		return
	}
	f := CronPause
	if !paused {
		f = CronResume
	}
	done := c.env.Rec.Invoke(c.proc.Name, f, "", &history.Value{Schedule: name})
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	got, err := cl.PauseSchedule(actx, name, paused)
	cancel()
	if errors.Is(err, client.ErrNotFound) {
		done(history.Fail, &history.Value{Schedule: name, Code: "not_found"}, err)
		return
	}
	done(Outcome(err), &history.Value{Schedule: name, Paused: boolp(got)}, err)
}

// Remove removes schedule name, recorded.
func (c *Cron) Remove(ctx context.Context, name string) {
	cl, err := c.env.ClientAll(c.proc.IP)
	if err != nil {
		return
	}
	done := c.env.Rec.Invoke(c.proc.Name, CronRemove, "", &history.Value{Schedule: name})
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	removed, err := cl.RemoveSchedule(actx, name)
	cancel()
	if errors.Is(err, client.ErrNotFound) {
		done(history.Fail, &history.Value{Schedule: name, Code: "not_found"}, err)
		return
	}
	done(Outcome(err), &history.Value{Schedule: name, Removed: boolp(removed)}, err)
}

// PauseAll pauses every schedule still there (before the final state is
// compared across nodes, so that no fire moves it).
func (c *Cron) PauseAll(ctx context.Context) {
	for i := range c.n {
		c.Pause(ctx, ScheduleName(i), true)
	}
}

// CronBehavior completes fires quickly.
func CronBehavior(r *rand.Rand, g Grant) Behavior {
	return Behavior{Exec: time.Duration(r.IntN(50)) * time.Millisecond, Outcome: "success"}
}
