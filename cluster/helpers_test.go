package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// testCluster is a testcluster.Cluster seen by its cluster nodes, with the
// retry bookkeeping of the failover tests.
type testCluster struct {
	*testcluster.Cluster
	t *testing.T

	retries    atomic.Int64
	mu         sync.Mutex
	retryKinds map[string]int
}

// newTestCluster returns a cluster with no node yet.
func newTestCluster(t *testing.T) *testCluster {
	return &testCluster{Cluster: testcluster.New(t, 0), t: t, retryKinds: map[string]int{}}
}

func (c *testCluster) config(name string) cluster.Config { return c.Config(name) }
func (c *testCluster) start(cfg cluster.Config) *cluster.Node {
	c.t.Helper()
	return c.Start(cfg).Node
}
func (c *testCluster) stop(id string) {
	c.t.Helper()
	c.Stop(id)
}
func (c *testCluster) restart(id string) *cluster.Node {
	c.t.Helper()
	return c.Restart(id).Node
}
func (c *testCluster) node(id string) *cluster.Node {
	if n := c.Node(id); n != nil {
		return n.Node
	}
	return nil
}

func (c *testCluster) live() []*cluster.Node {
	var out []*cluster.Node
	for _, n := range c.Live() {
		out = append(out, n.Node)
	}
	return out
}

// formCluster starts names with bootstrap-expect len(names) and one join list
// (every node, itself included) given to all.
func (c *testCluster) formCluster(names ...string) []*cluster.Node {
	c.t.Helper()
	cfgs := make([]cluster.Config, len(names))
	var join []string
	for i, name := range names {
		cfgs[i] = c.config(name)
		join = append(join, cfgs[i].GossipAddr)
	}
	var nodes []*cluster.Node
	for i := range cfgs {
		cfgs[i].BootstrapExpect = len(names)
		cfgs[i].Join = join
		nodes = append(nodes, c.start(cfgs[i]))
	}
	return nodes
}

// leader waits until exactly one live node serves as leader and every live
// node agrees on it.
func (c *testCluster) leader() *cluster.Node {
	c.t.Helper()
	l, _ := c.Leader()
	return l.Node
}

// engine returns the engine of the live leader, waiting for one.
func (c *testCluster) engine() (*cluster.Node, *engine.Engine) {
	c.t.Helper()
	n := c.leader()
	eng, err := n.TestEngine()
	require.NoError(c.t, err)
	return n, eng
}

func (c *testCluster) converged() [32]byte {
	c.t.Helper()
	return c.Converged()
}

// submitted splits a submit's answer the way the tests read it.
func submitted(res *core.SubmitResult, err error) ([]core.Submitted, []error, error) {
	if res == nil {
		return nil, nil, err
	}
	return res.Tasks, res.Errs, err
}

// retryKind names the class of a retryable error, for the test log.
func retryKind(err error) string {
	var nle *cluster.NotLeaderError
	switch {
	case errors.Is(err, engine.ErrOutcomeUnknown):
		return "outcome-unknown"
	case errors.As(err, &nle):
		return "not-leader"
	case errors.Is(err, engine.ErrStopped):
		return "stopped"
	case errors.Is(err, core.ErrShuttingDown):
		return "shutting-down"
	}
	return "other"
}

// peerMap returns the raft configuration of node n as id -> voter.
func peerMap(t *testing.T, n *cluster.Node) map[string]bool {
	ps, err := n.Peers()
	require.NoError(t, err)
	out := map[string]bool{}
	for _, p := range ps {
		out[p.ID] = p.Voter
	}
	return out
}

// retryable reports whether a submit error means "try again, maybe on the
// new leader, with the same key".
func retryable(err error) bool {
	var nle *cluster.NotLeaderError
	return errors.As(err, &nle) ||
		errors.Is(err, engine.ErrOutcomeUnknown) ||
		errors.Is(err, engine.ErrStopped) ||
		errors.Is(err, core.ErrShuttingDown) ||
		errors.Is(err, raft.ErrNotLeader) ||
		errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, cluster.ErrShutdown)
}

// submitKey submits one keyed task, retrying on whichever node leads until
// it is acknowledged; it returns the task id.
func (c *testCluster) submitKey(ctx context.Context, key string) (string, error) {
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		var leader *cluster.Node
		for _, n := range c.live() {
			if _, err := n.Leading(); err == nil {
				leader = n
				break
			}
		}
		if leader == nil {
			c.retried("no-leader")
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(5 * time.Millisecond): // retry backoff, not synchronisation
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		subs, errs, err := submitted(leader.Submit(cctx, cluster.SubmitOne, []cluster.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: key}}))
		cancel()
		if err == nil && len(errs) > 0 && errs[0] != nil {
			err = errs[0]
		}
		if err == nil {
			return subs[0].ID, nil
		}
		if !retryable(err) {
			return "", fmt.Errorf("submitting %s: %w", key, err)
		}
		c.retried(retryKind(err))
	}
}

func (c *testCluster) retried(kind string) {
	c.retries.Add(1)
	c.mu.Lock()
	c.retryKinds[kind]++
	c.mu.Unlock()
}
