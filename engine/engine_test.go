package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/engine/enginetest"
	"github.com/cronoq/cronoq/fsm"
)

// submitted splits a submit's answer the way the tests read it.
func submitted(res *core.SubmitResult, err error) ([]core.Submitted, []error, error) {
	if res == nil {
		return nil, nil, err
	}
	return res.Tasks, res.Errs, err
}

// cancelled splits a cancel's answer the way the tests read it.
func cancelled(c core.Cancelled, err error) (string, bool, error) {
	return c.ID, c.Cancelled, err
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait on a condition.
const waitFor = 10 * time.Second

type harness struct {
	t     *testing.T
	ctx   context.Context
	state *fsm.State
	log   *enginetest.Log
	eng   *engine.Engine
}

// setup starts an engine at epoch 1 over an in-memory log. The log's first
// Append call is the epoch bump, so the engine's n-th entry is call n+1.
func setup(t *testing.T, cfg engine.Config, ccfg core.Config) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	state := fsm.New()
	log := enginetest.New(state)
	require.NoError(t, log.BumpEpoch(ctx, 1, "n1"))
	if ccfg.Seed == 0 {
		ccfg.Seed = 1
	}
	c, err := core.New(ccfg, 1, time.Now())
	require.NoError(t, err)
	eng := engine.New(cfg, c, log)
	require.NoError(t, eng.Start(ctx))
	t.Cleanup(func() {
		log.Resume()
		_ = eng.Stop(context.Background())
		log.Close()
	})
	return &harness{t: t, ctx: ctx, state: state, log: log, eng: eng}
}

func spec(kind string) core.Spec {
	return core.Spec{Template: fsm.Template{Pool: "p", Kind: kind}}
}

type submitResult struct {
	n   int
	id  string
	err error
}

// submitAsync submits one spec from a goroutine and reports on out.
func (h *harness) submitAsync(ctx context.Context, n int, s core.Spec, out chan<- submitResult) {
	go func() {
		subs, _, err := submitted(h.eng.Submit(ctx, core.SubmitOne, []core.Spec{s}))
		r := submitResult{n: n, err: err}
		if err == nil {
			r.id = subs[0].ID
		}
		out <- r
	}()
}

// waitRequests waits until n calls are inside the engine unanswered.
func (h *harness) waitRequests(n int) {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return h.eng.Stats().Requests == n },
		waitFor, time.Millisecond, "want %d open requests", n)
}

// waitAppended waits until the log holds n entries (the epoch bump included).
func (h *harness) waitAppended(n int) {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return h.log.Appended() == n },
		waitFor, time.Millisecond, "want %d entries", n)
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatal("timed out waiting")
	}
	panic("unreachable")
}

func requireNone[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %v", v)
	default:
	}
}

// batches decodes the log's commit batches (the epoch bumps left out).
func (h *harness) batches() []*fsm.CommitBatch {
	h.t.Helper()
	var out []*fsm.CommitBatch
	for _, data := range h.log.Entries() {
		typ, body, err := fsm.DecodeEntry(data)
		require.NoError(h.t, err)
		if typ == fsm.EntryCommitBatch {
			out = append(out, body.(*fsm.CommitBatch))
		}
	}
	return out
}

func insertedKinds(b *fsm.CommitBatch) []string {
	var kinds []string
	for _, m := range b.Mutations {
		if m.Insert != nil {
			kinds = append(kinds, m.Insert.Kind)
		}
	}
	return kinds
}

func TestSubmitPollCompleteWait(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	events := h.eng.Subscribe(64)
	defer events.Close()

	subs, errs, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("a")}))
	require.NoError(t, err)
	require.Nil(t, errs)
	require.Len(t, subs, 1)
	id := subs[0].ID
	task, ok := h.state.Get(id)
	require.True(t, ok, "the submit is durable before it is acknowledged")
	require.Equal(t, fsm.StatusQueued, task.Status)

	waited := make(chan error, 1)
	go func() {
		got, err := h.eng.Wait(h.ctx, core.TaskRef{ID: id})
		if err == nil && got != id {
			err = fmt.Errorf("wait returned %s", got)
		}
		waited <- err
	}()

	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 4})
	require.NoError(t, err)
	require.Len(t, grants, 1)
	require.Equal(t, id, grants[0].ID)
	task, _ = h.state.Get(id)
	require.Equal(t, fsm.StatusRunning, task.Status, "the lease is durable before the dispatch")
	require.Equal(t, grants[0].Lease, task.Lease)

	hb, err := h.eng.Heartbeat(h.ctx, []uint64{grants[0].Lease, grants[0].Lease + 1000})
	require.NoError(t, err)
	require.NoError(t, hb[0])
	require.ErrorIs(t, hb[1], core.ErrStaleLease)

	require.NoError(t, h.eng.Complete(h.ctx, grants[0].Lease, core.Outcome{Kind: core.OutcomeSuccess, Output: []byte("ok")}))
	require.NoError(t, recv(t, waited))
	task, _ = h.state.Get(id)
	require.Equal(t, fsm.StatusSucceeded, task.Status)
	require.Equal(t, []byte("ok"), task.Output)

	require.ErrorIs(t, h.eng.Complete(h.ctx, grants[0].Lease, core.Outcome{}), core.ErrStaleLease)

	id2, didCancel, err := cancelled(h.eng.Cancel(h.ctx, core.TaskRef{ID: id}))
	require.NoError(t, err)
	require.Equal(t, id, id2)
	require.False(t, didCancel, "it had already ended")
	_, _, err = cancelled(h.eng.Cancel(h.ctx, core.TaskRef{Key: "nope"}))
	require.ErrorIs(t, err, core.ErrNotFound)

	var statuses []fsm.Status
	for len(statuses) < 3 {
		ev := recv(t, events.C())
		require.Equal(t, id, ev.TaskID)
		statuses = append(statuses, ev.Status)
	}
	require.Equal(t, []fsm.Status{fsm.StatusQueued, fsm.StatusRunning, fsm.StatusSucceeded}, statuses)
	require.False(t, events.Lagged())

	st := h.eng.Stats()
	require.EqualValues(t, 1, st.Submitted)
	require.EqualValues(t, 1, st.Dispatched)
	require.EqualValues(t, 1, st.Completed)
	require.Equal(t, st.Batches, st.Committed)
	require.Positive(t, st.BatchBytes)
	require.Zero(t, st.InFlight)
}

func TestSchedules(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	next, err := h.eng.AddSchedule(h.ctx, core.ScheduleSpec{Name: "s", Cron: "@every 1h", Task: spec("cron").Template})
	require.NoError(t, err)
	require.False(t, next.IsZero())
	sc, ok := h.state.Schedule("s")
	require.True(t, ok)
	require.Equal(t, "@every 1h", sc.Cron)

	paused, err := h.eng.PauseSchedule(h.ctx, "s", true)
	require.NoError(t, err)
	require.True(t, paused)
	sc, _ = h.state.Schedule("s")
	require.True(t, sc.Paused)

	removed, err := h.eng.RemoveSchedule(h.ctx, "s")
	require.NoError(t, err)
	require.True(t, removed)
	_, ok = h.state.Schedule("s")
	require.False(t, ok)
	removed, err = h.eng.RemoveSchedule(h.ctx, "s")
	require.NoError(t, err)
	require.False(t, removed)
}

// While one entry is in flight, everything submitted meanwhile goes into the
// next entry.
func TestGroupCommitMergesWhileInFlight(t *testing.T) {
	h := setup(t, engine.Config{MaxInFlight: 1}, core.Config{})
	h.log.Pause()
	out := make(chan submitResult, 11)
	h.submitAsync(h.ctx, 0, spec("first"), out)
	h.waitAppended(2)
	for i := 1; i <= 10; i++ {
		h.submitAsync(h.ctx, i, spec(fmt.Sprintf("k%d", i)), out)
	}
	h.waitRequests(11)
	require.Equal(t, 2, h.log.Appended(), "nothing more is appended while the first entry is in flight")
	require.Equal(t, 1, h.eng.Stats().InFlight)
	requireNone(t, out)

	h.log.Resume()
	for range 11 {
		r := recv(t, out)
		require.NoError(t, r.err)
		_, ok := h.state.Get(r.id)
		require.True(t, ok)
	}
	bs := h.batches()
	require.Len(t, bs, 2)
	require.Equal(t, []string{"first"}, insertedKinds(bs[0]))
	require.Len(t, insertedKinds(bs[1]), 10, "the ten submits merged into one entry")
	require.EqualValues(t, 2, h.eng.Stats().Batches)
}

// By default two entries are in flight: a third submit waits, queued, for one
// of them to resolve.
func TestDefaultTwoEntriesInFlight(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	h.log.Pause()
	out := make(chan submitResult, 3)
	for i := range 3 {
		h.submitAsync(h.ctx, i, spec(fmt.Sprintf("k%d", i)), out)
		h.waitRequests(i + 1)
	}
	h.waitAppended(1 + 2)
	st := h.eng.Stats()
	require.Equal(t, engine.DefaultMaxInFlight, st.InFlight)
	require.Equal(t, 2, st.InFlight)
	require.Equal(t, 1, st.Queued)
	require.Equal(t, 1+2, h.log.Appended())

	h.log.Resume()
	for range 3 {
		require.NoError(t, recv(t, out).err)
	}
	require.EqualValues(t, 3, h.eng.Stats().Batches)
}

// Many entries in flight: answers are released strictly in log order, each
// only once its entry is applied.
func TestManyInFlightReleasedInOrder(t *testing.T) {
	const n = 12
	h := setup(t, engine.Config{MaxInFlight: 8}, core.Config{})
	h.log.Pause()
	out := make(chan submitResult, n)
	for i := range n {
		h.submitAsync(h.ctx, i, spec(fmt.Sprintf("k%02d", i)), out)
		h.waitRequests(i + 1)
	}
	// Eight entries in flight (one per submit), the other four queued as
	// one group each, to be merged.
	h.waitAppended(1 + 8)
	st := h.eng.Stats()
	require.Equal(t, 8, st.InFlight)
	require.Equal(t, 4, st.Queued)
	requireNone(t, out)

	var order []int
	for i := range 8 {
		h.log.Allow(1)
		r := recv(t, out)
		require.NoError(t, r.err)
		require.Equal(t, i, r.n, "released in log order")
		task, ok := h.state.Get(r.id)
		require.True(t, ok, "released only once durable")
		require.Equal(t, fmt.Sprintf("k%02d", i), task.Kind)
		require.Equal(t, h.state.AppliedIndex(), task.CreateIndex, "released right after its own entry")
		order = append(order, r.n)
		requireNone(t, out)
	}
	// The four queued submits were merged into the ninth entry once room
	// freed; it releases them together, in order.
	h.waitAppended(1 + 9)
	h.log.Allow(1)
	var last []int
	for range 4 {
		r := recv(t, out)
		require.NoError(t, r.err)
		task, ok := h.state.Get(r.id)
		require.True(t, ok)
		require.Equal(t, h.state.AppliedIndex(), task.CreateIndex)
		last = append(last, r.n)
	}
	slices.Sort(last) // released together: their callers race to report
	order = append(order, last...)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, order)
	bs := h.batches()
	require.Len(t, bs, 9)
	require.Equal(t, []string{"k08", "k09", "k10", "k11"}, insertedKinds(bs[8]))
}

// A slow log keeps answers waiting until their entry is applied.
func TestRepliesWaitForDurability(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	h.log.SetDelay(20 * time.Millisecond)
	h.log.Pause()
	out := make(chan submitResult, 1)
	h.submitAsync(h.ctx, 0, spec("slow"), out)
	h.waitAppended(2)
	require.Equal(t, 1, h.eng.Stats().InFlight)
	requireNone(t, out)
	_, ok := h.state.GetByKey("x")
	require.False(t, ok)
	h.log.Resume()
	r := recv(t, out)
	require.NoError(t, r.err)
	_, ok = h.state.Get(r.id)
	require.True(t, ok)
	require.Positive(t, h.eng.Stats().CommitLatency)
}

// A commit whose outcome is unknown stops the engine: the answers of appended
// entries say "outcome unknown", everything else "stopped".
func TestCommitFailureStopsEngine(t *testing.T) {
	h := setup(t, engine.Config{MaxInFlight: 1}, core.Config{})
	first, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("k0")}))
	require.NoError(t, err)

	polled := make(chan error, 1)
	go func() {
		_, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w", Pool: "empty", Slots: 1})
		polled <- err
	}()
	h.waitRequests(1)

	h.log.Pause()
	h.log.FailWait(3, enginetest.ErrLeadershipLost, false) // the engine's second entry
	out := make(chan submitResult, 3)
	for i := 1; i <= 3; i++ {
		h.submitAsync(h.ctx, i, spec(fmt.Sprintf("k%d", i)), out)
		h.waitRequests(1 + i)
	}
	h.waitAppended(3)
	require.Equal(t, 2, h.eng.Stats().Queued)

	h.log.Resume()
	results := make([]submitResult, 4)
	for range 3 {
		r := recv(t, out)
		results[r.n] = r
	}
	require.ErrorIs(t, results[1].err, engine.ErrOutcomeUnknown)
	require.ErrorIs(t, results[1].err, enginetest.ErrLeadershipLost)
	for _, r := range results[2:] {
		require.ErrorIs(t, r.err, engine.ErrStopped, "never appended")
		require.ErrorIs(t, r.err, enginetest.ErrLeadershipLost)
		require.NotErrorIs(t, r.err, engine.ErrOutcomeUnknown)
	}
	require.ErrorIs(t, recv(t, polled), engine.ErrStopped)

	<-h.eng.Done()
	require.ErrorIs(t, h.eng.Err(), enginetest.ErrLeadershipLost)
	_, _, err = submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("late")}))
	require.ErrorIs(t, err, engine.ErrStopped)
	_, err = h.eng.Heartbeat(h.ctx, []uint64{1})
	require.ErrorIs(t, err, engine.ErrStopped)
	require.Equal(t, 3, h.log.Appended(), "nothing appended after the failure")
	_, ok := h.state.Get(first[0].ID)
	require.True(t, ok)
	require.Len(t, h.state.Counts(), 1)
	require.EqualValues(t, 1, h.state.Counts()[0].ByStatus[fsm.StatusQueued])
}

// Entries in flight behind the failing one may still commit: their answers
// say "outcome unknown" too.
func TestCommitFailureFailsLaterInFlightAsUnknown(t *testing.T) {
	h := setup(t, engine.Config{MaxInFlight: 8}, core.Config{})
	h.log.Pause()
	h.log.FailWait(2, enginetest.ErrLeadershipLost, false)
	out := make(chan submitResult, 3)
	for i := range 3 {
		h.submitAsync(h.ctx, i, spec(fmt.Sprintf("k%d", i)), out)
		h.waitRequests(1 + i)
	}
	h.waitAppended(4)
	h.log.Resume()
	for range 3 {
		r := recv(t, out)
		require.ErrorIs(t, r.err, engine.ErrOutcomeUnknown, "submit %d", r.n)
	}
	<-h.eng.Done()
}

func TestAppendFailureIsRetryable(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	h.log.FailAppend(2, enginetest.ErrNotLeader)
	_, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("a")}))
	require.ErrorIs(t, err, engine.ErrStopped)
	require.ErrorIs(t, err, enginetest.ErrNotLeader)
	require.NotErrorIs(t, err, engine.ErrOutcomeUnknown)
	<-h.eng.Done()
	require.ErrorIs(t, h.eng.Err(), enginetest.ErrNotLeader)
}

// An epoch bumped underneath the engine fences its entries: the engine stops
// and its answers say "stopped" (definitely not applied).
func TestFencedBatchStopsEngine(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	h.log.Pause()
	bump, err := fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: 2, Leader: "n2"})
	require.NoError(t, err)
	_, err = h.log.AppendEntry(bump)
	require.NoError(t, err)

	out := make(chan submitResult, 2)
	for i := range 2 {
		h.submitAsync(h.ctx, i, spec(fmt.Sprintf("k%d", i)), out)
		h.waitRequests(1 + i)
	}
	h.waitAppended(4)
	h.log.Resume()
	for range 2 {
		r := recv(t, out)
		require.ErrorIs(t, r.err, engine.ErrStopped, "submit %d", r.n)
		require.ErrorIs(t, r.err, fsm.ErrStaleEpoch)
		require.NotErrorIs(t, r.err, engine.ErrOutcomeUnknown)
	}
	<-h.eng.Done()
	require.ErrorIs(t, h.eng.Err(), fsm.ErrStaleEpoch)
	require.EqualValues(t, 2, h.state.Epoch())
	require.Empty(t, h.state.Counts(), "nothing of the fenced entries applied")
}

// A mutation larger than MaxBatchBytes goes alone; small ones around it are
// merged up to the limit.
func TestOversizedMutationGoesAlone(t *testing.T) {
	const limit = 8 << 10
	h := setup(t, engine.Config{MaxBatchBytes: limit, MaxInFlight: 1}, core.Config{})
	h.log.Pause()
	out := make(chan submitResult, 6)
	h.submitAsync(h.ctx, 0, spec("first"), out)
	h.waitAppended(2)
	big := spec("big")
	big.Payload = make([]byte, 3*limit)
	for i, s := range []core.Spec{spec("s1"), spec("s2"), big, spec("s3"), spec("s4")} {
		h.submitAsync(h.ctx, i+1, s, out)
		h.waitRequests(i + 2)
	}
	h.log.Resume()
	for range 6 {
		require.NoError(t, recv(t, out).err)
	}
	bs := h.batches()
	var kinds [][]string
	for _, b := range bs {
		kinds = append(kinds, insertedKinds(b))
	}
	require.Equal(t, [][]string{{"first"}, {"s1", "s2"}, {"big"}, {"s3", "s4"}}, kinds)
	for i, data := range h.log.Entries() {
		typ, body, err := fsm.DecodeEntry(data)
		require.NoError(t, err)
		if typ == fsm.EntryCommitBatch && len(body.(*fsm.CommitBatch).Mutations) > 1 {
			require.LessOrEqual(t, len(data), limit, "entry %d", i)
		}
	}
}

// Batches far larger than the estimate would allow are still cut under the
// limit.
func TestBatchesStayUnderLimit(t *testing.T) {
	const limit = 16 << 10
	h := setup(t, engine.Config{MaxBatchBytes: limit, MaxInFlight: 1}, core.Config{})
	h.log.Pause()
	out := make(chan submitResult, 200)
	h.submitAsync(h.ctx, 0, spec("first"), out)
	h.waitAppended(2)
	for i := 1; i < 200; i++ {
		s := spec(fmt.Sprintf("k%d", i))
		s.Payload = make([]byte, 300)
		h.submitAsync(h.ctx, i, s, out)
	}
	h.waitRequests(200)
	h.log.Resume()
	for range 200 {
		require.NoError(t, recv(t, out).err)
	}
	total := 0
	for _, data := range h.log.Entries()[1:] {
		require.LessOrEqual(t, len(data), limit)
		_, body, err := fsm.DecodeEntry(data)
		require.NoError(t, err)
		total += len(body.(*fsm.CommitBatch).Mutations)
	}
	require.Equal(t, 200, total)
	require.Greater(t, h.log.Appended(), 1+3, "cut in several entries")
}

func TestStopIsIdempotentAndFailsInFlight(t *testing.T) {
	h := setup(t, engine.Config{StopGrace: 20 * time.Millisecond}, core.Config{})
	sub := h.eng.Subscribe(1)
	h.log.Pause()
	out := make(chan submitResult, 1)
	h.submitAsync(h.ctx, 0, spec("a"), out)
	polled := make(chan error, 1)
	go func() {
		_, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w", Pool: "other", Slots: 1})
		polled <- err
	}()
	h.waitRequests(2)
	h.waitAppended(2)

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { _ = h.eng.Stop(context.Background()) })
	}
	wg.Wait()
	_ = h.eng.Stop(context.Background())
	<-h.eng.Done()
	require.NoError(t, h.eng.Err(), "a clean stop")

	r := recv(t, out)
	require.ErrorIs(t, r.err, engine.ErrOutcomeUnknown, "the entry was appended and never resolved")
	require.ErrorIs(t, recv(t, polled), engine.ErrStopped)
	_, open := <-sub.C()
	require.False(t, open, "subscriptions end with the engine")
	_, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w", Pool: "p", Slots: 1})
	require.ErrorIs(t, err, engine.ErrStopped)
	require.Error(t, h.eng.Start(h.ctx))
}

// Stop waits for the entries in flight (within its grace period) and
// releases them.
func TestStopWaitsForInFlight(t *testing.T) {
	h := setup(t, engine.Config{StopGrace: waitFor}, core.Config{})
	h.log.Pause()
	out := make(chan submitResult, 1)
	h.submitAsync(h.ctx, 0, spec("a"), out)
	h.waitAppended(2)
	stopped := make(chan struct{})
	go func() {
		_ = h.eng.Stop(context.Background())
		close(stopped)
	}()
	require.Eventually(t, func() bool {
		_, err := h.eng.Heartbeat(h.ctx, []uint64{1})
		return errors.Is(err, engine.ErrStopped)
	}, waitFor, time.Millisecond, "no longer admitting")
	_, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("b")}))
	require.ErrorIs(t, err, engine.ErrStopped)
	requireNone(t, out)
	h.log.Resume()
	r := recv(t, out)
	require.NoError(t, r.err)
	<-stopped
	require.NoError(t, h.eng.Err())
	require.Equal(t, 2, h.log.Appended())
}

func TestStopBeforeStart(t *testing.T) {
	c, err := core.New(core.Config{Seed: 1}, 1, time.Now())
	require.NoError(t, err)
	log := enginetest.New(fsm.New())
	defer log.Close()
	eng := engine.New(engine.Config{}, c, log)
	_, _, err = submitted(eng.Submit(context.Background(), core.SubmitOne, []core.Spec{spec("a")}))
	require.ErrorIs(t, err, engine.ErrStopped, "not started")
	_ = eng.Stop(context.Background())
	_ = eng.Stop(context.Background())
	<-eng.Done()
	require.ErrorIs(t, eng.Start(context.Background()), engine.ErrStopped)
}

func TestStartContextStopsEngine(t *testing.T) {
	state := fsm.New()
	log := enginetest.New(state)
	defer log.Close()
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, log.BumpEpoch(ctx, 1, "n1"))
	c, err := core.New(core.Config{Seed: 1}, 1, time.Now())
	require.NoError(t, err)
	eng := engine.New(engine.Config{}, c, log)
	require.NoError(t, eng.Start(ctx))
	require.Error(t, eng.Start(ctx), "once")
	_, _, err = submitted(eng.Submit(context.Background(), core.SubmitOne, []core.Spec{spec("a")}))
	require.NoError(t, err)
	cancel()
	<-eng.Done()
	require.NoError(t, eng.Err())
	_ = eng.Stop(context.Background())
}

// A parked submitter (overflow policy wait) whose context ends leaves the
// line: its task is never admitted.
func TestCanceledParkedSubmitDetaches(t *testing.T) {
	ccfg := core.Config{DefaultPool: core.PoolConfig{Bounds: core.Bounds{MaxPending: 1}, Overflow: core.OverflowWait}}
	h := setup(t, engine.Config{}, ccfg)
	subs, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("first")}))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(h.ctx)
	out := make(chan submitResult, 1)
	h.submitAsync(ctx, 1, spec("parked"), out)
	require.Eventually(t, func() bool {
		st, err := h.eng.CoreStats(h.ctx)
		return err == nil && st.Parked == 1
	}, waitFor, time.Millisecond)
	cancel()
	r := recv(t, out)
	require.ErrorIs(t, r.err, context.Canceled)
	require.NotErrorIs(t, r.err, engine.ErrOutcomeUnknown)
	st, err := h.eng.CoreStats(h.ctx)
	require.NoError(t, err)
	require.Zero(t, st.Parked)

	// Space frees: had the submitter stayed parked, it would be admitted now.
	_, cancelled, err := cancelled(h.eng.Cancel(h.ctx, core.TaskRef{ID: subs[0].ID}))
	require.NoError(t, err)
	require.True(t, cancelled)
	subs2, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("next")}))
	require.NoError(t, err)
	var kinds []string
	tasks, _ := h.state.List(fsm.ListQuery{Limit: 10})
	for _, tk := range tasks {
		kinds = append(kinds, tk.Kind)
	}
	require.Equal(t, []string{"first", "next"}, kinds)
	require.NotEmpty(t, subs2[0].ID)
}

// A poll whose context ends is withdrawn from the core.
func TestCanceledPollIsWithdrawn(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Millisecond)
	defer cancel()
	_, err := h.eng.Poll(ctx, core.Offer{Worker: "w", Pool: "p", Slots: 1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	st, err := h.eng.CoreStats(h.ctx)
	require.NoError(t, err)
	require.Zero(t, st.Polls)
	require.Zero(t, h.eng.Stats().Requests)

	// The task goes to the next poller, not to the withdrawn one.
	_, _, err = submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("a")}))
	require.NoError(t, err)
	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w2", Pool: "p", Slots: 1})
	require.NoError(t, err)
	require.Len(t, grants, 1)
	require.Zero(t, h.eng.Stats().DroppedDispatches)
}

// A caller that leaves while its answer is held learns that the outcome is
// unknown: the entry was appended and may commit.
func TestCanceledHeldSubmitIsOutcomeUnknown(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	h.log.Pause()
	ctx, cancel := context.WithCancel(h.ctx)
	out := make(chan submitResult, 1)
	h.submitAsync(ctx, 0, spec("a"), out)
	h.waitAppended(2)
	cancel()
	r := recv(t, out)
	require.ErrorIs(t, r.err, engine.ErrOutcomeUnknown)
	require.ErrorIs(t, r.err, context.Canceled)
	h.log.Resume()
	require.Eventually(t, func() bool { return h.eng.Stats().Committed == 1 }, waitFor, time.Millisecond)
	require.Len(t, h.state.Counts(), 1, "it did commit")
}

func TestLaggingSubscriber(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	slow := h.eng.Subscribe(1)
	fast := h.eng.Subscribe(16)
	for i := range 3 {
		_, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec(fmt.Sprintf("k%d", i))}))
		require.NoError(t, err)
	}
	for range 3 {
		ev := recv(t, fast.C())
		_, ok := h.state.Get(ev.TaskID)
		require.True(t, ok, "events are released once durable")
	}
	require.False(t, fast.Lagged())
	require.True(t, slow.Lagged())
	require.EqualValues(t, 2, slow.Dropped())
	require.EqualValues(t, 2, h.eng.Stats().DroppedEvents)
	slow.Close()
	slow.Close()
	_, open := <-slow.C()
	require.True(t, open, "the buffered event is still delivered")
	_, open = <-slow.C()
	require.False(t, open)
	fast.Close()
}

// Aborts take effect at once, without waiting for a commit.
func TestAbortIsImmediate(t *testing.T) {
	var mu sync.Mutex
	var aborted []uint64
	cfg := engine.Config{OnAbort: func(worker string, lease uint64, reason string) {
		mu.Lock()
		aborted = append(aborted, lease)
		mu.Unlock()
	}}
	h := setup(t, cfg, core.Config{})
	subs, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("a")}))
	require.NoError(t, err)
	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w", Pool: "p", Slots: 1})
	require.NoError(t, err)
	h.log.Pause()
	done := make(chan error, 1)
	go func() {
		_, _, err := cancelled(h.eng.Cancel(h.ctx, core.TaskRef{ID: subs[0].ID}))
		done <- err
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(aborted) == 1
	}, waitFor, time.Millisecond)
	require.Equal(t, grants[0].Lease, aborted[0])
	requireNone(t, done)
	h.log.Resume()
	require.NoError(t, recv(t, done))
}

// A waiter whose context ends is dropped from the core.
func TestCanceledWaitDetaches(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	subs, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("a")}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Millisecond)
	defer cancel()
	_, err = h.eng.Wait(ctx, core.TaskRef{ID: subs[0].ID})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, engine.ErrOutcomeUnknown)
	st, err := h.eng.CoreStats(h.ctx)
	require.NoError(t, err)
	require.Zero(t, st.Waiters)
	_, err = h.eng.Wait(h.ctx, core.TaskRef{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"})
	require.ErrorIs(t, err, core.ErrNotFound)
}

// Timers run on the engine's clock: a delayed task becomes ready, and a
// lease without heartbeats is aborted at once and retried durably.
func TestTimers(t *testing.T) {
	aborts := make(chan string, 1)
	cfg := engine.Config{OnAbort: func(worker string, lease uint64, reason string) {
		aborts <- worker
	}}
	h := setup(t, cfg, core.Config{HeartbeatWindow: 30 * time.Millisecond, MaxAttempts: 3})
	s := spec("later")
	s.Delay = 20 * time.Millisecond
	start := time.Now()
	subs, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{s}))
	require.NoError(t, err)
	task, _ := h.state.Get(subs[0].ID)
	require.Equal(t, fsm.StatusScheduled, task.Status)

	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 1})
	require.NoError(t, err)
	require.Len(t, grants, 1)
	require.GreaterOrEqual(t, time.Since(start), s.Delay)

	require.Equal(t, "w1", recv(t, aborts), "no heartbeat: the lease is lost")
	require.Eventually(t, func() bool {
		task, _ := h.state.Get(subs[0].ID)
		return task.Status == fsm.StatusRetrying || task.Status == fsm.StatusQueued
	}, waitFor, time.Millisecond)
	require.ErrorIs(t, h.eng.Complete(h.ctx, grants[0].Lease, core.Outcome{}), core.ErrStaleLease)
}

// CompleteMany answers each completion on its own: the valid ones are
// durable when it returns, a stale lease is refused, and all of them
// travel to the log together.
func TestCompleteMany(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	specs := []core.Spec{spec("a"), spec("b"), spec("c")}
	_, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitBatch, specs))
	require.NoError(t, err)
	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 3})
	require.NoError(t, err)
	require.Len(t, grants, 3)
	before := len(h.batches())

	errs := h.eng.CompleteMany(h.ctx, []engine.Completion{
		{Lease: grants[0].Lease, Outcome: core.Outcome{Kind: core.OutcomeSuccess, Output: []byte("0")}},
		{Lease: grants[1].Lease + 1000, Outcome: core.Outcome{Kind: core.OutcomeSuccess}},
		{Lease: grants[2].Lease, Outcome: core.Outcome{Kind: core.OutcomePermanent, Message: "no"}},
		{Lease: grants[0].Lease, Outcome: core.Outcome{Kind: core.OutcomeSuccess}},
	})
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], core.ErrStaleLease)
	require.NoError(t, errs[2])
	require.ErrorIs(t, errs[3], core.ErrStaleLease, "a lease completes once")

	task, _ := h.state.Get(grants[0].ID)
	require.Equal(t, fsm.StatusSucceeded, task.Status)
	require.Equal(t, []byte("0"), task.Output)
	task, _ = h.state.Get(grants[1].ID)
	require.Equal(t, fsm.StatusRunning, task.Status)
	task, _ = h.state.Get(grants[2].ID)
	require.Equal(t, fsm.StatusFailed, task.Status)
	require.Len(t, h.batches(), before+1, "handed over together, committed in one entry")
	require.EqualValues(t, 2, h.eng.Stats().Completed)
}

// A CompleteMany whose caller leaves while the entry is in flight learns,
// for each completion taken, that its outcome is unknown.
func TestCompleteManyCanceledIsOutcomeUnknown(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	_, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitBatch, []core.Spec{spec("a"), spec("b")}))
	require.NoError(t, err)
	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 2})
	require.NoError(t, err)
	require.Len(t, grants, 2)
	appended := h.log.Appended()

	h.log.Pause()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan []error, 1)
	go func() {
		done <- h.eng.CompleteMany(ctx, []engine.Completion{
			{Lease: grants[0].Lease, Outcome: core.Outcome{Kind: core.OutcomeSuccess}},
			{Lease: grants[1].Lease, Outcome: core.Outcome{Kind: core.OutcomeSuccess}},
		})
	}()
	h.waitAppended(appended + 1)
	cancel()
	errs := recv(t, done)
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.ErrorIs(t, err, engine.ErrOutcomeUnknown)
	}
	h.log.Resume()
	require.Eventually(t, func() bool {
		a, _ := h.state.Get(grants[0].ID)
		b, _ := h.state.Get(grants[1].ID)
		return a.Status == fsm.StatusSucceeded && b.Status == fsm.StatusSucceeded
	}, waitFor, time.Millisecond, "the entry did commit")
}

// Workflows through the driver: every call answers once its entry is
// durable, a workflow waiter once the workflow's end is, the children of a
// completion are durable with it, a cancelled workflow's running member is
// aborted at once, and workflow events reach subscribers.
func TestWorkflowOperations(t *testing.T) {
	aborts := make(chan uint64, 4)
	h := setup(t, engine.Config{OnAbort: func(_ string, lease uint64, _ string) { aborts <- lease }}, core.Config{})
	events := h.eng.Subscribe(256)
	defer events.Close()

	wf := core.WorkflowSpec{Name: "release", Key: "r1", Steps: []core.StepSpec{
		{Name: "build", Spec: spec("build")},
		{Name: "approve", Spec: core.Spec{Template: spec("approve").Template, External: true}, DependsOnSteps: []string{"build"}},
		{Name: "ship", Spec: spec("ship"), DependsOnSteps: []string{"build", "approve"}},
	}}
	res, err := h.eng.SubmitWorkflow(h.ctx, wf)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Len(t, res.Tasks, 3)
	w, ok := h.state.Workflow(res.ID)
	require.True(t, ok, "the workflow is durable before it is acknowledged")
	require.Equal(t, fsm.WorkflowRunning, w.Status)
	build, approve, ship := res.Tasks[0].ID, res.Tasks[1].ID, res.Tasks[2].ID
	task, _ := h.state.Get(ship)
	require.Equal(t, fsm.StatusBlocked, task.Status)
	require.Equal(t, []string{build, approve}, task.DependsOn())

	dup, err := h.eng.SubmitWorkflow(h.ctx, wf)
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, res.ID, dup.ID)

	waited := make(chan error, 1)
	go func() {
		got, err := h.eng.WaitWorkflow(h.ctx, core.WorkflowRef{Key: "r1"})
		if err == nil && got != res.ID {
			err = fmt.Errorf("wait returned %s", got)
		}
		waited <- err
	}()

	_, err = h.eng.CompleteExternal(h.ctx, core.TaskRef{ID: approve}, core.Outcome{Kind: core.OutcomeSuccess})
	require.ErrorIs(t, err, core.ErrNotWaiting, "blocked until build ends")

	grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 4})
	require.NoError(t, err)
	require.Len(t, grants, 1, "only build is ready; approve is never dispatched")
	require.Equal(t, build, grants[0].ID)
	require.NoError(t, h.eng.Complete(h.ctx, grants[0].Lease, core.Outcome{
		Kind:     core.OutcomeSuccess,
		Children: []core.StepSpec{{Name: "part-1", Spec: spec("part")}, {Name: "part-2", Spec: spec("part")}},
		Then:     &core.StepSpec{Name: "merge", Spec: spec("merge")},
	}))
	members := h.state.WorkflowTasks(res.ID)
	require.Len(t, members, 6, "the children are durable with the completion")
	merge := members[5]
	require.Equal(t, "merge", merge.Step())
	require.Equal(t, build, merge.Parent())
	require.Equal(t, fsm.StatusBlocked, merge.Status)
	require.Equal(t, []string{members[3].ID, members[4].ID}, merge.DependsOn())
	task, _ = h.state.Get(approve)
	require.Equal(t, fsm.StatusQueued, task.Status, "released in the commit of build's end")

	id, err := h.eng.CompleteExternal(h.ctx, core.TaskRef{ID: approve}, core.Outcome{Kind: core.OutcomeSuccess, Output: []byte("yes")})
	require.NoError(t, err)
	require.Equal(t, approve, id)
	task, _ = h.state.Get(approve)
	require.Equal(t, fsm.StatusSucceeded, task.Status)
	require.Equal(t, []byte("yes"), task.Output)

	// The parts and ship, then merge.
	for done := 0; done < 4; {
		grants, err := h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 4})
		require.NoError(t, err)
		for _, g := range grants {
			require.NoError(t, h.eng.Complete(h.ctx, g.Lease, core.Outcome{Kind: core.OutcomeSuccess}))
			done++
		}
	}
	require.NoError(t, recv(t, waited))
	w, _ = h.state.Workflow(res.ID)
	require.Equal(t, fsm.WorkflowSucceeded, w.Status, "durable when its waiter is answered")

	res2, err := h.eng.SubmitWorkflow(h.ctx, core.WorkflowSpec{Name: "nightly", Steps: []core.StepSpec{
		{Name: "a", Spec: spec("a")},
		{Name: "b", Spec: spec("b"), DependsOnSteps: []string{"a"}},
	}})
	require.NoError(t, err)
	grants, err = h.eng.Poll(h.ctx, core.Offer{Worker: "w1", Pool: "p", Slots: 4})
	require.NoError(t, err)
	require.Len(t, grants, 1)
	cw, err := h.eng.CancelWorkflow(h.ctx, core.WorkflowRef{ID: res2.ID})
	require.NoError(t, err)
	require.Equal(t, core.CancelledWorkflow{ID: res2.ID, Cancelled: 2}, cw)
	require.Equal(t, grants[0].Lease, recv(t, aborts), "the running member is aborted")
	w, _ = h.state.Workflow(res2.ID)
	require.Equal(t, fsm.WorkflowCancelled, w.Status)
	got, err := h.eng.WaitWorkflow(h.ctx, core.WorkflowRef{ID: res2.ID})
	require.NoError(t, err)
	require.Equal(t, res2.ID, got, "an ended workflow answers its waiter at once")
	require.ErrorIs(t, h.eng.Complete(h.ctx, grants[0].Lease, core.Outcome{}), core.ErrStaleLease)
	_, err = h.eng.CancelWorkflow(h.ctx, core.WorkflowRef{Key: "nope"})
	require.ErrorIs(t, err, core.ErrNotFound)

	type wfEvent struct {
		id     string
		status fsm.WorkflowStatus
	}
	var seen []wfEvent
	for len(seen) < 4 {
		ev := recv(t, events.C())
		if ev.TaskID == "" {
			seen = append(seen, wfEvent{ev.Workflow, ev.WorkflowStatus})
		}
	}
	require.Equal(t, []wfEvent{
		{res.ID, fsm.WorkflowRunning}, {res.ID, fsm.WorkflowSucceeded},
		{res2.ID, fsm.WorkflowRunning}, {res2.ID, fsm.WorkflowCancelled},
	}, seen)
	require.False(t, events.Lagged())
}

// TestWritePathSaturation pauses the log so that submits pile up waiting
// for it: once their mutations pass MaxQueuedBytes, new submits are
// refused (ErrWritePathSaturated, an overloaded error) without reaching
// the core, and the stats say so. When the log resumes, every submit taken
// before commits and is acknowledged, and submits are admitted again.
func TestWritePathSaturation(t *testing.T) {
	h := setup(t, engine.Config{MaxQueuedBytes: 4 << 10, MaxInFlight: 1}, core.Config{})
	h.log.Pause()
	out := make(chan submitResult, 1000)
	sent := 0
	big := spec("k")
	big.Payload = make([]byte, 512)
	for !h.eng.Stats().Saturated {
		require.Less(t, sent, 200, "never saturated")
		h.submitAsync(h.ctx, sent, big, out)
		sent++
		h.waitRequests(sent) // taken by the core, held for the log
	}
	_, err := h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("refused")})
	require.ErrorIs(t, err, engine.ErrWritePathSaturated)
	require.ErrorIs(t, err, core.ErrOverloaded)
	st := h.eng.Stats()
	require.True(t, st.Saturated)
	require.Greater(t, st.QueuedBytes, 4<<10)
	require.Equal(t, uint64(1), st.SaturatedRefusals)

	h.log.Resume()
	ids := map[string]bool{}
	for i := 0; i < sent; i++ {
		r := recv(t, out)
		require.NoError(t, r.err, "submit %d", r.n)
		ids[r.id] = true
	}
	require.Len(t, ids, sent)
	for id := range ids {
		task, ok := h.state.Get(id)
		require.True(t, ok, "acknowledged task %s is durable", id)
		require.Equal(t, fsm.StatusQueued, task.Status)
	}
	require.Eventually(t, func() bool { return !h.eng.Stats().Saturated }, waitFor, time.Millisecond)
	_, err = h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("admitted")})
	require.NoError(t, err)
}
