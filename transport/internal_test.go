package transport

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
)

func TestStatusNumbersMatch(t *testing.T) {
	for _, st := range fsm.AllStatuses {
		p := statusToProto(st)
		require.Equal(t, "STATUS_"+map[fsm.Status]string{
			fsm.StatusScheduled: "SCHEDULED", fsm.StatusQueued: "QUEUED", fsm.StatusRunning: "RUNNING",
			fsm.StatusRetrying: "RETRYING", fsm.StatusSucceeded: "SUCCEEDED", fsm.StatusFailed: "FAILED",
			fsm.StatusCancelled: "CANCELLED", fsm.StatusExpired: "EXPIRED",
		}[st], p.String())
		back, err := statusFromProto(p)
		require.NoError(t, err)
		require.Equal(t, st, back)
	}
	for _, bad := range []cronoqv1.Status{cronoqv1.Status_STATUS_UNSPECIFIED, 9, -1} {
		_, err := statusFromProto(bad)
		var ie *core.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "statuses", ie.Field)
	}
}

func TestPriorities(t *testing.T) {
	for p, want := range map[cronoqv1.Priority]fsm.Priority{
		cronoqv1.Priority_PRIORITY_NORMAL: fsm.PriorityNormal,
		cronoqv1.Priority_PRIORITY_HIGH:   fsm.PriorityHigh,
		cronoqv1.Priority_PRIORITY_LOW:    fsm.PriorityLow,
	} {
		got, err := priorityFromProto(p)
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.Equal(t, p, priorityToProto(got))
	}
	// The zero spec is normal, not the fsm's zero value (high).
	s, err := specFromProto(&cronoqv1.TaskSpec{Pool: "p", Kind: "k"})
	require.NoError(t, err)
	require.Equal(t, fsm.PriorityNormal, s.Priority)
	sc, err := scheduleFromProto(&cronoqv1.Schedule{Name: "s", Cron: "@hourly"})
	require.NoError(t, err)
	require.Equal(t, fsm.PriorityNormal, sc.Task.Priority)
}

func TestSpecFromProto(t *testing.T) {
	s, err := specFromProto(&cronoqv1.TaskSpec{
		Pool: "p", Kind: "k", Key: "key", Priority: cronoqv1.Priority_PRIORITY_LOW, Payload: []byte("x"),
		Labels: []*cronoqv1.KV{{Key: "gpu", Value: "1"}}, Tags: []*cronoqv1.KV{{Key: "t", Value: "v"}},
		RunAtMs: 2_000_000_000_000, DeadlineMs: 2_000_000_100_000, TimeoutMs: 1500, MaxAttempts: 3,
		Backoff: &cronoqv1.Backoff{InitialMs: 100, MaxMs: 1000, Jitter: 0.1},
	})
	require.NoError(t, err)
	require.Equal(t, core.Spec{
		Pool: "p", Kind: "k", Key: "key", Priority: fsm.PriorityLow, Payload: []byte("x"),
		Labels: []fsm.KV{{K: "gpu", V: "1"}}, Tags: []fsm.KV{{K: "t", V: "v"}},
		RunAt: time.UnixMilli(2_000_000_000_000).UTC(), Deadline: time.UnixMilli(2_000_000_100_000).UTC(),
		Timeout: 1500 * time.Millisecond, MaxAttempts: 3,
		Backoff: &fsm.Backoff{Initial: int64(100 * time.Millisecond), Max: int64(time.Second), Jitter: 0.1},
	}, s)

	for _, tc := range []struct {
		spec  *cronoqv1.TaskSpec
		field string
	}{
		{nil, "spec"},
		{&cronoqv1.TaskSpec{Priority: 7}, "priority"},
		{&cronoqv1.TaskSpec{RunAtMs: -1}, "run_at"},
		{&cronoqv1.TaskSpec{DelayMs: -1}, "delay"},
		{&cronoqv1.TaskSpec{DeadlineMs: -5}, "deadline"},
		{&cronoqv1.TaskSpec{TimeoutMs: -5}, "timeout"},
		{&cronoqv1.TaskSpec{TimeoutMs: 1 << 62}, "timeout"},
		{&cronoqv1.TaskSpec{Labels: []*cronoqv1.KV{nil}}, "labels"},
		{&cronoqv1.TaskSpec{Backoff: &cronoqv1.Backoff{InitialMs: -1}}, "backoff.initial"},
	} {
		_, err := specFromProto(tc.spec)
		var ie *core.InvalidError
		require.ErrorAs(t, err, &ie, "%v", tc.spec)
		require.Equal(t, tc.field, ie.Field)
	}
	_, err = specsFromProto([]*cronoqv1.TaskSpec{{}, {Priority: 5}})
	var ie *core.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "specs[1].priority", ie.Field)
	_, err = scheduleFromProto(&cronoqv1.Schedule{Name: "s", Task: &cronoqv1.TaskSpec{Priority: 5}})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "task.priority", ie.Field)
	_, err = scheduleFromProto(&cronoqv1.Schedule{Name: "s", Overlap: 3})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "overlap", ie.Field)
	_, err = scheduleFromProto(&cronoqv1.Schedule{Name: "s", CatchUp: 3})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "catch_up", ie.Field)
	_, err = outcomeFromProto(&cronoqv1.Completion{Outcome: 9})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "outcome", ie.Field)
	_, err = refFromProto(&cronoqv1.TaskRef{Id: "a", Key: "b"})
	require.ErrorAs(t, err, &ie)
	_, err = refFromProto(nil)
	require.ErrorAs(t, err, &ie)
}

func TestScheduleToProto(t *testing.T) {
	created := time.Date(2030, 1, 1, 10, 30, 0, 0, time.UTC)
	s := &fsm.Schedule{
		Name: "s", Cron: "0 * * * *", Pool: "p", Kind: "k", Priority: fsm.PriorityHigh,
		Timeout: int64(2 * time.Second), CreatedAt: fsm.Nanos(created), Overlap: fsm.OverlapAllow,
		CatchUp: fsm.CatchUpAll, CatchUpLimit: 4,
	}
	p := scheduleToProto(s)
	require.Equal(t, fsm.Nanos(time.Date(2030, 1, 1, 11, 0, 0, 0, time.UTC)), p.GetNextFire())
	require.Equal(t, cronoqv1.Priority_PRIORITY_HIGH, p.GetTask().GetPriority())
	require.Equal(t, int64(2000), p.GetTask().GetTimeoutMs())
	require.Equal(t, cronoqv1.Overlap_OVERLAP_ALLOW, p.GetOverlap())
	require.Equal(t, cronoqv1.CatchUp_CATCH_UP_ALL, p.GetCatchUp())

	s.LastFire = fsm.Nanos(time.Date(2030, 1, 1, 13, 0, 0, 0, time.UTC))
	require.Equal(t, fsm.Nanos(time.Date(2030, 1, 1, 14, 0, 0, 0, time.UTC)), scheduleToProto(s).GetNextFire())
	s.Paused = true
	require.Zero(t, scheduleToProto(s).GetNextFire())
}

// The forwarding client dials from the IP of the node's own API address.
func TestForwarderDialsFromOwnIP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var remotes []string
	mux := http.NewServeMux()
	mux.Handle(cronoqv1connect.NewOperatorServiceHandler(cronoqv1connect.UnimplementedOperatorServiceHandler{}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		mu.Unlock()
		mux.ServeHTTP(w, r)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	defer func() {
		_ = srv.Close()
		<-done
	}()

	f, err := newForwarder("127.0.0.7:8650", 1<<20)
	require.NoError(t, err)
	defer f.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = f.endpoint(ln.Addr().String()).operator.Health(ctx, connect.NewRequest(&cronoqv1.HealthRequest{}))
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "%v", err)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, remotes)
	for _, r := range remotes {
		host, _, err := net.SplitHostPort(r)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.7", host)
	}
}

func TestNeverSent(t *testing.T) {
	require.True(t, neverSent(&net.OpError{Op: "dial", Err: errors.New("refused")}))
	require.True(t, neverSent(connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "dial", Err: errors.New("refused")})))
	require.False(t, neverSent(&net.OpError{Op: "read", Err: errors.New("reset")}))
	require.False(t, neverSent(errors.New("EOF")))
}

func TestOutbox(t *testing.T) {
	o := newOutbox()
	msg := &cronoqv1.ServerMessage{}
	require.True(t, o.push(msg))
	require.True(t, o.push(msg))
	msgs, ok := o.take()
	require.True(t, ok)
	require.Len(t, msgs, 2)
	for range maxOutbox {
		require.True(t, o.push(msg))
	}
	require.False(t, o.push(msg), "full")
	o.close()
	require.False(t, o.push(msg), "closed")
	msgs, ok = o.take()
	require.False(t, ok)
	require.Len(t, msgs, maxOutbox)
	msgs, ok = o.take()
	require.False(t, ok)
	require.Empty(t, msgs)
}

func TestForwardOutcome(t *testing.T) {
	// What a node gets back from the leader: wire errors.
	withKind := func(kind string) error {
		e := connect.NewWireError(apierr.Code(kind), errors.New("from the leader"))
		e.Meta().Set(apierr.HeaderError, kind)
		return e
	}
	dial := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "dial", Err: errors.New("refused")})
	reset := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "read", Err: errors.New("reset")})

	for _, tc := range []struct {
		name  string
		kind  callKind
		err   error
		final string // kind of the answer, "" for none
		again string // kind of the reason to route again, "" for none
	}{
		{"leader moved (write)", write, withKind(apierr.KindNotLeader), "", apierr.KindNotLeader},
		{"leader lost its leader", read, withKind(apierr.KindNoLeader), "", apierr.KindNoLeader},
		{"leader draining", write, withKind(apierr.KindShuttingDown), "", apierr.KindShuttingDown},
		{"leader refused", write, withKind(apierr.KindOverloaded), apierr.KindOverloaded, ""},
		{"leader unsure", write, withKind(apierr.KindOutcomeUnknown), apierr.KindOutcomeUnknown, ""},
		{"write lost in transit", write, reset, apierr.KindOutcomeUnknown, ""},
		{"write never sent", write, dial, "", apierr.KindNotLeader},
		{"read lost in transit", read, reset, "", apierr.KindNotLeader},
	} {
		final, again := forwardOutcome(tc.kind, "n2", "127.0.0.2:8650", tc.err)
		if tc.final == "" {
			require.NoError(t, final, tc.name)
		} else {
			require.Equal(t, tc.final, apierr.Kind(final), tc.name)
		}
		if tc.again == "" {
			require.NoError(t, again, tc.name)
		} else {
			require.Equal(t, tc.again, apierr.Kind(again), tc.name)
		}
	}
	_, again := forwardOutcome(write, "n2", "127.0.0.2:8650", dial)
	id, addr := apierr.Leader(again)
	require.Equal(t, "n2", id)
	require.Equal(t, "127.0.0.2:8650", addr)
}
