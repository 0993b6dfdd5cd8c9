package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client/clienttest"
)

const (
	resizeSchema = `{"type": "object", "required": ["width"], "properties": {"width": {"type": "integer", "minimum": 1}}}`
	resultSchema = `{"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}`
)

func TestKinds(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2, 1)
	// Only the follower is known: kind calls need the leader.
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)

	// A kind nobody set has empty settings.
	k, err := c.GetKind(ctx, "p", "resize")
	require.NoError(t, err)
	require.Equal(t, &KindSettings{Pool: "p", Kind: "resize"}, k)
	_, err = c.GetKind(ctx, "", "resize")
	require.ErrorIs(t, err, ErrInvalid)

	k, err = c.SetKind(ctx, "p", "resize", KindChange{
		PayloadSchema: new([]byte(resizeSchema)),
		OutputSchema:  new([]byte(resultSchema)),
		Timeout:       new(30 * time.Second),
		MaxAttempts:   new(5),
		Backoff:       &Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.1},
	})
	require.NoError(t, err)
	want := &KindSettings{
		Pool: "p", Kind: "resize",
		PayloadSchema: []byte(resizeSchema), OutputSchema: []byte(resultSchema),
		Timeout: 30 * time.Second, MaxAttempts: 5, Backoff: &Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.1},
	}
	require.Equal(t, want, k)
	k, err = c.GetKind(ctx, "p", "resize")
	require.NoError(t, err)
	require.Equal(t, want, k)

	// The kind's settings are the pool's: it is listed, set by an operator.
	p, err := c.GetPool(ctx, "p")
	require.NoError(t, err)
	require.True(t, p.Replicated)
	// And a change of the pool keeps them.
	_, err = c.SetPool(ctx, "p", PoolChange{MaxRunning: new(int64(2))})
	require.NoError(t, err)
	k, err = c.GetKind(ctx, "p", "resize")
	require.NoError(t, err)
	require.Equal(t, want, k)
	other, err := c.GetKind(ctx, "q", "resize")
	require.NoError(t, err)
	require.Equal(t, &KindSettings{Pool: "q", Kind: "resize"}, other, "per pool")

	// Only what a change sets changes; empty schemas, a zero timeout and an
	// empty backoff remove them.
	k, err = c.SetKind(ctx, "p", "resize", KindChange{OutputSchema: new([]byte{}), Timeout: new(time.Duration(0)), Backoff: &Backoff{}})
	require.NoError(t, err)
	require.Equal(t, &KindSettings{Pool: "p", Kind: "resize", PayloadSchema: []byte(resizeSchema), MaxAttempts: 5}, k)
	k, err = c.SetKind(ctx, "p", "resize", KindChange{PayloadSchema: new([]byte(nil)), MaxAttempts: new(0)})
	require.NoError(t, err)
	require.Equal(t, &KindSettings{Pool: "p", Kind: "resize"}, k)

	reqs := fc.Requests(cronoqv1connect.PoolServiceSetKindProcedure)
	last := reqs[len(reqs)-1].(*cronoqv1.SetKindRequest)
	require.NotNil(t, last.PayloadSchema, "an empty schema is sent, present")
	require.Nil(t, last.OutputSchema)
	require.Nil(t, last.GetTimeout())
	require.Nil(t, last.GetBackoff())
}

func TestSetKindRefusals(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0, clienttest.WithPools("p"))
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		pool   string
		kind   string
		change KindChange
		field  string
		reason string
	}{
		{"not JSON", "p", "k", KindChange{PayloadSchema: new([]byte("{"))}, "payload_schema", "not JSON"},
		{"not a schema", "p", "k", KindChange{OutputSchema: new([]byte(`{"type": 5}`))}, "output_schema", "not a valid schema"},
		{"external ref", "p", "k", KindChange{PayloadSchema: new([]byte(`{"$ref": "https://example.com/s.json"}`))},
			"payload_schema", "may not refer to other documents"},
		{"negative timeout", "p", "k", KindChange{Timeout: new(-time.Second)}, "timeout", "must not be negative"},
		{"backoff", "p", "k", KindChange{Backoff: &Backoff{Initial: time.Minute, Max: time.Second}}, "backoff", "max delay"},
		{"empty kind", "p", "", KindChange{MaxAttempts: new(1)}, "kind", "must not be empty"},
		{"unknown pool", "nope", "k", KindChange{MaxAttempts: new(1)}, "pool", "unknown pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.SetKind(ctx, tc.pool, tc.kind, tc.change)
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, tc.field, inv.Field)
			require.Contains(t, inv.Reason, tc.reason)
		})
	}
	k, err := c.GetKind(ctx, "p", "k")
	require.NoError(t, err)
	require.Equal(t, &KindSettings{Pool: "p", Kind: "k"}, k, "nothing was changed")
	_, err = c.GetKind(ctx, "nope", "k")
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "pool", inv.Field)

	// Refused by the SDK itself, nothing sent.
	sent := fc.Calls(cronoqv1connect.PoolServiceSetKindProcedure)
	_, err = c.SetKind(ctx, "p", "k", KindChange{MaxAttempts: new(-1)})
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "max_attempts", inv.Field)
	require.Equal(t, sent, fc.Calls(cronoqv1connect.PoolServiceSetKindProcedure))
}

func TestSetKindRetried(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	fc.LoseAnswers(cronoqv1connect.PoolServiceSetKindProcedure, 1, apierr.OutcomeUnknown("leadership lost while committing"))
	k, err := c.SetKind(ctx, "p", "k", KindChange{MaxAttempts: new(3)})
	require.NoError(t, err)
	require.Equal(t, 3, k.MaxAttempts)
	require.Equal(t, 2, fc.Calls(cronoqv1connect.PoolServiceSetKindProcedure), "one lost answer, one retry")
}

func TestKindSchemasAndDefaults(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	ctx := testCtx(t)
	_, err := c.SetPool(ctx, "p", PoolChange{MaxAttempts: new(7), Backoff: &Backoff{Initial: 2 * time.Second}})
	require.NoError(t, err)
	_, err = c.SetKind(ctx, "p", "resize", KindChange{
		PayloadSchema: new([]byte(resizeSchema)),
		OutputSchema:  new([]byte(resultSchema)),
		Timeout:       new(time.Minute),
		MaxAttempts:   new(2),
	})
	require.NoError(t, err)

	// A payload that fails the schema is refused, naming the failing path.
	_, err = c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "resize", Payload: []byte(`{"width": 0}`)}})
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "payload", inv.Field)
	require.Equal(t, `does not match the schema of kind "resize": at '/width': minimum: got 0, want 1`, inv.Reason)
	_, err = c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "resize", Payload: []byte(`not json`)}})
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "payload", inv.Field)
	require.Contains(t, inv.Reason, "not JSON")
	// Other pools and kinds are not checked.
	_, err = c.Submit(ctx, TaskSpec{Template: Template{Pool: "q", Kind: "resize", Payload: []byte(`{"width": 0}`)}})
	require.NoError(t, err)

	// The kind's defaults come before the pool's, the template's before
	// the kind's.
	sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "resize", Payload: []byte(`{"width": 3}`)}})
	require.NoError(t, err)
	task, err := c.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, time.Minute, task.Timeout)
	require.Equal(t, 2, task.MaxAttempts)
	require.Equal(t, 2*time.Second, task.Backoff.Initial, "the pool's")
	sub2, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "resize", Payload: []byte(`{"width": 4}`),
		Timeout: time.Second, MaxAttempts: 9}})
	require.NoError(t, err)
	task2, err := c.Get(ctx, sub2.ID)
	require.NoError(t, err)
	require.Equal(t, time.Second, task2.Timeout)
	require.Equal(t, 9, task2.MaxAttempts)
	sub3, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "other"}})
	require.NoError(t, err)
	task3, err := c.Get(ctx, sub3.ID)
	require.NoError(t, err)
	require.Zero(t, task3.Timeout)
	require.Equal(t, 7, task3.MaxAttempts, "the pool's")
	_, err = c.Cancel(ctx, sub2.ID)
	require.NoError(t, err)
	_, err = c.Cancel(ctx, sub3.ID)
	require.NoError(t, err)

	// An output that fails the output schema fails the task for good.
	w, err := c.NewWorker(WorkerConfig{Pool: "p", ID: "w1", Concurrency: 1,
		Handlers: map[string]Handler{"resize": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return []byte(`{"url": 1}`), nil })}})
	require.NoError(t, err)
	runWorker(t, w)
	task, err = c.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, StatusFailed, task.Status)
	require.Equal(t, 1, task.Attempt, "not retried")
	require.Equal(t, `output does not match the schema of kind "resize": at '/url': got number, want string`, task.Error)
}
