package cluster

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
)

func TestConfigDefaults(t *testing.T) {
	in := Config{DataDir: "/x", Join: []string{"a"}}
	c := in.WithDefaults()
	require.Empty(t, in.RaftAddr, "defaults are applied to a copy")
	require.Equal(t, DefaultRaftAddr, c.RaftAddr)
	require.Equal(t, DefaultGossipAddr, c.GossipAddr)
	require.Equal(t, DefaultHTTPAddr, c.HTTPAddr)
	require.Equal(t, 24*time.Hour, c.DeadServerTimeout)
	require.Equal(t, 3, c.MinVoters)
	require.Equal(t, 60*time.Second, c.ReconcileInterval)
	require.Equal(t, 10*time.Second, c.ServerStabilizationTime)
	rd := raft.DefaultConfig()
	require.Equal(t, 500*time.Millisecond, c.HeartbeatTimeout)
	require.Equal(t, 500*time.Millisecond, c.ElectionTimeout)
	require.Equal(t, 250*time.Millisecond, c.LeaderLeaseTimeout)
	require.Equal(t, rd.SnapshotThreshold, c.SnapshotThreshold)
	require.Equal(t, rd.TrailingLogs, c.TrailingLogs)
	require.NotNil(t, c.Logger)
	require.Equal(t, 3, c.Loops.Threshold)
	require.Equal(t, time.Second, c.Loops.MinBackoff)
	require.Equal(t, time.Minute, c.Loops.MaxBackoff)
	require.NotNil(t, c.Loops.Clock)
	require.Nil(t, c.Loops.Fault, "no faults outside tests")
	c.Join[0] = "b"
	require.Equal(t, "a", in.Join[0], "the join list is copied")
	require.NoError(t, c.Validate())
	require.NoError(t, c.WithTestTimings().Validate())

	dev := Config{Dev: true}.WithDefaults()
	require.Equal(t, 1, dev.BootstrapExpect)
	require.NoError(t, dev.Validate())

	rc := c.raftConfig("n1")
	require.False(t, rc.ShutdownOnRemove)
	require.False(t, rc.RestoreCommittedLogs)
	require.Equal(t, raft.ServerID("n1"), rc.LocalID)
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		field  string
		modify func(c *Config)
	}{
		{"NodeID", func(c *Config) { c.NodeID = "a b" }},
		{"DataDir", func(c *Config) { c.DataDir = "" }},
		{"RaftAddr", func(c *Config) { c.RaftAddr = "0.0.0.0:8651" }},
		{"RaftAddr", func(c *Config) { c.RaftAddr = "localhost:8651" }},
		{"GossipAddr", func(c *Config) { c.GossipAddr = "nope" }},
		{"GossipAddr", func(c *Config) { c.GossipAddr = c.RaftAddr }},
		{"HTTPAddr", func(c *Config) { c.HTTPAddr = "8650" }},
		{"BootstrapExpect", func(c *Config) { c.BootstrapExpect = -1 }},
		{"BootstrapExpect", func(c *Config) { c.Dev = true; c.BootstrapExpect = 3 }},
		{"Join[1]", func(c *Config) { c.Join = []string{"a", ""} }},
		{"JoinRetryMax", func(c *Config) { c.JoinRetryMax = c.JoinRetryMin / 2 }},
		{"LeaderLeaseTimeout", func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout }},
		{"ElectionTimeout", func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout / 2 }},
		{"MaxAppendEntries", func(c *Config) { c.MaxAppendEntries = 2000 }},
		{"GossipProbeTimeout", func(c *Config) { c.GossipProbeTimeout = 2 * c.GossipProbeInterval }},
		{"raft timing", func(c *Config) { c.CommitTimeout = time.Microsecond }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := Config{DataDir: "/x"}.WithDefaults()
			tc.modify(&c)
			err := c.Validate()
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field, err.Error())
			require.Contains(t, err.Error(), tc.field)
		})
	}
	c := Config{DataDir: "/x"}.WithDefaults()
	c.Engine.Core.Backoff.Jitter = 2
	require.ErrorContains(t, c.Validate(), "Engine.Core")

	// New refuses an invalid configuration before touching anything.
	_, err := New(Config{RaftAddr: "0.0.0.0:1"})
	require.ErrorAs(t, err, new(*ConfigError))
}

func TestParseJoinAddr(t *testing.T) {
	require.Equal(t, "127.0.0.1:7946", parseJoinAddr("127.0.0.1:7946"))
	require.Equal(t, "127.0.0.1:8652", parseJoinAddr("127.0.0.1"))
	require.Equal(t, "[::1]:8652", parseJoinAddr("::1"))
	require.Equal(t, "node1:8652", parseJoinAddr("node1"))
}

// fakeApply is a resolved raft.ApplyFuture.
type fakeApply struct {
	err  error
	resp any
}

func (f fakeApply) Error() error  { return f.err }
func (f fakeApply) Response() any { return f.resp }
func (f fakeApply) Index() uint64 { return 0 }

var _ raft.ApplyFuture = fakeApply{}

// devNode starts a dev node on ports the kernel picks, stopped when the
// test ends, and waits until it serves as leader.
func devNode(t *testing.T) *Node {
	cfg := Config{
		NodeID: "m1", DataDir: t.TempDir(), Dev: true,
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:1",
		NoSync: true, Logger: hclog.NewNullLogger(),
	}.WithTestTimings()
	n, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	require.Eventually(t, func() bool { _, err := n.Leading(); return err == nil }, 10*time.Second, 5*time.Millisecond)
	return n
}

func TestApplyErrorMapping(t *testing.T) {
	n := devNode(t)

	rejected := errors.New("rejected by the FSM")
	for _, tc := range []struct {
		name      string
		f         fakeApply
		unknown   bool
		notLeader bool
		is        error
	}{
		{name: "applied", f: fakeApply{}},
		{name: "applied with a non-error response", f: fakeApply{resp: uint64(7)}},
		{name: "FSM error response", f: fakeApply{resp: rejected}, is: rejected},
		{name: "leadership lost", f: fakeApply{err: raft.ErrLeadershipLost}, unknown: true, is: raft.ErrLeadershipLost},
		{name: "raft shutdown", f: fakeApply{err: raft.ErrRaftShutdown}, unknown: true, is: raft.ErrRaftShutdown},
		{name: "not leader", f: fakeApply{err: raft.ErrNotLeader}, notLeader: true, is: raft.ErrNotLeader},
		{name: "transfer in progress", f: fakeApply{err: raft.ErrLeadershipTransferInProgress}, notLeader: true,
			is: raft.ErrLeadershipTransferInProgress},
		{name: "enqueue timeout", f: fakeApply{err: raft.ErrEnqueueTimeout}, is: raft.ErrEnqueueTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := n.applyError(tc.f)
			if tc.is == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.is)
			require.Equal(t, tc.unknown, errors.Is(err, engine.ErrOutcomeUnknown))
			var nle *NotLeaderError
			require.Equal(t, tc.notLeader, errors.As(err, &nle))
		})
	}

	p := &pending{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.Wait(ctx)
	require.ErrorIs(t, err, engine.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.Canceled)
	p.err = rejected
	close(p.done)
	require.ErrorIs(t, p.Wait(context.Background()), rejected)
}

func TestStreamLayerBlockAndClose(t *testing.T) {
	a, err := newStreamLayer(netip.MustParseAddrPort("127.0.0.1:0"))
	require.NoError(t, err)
	b, err := newStreamLayer(netip.MustParseAddrPort("127.0.0.1:0"))
	require.NoError(t, err)
	defer b.Close()

	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := b.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()

	c1, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	require.NoError(t, err)
	in := <-accepted

	// Blocking a closes its connections and refuses dials.
	a.block(true)
	_, err = c1.Write([]byte("x"))
	require.Error(t, err)
	_, err = a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	require.ErrorIs(t, err, errBlocked)
	buf := make([]byte, 1)
	_, err = in.Read(buf)
	require.Error(t, err, "the peer sees the link cut")
	a.block(false)
	c2, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	require.NoError(t, err)
	<-accepted

	// Closing a closes its remaining connections.
	require.NoError(t, a.Close())
	_, err = c2.Write([]byte("x"))
	require.Error(t, err)
	a.mu.Lock()
	require.Empty(t, a.conns)
	a.mu.Unlock()
	require.NoError(t, b.Close())
	for range accepted {
	}
}
