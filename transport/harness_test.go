package transport_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/metrics"
	"github.com/cronoq/cronoq/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer collects the logs of a test, shown only when it fails.
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

func testLogger(t *testing.T) hclog.Logger {
	if os.Getenv("TRANSPORT_TEST_LOG") == "debug" {
		return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: os.Stderr})
	}
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last log lines:\n%s", buf.tail(200))
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
		_ = ln.Close()
		if err == nil {
			_ = pc.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// Limits of the test clusters' engines, small enough to test cheaply.
const (
	testMaxPayload = 4 << 10
	testMaxOutput  = 4 << 10
	testWindow     = 2 * time.Second
	tinyPool       = "tiny" // holds one pending task at most
)

// testNode is one node with its API server.
type testNode struct {
	id      string
	node    *cluster.Node
	srv     *transport.Server
	metrics *metrics.Metrics
	addr    string // HTTP API address
}

// testCluster is real nodes with real API servers on 127.0.0.1.
type testCluster struct {
	t      *testing.T
	logger hclog.Logger
	hold   time.Duration
	mu     sync.Mutex
	nodes  []*testNode
}

// newTestCluster starts n nodes that form one cluster (bootstrap-expect
// expect, each joining all), with the given forwarding hold timeout.
func newTestCluster(t *testing.T, n, expect int, hold time.Duration) *testCluster {
	c := &testCluster{t: t, logger: testLogger(t), hold: hold}
	t.Cleanup(c.stopAll)
	type prepared struct {
		cfg cluster.Config
		ln  net.Listener
	}
	var ps []prepared
	var join []string
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		name := fmt.Sprintf("n%d", i+1)
		cfg := cluster.Config{
			NodeID:          name,
			DataDir:         filepath.Join(t.TempDir(), name),
			RaftAddr:        fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			GossipAddr:      fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			HTTPAddr:        ln.Addr().String(),
			BootstrapExpect: expect,
			NoSync:          true,
			Logger:          c.logger,
		}.WithTestTimings()
		cfg.Engine.Core = core.Config{
			HeartbeatWindow: testWindow,
			MaxPayload:      testMaxPayload,
			MaxOutput:       testMaxOutput,
			Pools:           map[string]core.PoolConfig{tinyPool: {Bounds: core.Bounds{MaxPending: 1}}},
		}
		join = append(join, cfg.GossipAddr)
		ps = append(ps, prepared{cfg: cfg, ln: ln})
	}
	for _, p := range ps {
		p.cfg.Join = join
		c.start(p.cfg, p.ln)
	}
	return c
}

func (c *testCluster) start(cfg cluster.Config, ln net.Listener) *testNode {
	t := c.t
	m := metrics.New()
	hooks := transport.NewHooks(m)
	cfg.Engine = hooks.Engine(cfg.Engine)
	node, err := cluster.New(cfg)
	if err != nil {
		_ = ln.Close()
		require.NoError(t, err)
	}
	srv, err := transport.New(transport.Config{
		Node:            node,
		Listener:        ln,
		Logger:          c.logger.Named("transport"),
		Metrics:         m,
		Hooks:           hooks,
		HoldTimeout:     c.hold,
		HeartbeatWindow: cfg.Engine.Core.HeartbeatWindow,
		MaxPayload:      cfg.Engine.Core.MaxPayload,
		MaxOutput:       cfg.Engine.Core.MaxOutput,
	})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	tn := &testNode{id: node.ID(), node: node, srv: srv, metrics: m, addr: ln.Addr().String()}
	c.mu.Lock()
	c.nodes = append(c.nodes, tn)
	c.mu.Unlock()
	return tn
}

// stopAll stops every node the way the agent does: drain, node shutdown,
// server shutdown.
func (c *testCluster) stopAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopNode(n)
		}()
	}
	wg.Wait()
}

func stopNode(n *testNode) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n.srv.Drain()
	_ = n.node.Shutdown(ctx)
	_ = n.srv.Shutdown(ctx)
}

// leader waits until one node serves as leader and every node knows it
// with its API address; it returns the leader and the followers.
func (c *testCluster) leader() (*testNode, []*testNode) {
	c.t.Helper()
	var leader *testNode
	var followers []*testNode
	require.Eventually(c.t, func() bool {
		leader, followers = nil, nil
		c.mu.Lock()
		nodes := append([]*testNode(nil), c.nodes...)
		c.mu.Unlock()
		for _, n := range nodes {
			if _, err := n.node.Engine(); err == nil {
				if leader != nil {
					return false
				}
				leader = n
			} else {
				followers = append(followers, n)
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if id, addr := n.node.Leader(); id != leader.id || addr != leader.addr {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "no single ready leader known to all")
	return leader, followers
}

// client returns an SDK client for the given nodes, closed with the test.
func (c *testCluster) client(nodes ...*testNode) *client.Client {
	c.t.Helper()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	cl, err := client.New(addrs, client.WithTimeout(5*time.Second), client.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
