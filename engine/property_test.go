package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// tasks. After every step the durable state must hold the invariants of
// checkGraph (dependencies, workflow status, retention), and the answers
// of most requests are checked against what the durable state said before
// the request.
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
	numCovEvents
)

var covNames = [numCovEvents]string{
	"task unblocked", "task cancelled for a dependency", "policy done ran after a failed dependency",
	"workflow succeeded", "workflow failed", "workflow cancelled", "workflow cancelled as a whole",
	"workflow admitted", "duplicate workflow key", "invalid workflow refused", "workflow purged", "workflow purge held by a dependent",
	"children spawned", "spawning task joined a new workflow", "invalid children refused",
	"children of a stale lease refused", "external task completed", "external task failed by request",
	"external completion refused as not waiting", "schedule fired a workflow",
	"batch spec depending on an earlier spec by key", "workflow member cancelled alone",
	"workflow refused by the log version",
}

// simCoverage counts, over all seeds, how often each event happened.
var dbgMu sync.Mutex
var dbg = map[string]int{}
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
	t.Logf("dbg %v", dbg)
	t.Logf("coverage of the random operations:\n  %s", strings.Join(report, "\n  "))
	require.Empty(t, missing, "events no seed produced")
}

func (s *sim) covered(e covEvent) {
	if s.cov != nil {
		s.cov[e].Add(1)
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
	numSimOps
)

var simOpNames = [numSimOps]string{
	"submit-one", "submit-batch", "submit-many", "submit-workflow", "poll", "cancel-poll",
	"complete", "heartbeat", "cancel", "cancel-member", "cancel-workflow", "complete-external",
	"attach", "attach-workflow", "detach", "advance", "add-schedule", "pause-schedule",
	"remove-schedule",
}

var simWeights = [numSimOps]int{12, 5, 4, 7, 18, 2, 24, 8, 3, 1, 2, 4, 3, 2, 2, 14, 3, 2, 1}

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
	spawned   int // counter naming spawned children

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
	if r.IntN(2) == 0 {
		cfg.Overflow = core.OverflowWait
	}
	if r.IntN(3) == 0 {
		cfg.Global.MaxPendingPerClass[fsm.PriorityLow] = 3
	}
	if r.IntN(8) == 0 {
		// A cluster with a server of the release before dependencies: all
		// of them are refused until the upgrade.
		cfg.LogVersion = fsm.LogVersion - 1
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
// Commands and the checks of their answers
// ---------------------------------------------------------------------------

// submit sends a plain submit in one of the three forms.
func (s *sim) submit(op simOp) {
	mode := map[simOp]core.SubmitMode{opSubmitOne: core.SubmitOne, opSubmitBatch: core.SubmitBatch, opSubmitMany: core.SubmitMany}[op]
	n := 1
	if mode != core.SubmitOne {
		n = 1 + s.pick(4)
	}
	specs := make([]core.Spec, n)
	for i := range specs {
		specs[i], _ = s.randomSpec()
		if mode == core.SubmitBatch && i > 0 && s.pick(2) == 0 {
			// Depends on an earlier spec of the batch, by its key.
			j := s.pick(i)
			if specs[j].Key == "" {
				specs[j].Key = fmt.Sprintf("key%d", s.pick(12))
			}
			specs[i].DependsOn = append(specs[i].DependsOn, core.TaskRef{Key: specs[j].Key})
			if specs[i].Key != specs[j].Key {
				s.covered(covBatchKeyDep)
			}
		}
	}
	kind := reqSubmit
	if mode == core.SubmitMany {
		kind = reqSubmitMany
	}
	req := s.nextReq(kind, func(r core.Reply, _ bool) { s.checkSubmitDeps(specs, r) })
	s.submits = append(s.submits, req)
	s.logf("req %d %s %d specs", req, simOpNames[op], n)
	s.core.Submit(s.now, req, mode, specs)
}

// checkSubmitDeps checks that the tasks a submit inserted depend on the
// tasks its specs named by id.
func (s *sim) checkSubmitDeps(specs []core.Spec, r core.Reply) {
	res, ok := r.Value.(*core.SubmitResult)
	if !ok {
		return
	}
	for i, sub := range res.Tasks {
		if sub.ID == "" || sub.Duplicate {
			continue
		}
		t, ok := s.a.Get(sub.ID)
		if !ok {
			continue // an early item of an enqueue-many, purged since
		}
		s.check(len(t.DependsOn) <= len(specs[i].DependsOn), "task %s depends on %v, its spec on %v", t.ID, t.DependsOn, specs[i].DependsOn)
		for _, ref := range specs[i].DependsOn {
			if ref.ID != "" {
				s.check(slices.Contains(t.DependsOn, ref.ID), "task %s does not depend on %s: %v", t.ID, ref.ID, t.DependsOn)
			}
		}
	}
}

// randomWorkflow returns a workflow to submit: a random DAG of steps. deps
// holds the ids of the existing tasks each step names. bad says it is
// invalid on purpose; sure that it is valid (neither: a random spec may be
// invalid).
func (s *sim) randomWorkflow() (spec core.WorkflowSpec, deps [][]string, bad, sure bool) {
	spec.Name = []string{"etl", "deploy", "fanout"}[s.pick(3)]
	if s.pick(3) == 0 {
		spec.Key = fmt.Sprintf("wk%d", s.pick(6))
	}
	n := 1 + s.pick(5)
	spec.Steps = make([]core.StepSpec, n)
	deps = make([][]string, n)
	sure = true
	for i := range spec.Steps {
		sp, d, ok := s.randomStepSpec()
		sure = sure && ok
		st := core.StepSpec{Spec: sp, Name: fmt.Sprintf("%s%d", []string{"s", "step.", "x-", "y_"}[s.pick(4)], i)}
		for j := 0; j < i; j++ {
			if s.pick(3) == 0 {
				st.DependsOnSteps = append(st.DependsOnSteps, spec.Steps[j].Name)
			}
		}
		spec.Steps[i], deps[i] = st, d
	}
	if s.pick(10) == 0 {
		bad = true
		k := s.pick(n)
		switch s.pick(6) {
		case 0:
			if n > 1 {
				spec.Steps[n-1].Name = spec.Steps[0].Name
			} else {
				spec.Steps[0].Name = ""
			}
		case 1:
			later := "nosuch"
			if k < n-1 {
				later = spec.Steps[k+1].Name
			}
			spec.Steps[k].DependsOnSteps = append(spec.Steps[k].DependsOnSteps, later)
		case 2:
			spec.Steps[k].Name = "no/slash"
		case 3:
			spec.Steps[k].Key = "stepkey"
		case 4:
			spec.Steps = nil
		case 5:
			spec.Steps[k].Name = ""
		}
	}
	return spec, deps, bad, sure && !bad
}

func (s *sim) submitWorkflow() {
	spec, deps, bad, sure := s.randomWorkflow()
	req := s.nextReq(reqWorkflow, func(r core.Reply, late bool) {
		s.checkWorkflowSubmitted(spec, deps, bad, sure, late, r)
	})
	s.submits = append(s.submits, req)
	s.logf("req %d submit-workflow %q key=%q steps=%d bad=%v", req, spec.Name, spec.Key, len(spec.Steps), bad)
	s.core.SubmitWorkflow(s.now, req, spec)
}

// checkWorkflowSubmitted checks the answer to a workflow submit.
// late says it was answered after it waited for space.
func (s *sim) checkWorkflowSubmitted(spec core.WorkflowSpec, deps [][]string, bad, sure, late bool, r core.Reply) {
	if r.Err != nil {
		var ve *core.VersionError
		var ie *core.InvalidError
		switch {
		case errors.As(r.Err, &ve):
			s.check(s.logVersion < 3, "workflow refused for the log version %d: %v", s.logVersion, r.Err)
			s.covered(covVersionRefused)
		case errors.As(r.Err, &ie):
			// A dependency may have been purged while the submit waited.
			s.check(!sure || late && strings.Contains(ie.Field, "depends_on"), "valid workflow refused: %v", r.Err)
			s.check(strings.HasPrefix(ie.Field, "steps"), "error field %q does not name a step", ie.Field)
			if bad {
				s.covered(covWorkflowInvalid)
			}
		case errors.Is(r.Err, core.ErrOverloaded):
			s.check(!bad, "invalid workflow answered %v", r.Err)
		default:
			s.check(false, "workflow submit: unexpected error %v", r.Err)
		}
		s.check(len(s.batch) == 0 || late, "a refused workflow committed %d mutations", len(s.batch))
		return
	}
	res, ok := r.Value.(*core.WorkflowSubmitted)
	s.check(ok, "workflow submit answered %T", r.Value)
	s.check(s.logVersion >= 3, "workflow admitted under log format %d", s.logVersion)
	w, ok := s.a.Workflow(res.ID)
	s.check(ok, "submitted workflow %s is not durable", res.ID)
	for _, st := range res.Tasks {
		t, ok := s.a.Get(st.ID)
		s.check(ok && t.Workflow == res.ID && t.Step == st.Step, "step %s=%s of workflow %s: %+v", st.Step, st.ID, res.ID, t)
	}
	if res.Duplicate {
		s.check(spec.Key != "" && w.Key == spec.Key, "workflow %s (key %q) answered as a duplicate of key %q", w.ID, w.Key, spec.Key)
		s.covered(covWorkflowDuplicate)
		return
	}
	s.check(!bad, "invalid workflow admitted as %s", res.ID)
	s.check(w.Key == spec.Key && w.Name == spec.Name, "workflow %s: name %q key %q, want %q %q", w.ID, w.Name, w.Key, spec.Name, spec.Key)
	s.check(len(res.Tasks) == len(spec.Steps), "workflow %s: %d tasks for %d steps", w.ID, len(res.Tasks), len(spec.Steps))
	s.covered(covWorkflowAdmitted)
	byName := make(map[string]string, len(res.Tasks))
	for i, st := range res.Tasks {
		step := &spec.Steps[i]
		s.check(st.Step == step.Name, "workflow %s: task %d is step %q, want %q", w.ID, i, st.Step, step.Name)
		byName[st.Step] = st.ID
		t, _ := s.a.Get(st.ID)
		s.check(t.DepPolicy == step.DepPolicy && t.External == step.External, "step %s: policy %d external %v", t.ID, t.DepPolicy, t.External)
		want := slices.Clone(deps[i])
		for _, name := range step.DependsOnSteps {
			want = append(want, byName[name])
		}
		got := slices.Clone(t.DependsOn)
		slices.Sort(want)
		want = slices.Compact(want)
		slices.Sort(got)
		if late && len(deps[i]) > 0 {
			continue // a key may name another task by now
		}
		s.check(slices.Equal(got, want), "step %s (%s) depends on %v, want %v", step.Name, t.ID, got, want)
	}
}

// spawnPlan is what a completion with children should insert.
type spawnPlan struct {
	names []string // of the children, then of the continuation
	then  bool
	deps  [][]string // ids of the existing tasks each one names
	bad   bool       // invalid on purpose
	sure  bool       // valid for sure
}

// randomChildren adds children (and maybe a continuation) to out, for the
// task id that lease was granted for.
func (s *sim) randomChildren(id string, out *core.Outcome) *spawnPlan {
	// The named steps of the task's workflow, which children may depend on.
	var existing []string
	if t, ok := s.a.Get(id); ok && t.Workflow != "" {
		for _, m := range s.a.WorkflowTasks(t.Workflow) {
			if m.Step != "" {
				existing = append(existing, m.Step)
			}
		}
	}
	p := &spawnPlan{sure: true}
	child := func(named bool, earlier []core.StepSpec) core.StepSpec {
		sp, deps, ok := s.randomStepSpec()
		p.sure = p.sure && ok
		st := core.StepSpec{Spec: sp}
		if named {
			st.Name = fmt.Sprintf("c%d", s.spawned)
			s.spawned++
		}
		for _, e := range earlier {
			if e.Name != "" && s.pick(3) == 0 {
				st.DependsOnSteps = append(st.DependsOnSteps, e.Name)
			}
		}
		if len(existing) > 0 && s.pick(3) == 0 {
			st.DependsOnSteps = append(st.DependsOnSteps, existing[s.pick(len(existing))])
		}
		p.names = append(p.names, st.Name)
		p.deps = append(p.deps, deps)
		return st
	}
	n := s.pick(4)
	for i := 0; i < n; i++ {
		out.Children = append(out.Children, child(s.pick(4) != 0, out.Children))
	}
	if n == 0 || s.pick(2) == 0 {
		then := child(s.pick(2) == 0, nil)
		out.Then = &then
		p.then = true
	}
	if s.pick(8) == 0 {
		p.bad = true
		last := out.Then
		if len(out.Children) > 0 {
			last = &out.Children[len(out.Children)-1]
		}
		switch s.pick(4) {
		case 0:
			if len(existing) > 0 {
				last.Name = existing[s.pick(len(existing))] // a step of the workflow already
			} else {
				last.Name = "two words"
			}
		case 1:
			last.Key = "childkey"
		case 2:
			last.DependsOnSteps = append(last.DependsOnSteps, "nosuch")
		case 3:
			if len(out.Children) > 1 && out.Children[0].Name != "" {
				out.Children[1].Name = out.Children[0].Name
			} else {
				last.Name = ".."
			}
		}
	}
	p.sure = p.sure && !p.bad
	return p
}

// complete reports the end of an attempt under a random lease, current or
// not; a success may spawn children.
func (s *sim) complete() {
	lease := s.someLease()
	// Mostly successes, so that chains of dependencies get far.
	out := core.Outcome{Kind: []core.OutcomeKind{
		core.OutcomeSuccess, core.OutcomeSuccess, core.OutcomeSuccess, core.OutcomeSuccess, core.OutcomeSuccess,
		core.OutcomeSuccess, core.OutcomeRetryable, core.OutcomeRetryable, core.OutcomePermanent, core.OutcomeCancelled,
	}[s.pick(10)]}
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
	id := s.leaseTask[lease]
	var plan *spawnPlan
	if out.Kind == core.OutcomeSuccess && s.pick(3) == 0 || s.pick(40) == 0 {
		plan = s.randomChildren(id, &out)
	}
	before, _ := s.a.Get(id)
	current := before != nil && before.Status == fsm.StatusRunning && before.Lease == lease
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) { s.checkCompletion(lease, id, current, before, out, plan, r) })
	s.logf("req %d complete %#x kind %d children %d then %v", req, lease, out.Kind, len(out.Children), out.Then != nil)
	s.core.Complete(s.now, req, lease, out)
}

// checkCompletion checks the answer to a completion: one under a lease that
// is not current is refused and changes nothing; children are inserted with
// it, or refused with it.
func (s *sim) checkCompletion(lease uint64, id string, current bool, before *fsm.Task, out core.Outcome, plan *spawnPlan, r core.Reply) {
	if !current {
		s.check(errors.Is(r.Err, core.ErrStaleLease), "completion under the stale lease %#x answered %v", lease, r.Err)
		s.check(len(s.batch) == 0, "a completion under a stale lease committed %d mutations", len(s.batch))
		if plan != nil {
			s.covered(covSpawnStale)
		}
		return
	}
	if plan == nil {
		s.check(r.Err == nil, "completion under the current lease %#x refused: %v", lease, r.Err)
		return
	}
	stillRunning := func() {
		t, ok := s.a.Get(id)
		s.check(ok && t.Status == fsm.StatusRunning && t.Lease == lease, "task %s lost its lease %#x to a refused completion: %+v", id, lease, t)
		s.check(len(s.batch) == 0, "a refused completion committed %d mutations", len(s.batch))
	}
	if out.Kind != core.OutcomeSuccess {
		var ie *core.InvalidError
		s.check(errors.As(r.Err, &ie), "children of a failed attempt: %v", r.Err)
		stillRunning()
		return
	}
	if r.Err != nil {
		var ve *core.VersionError
		var ie *core.InvalidError
		switch {
		case errors.As(r.Err, &ve):
			s.check(s.logVersion < 3, "children refused for the log version %d: %v", s.logVersion, r.Err)
		case errors.As(r.Err, &ie):
			s.check(!plan.sure, "valid children refused: %v", r.Err)
			s.check(strings.HasPrefix(ie.Field, "children[") || strings.HasPrefix(ie.Field, "then."), "error field %q names no child", ie.Field)
			if plan.bad {
				s.covered(covSpawnInvalid)
			}
		case errors.Is(r.Err, core.ErrOverloaded):
			s.check(!plan.bad, "invalid children answered %v", r.Err)
		default:
			s.check(false, "completion with children: unexpected error %v", r.Err)
		}
		stillRunning()
		return
	}
	s.check(!plan.bad && s.logVersion >= 3, "invalid children admitted (log format %d)", s.logVersion)
	t, ok := s.a.Get(id)
	s.check(ok && t.Status == fsm.StatusSucceeded && t.Workflow != "", "spawning task %s: %+v", id, t)
	if before.Workflow == "" {
		w, ok := s.a.Workflow(t.Workflow)
		s.check(ok && w.Parent == id && w.Name == t.Kind, "workflow %s created for the children of %s: %+v", t.Workflow, id, w)
		s.covered(covSpawnJoined)
	} else {
		s.check(t.Workflow == before.Workflow, "spawning task %s moved from workflow %s to %s", id, before.Workflow, t.Workflow)
	}
	var kids []*fsm.Task
	for _, m := range s.batch {
		if m.Insert != nil && m.Insert.Parent == id {
			kid, ok := s.a.Get(m.Insert.ID)
			s.check(ok, "child %s is not durable", m.Insert.ID)
			kids = append(kids, kid)
		}
	}
	s.check(len(kids) == len(plan.names), "task %s spawned %d tasks, want %d", id, len(kids), len(plan.names))
	for i, k := range kids {
		s.check(k.Workflow == t.Workflow && k.Step == plan.names[i], "child %d of %s: workflow %s step %q, want %s %q", i, id, k.Workflow, k.Step, t.Workflow, plan.names[i])
		for _, d := range plan.deps[i] {
			s.check(slices.Contains(k.DependsOn, d), "child %s does not depend on %s: %v", k.ID, d, k.DependsOn)
		}
	}
	if plan.then {
		then := kids[len(kids)-1]
		for _, k := range kids[:len(kids)-1] {
			s.check(slices.Contains(then.DependsOn, k.ID), "continuation %s does not depend on child %s: %v", then.ID, k.ID, then.DependsOn)
		}
	}
	s.covered(covSpawned)
}

// cancel cancels a task.
func (s *sim) cancel(ref core.TaskRef) {
	before, ok := s.lookup(ref)
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		if !ok {
			s.check(errors.Is(r.Err, core.ErrNotFound), "cancel of %s, which does not exist: %v", ref, r.Err)
			return
		}
		c, isCancel := r.Value.(core.Cancelled)
		s.check(r.Err == nil && isCancel && c.ID == before.ID && c.Cancelled == !before.Status.Terminal(),
			"cancel of %s (%s): %+v %v", before.ID, before.Status, r.Value, r.Err)
		if c.Cancelled {
			t, _ := s.a.Get(before.ID)
			s.check(t.Status == fsm.StatusCancelled, "cancelled task %s is %s", t.ID, t.Status)
			if before.Status == fsm.StatusRunning {
				s.check(s.aborted(before.Lease), "cancelled task %s: its worker is not told to stop", t.ID)
			}
			if before.Workflow != "" {
				s.covered(covMemberCancelled)
			}
		}
	})
	s.logf("req %d cancel %s", req, ref)
	s.core.Cancel(s.now, req, ref)
}

// lookup finds a task of the durable state by id or key.
func (s *sim) lookup(ref core.TaskRef) (*fsm.Task, bool) {
	if ref.ID != "" {
		return s.a.Get(ref.ID)
	}
	return s.a.GetByKey(ref.Key)
}

// aborted reports whether the commit being released aborts lease.
func (s *sim) aborted(lease uint64) bool {
	return slices.ContainsFunc(s.aborts, func(a core.Abort) bool { return a.Lease == lease })
}

// cancelWorkflow cancels a workflow: every live member ends cancelled in
// the step, and the workflow with them.
func (s *sim) cancelWorkflow() {
	ref := s.someWorkflowRef()
	var w *fsm.Workflow
	var ok bool
	if ref.ID != "" {
		w, ok = s.a.Workflow(ref.ID)
	} else {
		w, ok = s.a.WorkflowByKey(ref.Key)
	}
	var live []*fsm.Task
	if ok {
		for _, m := range s.a.WorkflowTasks(w.ID) {
			if !m.Status.Terminal() {
				live = append(live, m)
			}
		}
	}
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		if !ok {
			s.check(errors.Is(r.Err, core.ErrNotFound), "cancel of workflow %s, which does not exist: %v", ref, r.Err)
			return
		}
		c, isCancel := r.Value.(core.CancelledWorkflow)
		s.check(r.Err == nil && isCancel && c.ID == w.ID && c.Cancelled == len(live),
			"cancel of workflow %s with %d live members: %+v %v", w.ID, len(live), r.Value, r.Err)
		after, _ := s.a.Workflow(w.ID)
		if w.Status != fsm.WorkflowRunning {
			s.check(after.Status == w.Status, "cancel of ended workflow %s changed it from %s to %s", w.ID, w.Status, after.Status)
			return
		}
		s.check(after.Status == fsm.WorkflowCancelled, "cancelled workflow %s is %s", w.ID, after.Status)
		s.covered(covWorkflowCancelledWhole)
		for _, m := range live {
			t, _ := s.a.Get(m.ID)
			s.check(t.Status == fsm.StatusCancelled && t.Error == "workflow cancelled", "member %s of cancelled workflow %s: %s %q", t.ID, w.ID, t.Status, t.Error)
			if m.Status == fsm.StatusRunning {
				s.check(s.aborted(m.Lease), "member %s of cancelled workflow %s: its worker is not told to stop", t.ID, w.ID)
			}
		}
	})
	s.logf("req %d cancel-workflow %s", req, ref)
	s.core.CancelWorkflow(s.now, req, ref)
}

// completeExternal completes a task through the API: mostly an external
// task, else any task (refused: not waiting).
func (s *sim) completeExternal() {
	ref := s.someRef()
	if len(s.external) > 0 && s.pick(3) != 0 {
		ref = core.TaskRef{ID: s.recent(s.external, 10)}
	}
	out := core.Outcome{Kind: core.OutcomeSuccess, Output: s.bytes(s.pick(16))}
	switch s.pick(10) {
	case 0, 1:
		out = core.Outcome{Kind: core.OutcomePermanent, Message: []string{"", "rejected"}[s.pick(2)]}
	case 2:
		out.Kind = core.OutcomeRetryable // not for an external task
	case 3:
		out.Children = []core.StepSpec{{Spec: core.Spec{Template: fsm.Template{Pool: "p0", Kind: "child"}}}}
	}
	before, ok := s.lookup(ref)
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		var ie *core.InvalidError
		switch {
		case !ok:
			s.check(errors.Is(r.Err, core.ErrNotFound), "external completion of %s, which does not exist: %v", ref, r.Err)
		case !before.External || before.Status != fsm.StatusQueued:
			s.check(errors.Is(r.Err, core.ErrNotWaiting), "external completion of %s (external %v, %s): %v", before.ID, before.External, before.Status, r.Err)
			s.covered(covExternalNotWaiting)
		case len(out.Children) > 0 || out.Kind != core.OutcomeSuccess && out.Kind != core.OutcomePermanent:
			s.check(errors.As(r.Err, &ie), "external completion with %d children, kind %d: %v", len(out.Children), out.Kind, r.Err)
		default:
			s.check(r.Err == nil && r.Value == before.ID, "external completion of waiting %s: %v %v", before.ID, r.Value, r.Err)
			t, _ := s.a.Get(before.ID)
			if out.Kind == core.OutcomeSuccess {
				s.check(t.Status == fsm.StatusSucceeded && bytes.Equal(t.Output, out.Output), "completed external %s: %s %q", t.ID, t.Status, t.Output)
				s.covered(covExternalCompleted)
			} else {
				msg := out.Message
				if msg == "" {
					msg = "failed by request"
				}
				s.check(t.Status == fsm.StatusFailed && t.Error == msg, "failed external %s: %s %q", t.ID, t.Status, t.Error)
				s.covered(covExternalFailed)
			}
			return
		}
		s.check(len(s.batch) == 0, "a refused external completion committed %d mutations", len(s.batch))
	})
	s.logf("req %d complete-external %s kind %d", req, ref, out.Kind)
	s.core.CompleteExternal(s.now, req, ref, out)
}

// addSchedule creates or replaces a schedule, which fires a task or a
// workflow.
func (s *sim) addSchedule() {
	crons := []string{"@every 5s", "@every 1m", "*/10 * * * * *", "0 * * * *", "*/2 * * * *", "bad cron"}
	tpl, _ := s.randomSpec()
	spec := core.ScheduleSpec{
		Name:         fmt.Sprintf("s%d", s.pick(4)),
		Cron:         crons[s.pick(len(crons))],
		Task:         tpl.Template,
		Overlap:      fsm.Overlap(s.pick(2)),
		CatchUp:      fsm.CatchUp(s.pick(3)),
		CatchUpLimit: uint32(s.pick(4)),
		Paused:       s.pick(5) == 0,
	}
	if s.pick(4) == 0 {
		spec.TZ = "Europe/Berlin"
	}
	bad := false
	if s.pick(3) == 0 {
		spec.Task = fsm.Template{}
		spec.Workflow = []string{"", "nightly"}[s.pick(2)]
		n := 1 + s.pick(3)
		for i := 0; i < n; i++ {
			sp, _ := s.randomSpec()
			st := fsm.StepTemplate{Name: fmt.Sprintf("st%d", i), Template: sp.Template, DepPolicy: fsm.DepPolicy(s.pick(2)), External: s.pick(20) == 0}
			for j := 0; j < i; j++ {
				if s.pick(2) == 0 {
					st.DependsOn = append(st.DependsOn, spec.Steps[j].Name)
				}
			}
			spec.Steps = append(spec.Steps, st)
		}
		if s.pick(10) == 0 {
			bad = true
			if s.pick(2) == 0 {
				spec.Task = tpl.Template // a task and a workflow
				if spec.Task.Kind == "" {
					spec.Task.Kind = "both"
				}
			} else {
				spec.Steps[0].DependsOn = []string{"nosuch"}
			}
		}
	}
	req := s.nextReq(reqOther, func(r core.Reply, _ bool) {
		var ie *core.InvalidError
		if bad {
			s.check(errors.As(r.Err, &ie), "invalid schedule answered %v %v", r.Value, r.Err)
		}
	})
	s.logf("req %d add-schedule %s %q steps %d bad %v", req, spec.Name, spec.Cron, len(spec.Steps), bad)
	s.core.AddSchedule(s.now, req, spec)
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
	if len(out.Mutations) > 0 {
		for _, m := range out.Mutations {
			switch {
			case m.Insert != nil:
				ins := m.Insert
				s.check(ins.ID > s.lastID, "ids increase: %s after %s", ins.ID, s.lastID)
				s.lastID = ins.ID
				s.inserted[ins.ID] = true
				s.ids = append(s.ids, ins.ID)
				if ins.External {
					s.external = append(s.external, ins.ID)
				}
				if ins.Workflow != "" {
					s.members = append(s.members, ins.ID)
					s.wfMembers[ins.Workflow] = append(s.wfMembers[ins.Workflow], ins.ID)
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
				for _, mm := range s.a.WorkflowTasks(m.EndWorkflow.ID) {
					e := mm.Error
					if strings.HasPrefix(e, "dependency") { e = "dependency" }
					if strings.HasPrefix(e, "attempt timed out") { e = "timeout" }
					if strings.HasPrefix(e, "lease lost") { e = "lease lost" }
					dbgMu.Lock(); dbg[mm.Status.String()+" "+e]++; dbgMu.Unlock()
				}
				s.covered(map[fsm.WorkflowStatus]covEvent{
					fsm.WorkflowSucceeded: covWorkflowSucceeded,
					fsm.WorkflowFailed:    covWorkflowFailed,
					fsm.WorkflowCancelled: covWorkflowCancelled,
				}[m.EndWorkflow.Status])
			case m.PurgeWorkflow != nil:
				purged = append(purged, m.PurgeWorkflow.ID)
			case m.Unblock != nil:
				s.covered(covUnblocked)
			case m.Fire != nil && m.Fire.Workflow != "":
				s.covered(covScheduledWorkflow)
			}
		}
		b := &fsm.CommitBatch{Epoch: s.core.Epoch(), Time: fsm.InstantOf(s.now), Mutations: out.Mutations}
		data, err := fsm.EncodeCommitBatch(b)
		s.check(err == nil, "encoding: %v", err)
		s.check(b.Version <= s.logVersion, "an entry needs log format %d, the cluster understands %d", b.Version, s.logVersion)
		s.apply(data, nil)
		if t.Failed() {
			return
		}
		for _, m := range out.Mutations {
			if m.Start != nil {
				task, _ := s.a.Get(m.Start.ID)
				s.check(!task.External, "external task %s was dispatched", task.ID)
			}
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
		s.check(ev.Workflow == task.Workflow && ev.Step == task.Step, "event for %s names workflow %s step %q, the task has %s %q",
			ev.TaskID, ev.Workflow, ev.Step, task.Workflow, task.Step)
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
	wfs := 0
	s.a.View().EachWorkflow(func(*fsm.Workflow) bool { wfs++; return true })
	s.check(wfs == st.Workflows, "workflows: fsm %d, core %d", wfs, st.Workflows)
}

// ---------------------------------------------------------------------------
// Invariants of the durable state
// ---------------------------------------------------------------------------

// checkGraph checks the invariants of dependencies and workflows on the
// durable state (the engine has settled: every commit ends a step):
//   - a task that left blocked (queued, scheduled, running, retrying,
//     succeeded, failed) has only ended dependencies, succeeded ones under
//     policy succeeded; a live task's dependencies exist;
//   - a blocked task has a dependency that has not ended, and none that
//     ended without success under policy succeeded;
//   - a task cancelled for a dependency never ran;
//   - every workflow has members, their step names are unique, and every
//     member's workflow exists (the members of a purged workflow are gone);
//   - a workflow runs exactly while it has a live member; an ended one has
//     the status its members give it (engine/core/workflow.go status():
//     cancelled as a whole, else failed when a member failed or expired,
//     else cancelled when a member was cancelled, else succeeded);
//   - when no timer is due, a task or workflow kept past its retention is
//     held by a live dependent.
func (s *sim) checkGraph(final bool) {
	v := s.a.View()
	tasks := make(map[string]*fsm.Task, v.Len())
	v.EachTask(func(t *fsm.Task) bool {
		tasks[t.ID] = t
		return true
	})
	type members struct {
		n, live                int
		failed, cancelled, all bool // all: cancelled as a whole
	}
	wfs := make(map[string]*members)
	steps := make(map[[2]string]bool)
	held := make(map[string]bool) // tasks a live task depends on
	v.EachTask(func(t *fsm.Task) bool {
		s.checkDeps(t, tasks, final)
		if !t.Status.Terminal() {
			for _, d := range t.DependsOn {
				held[d] = true
			}
		}
		if t.Workflow == "" {
			return true
		}
		m := wfs[t.Workflow]
		if m == nil {
			m = &members{}
			wfs[t.Workflow] = m
		}
		m.n++
		switch t.Status {
		case fsm.StatusSucceeded:
		case fsm.StatusFailed, fsm.StatusExpired:
			m.failed = true
		case fsm.StatusCancelled:
			m.cancelled = true
			m.all = m.all || t.Error == "workflow cancelled"
		default:
			m.live++
		}
		if t.Step != "" {
			k := [2]string{t.Workflow, t.Step}
			s.check(!steps[k], "workflow %s has two steps named %q", t.Workflow, t.Step)
			steps[k] = true
		}
		return true
	})
	settled := s.settled()
	retention := s.ccfg.Retention
	now := fsm.InstantOf(s.now)
	v.EachWorkflow(func(w *fsm.Workflow) bool {
		m := wfs[w.ID]
		s.check(m != nil, "workflow %s (%s) has no member", w.ID, w.Status)
		delete(wfs, w.ID)
		if w.Status == fsm.WorkflowRunning {
			s.check(m.live > 0, "workflow %s runs without a live member", w.ID)
			return true
		}
		s.check(m.live == 0, "workflow %s is %s with %d live members", w.ID, w.Status, m.live)
		want := fsm.WorkflowSucceeded
		switch {
		case m.all:
			want = fsm.WorkflowCancelled
		case m.failed:
			want = fsm.WorkflowFailed
		case m.cancelled:
			want = fsm.WorkflowCancelled
		}
		s.check(w.Status == want, "workflow %s is %s, its members say %s (%+v)", w.ID, w.Status, want, *m)
		if settled && w.FinishedAt.Add(retention) <= now {
			kept := slices.ContainsFunc(v.WorkflowTasks(w.ID), func(t *fsm.Task) bool { return held[t.ID] })
			s.check(kept, "workflow %s ended at %s is kept past its retention with no live dependent", w.ID, w.FinishedAt.Time())
			if final {
				s.covered(covWorkflowPurgeHeld)
			}
		}
		return true
	})
	for id := range wfs {
		s.check(false, "tasks of workflow %s, which does not exist", id)
	}
	if settled {
		for _, t := range tasks {
			if t.Workflow == "" && t.Status.Terminal() && t.FinishedAt.Add(retention) <= now {
				s.check(held[t.ID], "task %s ended at %s is kept past its retention with no live dependent", t.ID, t.FinishedAt.Time())
			}
		}
	}
	if final {
		s.logf("final: %d tasks, %d named steps", len(tasks), len(steps))
	}
}

// checkDeps checks the dependency invariants of t (see checkGraph).
func (s *sim) checkDeps(t *fsm.Task, tasks map[string]*fsm.Task, final bool) {
	if t.Status == fsm.StatusCancelled && strings.HasPrefix(t.Error, "dependency ") {
		s.check(t.Attempt == 0, "task %s cancelled for a dependency after %d attempts", t.ID, t.Attempt)
	}
	switch t.Status {
	case fsm.StatusBlocked:
		waiting := false
		for _, d := range t.DependsOn {
			dt, ok := tasks[d]
			s.check(ok, "blocked task %s depends on %s, which is gone", t.ID, d)
			if !dt.Status.Terminal() {
				waiting = true
				continue
			}
			s.check(t.DepPolicy == fsm.DepDone || dt.Status == fsm.StatusSucceeded,
				"blocked task %s waits although its dependency %s is %s", t.ID, d, dt.Status)
		}
		s.check(waiting, "task %s is blocked, but its dependencies %v have all ended", t.ID, t.DependsOn)
	case fsm.StatusQueued, fsm.StatusScheduled, fsm.StatusRunning, fsm.StatusRetrying, fsm.StatusSucceeded, fsm.StatusFailed:
		ranAfterFailure := false
		for _, d := range t.DependsOn {
			dt, ok := tasks[d]
			if !ok {
				s.check(t.Status.Terminal(), "task %s is %s, its dependency %s is gone", t.ID, t.Status, d)
				continue
			}
			s.check(dt.Status.Terminal(), "task %s is %s before its dependency %s ended (%s)", t.ID, t.Status, d, dt.Status)
			s.check(t.DepPolicy == fsm.DepDone || dt.Status == fsm.StatusSucceeded,
				"task %s is %s although its dependency %s is %s", t.ID, t.Status, d, dt.Status)
			ranAfterFailure = ranAfterFailure || dt.Status != fsm.StatusSucceeded
		}
		if final && ranAfterFailure && t.Attempt > 0 {
			s.covered(covDepDoneRan)
		}
	}
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
