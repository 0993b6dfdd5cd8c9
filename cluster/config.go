package cluster

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/loophealth"
	"github.com/cronoq/cronoq/internal/tlsutil"
	"github.com/cronoq/cronoq/metrics"
	"github.com/cronoq/cronoq/webhook"
)

// Default addresses of a node (CONTRACT.md).
const (
	DefaultHTTPAddr   = "127.0.0.1:8650"
	DefaultRaftAddr   = "127.0.0.1:8651"
	DefaultGossipAddr = "127.0.0.1:8652"

	defaultGossipPort = "8652"
)

// Config is the configuration of a node. The zero value of every field but
// the addressing ones takes the default documented on the field (through
// WithDefaults, which New applies).
type Config struct {
	// NodeID names the node everywhere: raft server id, gossip name, the id
	// remove-peer takes. Empty: the id stored in DataDir, or a generated
	// one on first start.
	NodeID string
	// DataDir holds the node id, the raft log and the snapshots. Required
	// unless Dev (a temporary directory, removed at shutdown).
	DataDir string
	// Dev runs a single node that bootstraps itself.
	Dev bool

	// RaftAddr is the ip:port raft listens on, advertises and dials from.
	// Port 0 picks a free port. Default 127.0.0.1:8651.
	RaftAddr string
	// GossipAddr is the ip:port (TCP and UDP) of gossip. Port 0 picks a
	// free port. Default 127.0.0.1:8652.
	GossipAddr string
	// HTTPAddr is the API address advertised to other nodes through
	// gossip (this package does not listen on it). Default 127.0.0.1:8650.
	HTTPAddr string
	// HTTPBindAddr is the address the API listens on, when it is not
	// HTTPAddr (such as 0.0.0.0:8650). It is only looked at to warn when
	// TLS is off (see TLS).
	HTTPBindAddr string
	// Version is advertised through gossip. Default "dev".
	Version string

	// TLS, when set, secures raft with mutual TLS: a node accepts and makes
	// raft connections only with server certificates of the CA, as TLS
	// holds them at each handshake (a reload applies to new connections).
	// The API server uses the same certificates (transport.Config.TLS).
	// Without TLS, a node whose API, raft or gossip address is not on
	// loopback logs a warning at start and reports itself degraded.
	TLS *tlsutil.Reloader

	// BootstrapExpect: form the cluster once this many nodes with the same
	// setting see each other (0 = never bootstrap; join an existing cluster).
	BootstrapExpect int
	// Join lists gossip addresses (host:port; port default 8652) to join,
	// retried until one answers. It may include this node's own address.
	Join []string
	// GossipKeys turn on gossip encryption: AES keys of 16, 24 or 32
	// bytes, the first one primary (it encrypts; every key decrypts). They
	// seed DataDir/gossip.keyring on first start; once that file exists it
	// wins over them, and the keyring operations (InstallGossipKey, ...)
	// persist there. Empty: no encryption, unless the file exists. A dev
	// node without a data dir keeps its keyring in memory.
	GossipKeys [][]byte
	// LeaveOnTerminate makes Shutdown leave the cluster (gossip leave and
	// removal from the raft configuration) instead of staying a member.
	LeaveOnTerminate bool

	// ReconcileInterval is how often the leader reconciles gossip members
	// with the raft configuration (also on every membership event).
	// Default 60s.
	ReconcileInterval time.Duration
	// DeadServerTimeout is how long a failed member stays in the raft
	// configuration before the leader removes it. Default 24h.
	DeadServerTimeout time.Duration
	// MinVoters: a failed voter is removed only while at least this many
	// voters remain. Default 3.
	MinVoters int
	// ServerStabilizationTime is how long a new non-voter must be in the
	// configuration and alive before promotion to voter. Default 10s.
	ServerStabilizationTime time.Duration
	// MaxTrailingLogs: a non-voter is promoted only when its applied index
	// is within this many entries of the leader's. Default 250.
	MaxTrailingLogs uint64
	// EstablishRetryInterval is the pause before a leader retries a failed
	// establishment (barrier, epoch bump, engine start). Default 5s.
	EstablishRetryInterval time.Duration
	// BarrierTimeout bounds the barrier of a new leader. Default 2m.
	BarrierTimeout time.Duration
	// JoinRetryMin and JoinRetryMax bound the backoff between join
	// attempts. Defaults 1s and 30s.
	JoinRetryMin time.Duration
	JoinRetryMax time.Duration
	// MetaRefreshInterval is how often the node refreshes its gossip
	// metadata (raft state, applied index while a non-voter). Default 1s.
	MetaRefreshInterval time.Duration
	// LeaveDrainTime bounds how long a leaving node waits to be removed
	// from the raft configuration. Default 10s.
	LeaveDrainTime time.Duration
	// MemberReapTime is how long failed and left members stay listed.
	// Default 72h (at least DeadServerTimeout).
	MemberReapTime time.Duration

	// Raft timing; defaults DefaultHeartbeatTimeout, DefaultElectionTimeout,
	// DefaultLeaderLeaseTimeout and raft.DefaultConfig's CommitTimeout and
	// MaxAppendEntries.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	MaxAppendEntries   int
	// Snapshots; defaults from raft.DefaultConfig.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// RaftIOTimeout bounds raft network I/O. Default 10s.
	RaftIOTimeout time.Duration

	// Gossip timing; defaults from memberlist.DefaultLANConfig.
	GossipProbeInterval    time.Duration
	GossipProbeTimeout     time.Duration
	GossipInterval         time.Duration
	GossipPushPullInterval time.Duration
	GossipSuspicionMult    int
	// GossipReconnectInterval is how often the node tries to join the pool
	// again through each member gossip declared failed that is a server of
	// the raft configuration. memberlist never probes a dead member again:
	// without this, a node back from a network partition, or restarted
	// without a join list, would be listed as failed for ever. Default 10s.
	GossipReconnectInterval time.Duration
	// GossipDeadNodeReclaimTime lets a dead node come back under the same
	// name with another address after this long. Default 30s.
	GossipDeadNodeReclaimTime time.Duration

	// MaxClockSkew is how far the leader's engine clock may be from a
	// majority of the voters' before it holds recurring fires and lease
	// expiries (see clock.go). Default 1s; negative: no clock check.
	MaxClockSkew time.Duration
	// ClockCheckInterval is how often the leader reads the other voters'
	// clocks. Default 1s.
	ClockCheckInterval time.Duration

	// Engine configures the engine the leader runs.
	Engine engine.Config
	// Webhook configures the webhook deliveries the leader runs (see
	// webhook.Config; zero fields take its defaults).
	Webhook webhook.Config
	// LogVersion is the newest log format the node understands and
	// advertises (default fsm.LogVersion). Upgrade tests lower it to play a
	// node of an older release: its state halts on entries that need more,
	// and a leader does not write those while it is in the cluster.
	LogVersion uint16
	// Metrics, when set, receives the node's metrics: the replicated state
	// at scrape time, leader changes, commits, and the status events of the
	// terms this node leads.
	Metrics *metrics.Metrics
	// Logger is the root logger; raft, memberlist and the engine log
	// through named sub-loggers. Default: hclog.Default().
	Logger hclog.Logger
	// ACLInitialManagement, when set, is the secret of a management token
	// the leader makes if ACLs were never bootstrapped (Consul's
	// initial_management): a cluster can then be set up without the
	// bootstrap call. Set the same on every server.
	ACLInitialManagement string
	// NoSync skips fsync in the raft log store. Tests only: it loses
	// acknowledged writes on a crash.
	NoSync bool
	// DiskProbeInterval is how often a node whose data directory is full
	// checks whether space is back (by writing a probe file), at first:
	// it backs off while the disk stays full. Default 5s.
	DiskProbeInterval time.Duration
	// Loops configures the health of the node's background loops (see
	// Health and package loophealth): Threshold, the consecutive failures
	// that make a loop degraded (3); MinBackoff, the first backoff of the
	// loops that have no interval of their own (1s); MaxBackoff, the cap
	// of every loop's backoff but join's (1m). Clock, Rand, OnAttempt and
	// Fault are for tests.
	Loops loophealth.Options
}

// The default raft timings, half of raft.DefaultConfig's (which Consul and
// Nomad use at raft_multiplier 1): a follower stands for election after
// 500 ms to 1 s without a heartbeat (raft randomizes the timeout in
// [HeartbeatTimeout, 2×HeartbeatTimeout)), which is most of a failover.
// They leave as wide a margin against an election without a fault: the
// leader heartbeats every HeartbeatTimeout/10 (50 ms) on a connection of
// its own, apart from replication and its fsyncs, and a follower answers
// heartbeats without its main loop, so an election takes ten heartbeats
// missed in a row; a leader steps down after hearing from no quorum for
// LeaderLeaseTimeout (five heartbeat intervals). The jepsen suite runs with
// these values.
const (
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
)

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	rd := raft.DefaultConfig()
	setDur := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	if c.RaftAddr == "" {
		c.RaftAddr = DefaultRaftAddr
	}
	if c.GossipAddr == "" {
		c.GossipAddr = DefaultGossipAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Dev && c.BootstrapExpect == 0 {
		c.BootstrapExpect = 1
	}
	setDur(&c.ReconcileInterval, 60*time.Second)
	setDur(&c.DeadServerTimeout, 24*time.Hour)
	if c.MinVoters <= 0 {
		c.MinVoters = 3
	}
	setDur(&c.ServerStabilizationTime, 10*time.Second)
	if c.MaxTrailingLogs == 0 {
		c.MaxTrailingLogs = 250
	}
	setDur(&c.EstablishRetryInterval, 5*time.Second)
	setDur(&c.DiskProbeInterval, 5*time.Second)
	setDur(&c.BarrierTimeout, 2*time.Minute)
	setDur(&c.JoinRetryMin, time.Second)
	setDur(&c.JoinRetryMax, 30*time.Second)
	setDur(&c.MetaRefreshInterval, time.Second)
	setDur(&c.LeaveDrainTime, 10*time.Second)
	setDur(&c.MemberReapTime, max(72*time.Hour, c.DeadServerTimeout))
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = time.Second
	}
	setDur(&c.ClockCheckInterval, time.Second)
	c.Loops = c.Loops.WithDefaults()

	setDur(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	setDur(&c.ElectionTimeout, DefaultElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	setDur(&c.CommitTimeout, rd.CommitTimeout)
	if c.MaxAppendEntries <= 0 {
		c.MaxAppendEntries = rd.MaxAppendEntries
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = rd.SnapshotThreshold
	}
	setDur(&c.SnapshotInterval, rd.SnapshotInterval)
	if c.TrailingLogs == 0 {
		c.TrailingLogs = rd.TrailingLogs
	}
	setDur(&c.RaftIOTimeout, 10*time.Second)

	setDur(&c.GossipProbeInterval, time.Second)
	setDur(&c.GossipProbeTimeout, 500*time.Millisecond)
	setDur(&c.GossipInterval, 200*time.Millisecond)
	setDur(&c.GossipPushPullInterval, 30*time.Second)
	if c.GossipSuspicionMult <= 0 {
		c.GossipSuspicionMult = 4
	}
	setDur(&c.GossipDeadNodeReclaimTime, 30*time.Second)
	setDur(&c.GossipReconnectInterval, 10*time.Second)

	if c.Logger == nil {
		c.Logger = hclog.Default()
	}
	if c.LogVersion == 0 {
		c.LogVersion = fsm.LogVersion
	}
	c.Join = append([]string(nil), c.Join...)
	c.GossipKeys = append([][]byte(nil), c.GossipKeys...)
	return c
}

// WithTestTimings returns a copy of c with much shorter timings than the
// defaults, for tests and local experiments on one machine: elections in a
// few hundred milliseconds, failures detected in about a second, promotion
// after half a second.
func (c Config) WithTestTimings() Config {
	c.HeartbeatTimeout = 400 * time.Millisecond
	c.ElectionTimeout = 400 * time.Millisecond
	c.LeaderLeaseTimeout = 200 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.RaftIOTimeout = 2 * time.Second
	c.ReconcileInterval = 300 * time.Millisecond
	c.ServerStabilizationTime = 500 * time.Millisecond
	c.EstablishRetryInterval = 200 * time.Millisecond
	c.BarrierTimeout = 10 * time.Second
	c.JoinRetryMin = 50 * time.Millisecond
	c.JoinRetryMax = 500 * time.Millisecond
	c.MetaRefreshInterval = 100 * time.Millisecond
	c.ClockCheckInterval = 200 * time.Millisecond
	c.LeaveDrainTime = 5 * time.Second
	c.GossipProbeInterval = 200 * time.Millisecond
	c.GossipProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.GossipPushPullInterval = 2 * time.Second
	c.GossipSuspicionMult = 3
	c.GossipDeadNodeReclaimTime = time.Second
	c.GossipReconnectInterval = 300 * time.Millisecond
	c.DiskProbeInterval = 100 * time.Millisecond
	c.Loops.MinBackoff = 50 * time.Millisecond
	c.Loops.MaxBackoff = time.Second
	return c
}

// ConfigError is a configuration refused for one field.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid cluster config %s: %s", e.Field, e.Reason)
}

func invalid(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks c (with defaults applied) and names the offending field in
// a *ConfigError.
func (c Config) Validate() error {
	if c.NodeID != "" {
		if err := validateNodeID(c.NodeID); err != nil {
			return invalid("NodeID", "%v", err)
		}
	}
	if c.DataDir == "" && !c.Dev {
		return invalid("DataDir", "required (except in dev mode)")
	}
	raftAP, err := parseHostPort(c.RaftAddr)
	if err != nil {
		return invalid("RaftAddr", "%v", err)
	}
	gossipAP, err := parseHostPort(c.GossipAddr)
	if err != nil {
		return invalid("GossipAddr", "%v", err)
	}
	if raftAP.Port() != 0 && raftAP == gossipAP {
		return invalid("GossipAddr", "same address as RaftAddr %s", c.RaftAddr)
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return invalid("HTTPAddr", "%q is not host:port: %v", c.HTTPAddr, err)
	}
	if c.BootstrapExpect < 0 {
		return invalid("BootstrapExpect", "must not be negative")
	}
	if c.Dev && c.BootstrapExpect > 1 {
		return invalid("BootstrapExpect", "dev mode runs one node (got %d)", c.BootstrapExpect)
	}
	for i, j := range c.Join {
		if j == "" {
			return invalid(fmt.Sprintf("Join[%d]", i), "empty address")
		}
	}
	for i, k := range c.GossipKeys {
		if err := memberlist.ValidateKey(k); err != nil {
			return invalid(fmt.Sprintf("GossipKeys[%d]", i), "%d bytes: a key must be 16, 24 or 32 bytes", len(k))
		}
	}
	if c.LogVersion > fsm.LogVersion {
		return invalid("LogVersion", "%d is newer than this release's %d", c.LogVersion, fsm.LogVersion)
	}
	if c.MinVoters < 1 {
		return invalid("MinVoters", "must be at least 1")
	}
	if c.JoinRetryMax < c.JoinRetryMin {
		return invalid("JoinRetryMax", "must be at least JoinRetryMin (%s)", c.JoinRetryMin)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return invalid("LeaderLeaseTimeout", "%s is longer than HeartbeatTimeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return invalid("ElectionTimeout", "%s is shorter than HeartbeatTimeout %s", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.MaxAppendEntries > 1024 {
		return invalid("MaxAppendEntries", "%d is more than raft's limit of 1024", c.MaxAppendEntries)
	}
	if c.GossipProbeTimeout > c.GossipProbeInterval {
		return invalid("GossipProbeTimeout", "%s is longer than GossipProbeInterval %s", c.GossipProbeTimeout, c.GossipProbeInterval)
	}
	rc := c.raftConfig("validate")
	if err := raft.ValidateConfig(rc); err != nil {
		return invalid("raft timing", "%v", err)
	}
	if err := c.Engine.Core.WithDefaults().Validate(); err != nil {
		return fmt.Errorf("invalid cluster config Engine.Core: %w", err)
	}
	return nil
}

// raftConfig returns the raft configuration of node id.
func (c Config) raftConfig(id string) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.MaxAppendEntries = c.MaxAppendEntries
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.ShutdownOnRemove = false
	rc.RestoreCommittedLogs = false
	// Telemetry names peers by label only (peer_id), not also in the name.
	rc.NoLegacyTelemetry = true
	if c.Logger != nil {
		rc.Logger = c.Logger.Named("raft")
	}
	return rc
}
