//go:build jepsenfaults

package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/fsm"
)

// This file is compiled only into the fault-injection builds (build tag
// jepsenfaults): a controllable clock that feeds the engine, and a raft
// LogStore/StableStore wrapper that delays or stalls writes.

// faults holds the fault controls of one node.
type faults struct {
	clock *FaultClock
	disk  *FaultDisk
}

// newFaults installs a FaultClock as cfg's engine clock (over the clock cfg
// had, time.Now by default) and returns the node's fault controls.
func newFaults(cfg *Config) *faults {
	base := cfg.Engine.Now
	if base == nil {
		base = time.Now
	}
	f := &faults{clock: &FaultClock{base: base}, disk: newFaultDisk()}
	cfg.Engine.Now = f.clock.Now
	return f
}

func (f *faults) logStore(s raft.LogStore) raft.LogStore {
	return &faultLogStore{LogStore: s, disk: f.disk}
}

func (f *faults) stableStore(s raft.StableStore) raft.StableStore {
	return &faultStableStore{StableStore: s, disk: f.disk}
}

// FaultClock returns the node's injected clock, the one its engine reads.
func (n *Node) FaultClock() *FaultClock { return n.faults.clock }

// FaultDisk returns the controls of the node's raft store delays.
func (n *Node) FaultDisk() *FaultDisk { return n.faults.disk }

// ApplyStaleEpochBatch appends through raft, on the leader, a commit batch of
// muts stamped with the epoch before the current one, as an engine deposed
// by this leader could have left in flight, and returns the epoch it used and
// the FSM's answer: nil when the batch was applied, the error it was refused
// with otherwise (a correct FSM refuses it with fsm.ErrStaleEpoch). The batch
// time is the engine's clock. The error is about appending the batch: a
// *NotLeaderError when this node does not lead with a serving engine.
func (n *Node) ApplyStaleEpochBatch(ctx context.Context, muts []fsm.Mutation) (stale uint64, answer error, err error) {
	epoch := n.Epoch()
	if epoch == 0 {
		return 0, nil, n.notLeader(nil)
	}
	stale = epoch - 1
	data, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: stale, Time: fsm.Nanos(n.now()), Mutations: muts})
	if err != nil {
		return stale, nil, fmt.Errorf("encoding a batch of epoch %d: %w", stale, err)
	}
	resp, err := n.applyAwait(ctx, data)
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return stale, nil, n.notLeader(err)
		}
		return stale, nil, fmt.Errorf("appending a batch of epoch %d: %w", stale, err)
	}
	answer, _ = resp.(error)
	return stale, answer, nil
}

// ---------------------------------------------------------------------------
// Clock
// ---------------------------------------------------------------------------

// FaultClock is the node's clock shifted by an offset and running at a rate
// from the moment they were set: at base time t after a Set at base time
// t0, it reads t0 + offset + (t - t0) * rate. Unset (or offset 0 and rate
// 1) it reads the base clock.
type FaultClock struct {
	base    func() time.Time
	setting atomic.Pointer[clockSetting]
}

type clockSetting struct {
	anchor time.Time // base time of the Set
	offset time.Duration
	rate   float64
}

// ErrBadRate is a clock rate that is negative or not a finite number.
var ErrBadRate = errors.New("clock rate must be a finite number >= 0")

// Now reads the clock.
func (c *FaultClock) Now() time.Time {
	t := c.base()
	s := c.setting.Load()
	if s == nil {
		return t
	}
	elapsed := float64(t.Sub(s.anchor)) * s.rate
	if elapsed > math.MaxInt64/2 {
		elapsed = math.MaxInt64 / 2
	}
	// Round(0) drops the monotonic reading: the result is a wall time.
	return s.anchor.Add(s.offset + time.Duration(elapsed)).Round(0)
}

// Set shifts the clock by offset from the base clock's current reading and
// makes it run at rate from now on. Set(0, 1) restores the base clock.
func (c *FaultClock) Set(offset time.Duration, rate float64) error {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		return ErrBadRate
	}
	if offset == 0 && rate == 1 {
		c.setting.Store(nil)
		return nil
	}
	c.setting.Store(&clockSetting{anchor: c.base(), offset: offset, rate: rate})
	return nil
}

// Setting returns the offset and rate in force.
func (c *FaultClock) Setting() (offset time.Duration, rate float64) {
	if s := c.setting.Load(); s != nil {
		return s.offset, s.rate
	}
	return 0, 1
}

// ---------------------------------------------------------------------------
// Disk
// ---------------------------------------------------------------------------

// FaultDisk delays the writes of the node's raft LogStore (StoreLog,
// StoreLogs) and StableStore (Set, SetUint64): every write waits Delay, and
// while a stall is on (from the Set that asked for it until its duration
// has passed) every write waits for the stall to end first. Reads are not
// delayed. A later Set releases the writes waiting under the previous one.
type FaultDisk struct {
	mu         sync.Mutex
	delay      time.Duration
	stallUntil time.Time
	changed    chan struct{} // closed by the next Set

	writes   atomic.Uint64
	delayed  atomic.Uint64
	stalled  atomic.Uint64
	injected atomic.Int64 // nanoseconds spent waiting
}

func newFaultDisk() *FaultDisk { return &FaultDisk{changed: make(chan struct{})} }

// DiskStats are the settings and counters of a FaultDisk.
type DiskStats struct {
	Delay          time.Duration // added to every write
	StallRemaining time.Duration // left of the current stall
	Writes         uint64        // raft store writes so far
	Delayed        uint64        // writes that waited the delay
	Stalled        uint64        // writes that waited for a stall
	Injected       time.Duration // total time writes spent waiting
}

// Set delays every write by delay from now on and, when stall > 0, blocks
// the writes of the next stall (from now). Set(0, 0) clears both.
func (d *FaultDisk) Set(delay, stall time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay = max(delay, 0)
	d.stallUntil = time.Time{}
	if stall > 0 {
		d.stallUntil = time.Now().Add(stall)
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

// Stats returns the current settings and the counters.
func (d *FaultDisk) Stats() DiskStats {
	d.mu.Lock()
	s := DiskStats{Delay: d.delay}
	if !d.stallUntil.IsZero() {
		s.StallRemaining = max(time.Until(d.stallUntil), 0)
	}
	d.mu.Unlock()
	s.Writes = d.writes.Load()
	s.Delayed = d.delayed.Load()
	s.Stalled = d.stalled.Load()
	s.Injected = time.Duration(d.injected.Load())
	return s
}

// wait holds one write for the stall in force and the delay.
func (d *FaultDisk) wait() {
	d.writes.Add(1)
	d.mu.Lock()
	delay, until, changed := d.delay, d.stallUntil, d.changed
	d.mu.Unlock()
	start := time.Now()
	if stall := until.Sub(start); !until.IsZero() && stall > 0 {
		d.stalled.Add(1)
		if !sleepOrClosed(stall, changed) {
			d.injected.Add(int64(time.Since(start)))
			return
		}
	}
	if delay > 0 {
		d.delayed.Add(1)
		sleepOrClosed(delay, changed)
	}
	d.injected.Add(int64(time.Since(start)))
}

// sleepOrClosed waits d, or until ch is closed; it reports whether d passed.
func sleepOrClosed(d time.Duration, ch <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ch:
		return false
	}
}

// faultLogStore delays the writes of a raft.LogStore.
type faultLogStore struct {
	raft.LogStore
	disk *FaultDisk
}

func (s *faultLogStore) StoreLog(l *raft.Log) error {
	s.disk.wait()
	return s.LogStore.StoreLog(l)
}

func (s *faultLogStore) StoreLogs(ls []*raft.Log) error {
	s.disk.wait()
	return s.LogStore.StoreLogs(ls)
}

// faultStableStore delays the writes of a raft.StableStore.
type faultStableStore struct {
	raft.StableStore
	disk *FaultDisk
}

func (s *faultStableStore) Set(k, v []byte) error {
	s.disk.wait()
	return s.StableStore.Set(k, v)
}

func (s *faultStableStore) SetUint64(k []byte, v uint64) error {
	s.disk.wait()
	return s.StableStore.SetUint64(k, v)
}
