package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

// The determinism property: random command sequences, driven through a real
// core whose output is encoded into log entries and applied to two FSM
// states (one of them rebuilt mid-way from a snapshot of itself, and one or
// two leader changes mid-way), end with byte-identical snapshots; every
// entry applies without rejection; the same seed produces the same entries
// byte for byte.
//
// The commands include dependencies between tasks, workflows (submitted,
// spawned by completions, fired by schedules, cancelled), and external
// tasks; some clusters start on the log format before them and upgrade
// mid-way. After every step the durable state must hold the invariants of
// checkGraph (dependencies, workflow status, retention), and the answers
// of most requests are checked against what the durable state said before
// the request; no entry needs a newer log format than the cluster's, no
// external task is dispatched, no schedule slot fires twice. A last phase
// works off what is left, so that workflows run to their end.
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
	cov := new(simCoverage)
	if n >= minCoverageSeeds {
		// Runs once every seed's subtest is done.
		t.Cleanup(func() {
			if !t.Failed() {
				cov.check(t)
			}
		})
	}
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			one := runSim(t, seed, cov)
			if t.Failed() {
				return
			}
			two := runSim(t, seed, nil)
			if t.Failed() {
				return
			}
			require.Equal(t, len(one.entries), len(two.entries), "seed %d: same number of entries", seed)
			for i := range one.entries {
				require.True(t, bytes.Equal(one.entries[i], two.entries[i]),
					"seed %d: entry %d differs between two runs (CRONOQ_PROPERTY_SEED=%d)", seed, i, seed)
			}
			require.Equal(t, one.hash, two.hash, "seed %d", seed)
		})
	}
}

// ---------------------------------------------------------------------------
// Coverage
// ---------------------------------------------------------------------------

// minCoverageSeeds is the number of seeds from which every event of
// simCoverage must have happened at least once: a change that made the
// random operations miss a whole feature fails the test instead of
// weakening it unnoticed.
const minCoverageSeeds = 100

type covEvent int

const (
	covUnblocked covEvent = iota
	covDepCancelled
	covDepDoneRan
	covWorkflowSucceeded
	covWorkflowFailed
	covWorkflowCancelled
	covWorkflowCancelledWhole
	covWorkflowAdmitted
	covWorkflowDuplicate
	covWorkflowInvalid
	covWorkflowPurged
	covWorkflowPurgeHeld
	covTaskPurgeHeld
	covUnknownDepRefused
	covSpawned
	covSpawnJoined
	covSpawnInvalid
	covSpawnStale
	covExternalCompleted
	covExternalFailed
	covExternalNotWaiting
	covScheduledWorkflow
	covBatchKeyDep
	covMemberCancelled
	covVersionRefused
	covPoolSet
	covDeleted
	covLaneBlocked
	covLaneUnblocked
	covLaneWaited
	covConcShared
	covParked
	covAdmitted
	covGlobalSet
	covRetried
	covRetriedLane
	covRetryRefused
	covCancelledMany
	numCovEvents
)

var covNames = [numCovEvents]string{
	"task unblocked", "task cancelled for a dependency", "policy done ran after a failed dependency",
	"workflow succeeded", "workflow failed", "workflow cancelled", "workflow cancelled as a whole",
	"workflow admitted", "duplicate workflow key", "invalid workflow refused", "workflow purged", "workflow purge held by a dependent",
	"task purge held by a dependent", "dependency on an unknown or purged task refused",
	"children spawned", "spawning task joined a new workflow", "invalid children refused",
	"children of a stale lease refused", "external task completed", "external task failed by request",
	"external completion refused as not waiting", "schedule fired a workflow",
	"batch spec depending on an earlier spec by key", "workflow member cancelled alone",
	"workflow refused by the log version",
	"pool settings changed", "task deleted", "lane blocked", "blocked lane released by a delete",
	"lane member waited for its head", "concurrency key ran two at once", "task parked",
	"parked task admitted", "global bounds changed",
	"ended task retried", "task blocking its lane retried", "retry of a live or succeeded task refused",
	"tasks cancelled by filter",
}

// simCoverage counts, over all seeds, how often each event happened.
type simCoverage [numCovEvents]atomic.Int64

func (c *simCoverage) check(t *testing.T) {
	var missing []string
	var report []string
	for i := range c {
		n := c[i].Load()
		report = append(report, fmt.Sprintf("%s: %d", covNames[i], n))
		if n == 0 {
			missing = append(missing, covNames[i])
		}
	}
	t.Logf("coverage of the random operations:\n  %s", strings.Join(report, "\n  "))
	require.Empty(t, missing, "events no seed produced")
}

func (s *sim) covered(e covEvent) {
	if s.cov != nil {
		s.cov[e].Add(1)
	}
}

// coveredOnce counts e for id the first time only (for what the checks of
// the durable state see again at every step).
func (s *sim) coveredOnce(e covEvent, id string) {
	if s.cov == nil {
		return
	}
	k := fmt.Sprintf("%d/%s", e, id)
	if !s.seen[k] {
		s.seen[k] = true
		s.covered(e)
	}
}

// ---------------------------------------------------------------------------
// The simulation
// ---------------------------------------------------------------------------

type simResult struct {
	entries [][]byte
	hash    [32]byte
}

type simOp uint8

const (
	opSubmitOne simOp = iota
	opSubmitBatch
	opSubmitMany
	opSubmitWorkflow
	opPollTasks
	opWithdrawPoll
	opCompleteLease
	opHeartbeatLease
	opCancelTask
	opCancelMember
	opCancelWorkflow
	opCompleteExternal
	opAttach
	opAttachWorkflow
	opDetachReq
	opAdvance
	opAddSched
	opPauseSched
	opRemoveSched
	opSetPool
	opDelete
	opRetry
	opCancelMany
	numSimOps
)

var simOpNames = [numSimOps]string{
	"submit-one", "submit-batch", "submit-many", "submit-workflow", "poll", "cancel-poll",
	"complete", "heartbeat", "cancel", "cancel-member", "cancel-workflow", "complete-external",
	"attach", "attach-workflow", "detach", "advance", "add-schedule", "pause-schedule",
	"remove-schedule", "set-pool", "delete", "retry", "cancel-many",
}

var simWeights = [numSimOps]int{12, 5, 4, 7, 18, 2, 24, 8, 3, 1, 2, 4, 3, 2, 2, 14, 3, 2, 1, 2, 2, 3, 1}

// reqKind is what an open request is, for the checks of its answer.
type reqKind uint8

const (
	reqOther reqKind = iota
	reqSubmit
	reqSubmitMany
	reqWorkflow
	reqPoll
	reqWait
	reqWaitWorkflow
)

// openReq is a request the core has not answered yet.
type openReq struct {
	kind reqKind
	step int // the step that sent it
	// check, when set, checks the answer against what the durable state
	// said when the request was sent; it runs once the answer's entry is
	// applied. late says the answer comes in a later step (a submit that
	// waited for space).
	check func(r core.Reply, late bool)
}

// sim is one run: a core driven synchronously with a fake clock, every
// output committed at once to both states.
type sim struct {
	t          *testing.T
	seed       uint64
	rng        *rand.Rand
	now        time.Time
	ccfg       core.Config
	logVersion uint16
	cov        *simCoverage // nil: not counted (a replay)

	core  *core.Core
	a, b  *fsm.State
	index uint64
	step  int

	entries   [][]byte
	trace     []string
	req       core.ReqID
	open      map[core.ReqID]*openReq
	polls     []core.ReqID
	waits     []core.ReqID // task and workflow waiters
	submits   []core.ReqID // answered or not: Detach of an answered one is a no-op
	inserted  map[string]bool
	ids       []string            // every task inserted, in order
	external  []string            // the external ones
	members   []string            // tasks that became workflow members
	wfs       []string            // every workflow created, in order
	wfMembers map[string][]string // workflow -> the tasks that became its members
	leases    []uint64
	leaseTask map[uint64]string // lease -> the task it was granted for
	maxLease  uint64
	lastID    string
	spawned   int             // counter naming spawned children
	seen      map[string]bool // for coveredOnce
	slots     map[string]bool // schedule@slot of every fire that inserted something
	concMax   map[string]int  // pool -> the highest concurrency limit it ever had

	// The commit whose replies are being released.
	batch  []fsm.Mutation
	aborts []core.Abort
}

func runSim(t *testing.T, seed uint64, cov *simCoverage) simResult {
	s := &sim{
		t:         t,
		seed:      seed,
		cov:       cov,
		rng:       rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		now:       time.Date(2025, 3, 30, 0, 30, 0, 0, time.UTC),
		a:         fsm.New(),
		b:         fsm.New(),
		open:      make(map[core.ReqID]*openReq),
		inserted:  make(map[string]bool),
		wfMembers: make(map[string][]string),
		leaseTask: make(map[uint64]string),
		seen:      make(map[string]bool),
		slots:     make(map[string]bool),
		concMax:   make(map[string]int),
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (rerun with CRONOQ_PROPERTY_SEED=%d); last steps:\n  %s",
				seed, seed, strings.Join(s.trace[max(0, len(s.trace)-40):], "\n  "))
		}
	})
	s.ccfg = s.randomConfig()
	s.logVersion = s.ccfg.LogVersion
	s.bump(1)
	c, err := core.New(s.ccfg, 1, s.now)
	require.NoError(t, err)
	s.core = c

	steps := 120 + s.rng.IntN(120)
	recoverAt := steps/4 + s.rng.IntN(steps/2)
	snapshotAt := steps/4 + s.rng.IntN(steps/2)
	recoverAgain := -1
	if s.pick(2) == 0 {
		recoverAgain = steps/2 + s.pick(steps/2)
	}
	upgradeAt := -1
	if s.logVersion < fsm.LogVersion {
		upgradeAt = s.pick(steps)
	}
	for s.step = 0; s.step < steps && !t.Failed(); s.step++ {
		if s.step == recoverAt || s.step == recoverAgain {
			s.recoverLeader()
		}
		if s.step == snapshotAt {
			s.snapshotRestore()
		}
		if s.step == upgradeAt {
			s.logf("upgrade to log format %d", fsm.LogVersion)
			s.logVersion = fsm.LogVersion
			s.ccfg.LogVersion = fsm.LogVersion
			s.core.SetLogVersion(fsm.LogVersion)
		}
		s.randomStep()
		if !t.Failed() {
			s.checkGraph(false)
		}
	}
	if t.Failed() {
		return simResult{}
	}
	s.drain(30)
	if t.Failed() {
		return simResult{}
	}
	// Let everything run out: retries, leases, deadlines, retention.
	s.advance(15 * time.Minute)
	if t.Failed() {
		return simResult{}
	}
	s.checkGraph(true)
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
		LogVersion:      fsm.LogVersion,
	}
	if r.IntN(2) == 0 {
		cfg.DefaultPool = core.PoolConfig{Bounds: core.Bounds{MaxPending: 8 + r.IntN(24)}}
	}
	if o := core.OverflowPolicy(r.IntN(3)); o != core.OverflowReject {
		cfg.DefaultPool.Overflow = o
		p2 := cfg.Pools["p2"]
		p2.Overflow = o
		cfg.Pools["p2"] = p2
	}
	if r.IntN(3) == 0 {
		cfg.Global.MaxPendingPerClass[fsm.PriorityLow] = 3
	}
	if r.IntN(3) == 0 {
		// Short: dependencies are purged while their dependents live.
		cfg.Retention = time.Duration(5+r.IntN(30)) * time.Second
	}
	if r.IntN(8) == 0 {
		// A cluster with a server of the release before flow control
		// (format 3): keys, pool settings and the workflows that use them
		// are refused until the upgrade.
		cfg.LogVersion = 3
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
		s.t.Fatalf("seed %d (CRONOQ_PROPERTY_SEED=%d): "+format, append([]any{s.seed, s.seed}, args...)...)
	}
}

func (s *sim) pick(n int) int { return s.rng.IntN(n) }

// nextReq opens a request of kind; check, when not nil, checks its answer.
func (s *sim) nextReq(kind reqKind, check func(r core.Reply, late bool)) core.ReqID {
	s.req++
	s.open[s.req] = &openReq{kind: kind, step: s.step, check: check}
	return s.req
}

// settleDue runs the timers that are due now (retention purges released in
// the last step), so that the durable state is the core's state when the
// next command is chosen and its answer predicted.
func (s *sim) settleDue() {
	for i := 0; !s.settled() && !s.t.Failed(); i++ {
		// Each round may release purges held by the tasks it ended.
		s.check(i < 100, "timers due now do not settle")
		s.core.Tick(s.now)
		s.commit()
	}
}

// settled reports whether no timer is due.
func (s *sim) settled() bool {
	wake, ok := s.core.NextWake()
	return !ok || wake.After(s.now)
}

func (s *sim) randomStep() {
	s.settleDue()
	if s.t.Failed() {
		return
	}
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
		s.submit(op)
	case opSubmitWorkflow:
		s.submitWorkflow()
	case opPollTasks:
		offer := core.Offer{
			Worker: fmt.Sprintf("w%d", s.pick(3)),
			Pool:   fmt.Sprintf("p%d", s.pick(3)),
			Slots:  1 + s.pick(3),
		}
		if s.pick(3) == 0 {
			offer.Labels = []fsm.KV{{K: "zone", V: []string{"a", "b"}[s.pick(2)]}}
		}
		req := s.nextReq(reqPoll, nil)
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
		s.complete()
	case opHeartbeatLease:
		lease := s.someLease()
		err := c.Heartbeat(s.now, lease)
		s.logf("heartbeat %#x: %v", lease, err)
	case opCancelTask:
		s.cancel(s.someRef())
	case opCancelMember:
		if len(s.members) == 0 {
			return
		}
		s.cancel(core.TaskRef{ID: s.recent(s.members, 20)})
	case opCancelWorkflow:
		s.cancelWorkflow()
	case opCompleteExternal:
		s.completeExternal()
	case opAttach:
		ref := s.someRef()
		req := s.nextReq(reqWait, nil)
		s.waits = append(s.waits, req)
		s.logf("req %d attach %s", req, ref)
		c.Attach(s.now, req, ref)
	case opAttachWorkflow:
		ref := s.someWorkflowRef()
		req := s.nextReq(reqWaitWorkflow, nil)
		s.waits = append(s.waits, req)
		s.logf("req %d attach-workflow %s", req, ref)
		c.AttachWorkflow(s.now, req, ref)
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
		s.addSchedule()
	case opPauseSched:
		req := s.nextReq(reqOther, nil)
		name := fmt.Sprintf("s%d", s.pick(4))
		s.logf("req %d pause-schedule %s", req, name)
		c.PauseSchedule(s.now, req, name, s.pick(2) == 0)
	case opRemoveSched:
		req := s.nextReq(reqOther, nil)
		name := fmt.Sprintf("s%d", s.pick(4))
		s.logf("req %d remove-schedule %s", req, name)
		c.RemoveSchedule(s.now, req, name)
	case opSetPool:
		s.setPool()
	case opDelete:
		s.deleteTask()
	case opRetry:
		s.retryTask()
	case opCancelMany:
		s.cancelMany()
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

// recent picks one of the last n elements of xs (not empty): recent tasks
// are the ones most likely to be live.
func (s *sim) recent(xs []string, n int) string {
	return xs[len(xs)-1-s.pick(min(len(xs), n))]
}

// ---------------------------------------------------------------------------
// Random specs
// ---------------------------------------------------------------------------

// randomSpec returns a spec; ok is false when it is invalid on purpose.
func (s *sim) randomSpec() (sp core.Spec, ok bool) {
	sp = core.Spec{Template: fsm.Template{Pool: fmt.Sprintf("p%d", s.pick(3)),
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
	if s.pick(4) == 0 {
		for n := 1 + s.pick(2); n > 0; n-- {
			sp.DependsOn = append(sp.DependsOn, s.depRef())
		}
	}
	if s.pick(3) == 0 {
		sp.DepPolicy = fsm.DepDone
	}
	if s.pick(12) == 0 {
		sp.External = true
		if sp.Deadline == 0 && s.pick(3) != 0 {
			sp.Deadline = fsm.InstantOf(s.now.Add(sp.Delay + time.Duration(1+s.pick(90))*time.Second))
		}
	}
	s.randomKeys(&sp)
	if s.pick(30) == 0 {
		sp.Kind = "" // invalid
		return sp, false
	}
	return sp, true
}

// randomStepSpec returns the spec of a workflow step or a spawned child:
// no key, and dependencies on tasks that exist (their ids in deps).
func (s *sim) randomStepSpec() (sp core.Spec, deps []string, ok bool) {
	sp, ok = s.randomSpec()
	sp.Key = ""
	sp.DependsOn = nil
	if s.pick(3) != 0 {
		// Fewer ways to fail, so that whole workflows succeed too.
		sp.Deadline, sp.Timeout, sp.External = 0, 0, false
	}
	if s.pick(6) == 0 {
		if ref, id, found := s.existingRef(); found {
			sp.DependsOn = []core.TaskRef{ref}
			deps = []string{id}
		}
	}
	return sp, deps, ok
}

// depRef is a dependency for a plain submit: mostly a recent task (live,
// ended or purged), by id or key, sometimes a key or an id that names
// nothing.
func (s *sim) depRef() core.TaskRef {
	switch {
	case len(s.ids) > 0 && s.pick(5) != 0:
		id := s.recent(s.ids, 30)
		if s.pick(3) == 0 {
			if t, ok := s.a.Get(id); ok && t.Key != "" {
				return core.TaskRef{Key: t.Key}
			}
		}
		return core.TaskRef{ID: id}
	case s.pick(2) == 0:
		return core.TaskRef{Key: fmt.Sprintf("key%d", s.pick(12))}
	default:
		return core.TaskRef{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}
	}
}

// existingRef returns a reference to a recent task that exists, and its id.
func (s *sim) existingRef() (core.TaskRef, string, bool) {
	for try := 0; try < 3 && len(s.ids) > 0; try++ {
		id := s.recent(s.ids, 40)
		t, ok := s.a.Get(id)
		if !ok {
			continue
		}
		if t.Key != "" && s.pick(2) == 0 {
			return core.TaskRef{Key: t.Key}, id, true
		}
		return core.TaskRef{ID: id}, id, true
	}
	return core.TaskRef{}, "", false
}

// someLease returns a lease to complete or heartbeat: mostly one that is
// current, else one granted before (stale by now, mostly), or one never
// granted.
func (s *sim) someLease() uint64 {
	switch {
	case len(s.leases) == 0 || s.pick(8) == 0:
		return s.maxLease + uint64(s.pick(3))
	case s.pick(3) == 0:
		return s.leases[s.pick(len(s.leases))]
	}
	var current []uint64
	for i := len(s.leases) - 1; i >= 0 && i >= len(s.leases)-16; i-- {
		if t, ok := s.a.Get(s.leaseTask[s.leases[i]]); ok && t.Status == fsm.StatusRunning && t.Lease == s.leases[i] {
			current = append(current, s.leases[i])
		}
	}
	if len(current) == 0 {
		return s.leases[len(s.leases)-1]
	}
	return current[s.pick(len(current))]
}

func (s *sim) someRef() core.TaskRef {
	switch {
	case s.pick(8) == 0:
		return core.TaskRef{Key: fmt.Sprintf("key%d", s.pick(12))}
	case len(s.ids) == 0 || s.pick(10) == 0:
		return core.TaskRef{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}
	case s.pick(2) == 0:
		return core.TaskRef{ID: s.recent(s.ids, 20)}
	default:
		return core.TaskRef{ID: s.ids[s.pick(len(s.ids))]}
	}
}

func (s *sim) someWorkflowRef() core.WorkflowRef {
	switch {
	case s.pick(5) == 0:
		return core.WorkflowRef{Key: fmt.Sprintf("wk%d", s.pick(6))}
	case len(s.wfs) == 0 || s.pick(10) == 0:
		return core.WorkflowRef{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}
	default:
		return core.WorkflowRef{ID: s.recent(s.wfs, 10)}
	}
}

// ---------------------------------------------------------------------------
// Time, commits and the release of held actions
// ---------------------------------------------------------------------------

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
	var purged []string
	var fired []*fsm.Fire
	if len(out.Mutations) > 0 {
		for _, m := range out.Mutations {
			switch {
			case m.Insert != nil:
				ins := m.Insert
				s.check(ins.ID > s.lastID, "ids increase: %s after %s", ins.ID, s.lastID)
				s.lastID = ins.ID
				s.inserted[ins.ID] = true
				s.ids = append(s.ids, ins.ID)
				if ins.External() {
					s.external = append(s.external, ins.ID)
				}
				if ins.Workflow() != "" {
					s.members = append(s.members, ins.ID)
					s.wfMembers[ins.Workflow()] = append(s.wfMembers[ins.Workflow()], ins.ID)
				}
			case m.Start != nil:
				s.check(m.Start.Lease > s.maxLease, "leases increase: %#x after %#x", m.Start.Lease, s.maxLease)
				s.check(m.Start.Lease>>32 == s.core.Epoch(), "lease %#x carries epoch %d", m.Start.Lease, s.core.Epoch())
				s.maxLease = m.Start.Lease
			case m.Finish != nil:
				if m.Finish.Workflow != "" {
					s.members = append(s.members, m.Finish.ID)
					s.wfMembers[m.Finish.Workflow] = append(s.wfMembers[m.Finish.Workflow], m.Finish.ID)
				}
				if m.Finish.Status == fsm.StatusCancelled && strings.HasPrefix(m.Finish.Error, "dependency ") {
					s.covered(covDepCancelled)
				}
			case m.PutWorkflow != nil:
				s.wfs = append(s.wfs, m.PutWorkflow.ID)
			case m.EndWorkflow != nil:
				s.covered(map[fsm.WorkflowStatus]covEvent{
					fsm.WorkflowSucceeded: covWorkflowSucceeded,
					fsm.WorkflowFailed:    covWorkflowFailed,
					fsm.WorkflowCancelled: covWorkflowCancelled,
				}[m.EndWorkflow.Status])
			case m.PurgeWorkflow != nil:
				purged = append(purged, m.PurgeWorkflow.ID)
			case m.Unblock != nil:
				s.covered(covUnblocked)
			case m.Admit != nil:
				s.admitted(m.Admit)
			case m.Fire != nil:
				if m.Fire.TaskID != "" || m.Fire.Workflow != "" {
					slot := fmt.Sprintf("%s@%d", m.Fire.Name, m.Fire.Slot)
					s.check(!s.slots[slot], "schedule %s fires its slot %s twice", m.Fire.Name, m.Fire.Slot.Time())
					s.slots[slot] = true
				}
				if m.Fire.Workflow != "" {
					fired = append(fired, m.Fire)
					s.covered(covScheduledWorkflow)
				}
			}
		}
		b := &fsm.CommitBatch{Epoch: s.core.Epoch(), Time: fsm.InstantOf(s.now), Mutations: out.Mutations}
		data, err := fsm.EncodeCommitBatch(b)
		s.check(err == nil, "encoding: %v", err)
		s.check(b.Version <= s.logVersion, "an entry needs log format %d, the cluster understands %d", b.Version, s.logVersion)
		pre := s.a.View()
		s.apply(data, nil)
		if t.Failed() {
			return
		}
		for _, m := range out.Mutations {
			if m.Start != nil {
				task, _ := s.a.Get(m.Start.ID)
				s.check(!task.External(), "external task %s was dispatched", task.ID)
			}
		}
		s.checkStarts(out.Mutations, pre)
		s.checkFlow()
		for _, f := range fired {
			s.checkFired(f)
		}
		for _, id := range purged {
			_, ok := s.a.Workflow(id)
			s.check(!ok, "purged workflow %s is still there", id)
			for _, m := range s.wfMembers[id] {
				_, ok := s.a.Get(m)
				s.check(!ok, "member %s of purged workflow %s is still there", m, id)
			}
			delete(s.wfMembers, id)
			s.covered(covWorkflowPurged)
		}
	}
	s.batch, s.aborts = out.Mutations, out.Aborts
	for _, r := range out.Replies {
		s.releaseReply(r)
	}
	for _, d := range out.Dispatches {
		s.releaseDispatch(d)
	}
	s.batch, s.aborts = nil, nil
	for _, ev := range out.Events {
		if ev.TaskID == "" {
			_, ok := s.a.Workflow(ev.Workflow)
			s.check(ok && ev.WorkflowStatus != 0, "event for workflow %s (%s), which is not durable", ev.Workflow, ev.WorkflowStatus)
			continue
		}
		task, ok := s.a.Get(ev.TaskID)
		s.check(ok, "event for %s, which is not durable", ev.TaskID)
		s.check(ev.Workflow == task.Workflow() && ev.Step == task.Step(), "event for %s names workflow %s step %q, the task has %s %q",
			ev.TaskID, ev.Workflow, ev.Step, task.Workflow(), task.Step())
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

func (s *sim) releaseReply(r core.Reply) {
	p := s.open[r.Req]
	s.check(p != nil, "answer to request %d, which is not open", r.Req)
	delete(s.open, r.Req)
	switch v := r.Value.(type) {
	case *core.SubmitResult:
		s.logf("  reply %d: err=%v subs=%d", r.Req, r.Err, len(v.Tasks))
		s.check(p.kind == reqSubmit || p.kind == reqSubmitMany, "request %d answered with a submit result", r.Req)
		for i, sub := range v.Tasks {
			if sub.ID == "" {
				s.check(i < len(v.Errs) && v.Errs[i] != nil, "request %d: item %d has neither id nor error", r.Req, i)
				continue
			}
			s.check(s.inserted[sub.ID], "submitted %s of request %d was inserted", sub.ID, r.Req)
			if p.kind != reqSubmitMany {
				// Answered in the step that admitted it. (An enqueue-many is
				// answered with its last item: an early one may be purged by
				// then.)
				_, ok := s.a.Get(sub.ID)
				s.check(ok, "submitted %s (duplicate %v) of request %d is durable", sub.ID, sub.Duplicate, r.Req)
			}
		}
	case string: // a waiter's task or workflow, or an external completion's task
		s.logf("  reply %d: %s", r.Req, v)
		switch p.kind {
		case reqWait:
			task, ok := s.a.Get(v)
			s.check(ok && task.Status.Terminal(), "waiter %d answered before task %s ended", r.Req, v)
		case reqWaitWorkflow:
			w, ok := s.a.Workflow(v)
			s.check(ok && w.Status.Terminal(), "waiter %d answered before workflow %s ended", r.Req, v)
		}
	default:
		s.logf("  reply %d: err=%v value=%v", r.Req, r.Err, v)
		if p.kind == reqWait || p.kind == reqWaitWorkflow {
			s.check(errors.Is(r.Err, core.ErrNotFound), "waiter %d answered %v %v", r.Req, v, r.Err)
		}
	}
	if p.check != nil && !s.t.Failed() {
		p.check(r, p.step != s.step)
	}
}

func (s *sim) releaseDispatch(d core.Dispatch) {
	p := s.open[d.Req]
	s.check(p != nil && p.kind == reqPoll, "dispatch to request %d, which is not an open poll", d.Req)
	delete(s.open, d.Req)
	s.logf("  dispatch %d: err=%v grants=%d", d.Req, d.Err, len(d.Grants))
	for _, g := range d.Grants {
		task, ok := s.a.Get(g.ID)
		s.check(ok && task.Status == fsm.StatusRunning && task.Lease == g.Lease && task.Attempt == g.Attempt,
			"grant %+v dispatched before durable: %+v", g, task)
		s.leases = append(s.leases, g.Lease)
		s.leaseTask[g.Lease] = g.ID
	}
}

// checkCounts compares the core's gauges with the durable state after a
// commit (nothing is in flight here, so they must agree).
func (s *sim) checkCounts() {
	var pending, running, tasks int
	for _, pc := range s.a.Counts() {
		for st, n := range pc.ByStatus {
			if fsm.Status(st).Pending() {
				pending += int(n)
			}
		}
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

// ---------------------------------------------------------------------------
// Leader changes and snapshots
// ---------------------------------------------------------------------------

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
	old.AddSchedule(s.now, s.nextReq(reqOther, nil), core.ScheduleSpec{Name: "late", Cron: "@every 1h", Task: fsm.Template{Pool: "p0", Kind: "late"}})
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
