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
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

func TestStatusNumbersMatch(t *testing.T) {
	for _, st := range fsm.AllStatuses {
		p := statusToProto(st)
		require.Equal(t, "STATUS_"+map[fsm.Status]string{
			fsm.StatusScheduled: "SCHEDULED", fsm.StatusQueued: "QUEUED", fsm.StatusRunning: "RUNNING",
			fsm.StatusRetrying: "RETRYING", fsm.StatusSucceeded: "SUCCEEDED", fsm.StatusFailed: "FAILED",
			fsm.StatusCancelled: "CANCELLED", fsm.StatusExpired: "EXPIRED", fsm.StatusBlocked: "BLOCKED",
			fsm.StatusParked: "PARKED",
		}[st], p.String())
		back, err := statusFromProto(p)
		require.NoError(t, err)
		require.Equal(t, st, back)
	}
	// 267 would wrap into a valid status of a byte.
	for _, bad := range []cronoqv1.Status{cronoqv1.Status_STATUS_UNSPECIFIED, 11, -1, 267} {
		_, err := statusFromProto(bad)
		var ie *cluster.InvalidError
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
	s, err := specFromProto(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}})
	require.NoError(t, err)
	require.Equal(t, fsm.PriorityNormal, s.Priority)
	sc, err := scheduleFromProto(&cronoqv1.Schedule{Name: "s", Cron: "@hourly"})
	require.NoError(t, err)
	require.Equal(t, fsm.PriorityNormal, sc.Task.Priority)
}

func TestSpecFromProto(t *testing.T) {
	runAt := time.Date(2033, 5, 18, 3, 33, 20, 123456789, time.UTC)
	s, err := specFromProto(&cronoqv1.TaskSpec{
		Template: &cronoqv1.TaskTemplate{
			Pool: "p", Kind: "k", Priority: cronoqv1.Priority_PRIORITY_LOW, Payload: []byte("x"),
			Labels: []*cronoqv1.KV{{Key: "gpu", Value: "1"}}, Tags: []*cronoqv1.KV{{Key: "t", Value: "v"}},
			Timeout: durationpb.New(1500 * time.Millisecond), MaxAttempts: 3,
			Backoff: &cronoqv1.Backoff{Initial: durationpb.New(100 * time.Millisecond), Max: durationpb.New(time.Second), Jitter: 0.1},
		},
		Key:      "key",
		RunAt:    timestamppb.New(runAt),
		Deadline: timestamppb.New(runAt.Add(time.Minute)),
	})
	require.NoError(t, err)
	require.Equal(t, cluster.Spec{
		Template: fsm.Template{
			Pool: "p", Kind: "k", Priority: fsm.PriorityLow, Payload: []byte("x"),
			Labels: []fsm.KV{{K: "gpu", V: "1"}}, Tags: []fsm.KV{{K: "t", V: "v"}},
			Timeout: 1500 * time.Millisecond, MaxAttempts: 3,
			Backoff: fsm.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.1},
		},
		Key:      "key",
		RunAt:    fsm.InstantOf(runAt),
		Deadline: fsm.InstantOf(runAt.Add(time.Minute)),
	}, s, "times keep their nanoseconds")

	// Only what the server's types cannot hold is refused here; the rest
	// (negative durations, instants before 1970, an empty pool) is the
	// engine's to refuse.
	tpl := func(t *cronoqv1.TaskTemplate) *cronoqv1.TaskSpec { return &cronoqv1.TaskSpec{Template: t} }
	for _, tc := range []struct {
		spec  *cronoqv1.TaskSpec
		field string
	}{
		{tpl(&cronoqv1.TaskTemplate{Priority: 7}), "priority"},
		{&cronoqv1.TaskSpec{RunAt: &timestamppb.Timestamp{Nanos: -1}}, "run_at"},
		{&cronoqv1.TaskSpec{RunAt: &timestamppb.Timestamp{Seconds: 1 << 40}}, "run_at"},
		{&cronoqv1.TaskSpec{Delay: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "delay"},
		{&cronoqv1.TaskSpec{Deadline: &timestamppb.Timestamp{Seconds: -1 << 40}}, "deadline"},
		{tpl(&cronoqv1.TaskTemplate{Timeout: &durationpb.Duration{Seconds: 1 << 40}}), "timeout"},
		{tpl(&cronoqv1.TaskTemplate{Labels: []*cronoqv1.KV{nil}}), "labels"},
		{tpl(&cronoqv1.TaskTemplate{Backoff: &cronoqv1.Backoff{Initial: &durationpb.Duration{Nanos: 2e9}}}), "backoff.initial"},
	} {
		_, err := specFromProto(tc.spec)
		var ie *cluster.InvalidError
		require.ErrorAs(t, err, &ie, "%v", tc.spec)
		require.Equal(t, tc.field, ie.Field)
	}
	for _, ok := range []*cronoqv1.TaskSpec{
		nil,
		{Delay: durationpb.New(-time.Second)},
		{RunAt: timestamppb.New(time.Unix(-5, 0))},
	} {
		_, err := specFromProto(ok)
		require.NoError(t, err, "%v", ok)
	}
	var ie *cluster.InvalidError
	_, err = scheduleFromProto(&cronoqv1.Schedule{Name: "s", Task: &cronoqv1.TaskTemplate{Priority: 5}})
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
	require.ErrorAs(t, refFromProto(&cronoqv1.TaskRef{Id: "a", Key: "b"}).Check(), &ie)
	require.ErrorAs(t, refFromProto(nil).Check(), &ie)
}

func TestTaskToProtoKeepsEveryField(t *testing.T) {
	at := fsm.InstantOf(time.Date(2031, 2, 3, 4, 5, 6, 7, time.UTC))
	task := &fsm.Task{
		ID: "t1",
		Template: fsm.Template{Pool: "p", Kind: "k", Priority: fsm.PriorityHigh, Payload: []byte("in"),
			Labels: []fsm.KV{{K: "a", V: "b"}}, Tags: []fsm.KV{{K: "c", V: "d"}}, Timeout: time.Second,
			MaxAttempts: 4, Backoff: fsm.Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.2}},
		Key: "k1", RunAt: at, Deadline: at + 5, Schedule: "s", Slot: at + 6, Status: fsm.StatusRunning,
		Attempt: 2, Lease: 77, Output: []byte("out"), Error: "e",
		SubmittedAt: at + 1, StartedAt: at + 2, UpdatedAt: at + 3, FinishedAt: at + 4,
		Flow: &fsm.Flow{DependsOn: []string{"d1", "d2"}, DepPolicy: fsm.DepDone, External: true,
			Workflow: "w1", Step: "build", Parent: "t0"},
	}
	p := taskToProto(task)
	back, err := templateFromProto(p.GetTemplate())
	require.NoError(t, err)
	require.Equal(t, task.Template, back)
	require.Equal(t, "t1", p.GetId())
	require.Equal(t, "k1", p.GetKey())
	for _, c := range []struct {
		got  *timestamppb.Timestamp
		want fsm.Instant
	}{{p.GetRunAt(), at}, {p.GetDeadline(), at + 5}, {p.GetSlot(), at + 6}, {p.GetSubmittedAt(), at + 1},
		{p.GetStartedAt(), at + 2}, {p.GetUpdatedAt(), at + 3}, {p.GetFinishedAt(), at + 4}} {
		require.Equal(t, want(c.want), c.got.AsTime())
	}
	require.Equal(t, cronoqv1.Status_STATUS_RUNNING, p.GetStatus())
	require.Equal(t, uint32(2), p.GetAttempt())
	require.Equal(t, uint64(77), p.GetLease())
	require.Equal(t, []byte("out"), p.GetOutput())
	require.Equal(t, "e", p.GetError())
	require.Equal(t, "s", p.GetSchedule())
	require.Equal(t, []string{"d1", "d2"}, p.GetDependsOn())
	require.Equal(t, cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE, p.GetDependencyPolicy())
	require.True(t, p.GetExternal())
	require.Equal(t, "w1", p.GetWorkflow())
	require.Equal(t, "build", p.GetStep())
	require.Equal(t, "t0", p.GetParent())
	require.Nil(t, taskToProto(&fsm.Task{}).GetRunAt(), "an unset instant is unset on the wire")
	require.Equal(t, cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED, taskToProto(&fsm.Task{}).GetDependencyPolicy())
}

func want(at fsm.Instant) time.Time { return at.Time() }

func TestScheduleToProto(t *testing.T) {
	created := time.Date(2030, 1, 1, 10, 30, 0, 0, time.UTC)
	s := &fsm.Schedule{
		Name: "s", Cron: "0 * * * *", Template: fsm.Template{Pool: "p", Kind: "k", Priority: fsm.PriorityHigh,
			Timeout: 2 * time.Second}, CreatedAt: fsm.InstantOf(created), Overlap: fsm.OverlapAllow,
		CatchUp: fsm.CatchUpAll, CatchUpLimit: 4,
	}
	p := scheduleToProto(s)
	require.Equal(t, time.Date(2030, 1, 1, 11, 0, 0, 0, time.UTC), p.GetNextFire().AsTime())
	require.Equal(t, cronoqv1.Priority_PRIORITY_HIGH, p.GetTask().GetPriority())
	require.Equal(t, 2*time.Second, p.GetTask().GetTimeout().AsDuration())
	require.Equal(t, cronoqv1.Overlap_OVERLAP_ALLOW, p.GetOverlap())
	require.Equal(t, cronoqv1.CatchUp_CATCH_UP_ALL, p.GetCatchUp())

	s.LastFire = fsm.InstantOf(time.Date(2030, 1, 1, 13, 0, 0, 0, time.UTC))
	require.Equal(t, time.Date(2030, 1, 1, 14, 0, 0, 0, time.UTC), scheduleToProto(s).GetNextFire().AsTime())
	s.Paused = true
	require.Nil(t, scheduleToProto(s).GetNextFire())
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
		{"leader moved (write)", writeCall, withKind(apierr.KindNotLeader), "", apierr.KindNotLeader},
		{"leader lost its leader", readCall, withKind(apierr.KindNoLeader), "", apierr.KindNoLeader},
		{"leader draining", writeCall, withKind(apierr.KindShuttingDown), "", apierr.KindShuttingDown},
		{"leader refused", writeCall, withKind(apierr.KindOverloaded), apierr.KindOverloaded, ""},
		{"leader unsure", writeCall, withKind(apierr.KindOutcomeUnknown), apierr.KindOutcomeUnknown, ""},
		{"write lost in transit", writeCall, reset, apierr.KindOutcomeUnknown, ""},
		{"write never sent", writeCall, dial, "", apierr.KindNotLeader},
		{"read lost in transit", readCall, reset, "", apierr.KindNotLeader},
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
	_, again := forwardOutcome(writeCall, "n2", "127.0.0.2:8650", dial)
	id, addr := apierr.Leader(again)
	require.Equal(t, "n2", id)
	require.Equal(t, "127.0.0.2:8650", addr)
}

func TestHoldFor(t *testing.T) {
	require.Equal(t, 5*time.Second, holdFor(context.Background(), 5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d := holdFor(ctx, 5*time.Second)
	require.LessOrEqual(t, d, time.Second-holdSlack, "answered before the caller's deadline")
	require.Greater(t, d, time.Second-holdSlack-100*time.Millisecond)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.Equal(t, time.Millisecond, holdFor(ctx, 5*time.Second))
}
