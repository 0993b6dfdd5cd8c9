package loophealth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronoq/cronoq/internal/loophealth"
	"github.com/cronoq/cronoq/internal/loophealth/loophealthtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)

const ms = time.Millisecond

// The backoff after each of several consecutive failures: doubling from
// Min, capped at Max, shortened by at most a quarter.
func TestBackoffSequence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy loophealth.Policy
		opts   loophealth.Options
		jitter float64
		want   []time.Duration
	}{
		{
			name: "no jitter", policy: loophealth.Policy{Min: 100 * ms, Max: time.Second},
			want: []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second},
		},
		{
			name: "largest jitter", policy: loophealth.Policy{Min: 100 * ms, Max: time.Second}, jitter: 0.5,
			want: []time.Duration{87500 * time.Microsecond, 175 * ms, 350 * ms, 700 * ms, 875 * ms, 875 * ms},
		},
		{
			name: "set defaults", opts: loophealth.Options{MinBackoff: 10 * ms, MaxBackoff: 30 * ms},
			want: []time.Duration{10 * ms, 20 * ms, 30 * ms, 30 * ms},
		},
		{
			name: "cap below min", policy: loophealth.Policy{Min: 50 * ms, Max: 10 * ms},
			want: []time.Duration{50 * ms, 50 * ms},
		},
		{
			name: "library defaults",
			want: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Clock = loophealthtest.NewClock(t0)
			opts.Rand = func() float64 { return tc.jitter }
			l := loophealth.New(opts).Register("l", tc.policy)
			var got []time.Duration
			for range tc.want {
				got = append(got, l.Failed(errors.New("boom")))
			}
			require.Equal(t, tc.want, got)
			l.Succeeded()
			require.Equal(t, tc.want[0], l.Failed(errors.New("again")), "a success resets the backoff")
		})
	}
}

// With random jitter every backoff lies in [3/4, 1] of the doubled value,
// so each is longer than the one before until the cap.
func TestBackoffJitterGrows(t *testing.T) {
	l := loophealth.New(loophealth.Options{}).Register("l", loophealth.Policy{Min: 10 * ms, Max: 5 * time.Second})
	for range 200 {
		prev := time.Duration(0)
		for n := 1; n <= 8; n++ {
			d := l.Failed(errors.New("x"))
			full := 10 * ms << (n - 1)
			require.LessOrEqual(t, d, full)
			require.GreaterOrEqual(t, d, full*3/4)
			require.Greater(t, d, prev, "failure %d", n)
			prev = d
		}
		l.Succeeded()
	}
}

// The status of a loop through failures, the threshold and a recovery.
func TestStatusThresholdRecovery(t *testing.T) {
	clock := loophealthtest.NewClock(t0)
	var attempts []loophealth.Attempt
	s := loophealth.New(loophealth.Options{
		Clock: clock, Rand: func() float64 { return 0 },
		OnAttempt: func(a loophealth.Attempt) { attempts = append(attempts, a) },
	})
	l := s.Register("sweep", loophealth.Policy{Min: time.Second, Max: 10 * time.Second})
	other := s.Register("other", loophealth.Policy{})
	require.Same(t, l, s.Register("sweep", loophealth.Policy{Min: time.Second, Max: 10 * time.Second}))
	require.Equal(t, 3, s.Threshold())

	require.NoError(t, l.Do(func() error { return nil }))
	require.Equal(t, loophealth.Status{Name: "sweep", Runs: 1, LastSuccess: t0}, l.Status())
	require.True(t, l.Ready())
	require.Equal(t, 5*time.Second, l.Next(5*time.Second), "healthy: its own interval")

	for i := 1; i <= 3; i++ {
		clock.Advance(time.Second)
		err := l.Do(func() error { return fmt.Errorf("store closed (%d)", i) })
		require.EqualError(t, err, fmt.Sprintf("store closed (%d)", i))
		st := l.Status()
		require.Equal(t, i, st.Failures)
		require.Equal(t, i >= 3, st.Degraded, "after %d failures", i)
		require.False(t, l.Ready())
	}
	at := t0.Add(3 * time.Second)
	require.Equal(t, loophealth.Status{
		Name: "sweep", Failures: 3, FailuresTotal: 3, Runs: 4, LastError: "store closed (3)",
		LastFailure: at, LastSuccess: t0, Backoff: 4 * time.Second, NextAttempt: at.Add(4 * time.Second), Degraded: true,
	}, l.Status())
	require.Equal(t, []loophealth.Status{l.Status()}, s.Degraded())
	require.Equal(t, []string{"sweep", "other"}, names(s.Statuses()))

	// The backoff runs on the clock: Next counts down, Ready says when.
	require.Equal(t, 4*time.Second, l.Next(time.Hour))
	clock.Advance(3 * time.Second)
	require.Equal(t, time.Second, l.Next(time.Hour))
	require.False(t, l.Ready())
	clock.Advance(time.Second)
	require.True(t, l.Ready())
	require.Zero(t, l.Next(time.Hour))

	clock.Advance(time.Second)
	require.NoError(t, l.Do(func() error { return nil }))
	require.Equal(t, loophealth.Status{Name: "sweep", FailuresTotal: 3, Runs: 5, LastError: "", LastFailure: at, LastSuccess: at.Add(5 * time.Second)}, l.Status())
	require.Empty(t, s.Degraded())
	require.Equal(t, time.Minute, l.Next(time.Minute))

	require.Len(t, attempts, 5)
	require.Equal(t, loophealth.Attempt{Loop: "sweep", At: t0.Add(2 * time.Second), Err: attempts[2].Err, Failures: 2, Backoff: 2 * time.Second}, attempts[2])
	require.Equal(t, loophealth.Attempt{Loop: "sweep", At: at.Add(5 * time.Second)}, attempts[4])

	for range 3 {
		l.Failed(errors.New("again"))
	}
	require.True(t, l.Status().Degraded)
	l.Reset()
	require.Equal(t, loophealth.Status{Name: "sweep", FailuresTotal: 6, Runs: 8, LastFailure: at.Add(5 * time.Second), LastSuccess: at.Add(5 * time.Second)}, l.Status())
	require.True(t, l.Ready(), "a reset loop may run at once")

	other.Remove()
	require.Equal(t, []string{"sweep"}, names(s.Statuses()))
	_, ok := s.Loop("other")
	require.False(t, ok)
	again := s.Register("other", loophealth.Policy{})
	require.NotSame(t, other, again)
	require.Zero(t, again.Status().Runs)
}

func names(sts []loophealth.Status) []string {
	var out []string
	for _, st := range sts {
		out = append(out, st.Name)
	}
	return out
}

// The fault hook fails chosen attempts without running them.
func TestFaultHook(t *testing.T) {
	var mu sync.Mutex
	failing := map[string]error{"a": errors.New("injected")}
	s := loophealth.New(loophealth.Options{Fault: func(loop string) error {
		mu.Lock()
		defer mu.Unlock()
		return failing[loop]
	}})
	a, b := s.Register("a", loophealth.Policy{}), s.Register("b", loophealth.Policy{})
	ran := 0
	run := func() error { ran++; return nil }
	require.EqualError(t, a.Do(run), "injected")
	require.EqualError(t, a.Injected(), "injected")
	require.NoError(t, b.Do(run))
	require.NoError(t, b.Injected())
	require.Equal(t, 1, ran, "an injected failure does not run the attempt")
	require.Equal(t, 1, a.Status().Failures)

	mu.Lock()
	delete(failing, "a")
	mu.Unlock()
	require.NoError(t, a.Do(run))
	require.Equal(t, 2, ran)
	require.Zero(t, a.Status().Failures)
}

// A loop written as the package documents it, on the manual clock: the
// waits it asks for are its interval while healthy, the growing backoff
// while its attempts fail, its interval again once one succeeds.
func TestLoopOnManualClock(t *testing.T) {
	clock := loophealthtest.NewClock(t0)
	var (
		mu    sync.Mutex
		fails = 0
		times []time.Time // of every attempt
	)
	s := loophealth.New(loophealth.Options{Clock: clock, Rand: func() float64 { return 0 }})
	l := s.Register("sweep", loophealth.Policy{Min: 2 * time.Second, Max: 20 * time.Second})
	const interval = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if !l.Sleep(ctx, l.Next(interval)) {
				return
			}
			_ = l.Do(func() error {
				mu.Lock()
				defer mu.Unlock()
				times = append(times, clock.Now())
				if fails > 0 {
					fails--
					return errors.New("store closed")
				}
				return nil
			})
		}
	}()
	defer func() {
		cancel()
		<-done
	}()

	// await waits until the loop sleeps and returns what it asked for.
	await := func() time.Duration {
		t.Helper()
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer wcancel()
		waits, err := clock.AwaitTimers(wctx, 1)
		require.NoError(t, err)
		require.Len(t, waits, 1)
		return waits[0]
	}
	var waits []time.Duration
	for i := range 9 {
		w := await()
		waits = append(waits, w)
		if i == 1 {
			// The loop sleeps before its second attempt: that one and the
			// four after it fail.
			mu.Lock()
			fails = 5
			mu.Unlock()
		}
		clock.Advance(w)
	}
	await() // the last attempt is over
	require.Equal(t, []time.Duration{
		interval, interval, // healthy
		2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 20 * time.Second, // after each of five failures
		interval, interval, // recovered
	}, waits)
	mu.Lock()
	got := times
	mu.Unlock()
	require.Len(t, got, 9)
	for i := 1; i < len(got); i++ {
		require.Equal(t, waits[i], got[i].Sub(got[i-1]), "attempt %d came as long after the one before as the loop waited", i+1)
	}
	require.Zero(t, l.Status().Failures)
	require.Equal(t, uint64(5), l.Status().FailuresTotal)
}

// The set's series.
func TestCollector(t *testing.T) {
	s := loophealth.New(loophealth.Options{Clock: loophealthtest.NewClock(t0), Rand: func() float64 { return 0 }})
	a := s.Register("reconcile", loophealth.Policy{Min: time.Second})
	s.Register("join", loophealth.Policy{})
	for range 3 {
		a.Failed(errors.New("x"))
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(s))
	want := map[string]float64{
		`cronoq_loop_failures_total{loop="join"}`:            0,
		`cronoq_loop_failures_total{loop="reconcile"}`:       3,
		`cronoq_loop_consecutive_failures{loop="join"}`:      0,
		`cronoq_loop_consecutive_failures{loop="reconcile"}`: 3,
		`cronoq_loop_backoff_seconds{loop="join"}`:           0,
		`cronoq_loop_backoff_seconds{loop="reconcile"}`:      4,
		`cronoq_loop_degraded{loop="join"}`:                  0,
		`cronoq_loop_degraded{loop="reconcile"}`:             1,
	}
	require.Equal(t, want, gather(t, reg))

	a.Succeeded()
	want[`cronoq_loop_consecutive_failures{loop="reconcile"}`] = 0
	want[`cronoq_loop_backoff_seconds{loop="reconcile"}`] = 0
	want[`cronoq_loop_degraded{loop="reconcile"}`] = 0
	require.Equal(t, want, gather(t, reg), "the counter keeps counting, the gauges are back to 0")
}

// gather reads reg as name{labels} -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if mf.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			out[fmt.Sprintf("%s{%s}", mf.GetName(), strings.Join(labels, ","))] = v
		}
	}
	return out
}
