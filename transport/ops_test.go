package transport

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

const opsAt fsm.Instant = 1_700_000_000_000_000_000

// TestRetryAndCancelManyHandlers holds the handlers to what the leader
// answers: a retry answers the task as stored, attempts included; a
// refusal of a live task is failed_precondition (not_retryable); a cancel
// by filter passes the filter on and answers the count, and a filter
// without a pool or with an unknown status is refused before the leader.
func TestRetryAndCancelManyHandlers(t *testing.T) {
	b := newFakeBackend()
	hc, base := startFake(t, b, nil)
	tasks := cronoqv1connect.NewTaskServiceClient(hc, base)
	ctx := context.Background()
	l := uint64(3)<<32 | 1
	b.apply(t, opsAt, fsm.Mutation{Insert: &fsm.Task{ID: "t1", Template: fsm.Template{Pool: "etl", Kind: "k"}, Status: fsm.StatusQueued, SubmittedAt: opsAt}},
		fsm.Mutation{Start: &fsm.Start{ID: "t1", Attempt: 1, Lease: l, Worker: "w1", At: opsAt + 1}},
		fsm.Mutation{Finish: &fsm.Finish{ID: "t1", Lease: l, Status: fsm.StatusFailed, Error: "boom", At: opsAt + 2, Outcome: fsm.AttemptFailed}})
	b.retry = func(ref cluster.TaskRef) (cluster.Retried, error) {
		if ref.ID != "t1" {
			return cluster.Retried{}, fmt.Errorf("task %s is queued: %w", ref.ID, cluster.ErrNotRetryable)
		}
		return cluster.Retried{ID: "t1"}, b.applyErr(opsAt+3, fsm.Mutation{Requeue: &fsm.Requeue{ID: "t1", At: opsAt + 3}})
	}
	resp, err := tasks.Retry(ctx, connect.NewRequest(&cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: "t1"}}))
	require.NoError(t, err)
	got := resp.Msg.GetTask()
	require.Equal(t, cronoqv1.Status_STATUS_QUEUED, got.GetStatus())
	require.Equal(t, uint32(1), got.GetAttemptBase())
	require.Len(t, got.GetAttempts(), 1)
	a := got.GetAttempts()[0]
	require.Equal(t, uint32(1), a.GetAttempt())
	require.Equal(t, "w1", a.GetWorker())
	require.Equal(t, l, a.GetLease())
	require.Equal(t, uint64(3), a.GetEpoch())
	require.Equal(t, cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED, a.GetOutcome())
	require.Equal(t, "boom", a.GetError())
	require.Equal(t, (opsAt + 1).Time(), a.GetStartedAt().AsTime())
	require.Equal(t, (opsAt + 2).Time(), a.GetFinishedAt().AsTime())

	_, err = tasks.Retry(ctx, connect.NewRequest(&cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: "t2"}}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Equal(t, apierr.KindNotRetryable, apierr.Kind(err))

	var asked []cluster.TaskFilter
	b.cancelMany = func(f cluster.TaskFilter) (int, error) {
		asked = append(asked, f)
		return 1234, nil
	}
	cm, err := tasks.CancelMany(ctx, connect.NewRequest(&cronoqv1.CancelManyRequest{Pool: "etl",
		Statuses: []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_RUNNING}, Kinds: []string{"a", "b"}}))
	require.NoError(t, err)
	require.Equal(t, int64(1234), cm.Msg.GetCancelled())
	require.Equal(t, []cluster.TaskFilter{{Pool: "etl", Statuses: []fsm.Status{fsm.StatusQueued, fsm.StatusRunning}, Kinds: []string{"a", "b"}}}, asked)

	_, err = tasks.CancelMany(ctx, connect.NewRequest(&cronoqv1.CancelManyRequest{Statuses: []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED}}))
	field, _ := apierr.Field(err)
	require.Equal(t, "pool", field)
	_, err = tasks.CancelMany(ctx, connect.NewRequest(&cronoqv1.CancelManyRequest{Pool: "etl", Statuses: []cronoqv1.Status{99}}))
	field, _ = apierr.Field(err)
	require.Equal(t, "statuses", field)
	require.Len(t, asked, 1, "refused filters never reach the leader")
}

// TestRetryAndCancelManyNeedWriteOnThePool: a token that writes pool etl
// retries and cancels in etl only; one that only reads etl does neither.
func TestRetryAndCancelManyNeedWriteOnThePool(t *testing.T) {
	b := newFakeBackend()
	hc, base := startFake(t, b, func(s *Server) {
		s.cfg.ACLs = true
		s.acl.enabled = true
	})
	acls := cronoqv1connect.NewAclServiceClient(hc, base)
	tasks := cronoqv1connect.NewTaskServiceClient(hc, base)
	ctx := context.Background()
	boot, err := acls.Bootstrap(ctx, withToken(&cronoqv1.AclBootstrapRequest{}, ""))
	require.NoError(t, err)
	root := boot.Msg.GetToken().GetSecret()
	token := func(name, rules string) string {
		_, err := acls.PolicyApply(ctx, withToken(&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: name, Rules: rules}}, root))
		require.NoError(t, err)
		tok, err := acls.TokenCreate(ctx, withToken(&cronoqv1.AclTokenCreateRequest{Name: name, Policies: []string{name}}, root))
		require.NoError(t, err)
		return tok.Msg.GetToken().GetSecret()
	}
	writer := token("etl-writer", `pool "etl" { policy = "write" }`+"\n"+`pool "*" { policy = "read" }`)
	reader := token("etl-reader", `pool "etl" { policy = "work" }`)
	for _, id := range []string{"e1", "b1"} {
		pool := map[string]string{"e1": "etl", "b1": "billing"}[id]
		b.apply(t, opsAt, fsm.Mutation{Insert: &fsm.Task{ID: id, Template: fsm.Template{Pool: pool, Kind: "k"}, Status: fsm.StatusQueued, SubmittedAt: opsAt}},
			fsm.Mutation{Finish: &fsm.Finish{ID: id, Status: fsm.StatusCancelled, At: opsAt}})
	}
	b.retry = func(ref cluster.TaskRef) (cluster.Retried, error) { return cluster.Retried{ID: ref.ID}, nil }
	b.cancelMany = func(f cluster.TaskFilter) (int, error) { return 0, nil }
	queued := []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED}

	_, err = tasks.Retry(ctx, withToken(&cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: "e1"}}, writer))
	require.NoError(t, err)
	_, err = tasks.CancelMany(ctx, withToken(&cronoqv1.CancelManyRequest{Pool: "etl", Statuses: queued}, writer))
	require.NoError(t, err)
	_, err = tasks.Retry(ctx, withToken(&cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: "b1"}}, writer))
	requireDenied(t, err, "retry in a pool it only reads")
	_, err = tasks.CancelMany(ctx, withToken(&cronoqv1.CancelManyRequest{Pool: "billing", Statuses: queued}, writer))
	requireDenied(t, err, "cancel in a pool it only reads")
	_, err = tasks.Retry(ctx, withToken(&cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: "e1"}}, reader))
	requireDenied(t, err, "retry with work on the pool")
	_, err = tasks.CancelMany(ctx, withToken(&cronoqv1.CancelManyRequest{Pool: "etl", Statuses: queued}, reader))
	requireDenied(t, err, "cancel with work on the pool")
	require.Equal(t, []string{"retry", "cancel-many"}, b.calls)
}
