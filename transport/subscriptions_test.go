package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// The fake's subscription operations apply their mutation to its replica.
func (f *fakeBackend) Subscriptions() cluster.SubscriptionReader { return f.state }
func (f *fakeBackend) CreateSubscription(_ context.Context, spec cluster.SubscriptionSpec) (fsm.Subscription, error) {
	f.record("create-subscription")
	rec := fsm.Subscription{Name: spec.Name, Pools: spec.Pools, Statuses: spec.Statuses, Kinds: spec.Kinds,
		Webhook: spec.Webhook, Secret: spec.Secret, AckTimeout: spec.AckTimeout, MaxDeliveries: spec.MaxDeliveries}
	if err := f.applyErr(0, fsm.Mutation{PutSubscription: &rec}); err != nil {
		return rec, err
	}
	return rec, nil
}
func (f *fakeBackend) RemoveSubscription(_ context.Context, name string) (bool, error) {
	f.record("remove-subscription")
	if _, ok := f.state.Subscription(name); !ok {
		return false, nil
	}
	return true, f.applyErr(0, fsm.Mutation{DelSubscription: &fsm.DelSubscription{Name: name}})
}
func (f *fakeBackend) AckSubscription(_ context.Context, name string, cursor uint64) (uint64, error) {
	f.record("ack-subscription")
	if _, ok := f.state.Subscription(name); !ok {
		return 0, fmt.Errorf("subscription %q: %w", name, cluster.ErrNotFound)
	}
	if err := f.applyErr(0, fsm.Mutation{AckSubscription: &fsm.AckSubscription{Name: name, Cursor: cursor}}); err != nil {
		return 0, err
	}
	sub, _ := f.state.Subscription(name)
	return sub.Acked, nil
}
func (f *fakeBackend) FeedSubscription(string) (cluster.SubscriptionFeed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leading {
		return nil, f.notLeader()
	}
	if f.feeds == nil {
		return nil, fmt.Errorf("no feeds in this test")
	}
	feed := &fakeFeed{sent: make(chan [2]uint64, 64), redel: make(chan uint64, 1), done: f.term}
	f.feeds <- feed
	return feed, nil
}

// fakeFeed records the sends a reader reports; the test sends its
// redeliveries.
type fakeFeed struct {
	sent  chan [2]uint64
	redel chan uint64
	done  <-chan struct{}
}

func (f *fakeFeed) Sent(_ context.Context, after, upTo uint64) error {
	f.sent <- [2]uint64{after, upTo}
	return nil
}
func (f *fakeFeed) Redeliveries() <-chan uint64 { return f.redel }
func (f *fakeFeed) Done() <-chan struct{}       { return f.done }
func (f *fakeFeed) Close()                      {}

func subscriptionClient(t *testing.T, b *fakeBackend) (cronoqv1connect.SubscriptionServiceClient, cronoqv1connect.TaskServiceClient) {
	t.Helper()
	hc, base := startFake(t, b, nil)
	return cronoqv1connect.NewSubscriptionServiceClient(hc, base), cronoqv1connect.NewTaskServiceClient(hc, base)
}

// receive takes the next event of s within a few seconds.
func receive(t *testing.T, s *connect.ServerStreamForClient[cronoqv1.Event]) *cronoqv1.Event {
	t.Helper()
	got := make(chan bool, 1)
	go func() { got <- s.Receive() }()
	select {
	case ok := <-got:
		require.True(t, ok, "stream ended: %v", s.Err())
		return s.Msg()
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return nil
	}
}

func insertTask(id, pool string) fsm.Mutation {
	return fsm.Mutation{Insert: &fsm.Task{ID: id, Status: fsm.StatusQueued, Template: fsm.Template{Pool: pool, Kind: "k"}}}
}

// A reader gets the events held after the acked cursor, then the later
// ones as they are applied, each send reported before it goes out; a
// redelivery takes it back to the acked cursor; the removal of the
// subscription and the end of the term end it.
func TestReadSubscription(t *testing.T) {
	b := newFakeBackend()
	b.feeds = make(chan *fakeFeed, 4)
	subs, _ := subscriptionClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	created, err := subs.Create(ctx, connect.NewRequest(&cronoqv1.CreateSubscriptionRequest{
		Subscription: &cronoqv1.Subscription{Name: "s", Pools: []string{"p"}}, Secret: "",
	}))
	require.NoError(t, err)
	require.Equal(t, "s", created.Msg.GetSubscription().GetName())
	b.apply(t, 0, insertTask("a", "p"), insertTask("b", "q"), insertTask("c", "p"))

	stream, err := subs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "s"}))
	require.NoError(t, err)
	defer stream.Close()
	feed := <-b.feeds
	a, c := receive(t, stream), receive(t, stream)
	require.Equal(t, "a", a.GetTaskId())
	require.Equal(t, "c", c.GetTaskId())
	require.Equal(t, fsm.MakeCursor(b.index, 0), a.GetCursor())
	require.Equal(t, fsm.MakeCursor(b.index, 2), c.GetCursor(), "b's event has the cursor between")
	require.Equal(t, [2]uint64{0, c.GetCursor()}, <-feed.sent)

	// Later events come as they are applied.
	b.apply(t, 0, insertTask("d", "p"))
	d := receive(t, stream)
	require.Equal(t, "d", d.GetTaskId())
	require.Equal(t, [2]uint64{c.GetCursor(), d.GetCursor()}, <-feed.sent)

	// An ack, then a redelivery: the reader sends again after the acked
	// cursor.
	acked, err := subs.Ack(ctx, connect.NewRequest(&cronoqv1.AckSubscriptionRequest{Name: "s", Cursor: a.GetCursor()}))
	require.NoError(t, err)
	require.Equal(t, a.GetCursor(), acked.Msg.GetAcked())
	feed.redel <- a.GetCursor()
	require.Equal(t, "c", receive(t, stream).GetTaskId())
	require.Equal(t, "d", receive(t, stream).GetTaskId())
	require.Equal(t, [2]uint64{a.GetCursor(), d.GetCursor()}, <-feed.sent)

	// A new reader starts after the acked cursor, or after its own.
	again, err := subs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "s"}))
	require.NoError(t, err)
	require.Equal(t, "c", receive(t, again).GetTaskId())
	<-b.feeds
	again.Close()
	later, err := subs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "s", After: c.GetCursor()}))
	require.NoError(t, err)
	require.Equal(t, "d", receive(t, later).GetTaskId())
	<-b.feeds
	later.Close()

	// Acks past the end of the log and of no subscription are refused by
	// the node; a zero cursor at the edge.
	_, err = subs.Ack(ctx, connect.NewRequest(&cronoqv1.AckSubscriptionRequest{Name: "nope", Cursor: 1}))
	require.Equal(t, apierr.KindNotFound, apierr.Kind(err))
	_, err = subs.Ack(ctx, connect.NewRequest(&cronoqv1.AckSubscriptionRequest{Name: "s"}))
	require.Equal(t, apierr.KindInvalid, apierr.Kind(err))

	// Removed, the subscription ends its readers.
	removed, err := subs.Remove(ctx, connect.NewRequest(&cronoqv1.RemoveSubscriptionRequest{Name: "s"}))
	require.NoError(t, err)
	require.True(t, removed.Msg.GetRemoved())
	require.False(t, stream.Receive())
	require.Equal(t, apierr.KindNotFound, apierr.Kind(stream.Err()), "%v", stream.Err())
	_, err = subs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "s"}))
	if err == nil {
		// The error of a stream comes with its end.
		s2, _ := subs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "s"}))
		require.False(t, s2.Receive())
		err = s2.Err()
	}
	require.Equal(t, apierr.KindNotFound, apierr.Kind(err))

	// The end of the term ends a reader with the leader to read from.
	_, err = subs.Create(ctx, connect.NewRequest(&cronoqv1.CreateSubscriptionRequest{Subscription: &cronoqv1.Subscription{Name: "t"}}))
	require.NoError(t, err)
	b.apply(t, 0, insertTask("e", "p"))
	term, err := subs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "t"}))
	require.NoError(t, err)
	require.Equal(t, "e", receive(t, term).GetTaskId())
	b.mu.Lock()
	b.leading, b.leader = false, "n2"
	close(b.term)
	b.mu.Unlock()
	require.False(t, term.Receive())
	require.Equal(t, apierr.KindNotLeader, apierr.Kind(term.Err()), "%v", term.Err())
}

// A node that does not lead relays the leader's stream; a forwarded read
// is never relayed again.
func TestReadSubscriptionRelayed(t *testing.T) {
	leader := newFakeBackend()
	leader.feeds = make(chan *fakeFeed, 4)
	leaderSubs, _ := subscriptionClient(t, leader)
	follower := newFakeBackend()
	follower.leading, follower.leader, follower.leaderAddr = false, "n-leader", leader.addr
	followerSubs, _ := subscriptionClient(t, follower)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := leaderSubs.Create(ctx, connect.NewRequest(&cronoqv1.CreateSubscriptionRequest{Subscription: &cronoqv1.Subscription{Name: "s"}}))
	require.NoError(t, err)
	leader.apply(t, 0, insertTask("a", "p"))

	stream, err := followerSubs.Read(ctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "s"}))
	require.NoError(t, err)
	defer stream.Close()
	ev := receive(t, stream)
	require.Equal(t, "a", ev.GetTaskId())
	require.NotZero(t, ev.GetCursor())
	<-leader.feeds

	// The leader's end of the stream ends the relayed one, with its error.
	_, err = leaderSubs.Remove(ctx, connect.NewRequest(&cronoqv1.RemoveSubscriptionRequest{Name: "s"}))
	require.NoError(t, err)
	require.False(t, stream.Receive())
	require.Equal(t, apierr.KindNotFound, apierr.Kind(stream.Err()), "%v", stream.Err())

	// A forwarded read to a node that does not lead names the leader.
	req := connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: "s"})
	req.Header().Set(HeaderForwarded, "n3")
	fwd, err := followerSubs.Read(ctx, req)
	if err == nil {
		require.False(t, fwd.Receive())
		err = fwd.Err()
	}
	require.Equal(t, apierr.KindNotLeader, apierr.Kind(err), "%v", err)
}

// readErr is the error a read ends with at once, or nil when it streams.
func readErr(ctx context.Context, subs cronoqv1connect.SubscriptionServiceClient, name, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	s, err := subs.Read(ctx, withToken(&cronoqv1.ReadSubscriptionRequest{Name: name}, tok))
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Receive() {
		return nil
	}
	if ctx.Err() != nil {
		return nil // it was streaming: nothing more came
	}
	return s.Err()
}

// Creating or removing a subscription needs write on every pool of its
// filter, reading, acking or getting one read on them; a subscription of
// every pool needs the level on "*". Lists show what the caller reads.
func TestSubscriptionACLs(t *testing.T) {
	b := newFakeBackend()
	b.feeds = make(chan *fakeFeed, 16)
	hc, base := startFake(t, b, func(s *Server) {
		s.cfg.ACLs = true
		s.acl.enabled = true
	})
	acls := cronoqv1connect.NewAclServiceClient(hc, base)
	subs := cronoqv1connect.NewSubscriptionServiceClient(hc, base)
	ctx := context.Background()
	boot, err := acls.Bootstrap(ctx, withToken(&cronoqv1.AclBootstrapRequest{}, ""))
	require.NoError(t, err)
	root := boot.Msg.GetToken().GetSecret()
	token := func(name, rules string) string {
		_, err := acls.PolicyApply(ctx, withToken(&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: name, Rules: rules}}, root))
		require.NoError(t, err)
		tk, err := acls.TokenCreate(ctx, withToken(&cronoqv1.AclTokenCreateRequest{Name: name, Policies: []string{name}}, root))
		require.NoError(t, err)
		return tk.Msg.GetToken().GetSecret()
	}
	reader := token("etl-read", `pool "etl" { policy = "read" }`)
	writer := token("etl-write", `pool "etl" { policy = "write" }`)
	ops := token("ops", `operator = "write"`)
	create := func(tok, name string, pools ...string) error {
		_, err := subs.Create(ctx, withToken(&cronoqv1.CreateSubscriptionRequest{
			Subscription: &cronoqv1.Subscription{Name: name, Pools: pools, Webhook: "https://hooks.example/x"}, Secret: "k"}, tok))
		return err
	}

	require.NoError(t, create(writer, "etl", "etl"))
	before := b.state.Hash()
	requireDenied(t, create(writer, "every"), "no pool: write on *")
	requireDenied(t, create(writer, "two", "etl", "web"))
	requireDenied(t, create(reader, "mine", "etl"), "read is not enough")
	requireDenied(t, create(ops, "ops"), "operator write is not a pool's")
	require.Equal(t, before, b.state.Hash(), "a denied create changes nothing")
	require.NoError(t, create(root, "every"))

	b.apply(t, 0, insertTask("a", "etl"))
	ev := b.state.SubscriptionEvents("etl", 0, 0)
	require.Len(t, ev, 1)

	// The reader of etl gets, reads and acks the etl subscription only.
	got, err := subs.Get(ctx, withToken(&cronoqv1.GetSubscriptionRequest{Name: "etl"}, reader))
	require.NoError(t, err)
	require.True(t, got.Msg.GetSubscription().GetHasSecret())
	require.EqualValues(t, 1, got.Msg.GetSubscription().GetPending())
	_, err = subs.Get(ctx, withToken(&cronoqv1.GetSubscriptionRequest{Name: "every"}, reader))
	requireDenied(t, err)
	list, err := subs.List(ctx, withToken(&cronoqv1.ListSubscriptionsRequest{}, reader))
	require.NoError(t, err)
	require.Len(t, list.Msg.GetSubscriptions(), 1)
	require.Equal(t, "etl", list.Msg.GetSubscriptions()[0].GetName())
	list, err = subs.List(ctx, withToken(&cronoqv1.ListSubscriptionsRequest{}, root))
	require.NoError(t, err)
	require.Len(t, list.Msg.GetSubscriptions(), 2)
	require.NoError(t, readErr(ctx, subs, "etl", reader))
	requireDenied(t, readErr(ctx, subs, "every", reader))
	requireDenied(t, readErr(ctx, subs, "etl", ops))
	_, err = subs.Ack(ctx, withToken(&cronoqv1.AckSubscriptionRequest{Name: "every", Cursor: ev[0].Cursor}, reader))
	requireDenied(t, err)
	acked, err := subs.Ack(ctx, withToken(&cronoqv1.AckSubscriptionRequest{Name: "etl", Cursor: ev[0].Cursor}, reader))
	require.NoError(t, err)
	require.Equal(t, ev[0].Cursor, acked.Msg.GetAcked())

	// Removing needs write on its pools.
	_, err = subs.Remove(ctx, withToken(&cronoqv1.RemoveSubscriptionRequest{Name: "etl"}, reader))
	requireDenied(t, err)
	_, err = subs.Remove(ctx, withToken(&cronoqv1.RemoveSubscriptionRequest{Name: "every"}, writer))
	requireDenied(t, err)
	removed, err := subs.Remove(ctx, withToken(&cronoqv1.RemoveSubscriptionRequest{Name: "etl"}, writer))
	require.NoError(t, err)
	require.True(t, removed.Msg.GetRemoved())
}
