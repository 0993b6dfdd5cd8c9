// Package testcluster runs real cronoq clusters for tests: nodes with real
// raft (raft-boltdb in a temporary directory), real gossip and real API
// servers, in the test's process, on loopback addresses of their own. The
// cluster, transport and end-to-end tests share it.
//
// Addresses: every node gets a loopback IP no other node of the process has
// (127.A.B.C, A.B from the process id, C counting up) and listens on the
// standard ports there, so that no port is ever handed to two listeners: a
// restarted node binds the addresses it had, which nobody else uses, and
// test processes running at the same time use other IPs.
package testcluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/metrics"
	"github.com/cronoq/cronoq/transport"
	"github.com/cronoq/cronoq/ui"
)

// The ports every node listens on, on its own IP (the agent's defaults).
const (
	HTTPPort   = 8650
	RaftPort   = 8651
	GossipPort = 8652
)

// Addrs are the addresses of one node.
type Addrs struct {
	IP     string
	HTTP   string
	Raft   string
	Gossip string
}

var (
	ipMu   sync.Mutex
	ipNext int // counts the IPs handed out by this process
)

// NewAddrs returns the addresses of a new node on a loopback IP that no
// other node of this process has had.
func NewAddrs() Addrs {
	ipMu.Lock()
	defer ipMu.Unlock()
	ipNext++
	pid := os.Getpid()
	// 127.A.B.C: A never 0 (127.0.0.0/16 is where people run things), C in
	// 1..250, B moving on once C wraps.
	n := ipNext - 1
	a := 1 + (pid>>8)%254
	b := (pid + n/250) % 256
	c := 1 + n%250
	ip := fmt.Sprintf("127.%d.%d.%d", a, b, c)
	return Addrs{
		IP:     ip,
		HTTP:   net.JoinHostPort(ip, fmt.Sprint(HTTPPort)),
		Raft:   net.JoinHostPort(ip, fmt.Sprint(RaftPort)),
		Gossip: net.JoinHostPort(ip, fmt.Sprint(GossipPort)),
	}
}

// syncBuffer collects the logs of a test.
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

// Logger returns a logger whose output is shown only if t fails (all of it,
// at debug level, on stderr when CRONOQ_TEST_LOG=debug).
func Logger(t testing.TB) hclog.Logger {
	if os.Getenv("CRONOQ_TEST_LOG") == "debug" {
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

// Node is one node of a test cluster: the cluster node and its API server.
type Node struct {
	ID      string
	Addrs   Addrs
	Config  cluster.Config
	Node    *cluster.Node
	Server  *transport.Server
	Metrics *metrics.Metrics
	// Console is the node's web console (with the Console option).
	Console *ui.Console

	hold time.Duration
}

// Addr is the node's API address.
func (n *Node) Addr() string { return n.Addrs.HTTP }

// Cluster is a set of nodes started by a test. Every node is stopped when
// the test ends.
type Cluster struct {
	t      testing.TB
	base   string
	logger hclog.Logger
	opts   options

	mu    sync.Mutex
	nodes []*Node // live nodes, in start order
	all   map[string]*Node
}

type options struct {
	hold           time.Duration
	expect         int
	configure      func(i int, cfg *cluster.Config)
	ca             *CA // TLS
	verifyIncoming bool
	// aclSecret, when set, turns ACLs on with this initial management
	// token.
	aclSecret string
	// tracer, when set, is every API server's tracer provider.
	tracer trace.TracerProvider
	// console serves the web console on every node.
	console bool
}

// Option tunes New.
type Option func(*options)

// Hold sets the API servers' hold timeout while no leader is known
// (default 5s).
func Hold(d time.Duration) Option { return func(o *options) { o.hold = d } }

// Expect sets the nodes' bootstrap-expect (default: the number of nodes).
func Expect(n int) Option { return func(o *options) { o.expect = n } }

// Configure changes the configuration of node i (0-based) before it starts.
func Configure(fn func(i int, cfg *cluster.Config)) Option {
	return func(o *options) { o.configure = fn }
}

// Tracing gives every node's API server tp as its tracer provider: the
// nodes trace the tasks whose tags carry a traceparent.
func Tracing(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// ACLs turns ACLs on for every node, with secret as the initial
// management token (see Cluster.Client's token).
func ACLs(secret string) Option { return func(o *options) { o.aclSecret = secret } }

// Console serves the web console under /ui/ on every node, as the agent
// does: its pages call the node's own API.
func Console() Option { return func(o *options) { o.console = true } }

// New starts n nodes that form one cluster: bootstrap-expect n, every node
// joining all, short test timings, no fsync. With n = 0 it starts none
// (start them with Start).
func New(t testing.TB, n int, opts ...Option) *Cluster {
	// The temporary directory is created first so that its removal, a
	// cleanup too, runs after the nodes have stopped (cleanups run last
	// registered first).
	base := t.TempDir()
	c := &Cluster{t: t, base: base, logger: Logger(t), all: map[string]*Node{}}
	c.opts = options{hold: transport.DefaultHoldTimeout, expect: n}
	for _, o := range opts {
		o(&c.opts)
	}
	t.Cleanup(c.stopAll)
	cfgs := make([]cluster.Config, n)
	var join []string
	for i := range cfgs {
		cfgs[i] = c.Config(fmt.Sprintf("n%d", i+1))
		cfgs[i].BootstrapExpect = c.opts.expect
		join = append(join, cfgs[i].GossipAddr)
	}
	for i := range cfgs {
		cfgs[i].Join = join
		if c.opts.configure != nil {
			c.opts.configure(i, &cfgs[i])
		}
		c.Start(cfgs[i])
	}
	return c
}

// Config returns the configuration of a new node named name: its own
// addresses, a data dir under the test's directory, test timings, no
// fsync, and the test's logger. It joins nothing.
func (c *Cluster) Config(name string) cluster.Config {
	a := NewAddrs()
	cfg := cluster.Config{
		NodeID:     name,
		DataDir:    filepath.Join(c.base, name),
		RaftAddr:   a.Raft,
		GossipAddr: a.Gossip,
		HTTPAddr:   a.HTTP,
		NoSync:     true,
		Logger:     c.logger,

		ACLInitialManagement: c.opts.aclSecret,
	}.WithTestTimings()
	if c.opts.ca != nil {
		cfg.TLS = c.opts.ca.Reloader(a.IP)
	}
	return cfg
}

// Start starts a node with cfg (whose HTTPAddr is where its API server
// listens) and records it.
func (c *Cluster) Start(cfg cluster.Config) *Node {
	t := c.t
	t.Helper()
	host, _, err := net.SplitHostPort(cfg.HTTPAddr)
	require.NoError(t, err)
	n := &Node{
		Addrs:   Addrs{IP: host, HTTP: cfg.HTTPAddr, Raft: cfg.RaftAddr, Gossip: cfg.GossipAddr},
		Config:  cfg,
		Metrics: metrics.New(),
		hold:    c.opts.hold,
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	require.NoError(t, err, "listening for the API of %s", cfg.NodeID)
	hooks := transport.NewHooks(n.Metrics)
	cfg.Engine.OnAbort = hooks.Abort
	cfg.Metrics = n.Metrics
	node, err := cluster.New(cfg)
	if err == nil {
		err = node.Start(context.Background())
	}
	if err != nil {
		_ = ln.Close()
		require.NoError(t, err, "starting %s", cfg.NodeID)
	}
	var console *ui.Console
	if c.opts.console {
		console, err = c.newConsole(cfg)
		require.NoError(t, err, "creating the console of %s", cfg.NodeID)
	}
	srv, err := transport.New(transport.Config{
		Console:         consoleHandler(console),
		Backend:         node,
		Listener:        ln,
		Logger:          c.logger.Named("transport"),
		Metrics:         n.Metrics,
		Hooks:           hooks,
		HoldTimeout:     c.opts.hold,
		HeartbeatWindow: cfg.Engine.Core.HeartbeatWindow,
		MaxPayload:      cfg.Engine.Core.MaxPayload,
		MaxOutput:       cfg.Engine.Core.MaxOutput,
		ACLs:            c.opts.aclSecret != "",
		TLS:             cfg.TLS,
		TracerProvider:  c.opts.tracer,

		TLSVerifyIncoming: cfg.TLS != nil && c.opts.verifyIncoming,
	})
	if err == nil {
		err = srv.Start(context.Background())
	}
	if err != nil {
		_ = ln.Close()
		_ = node.Stop(context.Background())
		require.NoError(t, err, "starting the API server of %s", cfg.NodeID)
	}
	n.ID, n.Node, n.Server, n.Console = node.ID(), node, srv, console
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.all[n.ID] = n
	c.mu.Unlock()
	return n
}

// stopNode stops n the way the agent does: drain, node, server.
func stopNode(n *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n.Server.Drain()
	nodeErr := n.Node.Stop(ctx)
	srvErr := n.Server.Stop(ctx)
	if n.Console != nil {
		_ = n.Console.Close()
	}
	if nodeErr != nil {
		return nodeErr
	}
	return srvErr
}

// Stop stops node id (it stays in the raft configuration) and forgets it
// as live; Restart starts it again.
func (c *Cluster) Stop(id string) {
	c.t.Helper()
	c.mu.Lock()
	n := c.all[id]
	for i, m := range c.nodes {
		if m == n {
			c.nodes = append(c.nodes[:i], c.nodes[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	require.NotNil(c.t, n, "no node %s", id)
	require.NoError(c.t, stopNode(n), "stopping %s", id)
}

// Restart starts node id again on its data dir and addresses.
func (c *Cluster) Restart(id string) *Node {
	c.t.Helper()
	c.mu.Lock()
	n := c.all[id]
	c.mu.Unlock()
	require.NotNil(c.t, n, "no node %s", id)
	return c.Start(n.Config)
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = stopNode(n)
		}()
	}
	wg.Wait()
}

// Node returns the node named id (live or stopped).
func (c *Cluster) Node(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all[id]
}

// Live returns the nodes that run, in start order.
func (c *Cluster) Live() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Leader waits until exactly one live node serves as leader and every live
// node knows it with its API address; it returns the leader and the other
// live nodes.
func (c *Cluster) Leader() (*Node, []*Node) {
	c.t.Helper()
	var leader *Node
	var followers []*Node
	require.Eventually(c.t, func() bool {
		leader, followers = nil, nil
		nodes := c.Live()
		for _, n := range nodes {
			if _, err := n.Node.Leading(); err == nil {
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
			if id, addr := n.Node.Leader(); id != leader.ID || addr != leader.Addr() {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "no single ready leader known to all")
	return leader, followers
}

// Converged waits until every live node's replica has applied the same
// last entry with the same hash, the leader's whole log included, and
// returns that hash.
func (c *Cluster) Converged() [32]byte {
	c.t.Helper()
	var h [32]byte
	require.Eventually(c.t, func() bool {
		nodes := c.Live()
		var idx uint64
		for i, n := range nodes {
			ai, hash, err := n.Node.Hash()
			if err != nil {
				return false
			}
			if i == 0 {
				idx, h = ai, hash
				continue
			}
			if ai != idx || hash != h {
				return false
			}
		}
		for _, n := range nodes {
			if st := n.Node.RaftStats(); n.Node.IsLeader() && st["applied_index"] != st["last_log_index"] {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "nodes did not converge: %s", c.Describe())
	return h
}

// Describe lists each live node's raft indexes and replica hash prefix.
func (c *Cluster) Describe() string {
	var b strings.Builder
	for _, n := range c.Live() {
		st := n.Node.RaftStats()
		ai, h, _ := n.Node.Hash()
		fmt.Fprintf(&b, "%s: state=%s last=%s applied=%s fsm-applied=%d hash=%x; ",
			n.ID, st["state"], st["last_log_index"], st["applied_index"], ai, h[:4])
	}
	return b.String()
}

// newConsole returns the web console of the node of cfg: its clients call
// that node only, with the cluster's TLS.
func (c *Cluster) newConsole(cfg cluster.Config) (*ui.Console, error) {
	return ui.New(ui.Config{
		Node:   cfg.NodeID,
		Logger: c.logger.Named("ui"),
		NewClient: func(token string) (*client.Client, error) {
			opts := []client.Option{client.WithTimeout(5 * time.Second), client.WithBackoff(10*time.Millisecond, 200*time.Millisecond)}
			if c.opts.ca != nil {
				opts = append(opts, client.WithTLS(c.opts.ca.ClientTLS(true)))
			}
			if token != "" {
				opts = append(opts, client.WithToken(token))
			}
			return client.New([]string{cfg.HTTPAddr}, opts...)
		},
	})
}

// consoleHandler is the console as a handler, nil without one.
func consoleHandler(c *ui.Console) http.Handler {
	if c == nil {
		return nil
	}
	return c
}

// Client returns an SDK client for the given nodes (every live node when
// none is given), closed when the test ends.
func (c *Cluster) Client(nodes ...*Node) *client.Client {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.Live()
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	opts := []client.Option{client.WithTimeout(5 * time.Second), client.WithBackoff(10*time.Millisecond, 200*time.Millisecond)}
	if c.opts.ca != nil {
		opts = append(opts, client.WithTLS(c.opts.ca.ClientTLS(true)))
	}
	if c.opts.aclSecret != "" {
		opts = append(opts, client.WithToken(c.opts.aclSecret))
	}
	cl, err := client.New(addrs, opts...)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
