// Package loophealth tracks the health of a server's periodic background
// loops (joining, reconciling, the engine's commits, deliveries, ...): for
// each loop its consecutive failures, its last error, its last success and
// the backoff it is on. A failing loop waits longer between attempts, its
// first backoff doubling up to a cap with jitter, and returns to its own
// pace at its first success; a loop that failed Threshold times in a row is
// degraded, which the node's health reports with the loop's name and last
// error. A Set is also a prometheus.Collector of the loops' series.
//
// # Registering a loop
//
// A loop registers once under a name that says what it does (the name is
// the label of its series and appears in the node's health), then reports
// every attempt and waits as its Loop says:
//
//	l := set.Register("webhook-delivery", loophealth.Policy{Min: time.Second})
//	for {
//		// Its interval while healthy; what is left of its backoff while
//		// failing.
//		if !l.Sleep(ctx, l.Next(interval)) {
//			return // ctx ended
//		}
//		if err := l.Do(func() error { return deliver(ctx) }); err != nil {
//			logger.Warn("delivering", "error", err)
//		}
//	}
//
// Do runs one attempt and records its outcome; a loop whose attempts are
// not one call records them itself with Succeeded and Failed (Failed returns
// the backoff to wait). A loop that stops running for a while (it runs only
// on the leader, say) calls Reset, so that its old failures do not keep it
// degraded. A loop woken by events rather than a timer asks Ready before
// each attempt and skips it while its backoff runs. An attempt that did not
// happen (nothing to do, the loop shutting down) is not reported at all. A
// loop that ends for good (one per subscription, say) calls Remove;
// registering a name again returns the loop already there, with its
// history.
//
// # In a node
//
// A cronoq node's set is cluster.Node.Loops(), configured by
// cluster.Config.Loops. A loop registered there shows in the node's Health
// (a reason "loop NAME: N consecutive failures (backing off D): ERROR" once
// it is degraded), under "loops" in GET /v1/health, and in the node's
// /metrics as cronoq_loop_failures_total, cronoq_loop_consecutive_failures,
// cronoq_loop_backoff_seconds and cronoq_loop_degraded, labelled
// loop="NAME". A loop that runs only on the leader makes no attempt on a
// follower and calls Reset when its term ends.
//
// # Tests
//
// Options.Clock replaces the clock the backoffs are measured and waited on
// (see loophealthtest.Clock), Options.Fault fails chosen attempts (Do, and
// loops that call Injected, return its error instead of running the
// attempt), Options.OnAttempt observes every attempt, and Options.Rand fixes
// the jitter.
package loophealth

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultThreshold  = 3
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = time.Minute
)

// jitterShare is the largest share of a backoff that jitter takes off:
// backoffs lie in [3/4, 1] of the doubled value, so each one is still
// longer than the one before until the cap.
const jitterShare = 0.25

// Clock is what a Set reads the time from and waits on.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; false if it already fired or
	// was stopped.
	Stop() bool
}

// SystemClock is the wall clock and the runtime's timers.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }

// Options configure a Set. Zero fields take the defaults.
type Options struct {
	// Threshold is how many consecutive failures make a loop degraded (3).
	Threshold int
	// MinBackoff is the first backoff of a loop whose Policy gives none
	// (1s).
	MinBackoff time.Duration
	// MaxBackoff caps the backoff of a loop whose Policy gives no cap
	// (1m); a loop's cap is never below its first backoff.
	MaxBackoff time.Duration
	// Clock measures and waits (SystemClock).
	Clock Clock
	// Rand returns a number in [0, 1) for the jitter (math/rand/v2).
	Rand func() float64
	// OnAttempt, when set, observes every attempt after it is recorded. It
	// must not block: it runs on the loop's goroutine.
	OnAttempt func(Attempt)
	// Fault, when set, is asked before every attempt of every loop (Do,
	// Injected): an error fails the attempt with it instead of running it.
	// For tests.
	Fault func(loop string) error
}

// WithDefaults returns a copy of o with every zero field set.
func (o Options) WithDefaults() Options {
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Clock == nil {
		o.Clock = SystemClock
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return o
}

// Policy is a loop's backoff: after n consecutive failures it waits Min
// times 2^(n-1), at most Max, less a random share of up to a quarter.
type Policy struct {
	Min time.Duration // 0: the set's MinBackoff
	Max time.Duration // 0: the set's MaxBackoff; never below Min
}

// Attempt is one recorded attempt (Options.OnAttempt).
type Attempt struct {
	Loop string
	At   time.Time // when it was recorded, by the set's clock
	Err  error     // nil: it succeeded
	// Failures counts the loop's consecutive failures, this one included
	// (0 after a success).
	Failures int
	// Backoff is the wait before the next attempt (0 after a success).
	Backoff time.Duration
}

// Status is the health of one loop.
type Status struct {
	Name          string
	Failures      int    // consecutive failed attempts (0: healthy)
	FailuresTotal uint64 // failed attempts so far
	Runs          uint64 // attempts so far
	LastError     string // of the last failure, while Failures > 0
	LastFailure   time.Time
	LastSuccess   time.Time // zero: none yet
	// Backoff is the wait after the last failure before the next attempt,
	// while failing; NextAttempt is when it ends.
	Backoff     time.Duration
	NextAttempt time.Time
	// Degraded: Failures reached the set's threshold.
	Degraded bool
}

// Set is the loops of one server. Its methods are safe for concurrent use.
type Set struct {
	opts Options

	mu    sync.Mutex
	loops []*Loop // in registration order
}

// New returns an empty set.
func New(opts Options) *Set {
	return &Set{opts: opts.WithDefaults()}
}

// Options returns the set's options, defaults applied.
func (s *Set) Options() Options { return s.opts }

// Threshold is how many consecutive failures make a loop degraded.
func (s *Set) Threshold() int { return s.opts.Threshold }

// Clock is the set's clock.
func (s *Set) Clock() Clock { return s.opts.Clock }

// Register returns the loop named name, adding it with policy p if the set
// has none of that name (an existing loop takes p as its policy and keeps
// its history).
func (s *Set) Register(name string, p Policy) *Loop {
	if p.Min <= 0 {
		p.Min = s.opts.MinBackoff
	}
	if p.Max <= 0 {
		p.Max = s.opts.MaxBackoff
	}
	p.Max = max(p.Max, p.Min)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.loops {
		if l.name == name {
			l.mu.Lock()
			l.policy = p
			l.mu.Unlock()
			return l
		}
	}
	l := &Loop{set: s, name: name, policy: p}
	s.loops = append(s.loops, l)
	return l
}

// Loop returns the loop named name.
func (s *Set) Loop(name string) (*Loop, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.loops {
		if l.name == name {
			return l, true
		}
	}
	return nil, false
}

func (s *Set) list() []*Loop {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loops)
}

// Statuses returns the status of every loop, in registration order.
func (s *Set) Statuses() []Status {
	loops := s.list()
	out := make([]Status, 0, len(loops))
	for _, l := range loops {
		out = append(out, l.Status())
	}
	return out
}

// Degraded returns the status of every degraded loop, in registration
// order.
func (s *Set) Degraded() []Status {
	var out []Status
	for _, st := range s.Statuses() {
		if st.Degraded {
			out = append(out, st)
		}
	}
	return out
}

// Loop is one registered loop.
type Loop struct {
	set  *Set
	name string

	mu          sync.Mutex
	policy      Policy
	failures    int
	total       uint64
	runs        uint64
	lastErr     string
	lastFailure time.Time
	lastSuccess time.Time
	backoff     time.Duration
	next        time.Time
}

// Name is the loop's name.
func (l *Loop) Name() string { return l.name }

// Injected returns the error Options.Fault injects into this attempt (nil
// without a hook, or when it lets the attempt run). A loop whose attempt
// is not one call asks it where the attempt starts and fails with it.
func (l *Loop) Injected() error {
	if f := l.set.opts.Fault; f != nil {
		return f(l.name)
	}
	return nil
}

// Do runs one attempt: fn, unless Options.Fault injects an error; it
// records the outcome and returns fn's (or the injected) error.
func (l *Loop) Do(fn func() error) error {
	err := l.Injected()
	if err == nil {
		err = fn()
	}
	if err != nil {
		l.Failed(err)
		return err
	}
	l.Succeeded()
	return nil
}

// Succeeded records a successful attempt: the loop is healthy again and
// back to its own pace.
func (l *Loop) Succeeded() {
	now := l.set.opts.Clock.Now()
	l.mu.Lock()
	l.runs++
	l.failures, l.lastErr, l.backoff, l.next = 0, "", 0, time.Time{}
	l.lastSuccess = now
	l.mu.Unlock()
	if f := l.set.opts.OnAttempt; f != nil {
		f(Attempt{Loop: l.name, At: now})
	}
}

// Failed records a failed attempt (a nil err counts as an unknown error)
// and returns the backoff to wait before the next one.
func (l *Loop) Failed(err error) time.Duration {
	if err == nil {
		err = errors.New("unknown error")
	}
	now := l.set.opts.Clock.Now()
	jitter := l.set.opts.Rand()
	l.mu.Lock()
	l.runs++
	l.total++
	l.failures++
	l.lastErr, l.lastFailure = err.Error(), now
	l.backoff = backoff(l.policy, l.failures, jitter)
	l.next = now.Add(l.backoff)
	failures, d := l.failures, l.backoff
	l.mu.Unlock()
	if f := l.set.opts.OnAttempt; f != nil {
		f(Attempt{Loop: l.name, At: now, Err: err, Failures: failures, Backoff: d})
	}
	return d
}

// Reset ends the loop's run of failures without a success: for a loop
// that stops running for a while (the node no longer leads, the condition
// it watched cleared), so that its old failures do not keep it degraded.
// Its counters and last success stay; the next attempt is not delayed.
func (l *Loop) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures, l.lastErr, l.backoff, l.next = 0, "", 0, time.Time{}
}

// backoff is the wait after n consecutive failures: p.Min doubled n-1
// times, at most p.Max, less jitter (in [0, 1)) times a quarter of it.
func backoff(p Policy, n int, jitter float64) time.Duration {
	d := p.Min
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	return d - time.Duration(jitter*jitterShare*float64(d))
}

// Ready reports whether an attempt may be made now: the loop is healthy,
// or the backoff of its last failure has passed.
func (l *Loop) Ready() bool {
	return l.Next(0) == 0
}

// Next returns how long to wait before the next attempt: interval while the
// loop is healthy, what is left of its backoff while it is failing.
func (l *Loop) Next(interval time.Duration) time.Duration {
	l.mu.Lock()
	failing, next := l.failures > 0, l.next
	l.mu.Unlock()
	if !failing {
		return interval
	}
	return max(next.Sub(l.set.opts.Clock.Now()), 0)
}

// Timer returns a timer of the set's clock that fires after d.
func (l *Loop) Timer(d time.Duration) Timer { return l.set.opts.Clock.NewTimer(d) }

// Sleep waits d on the set's clock; false when ctx ended first.
func (l *Loop) Sleep(ctx context.Context, d time.Duration) bool {
	t := l.Timer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// Status returns the loop's health.
func (l *Loop) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Status{
		Name:          l.name,
		Failures:      l.failures,
		FailuresTotal: l.total,
		Runs:          l.runs,
		LastError:     l.lastErr,
		LastFailure:   l.lastFailure,
		LastSuccess:   l.lastSuccess,
		Backoff:       l.backoff,
		NextAttempt:   l.next,
		Degraded:      l.failures >= l.set.opts.Threshold,
	}
}

// Remove takes the loop out of its set (its series and health go); it may
// be registered again, afresh.
func (l *Loop) Remove() {
	s := l.set
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loops = slices.DeleteFunc(s.loops, func(o *Loop) bool { return o == l })
}

// The series of a Set.
var (
	descFailuresTotal = prometheus.NewDesc("cronoq_loop_failures_total",
		"Failed attempts of a background loop.", []string{"loop"}, nil)
	descConsecutive = prometheus.NewDesc("cronoq_loop_consecutive_failures",
		"Failed attempts of a background loop since its last success (0: healthy).", []string{"loop"}, nil)
	descBackoff = prometheus.NewDesc("cronoq_loop_backoff_seconds",
		"The wait of a failing background loop between its last failure and its next attempt (0: healthy).", []string{"loop"}, nil)
	descDegraded = prometheus.NewDesc("cronoq_loop_degraded",
		"1 while a background loop has failed as many times in a row as makes the node degraded, else 0.", []string{"loop"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Set) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFailuresTotal
	ch <- descConsecutive
	ch <- descBackoff
	ch <- descDegraded
}

// Collect implements prometheus.Collector.
func (s *Set) Collect(ch chan<- prometheus.Metric) {
	for _, st := range s.Statuses() {
		degraded := 0.0
		if st.Degraded {
			degraded = 1
		}
		ch <- prometheus.MustNewConstMetric(descFailuresTotal, prometheus.CounterValue, float64(st.FailuresTotal), st.Name)
		ch <- prometheus.MustNewConstMetric(descConsecutive, prometheus.GaugeValue, float64(st.Failures), st.Name)
		ch <- prometheus.MustNewConstMetric(descBackoff, prometheus.GaugeValue, st.Backoff.Seconds(), st.Name)
		ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, degraded, st.Name)
	}
}
