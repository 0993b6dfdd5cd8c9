package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
	"github.com/cronoq/cronoq/webhook"
)

// hookReceiver is the endpoint of the webhook test: it answers by a
// script of failures, checks every request's signature, and checks at
// every request that no node's durable cursor is past what it accepted
// with a 2xx.
type hookReceiver struct {
	t      *testing.T
	secret []byte
	c      *testcluster.Cluster

	mu       sync.Mutex
	n        int
	down     bool // every request fails with a 500
	badSig   []string
	early    []string
	accepted []webhook.Event // every event of a 2xx answer, in arrival order
	maxAcc   uint64
	modes    map[string]int
}

// script: 500, no answer before the client's timeout, 2xx, connection
// closed, 500, 2xx, ...
var hookScript = []string{"500", "timeout", "ok", "hangup", "500", "ok"}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	r.mu.Lock()
	if err := webhook.VerifySignature(r.secret, body, req.Header.Get(webhook.HeaderSignature)); err != nil {
		r.badSig = append(r.badSig, err.Error())
	}
	for _, n := range r.c.Live() {
		if s, ok := n.Node.Subscriptions().Subscription("hook"); ok && s.Acked > r.maxAcc {
			r.early = append(r.early, fmt.Sprintf("%s acked cursor %d, the receiver accepted up to %d", n.ID, s.Acked, r.maxAcc))
		}
	}
	mode := hookScript[r.n%len(hookScript)]
	if r.down {
		mode = "500"
	}
	r.n++
	r.modes[mode]++
	r.mu.Unlock()

	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil || p.Subscription != "hook" || req.Header.Get(webhook.HeaderSubscription) != "hook" {
		r.t.Errorf("bad request %q: %v", body, err)
		return
	}
	switch mode {
	case "500":
		http.Error(w, "try later", http.StatusInternalServerError)
	case "timeout":
		<-req.Context().Done()
	case "hangup":
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = c.Close()
		}
	default:
		r.mu.Lock()
		for _, e := range p.Events {
			r.accepted = append(r.accepted, e)
			r.maxAcc = max(r.maxAcc, e.Cursor)
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
}

func (r *hookReceiver) setDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// firstSeen returns the events accepted, each cursor once, in the order
// first accepted.
func (r *hookReceiver) firstSeen() []webhook.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[uint64]bool{}
	var out []webhook.Event
	for _, e := range r.accepted {
		if !seen[e.Cursor] {
			seen[e.Cursor] = true
			out = append(out, e)
		}
	}
	return out
}

// TestWebhookDeliveryAcrossLeaderKill: a webhook subscription against an
// endpoint that fails, times out, hangs up and answers 500s. Every
// cancelled task's event arrives, in cursor order, every signature
// verifies, no cursor is acknowledged before the endpoint accepted it, and
// nothing is lost when the leader is stopped with deliveries pending: the
// next leader continues from the durable cursor.
func TestWebhookDeliveryAcrossLeaderKill(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, 3, testcluster.Configure(func(_ int, cfg *cluster.Config) {
		cfg.Webhook = webhook.Config{Timeout: 300 * time.Millisecond, MinBackoff: 10 * time.Millisecond,
			MaxBackoff: 100 * time.Millisecond, Poll: 50 * time.Millisecond, BatchSize: 3}
	}))
	rcv := &hookReceiver{t: t, secret: []byte("s3cret"), c: c, modes: map[string]int{}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, _ := c.Leader()
	_, err := leader.Node.CreateSubscription(ctx, cluster.SubscriptionSpec{Name: "hook", Pools: []string{"p"},
		Statuses: []fsm.Status{fsm.StatusCancelled}, Webhook: srv.URL + "/cronoq", Secret: "s3cret", MaxDeliveries: 1000})
	require.NoError(t, err)

	cl := c.Client()
	var ids []string
	endTasks := func(n int) {
		t.Helper()
		for range n {
			sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
			require.NoError(t, err)
			cancelled, err := cl.Cancel(ctx, sub.ID)
			require.NoError(t, err)
			require.True(t, cancelled)
			ids = append(ids, sub.ID)
		}
	}

	// The first leader gets some events through, then the endpoint goes
	// down and the leader is stopped with the rest pending.
	endTasks(12)
	require.Eventually(t, func() bool { return len(rcv.firstSeen()) >= 3 }, 30*time.Second, 10*time.Millisecond)
	rcv.setDown(true)
	require.Eventually(t, func() bool {
		s, ok := leader.Node.Subscriptions().Subscription("hook")
		return ok && s.Acked > 0
	}, 30*time.Second, 10*time.Millisecond)
	pending := leader.Node.Subscriptions().SubscriptionPending("hook")
	require.Positive(t, pending, "events still pending when the leader stops")
	c.Stop(leader.ID)
	rcv.setDown(false)

	// The next leader delivers the rest, and what comes after.
	next, _ := c.Leader()
	require.NotEqual(t, leader.ID, next.ID)
	endTasks(9)
	require.Eventually(t, func() bool {
		s, ok := next.Node.Subscriptions().Subscription("hook")
		return ok && next.Node.Subscriptions().SubscriptionPending("hook") == 0 && s.Acked > 0 && len(rcv.firstSeen()) == len(ids)
	}, 60*time.Second, 20*time.Millisecond, "every event delivered and acknowledged")

	got := rcv.firstSeen()
	var gotIDs []string
	for i, e := range got {
		gotIDs = append(gotIDs, e.TaskID)
		require.Equal(t, "cancelled", e.Status)
		require.Equal(t, "p", e.Pool)
		require.Equal(t, "k", e.Kind)
		if i > 0 {
			require.Greater(t, e.Cursor, got[i-1].Cursor, "first deliveries in cursor order")
		}
	}
	require.Equal(t, ids, gotIDs, "every task's event, in the order the tasks ended")

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	require.Empty(t, rcv.badSig, "every signature verifies")
	require.Empty(t, rcv.early, "no cursor acknowledged before the endpoint accepted it")
	for _, m := range []string{"500", "timeout", "hangup", "ok"} {
		require.Positive(t, rcv.modes[m], "the endpoint answered %s at least once", m)
	}

	h := next.Node.Health()
	var loop *cluster.LoopStatus
	for i := range h.Loops {
		if h.Loops[i].Name == cluster.WebhookLoop("hook") {
			loop = &h.Loops[i]
		}
	}
	require.NotNil(t, loop, "health lists the webhook's loop: %+v", h.Loops)
	require.Positive(t, loop.Runs)
	require.Positive(t, loop.FailuresTotal, "the endpoint's failures were counted")
	require.False(t, loop.LastSuccess.IsZero())
	require.False(t, strings.Contains(strings.Join(h.Reasons, ";"), "subscription hook stalled"))
}

// TestWebhookStallsAndRecovers: an endpoint that keeps failing makes the
// leader degraded (the webhook's loop), and, once the first undelivered
// event went out the subscription's delivery limit within its ack
// timeouts, stalls the subscription through the log; the first delivery
// clears both.
func TestWebhookStallsAndRecovers(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, 1, testcluster.Configure(func(_ int, cfg *cluster.Config) {
		cfg.Webhook = webhook.Config{Timeout: 200 * time.Millisecond, MinBackoff: 10 * time.Millisecond,
			MaxBackoff: 50 * time.Millisecond, Poll: 50 * time.Millisecond}
	}))
	rcv := &hookReceiver{t: t, secret: []byte("k"), c: c, modes: map[string]int{}, down: true}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, _ := c.Leader()
	_, err := leader.Node.CreateSubscription(ctx, cluster.SubscriptionSpec{Name: "hook", Statuses: []fsm.Status{fsm.StatusCancelled},
		Webhook: srv.URL, Secret: "k", AckTimeout: 300 * time.Millisecond, MaxDeliveries: 3})
	require.NoError(t, err)
	cl := c.Client()
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)
	_, err = cl.Cancel(ctx, sub.ID)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		s, ok := leader.Node.Subscriptions().Subscription("hook")
		return ok && s.Stalled
	}, 30*time.Second, 10*time.Millisecond, "the subscription stalls")
	h := leader.Node.Health()
	require.Equal(t, cluster.HealthDegraded, h.Status)
	reasons := strings.Join(h.Reasons, "\n")
	require.Contains(t, reasons, "loop webhook:hook:")
	require.Contains(t, reasons, "500 Internal Server Error")
	require.Contains(t, reasons, "subscription hook stalled")
	require.Equal(t, 1, leader.Node.Subscriptions().SubscriptionPending("hook"), "the event is kept")

	rcv.setDown(false)
	require.Eventually(t, func() bool {
		s, ok := leader.Node.Subscriptions().Subscription("hook")
		return ok && !s.Stalled && leader.Node.Subscriptions().SubscriptionPending("hook") == 0
	}, 30*time.Second, 10*time.Millisecond, "delivered: the stall is cleared")
	require.Eventually(t, func() bool { return leader.Node.Health().Status == cluster.HealthOK }, 10*time.Second, 10*time.Millisecond)
	got := rcv.firstSeen()
	require.Len(t, got, 1)
	require.Equal(t, sub.ID, got[0].TaskID)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	require.Empty(t, rcv.badSig)
	require.Empty(t, rcv.early)
}

// The webhook's loop made to fail through the node's fault hook while an
// event waits: the node is degraded with a reason naming the loop and the
// error, the rounds back off (each wait longer, up to the cap), the loop's
// series count them, and once the fault ends the event is delivered and
// the node is healthy again.
func TestWebhookLoopDegradesAndRecovers(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, 0)
	rec := newLoopRecorder()
	cfg := c.Config("n1")
	cfg.BootstrapExpect = 1
	rec.install(&cfg)
	cfg.Webhook = webhook.Config{Timeout: time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Poll: 50 * time.Millisecond}
	tn := c.Start(cfg)
	n := tn.Node
	c.Leader()
	rcv := &hookReceiver{t: t, secret: []byte("k"), c: c, modes: map[string]int{}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := n.CreateSubscription(ctx, cluster.SubscriptionSpec{Name: "hook", Statuses: []fsm.Status{fsm.StatusCancelled},
		Webhook: srv.URL, Secret: "k", MaxDeliveries: 1000})
	require.NoError(t, err)

	loop := cluster.WebhookLoop("hook")
	injected := errors.New("injected failure of the webhook")
	rec.fail(loop, injected)
	cl := c.Client()
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)
	_, err = cl.Cancel(ctx, sub.ID)
	require.NoError(t, err)

	var reason string
	require.Eventually(t, func() bool {
		h := n.Health()
		if r := loopReason(h, loop); r != "" && h.Status == cluster.HealthDegraded {
			reason = r
		}
		return reason != "" && loopStatus(t, n, loop).Failures >= 5
	}, 30*time.Second, 5*time.Millisecond)
	require.Contains(t, reason, injected.Error())
	require.Regexp(t, `^loop webhook:hook: \d+ consecutive failures \(backing off [0-9.]+m?s\): `, reason)
	series := loopSeries(t, tn.Metrics.Registry(), loop)
	require.GreaterOrEqual(t, series["cronoq_loop_failures_total"], 5.0)
	require.Equal(t, 1.0, series["cronoq_loop_degraded"])
	require.Empty(t, rcv.firstSeen(), "nothing was sent while failing")

	rec.heal(loop)
	require.Eventually(t, func() bool {
		st := loopStatus(t, n, loop)
		return st.Failures == 0 && !st.LastSuccess.IsZero() && len(rcv.firstSeen()) == 1 && n.Health().Status == cluster.HealthOK
	}, 30*time.Second, 5*time.Millisecond, "the loop did not recover: %+v %v", loopStatus(t, n, loop), n.Health().Reasons)
	require.Equal(t, sub.ID, rcv.firstSeen()[0].TaskID)
	require.Zero(t, loopSeries(t, tn.Metrics.Registry(), loop)["cronoq_loop_degraded"])
	requireBackoffGrows(t, rec.failures(loop, injected), cfg.Webhook.MinBackoff, cfg.Webhook.MaxBackoff)
}
