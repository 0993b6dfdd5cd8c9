package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

// releaser returns a channel and an idempotent func closing it; register
// the func with t.Cleanup after runWorker so a failing test does not leave
// handlers blocked through the worker's graceful stop.
func releaser() (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	return ch, func() { once.Do(func() { close(ch) }) }
}

// runWorker runs w until the returned stop is called; stop cancels Run's ctx
// and returns Run's error once it has returned.
func runWorker(t *testing.T, w *Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("worker did not stop")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestWorkerConfigValidation(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, []string{"127.0.0.1:1"})
	h := HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil })
	for _, tc := range []struct {
		name string
		cfg  WorkerConfig
		want string
	}{
		{"no pool", WorkerConfig{Handlers: map[string]Handler{"k": h}}, "Pool"},
		{"no handlers", WorkerConfig{Pool: "p"}, "Handlers"},
		{"nil handler", WorkerConfig{Pool: "p", Handlers: map[string]Handler{"k": nil}}, `Handlers["k"]`},
		{"negative concurrency", WorkerConfig{Pool: "p", Handlers: map[string]Handler{"k": h}, Concurrency: -1}, "Concurrency"},
		{"negative heartbeat", WorkerConfig{Pool: "p", Handlers: map[string]Handler{"k": h}, HeartbeatEvery: -1}, "HeartbeatEvery"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.NewWorker(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Handlers: map[string]Handler{"k": h}})
	require.NoError(t, err)
	require.Equal(t, DefaultConcurrency, w.cfg.Concurrency)
	require.NotEmpty(t, w.ID())
}

type args struct {
	N int `json:"n"`
}

func TestWorkerOutcomes(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	// Only the follower is known: the worker must follow the not_leader hint.
	c := newTestClient(t, addrs(fc, 0))
	handlers := map[string]Handler{
		"ok": HandlerFunc(func(_ context.Context, job *Job) ([]byte, error) {
			if job.Lease == 0 || job.Lease != job.Task.Lease || job.Attempt != 1 {
				return nil, Permanent(errors.New("bad job"))
			}
			return append([]byte("done:"), job.Task.Payload...), nil
		}),
		"retry": HandlerFunc(func(context.Context, *Job) ([]byte, error) {
			return nil, Retryable(errors.New("later"), 1500*time.Millisecond)
		}),
		"plain": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, errors.New("plain failure") }),
		"perm": HandlerFunc(func(context.Context, *Job) ([]byte, error) {
			return nil, Permanent(errors.New("bad input"))
		}),
		"panic": HandlerFunc(func(context.Context, *Job) ([]byte, error) { panicky("boom"); return nil, nil }),
		"cancel": HandlerFunc(func(context.Context, *Job) ([]byte, error) {
			return []byte("ignored"), Cancel("order withdrawn")
		}),
		"cancelwrapped": HandlerFunc(func(context.Context, *Job) ([]byte, error) {
			return nil, fmt.Errorf("account closed: %w", ErrCancelAttempt)
		}),
		"typed": Typed(func(_ context.Context, _ *Job, a args) ([]byte, error) {
			return []byte{byte(a.N)}, nil
		}),
	}
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 3, Handlers: handlers, Labels: map[string]string{"zone": "a"}})
	require.NoError(t, err)
	stop := runWorker(t, w)

	ids := map[string]string{}
	for _, k := range []string{"ok", "retry", "plain", "perm", "panic", "cancel", "cancelwrapped", "typed", "badtyped", "unknown"} {
		payload := []byte("x")
		switch k {
		case "typed":
			payload = []byte(`{"n": 7}`)
		case "badtyped":
			payload = []byte(`{"n": "seven"}`)
		}
		kind := k
		if k == "badtyped" {
			kind = "typed"
		}
		ids[k] = addTask(fc, "p", kind, "", payload)
	}
	fc.WaitUntil("every task completed", func() bool {
		for _, id := range ids {
			if fc.Accepted(id) == nil {
				return false
			}
		}
		return true
	})

	got := map[string]*cronoqv1.Completion{}
	for k, id := range ids {
		got[k] = fc.Accepted(id)
	}
	wl := fc.Workers()
	hello := wl.Hellos[0]
	violations := wl.Violations

	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_SUCCESS, got["ok"].GetOutcome())
	require.Equal(t, []byte("done:x"), got["ok"].GetOutput())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, got["retry"].GetOutcome())
	require.Equal(t, 1500*time.Millisecond, got["retry"].GetRetryAfter().AsDuration())
	require.Equal(t, "later", got["retry"].GetMessage())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, got["plain"].GetOutcome())
	require.Nil(t, got["plain"].GetRetryAfter())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, got["perm"].GetOutcome())
	require.Equal(t, "bad input", got["perm"].GetMessage())
	// A panic is a retryable failure: the panic value, then the stack from
	// the call that panicked on (not the worker's recovery frames).
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, got["panic"].GetOutcome())
	msg := got["panic"].GetMessage()
	require.True(t, strings.HasPrefix(msg, "panic: boom\n"), "message %q", msg)
	lines := strings.Split(msg, "\n")
	require.Contains(t, lines[1], "client.panicky(", "the panicking frame comes first: %q", msg)
	require.Contains(t, msg, "worker_test.go:")
	require.NotContains(t, msg, "runtime/debug.Stack")
	require.NotContains(t, msg, "goroutine ")
	require.LessOrEqual(t, len(lines), 1+2*panicFrames)
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_CANCELLED, got["cancel"].GetOutcome())
	require.Equal(t, "order withdrawn", got["cancel"].GetMessage())
	require.Empty(t, got["cancel"].GetOutput())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_CANCELLED, got["cancelwrapped"].GetOutcome())
	require.Equal(t, "account closed: attempt cancelled by its handler", got["cancelwrapped"].GetMessage())
	require.Equal(t, []byte{7}, got["typed"].GetOutput())
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, got["badtyped"].GetOutcome())
	require.Contains(t, got["badtyped"].GetMessage(), "decoding payload")
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, got["unknown"].GetOutcome())
	require.Contains(t, got["unknown"].GetMessage(), `no handler for kind "unknown"`)

	require.Equal(t, w.ID(), hello.GetWorker())
	require.Equal(t, "p", hello.GetPool())
	require.Equal(t, []*cronoqv1.KV{{Key: "zone", Value: "a"}}, hello.GetLabels())
	require.Empty(t, violations)
	require.GreaterOrEqual(t, fc.Node(0).Requests(cronoqv1connect.WorkerServiceConnectProcedure), 1, "asked the follower first")
	require.NoError(t, stop())
}

// panicky panics with v, a frame of its own that the stack excerpt of a
// handler's panic must start with.
//
//go:noinline
func panicky(v any) { panic(v) }

func TestWorkerAbortCancelsAttempt(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	causes := make(chan error, 1)
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 1, Handlers: map[string]Handler{
		"wait": HandlerFunc(func(ctx context.Context, _ *Job) ([]byte, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return []byte("late"), ctx.Err()
		}),
	}})
	require.NoError(t, err)
	stop := runWorker(t, w)

	id := addTask(fc, "p", "wait", "", nil)
	fc.WaitUntil("granted", func() bool { return fc.LeaseOf(id) != 0 })
	fc.Finish(id, cronoqv1.Status_STATUS_CANCELLED, nil, "cancelled by user")
	cause := <-causes
	require.ErrorIs(t, cause, errAborted)
	require.ErrorContains(t, cause, "cancelled by user")
	// The slot is offered again once the attempt returned.
	fc.WaitUntil("slot offered again", func() bool { return len(fc.Workers().Polls) == 2 })
	require.NoError(t, stop())

	wl := fc.Workers()
	require.Equal(t, []int32{1, 1}, wl.Polls)
	require.Empty(t, wl.Received, "an aborted attempt's result is dropped")
}

func TestWorkerHeartbeatRefusalCancelsAttempt(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	causes := make(chan error, 1)
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 1, HeartbeatEvery: 5 * time.Millisecond, Handlers: map[string]Handler{
		"wait": HandlerFunc(func(ctx context.Context, _ *Job) ([]byte, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		}),
	}})
	require.NoError(t, err)
	// The task is there before the worker: its heartbeats are refused from
	// the first.
	id := addTask(fc, "p", "wait", "", nil)
	fc.RefuseHeartbeats(id, apierr.KindStaleLease)
	stop := runWorker(t, w)

	require.ErrorIs(t, <-causes, ErrStaleLease)
	require.NoError(t, stop())
	require.Empty(t, fc.Workers().Received)
}

func TestWorkerGracefulStopLetsRunningFinish(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 2, Handlers: map[string]Handler{
		"slow": HandlerFunc(func(ctx context.Context, _ *Job) ([]byte, error) {
			close(started)
			<-runCtx.Done() // finishes only after the worker was told to stop
			if ctx.Err() != nil {
				return nil, errors.New("attempt ctx was cancelled by the stop")
			}
			return []byte("finished"), nil
		}),
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	id := addTask(fc, "p", "slow", "", nil)
	<-started
	cancel()
	require.NoError(t, <-done)

	comp := fc.Accepted(id)
	require.NotNil(t, comp, "the completion was delivered before Run returned")
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_SUCCESS, comp.GetOutcome())
	require.Equal(t, []byte("finished"), comp.GetOutput())
}

func TestWorkerReconnectKeepsLeasesAndResendsCompletions(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	release, releaseAll := releaser()
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 2, HeartbeatEvery: 5 * time.Millisecond, Handlers: map[string]Handler{
		"block": HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
			select {
			case <-release:
				return []byte("block done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
		"quick": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return []byte("quick done"), nil }),
	}})
	require.NoError(t, err)
	// Both tasks are there before the worker, so that quick's completion
	// cannot arrive before the drop is set up.
	blockID := addTask(fc, "p", "block", "", nil)
	quickID := addTask(fc, "p", "quick", "", nil)
	fc.DropStreamOnCompletion(quickID) // lost with its stream, never acknowledged
	stop := runWorker(t, w)
	t.Cleanup(releaseAll)

	// The stream drops when quick's completion arrives; on the new stream the
	// completion is sent again and accepted.
	fc.WaitUntil("quick accepted on the second stream", func() bool { return fc.Accepted(quickID) != nil })
	fc.WaitUntil("block heartbeated on the second stream", func() bool { return heartbeated(fc, 2, fc.LeaseOf(blockID)) })

	// Now the TCP connection dies; the worker reconnects again and keeps
	// heartbeating the running attempt under its lease.
	fc.Node(0).DropConns()
	fc.WaitUntil("block heartbeated on the third stream", func() bool { return heartbeated(fc, 3, fc.LeaseOf(blockID)) })
	releaseAll()
	fc.WaitUntil("block accepted", func() bool { return fc.Accepted(blockID) != nil })
	require.NoError(t, stop())

	wl := fc.Workers()
	require.Len(t, wl.Hellos, 3, "Hello re-sent on every stream")
	require.Len(t, wl.Grants, 2, "no attempt was granted twice")
	var quickSends []int
	for _, r := range wl.Received {
		if r.GetLease() == fc.LeaseOf(quickID) {
			quickSends = append(quickSends, r.Stream)
		}
	}
	// Sent on the first stream (lost with it), accepted on the second. The
	// third stream may see it once more if the drop beat the ack there: the
	// fake answers stale_lease and the worker drops it.
	require.GreaterOrEqual(t, len(quickSends), 2)
	require.Equal(t, []int{1, 2}, quickSends[:2])
	require.LessOrEqual(t, len(quickSends), 3)
	require.Equal(t, []byte("quick done"), fc.Accepted(quickID).GetOutput())
	require.Equal(t, []byte("block done"), fc.Accepted(blockID).GetOutput())
	require.Empty(t, wl.Violations)
}

// heartbeated reports whether lease was heartbeated on stream.
func heartbeated(fc *clienttest.Cluster, stream int, lease uint64) bool {
	for _, hb := range fc.Workers().Heartbeats {
		if hb.Stream == stream {
			for _, l := range hb.Leases {
				if l == lease {
					return true
				}
			}
		}
	}
	return false
}

func TestWorkerHeartbeatsCoalesced(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	fc.DelayHeartbeatAcks(25 * time.Millisecond) // many ticks pass while an ack is pending
	c := newTestClient(t, addrs(fc, 0))
	release, releaseAll := releaser()
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 3, HeartbeatEvery: 2 * time.Millisecond, Handlers: map[string]Handler{
		"block": HandlerFunc(func(context.Context, *Job) ([]byte, error) {
			<-release
			return nil, nil
		}),
	}})
	require.NoError(t, err)
	stop := runWorker(t, w)
	t.Cleanup(releaseAll)
	for range 3 {
		addTask(fc, "p", "block", "", nil)
	}
	fc.WaitUntil("several heartbeats per lease", func() bool {
		n := 0
		for _, hb := range fc.Workers().Heartbeats {
			if len(hb.Leases) == 3 {
				n++
			}
		}
		return n >= 4
	})
	releaseAll()
	fc.WaitUntil("all accepted", func() bool { return len(fc.Workers().Accepted) == 3 })
	require.NoError(t, stop())
	require.Empty(t, fc.Workers().Violations)
}

func TestWorkerCompletionsBatched(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	release, releaseAll := releaser()
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 4, CompletionDelay: time.Hour, CompletionBatch: 4,
		Handlers: map[string]Handler{
			"k": HandlerFunc(func(context.Context, *Job) ([]byte, error) {
				<-release
				return []byte("ok"), nil
			}),
		}})
	require.NoError(t, err)
	stop := runWorker(t, w)
	t.Cleanup(releaseAll)
	for range 4 {
		addTask(fc, "p", "k", "", nil)
	}
	fc.WaitUntil("all granted", func() bool { return len(fc.Workers().Grants) == 4 })
	releaseAll()
	// With an hour of delay, only a full batch of 4 can be sent.
	fc.WaitUntil("all accepted", func() bool { return len(fc.Workers().Accepted) == 4 })
	require.NoError(t, stop())
	wl := fc.Workers()
	require.Len(t, wl.Received, 4)
	for _, r := range wl.Received {
		require.Equal(t, 1, r.Stream)
	}
}

func TestWorkerSendsLargeOutputWhole(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 2, Handlers: map[string]Handler{
		"big": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return big, nil }),
	}})
	require.NoError(t, err)
	stop := runWorker(t, w)
	a, b := addTask(fc, "p", "big", "", nil), addTask(fc, "p", "big", "", nil)
	fc.WaitUntil("both accepted", func() bool { return fc.Accepted(a) != nil && fc.Accepted(b) != nil })
	require.NoError(t, stop())
	require.Equal(t, big, fc.Accepted(a).GetOutput())
	require.Equal(t, big, fc.Accepted(b).GetOutput())
}

func TestWorkerStopsWithoutCluster(t *testing.T) {
	t.Parallel()
	// No node answers: Run keeps retrying until its ctx ends, then returns.
	c := newTestClient(t, []string{deadAddr(t)})
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Handlers: map[string]Handler{
		"k": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil }),
	}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.NoError(t, w.Run(ctx))
}

func TestWorkerOutputRefusedAsTooLargeFailsPermanently(t *testing.T) {
	t.Parallel()
	// The node reads at most 1 MiB per message: a 3 MiB output ends the
	// stream; the worker replaces it by a permanent failure and re-sends.
	fc := newFakeCluster(t, 1, 0, clienttest.WithHandlerOptions(connect.WithReadMaxBytes(1<<20)))
	c := newTestClient(t, addrs(fc, 0))
	big := bytes.Repeat([]byte("x"), 3<<20)
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 2, Handlers: map[string]Handler{
		"big":   HandlerFunc(func(context.Context, *Job) ([]byte, error) { return big, nil }),
		"small": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return []byte("ok"), nil }),
	}})
	require.NoError(t, err)
	stop := runWorker(t, w)
	bigID := addTask(fc, "p", "big", "", nil)
	fc.WaitUntil("big accepted", func() bool { return fc.Accepted(bigID) != nil })
	smallID := addTask(fc, "p", "small", "", nil)
	fc.WaitUntil("small accepted", func() bool { return fc.Accepted(smallID) != nil })
	require.NoError(t, stop())

	comp := fc.Accepted(bigID)
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, comp.GetOutcome())
	require.Empty(t, comp.GetOutput())
	require.Contains(t, comp.GetMessage(), "output of 3145728 bytes refused by the node")
	require.Equal(t, []byte("ok"), fc.Accepted(smallID).GetOutput())
}

func TestWorkerCancelsAttemptWhenHeartbeatsGoUnacknowledged(t *testing.T) {
	t.Parallel()
	// The cluster's clock stands still, so that the cluster never finds the
	// lease lost itself: only the worker can.
	frozen := time.Now()
	fc := newFakeCluster(t, 1, 0, clienttest.WithHeartbeatWindow(150*time.Millisecond),
		clienttest.WithClock(func() time.Time { return frozen }))
	fc.DelayHeartbeatAcks(time.Hour) // the node never acknowledges
	c := newTestClient(t, addrs(fc, 0))
	causes := make(chan error, 1)
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Concurrency: 1, HeartbeatEvery: 10 * time.Millisecond, Handlers: map[string]Handler{
		"wait": HandlerFunc(func(ctx context.Context, _ *Job) ([]byte, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return []byte("too late"), nil
		}),
	}})
	require.NoError(t, err)
	stop := runWorker(t, w)
	addTask(fc, "p", "wait", "", nil)
	require.ErrorIs(t, <-causes, errLeaseLost)
	require.NoError(t, stop())
	wl := fc.Workers()
	require.Empty(t, wl.Received, "the result of a lost lease is dropped")
	require.Empty(t, wl.Violations)
}

// By default a finished attempt's completion is due at once; with a delay it
// waits for the flush timer (or a full batch).
func TestWorkerCompletionDueAtOnceByDefault(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	handlers := map[string]Handler{"k": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil })}
	for _, tc := range []struct {
		delay          time.Duration
		flushNow, armd bool
	}{
		{0, true, false},
		{time.Hour, false, true},
	} {
		w, err := c.NewWorker(WorkerConfig{Pool: "p", CompletionDelay: tc.delay, Handlers: handlers})
		require.NoError(t, err)
		r := newWorkerRun(w)
		r.leases[7] = &lease{id: 7, running: true}
		r.runningN = 1
		r.onResult(taskResult{lease: 7, output: []byte("ok")})
		require.Equal(t, tc.flushNow, r.flushNow, "delay %s", tc.delay)
		require.Equal(t, tc.armd, r.flushArmed, "delay %s", tc.delay)
		require.True(t, r.hasUnsent())
		r.flushT.Stop()
	}
}
