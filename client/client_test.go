package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newTestClient returns a Client with short timeouts and backoff, closed at
// the end of the test.
func newTestClient(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	opts = append([]Option{WithBackoff(time.Millisecond, 20*time.Millisecond), WithTimeout(5 * time.Second)}, opts...)
	c, err := New(addrs, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// newFakeCluster starts a fake cluster of n nodes in which node leader
// leads.
func newFakeCluster(t *testing.T, n, leader int, opts ...clienttest.Option) *clienttest.Cluster {
	t.Helper()
	return clienttest.NewCluster(t, append([]clienttest.Option{clienttest.WithNodes(n), clienttest.WithLeader(leader)}, opts...)...)
}

// addrs returns the addresses of the nodes idx of fc, in that order.
func addrs(fc *clienttest.Cluster, idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, fc.Node(i).Addr())
	}
	return out
}

// addTask stores a queued task of pool and kind (with key and payload when
// given) and returns its id.
func addTask(fc *clienttest.Cluster, pool, kind, key string, payload []byte) string {
	return fc.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: pool, Kind: kind, Payload: payload}, Key: key})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		addrs []string
		opts  []Option
	}{
		{"no addresses", nil, nil},
		{"blank addresses", []string{" ", ""}, nil},
		{"no port", []string{"localhost"}, nil},
		{"bad local ip", []string{"127.0.0.1:1"}, []Option{WithLocalAddr("not-an-ip")}},
		{"local addr with http client", []string{"127.0.0.1:1"}, []Option{WithLocalAddr("127.0.0.2"), WithHTTPClient(&http.Client{})}},
		{"bad timeout", []string{"127.0.0.1:1"}, []Option{WithTimeout(0)}},
		{"bad backoff", []string{"127.0.0.1:1"}, []Option{WithBackoff(time.Second, time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.addrs, tc.opts...)
			require.Error(t, err)
		})
	}
	c, err := New([]string{"http://127.0.0.1:8650/", "127.0.0.1:8650", "127.0.0.2:8650"})
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1:8650", "127.0.0.2:8650"}, c.addrs)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	_, err = c.Get(context.Background(), "x")
	require.ErrorIs(t, err, ErrClosed)
}

func TestSubmitFollowsLeaderHint(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	// The client knows only the follower; the leader is reached via the hint.
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k", Payload: []byte("x")}})
	require.NoError(t, err)
	require.NotEmpty(t, sub.ID)
	require.False(t, sub.Duplicate)
	require.Len(t, sub.Key, 32, "a generated 128-bit hex key")
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))
	require.Equal(t, 1, fc.Node(1).Requests(cronoqv1connect.TaskServiceSubmitProcedure))

	// The leader is remembered: the next call goes straight there.
	task, err := c.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, sub.Key, task.Key)
	require.Equal(t, StatusQueued, task.Status)
	require.Equal(t, 0, fc.Node(0).Requests(cronoqv1connect.TaskServiceGetProcedure))
	require.Equal(t, 1, fc.Node(1).Requests(cronoqv1connect.TaskServiceGetProcedure))
}

func TestSubmitPrefersLeaderNamedByForwardedAnswer(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1, clienttest.WithForwarding())
	// The client knows only the follower, which serves the first submit by
	// forwarding it and names the leader in its answer.
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))
	require.Equal(t, 0, fc.Node(1).Requests(cronoqv1connect.TaskServiceSubmitProcedure))

	// Every later call goes straight to the leader.
	for range 3 {
		_, err = c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
		require.NoError(t, err)
	}
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))
	require.Equal(t, 3, fc.Node(1).Requests(cronoqv1connect.TaskServiceSubmitProcedure))

	// A stale read is still served by the node the client talks to.
	_, meta, err := c.GetStale(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, fc.Node(0).ID(), meta.Node)
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceGetProcedure))
	require.Equal(t, 0, fc.Node(1).Requests(cronoqv1connect.TaskServiceGetProcedure))
}

func TestUnreachableForwardedLeaderFallsBackToRotation(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	// The leader's address as the nodes know it is not one this client can
	// reach.
	dead := deadAddr(t)
	fc.SetForwarding(true)
	fc.Node(1).Advertise(dead)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	for range 4 {
		_, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
		require.NoError(t, err)
	}
	// The first answer sends the next call to the unreachable address; that
	// call fails to connect and is served through the follower, and the
	// client then stops following answers that name the unreachable address.
	require.Equal(t, 4, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, dead, c.badHint)
	require.Empty(t, c.leader)
	require.Equal(t, fc.Node(0).Addr(), c.preferred)
}

func TestSubmitRetriesOutcomeUnknownWithSameKey(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 0)
	c := newTestClient(t, addrs(fc, 1, 0))
	ctx := testCtx(t)

	fc.LoseAnswers(cronoqv1connect.TaskServiceSubmitProcedure, 1, apierr.OutcomeUnknown("leadership lost while committing"))
	sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)

	keys := fc.SubmitKeys()
	require.Len(t, keys, 2, "one outcome-unknown answer, one retry")
	require.Equal(t, keys[0], keys[1], "the retry carries the same key")
	require.Equal(t, sub.Key, keys[0])
	require.Len(t, fc.Tasks(), 1, "one task for two submits")
	require.Equal(t, fc.TaskByKey(sub.Key).GetId(), sub.ID)
	require.False(t, sub.Duplicate, "the duplicate was this call's own first attempt")

	// With a caller's key, a duplicate answer is reported as such.
	sub2, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}, Key: sub.Key})
	require.NoError(t, err)
	require.Equal(t, sub.ID, sub2.ID)
	require.True(t, sub2.Duplicate)
}

func TestSubmitGivesUpWithOutcomeUnknown(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	fc.LoseAnswers(cronoqv1connect.TaskServiceSubmitProcedure, -1, apierr.OutcomeUnknown("leadership lost while committing"))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrOutcomeUnknown)

	keys := fc.SubmitKeys()
	require.Greater(t, len(keys), 1)
	for _, k := range keys {
		require.Equal(t, keys[0], k)
	}
}

func TestSubmitDoesNotRetryRefusals(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	fc.SetPendingLimit("full", 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	_, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p"}})
	require.ErrorIs(t, err, ErrInvalid)
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "kind", inv.Field)
	require.Equal(t, "must not be empty", inv.Reason)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "invalid", ae.Kind)
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure), "invalid is not retried")

	_, err = c.Submit(ctx, TaskSpec{Template: Template{Pool: "full", Kind: "k"}})
	require.ErrorIs(t, err, ErrOverloaded)
	require.Equal(t, 2, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure), "overloaded is not retried")

	// Refused by the SDK itself, nothing sent.
	_, err = c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k", Priority: "urgent"}})
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "priority", inv.Field)
	require.Equal(t, 2, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))
	// What the wire can carry is the cluster's to check: refused by the
	// node, and not retried either.
	_, err = c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}, Delay: -time.Second})
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "delay", inv.Field)
	require.Equal(t, 3, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure))

	_, err = c.Get(ctx, "T9999")
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, 1, fc.Node(0).Requests(cronoqv1connect.TaskServiceGetProcedure))
}

func TestSubmitRotatesPastDeadNode(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	// A closed port first: connection refused, then the live node.
	dead := deadAddr(t)
	c := newTestClient(t, []string{dead, fc.Node(0).Addr()})
	sub, err := c.Submit(testCtx(t), TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)
	require.NotEmpty(t, sub.ID)
}

func TestSubmitBatchAndEnqueueMany(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	fc.SetPendingLimit("full", 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	subs, err := c.SubmitBatch(ctx, []TaskSpec{{Template: Template{Pool: "p", Kind: "a"}}, {Template: Template{Pool: "p", Kind: "b"}, Key: "mine"}})
	require.NoError(t, err)
	require.Len(t, subs, 2)
	require.Equal(t, "mine", subs[1].Key)
	require.NotEqual(t, subs[0].ID, subs[1].ID)

	_, err = c.SubmitBatch(ctx, []TaskSpec{{Template: Template{Pool: "p", Kind: "a"}}, {Template: Template{Pool: "p"}}})
	require.ErrorIs(t, err, ErrInvalid)

	subs, errs, err := c.EnqueueMany(ctx, []TaskSpec{{Template: Template{Pool: "p", Kind: "a"}}, {Template: Template{Pool: "p"}}, {Template: Template{Pool: "full", Kind: "a"}}, {Template: Template{Pool: "p", Kind: "b"}, Key: "mine"}})
	require.NoError(t, err)
	require.Len(t, subs, 4)
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.NotEmpty(t, subs[0].ID)
	var inv *InvalidError
	require.ErrorAs(t, errs[1], &inv)
	require.Equal(t, "kind", inv.Field)
	require.ErrorIs(t, errs[2], ErrOverloaded)
	require.NoError(t, errs[3])
	require.True(t, subs[3].Duplicate)
}

func TestWaitReissuedAfterDroppedConnection(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	id := addTask(fc, "p", "k", "", nil)

	type result struct {
		task *Task
		err  error
	}
	done := make(chan result, 1)
	go func() {
		task, err := c.Wait(testCtx(t), id)
		done <- result{task, err}
	}()
	waits := func() int { return fc.Calls(cronoqv1connect.TaskServiceWaitProcedure) }
	fc.WaitUntil("the first Wait is held", func() bool { return waits() == 1 })
	fc.Node(0).DropConns()
	fc.WaitUntil("Wait is re-issued", func() bool { return waits() >= 2 })
	fc.Finish(id, cronoqv1.Status_STATUS_SUCCEEDED, []byte("out"), "")
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, StatusSucceeded, res.task.Status)
	require.Equal(t, []byte("out"), res.task.Output)
	require.True(t, res.task.Terminal())
	require.False(t, res.task.FinishedAt.IsZero())
}

func TestWaitAsksAgainAfterNodeHold(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0), WithWaitPoll(20*time.Millisecond))
	id := addTask(fc, "p", "k", "wk", nil)

	done := make(chan error, 1)
	go func() {
		task, err := c.WaitKey(testCtx(t), "wk")
		if err == nil && task.Status != StatusCancelled {
			err = errors.New("unexpected status " + task.Status)
		}
		done <- err
	}()
	fc.WaitUntil("several holds expired", func() bool { return fc.Calls(cronoqv1connect.TaskServiceWaitProcedure) >= 3 })
	cancelled, err := c.Cancel(testCtx(t), id)
	require.NoError(t, err)
	require.True(t, cancelled)
	require.NoError(t, <-done)

	cancelled, err = c.CancelKey(testCtx(t), "wk")
	require.NoError(t, err)
	require.False(t, cancelled, "already ended")
}

func TestWaitNotFound(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	_, err := c.Wait(testCtx(t), "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 0)
	c := newTestClient(t, addrs(fc, 1, 0))
	ctx := testCtx(t)
	var want []string
	for range 5 {
		want = append(want, addTask(fc, "p", "k", "", nil))
	}
	other := addTask(fc, "q", "k", "", nil)
	fc.Finish(want[2], cronoqv1.Status_STATUS_SUCCEEDED, nil, "")

	var got []string
	var pages int
	opt := ListOptions{Pools: []string{"p"}, Limit: 2}
	for {
		tasks, next, err := c.List(ctx, opt)
		require.NoError(t, err)
		pages++
		for _, task := range tasks {
			require.Equal(t, "p", task.Pool)
			got = append(got, task.ID)
		}
		if next == "" {
			break
		}
		require.Equal(t, got[len(got)-1], next)
		opt.After = next
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)

	tasks, next, err := c.List(ctx, ListOptions{Statuses: []string{StatusSucceeded}})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, tasks, 1)
	require.Equal(t, want[2], tasks[0].ID)

	tasks, _, err = c.List(ctx, ListOptions{Pools: []string{"q"}, Stale: true})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, other, tasks[0].ID)

	_, _, err = c.List(ctx, ListOptions{Statuses: []string{"bogus"}})
	require.ErrorIs(t, err, ErrInvalid)

	counts, err := c.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]int64{
		"p": allStatuses(map[string]int64{StatusQueued: 4, StatusSucceeded: 1}),
		"q": allStatuses(map[string]int64{StatusQueued: 1}),
	}, counts)
}

// listAll pages through List with opt and returns the ids in the order
// listed, checking that each next is the last id of its page.
func listAll(t *testing.T, c *Client, opt ListOptions) (ids []string, pages int) {
	t.Helper()
	for {
		tasks, next, err := c.List(testCtx(t), opt)
		require.NoError(t, err)
		pages++
		for _, task := range tasks {
			ids = append(ids, task.ID)
		}
		if next == "" {
			return ids, pages
		}
		require.Equal(t, ids[len(ids)-1], next)
		opt.After = next
	}
}

func TestListKindsNewestFirst(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 0)
	c := newTestClient(t, addrs(fc, 1, 0))
	var all, ofA, ofAB []string
	for i := range 7 {
		kind := []string{"a", "b", "c"}[i%3]
		id := addTask(fc, "p", kind, "", nil)
		all = append(all, id)
		if kind != "c" {
			ofAB = append(ofAB, id)
		}
		if kind == "a" {
			ofA = append(ofA, id)
		}
	}
	reversed := func(ids []string) []string {
		out := slices.Clone(ids)
		slices.Reverse(out)
		return out
	}

	// Both orders, with and without a kind filter, page by page.
	for _, tc := range []struct {
		name  string
		opt   ListOptions
		want  []string
		pages int
	}{
		{"oldest first", ListOptions{Limit: 3}, all, 3},
		{"newest first", ListOptions{Limit: 3, NewestFirst: true}, reversed(all), 3},
		{"kinds oldest first", ListOptions{Kinds: []string{"a", "b"}, Limit: 2}, ofAB, 3},
		{"kinds newest first", ListOptions{Kinds: []string{"b", "a"}, Limit: 2, NewestFirst: true}, reversed(ofAB), 3},
		// Exactly one page of matches: no next page.
		{"one full page", ListOptions{Kinds: []string{"a"}, Limit: 3, NewestFirst: true}, reversed(ofA), 1},
		{"no limit", ListOptions{Pools: []string{"p"}, NewestFirst: true, Stale: true}, reversed(all), 1},
		{"unknown kind", ListOptions{Kinds: []string{"nope"}, NewestFirst: true}, nil, 1},
	} {
		got, pages := listAll(t, c, tc.opt)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, tc.pages, pages, tc.name)
	}

	// A cursor from the middle: ids before it when newest first, after it
	// otherwise.
	tasks, next, err := c.List(testCtx(t), ListOptions{After: all[3], NewestFirst: true, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{all[2], all[1]}, []string{tasks[0].ID, tasks[1].ID})
	require.Equal(t, all[1], next)
	tasks, next, err = c.List(testCtx(t), ListOptions{After: all[3], Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{all[4], all[5]}, []string{tasks[0].ID, tasks[1].ID})
	require.Equal(t, all[5], next)

	// The filters and the order go on the wire.
	_, _, err = c.List(testCtx(t), ListOptions{Pools: []string{"p"}, Kinds: []string{"a", "b"}, NewestFirst: true, After: all[6], Limit: 4})
	require.NoError(t, err)
	reqs := fc.Requests(cronoqv1connect.TaskServiceListProcedure)
	req := reqs[len(reqs)-1].(*cronoqv1.ListRequest)
	require.Equal(t, []string{"a", "b"}, req.GetKinds())
	require.True(t, req.GetNewestFirst())
	require.Equal(t, all[6], req.GetAfter())
	require.Equal(t, int32(4), req.GetLimit())
}

func TestListNewestFirstPageBytes(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0, clienttest.WithMaxPageBytes(1)) // one task a page
	c := newTestClient(t, addrs(fc, 0))
	var want []string
	for range 3 {
		want = append(want, addTask(fc, "p", "k", "", nil))
	}
	slices.Reverse(want)
	got, pages := listAll(t, c, ListOptions{Kinds: []string{"k"}, NewestFirst: true})
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)
}

// allStatuses is counts with every other status at 0, as nodes count them.
func allStatuses(counts map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, s := range []string{StatusScheduled, StatusQueued, StatusRunning, StatusRetrying,
		StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired, StatusBlocked, StatusParked} {
		out[s] = counts[s]
	}
	return out
}

func TestGetStaleServedByAnyNode(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	fc.Node(0).SetLastContact(7 * time.Millisecond)
	c := newTestClient(t, addrs(fc, 0))
	id := addTask(fc, "p", "k", "", []byte("pl"))
	task, meta, err := c.GetStale(testCtx(t), id)
	require.NoError(t, err)
	require.Equal(t, []byte("pl"), task.Payload)
	require.True(t, meta.Stale)
	require.Equal(t, "node0", meta.Node)
	require.Equal(t, 7*time.Millisecond, meta.LastContact)
	require.Equal(t, fc.AppliedIndex(), meta.AppliedIndex)
	require.Equal(t, 0, fc.Node(1).Requests(cronoqv1connect.TaskServiceGetProcedure))
}

func TestEventsLaggedAndResubscribe(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	c := newTestClient(t, addrs(fc, 0))
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	fc.ScriptEvents(func(n int, send func(*cronoqv1.Event) error) error {
		if n == 1 {
			for _, ev := range []*cronoqv1.Event{
				{TaskId: "T1", Pool: "p", Kind: "k", Status: cronoqv1.Status_STATUS_QUEUED, At: timestamppb.New(at)},
				{Lagged: true},
				{TaskId: "T2", Pool: "p", Kind: "k", Status: cronoqv1.Status_STATUS_FAILED, Attempt: 3, Message: "boom"},
			} {
				if err := send(ev); err != nil {
					return err
				}
			}
			// The node loses the subscription.
			return errors.New("subscription lost")
		}
		return send(&cronoqv1.Event{TaskId: "T3", Status: cronoqv1.Status_STATUS_SUCCEEDED})
	})

	ctx, cancel := context.WithCancel(context.Background())
	ch, err := c.Events(ctx, "p")
	require.NoError(t, err)
	var got []Event
	for len(got) < 5 {
		got = append(got, <-ch)
	}
	require.Equal(t, Event{TaskID: "T1", Pool: "p", Kind: "k", Status: StatusQueued, At: at}, got[0])
	require.Equal(t, Event{Lagged: true}, got[1])
	require.Equal(t, Event{TaskID: "T2", Pool: "p", Kind: "k", Status: StatusFailed, Attempt: 3, Message: "boom"}, got[2])
	require.Equal(t, Event{Lagged: true}, got[3], "the re-subscription gap is marked")
	require.Equal(t, Event{TaskID: "T3", Status: StatusSucceeded}, got[4])
	cancel()
	for range ch {
	}
}

// A lost stream is re-established after the last cursor received: a node
// that resumes from it sends no gap; one that cannot sends a lagged marker
// first; one that sends no cursors (an older release) leaves the gap to
// the SDK to mark.
func TestEventsResumeAfterCursor(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ev := func(id string, cursor uint64) *cronoqv1.Event {
		return &cronoqv1.Event{TaskId: id, Pool: "p", Status: cronoqv1.Status_STATUS_QUEUED, Cursor: cursor}
	}
	lost := errors.New("subscription lost")
	fc.ScriptEvents(func(n int, send func(*cronoqv1.Event) error) error {
		var evs []*cronoqv1.Event
		switch n {
		case 1:
			evs = []*cronoqv1.Event{ev("T1", 10), ev("T2", 11)}
		case 2: // resumes
			evs = []*cronoqv1.Event{ev("T3", 12)}
		case 3: // cannot resume
			evs = []*cronoqv1.Event{{Lagged: true}, ev("T5", 20)}
		case 4: // sends no cursors
			evs = []*cronoqv1.Event{ev("T6", 0)}
		default:
			return nil
		}
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
		}
		return lost
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := c.Events(ctx, "p")
	require.NoError(t, err)
	var got []string
	for len(got) < 7 {
		e := <-ch
		require.NoError(t, e.Err)
		if e.Lagged {
			got = append(got, "lagged")
			continue
		}
		got = append(got, e.TaskID)
	}
	require.Equal(t, []string{"T1", "T2", "T3", "lagged", "T5", "lagged", "T6"}, got)
	var after []uint64
	for _, m := range fc.Requests(cronoqv1connect.TaskServiceEventsProcedure)[:4] {
		after = append(after, m.(*cronoqv1.EventsRequest).GetAfterCursor())
	}
	require.Equal(t, []uint64{0, 11, 12, 20}, after)
	cancel()
	for range ch {
	}
}

func TestEventsAfterStartsAfterTheCursor(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	fc.ScriptEvents(func(n int, send func(*cronoqv1.Event) error) error {
		if n == 1 {
			if err := send(&cronoqv1.Event{TaskId: "T8", Pool: "p", Status: cronoqv1.Status_STATUS_QUEUED, Cursor: 8}); err != nil {
				return err
			}
		}
		return errors.New("subscription lost")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := c.EventsAfter(ctx, 7, "p")
	require.NoError(t, err)
	e := <-ch
	require.NoError(t, e.Err)
	require.Equal(t, "T8", e.TaskID)
	require.Eventually(t, func() bool {
		return len(fc.Requests(cronoqv1connect.TaskServiceEventsProcedure)) >= 2
	}, 5*time.Second, 5*time.Millisecond)
	var after []uint64
	for _, m := range fc.Requests(cronoqv1connect.TaskServiceEventsProcedure)[:2] {
		after = append(after, m.(*cronoqv1.EventsRequest).GetAfterCursor())
	}
	require.Equal(t, []uint64{7, 8}, after, "from the cursor given, then after the last event")
	cancel()
	for range ch {
	}
}

func TestEventsEndWithClientClose(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c, err := New(addrs(fc, 0))
	require.NoError(t, err)
	ch, err := c.Events(context.Background())
	require.NoError(t, err)
	fc.WaitUntil("subscribed", func() bool { return fc.Calls(cronoqv1connect.TaskServiceEventsProcedure) == 1 })
	require.NoError(t, c.Close())
	_, open := <-ch
	require.False(t, open)
	_, err = c.Events(context.Background())
	require.ErrorIs(t, err, ErrClosed)
}

func TestSchedules(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1, clienttest.WithStartTime(time.Date(2029, 12, 31, 12, 0, 0, 0, time.UTC)))
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	next, err := c.AddSchedule(ctx, Schedule{Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Paris",
		Task: Template{Pool: "p", Kind: "report", Labels: map[string]string{"b": "2", "a": "1"}}, CatchUp: CatchUpAll, CatchUpLimit: 3})
	require.NoError(t, err)
	// 03:00 in Paris is 02:00 UTC in winter.
	require.Equal(t, time.Date(2030, 1, 1, 2, 0, 0, 0, time.UTC), next)
	list, err := c.ListSchedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, next, list[0].NextFire)
	require.False(t, list[0].Paused)

	_, err = c.AddSchedule(ctx, Schedule{Name: "bad", Cron: "* *"})
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "cron", inv.Field)

	paused, err := c.PauseSchedule(ctx, "nightly", true)
	require.NoError(t, err)
	require.True(t, paused)
	_, err = c.PauseSchedule(ctx, "missing", true)
	require.ErrorIs(t, err, ErrNotFound)

	list, err = c.ListSchedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	s := list[0]
	require.Equal(t, "nightly", s.Name)
	require.Equal(t, "Europe/Paris", s.TZ)
	require.Equal(t, CatchUpAll, s.CatchUp)
	require.Equal(t, OverlapSkip, s.Overlap)
	require.Equal(t, 3, s.CatchUpLimit)
	require.True(t, s.Paused)
	require.Equal(t, map[string]string{"a": "1", "b": "2"}, s.Task.Labels)
	require.True(t, s.NextFire.IsZero(), "a paused schedule has no next fire")

	paused, err = c.PauseSchedule(ctx, "nightly", false)
	require.NoError(t, err)
	require.False(t, paused)
	list, err = c.ListSchedules(ctx)
	require.NoError(t, err)
	require.Equal(t, next, list[0].NextFire)

	removed, err := c.RemoveSchedule(ctx, "nightly")
	require.NoError(t, err)
	require.True(t, removed)
	removed, err = c.RemoveSchedule(ctx, "nightly")
	require.NoError(t, err)
	require.False(t, removed)
}

func TestOperator(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 3, 1)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	members, err := c.Members(ctx)
	require.NoError(t, err)
	require.Len(t, members, 3)
	require.Equal(t, "alive", members[0].Status)

	peers, err := c.Peers(ctx)
	require.NoError(t, err)
	require.True(t, peers[1].Leader)

	require.NoError(t, c.RemovePeer(ctx, "node2"))
	err = c.RemovePeer(ctx, "node9")
	require.ErrorIs(t, err, ErrNotFound)
	peers, err = c.Peers(ctx)
	require.NoError(t, err)
	require.Len(t, peers, 2)

	leader, err := c.TransferLeadership(ctx, "node0")
	require.NoError(t, err)
	require.Equal(t, "node0", leader)
	_, err = c.TransferLeadership(ctx, "node7")
	require.ErrorIs(t, err, ErrNotFound)

	h, err := c.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, Health{Node: "node0", Leader: "node0", Epoch: 2, Status: "ok"}, h)
}

func TestHealthTriesNodesInOrder(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, []string{deadAddr(t), fc.Node(0).Addr()})
	h, err := c.Health(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, "node0", h.Node)

	c2 := newTestClient(t, []string{deadAddr(t)})
	_, err = c2.Health(testCtx(t))
	require.Error(t, err)
}

func TestWithLocalAddrBindsSource(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		c := newTestClient(t, addrs(fc, 0), WithLocalAddr(ip))
		_, err := c.Health(testCtx(t))
		require.NoError(t, err)
		hosts := fc.Node(0).RemoteHosts()
		require.Equal(t, ip, hosts[len(hosts)-1])
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Calls that are never retried after an uncertain failure (remove-peer,
// transfer-leadership) still move past a node that refuses the connection:
// a connection that was never made carried no request.
func TestOperatorWritesRotatePastDeadNode(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 0)
	c := newTestClient(t, []string{deadAddr(t), fc.Node(0).Addr()})
	require.NoError(t, c.RemovePeer(testCtx(t), "node1"))
	c = newTestClient(t, []string{deadAddr(t), fc.Node(0).Addr()})
	leader, err := c.TransferLeadership(testCtx(t), "node0")
	require.NoError(t, err)
	require.Equal(t, "node0", leader)
}

// A call cut off by the caller's deadline while its request was in flight:
// a submit may have been admitted, so its error says the outcome is
// unknown; a read changed nothing, so its error says the deadline only.
func TestCutOffInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, procedure string
		call            func(context.Context, *Client) error
		unknown         bool
	}{
		{"submit", cronoqv1connect.TaskServiceSubmitProcedure, func(ctx context.Context, c *Client) error {
			_, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
			return err
		}, true},
		{"list", cronoqv1connect.TaskServiceListProcedure, func(ctx context.Context, c *Client) error {
			_, _, err := c.List(ctx, ListOptions{})
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fc := newFakeCluster(t, 1, 0)
			c := newTestClient(t, addrs(fc, 0))
			release := fc.Hold(tc.procedure) // the node never answers
			t.Cleanup(release)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err := tc.call(ctx, c)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			if tc.unknown {
				require.ErrorIs(t, err, ErrOutcomeUnknown)
			} else {
				require.NotErrorIs(t, err, ErrOutcomeUnknown)
			}
			// How many attempts reached the node is not fixed: the node
			// sees the caller's deadline too, and may give the call up an
			// instant before the caller does; the SDK then sends it again
			// (both calls are repeated) until its own deadline.
		})
	}
}
