//go:build jepsenfaults

package cluster

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// fakeBase is a settable base clock.
type fakeBase struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeBase) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeBase) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func TestFaultClockOffsetAndRate(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	base := &fakeBase{t: t0}
	cfg := Config{}
	f := newFaults(&cfg)
	f.clock.base = base.now
	c := f.clock
	require.Equal(t, t0, cfg.Engine.Now(), "the engine clock is the fault clock")

	require.NoError(t, c.Set(5*time.Second, 1))
	require.Equal(t, t0.Add(5*time.Second), c.Now())
	base.add(time.Second)
	require.Equal(t, t0.Add(6*time.Second), c.Now())

	// A rate applies to the time elapsed since the call; the offset is from
	// the base clock at the call.
	require.NoError(t, c.Set(-time.Minute, 2))
	anchor := t0.Add(time.Second)
	require.Equal(t, anchor.Add(-time.Minute), c.Now())
	base.add(10 * time.Second)
	require.Equal(t, anchor.Add(-time.Minute+20*time.Second), c.Now())
	off, rate := c.Setting()
	require.Equal(t, -time.Minute, off)
	require.Equal(t, 2.0, rate)

	require.NoError(t, c.Set(0, 0.5))
	base.add(10 * time.Second)
	require.Equal(t, t0.Add(11*time.Second+5*time.Second), c.Now())

	require.NoError(t, c.Set(0, 1))
	require.Equal(t, base.now(), c.Now())
	off, rate = c.Setting()
	require.Zero(t, off)
	require.Equal(t, 1.0, rate)

	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		require.ErrorIs(t, c.Set(0, bad), ErrBadRate)
	}
}

// The injected offset is what the engine sees as now: a task delayed by an
// hour becomes due as soon as the clock is moved two hours ahead.
func TestFaultClockFeedsEngine(t *testing.T) {
	n := devNode(t)
	eng := waitEngine(t, n)
	ctx := context.Background()

	subs, _, err := submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "later"}, Delay: time.Hour}}))
	require.NoError(t, err)
	later := subs[0].ID
	task, ok := n.state.Get(later)
	require.True(t, ok)
	require.Equal(t, fsm.StatusScheduled, task.Status)

	require.NoError(t, n.FaultClock().Set(2*time.Hour, 1))
	// The engine reads the clock at its next step.
	before := time.Now()
	subs, _, err = submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "now"}}}))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		task, _ := n.state.Get(later)
		return task.Status == fsm.StatusQueued
	}, 5*time.Second, 5*time.Millisecond, "the delayed task did not become due")
	task, _ = n.state.Get(subs[0].ID)
	require.False(t, task.SubmittedAt.Time().Before(before.Add(2*time.Hour)), "submitted at %s", task.SubmittedAt.Time())

	require.NoError(t, n.FaultClock().Set(0, 1))
	require.WithinDuration(t, time.Now(), n.now(), time.Minute)
}

func waitEngine(t *testing.T, n *Node) *engine.Engine {
	t.Helper()
	var eng *engine.Engine
	require.Eventually(t, func() bool {
		var err error
		eng, err = n.engine()
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "node never served")
	return eng
}

// Every raft log write of the node waits the injected delay, so every
// commit takes at least that long.
func TestFaultDiskDelaysCommits(t *testing.T) {
	n := devNode(t)
	eng := waitEngine(t, n)
	ctx := context.Background()
	_, _, err := submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}}}))
	require.NoError(t, err)

	const delay = 30 * time.Millisecond
	d := n.FaultDisk()
	d.Set(delay, 0)
	before, disk0 := eng.Stats(), d.Stats()
	const commits = 3
	for range commits {
		_, _, err := submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}}}))
		require.NoError(t, err)
	}
	after, disk1 := eng.Stats(), d.Stats()
	require.Equal(t, delay, disk1.Delay)
	require.GreaterOrEqual(t, disk1.Delayed-disk0.Delayed, uint64(commits))
	require.GreaterOrEqual(t, disk1.Injected-disk0.Injected, commits*delay)
	n1 := after.Committed - before.Committed
	require.GreaterOrEqual(t, n1, uint64(commits))
	require.GreaterOrEqual(t, after.CommitLatency-before.CommitLatency, time.Duration(n1)*delay,
		"commits were not slowed by the delay")

	// Reset: writes go straight through again.
	d.Set(0, 0)
	disk2 := d.Stats()
	_, _, err = submitted(eng.Submit(ctx, core.SubmitOne, []core.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}}}))
	require.NoError(t, err)
	disk3 := d.Stats()
	require.Greater(t, disk3.Writes, disk2.Writes)
	require.Equal(t, disk2.Delayed, disk3.Delayed)
	require.Equal(t, disk2.Stalled, disk3.Stalled)
}

// A stall blocks the store's writes until it ends or the settings change.
func TestFaultDiskStall(t *testing.T) {
	d := newFaultDisk()
	f := &faults{disk: d}
	inner := raft.NewInmemStore()
	logs, stable := f.logStore(inner), f.stableStore(inner)

	// Reads never wait.
	d.Set(0, time.Hour)
	_, err := logs.LastIndex()
	require.NoError(t, err)
	require.Greater(t, d.Stats().StallRemaining, 59*time.Minute)

	done := make(chan error, 2)
	go func() { done <- logs.StoreLogs([]*raft.Log{{Index: 1, Term: 1}}) }()
	go func() { done <- stable.SetUint64([]byte("CurrentTerm"), 1) }()
	require.Eventually(t, func() bool { return d.Stats().Stalled == 2 }, 5*time.Second, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a write went through a stall: %v", err)
	default:
	}
	last, err := inner.LastIndex()
	require.NoError(t, err)
	require.Zero(t, last)

	d.Set(0, 0) // released
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	last, err = inner.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(1), last)
	term, err := inner.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), term)

	// A short stall ends by itself, once.
	d.Set(0, 20*time.Millisecond)
	require.NoError(t, stable.Set([]byte("k"), []byte("v")))
	s := d.Stats()
	require.Zero(t, s.StallRemaining)
	require.NoError(t, stable.Set([]byte("k"), []byte("v2")))
	require.Equal(t, s.Stalled, d.Stats().Stalled, "a stall blocks only until it ends")
}

// submitted splits a submit's answer the way the tests read it.
func submitted(res *core.SubmitResult, err error) ([]core.Submitted, []error, error) {
	if res == nil {
		return nil, nil, err
	}
	return res.Tasks, res.Errs, err
}
