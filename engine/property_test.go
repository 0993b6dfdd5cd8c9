package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// The determinism property: random command sequences, driven through a real
// core whose output is encoded into log entries and applied to two FSM
// states (one of them rebuilt mid-way from a snapshot of itself, and a leader
// change mid-way), end with byte-identical snapshots; every entry applies
// without rejection; the same seed produces the same entries byte for byte.
//
// CRONOQ_PROPERTY_SEEDS=n runs seeds 1..n (200 by default);
// CRONOQ_PROPERTY_SEED=s runs seed s alone.
func TestDeterminismProperty(t *testing.T) {
	first, n := uint64(1), uint64(200)
	if v := os.Getenv("CRONOQ_PROPERTY_SEEDS"); v != "" {
		var err error
		n, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "CRONOQ_PROPERTY_SEEDS")
	}
	if v := os.Getenv("CRONOQ_PROPERTY_SEED"); v != "" {
		var err error
		first, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "CRONOQ_PROPERTY_SEED")
		n = 1
	}
	if testing.Short() && n > 20 {
		n = 20
	}
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			one := runSim(t, seed)
			if t.Failed() {
				return
			}
			two := runSim(t, seed)
			require.Equal(t, len(one.entries), len(two.entries), "seed %d: same number of entries", seed)
			for i := range one.entries {
				require.True(t, bytes.Equal(one.entries[i], two.entries[i]),
					"seed %d: entry %d differs between two runs (CRONOQ_PROPERTY_SEED=%d)", seed, i, seed)
			}
			require.Equal(t, one.hash, two.hash, "seed %d", seed)
		})
	}
}

type simResult struct {
	entries [][]byte
	hash    [32]byte
}

type simOp uint8

const (
	opSubmitOne simOp = iota
	opSubmitBatch
	opSubmitMany
	opPollTasks
	opWithdrawPoll
	opCompleteLease
	opHeartbeatLease
	opCancelTask
	opAttach
	opDetachReq
	opAdvance
	opAddSched
	opPauseSched
	opRemoveSched
	numSimOps
)

var simOpNames = [numSimOps]string{
	"submit-one", "submit-batch", "submit-many", "poll", "cancel-poll", "complete",
	"heartbeat", "cancel", "attach", "detach", "advance", "add-schedule",
	"pause-schedule", "remove-schedule",
}

var simWeights = [numSimOps]int{14, 4, 4, 16, 2, 16, 6, 5, 4, 2, 14, 2, 2, 1}

// sim is one run: a core driven synchronously with a fake clock, every
// output committed at once to both states.
type sim struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	now  time.Time
	ccfg core.Config

	core  *core.Core
	a, b  *fsm.State
	index uint64

	entries  [][]byte
	trace    []string
	req      core.ReqID
	polls    []core.ReqID
	waits    []core.ReqID
	submits  []core.ReqID // answered or not: Detach of an answered one is a no-op
	open     map[core.ReqID]bool
	many     map[core.ReqID]bool // enqueue-many requests
	inserted map[string]bool
	ids      []string
	leases   []uint64
	maxLease uint64
	lastID   string
}

func runSim(t *testing.T, seed uint64) simResult {
	s := &sim{
		t:        t,
		seed:     seed,
		rng:      rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		now:      time.Date(2025, 3, 30, 0, 30, 0, 0, time.UTC),
		a:        fsm.New(),
		b:        fsm.New(),
		open:     make(map[core.ReqID]bool),
		many:     make(map[core.ReqID]bool),
		inserted: make(map[string]bool),
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (rerun with CRONOQ_PROPERTY_SEED=%d); last steps:\n  %s",
				seed, seed, strings.Join(s.trace[max(0, len(s.trace)-25):], "\n  "))
		}
	})
	s.ccfg = s.randomConfig()
	s.bump(1)
	c, err := core.New(s.ccfg, 1, s.now)
	require.NoError(t, err)
	s.core = c

	steps := 120 + s.rng.IntN(120)
	recoverAt := steps/4 + s.rng.IntN(steps/2)
	snapshotAt := steps/4 + s.rng.IntN(steps/2)
	for i := 0; i < steps && !t.Failed(); i++ {
		if i == recoverAt {
			s.recoverLeader()
		}
		if i == snapshotAt {
			s.snapshotRestore()
		}
		s.step()
	}
	if t.Failed() {
		return simResult{}
	}
	// Let everything run out: retries, leases, deadlines, retention.
	s.advance(15 * time.Minute)
	require.Equal(t, s.a.Hash(), s.b.Hash(), "seed %d: final states differ", seed)
	var snapA, snapB bytes.Buffer
	_, err = s.a.View().WriteTo(&snapA)
	require.NoError(t, err)
	_, err = s.b.View().WriteTo(&snapB)
	require.NoError(t, err)
	require.True(t, bytes.Equal(snapA.Bytes(), snapB.Bytes()), "seed %d: snapshots differ", seed)
	return simResult{entries: s.entries, hash: s.a.Hash()}
}

func (s *sim) randomConfig() core.Config {
	r := s.rng
	cfg := core.Config{
		HeartbeatWindow: time.Duration(3+r.IntN(10)) * time.Second,
		MaxAttempts:     uint32(1 + r.IntN(4)),
		Backoff:         fsm.Backoff{Initial: time.Second, Max: 20 * time.Second, Jitter: 0.2},
		Retention:       time.Duration(30+r.IntN(600)) * time.Second,
		Seed:            s.seed,
		Pools:           map[string]core.PoolConfig{"p2": {MaxRunning: 1, Bounds: core.Bounds{MaxPending: 4}}},
	}
	if r.IntN(2) == 0 {
		cfg.DefaultPool = core.PoolConfig{Bounds: core.Bounds{MaxPending: 5 + r.IntN(20)}}
	}
	if r.IntN(2) == 0 {
		cfg.Overflow = core.OverflowWait
	}
	if r.IntN(3) == 0 {
		cfg.Global.MaxPendingPerClass[fsm.PriorityLow] = 3
	}
	return cfg
}

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%s ", s.now.Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

// check fails the run unless ok. (Not require: its Helper bookkeeping
// dominates the run time on this hot path.)
func (s *sim) check(ok bool, format string, args ...any) {
	if !ok {
		s.t.Fatalf("seed %d: "+format, append([]any{s.seed}, args...)...)
	}
}

func (s *sim) pick(n int) int { return s.rng.IntN(n) }

func (s *sim) nextReq() core.ReqID {
	s.req++
	s.open[s.req] = true
	return s.req
}

func (s *sim) step() {
	total := 0
	for _, w := range simWeights {
		total += w
	}
	x := s.pick(total)
	op := simOp(0)
	for ; x >= simWeights[op]; op++ {
		x -= simWeights[op]
	}
	c := s.core
	switch op {
	case opSubmitOne, opSubmitBatch, opSubmitMany:
		mode := map[simOp]core.SubmitMode{opSubmitOne: core.SubmitOne, opSubmitBatch: core.SubmitBatch, opSubmitMany: core.SubmitMany}[op]
		n := 1
		if mode != core.SubmitOne {
			n = 1 + s.pick(4)
		}
		specs := make([]core.Spec, n)
		for i := range specs {
			specs[i] = s.randomSpec()
		}
		req := s.nextReq()
		s.submits = append(s.submits, req)
		if mode == core.SubmitMany {
			s.many[req] = true
		}
		s.logf("req %d %s %d specs", req, simOpNames[op], n)
		c.Submit(s.now, req, mode, specs)
	case opPollTasks:
		offer := core.Offer{
			Worker: fmt.Sprintf("w%d", s.pick(3)),
			Pool:   fmt.Sprintf("p%d", s.pick(3)),
			Slots:  1 + s.pick(3),
		}
		if s.pick(3) == 0 {
			offer.Labels = []fsm.KV{{K: "zone", V: []string{"a", "b"}[s.pick(2)]}}
		}
		req := s.nextReq()
		s.polls = append(s.polls, req)
		s.logf("req %d poll %+v", req, offer)
		c.Poll(s.now, req, offer)
	case opWithdrawPoll:
		if len(s.polls) == 0 {
			return
		}
		req := s.polls[s.pick(len(s.polls))]
		s.logf("cancel-poll %d", req)
		c.Detach(req)
		delete(s.open, req)
	case opCompleteLease:
		lease := s.someLease()
		out := core.Outcome{Kind: core.OutcomeKind(s.pick(4))}
		switch out.Kind {
		case core.OutcomeSuccess:
			out.Output = s.bytes(s.pick(40))
		case core.OutcomeRetryable:
			out.Message = "transient"
			if s.pick(3) == 0 {
				out.RetryAfter = time.Duration(s.pick(5000)) * time.Millisecond
			}
		default:
			out.Message = "boom"
		}
		req := s.nextReq()
		s.logf("req %d complete %#x kind %d", req, lease, out.Kind)
		c.Complete(s.now, req, lease, out)
	case opHeartbeatLease:
		lease := s.someLease()
		err := c.Heartbeat(s.now, lease)
		s.logf("heartbeat %#x: %v", lease, err)
	case opCancelTask:
		req := s.nextReq()
		ref := s.someRef()
		s.logf("req %d cancel %s", req, ref)
		c.Cancel(s.now, req, ref)
	case opAttach:
		req := s.nextReq()
		ref := s.someRef()
		s.waits = append(s.waits, req)
		s.logf("req %d attach %s", req, ref)
		c.Attach(s.now, req, ref)
	case opDetachReq:
		var pool []core.ReqID
		pool = append(pool, s.waits...)
		pool = append(pool, s.submits...)
		if len(pool) == 0 {
			return
		}
		req := pool[s.pick(len(pool))]
		s.logf("detach %d", req)
		c.Detach(req)
		delete(s.open, req)
	case opAdvance:
		d := time.Duration(s.pick(12000)) * time.Millisecond
		s.logf("advance %s", d)
		s.advance(d)
		return
	case opAddSched:
		crons := []string{"@every 5s", "@every 1m", "*/10 * * * * *", "0 * * * *", "*/2 * * * *", "bad cron"}
		spec := core.ScheduleSpec{
			Name:         fmt.Sprintf("s%d", s.pick(4)),
			Cron:         crons[s.pick(len(crons))],
			Task:         s.randomSpec().Template,
			Overlap:      fsm.Overlap(s.pick(2)),
			CatchUp:      fsm.CatchUp(s.pick(3)),
			CatchUpLimit: uint32(s.pick(4)),
			Paused:       s.pick(5) == 0,
		}
		if s.pick(4) == 0 {
			spec.TZ = "Europe/Berlin"
		}
		req := s.nextReq()
		s.logf("req %d add-schedule %s %q", req, spec.Name, spec.Cron)
		c.AddSchedule(s.now, req, spec)
	case opPauseSched:
		req := s.nextReq()
		name := fmt.Sprintf("s%d", s.pick(4))
		s.logf("req %d pause-schedule %s", req, name)
		c.PauseSchedule(s.now, req, name, s.pick(2) == 0)
	case opRemoveSched:
		req := s.nextReq()
		name := fmt.Sprintf("s%d", s.pick(4))
		s.logf("req %d remove-schedule %s", req, name)
		c.RemoveSchedule(s.now, req, name)
	}
	s.commit()
}

func (s *sim) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(s.rng.Uint32())
	}
	return b
}

func (s *sim) randomSpec() core.Spec {
	sp := core.Spec{Template: fsm.Template{Pool: fmt.Sprintf("p%d", s.pick(3)),
		Kind:     []string{"email", "resize", "report"}[s.pick(3)],
		Priority: fsm.Priority(s.pick(fsm.NumPriorities)),
		Payload:  s.bytes(s.pick(64))},
	}
	if s.pick(3) == 0 {
		sp.Key = fmt.Sprintf("key%d", s.pick(12))
	}
	if s.pick(3) == 0 {
		sp.Delay = time.Duration(s.pick(20000)) * time.Millisecond
	}
	if s.pick(8) == 0 {
		sp.Deadline = fsm.InstantOf(s.now.Add(sp.Delay + time.Duration(1+s.pick(60))*time.Second))
	}
	if s.pick(6) == 0 {
		sp.Timeout = time.Duration(1+s.pick(8)) * time.Second
	}
	if s.pick(4) == 0 {
		sp.MaxAttempts = uint32(1 + s.pick(3))
	}
	if s.pick(4) == 0 {
		sp.Labels = []fsm.KV{{K: "zone", V: []string{"a", "b"}[s.pick(2)]}}
	}
	if s.pick(5) == 0 {
		sp.Tags = []fsm.KV{{K: "traceparent", V: "00-abc-def-01"}, {K: "a", V: "b"}}
	}
	if s.pick(30) == 0 {
		sp.Kind = "" // invalid
	}
	return sp
}

func (s *sim) someLease() uint64 {
	if len(s.leases) == 0 || s.pick(6) == 0 {
		return s.maxLease + uint64(s.pick(3))
	}
	return s.leases[s.pick(len(s.leases))]
}

func (s *sim) someRef() core.TaskRef {
	switch {
	case s.pick(8) == 0:
		return core.TaskRef{Key: fmt.Sprintf("key%d", s.pick(12))}
	case len(s.ids) == 0 || s.pick(10) == 0:
		return core.TaskRef{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}
	default:
		return core.TaskRef{ID: s.ids[s.pick(len(s.ids))]}
	}
}

// advance moves the clock by d, running every timer at its due instant.
func (s *sim) advance(d time.Duration) {
	target := s.now.Add(d)
	for i := 0; ; i++ {
		s.check(i < 100000, "timers do not advance")
		wake, ok := s.core.NextWake()
		if !ok || wake.After(target) {
			break
		}
		if wake.After(s.now) {
			s.now = wake
		}
		s.core.Tick(s.now)
		s.commit()
		if s.t.Failed() {
			return
		}
	}
	s.now = target
	s.core.Tick(s.now)
	s.commit()
}

// commit takes the core's output, commits its mutations as one entry to
// both states and releases the held actions, checking them against the
// durable state.
func (s *sim) commit() {
	t := s.t
	out := s.core.Ready()
	if len(out.Mutations) > 0 {
		for _, m := range out.Mutations {
			switch {
			case m.Insert != nil:
				s.check(m.Insert.ID > s.lastID, "ids increase: %s after %s", m.Insert.ID, s.lastID)
				s.lastID = m.Insert.ID
				s.inserted[m.Insert.ID] = true
			case m.Start != nil:
				s.check(m.Start.Lease > s.maxLease, "leases increase: %#x after %#x", m.Start.Lease, s.maxLease)
				s.check(m.Start.Lease>>32 == s.core.Epoch(), "lease %#x carries epoch %d", m.Start.Lease, s.core.Epoch())
				s.maxLease = m.Start.Lease
			}
		}
		data, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: s.core.Epoch(), Time: fsm.InstantOf(s.now), Mutations: out.Mutations})
		s.check(err == nil, "encoding: %v", err)
		s.apply(data, nil)
		if t.Failed() {
			return
		}
	}
	for _, r := range out.Replies {
		s.releaseReply(r)
	}
	for _, d := range out.Dispatches {
		s.releaseDispatch(d)
	}
	for _, ev := range out.Events {
		_, ok := s.a.Get(ev.TaskID)
		s.check(ok, "event for %s, which is not durable", ev.TaskID)
	}
	s.checkCounts()
}

// apply applies one entry to both states; want is the expected response
// (nil for a commit batch).
func (s *sim) apply(data []byte, want any) {
	s.index++
	s.entries = append(s.entries, data)
	ra := s.a.Apply(s.index, 1, data)
	rb := s.b.Apply(s.index, 1, data)
	s.check(ra == want, "entry %d on state a: %v, want %v", s.index, ra, want)
	s.check(rb == want, "entry %d on state b: %v, want %v", s.index, rb, want)
}

func (s *sim) answered(req core.ReqID) {
	s.check(s.open[req], "answer to request %d, which is not open", req)
	delete(s.open, req)
}

func (s *sim) releaseReply(r core.Reply) {
	s.answered(r.Req)
	switch v := r.Value.(type) {
	case *core.SubmitResult:
		s.logf("  reply %d: err=%v subs=%d", r.Req, r.Err, len(v.Tasks))
		for i, sub := range v.Tasks {
			if sub.ID == "" {
				s.check(i < len(v.Errs) && v.Errs[i] != nil, "request %d: item %d has neither id nor error", r.Req, i)
				continue
			}
			s.check(s.inserted[sub.ID], "submitted %s of request %d was inserted", sub.ID, r.Req)
			if !s.many[r.Req] {
				// Answered in the step that admitted it. (An enqueue-many is
				// answered with its last item: an early one may be purged by
				// then.)
				_, ok := s.a.Get(sub.ID)
				s.check(ok, "submitted %s (duplicate %v) of request %d is durable", sub.ID, sub.Duplicate, r.Req)
			}
			s.ids = append(s.ids, sub.ID)
		}
	case string: // a waiter's or a completion's task
		s.logf("  reply %d: task %s", r.Req, v)
		if s.isWait(r.Req) {
			task, ok := s.a.Get(v)
			s.check(ok && task.Status.Terminal(), "waiter %d answered before task %s ended", r.Req, v)
		}
	default:
		s.logf("  reply %d: err=%v value=%v", r.Req, r.Err, v)
	}
}

func (s *sim) releaseDispatch(d core.Dispatch) {
	s.answered(d.Req)
	s.logf("  dispatch %d: err=%v grants=%d", d.Req, d.Err, len(d.Grants))
	for _, g := range d.Grants {
		task, ok := s.a.Get(g.ID)
		s.check(ok && task.Status == fsm.StatusRunning && task.Lease == g.Lease && task.Attempt == g.Attempt,
			"grant %+v dispatched before durable: %+v", g, task)
		s.leases = append(s.leases, g.Lease)
	}
}

func (s *sim) isWait(req core.ReqID) bool {
	for _, w := range s.waits {
		if w == req {
			return true
		}
	}
	return false
}

// checkCounts compares the core's gauges with the durable state after a
// commit (nothing is in flight here, so they must agree).
func (s *sim) checkCounts() {
	var pending, running, tasks int
	for _, pc := range s.a.Counts() {
		pending += int(pc.ByStatus[fsm.StatusScheduled] + pc.ByStatus[fsm.StatusQueued] + pc.ByStatus[fsm.StatusRetrying])
		running += int(pc.ByStatus[fsm.StatusRunning])
		for _, n := range pc.ByStatus {
			tasks += int(n)
		}
	}
	st := s.core.Stats()
	s.check(pending == st.Pending, "pending: fsm %d, core %d", pending, st.Pending)
	s.check(running == st.Running, "running: fsm %d, core %d", running, st.Running)
	s.check(tasks == st.Tasks, "tasks: fsm %d, core %d", tasks, st.Tasks)
}

// bump commits an epoch bump to both states.
func (s *sim) bump(epoch uint64) {
	data, err := fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: epoch, Leader: fmt.Sprintf("n%d", epoch), Time: fsm.InstantOf(s.now)})
	require.NoError(s.t, err)
	s.apply(data, epoch)
}

// recoverLeader is a leader change: a new epoch, a core rebuilt from the
// durable state. Requests of the old core are gone with it.
func (s *sim) recoverLeader() {
	epoch := s.core.Epoch() + 1
	s.now = s.now.Add(time.Duration(s.pick(5000)) * time.Millisecond)
	s.logf("recover as leader of epoch %d", epoch)
	s.bump(epoch)
	s.deposedWrite()
	c, err := core.Recover(s.ccfg, s.a.View(), epoch, s.now)
	require.NoError(s.t, err, "seed %d: recover", s.seed)
	s.core = c
	s.polls, s.waits, s.submits = nil, nil, nil
	clear(s.open)
	s.core.Tick(s.now)
	s.commit()
}

// deposedWrite has the old core, which has not noticed the new epoch, commit
// one more batch: every state refuses it identically and changes nothing.
func (s *sim) deposedWrite() {
	old := s.core
	old.AddSchedule(s.now, s.nextReq(), core.ScheduleSpec{Name: "late", Cron: "@every 1h", Task: fsm.Template{Pool: "p0", Kind: "late"}})
	out := old.Ready()
	s.check(len(out.Mutations) > 0, "the deposed core produced no mutation: %+v", out)
	data, err := fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: old.Epoch(), Time: fsm.InstantOf(s.now), Mutations: out.Mutations})
	s.check(err == nil, "encoding: %v", err)
	before, applied := s.a.Hash(), s.a.AppliedIndex()
	s.index++
	s.entries = append(s.entries, data)
	for _, st := range []*fsm.State{s.a, s.b} {
		resp := st.Apply(s.index, 1, data)
		err, _ := resp.(error)
		s.check(errors.Is(err, fsm.ErrStaleEpoch), "a deposed batch is fenced, got %v", resp)
	}
	s.check(s.a.Hash() == before && s.a.AppliedIndex() == applied, "a fenced batch changed the state")
	s.check(s.b.Hash() == before, "a fenced batch changed state b")
}

// snapshotRestore replaces state b by a restore of its own snapshot.
func (s *sim) snapshotRestore() {
	require.Equal(s.t, s.a.Hash(), s.b.Hash(), "seed %d: states differ before the snapshot", s.seed)
	var buf bytes.Buffer
	_, err := s.b.View().WriteTo(&buf)
	require.NoError(s.t, err)
	restored := fsm.New()
	require.NoError(s.t, restored.Restore(&buf), "seed %d: restore", s.seed)
	require.Equal(s.t, s.b.Hash(), restored.Hash(), "seed %d: restored state differs", s.seed)
	require.Equal(s.t, s.b.AppliedIndex(), restored.AppliedIndex())
	require.Equal(s.t, s.b.Epoch(), restored.Epoch())
	s.b = restored
	s.logf("snapshot/restore at index %d", s.index)
}
