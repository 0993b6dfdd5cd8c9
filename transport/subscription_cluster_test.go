package transport_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
)

// received is what a consumer got, in order.
type received struct {
	mu     sync.Mutex
	events []*cronoqv1.Event
}

func (r *received) add(ev *cronoqv1.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *received) tasks() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, ev := range r.events {
		out[ev.GetTaskId()] = true
	}
	return out
}

// consume reads subscription name through the node at addr with a plain
// client (no SDK): it acks each event once received (retrying the ack
// until it takes), and reads again after the last event received when the
// stream ends, until ctx ends.
func consume(ctx context.Context, t *testing.T, addr, name string, got *received) {
	subs := cronoqv1connect.NewSubscriptionServiceClient(h2c(t), "http://"+addr)
	var after uint64
	for ctx.Err() == nil {
		stream, err := subs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: name, After: after}))
		if err == nil {
			for stream.Receive() {
				ev := stream.Msg()
				got.add(ev)
				after = ev.GetCursor()
				for ctx.Err() == nil {
					actx, cancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := subs.Ack(actx, connect.NewRequest(&cronoqv1.AckSubscriptionRequest{Name: name, Cursor: ev.GetCursor()}))
					cancel()
					if err == nil {
						break
					}
					t.Logf("ack of %d: %v (again)", ev.GetCursor(), err)
					time.Sleep(50 * time.Millisecond)
				}
			}
			t.Logf("read of %s through %s ended: %v", name, addr, stream.Err())
			_ = stream.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkInOrder holds the events received to log order: an event later in
// the log than every one before it skips none that comes at all (what
// comes again after a redelivery or a new read starts again in order).
func checkInOrder(t *testing.T, evs []*cronoqv1.Event) {
	t.Helper()
	seen := map[uint64]int{} // cursor -> first position
	for i, ev := range evs {
		if _, ok := seen[ev.GetCursor()]; !ok {
			seen[ev.GetCursor()] = i
		}
	}
	var maxBefore uint64
	for i, ev := range evs {
		c := ev.GetCursor()
		if c > maxBefore {
			for other, first := range seen {
				if other > maxBefore && other < c && first > i {
					t.Fatalf("event %d came at %d, after %d at %d: out of log order", other, first, c, i)
				}
			}
			maxBefore = c
		}
	}
}

// A subscription created, then tasks submitted while a consumer reads and
// acks through a follower: every matching event arrives at least once, in
// log order, across the kill of the leader in the middle of the stream;
// nothing else arrives, and once all is acked nothing stays pending.
func TestSubscriptionAcrossLeaderKill(t *testing.T) {
	c := newTestCluster(t, 3, 3, 10*time.Second)
	leader, followers := c.Leader()
	admin := c.Client()
	ctx := ctxT(t, 3*time.Minute)

	sub, err := admin.CreateSubscription(ctx, client.SubscriptionSpec{
		Name: "ends", Pools: []string{"sub"}, Statuses: []string{client.StatusSucceeded, client.StatusCancelled},
		AckTimeout: 2 * time.Second, MaxDeliveries: 1000,
	})
	require.NoError(t, err)
	require.Equal(t, "ends", sub.Name)
	require.Equal(t, 2*time.Second, sub.AckTimeout)
	require.NotZero(t, sub.CreateIndex, "as recorded")
	require.False(t, sub.CreatedAt.IsZero())
	runWorker(t, c.Client(followers[1]), "sub", map[string]client.Handler{"echo": client.HandlerFunc(echo)})

	// The consumer reads through the follower that stays up.
	reader := followers[0]
	got := &received{}
	cctx, stopConsumer := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	consumers.Add(1)
	go func() {
		defer consumers.Done()
		consume(cctx, t, reader.Addr(), "ends", got)
	}()
	defer func() {
		stopConsumer()
		consumers.Wait()
	}()

	var (
		mu   sync.Mutex
		want []string // tasks whose end the subscription takes
	)
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			pool, kind := "sub", "echo"
			if i%5 == 4 {
				pool = "other" // not taken
			}
			res, err := admin.Submit(sctx, client.TaskSpec{Template: client.Template{Pool: pool, Kind: kind, Payload: []byte(fmt.Sprint(i))}})
			require.NoError(t, err)
			if pool == "sub" && i%3 == 0 {
				// Cancelled before it runs, or after: either end is taken.
				if _, err := admin.Cancel(sctx, res.ID); err != nil && !errors.Is(err, client.ErrNotFound) {
					require.NoError(t, err)
				}
			}
			if pool == "sub" {
				mu.Lock()
				want = append(want, res.ID)
				mu.Unlock()
			}
			cancel()
		}
	}
	produce(0, 20)
	require.Eventually(t, func() bool { return len(got.tasks()) >= 8 }, 60*time.Second, 20*time.Millisecond,
		"the consumer got %d tasks", len(got.tasks()))

	// Kill the leader in the middle of the stream, and go on.
	c.Stop(leader.ID)
	var producing sync.WaitGroup
	producing.Add(1)
	go func() {
		defer producing.Done()
		produce(20, 40)
	}()
	producing.Wait()
	newLeader, _ := c.Leader()
	t.Logf("leader %s killed, %s leads", leader.ID, newLeader.ID)

	// Every task of pool sub ended; the consumer got each end.
	for _, id := range want {
		task, err := admin.Wait(ctx, id)
		require.NoError(t, err)
		require.Contains(t, []string{client.StatusSucceeded, client.StatusCancelled}, task.Status)
	}
	require.Eventually(t, func() bool {
		have := got.tasks()
		for _, id := range want {
			if !have[id] {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "not every end arrived")
	have := got.tasks()
	require.Len(t, have, len(want), "only the tasks of pool sub")
	got.mu.Lock()
	evs := append([]*cronoqv1.Event(nil), got.events...)
	got.mu.Unlock()
	for _, ev := range evs {
		require.Equal(t, "sub", ev.GetPool())
		require.Contains(t, []cronoqv1.Status{cronoqv1.Status_STATUS_SUCCEEDED, cronoqv1.Status_STATUS_CANCELLED}, ev.GetStatus())
	}
	checkInOrder(t, evs)

	// All acked: nothing stays pending, on any node.
	require.Eventually(t, func() bool {
		s, err := admin.GetSubscription(ctx, "ends")
		return err == nil && s.Pending == 0 && !s.Stalled
	}, 60*time.Second, 20*time.Millisecond)
	c.Converged()
	for _, n := range c.Live() {
		require.Zero(t, n.Node.Subscriptions().SubscriptionPending("ends"), n.ID)
	}
	list, err := admin.ListSubscriptions(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	removed, err := admin.RemoveSubscription(ctx, "ends")
	require.NoError(t, err)
	require.True(t, removed)
}

// A consumer that never acks: the events go out again after the ack
// timeout, then the subscription stalls, health says so naming it on
// every node, and its events are kept; an ack (through the SDK) clears
// the stall. The SDK's reader gets the events with their cursors.
func TestSubscriptionStallAndHealth(t *testing.T) {
	c := newTestCluster(t, 3, 3, 5*time.Second)
	_, followers := c.Leader()
	cl := c.Client()
	ctx := ctxT(t, 2*time.Minute)

	_, err := cl.CreateSubscription(ctx, client.SubscriptionSpec{Name: "slow", AckTimeout: 300 * time.Millisecond, MaxDeliveries: 2})
	require.NoError(t, err)
	again, err := cl.CreateSubscription(ctx, client.SubscriptionSpec{Name: "slow", AckTimeout: 300 * time.Millisecond, MaxDeliveries: 2})
	require.NoError(t, err, "the same settings again")
	require.Equal(t, "slow", again.Name)
	_, err = cl.CreateSubscription(ctx, client.SubscriptionSpec{Name: "slow", MaxDeliveries: 3})
	require.ErrorIs(t, err, client.ErrInvalid)

	res, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "stall", Kind: "k"}})
	require.NoError(t, err)

	rctx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	events, err := c.Client(followers[0]).ReadSubscription(rctx, "slow", 0)
	require.NoError(t, err)
	var first client.Event
	select {
	case first = <-events:
	case <-time.After(30 * time.Second):
		t.Fatal("no event")
	}
	require.NoError(t, first.Err)
	require.Equal(t, res.ID, first.TaskID)
	require.Equal(t, client.StatusQueued, first.Status)
	require.NotZero(t, first.Cursor)

	// Sent again after the timeout, then stalled.
	select {
	case ev := <-events:
		require.Equal(t, first.Cursor, ev.Cursor, "the same event again")
	case <-time.After(30 * time.Second):
		t.Fatal("no redelivery")
	}
	var health client.Health
	for _, n := range c.Live() {
		hc := c.Client(n)
		require.Eventually(t, func() bool {
			health, err = hc.Health(ctx)
			return err == nil && health.Status == "degraded" && strings.Contains(strings.Join(health.Reasons, "\n"), "subscription slow stalled")
		}, 30*time.Second, 20*time.Millisecond, "health of %s: %+v", n.ID, health)
	}
	s, err := cl.GetSubscription(ctx, "slow")
	require.NoError(t, err)
	require.True(t, s.Stalled)
	require.NotEmpty(t, s.StallReason)
	require.Equal(t, 1, s.Pending, "its events are kept")

	acked, err := cl.Ack(ctx, "slow", first.Cursor)
	require.NoError(t, err)
	require.Equal(t, first.Cursor, acked)
	acked, err = cl.Ack(ctx, "slow", first.Cursor-1)
	require.NoError(t, err)
	require.Equal(t, first.Cursor, acked, "an older cursor changes nothing")
	s, err = cl.GetSubscription(ctx, "slow")
	require.NoError(t, err)
	require.False(t, s.Stalled)
	require.Zero(t, s.Pending)
	require.Eventually(t, func() bool {
		health, err = cl.Health(ctx)
		return err == nil && health.Status == "ok"
	}, 30*time.Second, 20*time.Millisecond, "%+v", health)

	// A cursor past the end of the log is refused.
	_, err = cl.Ack(ctx, "slow", first.Cursor<<8)
	require.ErrorIs(t, err, client.ErrInvalid)

	// Removed, the subscription ends its reader with an error.
	_, err = cl.RemoveSubscription(ctx, "slow")
	require.NoError(t, err)
	var last client.Event
	require.Eventually(t, func() bool {
		select {
		case ev, ok := <-events:
			if !ok {
				return true
			}
			last = ev
			return ev.Err != nil
		default:
			return false
		}
	}, 30*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, last.Err, client.ErrNotFound)
	c.Converged()
	names := []string{}
	for _, n := range c.Live() {
		for _, sub := range n.Node.Subscriptions().Subscriptions() {
			names = append(names, sub.Name)
		}
	}
	sort.Strings(names)
	require.Empty(t, names)
}
