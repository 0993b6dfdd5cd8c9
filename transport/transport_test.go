package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/transport"
)

// h2c returns an HTTP client speaking unencrypted HTTP/2 only.
func h2c(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func taskClient(t *testing.T, n *testNode) cronoqv1connect.TaskServiceClient {
	return cronoqv1connect.NewTaskServiceClient(h2c(t), "http://"+n.Addr())
}

// httpGet fetches path from node n over HTTP/1.1.
func httpGet(t *testing.T, n *testNode, path string) (int, string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + n.Addr() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// echo is a handler that answers with "done:" + payload.
func echo(_ context.Context, job *client.Job) ([]byte, error) {
	return append([]byte("done:"), job.Task.Payload...), nil
}

// runWorker runs a worker of pool with handlers until the test ends.
func runWorker(t *testing.T, cl *client.Client, pool string, handlers map[string]client.Handler) {
	t.Helper()
	w, err := cl.NewWorker(client.WorkerConfig{Pool: pool, Handlers: handlers, Concurrency: 4})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Error("worker did not stop")
		}
	})
}

func TestCluster(t *testing.T) {
	c := newTestCluster(t, 3, 3, 2*time.Second)
	leader, followers := c.Leader()
	f1, f2 := followers[0], followers[1]

	// A worker that knows only a follower's address: the follower answers
	// not_leader with the leader's address and the worker connects there.
	workerClient := c.Client(f1)
	aborted := make(chan error, 1)
	started := make(chan string, 1)
	runWorker(t, workerClient, "p", map[string]client.Handler{
		"echo": client.HandlerFunc(echo),
		"big": client.HandlerFunc(func(context.Context, *client.Job) ([]byte, error) {
			return bytes.Repeat([]byte("x"), testMaxOutput+1), nil
		}),
		"block": client.HandlerFunc(func(ctx context.Context, job *client.Job) ([]byte, error) {
			started <- job.Task.ID
			<-ctx.Done()
			aborted <- context.Cause(ctx)
			return nil, ctx.Err()
		}),
	})

	t.Run("submit via follower, wait from another node", func(t *testing.T) {
		sub := c.Client(f1)
		sub2 := c.Client(f2)
		res, err := sub.Submit(ctxT(t, 20*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "echo", Payload: []byte("hi")}, Key: "k1"})
		require.NoError(t, err)
		require.Len(t, res.ID, 26)
		require.False(t, res.Duplicate)

		task, err := sub2.Wait(ctxT(t, 20*time.Second), res.ID)
		require.NoError(t, err)
		require.Equal(t, client.StatusSucceeded, task.Status)
		require.Equal(t, "done:hi", string(task.Output))
		require.Equal(t, "k1", task.Key)
		require.Equal(t, client.PriorityNormal, task.Priority)
		require.Equal(t, 1, task.Attempt)

		// Same key, same task.
		again, err := sub2.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "echo"}, Key: "k1"})
		require.NoError(t, err)
		require.Equal(t, res.ID, again.ID)
		require.True(t, again.Duplicate)

		byKey, err := sub.WaitKey(ctxT(t, 10*time.Second), "k1")
		require.NoError(t, err)
		require.Equal(t, res.ID, byKey.ID)
	})

	t.Run("priorities survive the round trip", func(t *testing.T) {
		cl := c.Client(f2)
		for _, prio := range []string{client.PriorityHigh, client.PriorityNormal, client.PriorityLow, ""} {
			res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "prio", Kind: "k", Priority: prio}})
			require.NoError(t, err)
			task, err := cl.Get(ctxT(t, 10*time.Second), res.ID)
			require.NoError(t, err)
			want := prio
			if want == "" {
				want = client.PriorityNormal
			}
			require.Equal(t, want, task.Priority)
			require.Equal(t, client.StatusQueued, task.Status)
		}
	})

	t.Run("wait times out with the task as it is", func(t *testing.T) {
		tc := taskClient(t, f1)
		cl := c.Client(f1)
		res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "nobody", Kind: "k"}})
		require.NoError(t, err)
		start := time.Now()
		resp, err := tc.Wait(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.WaitRequest{
			Ref: &cronoqv1.TaskRef{Id: res.ID}, Timeout: durationpb.New(300 * time.Millisecond),
		}))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
		require.Equal(t, res.ID, resp.Msg.GetTask().GetId())
		require.Equal(t, cronoqv1.Status_STATUS_QUEUED, resp.Msg.GetTask().GetStatus())

		// The SDK's Wait ends with ctx while the task does not.
		_, err = cl.Wait(ctxT(t, 500*time.Millisecond), res.ID)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("stale and consistent reads", func(t *testing.T) {
		cl := c.Client(f2)
		res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "reads", Kind: "k"}})
		require.NoError(t, err)

		// Consistent read through a follower: served by the leader.
		tc := taskClient(t, f2)
		resp, err := tc.Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: res.ID}}))
		require.NoError(t, err)
		require.Equal(t, res.ID, resp.Msg.GetTask().GetId())
		require.False(t, resp.Msg.GetMeta().GetStale())
		require.Equal(t, leader.ID, resp.Msg.GetMeta().GetNode())

		// Stale read: served by the follower itself from its replica, which
		// catches up shortly.
		var task *client.Task
		var meta client.ReadMeta
		require.Eventually(t, func() bool {
			task, meta, err = cl.GetStale(ctxT(t, 5*time.Second), res.ID)
			return err == nil
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, res.ID, task.ID)
		require.True(t, meta.Stale)
		require.Equal(t, f2.ID, meta.Node)
		require.True(t, meta.KnownLeader)
		require.NotZero(t, meta.AppliedIndex)

		// A stale list on a follower and a consistent one agree once caught up.
		require.Eventually(t, func() bool {
			stale, _, err := cl.List(ctxT(t, 5*time.Second), client.ListOptions{Pools: []string{"reads"}, Stale: true})
			return err == nil && len(stale) == 1
		}, 10*time.Second, 10*time.Millisecond)
		tasks, next, err := cl.List(ctxT(t, 5*time.Second), client.ListOptions{Pools: []string{"reads"}})
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		require.Empty(t, next)

		counts, err := cl.Counts(ctxT(t, 5*time.Second))
		require.NoError(t, err)
		require.Equal(t, int64(1), counts["reads"]["queued"])
	})

	t.Run("list pages", func(t *testing.T) {
		cl := c.Client(f1)
		var ids []string
		for i := range 5 {
			res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "pages", Kind: "k", Payload: []byte{byte(i)}}})
			require.NoError(t, err)
			ids = append(ids, res.ID)
		}
		var got []string
		after := ""
		for {
			tasks, next, err := cl.List(ctxT(t, 5*time.Second), client.ListOptions{Pools: []string{"pages"}, Limit: 2, After: after})
			require.NoError(t, err)
			for _, task := range tasks {
				got = append(got, task.ID)
			}
			if next == "" {
				break
			}
			after = next
		}
		require.Equal(t, ids, got)
		_, _, err := cl.List(ctxT(t, 5*time.Second), client.ListOptions{Statuses: []string{"queued"}, Limit: 1})
		require.NoError(t, err)
	})

	t.Run("errors keep their kind through forwarding", func(t *testing.T) {
		cl := c.Client(f1)
		ctx := ctxT(t, 20*time.Second)

		_, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p"}})
		var ie *client.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "kind", ie.Field)

		_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Kind: "k"}})
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "pool", ie.Field)

		_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k", Payload: make([]byte, testMaxPayload+1)}})
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "payload", ie.Field)

		_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}, Deadline: time.Now().Add(-time.Hour)})
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "deadline", ie.Field)

		_, err = cl.SubmitBatch(ctx, []client.TaskSpec{{Template: client.Template{Pool: "p", Kind: "k"}}, {Template: client.Template{Pool: "p"}}})
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "specs[1].kind", ie.Field)

		// Enum values the SDK would not send are refused at the edge.
		tc := taskClient(t, f1)
		_, err = tc.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", Priority: 9}}}))
		require.Equal(t, apierr.KindInvalid, apierr.Kind(err))
		f, _ := apierr.Field(err)
		require.Equal(t, "priority", f)
		_, err = tc.List(ctx, connect.NewRequest(&cronoqv1.ListRequest{Statuses: []cronoqv1.Status{42}}))
		f, _ = apierr.Field(err)
		require.Equal(t, "statuses", f)

		_, err = cl.Get(ctx, "01J00000000000000000000000")
		require.ErrorIs(t, err, client.ErrNotFound)
		_, err = cl.Cancel(ctx, "01J00000000000000000000000")
		require.ErrorIs(t, err, client.ErrNotFound)
		_, err = cl.PauseSchedule(ctx, "no-such-schedule", true)
		require.ErrorIs(t, err, client.ErrNotFound)

		_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: tinyPool, Kind: "k"}})
		require.NoError(t, err)
		_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: tinyPool, Kind: "k"}})
		require.ErrorIs(t, err, client.ErrOverloaded)

		subs, errs, err := cl.EnqueueMany(ctx, []client.TaskSpec{
			{Template: client.Template{Pool: "p", Kind: "k"}}, {Template: client.Template{Pool: "p"}}, {Template: client.Template{Pool: tinyPool, Kind: "k"}},
		})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		require.NotEmpty(t, subs[0].ID)
		require.ErrorAs(t, errs[1], &ie)
		require.Equal(t, "kind", ie.Field)
		require.ErrorIs(t, errs[2], client.ErrOverloaded)
	})

	t.Run("a forwarded request is never forwarded again", func(t *testing.T) {
		tc := taskClient(t, f1)
		req := connect.NewRequest(&cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}}})
		req.Header().Set(transport.HeaderForwarded, "elsewhere")
		_, err := tc.Submit(ctxT(t, 10*time.Second), req)
		require.Equal(t, apierr.KindNotLeader, apierr.Kind(err))
		id, addr := apierr.Leader(err)
		require.Equal(t, leader.ID, id)
		require.Equal(t, leader.Addr(), addr)
	})

	t.Run("a forwarded answer names the leader", func(t *testing.T) {
		req := connect.NewRequest(&cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}}})
		resp, err := taskClient(t, f1).Submit(ctxT(t, 10*time.Second), req)
		require.NoError(t, err)
		require.Equal(t, leader.ID, resp.Header().Get(apierr.HeaderLeader))
		require.Equal(t, leader.Addr(), resp.Header().Get(apierr.HeaderLeaderAddr))

		get, err := taskClient(t, f2).Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetRequest{
			Ref: &cronoqv1.TaskRef{Id: resp.Msg.GetResult().GetId()},
		}))
		require.NoError(t, err)
		require.Equal(t, leader.Addr(), get.Header().Get(apierr.HeaderLeaderAddr))

		// The leader's own answers need no hint.
		resp, err = taskClient(t, leader).Submit(ctxT(t, 10*time.Second), req)
		require.NoError(t, err)
		require.Empty(t, resp.Header().Get(apierr.HeaderLeaderAddr))
	})

	t.Run("worker stream on a follower is relayed to the leader", func(t *testing.T) {
		wc := cronoqv1connect.NewWorkerServiceClient(h2c(t), "http://"+f2.Addr())
		stream := wc.Connect(ctxT(t, 10*time.Second))
		require.NoError(t, stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "p"}}}))
		msg, err := stream.Receive()
		require.NoError(t, err)
		require.Equal(t, leader.ID, msg.GetWelcome().GetNode(), "the leader welcomes the worker")
		require.Equal(t, leader.Addr(), stream.ResponseHeader().Get(apierr.HeaderLeaderAddr), "the relaying node names the leader")
		require.NoError(t, stream.CloseRequest())
		_, err = stream.Receive()
		require.ErrorIs(t, err, io.EOF, "the worker closing its side ends the stream cleanly")
		_ = stream.CloseResponse()
	})

	t.Run("a forwarded worker stream is never relayed again", func(t *testing.T) {
		wc := cronoqv1connect.NewWorkerServiceClient(h2c(t), "http://"+f2.Addr())
		stream := wc.Connect(ctxT(t, 10*time.Second))
		stream.RequestHeader().Set(transport.HeaderForwarded, "elsewhere")
		// The follower may answer before the hello is sent: Send then
		// reports io.EOF and Receive has the answer.
		if err := stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "p"}}}); err != nil {
			require.ErrorIs(t, err, io.EOF)
		}
		_, err := stream.Receive()
		require.Equal(t, apierr.KindNotLeader, apierr.Kind(err))
		id, addr := apierr.Leader(err)
		require.Equal(t, leader.ID, id)
		require.Equal(t, leader.Addr(), addr)
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})

	t.Run("worker stream protocol on the leader", func(t *testing.T) {
		wc := cronoqv1connect.NewWorkerServiceClient(h2c(t), "http://"+leader.Addr())
		ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
		defer cancel()
		stream := wc.Connect(ctx)
		defer func() {
			_ = stream.CloseRequest()
			_ = stream.CloseResponse()
		}()
		send := func(m *cronoqv1.WorkerMessage) { require.NoError(t, stream.Send(m)) }
		send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "raw", Pool: "raw"}}})
		msg, err := stream.Receive()
		require.NoError(t, err)
		require.Equal(t, leader.ID, msg.GetWelcome().GetNode())
		require.Equal(t, testWindow, msg.GetWelcome().GetHeartbeatWindow().AsDuration())
		require.NotZero(t, msg.GetWelcome().GetEpoch())

		cl := c.Client(f1)
		res, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "raw", Kind: "k", Payload: []byte("pl")}})
		require.NoError(t, err)
		send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 1}}})
		msg, err = stream.Receive()
		require.NoError(t, err)
		grants := msg.GetGrants().GetGrants()
		require.Len(t, grants, 1)
		g := grants[0]
		require.Equal(t, res.ID, g.GetTask().GetId())
		require.Equal(t, []byte("pl"), g.GetTask().GetTemplate().GetPayload())
		require.Equal(t, cronoqv1.Status_STATUS_RUNNING, g.GetTask().GetStatus())
		require.Equal(t, uint32(1), g.GetAttempt())

		send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: []uint64{g.GetLease(), 12345}}}})
		msg, err = stream.Receive()
		require.NoError(t, err)
		hb := msg.GetHeartbeatAck().GetResults()
		require.Len(t, hb, 2)
		require.Empty(t, hb[0].GetCode())
		require.Equal(t, apierr.KindStaleLease, hb[1].GetCode())

		send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: []*cronoqv1.Completion{
			{Lease: g.GetLease(), Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte("out")},
			{Lease: 999, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS},
		}}}})
		msg, err = stream.Receive()
		require.NoError(t, err)
		ca := msg.GetCompleteAck().GetResults()
		require.Len(t, ca, 2)
		require.Empty(t, ca[0].GetCode(), ca[0].GetError())
		require.Equal(t, apierr.KindStaleLease, ca[1].GetCode())

		task, err := cl.Wait(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, client.StatusSucceeded, task.Status)
		require.Equal(t, "out", string(task.Output))

		// Closing our side ends the stream cleanly.
		require.NoError(t, stream.CloseRequest())
		_, err = stream.Receive()
		require.ErrorIs(t, err, io.EOF)
	})

	t.Run("output over the limit fails the attempt", func(t *testing.T) {
		cl := c.Client(f2)
		res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "big"}})
		require.NoError(t, err)
		task, err := cl.Wait(ctxT(t, 20*time.Second), res.ID)
		require.NoError(t, err)
		require.Equal(t, client.StatusFailed, task.Status)
		require.Contains(t, task.Error, "exceeds the limit")
		require.Empty(t, task.Output)
	})

	t.Run("cancel aborts the running attempt on its worker", func(t *testing.T) {
		cl := c.Client(f2)
		res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "block"}})
		require.NoError(t, err)
		select {
		case id := <-started:
			require.Equal(t, res.ID, id)
		case <-time.After(20 * time.Second):
			t.Fatal("task did not start")
		}
		cancelled, err := cl.Cancel(ctxT(t, 10*time.Second), res.ID)
		require.NoError(t, err)
		require.True(t, cancelled)
		select {
		case cause := <-aborted:
			require.ErrorContains(t, cause, "aborted")
		case <-time.After(10 * time.Second):
			t.Fatal("the worker was not told to abort")
		}
		task, err := cl.Get(ctxT(t, 10*time.Second), res.ID)
		require.NoError(t, err)
		require.Equal(t, client.StatusCancelled, task.Status)
	})

	t.Run("events stream through a follower address", func(t *testing.T) {
		cl := c.Client(f1)
		ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
		defer cancel()
		events, err := cl.Events(ctx, "ev")
		require.NoError(t, err)
		evWorker := c.Client(f2)
		runWorker(t, evWorker, "ev", map[string]client.Handler{"echo": client.HandlerFunc(echo)})

		// The subscription is live once the leader serves it; submit until
		// the events of one task arrive (earlier submits may precede it).
		var id string
		seen := map[string][]string{}
		deadline := time.After(25 * time.Second)
		submit := time.NewTicker(500 * time.Millisecond)
		defer submit.Stop()
		for id == "" || !containsAll(seen[id], "queued", "running", "succeeded") {
			select {
			case ev, ok := <-events:
				require.True(t, ok)
				require.NoError(t, ev.Err)
				if ev.Lagged {
					continue
				}
				require.Equal(t, "ev", ev.Pool)
				seen[ev.TaskID] = append(seen[ev.TaskID], ev.Status)
				if id == "" && ev.Status == "queued" {
					id = ev.TaskID
				}
			case <-submit.C:
				if id == "" {
					_, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "ev", Kind: "echo"}})
					require.NoError(t, err)
					_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "other", Kind: "echo"}})
					require.NoError(t, err)
				}
			case <-deadline:
				t.Fatalf("events seen: %v", seen)
			}
		}
		require.Equal(t, []string{"queued", "running", "succeeded"}, seen[id])
	})

	t.Run("schedules via followers", func(t *testing.T) {
		cl := c.Client(f1)
		ctx := ctxT(t, 20*time.Second)
		next, err := cl.AddSchedule(ctx, client.Schedule{
			Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Paris",
			Task: client.Template{Pool: "sched", Kind: "k", Priority: client.PriorityLow},
		})
		require.NoError(t, err)
		require.True(t, next.After(time.Now()))

		_, err = cl.AddSchedule(ctx, client.Schedule{Name: "bad", Cron: "nope", Task: client.Template{Pool: "sched", Kind: "k"}})
		var ie *client.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "cron", ie.Field)

		list, err := c.Client(f2).ListSchedules(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		s := list[0]
		require.Equal(t, "nightly", s.Name)
		require.Equal(t, "Europe/Paris", s.TZ)
		require.Equal(t, client.PriorityLow, s.Task.Priority)
		require.Equal(t, next, s.NextFire)

		paused, err := cl.PauseSchedule(ctx, "nightly", true)
		require.NoError(t, err)
		require.True(t, paused)
		list, err = cl.ListSchedules(ctx)
		require.NoError(t, err)
		require.True(t, list[0].Paused)
		require.True(t, list[0].NextFire.IsZero())

		removed, err := cl.RemoveSchedule(ctx, "nightly")
		require.NoError(t, err)
		require.True(t, removed)
		removed, err = cl.RemoveSchedule(ctx, "nightly")
		require.NoError(t, err)
		require.False(t, removed)
	})

	t.Run("operator calls", func(t *testing.T) {
		cl := c.Client(f2)
		ctx := ctxT(t, 20*time.Second)
		members, err := cl.Members(ctx)
		require.NoError(t, err)
		require.Len(t, members, 3)
		for _, m := range members {
			require.Equal(t, "alive", m.Status)
			require.NotEmpty(t, m.HTTPAddr)
		}
		peers, err := cl.Peers(ctx)
		require.NoError(t, err)
		require.Len(t, peers, 3)
		leaders := 0
		for _, p := range peers {
			require.True(t, p.Voter)
			if p.Leader {
				leaders++
				require.Equal(t, leader.ID, p.ID)
			}
		}
		require.Equal(t, 1, leaders)

		h, err := cl.Health(ctx)
		require.NoError(t, err)
		require.Equal(t, f2.ID, h.Node)
		require.Equal(t, leader.ID, h.Leader)
		require.NotZero(t, h.Epoch)

		err = cl.RemovePeer(ctx, "nobody")
		require.ErrorIs(t, err, client.ErrNotFound)
		_, err = cl.TransferLeadership(ctx, "nobody")
		require.ErrorIs(t, err, client.ErrNotFound)
	})

	t.Run("workflows", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		wf1 := workflowClient(t, f1)
		wf2 := workflowClient(t, f2)
		w := connectRaw(ctx, t, leader, "wf-raw", "wf")
		step := func(name string, deps ...string) *cronoqv1.WorkflowStep {
			return &cronoqv1.WorkflowStep{Name: name, Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "wf", Kind: name}}, DependsOn: deps}
		}
		done := func(g *cronoqv1.Grant, children []*cronoqv1.WorkflowStep, then *cronoqv1.WorkflowStep) {
			t.Helper()
			res := w.complete(&cronoqv1.Completion{Lease: g.GetLease(), Output: []byte("out-" + g.GetTask().GetStep()), Children: children, Then: then})
			require.Empty(t, res[0].GetCode(), res[0].GetError())
		}

		// A diamond, submitted through a follower.
		sub, err := wf1.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
			Name: "diamond", Key: "diamond-1",
			Steps: []*cronoqv1.WorkflowStep{step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")},
		}}))
		require.NoError(t, err)
		wfID := sub.Msg.GetId()
		require.NotEmpty(t, wfID)
		ids := map[string]string{}
		for _, st := range sub.Msg.GetTasks() {
			ids[st.GetStep()] = st.GetId()
		}
		require.Len(t, ids, 4)
		again, err := wf2.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
			Name: "diamond", Key: "diamond-1", Steps: []*cronoqv1.WorkflowStep{step("a")},
		}}))
		require.NoError(t, err)
		require.True(t, again.Msg.GetDuplicate())
		require.Equal(t, wfID, again.Msg.GetId())

		// b and c wait for a; d for both.
		get, err := wf2.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: wfID}}))
		require.NoError(t, err)
		require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING, get.Msg.GetWorkflow().GetStatus())
		for _, m := range get.Msg.GetWorkflow().GetTasks() {
			want := cronoqv1.Status_STATUS_BLOCKED
			if m.GetStep() == "a" {
				want = cronoqv1.Status_STATUS_QUEUED
			}
			require.Equal(t, want, m.GetStatus(), m.GetStep())
			require.Equal(t, wfID, m.GetWorkflow())
		}

		g := w.grants(1)[0]
		require.Equal(t, ids["a"], g.GetTask().GetId())
		require.Empty(t, g.GetDependencies())
		done(g, nil, nil)
		bc := w.grants(2)
		got := []string{bc[0].GetTask().GetStep(), bc[1].GetTask().GetStep()}
		require.ElementsMatch(t, []string{"b", "c"}, got)
		for _, g := range bc {
			deps := g.GetDependencies()
			require.Len(t, deps, 1)
			require.Equal(t, ids["a"], deps[0].GetId())
			require.Equal(t, "out-a", string(deps[0].GetOutput()))
			done(g, nil, nil)
		}

		// The continuation sees both ends, in its dependency order, and
		// fans out: two children and a continuation of its own.
		g = w.grants(1)[0]
		require.Equal(t, ids["d"], g.GetTask().GetId())
		deps := g.GetDependencies()
		require.Len(t, deps, 2)
		for i, name := range []string{"b", "c"} {
			require.Equal(t, ids[name], deps[i].GetId())
			require.Equal(t, name, deps[i].GetStep())
			require.Equal(t, cronoqv1.Status_STATUS_SUCCEEDED, deps[i].GetStatus())
			require.Equal(t, "out-"+name, string(deps[i].GetOutput()))
			require.False(t, deps[i].GetOutputOmitted())
		}
		done(g, []*cronoqv1.WorkflowStep{step("x1"), step("x2", "x1")}, step("sum"))
		for _, name := range []string{"x1", "x2"} {
			g = w.grants(1)[0]
			require.Equal(t, name, g.GetTask().GetStep())
			require.Equal(t, ids["d"], g.GetTask().GetParent())
			require.Equal(t, wfID, g.GetTask().GetWorkflow())
			done(g, nil, nil)
		}
		g = w.grants(1)[0]
		require.Equal(t, "sum", g.GetTask().GetStep())
		var depSteps []string
		for _, d := range g.GetDependencies() {
			depSteps = append(depSteps, d.GetStep())
		}
		require.Equal(t, []string{"x1", "x2"}, depSteps)
		done(g, nil, nil)

		// Waiting through a follower: ended, with its seven members.
		wait, err := wf2.Wait(ctx, connect.NewRequest(&cronoqv1.WaitWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Key: "diamond-1"}}))
		require.NoError(t, err)
		ended := wait.Msg.GetWorkflow()
		require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED, ended.GetStatus())
		require.NotNil(t, ended.GetFinishedAt())
		require.Len(t, ended.GetTasks(), 7)
		for _, m := range ended.GetTasks() {
			require.Equal(t, cronoqv1.Status_STATUS_SUCCEEDED, m.GetStatus(), m.GetStep())
		}

		// A consistent read through a follower is the leader's; a stale one
		// the follower's own, once it caught up.
		get, err = wf2.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: wfID}}))
		require.NoError(t, err)
		require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED, get.Msg.GetWorkflow().GetStatus())
		require.Equal(t, leader.ID, get.Msg.GetMeta().GetNode())
		require.Equal(t, leader.Addr(), get.Header().Get(apierr.HeaderLeaderAddr))
		require.Eventually(t, func() bool {
			stale, err := wf2.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: wfID}, Stale: true}))
			return err == nil && stale.Msg.GetMeta().GetStale() && stale.Msg.GetMeta().GetNode() == f2.ID &&
				stale.Msg.GetWorkflow().GetStatus() == cronoqv1.WorkflowStatus_WORKFLOW_STATUS_SUCCEEDED &&
				len(stale.Msg.GetWorkflow().GetTasks()) == 7
		}, 10*time.Second, 10*time.Millisecond)

		// An external step: not dispatched, ended by the API; its dependent
		// then runs and sees its output.
		sub, err = wf1.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
			Name: "approval", Steps: []*cronoqv1.WorkflowStep{
				{Name: "gate", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "wf", Kind: "gate"}, External: true}},
				step("ship", "gate"),
			},
		}}))
		require.NoError(t, err)
		gate, ship := sub.Msg.GetTasks()[0].GetId(), sub.Msg.GetTasks()[1].GetId()
		tc := taskClient(t, f1)
		_, err = tc.Complete(ctx, connect.NewRequest(&cronoqv1.CompleteRequest{Ref: &cronoqv1.TaskRef{Id: ship}}))
		require.Equal(t, apierr.KindNotWaiting, apierr.Kind(err), "blocked: %v", err)
		completed, err := tc.Complete(ctx, connect.NewRequest(&cronoqv1.CompleteRequest{
			Ref: &cronoqv1.TaskRef{Id: gate}, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte("approved"),
		}))
		require.NoError(t, err)
		require.Equal(t, cronoqv1.Status_STATUS_SUCCEEDED, completed.Msg.GetTask().GetStatus())
		require.Equal(t, "approved", string(completed.Msg.GetTask().GetOutput()))
		require.True(t, completed.Msg.GetTask().GetExternal())
		_, err = tc.Complete(ctx, connect.NewRequest(&cronoqv1.CompleteRequest{Ref: &cronoqv1.TaskRef{Id: gate}}))
		require.Equal(t, apierr.KindNotWaiting, apierr.Kind(err), "ended: %v", err)
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
		g = w.grants(1)[0]
		require.Equal(t, ship, g.GetTask().GetId())
		require.Equal(t, "approved", string(g.GetDependencies()[0].GetOutput()))
		done(g, nil, nil)

		// Cancelling a workflow as a whole, through a follower.
		sub, err = wf1.Submit(ctx, connect.NewRequest(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{
			Name: "doomed", Steps: []*cronoqv1.WorkflowStep{
				{Name: "x", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "wf-idle", Kind: "k"}}},
				{Name: "y", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "wf-idle", Kind: "k"}}, DependsOn: []string{"x"}},
			},
		}}))
		require.NoError(t, err)
		doomed := sub.Msg.GetId()
		cancelled, err := wf2.Cancel(ctx, connect.NewRequest(&cronoqv1.CancelWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: doomed}}))
		require.NoError(t, err)
		require.Equal(t, int32(2), cancelled.Msg.GetCancelled())
		get, err = wf1.Get(ctx, connect.NewRequest(&cronoqv1.GetWorkflowRequest{Ref: &cronoqv1.WorkflowRef{Id: doomed}}))
		require.NoError(t, err)
		require.Equal(t, cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED, get.Msg.GetWorkflow().GetStatus())
		for _, m := range get.Msg.GetWorkflow().GetTasks() {
			require.Equal(t, cronoqv1.Status_STATUS_CANCELLED, m.GetStatus())
			require.Equal(t, "workflow cancelled", m.GetError())
		}

		// Listed by status, without members.
		list, err := wf2.List(ctx, connect.NewRequest(&cronoqv1.ListWorkflowsRequest{
			Statuses: []cronoqv1.WorkflowStatus{cronoqv1.WorkflowStatus_WORKFLOW_STATUS_CANCELLED},
		}))
		require.NoError(t, err)
		require.Len(t, list.Msg.GetWorkflows(), 1)
		require.Equal(t, doomed, list.Msg.GetWorkflows()[0].GetId())
		require.Empty(t, list.Msg.GetWorkflows()[0].GetTasks())
		list, err = wf2.List(ctx, connect.NewRequest(&cronoqv1.ListWorkflowsRequest{Limit: 2}))
		require.NoError(t, err)
		require.Len(t, list.Msg.GetWorkflows(), 2)
		require.Equal(t, list.Msg.GetWorkflows()[1].GetId(), list.Msg.GetNext())

		require.NoError(t, w.stream.CloseRequest())
		_, err = w.stream.Receive()
		require.ErrorIs(t, err, io.EOF)
	})

	t.Run("health and metrics over HTTP", func(t *testing.T) {
		for _, n := range []*testNode{leader, f1, f2} {
			code, body := httpGet(t, n, "/v1/health")
			require.Equal(t, http.StatusOK, code, body)
			var h map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &h))
			require.Equal(t, n.ID, h["node"])
			require.Equal(t, leader.ID, h["leader"])
			require.Contains(t, []any{"ok", "degraded"}, h["status"])
			require.NotZero(t, h["epoch"])
		}
		code, body := httpGet(t, leader, "/metrics")
		require.Equal(t, http.StatusOK, code)
		for _, want := range []string{
			`cronoq_tasks{pool="p",status="succeeded"}`,
			`cronoq_tasks_submitted_total{pool="p"}`,
			`cronoq_tasks_dispatched_total{pool="p"}`,
			`cronoq_tasks_completed_total{outcome="succeeded",pool="p"}`,
			`cronoq_tasks_completed_total{outcome="failed",pool="p"}`,
			`cronoq_attempt_duration_seconds_bucket{kind="echo",outcome="succeeded",pool="p"`,
			`cronoq_raft_commit_seconds_bucket`,
			`cronoq_raft_batch_mutations_bucket`,
			`cronoq_raft_batch_bytes_bucket`,
			`cronoq_is_leader 1`,
			`cronoq_epoch `,
			`cronoq_raft_applied_index `,
			`cronoq_worker_streams `,
			`cronoq_rpc_requests_total{code="ok",procedure="/cronoq.v1.TaskService/Submit"}`,
			`cronoq_rpc_request_duration_seconds_count{procedure="/cronoq.v1.TaskService/Submit"}`,
			`go_goroutines `,
			`process_cpu_seconds_total `,
		} {
			require.Contains(t, body, want)
		}
		_, body = httpGet(t, f1, "/metrics")
		require.Contains(t, body, "cronoq_is_leader 0")
		require.Contains(t, body, `cronoq_rpc_forwarded_total{procedure="/cronoq.v1.TaskService/Submit"}`)
		require.Contains(t, body, `cronoq_tasks{pool="p",status="succeeded"}`)
	})
}

func workflowClient(t *testing.T, n *testNode) cronoqv1connect.WorkflowServiceClient {
	return cronoqv1connect.NewWorkflowServiceClient(h2c(t), "http://"+n.Addr())
}

// rawWorker is a worker stream driven by hand: each call sends one message
// and reads what answers it.
type rawWorker struct {
	t      *testing.T
	stream *connect.BidiStreamForClient[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]
}

// connectRaw opens a worker stream on n (the leader) for pool, closed when
// the test ends.
func connectRaw(ctx context.Context, t *testing.T, n *testNode, worker, pool string) *rawWorker {
	t.Helper()
	stream := cronoqv1connect.NewWorkerServiceClient(h2c(t), "http://"+n.Addr()).Connect(ctx)
	t.Cleanup(func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	w := &rawWorker{t: t, stream: stream}
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: worker, Pool: pool}}})
	require.NotNil(t, w.next().GetWelcome())
	return w
}

func (w *rawWorker) send(m *cronoqv1.WorkerMessage) {
	w.t.Helper()
	require.NoError(w.t, w.stream.Send(m))
}

func (w *rawWorker) next() *cronoqv1.ServerMessage {
	w.t.Helper()
	msg, err := w.stream.Receive()
	require.NoError(w.t, err)
	return msg
}

// grants offers n slots and returns the n grants that fill them.
func (w *rawWorker) grants(n int) []*cronoqv1.Grant {
	w.t.Helper()
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: int32(n)}}})
	var out []*cronoqv1.Grant
	for len(out) < n {
		msg := w.next()
		require.NotNil(w.t, msg.GetGrants(), "want grants, got %v", msg)
		out = append(out, msg.GetGrants().GetGrants()...)
	}
	require.Len(w.t, out, n)
	return out
}

// complete reports completions and returns their results.
func (w *rawWorker) complete(cs ...*cronoqv1.Completion) []*cronoqv1.LeaseResult {
	w.t.Helper()
	w.send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: cs}}})
	msg := w.next()
	require.NotNil(w.t, msg.GetCompleteAck(), "want a completion ack, got %v", msg)
	return msg.GetCompleteAck().GetResults()
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// A node that never saw a leader answers health with 503, holds calls that
// need the leader for the hold timeout and then answers no_leader.
func TestNoLeader(t *testing.T) {
	const hold = 300 * time.Millisecond
	c := newTestCluster(t, 1, 3, hold) // expects 3 nodes: never forms
	n := c.Live()[0]

	code, body := httpGet(t, n, "/v1/health")
	require.Equal(t, http.StatusServiceUnavailable, code)
	var h map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	require.Equal(t, n.ID, h["node"])
	require.Equal(t, "", h["leader"])
	require.Equal(t, "degraded", h["status"])

	tc := taskClient(t, n)
	start := time.Now()
	_, err := tc.Submit(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}}}))
	require.Equal(t, apierr.KindNoLeader, apierr.Kind(err), "%v", err)
	require.GreaterOrEqual(t, time.Since(start), hold)

	// Stale reads are served anyway, with their metadata.
	_, err = tc.Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "x"}, Stale: true}))
	require.Equal(t, apierr.KindNotFound, apierr.Kind(err))
	resp, err := tc.Counts(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.CountsRequest{Stale: true}))
	require.NoError(t, err)
	require.True(t, resp.Msg.GetMeta().GetStale())
	require.False(t, resp.Msg.GetMeta().GetKnownLeader())
	require.Nil(t, resp.Msg.GetMeta().GetLastContact(), "never heard from a leader")

	// The SDK keeps retrying no_leader until its ctx ends.
	cl := c.Client(n)
	_, err = cl.Submit(ctxT(t, time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A draining node refuses new calls at once.
	n.Server.Drain()
	_, err = tc.Submit(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SubmitRequest{Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}}}))
	require.Equal(t, apierr.KindShuttingDown, apierr.Kind(err))
}

// Leadership moves while a worker runs and clients submit through
// followers: the worker follows the leader and every task completes.
func TestLeaderChange(t *testing.T) {
	c := newTestCluster(t, 3, 3, 5*time.Second)
	leader, followers := c.Leader()
	cl := c.Client(followers[0], followers[1], leader)
	runWorker(t, c.Client(followers[0]), "lc", map[string]client.Handler{"echo": client.HandlerFunc(echo)})

	submitAndWait := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				res, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "lc", Kind: "echo", Payload: []byte(fmt.Sprint(i))}})
				if err != nil {
					errs <- err
					return
				}
				task, err := cl.Wait(ctx, res.ID)
				if err != nil {
					errs <- err
					return
				}
				if task.Status != client.StatusSucceeded || string(task.Output) != "done:"+fmt.Sprint(i) {
					errs <- fmt.Errorf("task %s: %s %q", task.ID, task.Status, task.Output)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	submitAndWait(10)

	// A worker stream open on the old leader ends when it steps down, with
	// an error that sends the worker elsewhere.
	wc := cronoqv1connect.NewWorkerServiceClient(h2c(t), "http://"+leader.Addr())
	stream := wc.Connect(ctxT(t, 30*time.Second))
	require.NoError(t, stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "raw", Pool: "raw"}}}))
	msg, err := stream.Receive()
	require.NoError(t, err)
	require.NotNil(t, msg.GetWelcome())
	streamEnd := make(chan error, 1)
	go func() {
		_, err := stream.Receive()
		streamEnd <- err
	}()

	changesBefore := leaderChanges(t, c.Live())
	newLeader, err := cl.TransferLeadership(ctxT(t, 20*time.Second), followers[1].ID)
	require.NoError(t, err)
	require.Equal(t, followers[1].ID, newLeader)
	l2, _ := c.Leader()
	require.Equal(t, followers[1].ID, l2.ID)

	select {
	case err := <-streamEnd:
		require.Contains(t, []string{apierr.KindNotLeader, apierr.KindNoLeader}, apierr.Kind(err), "%v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker stream on the old leader did not end")
	}
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()

	submitAndWait(10)

	// Every node counted the leader change, once: each counts every change
	// raft reports to it.
	require.Eventually(t, func() bool {
		after := leaderChanges(t, c.Live())
		for id, n := range changesBefore {
			if after[id] < n+1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	after := leaderChanges(t, c.Live())
	for id, n := range changesBefore {
		require.Equal(t, n+1, after[id], "leader changes counted by %s", id)
	}
}

// leaderChanges reads cronoq_leader_changes_total of every node.
func leaderChanges(t *testing.T, nodes []*testNode) map[string]int {
	changes := regexp.MustCompile(`(?m)^cronoq_leader_changes_total (\d+)$`)
	out := map[string]int{}
	for _, n := range nodes {
		_, body := httpGet(t, n, "/metrics")
		m := changes.FindStringSubmatch(body)
		require.NotNil(t, m, "no leader change counter on %s", n.ID)
		v, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		out[n.ID] = v
	}
	return out
}
