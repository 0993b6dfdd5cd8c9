package core

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// randomRun drives a core with a seeded random sequence of calls, commits
// every output to an FSM (which must accept every batch), recovers as a new
// leader now and then, and returns the log it wrote plus every action.
func randomRun(t *testing.T, seed uint64, steps int) []byte {
	r := splitmix64{s: seed}
	pick := func(n int) int { return int(r.next() % uint64(n)) }

	cfg := Config{
		Seed:            seed,
		HeartbeatWindow: 5 * time.Second,
		MaxAttempts:     3,
		Retention:       2 * time.Minute,
		DefaultPool:     PoolConfig{Bounds: Bounds{MaxPending: 1_000_000}, Overflow: OverflowPolicy(seed % 3)},
		Pools:           map[string]PoolConfig{"a": {Bounds: Bounds{MaxPending: 6}, MaxRunning: 3, Overflow: OverflowPolicy(seed % 3)}},
		Global:          Bounds{MaxPendingPerClass: [fsm.NumPriorities]int{0, 0, 4}},
	}
	state := fsm.New()
	var log bytes.Buffer
	index := uint64(0)
	apply := func(data []byte) any {
		index++
		fmt.Fprintf(&log, "%x\n", data)
		return state.Apply(index, 1, data)
	}
	epoch := uint64(1)
	now := t0
	require.Equal(t, epoch, apply(mustEncode(fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: epoch, Leader: "n", Time: fsm.InstantOf(now)}))))
	c, err := New(cfg, epoch, now)
	require.NoError(t, err)

	var leases []uint64
	var ids []string
	req := ReqID(0)
	pools := []string{"a", "b"}
	labels := [][]fsm.KV{nil, {{K: "gpu", V: "1"}}, {{K: "gpu", V: "1"}, {K: "zone", V: "x"}}}
	commit := func() {
		o := c.Ready()
		for _, r := range o.Replies {
			v := r.Value
			if res, ok := v.(*SubmitResult); ok {
				v = *res
			}
			fmt.Fprintf(&log, "reply %d %+v %v\n", r.Req, v, r.Err)
		}
		fmt.Fprintf(&log, "dispatches %+v\nevents %+v\naborts %+v\n", o.Dispatches, o.Events, o.Aborts)
		for _, d := range o.Dispatches {
			for _, g := range d.Grants {
				leases = append(leases, g.Lease)
			}
		}
		for _, r := range o.Replies {
			if res, ok := r.Value.(*SubmitResult); ok {
				for _, s := range res.Tasks {
					if s.ID != "" {
						ids = append(ids, s.ID)
					}
				}
			}
		}
		if len(o.Mutations) == 0 {
			return
		}
		res := apply(mustEncode(fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: epoch, Time: fsm.InstantOf(now), Mutations: o.Mutations})))
		require.Nil(t, res, "batch rejected at step; mutations %d", len(o.Mutations))
	}
	spec := func() Spec {
		s := Spec{Template: fsm.Template{Pool: pools[pick(2)], Kind: "k", Priority: fsm.Priority(pick(3)), Labels: labels[pick(3)]}}
		if pick(3) == 0 {
			s.Key = fmt.Sprintf("key%d", pick(20))
		}
		if pick(4) == 0 {
			s.Delay = time.Duration(pick(10)) * time.Second
		}
		if pick(5) == 0 {
			s.Deadline = fsm.InstantOf(now.Add(time.Duration(5+pick(30)) * time.Second))
		}
		if pick(5) == 0 {
			s.Timeout = time.Duration(1+pick(8)) * time.Second
		}
		return s
	}
	for step := 0; step < steps; step++ {
		req++
		switch pick(14) {
		case 0, 1:
			c.Submit(now, req, SubmitOne, []Spec{spec()})
		case 2:
			c.Submit(now, req, SubmitMode(1+pick(2)), []Spec{spec(), spec(), spec()})
		case 3, 4:
			c.Poll(now, req, Offer{Worker: fmt.Sprintf("w%d", pick(3)), Pool: pools[pick(2)], Labels: labels[pick(3)], Slots: 1 + pick(3)})
		case 5, 6:
			if len(leases) > 0 {
				out := Outcome{Kind: OutcomeKind(pick(4)), Output: []byte("x")}
				c.Complete(now, req, leases[pick(len(leases))], out)
			}
		case 7:
			if len(leases) > 0 {
				_ = c.Heartbeat(now, leases[pick(len(leases))])
			}
		case 8:
			if len(ids) > 0 {
				switch pick(4) {
				case 0, 1:
					c.Cancel(now, req, TaskRef{ID: ids[pick(len(ids))]})
				case 2:
					// An operator's retry, refused unless the task ended
					// failed, expired or cancelled.
					c.Retry(now, req, TaskRef{ID: ids[pick(len(ids))]})
				case 3:
					f := TaskFilter{Pool: pools[pick(2)], Statuses: []fsm.Status{fsm.StatusQueued, fsm.StatusRunning, fsm.StatusRetrying}[:1+pick(3)]}
					if match, err := c.Matching(f); err == nil && len(match) > 0 {
						c.CancelTasks(now, req, match[:1+pick(len(match))], f)
					}
				}
			}
		case 9:
			if len(ids) > 0 {
				c.Attach(now, req, TaskRef{ID: ids[pick(len(ids))]})
			}
		case 10:
			c.Detach(ReqID(1 + pick(int(req))))
		case 11:
			now = now.Add(time.Duration(pick(4000)) * time.Millisecond)
			c.Tick(now)
		case 12:
			switch pick(4) {
			case 0:
				c.AddSchedule(now, req, ScheduleSpec{Name: fmt.Sprintf("s%d", pick(2)), Cron: "*/7 * * * * *", Task: fsm.Template{Pool: "b", Kind: "cron"}, Overlap: fsm.Overlap(pick(2)), CatchUp: fsm.CatchUp(pick(3))})
			case 1:
				c.PauseSchedule(now, req, fmt.Sprintf("s%d", pick(2)), pick(2) == 0)
			case 2:
				c.RemoveSchedule(now, req, fmt.Sprintf("s%d", pick(2)))
			case 3:
				c.Detach(ReqID(1 + pick(int(req))))
			}
		case 13:
			if pick(6) == 0 {
				commit()
				// A new leader: bump the epoch and rebuild from the FSM.
				epoch++
				require.Equal(t, epoch, apply(mustEncode(fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: epoch, Leader: "n", Time: fsm.InstantOf(now)}))))
				c, err = Recover(cfg, state.View(), epoch, now)
				require.NoError(t, err)
				require.True(t, func() bool { o := c.Ready(); return o.Empty() }())
			}
		}
		commit()
		checkAgree(t, c, state)
	}
	// Drain: let every lease lapse and every retry run out.
	for i := 0; i < 50; i++ {
		now = now.Add(10 * time.Second)
		c.Tick(now)
		commit()
	}
	checkAgree(t, c, state)
	return log.Bytes()
}

// checkAgree requires the core's task table to match the FSM's.
func checkAgree(t *testing.T, c *Core, state *fsm.State) {
	t.Helper()
	n := 0
	state.View().EachTask(func(rec *fsm.Task) bool {
		n++
		tk, ok := c.tasks[rec.ID]
		require.True(t, ok, "task %s missing in the core", rec.ID)
		require.Equal(t, rec.Status, tk.status, rec.ID)
		require.Equal(t, rec.Attempt, tk.attempt, rec.ID)
		require.Equal(t, rec.Lease, tk.currentLease(), rec.ID)
		require.Equal(t, rec.AttemptBase, tk.attemptBase, rec.ID)
		require.LessOrEqual(t, len(rec.Attempts), fsm.MaxAttemptHistory, rec.ID)
		return true
	})
	require.Equal(t, n, len(c.tasks))
	pending, running := 0, 0
	for _, p := range c.pools {
		pending += p.pending.total
		running += p.running
		require.True(t, p.cfg.MaxRunning == 0 || p.running <= p.cfg.MaxRunning, "pool %s over its hard cap", p.name)
	}
	require.Equal(t, c.global.total, pending)
	require.Equal(t, len(c.leases), running)
}

func TestRandomRunsAgreeWithFSMAndReplay(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			a := randomRun(t, seed, 600)
			b := randomRun(t, seed, 600)
			require.True(t, bytes.Equal(a, b), "same seed, different log")
			require.True(t, strings.Count(string(a), "\n") > 100)
		})
	}
}
