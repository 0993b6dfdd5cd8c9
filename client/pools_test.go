package client

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

// stepClock is a clock that moves only when told.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (s *stepClock) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *stepClock) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

func TestDelete(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	live := addTask(fc, "p", "k", "", nil)
	ended := addTask(fc, "p", "k", "ek", nil)
	fc.Finish(ended, cronoqv1.Status_STATUS_FAILED, nil, "boom")

	// A live task is refused, naming it; nothing changes.
	_, _, err := c.Delete(ctx, ByID(live))
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "id", inv.Field)
	require.Contains(t, inv.Reason, live)
	require.Contains(t, inv.Reason, "queued")
	require.NotNil(t, fc.Task(live))

	id, deleted, err := c.Delete(ctx, ByKey("ek"))
	require.NoError(t, err)
	require.True(t, deleted)
	require.Equal(t, ended, id)
	require.Nil(t, fc.Task(ended))
	require.Nil(t, fc.TaskByKey("ek"), "the key goes with it")

	_, _, err = c.Delete(ctx, ByID(ended))
	require.ErrorIs(t, err, ErrNotFound)
	_, err = c.Get(ctx, ended)
	require.ErrorIs(t, err, ErrNotFound)

	// An answer lost after the task was deleted: the retry finds it gone,
	// which is no error for this call.
	_, err = c.Cancel(ctx, live)
	require.NoError(t, err)
	fc.LoseAnswers(cronoqv1connect.TaskServiceDeleteProcedure, 1, apierr.OutcomeUnknown("leadership lost while committing"))
	before := fc.Calls(cronoqv1connect.TaskServiceDeleteProcedure)
	id, deleted, err = c.Delete(ctx, ByID(live))
	require.NoError(t, err)
	require.False(t, deleted)
	require.Equal(t, live, id)
	require.Nil(t, fc.Task(live))
	require.Equal(t, before+2, fc.Calls(cronoqv1connect.TaskServiceDeleteProcedure), "one lost answer, one retry")
}

func TestDeleteRefusesTaskWithLiveDependents(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	dep := addTask(fc, "p", "k", "", nil)
	fc.Finish(dep, cronoqv1.Status_STATUS_SUCCEEDED, nil, "")
	fc.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, DependsOn: []*cronoqv1.TaskRef{{Id: dep}}})
	// The dependent is queued (its dependency ended), hence live.
	_, _, err := c.Delete(ctx, ByID(dep))
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "id", inv.Field)
	require.Contains(t, inv.Reason, "live dependents")
}

func TestPools(t *testing.T) {
	t.Parallel()
	clock := &stepClock{now: time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)}
	fc := newFakeCluster(t, 2, 1, clienttest.WithClock(clock.Now))
	// Only the follower is known: pool calls need the leader.
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	addTask(fc, "p", "k", "", nil)
	clock.Advance(30 * time.Second)
	addTask(fc, "p", "k", "", nil)
	fc.PutTask(&cronoqv1.Task{Id: "X1", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", OrderingKey: "acct-1"},
		Status: cronoqv1.Status_STATUS_FAILED, BlocksLane: true})
	fc.PutTask(&cronoqv1.Task{Id: "X2", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", OrderingKey: "acct-2"},
		Status: cronoqv1.Status_STATUS_PARKED})
	clock.Advance(60 * time.Second)

	p, err := c.GetPool(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, &Pool{
		Name:            "p",
		Counts:          map[string]int64{StatusQueued: 2, StatusFailed: 1, StatusParked: 1},
		OldestQueuedAge: 90 * time.Second,
		Parked:          1,
		Limits:          PoolLimits{Overflow: OverflowReject, Ordering: OrderingContinue},
		BlockedLanes:    []string{"acct-1"},
		Lanes:           2,
		DesiredSlots:    2,
	}, p)

	// A pool nobody used is described with the settings it would get.
	p, err = c.GetPool(ctx, "empty")
	require.NoError(t, err)
	require.Equal(t, &Pool{Name: "empty", Counts: map[string]int64{}, Limits: PoolLimits{Overflow: OverflowReject, Ordering: OrderingContinue}}, p)
	_, err = c.GetPool(ctx, "")
	require.ErrorIs(t, err, ErrInvalid)

	p, err = c.SetPool(ctx, "q", PoolChange{
		MaxRunning:         new(int64(4)),
		MaxPending:         new(int64(100)),
		MaxPendingPerClass: map[string]int64{PriorityLow: 10, PriorityHigh: 50},
		Overflow:           new(OverflowPark),
		Rate:               new(2.5),
		Burst:              new(int64(5)),
		KindRates:          []KindRate{{Kind: "send", Rate: 1, Burst: 2}, {Kind: "fetch", Rate: 0.5}},
		ConcurrencyLimit:   new(int64(3)),
		Ordering:           new(OrderingBlock),
		MaxAttempts:        new(7),
		Backoff:            &Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.1},
		LeaseGrace:         new(45 * time.Second),
	})
	require.NoError(t, err)
	want := PoolLimits{
		MaxRunning:         4,
		MaxPending:         100,
		MaxPendingPerClass: map[string]int64{PriorityLow: 10, PriorityHigh: 50},
		Overflow:           OverflowPark,
		Rate:               2.5,
		Burst:              5,
		KindRates:          []KindRate{{Kind: "fetch", Rate: 0.5}, {Kind: "send", Rate: 1, Burst: 2}},
		ConcurrencyLimit:   3,
		Ordering:           OrderingBlock,
		MaxAttempts:        7,
		Backoff:            &Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.1},
		LeaseGrace:         45 * time.Second,
	}
	require.Equal(t, &Pool{Name: "q", Counts: map[string]int64{}, Limits: want, Replicated: true}, p)

	// Only what a change sets changes; a kind rate of 0 removes the kind's
	// limit, an empty backoff and a zero lease grace restore the defaults.
	p, err = c.SetPool(ctx, "q", PoolChange{
		MaxRunning: new(int64(0)),
		KindRates:  []KindRate{{Kind: "send"}},
		Backoff:    &Backoff{},
		LeaseGrace: new(time.Duration(0)),
	})
	require.NoError(t, err)
	want.MaxRunning, want.KindRates, want.Backoff, want.LeaseGrace = 0, []KindRate{{Kind: "fetch", Rate: 0.5}}, nil, 0
	require.Equal(t, want, p.Limits)

	pools, err := c.ListPools(ctx)
	require.NoError(t, err)
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"p", "q"}, names)
	require.Equal(t, int64(2), pools[0].Counts[StatusQueued])
	require.True(t, pools[1].Replicated)
}

func TestSetPoolRefusals(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0, clienttest.WithPools("p"))
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		pool   string
		change PoolChange
		field  string
	}{
		{"overflow", "p", PoolChange{Overflow: new("drop")}, "overflow"},
		{"ordering", "p", PoolChange{Ordering: new("strict")}, "ordering"},
		{"negative max running", "p", PoolChange{MaxRunning: new(int64(-1))}, "max_running"},
		{"class", "p", PoolChange{MaxPendingPerClass: map[string]int64{"urgent": 1}}, "max_pending_per_class"},
		{"rate", "p", PoolChange{Rate: new(-1.0)}, "rate"},
		{"kind rate", "p", PoolChange{KindRates: []KindRate{{Kind: "k", Rate: 1e12}}}, "kind_rates[k]"},
		{"empty kind", "p", PoolChange{KindRates: []KindRate{{Rate: 1}}}, "kind_rates"},
		{"backoff", "p", PoolChange{Backoff: &Backoff{Initial: time.Minute, Max: time.Second}}, "backoff"},
		{"lease grace", "p", PoolChange{LeaseGrace: new(-time.Second)}, "lease_grace"},
		{"unknown pool", "nope", PoolChange{Paused: new(true)}, "pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.SetPool(ctx, tc.pool, tc.change)
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, tc.field, inv.Field)
		})
	}
	p, err := c.GetPool(ctx, "p")
	require.NoError(t, err)
	require.False(t, p.Replicated, "nothing was changed")

	// Refused by the SDK itself, nothing sent.
	sent := fc.Calls(cronoqv1connect.PoolServiceSetProcedure)
	_, err = c.SetPool(ctx, "p", PoolChange{MaxAttempts: new(-1)})
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "max_attempts", inv.Field)
	require.Equal(t, sent, fc.Calls(cronoqv1connect.PoolServiceSetProcedure))
}

func TestPausedPoolDispatchesNothing(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	p, err := c.PausePool(ctx, "p")
	require.NoError(t, err)
	require.True(t, p.Paused)
	id := addTask(fc, "p", "k", "", nil)

	w, err := c.NewWorker(WorkerConfig{Pool: "p", ID: "w1", Concurrency: 3, Labels: map[string]string{"zone": "eu"},
		Handlers: map[string]Handler{"k": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return []byte("done"), nil })}})
	require.NoError(t, err)
	runWorker(t, w)
	fc.WaitUntil("the worker polls", func() bool { return len(fc.Workers().Polls) > 0 })

	workers, err := c.ListWorkers(ctx, "p")
	require.NoError(t, err)
	require.Len(t, workers, 1)
	seen := workers[0].LastSeen
	require.False(t, seen.IsZero())
	workers[0].LastSeen = time.Time{}
	require.Equal(t, WorkerInfo{ID: "w1", Pool: "p", Labels: map[string]string{"zone": "eu"}, Slots: 3, Node: fc.Node(1).ID()}, workers[0])
	others, err := c.ListWorkers(ctx, "other")
	require.NoError(t, err)
	require.Empty(t, others)
	all, err := c.ListWorkers(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 1)

	p, err = c.GetPool(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Workers)
	require.Equal(t, int64(3), p.Slots)
	require.Equal(t, int64(1), p.Counts[StatusQueued], "paused: not dispatched")
	require.Empty(t, fc.Workers().Grants)

	p, err = c.ResumePool(ctx, "p")
	require.NoError(t, err)
	require.False(t, p.Paused)
	task, err := c.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, task.Status)
	require.True(t, slices.ContainsFunc(fc.Workers().Grants, func(g *cronoqv1.Grant) bool { return g.GetTask().GetId() == id }))
}
