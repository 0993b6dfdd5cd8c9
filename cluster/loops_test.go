package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/loophealth"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// loopRecorder fails the attempts of chosen loops (the fault hook of
// cluster.Config.Loops) and records every attempt of every loop.
type loopRecorder struct {
	mu       sync.Mutex
	failing  map[string]error
	attempts map[string][]loophealth.Attempt
}

func newLoopRecorder() *loopRecorder {
	return &loopRecorder{failing: map[string]error{}, attempts: map[string][]loophealth.Attempt{}}
}

// install makes cfg's loops report to r.
func (r *loopRecorder) install(cfg *cluster.Config) {
	cfg.Loops.Fault = func(loop string) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.failing[loop]
	}
	cfg.Loops.OnAttempt = func(a loophealth.Attempt) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.attempts[a.Loop] = append(r.attempts[a.Loop], a)
	}
}

// fail makes every attempt of loop fail with err until heal.
func (r *loopRecorder) fail(loop string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing[loop] = err
}

func (r *loopRecorder) heal(loop string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failing, loop)
}

// failures returns the attempts of loop that failed with cause (or an error
// wrapping it).
func (r *loopRecorder) failures(loop string, cause error) []loophealth.Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []loophealth.Attempt
	for _, a := range r.attempts[loop] {
		if a.Err != nil && errors.Is(a.Err, cause) {
			out = append(out, a)
		}
	}
	return out
}

// loopStatus returns n's status of loop.
func loopStatus(t *testing.T, n *cluster.Node, loop string) cluster.LoopStatus {
	t.Helper()
	for _, st := range n.Health().Loops {
		if st.Name == loop {
			return st
		}
	}
	require.Failf(t, "no such loop", "%s has no loop %s", n.ID(), loop)
	return cluster.LoopStatus{}
}

// loopReason returns the health reason of n naming loop ("" if none).
func loopReason(h cluster.Health, loop string) string {
	for _, r := range h.Reasons {
		if strings.HasPrefix(r, "loop "+loop+": ") {
			return r
		}
	}
	return ""
}

// requireBackoffGrows checks a run of consecutive failed attempts of one
// loop: the first backoff is the loop's first (less jitter), each one is
// longer than the one before until the cap, none passes the cap, and each
// attempt came at least the backoff of the one before after it.
func requireBackoffGrows(t *testing.T, fails []loophealth.Attempt, first, maxBackoff time.Duration) {
	t.Helper()
	require.GreaterOrEqual(t, len(fails), 4, "failed attempts")
	var trace []string
	for i, a := range fails {
		trace = append(trace, fmt.Sprintf("#%d at +%s backoff %s", a.Failures, a.At.Sub(fails[0].At).Round(time.Millisecond), a.Backoff))
		require.LessOrEqual(t, a.Backoff, maxBackoff, "attempt %d: past the cap", i)
		if i == 0 {
			require.LessOrEqual(t, a.Backoff, first, "first backoff")
			require.GreaterOrEqual(t, a.Backoff, first*3/4, "first backoff")
			continue
		}
		prev := fails[i-1]
		require.Equal(t, prev.Failures+1, a.Failures, "attempts %d and %d are not consecutive failures", i-1, i)
		if prev.Backoff < maxBackoff*3/4 {
			require.Greater(t, a.Backoff, prev.Backoff, "attempt %d: the backoff did not grow: %s", i, strings.Join(trace, ", "))
		}
		require.GreaterOrEqual(t, a.At.Sub(prev.At), prev.Backoff,
			"attempt %d came before the backoff of the one before ran out: %s", i, strings.Join(trace, ", "))
	}
	t.Logf("failed attempts: %s", strings.Join(trace, ", "))
}

// loopSeries reads the cronoq_loop_* series of one loop from reg.
func loopSeries(t *testing.T, reg *prometheus.Registry, loop string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "cronoq_loop_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != loop {
				continue
			}
			if c := m.GetCounter(); c != nil {
				out[mf.GetName()] = c.GetValue()
			} else {
				out[mf.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// Every background loop of a node, made to fail through the fault hook:
// the node turns degraded with a reason naming the loop and its error once
// it failed three times in a row, the loop backs off (each wait longer than
// the one before, up to the cap), its series count the failures, and once
// its attempts succeed again it recovers and the node is healthy again.
func TestLoopFailuresDegradeAndRecover(t *testing.T) {
	type env struct {
		t    *testing.T
		c    *testcluster.Cluster
		node *testcluster.Node
	}
	for _, tc := range []struct {
		loop string
		// early: the loop fails from the node's start (it runs once, or
		// first, as the node starts); otherwise from when it leads.
		early bool
		// first is the loop's first backoff, from the test timings.
		first     func(cluster.Config) time.Duration
		configure func(*cluster.Config)
		// arm runs once the node leads and before the fault is set.
		arm func(e env) any
		// healed checks the loop's work got done after the fault ended.
		healed func(e env, armed any) bool
	}{
		{
			loop:  cluster.LoopGossipMeta,
			first: func(c cluster.Config) time.Duration { return c.MetaRefreshInterval },
		},
		{
			loop:  cluster.LoopReconcile,
			first: func(c cluster.Config) time.Duration { return c.Loops.MinBackoff },
		},
		{
			loop:  cluster.LoopClockCheck,
			first: func(c cluster.Config) time.Duration { return c.ClockCheckInterval },
		},
		{
			loop:  cluster.LoopBootstrap,
			early: true,
			first: func(c cluster.Config) time.Duration { return c.MetaRefreshInterval },
		},
		{
			loop:  cluster.LoopLeadership,
			early: true,
			first: func(c cluster.Config) time.Duration { return c.EstablishRetryInterval },
			healed: func(e env, _ any) bool {
				_, err := e.node.Node.Leading()
				return err == nil
			},
		},
		{
			loop:      cluster.LoopACLInitialManagement,
			early:     true,
			first:     func(c cluster.Config) time.Duration { return c.Loops.MinBackoff },
			configure: func(c *cluster.Config) { c.ACLInitialManagement = "initial-secret" },
			healed: func(e env, _ any) bool {
				return e.node.Node.FSM().ACLBootstrapIndex() != 0
			},
		},
		{
			// The engine's timer wake-ups: a task comes due after the
			// fault is set; the entry that makes it ready cannot be
			// appended, which stops the engine, and every engine started
			// after the backoff fails at the same wake-up, with no other
			// traffic.
			loop:  cluster.LoopEngine,
			first: func(c cluster.Config) time.Duration { return c.EstablishRetryInterval },
			arm: func(e env) any {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				runAt := fsm.InstantOf(time.Now().Add(time.Second))
				res, err := e.node.Node.Submit(ctx, cluster.SubmitOne, []cluster.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}, RunAt: runAt}})
				require.NoError(e.t, err)
				require.Len(e.t, res.Tasks, 1)
				task, ok := e.node.Node.FSM().Get(res.Tasks[0].ID)
				require.True(e.t, ok)
				require.Equal(e.t, fsm.StatusScheduled, task.Status)
				return res.Tasks[0].ID
			},
			healed: func(e env, armed any) bool {
				task, ok := e.node.Node.FSM().Get(armed.(string))
				return ok && task.Status == fsm.StatusQueued
			},
		},
	} {
		t.Run(tc.loop, func(t *testing.T) {
			c := testcluster.New(t, 0)
			rec := newLoopRecorder()
			cfg := c.Config("n1")
			cfg.BootstrapExpect = 1
			rec.install(&cfg)
			if tc.configure != nil {
				tc.configure(&cfg)
			}
			injected := fmt.Errorf("injected failure of %s", tc.loop)
			if tc.early {
				rec.fail(tc.loop, injected)
			}
			tn := c.Start(cfg)
			e := env{t: t, c: c, node: tn}
			n := tn.Node
			var armed any
			if !tc.early {
				c.Leader()
				if tc.arm != nil {
					armed = tc.arm(e)
				}
				rec.fail(tc.loop, injected)
				if tc.loop == cluster.LoopEngine {
					task, _ := n.FSM().Get(armed.(string))
					require.Equal(t, fsm.StatusScheduled, task.Status, "the task came due before the fault was set")
				}
			}

			// Degraded, naming the loop and its error, once it failed
			// three times in a row; kept failing until it failed four.
			var reason string
			require.Eventually(t, func() bool {
				h := n.Health()
				if r := loopReason(h, tc.loop); r != "" && h.Status == cluster.HealthDegraded {
					reason = r
				}
				return reason != "" && loopStatus(t, n, tc.loop).Failures >= 4
			}, 30*time.Second, 5*time.Millisecond, "%s never failed four times in a row: %+v", tc.loop, loopStatus(t, n, tc.loop))
			require.Contains(t, reason, injected.Error())
			require.Regexp(t, `^loop `+tc.loop+`: \d+ consecutive failures \(backing off [0-9.]+m?s\): `, reason)
			series := loopSeries(t, tn.Metrics.Registry(), tc.loop)
			require.GreaterOrEqual(t, series["cronoq_loop_failures_total"], 4.0)
			require.GreaterOrEqual(t, series["cronoq_loop_consecutive_failures"], 3.0)
			require.Greater(t, series["cronoq_loop_backoff_seconds"], 0.0)

			rec.heal(tc.loop)
			require.Eventually(t, func() bool {
				st := loopStatus(t, n, tc.loop)
				h := n.Health()
				return st.Failures == 0 && !st.LastSuccess.IsZero() && loopReason(h, tc.loop) == "" &&
					(tc.healed == nil || tc.healed(e, armed))
			}, 30*time.Second, 5*time.Millisecond, "%s did not recover: %+v", tc.loop, loopStatus(t, n, tc.loop))
			require.Eventually(t, func() bool { return n.Health().Status == cluster.HealthOK },
				10*time.Second, 5*time.Millisecond, "the node is not healthy again: %v", n.Health().Reasons)
			series = loopSeries(t, tn.Metrics.Registry(), tc.loop)
			require.Zero(t, series["cronoq_loop_consecutive_failures"])
			require.Zero(t, series["cronoq_loop_degraded"])

			// The failed attempts, in order, as the fault hook saw them.
			requireBackoffGrows(t, rec.failures(tc.loop, injected), tc.first(cfg), cfg.Loops.MaxBackoff)
		})
	}
}

// A node whose join list names a node that is not running yet: its join
// loop fails (a real dial error), backs off from JoinRetryMin up to
// JoinRetryMax, makes the node degraded, and joins once the other node
// starts.
func TestJoinLoopBacksOffAndRecovers(t *testing.T) {
	c := testcluster.New(t, 0)
	rec := newLoopRecorder()
	later := c.Config("n2") // not started yet: its gossip address refuses
	cfg := c.Config("n1")
	cfg.BootstrapExpect = 1
	cfg.Join = []string{later.GossipAddr}
	rec.install(&cfg)
	n1 := c.Start(cfg).Node

	require.Eventually(t, func() bool {
		return loopReason(n1.Health(), cluster.LoopJoin) != "" && loopStatus(t, n1, cluster.LoopJoin).Failures >= 5
	}, 30*time.Second, 5*time.Millisecond, "join never failed five times: %+v", loopStatus(t, n1, cluster.LoopJoin))
	require.Contains(t, loopReason(n1.Health(), cluster.LoopJoin), "joining ["+later.GossipAddr+"]")
	st := loopStatus(t, n1, cluster.LoopJoin)
	require.LessOrEqual(t, st.Backoff, cfg.JoinRetryMax)

	c.Start(later)
	require.Eventually(t, func() bool {
		return loopStatus(t, n1, cluster.LoopJoin).Failures == 0 && len(n1.Members()) == 2
	}, 30*time.Second, 5*time.Millisecond, "n1 did not join n2")
	require.Empty(t, loopReason(n1.Health(), cluster.LoopJoin))

	var fails []loophealth.Attempt
	rec.mu.Lock()
	for _, a := range rec.attempts[cluster.LoopJoin] {
		if a.Err != nil {
			fails = append(fails, a)
		}
	}
	rec.mu.Unlock()
	requireBackoffGrows(t, fails, cfg.JoinRetryMin, cfg.JoinRetryMax)
}
