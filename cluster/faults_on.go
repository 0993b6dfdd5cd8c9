//go:build jepsenfaults

package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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

// StaleInsert is what ApplyStaleInsert did.
type StaleInsert struct {
	ID     string // the task the batch inserts
	Epoch  uint64 // the stale epoch the batch carries
	Answer error  // the FSM's answer: nil when it applied the batch
}

// ApplyStaleInsert is the stale-insert failpoint (leader only): it appends
// through raft a commit batch stamped with the epoch before the current one,
// holding the insert of a queued task of pool, key and kind, as an engine
// deposed by this leader could have left in flight. A correct FSM refuses it
// as stale; an Answer of nil means the task now exists although no client
// submitted it.
func (n *Node) ApplyStaleInsert(ctx context.Context, pool, key, kind string) (StaleInsert, error) {
	epoch := n.Epoch()
	if epoch == 0 {
		return StaleInsert{}, n.notLeader(nil)
	}
	out := StaleInsert{Epoch: epoch - 1}
	now := fsm.InstantOf(n.now())
	out.ID = staleProbeID(now, out.Epoch)
	task := &fsm.Task{
		ID:       out.ID,
		Template: fsm.Template{Pool: pool, Kind: kind, Priority: fsm.PriorityNormal, MaxAttempts: 1},
		Key:      key, RunAt: now, Status: fsm.StatusQueued, SubmittedAt: now, UpdatedAt: now,
	}
	data, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: out.Epoch, Time: now, Mutations: []fsm.Mutation{{Insert: task}}})
	if err != nil {
		return out, fmt.Errorf("encoding a batch of epoch %d: %w", out.Epoch, err)
	}
	resp, err := n.applyAwait(ctx, data)
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return out, n.notLeader(err)
		}
		return out, fmt.Errorf("appending a batch of epoch %d: %w", out.Epoch, err)
	}
	out.Answer, _ = resp.(error)
	return out, nil
}

// staleProbeID is a task id in the engine's layout (26 Crockford base32
// characters of [6 bytes unix ms][4 bytes epoch][6 bytes sequence]) for the
// stale-insert failpoint. Its sequence has the top bit set and random low
// bits, so no engine's id (sequences count from 1) nor an earlier probe's has
// it.
func staleProbeID(at fsm.Instant, epoch uint64) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	ms := uint64(int64(at) / int64(time.Millisecond))
	seq := 1<<47 | rand.Uint64()&(1<<47-1)
	var b, tmp [8]byte
	var id [16]byte
	binary.BigEndian.PutUint64(tmp[:], ms)
	copy(id[0:6], tmp[2:8])
	binary.BigEndian.PutUint32(id[6:10], uint32(epoch))
	binary.BigEndian.PutUint64(b[:], seq)
	copy(id[10:16], b[2:8])
	hi, lo := binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
	var out [26]byte
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
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
