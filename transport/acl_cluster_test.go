package transport_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/testcluster"
	"github.com/cronoq/cronoq/transport"
)

// rawClients are the generated clients of every service for one node.
type rawClients struct {
	tasks     cronoqv1connect.TaskServiceClient
	pools     cronoqv1connect.PoolServiceClient
	workflows cronoqv1connect.WorkflowServiceClient
	schedules cronoqv1connect.ScheduleServiceClient
	workers   cronoqv1connect.WorkerServiceClient
	operator  cronoqv1connect.OperatorServiceClient
	acl       cronoqv1connect.AclServiceClient
	subs      cronoqv1connect.SubscriptionServiceClient
}

func newRawClients(addr string) rawClients {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	base := "http://" + addr
	return rawClients{
		tasks:     cronoqv1connect.NewTaskServiceClient(hc, base),
		pools:     cronoqv1connect.NewPoolServiceClient(hc, base),
		workflows: cronoqv1connect.NewWorkflowServiceClient(hc, base),
		schedules: cronoqv1connect.NewScheduleServiceClient(hc, base),
		workers:   cronoqv1connect.NewWorkerServiceClient(hc, base),
		operator:  cronoqv1connect.NewOperatorServiceClient(hc, base),
		acl:       cronoqv1connect.NewAclServiceClient(hc, base),
		subs:      cronoqv1connect.NewSubscriptionServiceClient(hc, base),
	}
}

func req[T any](msg *T, token string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if token != "" {
		r.Header().Set(transport.HeaderToken, token)
	}
	return r
}

// deniedCalls makes one call of every procedure that needs a capability,
// each naming real objects of pool "etl" (task, workflow, schedule) where
// it names any. The open procedures (ACL bootstrap, the caller's own token,
// health) are left out.
func deniedCalls(c rawClients, ids map[string]string) map[string]func(ctx context.Context, tok string) error {
	etl := &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "etl", Kind: "k"}}
	task := &cronoqv1.TaskRef{Id: ids["task"]}
	wf := &cronoqv1.WorkflowRef{Id: ids["workflow"]}
	return map[string]func(ctx context.Context, tok string) error{
		cronoqv1connect.TaskServiceSubmitProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Submit(ctx, req(&cronoqv1.SubmitRequest{Spec: etl}, tok))
			return err
		},
		cronoqv1connect.TaskServiceSubmitBatchProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.SubmitBatch(ctx, req(&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{etl}}, tok))
			return err
		},
		cronoqv1connect.TaskServiceEnqueueManyProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.EnqueueMany(ctx, req(&cronoqv1.EnqueueManyRequest{Specs: []*cronoqv1.TaskSpec{etl}}, tok))
			return err
		},
		cronoqv1connect.TaskServiceGetProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Get(ctx, req(&cronoqv1.GetRequest{Ref: task}, tok))
			return err
		},
		cronoqv1connect.TaskServiceWaitProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Wait(ctx, req(&cronoqv1.WaitRequest{Ref: task}, tok))
			return err
		},
		cronoqv1connect.TaskServiceCancelProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Cancel(ctx, req(&cronoqv1.CancelRequest{Ref: task}, tok))
			return err
		},
		cronoqv1connect.TaskServiceCompleteProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Complete(ctx, req(&cronoqv1.CompleteRequest{Ref: &cronoqv1.TaskRef{Id: ids["external"]}, Output: []byte("x")}, tok))
			return err
		},
		cronoqv1connect.TaskServiceListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.List(ctx, req(&cronoqv1.ListRequest{}, tok))
			return err
		},
		cronoqv1connect.TaskServiceCountsProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Counts(ctx, req(&cronoqv1.CountsRequest{}, tok))
			return err
		},
		cronoqv1connect.TaskServiceEventsProcedure: func(ctx context.Context, tok string) error {
			s, err := c.tasks.Events(ctx, req(&cronoqv1.EventsRequest{}, tok))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
			}
			return s.Err()
		},
		cronoqv1connect.TaskServiceDeleteProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Delete(ctx, req(&cronoqv1.DeleteRequest{Ref: task}, tok))
			return err
		},
		cronoqv1connect.TaskServiceRetryProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.Retry(ctx, req(&cronoqv1.RetryRequest{Ref: task}, tok))
			return err
		},
		cronoqv1connect.TaskServiceCancelManyProcedure: func(ctx context.Context, tok string) error {
			_, err := c.tasks.CancelMany(ctx, req(&cronoqv1.CancelManyRequest{Pool: "etl", Statuses: []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED}}, tok))
			return err
		},
		cronoqv1connect.PoolServiceListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.pools.List(ctx, req(&cronoqv1.ListPoolsRequest{}, tok))
			return err
		},
		cronoqv1connect.PoolServiceGetProcedure: func(ctx context.Context, tok string) error {
			_, err := c.pools.Get(ctx, req(&cronoqv1.GetPoolRequest{Pool: "etl"}, tok))
			return err
		},
		cronoqv1connect.PoolServiceSetProcedure: func(ctx context.Context, tok string) error {
			paused := true
			_, err := c.pools.Set(ctx, req(&cronoqv1.SetPoolRequest{Pool: "etl", Paused: &paused}, tok))
			return err
		},
		cronoqv1connect.PoolServiceWorkersProcedure: func(ctx context.Context, tok string) error {
			_, err := c.pools.Workers(ctx, req(&cronoqv1.ListWorkersRequest{Pool: "etl"}, tok))
			return err
		},
		cronoqv1connect.PoolServiceSetKindProcedure: func(ctx context.Context, tok string) error {
			n := uint32(3)
			_, err := c.pools.SetKind(ctx, req(&cronoqv1.SetKindRequest{Pool: "etl", Kind: "k", MaxAttempts: &n}, tok))
			return err
		},
		cronoqv1connect.PoolServiceGetKindProcedure: func(ctx context.Context, tok string) error {
			_, err := c.pools.GetKind(ctx, req(&cronoqv1.GetKindRequest{Pool: "etl", Kind: "k"}, tok))
			return err
		},
		cronoqv1connect.WorkflowServiceSubmitProcedure: func(ctx context.Context, tok string) error {
			_, err := c.workflows.Submit(ctx, req(&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{Name: "w",
				Steps: []*cronoqv1.WorkflowStep{{Name: "a", Spec: etl}}}}, tok))
			return err
		},
		cronoqv1connect.WorkflowServiceGetProcedure: func(ctx context.Context, tok string) error {
			_, err := c.workflows.Get(ctx, req(&cronoqv1.GetWorkflowRequest{Ref: wf}, tok))
			return err
		},
		cronoqv1connect.WorkflowServiceWaitProcedure: func(ctx context.Context, tok string) error {
			_, err := c.workflows.Wait(ctx, req(&cronoqv1.WaitWorkflowRequest{Ref: wf}, tok))
			return err
		},
		cronoqv1connect.WorkflowServiceCancelProcedure: func(ctx context.Context, tok string) error {
			_, err := c.workflows.Cancel(ctx, req(&cronoqv1.CancelWorkflowRequest{Ref: wf}, tok))
			return err
		},
		cronoqv1connect.WorkflowServiceListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.workflows.List(ctx, req(&cronoqv1.ListWorkflowsRequest{}, tok))
			return err
		},
		cronoqv1connect.ScheduleServiceAddProcedure: func(ctx context.Context, tok string) error {
			_, err := c.schedules.Add(ctx, req(&cronoqv1.AddScheduleRequest{Schedule: &cronoqv1.Schedule{Name: "s2", Cron: "@hourly",
				Task: &cronoqv1.TaskTemplate{Pool: "etl", Kind: "k"}}}, tok))
			return err
		},
		cronoqv1connect.ScheduleServiceListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.schedules.List(ctx, req(&cronoqv1.ListSchedulesRequest{}, tok))
			return err
		},
		cronoqv1connect.ScheduleServiceRemoveProcedure: func(ctx context.Context, tok string) error {
			_, err := c.schedules.Remove(ctx, req(&cronoqv1.RemoveScheduleRequest{Name: "yearly"}, tok))
			return err
		},
		cronoqv1connect.ScheduleServicePauseProcedure: func(ctx context.Context, tok string) error {
			_, err := c.schedules.Pause(ctx, req(&cronoqv1.PauseScheduleRequest{Name: "yearly", Paused: true}, tok))
			return err
		},
		cronoqv1connect.WorkerServiceConnectProcedure: func(ctx context.Context, tok string) error {
			s := c.workers.Connect(ctx)
			if tok != "" {
				s.RequestHeader().Set(transport.HeaderToken, tok)
			}
			hello := &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: "etl"}}}
			if err := s.Send(hello); err != nil {
				_, rerr := s.Receive()
				return rerr
			}
			_, err := s.Receive()
			_ = s.CloseRequest()
			_ = s.CloseResponse()
			return err
		},
		cronoqv1connect.OperatorServiceMembersProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.Members(ctx, req(&cronoqv1.MembersRequest{}, tok))
			return err
		},
		cronoqv1connect.OperatorServicePeersProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.Peers(ctx, req(&cronoqv1.PeersRequest{}, tok))
			return err
		},
		cronoqv1connect.OperatorServiceRemovePeerProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.RemovePeer(ctx, req(&cronoqv1.RemovePeerRequest{Id: ids["follower"]}, tok))
			return err
		},
		cronoqv1connect.OperatorServiceTransferLeadershipProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.TransferLeadership(ctx, req(&cronoqv1.TransferLeadershipRequest{}, tok))
			return err
		},
		cronoqv1connect.OperatorServiceSnapshotSaveProcedure: func(ctx context.Context, tok string) error {
			st, err := c.operator.SnapshotSave(ctx, req(&cronoqv1.SnapshotSaveRequest{}, tok))
			if err != nil {
				return err
			}
			defer st.Close()
			for st.Receive() {
			}
			return st.Err()
		},
		cronoqv1connect.OperatorServiceSnapshotRestoreProcedure: func(ctx context.Context, tok string) error {
			st := c.operator.SnapshotRestore(ctx)
			if tok != "" {
				st.RequestHeader().Set(transport.HeaderToken, tok)
			}
			_ = st.Send(&cronoqv1.SnapshotChunk{Data: []byte("CRQB not a backup")})
			_, err := st.CloseAndReceive()
			return err
		},
		cronoqv1connect.OperatorServiceKeyringListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.KeyringList(ctx, req(&cronoqv1.KeyringListRequest{}, tok))
			return err
		},
		cronoqv1connect.OperatorServiceKeyringInstallProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.KeyringInstall(ctx, req(&cronoqv1.KeyringInstallRequest{Key: "AAAAAAAAAAAAAAAAAAAAAA=="}, tok))
			return err
		},
		cronoqv1connect.OperatorServiceKeyringUseProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.KeyringUse(ctx, req(&cronoqv1.KeyringUseRequest{Key: "AAAAAAAAAAAAAAAAAAAAAA=="}, tok))
			return err
		},
		cronoqv1connect.OperatorServiceKeyringRemoveProcedure: func(ctx context.Context, tok string) error {
			_, err := c.operator.KeyringRemove(ctx, req(&cronoqv1.KeyringRemoveRequest{Key: "AAAAAAAAAAAAAAAAAAAAAA=="}, tok))
			return err
		},
		cronoqv1connect.AclServicePolicyApplyProcedure: func(ctx context.Context, tok string) error {
			_, err := c.acl.PolicyApply(ctx, req(&cronoqv1.AclPolicyApplyRequest{Policy: &cronoqv1.AclPolicy{Name: "mine", Rules: `pool "*" { policy = "write" }`}}, tok))
			return err
		},
		cronoqv1connect.AclServicePolicyListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.acl.PolicyList(ctx, req(&cronoqv1.AclPolicyListRequest{}, tok))
			return err
		},
		cronoqv1connect.AclServicePolicyGetProcedure: func(ctx context.Context, tok string) error {
			_, err := c.acl.PolicyGet(ctx, req(&cronoqv1.AclPolicyGetRequest{Name: "pools"}, tok))
			return err
		},
		cronoqv1connect.AclServicePolicyDeleteProcedure: func(ctx context.Context, tok string) error {
			_, err := c.acl.PolicyDelete(ctx, req(&cronoqv1.AclPolicyDeleteRequest{Name: "pools"}, tok))
			return err
		},
		cronoqv1connect.AclServiceTokenCreateProcedure: func(ctx context.Context, tok string) error {
			_, err := c.acl.TokenCreate(ctx, req(&cronoqv1.AclTokenCreateRequest{Policies: []string{"pools"}}, tok))
			return err
		},
		cronoqv1connect.AclServiceTokenListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.acl.TokenList(ctx, req(&cronoqv1.AclTokenListRequest{}, tok))
			return err
		},
		cronoqv1connect.AclServiceTokenRevokeProcedure: func(ctx context.Context, tok string) error {
			_, err := c.acl.TokenRevoke(ctx, req(&cronoqv1.AclTokenRevokeRequest{Accessor: ids["accessor"]}, tok))
			return err
		},
		cronoqv1connect.SubscriptionServiceCreateProcedure: func(ctx context.Context, tok string) error {
			_, err := c.subs.Create(ctx, req(&cronoqv1.CreateSubscriptionRequest{Subscription: &cronoqv1.Subscription{Name: "mine", Pools: []string{"etl"}}}, tok))
			return err
		},
		cronoqv1connect.SubscriptionServiceListProcedure: func(ctx context.Context, tok string) error {
			_, err := c.subs.List(ctx, req(&cronoqv1.ListSubscriptionsRequest{}, tok))
			return err
		},
		cronoqv1connect.SubscriptionServiceGetProcedure: func(ctx context.Context, tok string) error {
			_, err := c.subs.Get(ctx, req(&cronoqv1.GetSubscriptionRequest{Name: ids["subscription"]}, tok))
			return err
		},
		cronoqv1connect.SubscriptionServiceRemoveProcedure: func(ctx context.Context, tok string) error {
			_, err := c.subs.Remove(ctx, req(&cronoqv1.RemoveSubscriptionRequest{Name: ids["subscription"]}, tok))
			return err
		},
		cronoqv1connect.SubscriptionServiceReadProcedure: func(ctx context.Context, tok string) error {
			s, err := c.subs.Read(ctx, req(&cronoqv1.ReadSubscriptionRequest{Name: ids["subscription"]}, tok))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
			}
			return s.Err()
		},
		cronoqv1connect.SubscriptionServiceAckProcedure: func(ctx context.Context, tok string) error {
			_, err := c.subs.Ack(ctx, req(&cronoqv1.AckSubscriptionRequest{Name: ids["subscription"], Cursor: 1}, tok))
			return err
		},
	}
}

// openProcedures need no capability: the one ACL bootstrap, the caller's
// own token, and health (which GET /v1/health serves to anyone).
var openProcedures = map[string]bool{
	cronoqv1connect.AclServiceBootstrapProcedure:   true,
	cronoqv1connect.AclServiceTokenSelfProcedure:   true,
	cronoqv1connect.OperatorServiceHealthProcedure: true,
}

// Every call that needs a capability, sent to a follower and to the leader
// with no token and with a token that lacks what it needs, is refused with
// permission denied, and the replicated state is unchanged.
func TestACLDeniesEveryCall(t *testing.T) {
	const root = "11111111-2222-3333-4444-555555555555"
	c := testcluster.New(t, 3, testcluster.ACLs(root))
	leader, followers := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.Client()

	// Objects of pool "etl" for the calls to name, and two tokens: one
	// with every pool but nothing else, one with operator and acl but no
	// pool.
	_, err := cl.ACLPolicyApply(ctx, client.ACLPolicy{Name: "pools", Rules: `pool "*" { policy = "write" }`})
	require.NoError(t, err)
	_, err = cl.ACLPolicyApply(ctx, client.ACLPolicy{Name: "cluster", Rules: "operator = \"write\"\nacl = \"write\""})
	require.NoError(t, err)
	pools, err := cl.ACLTokenCreate(ctx, "pools", []string{"pools"}, false)
	require.NoError(t, err)
	ops, err := cl.ACLTokenCreate(ctx, "cluster", []string{"cluster"}, false)
	require.NoError(t, err)
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "k"}})
	require.NoError(t, err)
	ext, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "approve"}, External: true})
	require.NoError(t, err)
	wf, err := cl.SubmitWorkflow(ctx, client.WorkflowSpec{Name: "w", Steps: []client.Step{{Name: "a", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "k"}}}}})
	require.NoError(t, err)
	_, err = cl.AddSchedule(ctx, client.Schedule{Name: "yearly", Cron: "0 0 1 1 *", Task: client.Template{Pool: "etl", Kind: "k"}})
	require.NoError(t, err)
	_, err = cl.CreateSubscription(ctx, client.SubscriptionSpec{Name: "etl-ends", Pools: []string{"etl"}})
	require.NoError(t, err)
	task, err := cl.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.NotEmpty(t, task.Principal, "the task records the token that submitted it")

	ids := map[string]string{"task": sub.ID, "external": ext.ID, "workflow": wf.ID, "follower": followers[0].ID, "accessor": pools.Accessor,
		"subscription": "etl-ends"}
	before := c.Converged()

	for _, target := range []*testcluster.Node{followers[0], leader} {
		calls := deniedCalls(newRawClients(target.Addr()), ids)
		services := cronoqv1.File_cronoq_v1_cronoq_proto.Services()
		for i := range services.Len() {
			sd := services.Get(i)
			for j := range sd.Methods().Len() {
				proc := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				if openProcedures[proc] {
					continue
				}
				call, ok := calls[proc]
				require.True(t, ok, "no denial case for %s", proc)
				lacking := ops.Secret
				if sd.Name() == "OperatorService" || sd.Name() == "AclService" {
					lacking = pools.Secret
				}
				for _, tok := range []string{"", lacking} {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := call(cctx, tok)
					cancel()
					require.Error(t, err, "%s at %s with token %q", proc, target.ID, tok)
					require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%s at %s with token %q: %v", proc, target.ID, tok, err)
					require.Contains(t, err.Error(), "permission denied", proc)
					require.Equal(t, apierr.KindPermissionDenied, apierr.Kind(err), proc)
				}
			}
		}
	}
	require.Equal(t, before, c.Converged(), "a denied call changed the replicated state")
}

// A follower relays a worker stream to the leader with the caller's token:
// the leader checks it again, so a token that may work on the pool is
// welcomed and one that may only work on another pool is refused.
func TestACLRelayedWorkerStream(t *testing.T) {
	const root = "11111111-2222-3333-4444-555555555555"
	c := testcluster.New(t, 3, testcluster.ACLs(root))
	leader, followers := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client()
	_, err := cl.ACLPolicyApply(ctx, client.ACLPolicy{Name: "etl-worker", Rules: `pool "etl" { policy = "work" }`})
	require.NoError(t, err)
	tok, err := cl.ACLTokenCreate(ctx, "etl worker", []string{"etl-worker"}, false)
	require.NoError(t, err)

	connectAs := func(pool string) (*cronoqv1.ServerMessage, error) {
		s := newRawClients(followers[0].Addr()).workers.Connect(ctx)
		s.RequestHeader().Set(transport.HeaderToken, tok.Secret)
		defer func() {
			_ = s.CloseRequest()
			_ = s.CloseResponse()
		}()
		if err := s.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: "w", Pool: pool}}}); err != nil {
			_, rerr := s.Receive()
			return nil, rerr
		}
		return s.Receive()
	}
	msg, err := connectAs("etl")
	require.NoError(t, err)
	require.Equal(t, leader.ID, msg.GetWelcome().GetNode())
	_, err = connectAs("other")
	require.Equal(t, apierr.KindPermissionDenied, apierr.Kind(err), "%v", err)
}
