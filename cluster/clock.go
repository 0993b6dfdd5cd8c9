package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/metrics"
)

// Clock skew guard.
//
// The leader fires recurring schedules and expires leases by its own clock
// (the engine clock, Config.Engine.Now). A leader whose clock is wrong would
// fire early or late and take leases from live workers, so the leader checks
// its clock against the other voters' and holds those timers while it
// disagrees with a majority of them:
//
//   - Measuring: every ClockCheckInterval the leader reads each other
//     voter's engine clock through the ClockReader the API server installs
//     (GET /v1/internal/clock), NTP style: offset = peer - (t_send +
//     t_recv)/2, with half the round trip as its error bound. A reading is
//     known when the voter answers within the round (a second, or
//     ClockCheckInterval when longer); otherwise (an unreachable voter, no
//     API address in gossip, a late answer) it is unknown.
//   - Deciding (judgeClock): a voter agrees with the leader when its
//     reading is known and does not prove a difference beyond the bound:
//     |offset| - rtt/2 <= MaxClockSkew. The leader agrees with itself. The
//     leader's clock is skewed when fewer voters than a majority of the
//     configuration (itself included) agree: unknown readings never count as
//     agreeing.
//   - Holding: while skewed the engine's core holds recurring fires, lease
//     expiries and attempt timeouts (core.Core.SetClockHold), health reports
//     degraded with "clock skew: ...", and the engine's clock runs on from
//     its last trusted reading by the elapsed monotonic time instead of
//     following the wall clock. When a round finds a majority agreeing again
//     the hold is released and the engine follows the wall clock again.
//   - Steps: a wall clock that moves by more than the bound against the
//     monotonic clock between two readings (a jump, or a step back) is held
//     at once, before the engine acts on the new reading, until a round
//     that started after the step finds a majority agreeing.
//
// The guard runs only while the node leads, an API server has installed a
// ClockReader, and there is another voter to compare with; a single-voter
// cluster trusts its clock. MaxClockSkew < 0 turns it off.

// ClockReader reads the engine clock of the node whose API address is
// httpAddr. The API server installs one (transport: GET /v1/internal/clock
// through its node-to-node client); without one the guard does not run.
type ClockReader func(ctx context.Context, httpAddr string) (time.Time, error)

// SetClockReader installs the reader of other nodes' clocks (nil removes
// it).
func (n *Node) SetClockReader(r ClockReader) {
	if r == nil {
		n.clockReader.Store(nil)
		return
	}
	n.clockReader.Store(&r)
}

// EngineClock reads this node's engine clock as configured (the injected
// clock in fault builds), not held: what other nodes compare theirs with.
func (n *Node) EngineClock() time.Time { return n.clock.raw().Round(0) }

// ClockSample is one voter's clock reading in a round.
type ClockSample struct {
	Voter  string
	Known  bool          // answered within the round
	Offset time.Duration // its clock minus this node's, at the middle of the exchange
	RTT    time.Duration // round trip of the exchange (the offset's error is half of it)
}

// ClockVerdict is the outcome of one round of clock readings.
type ClockVerdict struct {
	Bound  time.Duration // MaxClockSkew
	Voters int           // voters in the configuration, this node included
	Agree  int           // voters whose clock agrees with this node's, itself included
	Known  int           // other voters whose reading is known
	// Median is the median offset of the known readings (their clock minus
	// this node's; 0 when none is known).
	Median time.Duration
	Skewed bool // fewer than a majority of the voters agree
}

// judgeClock decides whether this node's clock is skewed from the readings
// of the other voters (see the rule above). voters counts the
// configuration's voters, this node included.
func judgeClock(bound time.Duration, voters int, samples []ClockSample) ClockVerdict {
	v := ClockVerdict{Bound: bound, Voters: max(voters, 1), Agree: 1}
	var offsets []time.Duration
	for _, s := range samples {
		if !s.Known {
			continue
		}
		v.Known++
		offsets = append(offsets, s.Offset)
		if abs(s.Offset)-s.RTT/2 <= bound {
			v.Agree++
		}
	}
	if len(offsets) > 0 {
		slices.Sort(offsets)
		m := len(offsets) / 2
		v.Median = offsets[m]
		if len(offsets)%2 == 0 {
			v.Median = offsets[m-1] + (offsets[m]-offsets[m-1])/2
		}
	}
	v.Skewed = v.Agree < v.Voters/2+1
	return v
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// reason is the health reason of a skewed verdict.
func (v ClockVerdict) reason() string {
	unknown := v.Voters - 1 - v.Known
	detail := fmt.Sprintf("%d of %d voters agree within %s", v.Agree, v.Voters, v.Bound)
	if unknown > 0 {
		detail += fmt.Sprintf(", %d without a reading", unknown)
	}
	if v.Known == 0 {
		return fmt.Sprintf("clock skew: leader clock cannot be compared with a majority (%s); recurring fires and lease expiries wait", detail)
	}
	dir := "ahead of"
	if v.Median > 0 {
		dir = "behind"
	}
	return fmt.Sprintf("clock skew: leader clock differs from a majority by %s (%s the median of the readings; %s); recurring fires and lease expiries wait",
		abs(v.Median), dir, detail)
}

// clockGuard is the engine clock of a node with the guard: the configured
// clock while it is trusted, and while it is held the last reading it gave
// advanced by the monotonic time elapsed since. It detects steps itself and
// takes the verdicts of the leader's rounds.
type clockGuard struct {
	raw    func() time.Time
	bound  time.Duration
	logger hclog.Logger

	mu       sync.Mutex
	armed    bool          // a round found other voters to compare with
	verdict  ClockVerdict  // of the last round while armed
	stepAt   time.Time     // (monotonic) the latest step seen since the last agreeing round; zero: none
	step     time.Duration // how far the wall clock moved against the monotonic one
	lastRaw  time.Time     // last reading of raw (wall)
	lastMono time.Time     // time.Now of that reading (monotonic)
	lastOut  time.Time     // what Now returned then
}

// installClockGuard puts the guard over the node's engine clock (the
// injected one in fault builds): the engine reads its time and its hold
// through it.
func (n *Node) installClockGuard() {
	raw := n.cfg.Engine.Now
	if raw == nil {
		raw = time.Now
	}
	n.clock = &clockGuard{raw: raw, bound: n.cfg.MaxClockSkew, logger: n.logger.Named("clock")}
	if n.cfg.MaxClockSkew < 0 {
		return
	}
	n.cfg.Engine.Now = n.clock.Now
	n.cfg.Engine.ClockHold = n.clock.held
}

// Now reads the clock: the configured clock while trusted, otherwise the
// last reading advanced by the monotonic time elapsed since. A wall clock
// step of more than the bound holds the clock from this reading on.
func (g *clockGuard) Now() time.Time {
	raw := g.raw().Round(0)
	mono := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	out := raw
	if !g.lastMono.IsZero() {
		elapsed := mono.Sub(g.lastMono)
		if g.armed {
			// NTP slews by at most 500 ppm: allow twice that between
			// readings far apart.
			jump := raw.Sub(g.lastRaw) - elapsed
			if abs(jump) > g.bound+elapsed/1000 {
				// Only a round that starts after the latest step can
				// release the hold.
				g.stepAt, g.step = mono, jump
				g.logger.Warn("engine clock stepped: recurring fires and lease expiries wait until a majority of voters confirm it",
					"step", jump, "max_clock_skew", g.bound)
			}
			if g.verdict.Skewed || !g.stepAt.IsZero() {
				out = g.lastOut.Add(elapsed)
			}
		}
	}
	g.lastRaw, g.lastMono, g.lastOut = raw, mono, out
	return out
}

// held reports whether the clock is held (Config.Engine.ClockHold).
func (g *clockGuard) held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.heldLocked()
}

func (g *clockGuard) heldLocked() bool {
	return g.armed && (g.verdict.Skewed || !g.stepAt.IsZero())
}

// judged takes the verdict of a round that started at start (monotonic)
// and reports whether the hold changed. A round that started before a step
// cannot release the hold the step set.
func (g *clockGuard) judged(v ClockVerdict, start time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.heldLocked()
	g.armed = true
	g.verdict = v
	if !v.Skewed && !g.stepAt.IsZero() && !start.Before(g.stepAt) {
		g.stepAt, g.step = time.Time{}, 0
	}
	now := g.heldLocked()
	switch {
	case now && !was:
		g.logger.Warn("leader clock skewed: recurring fires and lease expiries wait", "median_offset", v.Median,
			"agree", v.Agree, "voters", v.Voters, "known", v.Known, "max_clock_skew", g.bound)
	case was && !now:
		g.logger.Info("leader clock agrees with a majority again: recurring fires and lease expiries resume",
			"median_offset", v.Median, "agree", v.Agree, "voters", v.Voters)
	}
	return now != was
}

// disarm stops guarding (this node does not lead, or has nothing to compare
// with) and reports whether that released a hold.
func (g *clockGuard) disarm() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.heldLocked()
	g.armed, g.verdict = false, ClockVerdict{}
	g.stepAt, g.step = time.Time{}, 0
	return was
}

// ClockStatus is the guard's state, as the leader last measured it.
type ClockStatus struct {
	Armed   bool          // the leader compares its clock with other voters'
	Held    bool          // recurring fires and lease expiries wait
	Step    time.Duration // a step seen and not yet confirmed by a round (0: none)
	Verdict ClockVerdict  // of the last round
}

// ClockStatus returns the clock guard's state (zero unless this node leads
// and has other voters to compare with).
func (n *Node) ClockStatus() ClockStatus {
	g := n.clock
	g.mu.Lock()
	defer g.mu.Unlock()
	return ClockStatus{Armed: g.armed, Held: g.heldLocked(), Step: g.step, Verdict: g.verdict}
}

// clockReason is the health reason while the clock is held ("" otherwise).
func (n *Node) clockReason() string {
	st := n.ClockStatus()
	switch {
	case !st.Held:
		return ""
	case st.Verdict.Skewed:
		return st.Verdict.reason()
	default:
		return fmt.Sprintf("clock skew: leader clock stepped by %s; recurring fires and lease expiries wait until a majority of voters confirm it", st.Step)
	}
}

// clockLoop runs the leader's rounds every ClockCheckInterval until
// shutdown. A round fails when the engine could not be told that the hold
// changed (it is told again on the next round); rounds back off while
// they fail.
func (n *Node) clockLoop() {
	defer n.loopsWG.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.shutdownCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	l := n.loops.clock
	untold := false // the engine may not know the last change of the hold
	for {
		if !l.Sleep(ctx, l.Next(n.cfg.ClockCheckInterval)) {
			return
		}
		err := l.Injected()
		if err == nil {
			changed := n.checkClock(ctx)
			if ctx.Err() != nil {
				return
			}
			if changed || untold {
				err = n.tellEngineClock(ctx)
				untold = err != nil
			}
		}
		if err != nil {
			wait := l.Failed(err)
			n.logger.Warn("clock check failed", "error", err, "retry_in", wait)
			continue
		}
		l.Succeeded()
	}
}

// checkClock runs one round: while this node leads, has a ClockReader and
// other voters, it reads their clocks and judges its own. It reports
// whether the hold changed.
func (n *Node) checkClock(ctx context.Context) bool {
	var (
		reader *ClockReader
		voters []raft.ServerID
	)
	if n.raft.State() == raft.Leader {
		reader = n.clockReader.Load()
		if f := n.raft.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if s.Suffrage == raft.Voter {
					voters = append(voters, s.ID)
				}
			}
		}
	}
	if reader == nil || len(voters) < 2 {
		return n.clock.disarm()
	}
	start := time.Now()
	samples := n.readClocks(ctx, *reader, voters)
	if ctx.Err() != nil {
		return false
	}
	return n.clock.judged(judgeClock(n.cfg.MaxClockSkew, len(voters), samples), start)
}

// tellEngineClock makes the leader's engine read the hold again (a
// follower has no engine: the next one reads it as it starts).
func (n *Node) tellEngineClock(ctx context.Context) error {
	eng, err := n.engine()
	if err != nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, n.cfg.ClockCheckInterval)
	defer cancel()
	if err := eng.RecheckClock(rctx); err != nil && !errors.Is(err, engine.ErrStopped) && ctx.Err() == nil {
		return fmt.Errorf("telling the engine about the clock hold: %w", err)
	}
	return nil
}

// readClocks reads the clock of every voter but this node, at once.
func (n *Node) readClocks(ctx context.Context, read ClockReader, voters []raft.ServerID) []ClockSample {
	timeout := max(n.cfg.ClockCheckInterval, time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	samples := make([]ClockSample, 0, len(voters)-1)
	for _, id := range voters {
		if string(id) != n.id {
			samples = append(samples, ClockSample{Voter: string(id)})
		}
	}
	var wg sync.WaitGroup
	for i := range samples {
		m, ok := n.members.get(samples[i].Voter)
		if !ok || m.HTTPAddr == "" {
			continue
		}
		s := &samples[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := n.EngineClock()
			start := time.Now()
			peer, err := read(ctx, m.HTTPAddr)
			rtt := time.Since(start)
			if err != nil {
				return
			}
			s.Known, s.RTT = true, rtt
			s.Offset = peer.Sub(sent.Add(rtt / 2))
		}()
	}
	wg.Wait()
	return samples
}

// clockGauges feeds the clock metrics while this node leads and checks its
// clock.
func (n *Node) clockGauges() (metrics.ClockGauges, bool) {
	if !n.IsLeader() {
		return metrics.ClockGauges{}, false
	}
	st := n.ClockStatus()
	if !st.Armed {
		return metrics.ClockGauges{}, false
	}
	return metrics.ClockGauges{Skew: -st.Verdict.Median, Held: st.Held}, true
}
