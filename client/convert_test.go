package client

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

func TestSpecToProto(t *testing.T) {
	t.Parallel()
	runAt := time.Date(2026, 3, 4, 5, 6, 7, 890_123_456, time.UTC)
	deadline := runAt.Add(time.Hour)
	p, err := specToProto(TaskSpec{Template: Template{Pool: "p", Kind: "k", Priority: PriorityHigh, Payload: []byte("pl"),
		Labels: map[string]string{"z": "1", "a": "2"}, Tags: map[string]string{"traceparent": "00-x"},
		Timeout: 2 * time.Second, MaxAttempts: 7,
		Backoff: &Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.2}}, Key: "key",
		RunAt: runAt, Delay: 1500 * time.Microsecond, Deadline: deadline,
	})
	require.NoError(t, err)
	tpl := p.GetTemplate()
	require.Equal(t, cronoqv1.Priority_PRIORITY_HIGH, tpl.GetPriority())
	require.Equal(t, runAt, p.GetRunAt().AsTime(), "spec instants are Timestamps, to the nanosecond")
	require.Equal(t, 1500*time.Microsecond, p.GetDelay().AsDuration(), "durations are Durations, to the nanosecond")
	require.Equal(t, 2*time.Second, tpl.GetTimeout().AsDuration())
	require.Equal(t, deadline, p.GetDeadline().AsTime())
	require.EqualValues(t, 7, tpl.GetMaxAttempts())
	require.Equal(t, []*cronoqv1.KV{{Key: "a", Value: "2"}, {Key: "z", Value: "1"}}, tpl.GetLabels(), "sorted by key")
	require.Equal(t, time.Second, tpl.GetBackoff().GetInitial().AsDuration())
	require.Equal(t, time.Minute, tpl.GetBackoff().GetMax().AsDuration())
	require.Equal(t, 0.2, tpl.GetBackoff().GetJitter())
	require.Equal(t, "key", p.GetKey())

	back := templateFromProto(tpl)
	require.Equal(t, runAt, timeFromProto(p.GetRunAt()))
	require.Equal(t, map[string]string{"z": "1", "a": "2"}, back.Labels)
	require.Equal(t, PriorityHigh, back.Priority)
	require.Equal(t, &Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.2}, back.Backoff)

	zero, err := specToProto(TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)
	require.Nil(t, zero.GetRunAt(), "the zero time is unset")
	require.Nil(t, zero.GetDeadline())
	require.Nil(t, zero.GetDelay(), "a zero duration is unset")
	require.Nil(t, zero.GetTemplate().GetTimeout())
	require.Equal(t, cronoqv1.Priority_PRIORITY_NORMAL, zero.GetTemplate().GetPriority())

	// The SDK refuses only what the wire cannot carry; the rest is the
	// cluster's to check (see TestClusterRefusesSpecs).
	for _, tc := range []struct {
		spec  TaskSpec
		field string
	}{
		{TaskSpec{Template: Template{Priority: "urgent"}}, "priority"},
		{TaskSpec{Template: Template{MaxAttempts: -1}}, "max_attempts"},
	} {
		_, err := specToProto(tc.spec)
		var inv *InvalidError
		require.ErrorAs(t, err, &inv)
		require.Equal(t, tc.field, inv.Field)
		require.True(t, errors.Is(err, ErrInvalid))
	}
}

// What the SDK sends as is, the cluster refuses, naming the field; the
// refusal is final (not retried).
func TestClusterRefusesSpecs(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	ok := Template{Pool: "p", Kind: "k"}
	withTimeout, withBackoff := ok, ok
	withTimeout.Timeout = -1
	withBackoff.Backoff = &Backoff{Initial: -1}
	for i, tc := range []struct {
		spec  TaskSpec
		field string
	}{
		{TaskSpec{Template: ok, Delay: -1}, "delay"},
		{TaskSpec{Template: withTimeout}, "timeout"},
		{TaskSpec{Template: ok, RunAt: time.Unix(-5, 0)}, "run_at"},
		{TaskSpec{Template: withBackoff}, "backoff"},
		{TaskSpec{Template: ok, RunAt: time.Now().Add(time.Hour), Delay: time.Second}, "run_at"},
		{TaskSpec{Template: ok, Deadline: time.Unix(1, 0)}, "deadline"},
	} {
		_, err := c.Submit(ctx, tc.spec)
		var inv *InvalidError
		require.ErrorAs(t, err, &inv, "spec %d", i)
		require.Equal(t, tc.field, inv.Field, "spec %d", i)
		require.True(t, errors.Is(err, ErrInvalid))
		require.Equal(t, i+1, fc.Node(0).Requests(cronoqv1connect.TaskServiceSubmitProcedure), "spec %d was sent once", i)
	}
	require.Empty(t, fc.Tasks())
}

func TestTaskFromProto(t *testing.T) {
	t.Parallel()
	sub := time.Date(2026, 1, 2, 3, 4, 5, 123_456_789, time.UTC)
	task := taskFromProto(&cronoqv1.Task{
		Id: "01J", Key: "key", Template: &cronoqv1.TaskTemplate{
			Pool: "p", Kind: "k", Priority: cronoqv1.Priority_PRIORITY_LOW, MaxAttempts: 5,
			Labels: []*cronoqv1.KV{{Key: "a", Value: "1"}}, Timeout: durationpb.New(1500 * time.Millisecond),
		},
		Status: cronoqv1.Status_STATUS_RETRYING, Attempt: 2, Lease: 1<<32 | 9,
		Output: []byte("o"), Error: "e",
		SubmittedAt: timestamppb.New(sub), RunAt: timestamppb.New(sub.Add(time.Second)),
		Schedule: "nightly", Slot: timestamppb.New(sub),
		DependsOn: []string{"01A", "01B"}, DependencyPolicy: cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE,
		External: true, Workflow: "W1", Step: "load", Parent: "01P",
	})
	require.Equal(t, &Task{
		ID: "01J", Key: "key", Status: StatusRetrying,
		Template: Template{Pool: "p", Kind: "k", Priority: PriorityLow, MaxAttempts: 5,
			Labels: map[string]string{"a": "1"}, Timeout: 1500 * time.Millisecond},
		Attempt: 2, Lease: 1<<32 | 9,
		Output: []byte("o"), Error: "e", SubmittedAt: sub, RunAt: sub.Add(time.Second),
		Schedule: "nightly", Slot: sub,
		DependsOn: []string{"01A", "01B"}, DependencyPolicy: DependencyPolicyDone,
		External: true, Workflow: "W1", Step: "load", Parent: "01P",
	}, task, "task instants are Timestamps to the nanosecond, unset is the zero time")
	require.Equal(t, DependencyPolicySucceeded, taskFromProto(&cronoqv1.Task{}).DependencyPolicy,
		"a stored task always has a policy")
	require.False(t, task.Terminal())
	require.Nil(t, taskFromProto(nil))
}

func TestStatusesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{StatusScheduled, StatusQueued, StatusRunning, StatusRetrying,
		StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired, StatusBlocked, StatusParked} {
		p, err := statusToProto(s)
		require.NoError(t, err)
		require.Equal(t, s, statusFromProto(p))
		terminal := s == StatusSucceeded || s == StatusFailed || s == StatusCancelled || s == StatusExpired
		require.Equal(t, terminal, (&Task{Status: s}).Terminal(), s)
	}
	_, err := statusToProto("done")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestCompletionToProto(t *testing.T) {
	t.Parallel()
	base := errors.New("e")
	for _, tc := range []struct {
		name    string
		err     error
		outcome cronoqv1.OutcomeKind
		after   time.Duration
	}{
		{"success", nil, cronoqv1.OutcomeKind_OUTCOME_SUCCESS, 0},
		{"plain", base, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, 0},
		{"retryable", Retryable(base, 250*time.Millisecond), cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, 250 * time.Millisecond},
		{"wrapped permanent", errors.Join(errors.New("ctx"), Permanent(base)), cronoqv1.OutcomeKind_OUTCOME_PERMANENT, 0},
		{"panic", &PanicError{Value: "boom"}, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, 0},
		{"cancel", Cancel("moot"), cronoqv1.OutcomeKind_OUTCOME_CANCELLED, 0},
		{"cancel without reason", Cancel(""), cronoqv1.OutcomeKind_OUTCOME_CANCELLED, 0},
		{"wrapped cancel", fmt.Errorf("closed: %w", ErrCancelAttempt), cronoqv1.OutcomeKind_OUTCOME_CANCELLED, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := completionToProto(5, []byte("out"), tc.err, nil, nil)
			require.EqualValues(t, 5, c.GetLease())
			require.Equal(t, tc.outcome, c.GetOutcome())
			require.Equal(t, tc.after, c.GetRetryAfter().AsDuration())
			require.Equal(t, tc.after == 0, c.GetRetryAfter() == nil, "no hint is unset")
			if tc.err == nil {
				require.Equal(t, []byte("out"), c.GetOutput())
			} else {
				require.Nil(t, c.GetOutput())
				require.Equal(t, tc.err.Error(), c.GetMessage())
				require.NotEmpty(t, c.GetMessage())
			}
		})
	}
}

// TestStackExcerpt cuts a panicking goroutine's stack to the frames of the
// handler: from the call that panicked on, without the goroutine header,
// the recovery frames or the worker's own, at most panicFrames frames and
// panicBytes bytes.
func TestStackExcerpt(t *testing.T) {
	t.Parallel()
	frame := func(fn string) string { return fn + "(...)\n\t/src/" + fn + ".go:10 +0x1f\n" }
	recovery := "goroutine 7 [running]:\n" + frame("runtime/debug.Stack") + frame("github.com/cronoq/cronoq/client.(*workerRun).execute.func1") +
		"panic({0x1, 0x2})\n\t/usr/lib/go/src/runtime/panic.go:787 +0x132\n"
	worker := frame("github.com/cronoq/cronoq/client.(*workerRun).execute") + "created by github.com/cronoq/cronoq/client.(*workerRun).onGrant in goroutine 3\n\t/src/worker.go:1 +0x2\n"

	got := stackExcerpt([]byte(recovery + frame("app.parse") + frame("app.Handle") + worker))
	require.Equal(t, strings.TrimSuffix(frame("app.parse")+frame("app.Handle"), "\n"), got)

	var deep strings.Builder
	for i := range 20 {
		deep.WriteString(frame(fmt.Sprintf("app.f%d", i)))
	}
	got = stackExcerpt([]byte(recovery + deep.String() + worker))
	require.Len(t, strings.Split(got, "\n"), 2*panicFrames)
	require.True(t, strings.HasPrefix(got, "app.f0("))

	long := frame("app." + strings.Repeat("x", panicBytes))
	got = stackExcerpt([]byte(recovery + frame("app.short") + long + worker))
	require.Equal(t, strings.TrimSuffix(frame("app.short"), "\n"), got, "cut at a line end under the byte cap")

	// No panic frame: the frames after the header.
	got = stackExcerpt([]byte("goroutine 1 [running]:\n" + frame("app.a")))
	require.Equal(t, strings.TrimSuffix(frame("app.a"), "\n"), got)

	pe := &PanicError{Value: 42, Stack: []byte(recovery + frame("app.a"))}
	require.Equal(t, "panic: 42", pe.Error())
	require.Equal(t, "panic: 42\n"+strings.TrimSuffix(frame("app.a"), "\n"), pe.Report())
	require.Equal(t, "panic: 42", (&PanicError{Value: 42}).Report())
}

func TestItemError(t *testing.T) {
	t.Parallel()
	require.NoError(t, itemError("", ""))
	require.ErrorIs(t, itemError("stale_lease", "lease 3 is not current"), ErrStaleLease)
	err := itemError("invalid", "invalid payload: too large")
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, InvalidError{Field: "payload", Reason: "too large"}, *inv)
	var ae *APIError
	require.ErrorAs(t, itemError("brand_new", "x"), &ae)
	require.Equal(t, "brand_new", ae.Kind)
}

// What a job spawned goes with a success only; a child the wire cannot
// carry turns the success into a permanent failure naming it.
func TestCompletionToProtoSpawns(t *testing.T) {
	t.Parallel()
	child := Step{Name: "c", Task: TaskSpec{Template: Template{Pool: "p", Kind: "k"}, DependencyPolicy: DependencyPolicyDone,
		DependsOn: []TaskRef{ByKey("ext")}}, DependsOn: []string{"a"}}
	then := &Step{Name: "t", Task: TaskSpec{Template: Template{Pool: "p", Kind: "merge"}}}

	c := completionToProto(3, []byte("out"), nil, []Step{child}, then)
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_SUCCESS, c.GetOutcome())
	require.Equal(t, []byte("out"), c.GetOutput())
	require.Len(t, c.GetChildren(), 1)
	got := c.GetChildren()[0]
	require.Equal(t, "c", got.GetName())
	require.Equal(t, []string{"a"}, got.GetDependsOn())
	require.Equal(t, cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE, got.GetSpec().GetDependencyPolicy())
	require.Equal(t, "ext", got.GetSpec().GetDependsOn()[0].GetKey())
	require.Equal(t, "merge", c.GetThen().GetSpec().GetTemplate().GetKind())

	for _, err := range []error{errors.New("e"), Permanent(errors.New("e")), Retryable(errors.New("e"), time.Second)} {
		c := completionToProto(3, nil, err, []Step{child}, then)
		require.Empty(t, c.GetChildren(), "a failure drops them")
		require.Nil(t, c.GetThen())
	}

	bad := child
	bad.Task.Priority = "urgent"
	c = completionToProto(3, []byte("out"), nil, []Step{child, bad}, nil)
	require.Equal(t, cronoqv1.OutcomeKind_OUTCOME_PERMANENT, c.GetOutcome())
	require.Empty(t, c.GetOutput())
	require.Empty(t, c.GetChildren())
	require.Equal(t, `spawning children: invalid children[1].priority: "urgent" is not high, normal or low`, c.GetMessage())
	c = completionToProto(3, nil, nil, nil, &bad)
	require.Contains(t, c.GetMessage(), "invalid then.priority")
}
