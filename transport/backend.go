package transport

import (
	"context"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// Backend is the node a Server fronts: its place in the cluster, the
// leader's operations, its replica of the state, and the operator's calls.
// *cluster.Node implements it; the handlers' tests use a fake.
//
// The leader's operations run on the engine of the node's current term of
// leadership; while the node does not lead (or not yet, or no longer) they
// answer a *cluster.NotLeaderError naming the leader, and nothing is done.
type Backend interface {
	// ID is the node's id.
	ID() string
	// Leader returns the id and API address of the leader, both empty when
	// none is known.
	Leader() (id, httpAddr string)
	// Leading returns the node's current term while it leads and serves.
	Leading() (cluster.Term, error)
	// Health is the node's view of itself and the cluster.
	Health() cluster.Health

	Submit(ctx context.Context, mode cluster.SubmitMode, specs []cluster.Spec) (*cluster.SubmitResult, error)
	Poll(ctx context.Context, offer cluster.Offer) ([]cluster.Grant, error)
	Heartbeat(ctx context.Context, leases []uint64) ([]error, error)
	Complete(ctx context.Context, cs []cluster.Completion) []error
	Cancel(ctx context.Context, ref cluster.TaskRef) (cluster.Cancelled, error)
	Wait(ctx context.Context, ref cluster.TaskRef) (string, error)
	CompleteExternal(ctx context.Context, ref cluster.TaskRef, out cluster.Outcome) (string, error)
	SubmitWorkflow(ctx context.Context, spec cluster.WorkflowSpec) (*cluster.WorkflowSubmitted, error)
	CancelWorkflow(ctx context.Context, ref cluster.WorkflowRef) (cluster.CancelledWorkflow, error)
	WaitWorkflow(ctx context.Context, ref cluster.WorkflowRef) (string, error)
	AddSchedule(ctx context.Context, spec cluster.ScheduleSpec) (fsm.Instant, error)
	RemoveSchedule(ctx context.Context, name string) (bool, error)
	PauseSchedule(ctx context.Context, name string, paused bool) (bool, error)
	// Subscribe subscribes to the status events of the node's replica
	// after a cursor (0: from now on); any node serves it.
	Subscribe(after uint64) *cluster.EventSub
	SetPool(ctx context.Context, ch cluster.PoolChange) (cluster.PoolInfo, error)
	Pools(ctx context.Context) ([]cluster.PoolInfo, error)
	Pool(ctx context.Context, name string) (cluster.PoolInfo, error)
	Delete(ctx context.Context, ref cluster.TaskRef) (cluster.Deleted, error)
	Retry(ctx context.Context, ref cluster.TaskRef) (cluster.Retried, error)
	CancelMany(ctx context.Context, f cluster.TaskFilter) (int, error)
	SetKind(ctx context.Context, ch cluster.KindChange) (fsm.KindSettings, error)
	Kind(ctx context.Context, pool, kind string) (fsm.KindSettings, error)

	// ConsistentRead is the replica for a linearizable read (leader only).
	// ACLs reads the replicated ACL objects of this node's replica; the
	// others change them through the leader.
	ACLs() cluster.ACLReader
	ACLBootstrap(ctx context.Context, tok fsm.ACLToken) (fsm.ACLToken, error)
	PutACLPolicy(ctx context.Context, p fsm.ACLPolicy) (fsm.ACLPolicy, error)
	PutACLToken(ctx context.Context, tok fsm.ACLToken) (fsm.ACLToken, error)
	DeleteACL(ctx context.Context, d fsm.DelACL) error

	// Subscriptions reads the durable subscriptions of this node's
	// replica; the others change them, and feed a reader, on the leader.
	Subscriptions() cluster.SubscriptionReader
	CreateSubscription(ctx context.Context, spec cluster.SubscriptionSpec) (fsm.Subscription, error)
	RemoveSubscription(ctx context.Context, name string) (bool, error)
	AckSubscription(ctx context.Context, name string, cursor uint64) (uint64, error)
	FeedSubscription(name string) (cluster.SubscriptionFeed, error)

	ConsistentRead(ctx context.Context) (fsm.Reader, error)
	// StaleRead is this node's replica, with how stale it may be.
	StaleRead() (fsm.Reader, cluster.Staleness)

	Members() []cluster.Member
	Peers() ([]cluster.Peer, error)
	RemovePeer(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) (string, error)

	// The node's own gossip encryption keyring (each answers
	// cluster.ErrGossipEncryptionDisabled without encryption).
	GossipKeyring() (cluster.GossipKeyring, error)
	InstallGossipKey(key string) (cluster.GossipKeyring, error)
	UseGossipKey(key string) (cluster.GossipKeyring, error)
	RemoveGossipKey(key string) (cluster.GossipKeyring, error)
}

var _ Backend = (*cluster.Node)(nil)
