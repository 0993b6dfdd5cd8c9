package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer collects the logs of a test, printed only when it fails.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(b.buf.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testLogger returns a logger whose output is shown only if t fails
// (everything when CLUSTER_TEST_LOG=debug, on stderr).
func testLogger(t *testing.T) hclog.Logger {
	if os.Getenv("CLUSTER_TEST_LOG") == "debug" {
		return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: os.Stderr})
	}
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last log lines:\n%s", buf.tail(300))
		}
	})
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: buf})
}

// freePort returns a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		ln.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// testCluster is a set of real nodes in this process.
type testCluster struct {
	t      *testing.T
	base   string
	logger hclog.Logger
	mu     sync.Mutex
	nodes  map[string]*Node
	cfgs   map[string]Config

	retries    atomic.Int64
	retryKinds map[string]int
}

// retryKind names the class of a retryable error, for the test log.
func retryKind(err error) string {
	var nle *NotLeaderError
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

func newTestCluster(t *testing.T) *testCluster {
	// The temporary directory is created first so that its removal, a
	// cleanup too, runs after the nodes have shut down (cleanups run last
	// registered first).
	base := t.TempDir()
	c := &testCluster{t: t, base: base, logger: testLogger(t), nodes: map[string]*Node{}, cfgs: map[string]Config{}, retryKinds: map[string]int{}}
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := make([]*Node, 0, len(c.nodes))
		for _, n := range c.nodes {
			nodes = append(nodes, n)
		}
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = n.Shutdown(ctx)
			}()
		}
		wg.Wait()
	})
	return c
}

// config returns a test configuration for node name with fixed free ports.
func (c *testCluster) config(name string) Config {
	dir := filepath.Join(c.base, name)
	return Config{
		NodeID:     name,
		DataDir:    dir,
		RaftAddr:   fmt.Sprintf("127.0.0.1:%d", freePort(c.t)),
		GossipAddr: fmt.Sprintf("127.0.0.1:%d", freePort(c.t)),
		HTTPAddr:   "127.0.0.1:8" + name[len(name)-1:] + "00",
		NoSync:     true,
		Logger:     c.logger,
	}.WithTestTimings()
}

// start starts a node with cfg and records it.
func (c *testCluster) start(cfg Config) *Node {
	c.t.Helper()
	n, err := New(cfg)
	require.NoError(c.t, err)
	c.mu.Lock()
	c.nodes[n.ID()] = n
	c.cfgs[n.ID()] = cfg
	c.mu.Unlock()
	return n
}

// stop shuts node id down (without leaving unless its config says so).
func (c *testCluster) stop(id string) {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(c.t, n.Shutdown(ctx))
}

// restart starts node id again on the same data dir and addresses.
func (c *testCluster) restart(id string) *Node {
	c.t.Helper()
	c.mu.Lock()
	cfg := c.cfgs[id]
	c.mu.Unlock()
	return c.start(cfg)
}

func (c *testCluster) node(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *testCluster) live() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, n := range c.nodes {
		out = append(out, n)
	}
	return out
}

// formCluster starts names with bootstrap-expect len(names) and one join list
// (every node, itself included) given to all.
func (c *testCluster) formCluster(names ...string) []*Node {
	c.t.Helper()
	cfgs := make([]Config, len(names))
	var join []string
	for i, name := range names {
		cfgs[i] = c.config(name)
		join = append(join, cfgs[i].GossipAddr)
	}
	var nodes []*Node
	for i := range cfgs {
		cfgs[i].BootstrapExpect = len(names)
		cfgs[i].Join = join
		nodes = append(nodes, c.start(cfgs[i]))
	}
	return nodes
}

// leader waits until exactly one live node serves as leader and every live
// node agrees on it.
func (c *testCluster) leader() *Node {
	c.t.Helper()
	var leader *Node
	require.Eventually(c.t, func() bool {
		leader = nil
		for _, n := range c.live() {
			if _, err := n.Engine(); err == nil {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range c.live() {
			if id, _ := n.Leader(); id != leader.ID() {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "no single ready leader")
	return leader
}

// engine returns the engine of the live leader, waiting for one.
func (c *testCluster) engine() (*Node, *engine.Engine) {
	c.t.Helper()
	n := c.leader()
	eng, err := n.Engine()
	require.NoError(c.t, err)
	return n, eng
}

// converged waits until every live node's FSM has applied the same last
// command with the same hash, the leader's whole log included, and returns
// that hash. (raft's own applied index may lag on followers for a trailing
// configuration entry: followers learn its commit with the next append.)
func (c *testCluster) converged() [32]byte {
	c.t.Helper()
	var h [32]byte
	require.Eventually(c.t, func() bool {
		nodes := c.live()
		var idx uint64
		for i, n := range nodes {
			ai := n.state.AppliedIndex()
			hash := n.state.Hash()
			if i == 0 {
				idx, h = ai, hash
				continue
			}
			if ai != idx || hash != h {
				return false
			}
		}
		for _, n := range nodes {
			if n.IsLeader() && n.raft.AppliedIndex() != n.raft.LastIndex() {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "nodes did not converge: %s", c.describe())
	return h
}

// peers returns the raft configuration of node n as id -> voter.
func peerMap(t *testing.T, n *Node) map[string]bool {
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
	var nle *NotLeaderError
	return errors.As(err, &nle) ||
		errors.Is(err, engine.ErrOutcomeUnknown) ||
		errors.Is(err, engine.ErrStopped) ||
		errors.Is(err, core.ErrShuttingDown) ||
		errors.Is(err, raft.ErrNotLeader) ||
		errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrShutdown)
}

// submitKey submits one keyed task, retrying on whichever node leads until
// it is acknowledged; it returns the task id.
func (c *testCluster) submitKey(ctx context.Context, key string) (string, error) {
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		var eng *engine.Engine
		for _, n := range c.live() {
			if e, err := n.Engine(); err == nil {
				eng = e
				break
			}
		}
		if eng == nil {
			c.retries.Add(1)
			c.mu.Lock()
			c.retryKinds["no-leader"]++
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(5 * time.Millisecond): // retry backoff, not synchronisation
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		subs, errs, err := eng.Submit(cctx, core.SubmitOne, []core.Spec{{Pool: "p", Kind: "k", Key: key}})
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
		c.retries.Add(1)
		c.mu.Lock()
		c.retryKinds[retryKind(err)]++
		c.mu.Unlock()
	}
}

// describe lists each live node's raft indexes and FSM hash prefix.
func (c *testCluster) describe() string {
	var b strings.Builder
	for _, n := range c.live() {
		h := n.state.Hash()
		fmt.Fprintf(&b, "%s: state=%s last=%d applied=%d fsm-applied=%d epoch=%d hash=%x; ",
			n.ID(), n.raft.State(), n.raft.LastIndex(), n.raft.AppliedIndex(), n.state.AppliedIndex(), n.state.Epoch(), h[:4])
	}
	return b.String()
}
