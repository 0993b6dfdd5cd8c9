package client

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

func TestSpecToProto(t *testing.T) {
	t.Parallel()
	runAt := time.Date(2026, 3, 4, 5, 6, 7, 890_123_456, time.UTC)
	deadline := runAt.Add(time.Hour)
	p, err := specToProto(TaskSpec{
		Pool: "p", Kind: "k", Key: "key", Priority: PriorityHigh, Payload: []byte("pl"),
		Labels: map[string]string{"z": "1", "a": "2"}, Tags: map[string]string{"traceparent": "00-x"},
		RunAt: runAt, Delay: 1500 * time.Microsecond, Timeout: 2 * time.Second, Deadline: deadline, MaxAttempts: 7,
		Backoff: &Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.2},
	})
	require.NoError(t, err)
	require.Equal(t, cronoqv1.Priority_PRIORITY_HIGH, p.GetPriority())
	require.Equal(t, runAt.UnixMilli(), p.GetRunAtMs(), "spec instants are Unix ms")
	require.EqualValues(t, 2, p.GetDelayMs(), "a positive duration rounds up, never to 0")
	require.EqualValues(t, 2000, p.GetTimeoutMs())
	require.Equal(t, deadline.UnixMilli(), p.GetDeadlineMs())
	require.EqualValues(t, 7, p.GetMaxAttempts())
	require.Equal(t, []*cronoqv1.KV{{Key: "a", Value: "2"}, {Key: "z", Value: "1"}}, p.GetLabels(), "sorted by key")
	require.EqualValues(t, 1000, p.GetBackoff().GetInitialMs())
	require.EqualValues(t, 60000, p.GetBackoff().GetMaxMs())

	back := specFromProto(p)
	require.Equal(t, runAt.Truncate(time.Millisecond), back.RunAt)
	require.Equal(t, map[string]string{"z": "1", "a": "2"}, back.Labels)
	require.Equal(t, PriorityHigh, back.Priority)

	zero, err := specToProto(TaskSpec{Pool: "p", Kind: "k"})
	require.NoError(t, err)
	require.Zero(t, zero.GetRunAtMs())
	require.Zero(t, zero.GetDeadlineMs())
	require.Equal(t, cronoqv1.Priority_PRIORITY_NORMAL, zero.GetPriority())

	for _, tc := range []struct {
		spec  TaskSpec
		field string
	}{
		{TaskSpec{Priority: "urgent"}, "priority"},
		{TaskSpec{Delay: -1}, "delay"},
		{TaskSpec{Timeout: -1}, "timeout"},
		{TaskSpec{RunAt: time.Unix(-5, 0)}, "run_at"},
		{TaskSpec{MaxAttempts: -1}, "max_attempts"},
		{TaskSpec{Backoff: &Backoff{Initial: -1}}, "backoff.initial"},
	} {
		_, err := specToProto(tc.spec)
		var inv *InvalidError
		require.ErrorAs(t, err, &inv)
		require.Equal(t, tc.field, inv.Field)
		require.True(t, errors.Is(err, ErrInvalid))
	}
}

func TestTaskFromProto(t *testing.T) {
	t.Parallel()
	sub := time.Date(2026, 1, 2, 3, 4, 5, 123_456_789, time.UTC)
	task := taskFromProto(&cronoqv1.Task{
		Id: "01J", Pool: "p", Kind: "k", Key: "key", Priority: cronoqv1.Priority_PRIORITY_LOW,
		Status: cronoqv1.Status_STATUS_RETRYING, Attempt: 2, MaxAttempts: 5, Lease: 1<<32 | 9,
		Labels: []*cronoqv1.KV{{Key: "a", Value: "1"}}, Output: []byte("o"), Error: "e",
		SubmittedAt: sub.UnixNano(), RunAt: sub.Add(time.Second).UnixNano(), TimeoutMs: 1500,
		Schedule: "nightly", Slot: sub.UnixNano(),
	})
	require.Equal(t, &Task{
		ID: "01J", Pool: "p", Kind: "k", Key: "key", Status: StatusRetrying, Priority: PriorityLow,
		Attempt: 2, MaxAttempts: 5, Lease: 1<<32 | 9, Labels: map[string]string{"a": "1"},
		Output: []byte("o"), Error: "e", SubmittedAt: sub, RunAt: sub.Add(time.Second),
		Timeout: 1500 * time.Millisecond, Schedule: "nightly", Slot: sub,
	}, task, "task instants are Unix ns, 0 is the zero time")
	require.False(t, task.Terminal())
	require.Nil(t, taskFromProto(nil))
}

func TestStatusesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{StatusScheduled, StatusQueued, StatusRunning, StatusRetrying,
		StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired} {
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
		after   int64
	}{
		{"success", nil, cronoqv1.OutcomeKind_OUTCOME_SUCCESS, 0},
		{"plain", base, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, 0},
		{"retryable", Retryable(base, 250*time.Millisecond), cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, 250},
		{"wrapped permanent", errors.Join(errors.New("ctx"), Permanent(base)), cronoqv1.OutcomeKind_OUTCOME_PERMANENT, 0},
		{"panic", &PanicError{Value: "boom"}, cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := completionToProto(5, []byte("out"), tc.err)
			require.EqualValues(t, 5, c.GetLease())
			require.Equal(t, tc.outcome, c.GetOutcome())
			require.Equal(t, tc.after, c.GetRetryAfterMs())
			if tc.err == nil {
				require.Equal(t, []byte("out"), c.GetOutput())
			} else {
				require.Nil(t, c.GetOutput())
				require.Equal(t, tc.err.Error(), c.GetMessage())
			}
		})
	}
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
