package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2/hclsimple"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/metrics"
	"github.com/cronoq/cronoq/transport"
)

func init() {
	register("agent", command{Summary: "Run a cronoq node (a server of the cluster)", Run: runAgent})
}

// Agent defaults.
const (
	defaultRaftAddr        = cluster.DefaultRaftAddr
	defaultGossipAddr      = cluster.DefaultGossipAddr
	defaultHTTPAddr        = cluster.DefaultHTTPAddr
	defaultShutdownTimeout = 30 * time.Second
	// Raft timing of -dev: one node elects itself at once.
	devHeartbeatTimeout   = 200 * time.Millisecond
	devElectionTimeout    = 200 * time.Millisecond
	devLeaderLeaseTimeout = 100 * time.Millisecond
	devCommitTimeout      = 5 * time.Millisecond
	// minRaftTimeout is the shortest timeout or snapshot interval raft
	// accepts.
	minRaftTimeout = 5 * time.Millisecond
	// readyPoll is how often the agent checks whether it is ready, to log it.
	readyPoll = 20 * time.Millisecond
)

// agentConfig is the configuration of `cronoq agent`, from its flags and
// its configuration file.
type agentConfig struct {
	dev              bool
	nodeID           string
	dataDir          string
	httpAddr         string
	httpAdvertise    string
	raftAddr         string
	gossipAddr       string
	bootstrapExpect  int
	join             []string
	configFile       string
	logJSON          bool
	logLevel         string
	leaveOnTerminate bool
	enableDebug      bool
	acl              bool
	aclInitialMgmt   string

	// TLS: all three files or none.
	tlsCA             string
	tlsCert           string
	tlsKey            string
	tlsVerifyIncoming bool
	encrypt           string // gossip encryption key, base64

	trace traceConfig // OTLP export of traced tasks' spans

	maxPayload      int
	maxOutput       int
	writeQueueLimit int
	pools           []string
	poolBlocks      []poolBlock // pool "NAME" { ... } blocks of the config file
	heartbeatWindow time.Duration
	retention       time.Duration
	retentionCap    time.Duration // 0: 10 x retention
	maxAttempts     int
	maxPending      int
	overflow        string
	holdTimeout     time.Duration
	shutdownTimeout time.Duration
	maxClockSkew    time.Duration // 0: no clock check
	gcPercent       int
	memoryLimit     int

	// Raft tuning; 0 keeps the default (raftDefaults).
	raftHeartbeatTimeout   time.Duration
	raftElectionTimeout    time.Duration
	raftLeaderLeaseTimeout time.Duration
	raftSnapshotThreshold  int
	raftSnapshotInterval   time.Duration
	raftTrailingLogs       int
}

func defaultAgentConfig() agentConfig {
	d := core.DefaultConfig()
	return agentConfig{
		httpAddr:        defaultHTTPAddr,
		raftAddr:        defaultRaftAddr,
		gossipAddr:      defaultGossipAddr,
		logLevel:        "info",
		maxPayload:      d.MaxPayload,
		maxOutput:       d.MaxOutput,
		writeQueueLimit: engine.DefaultMaxQueuedBytes,
		aclInitialMgmt:  os.Getenv("CRONOQ_ACL_INITIAL_MANAGEMENT"),
		heartbeatWindow: d.HeartbeatWindow,
		retention:       d.Retention,
		maxAttempts:     int(d.MaxAttempts),
		maxPending:      d.DefaultPool.Bounds.MaxPending,
		overflow:        "reject",
		holdTimeout:     transport.DefaultHoldTimeout,
		shutdownTimeout: defaultShutdownTimeout,
		maxClockSkew:    raftDefaults.MaxClockSkew,
		gcPercent:       defaultGCPercent,
		trace:           traceConfig{ratio: defaultTraceRatio},
	}
}

const agentAbout = `
Run a cronoq node: a Raft voter, a gossip member, and the HTTP API that
clients, workers and the CLI use (ConnectRPC, GET /v1/health, GET /metrics)
with the web console at /ui/, all on the addresses below. The leader runs the scheduler; any node serves
any call and forwards what needs the leader.

-dev runs one node with a temporary data dir that bootstraps itself, for
local use, named after the host (unless -node-id); once ready it logs what
to try next. Otherwise -data-dir is required; -bootstrap-expect N forms a new
cluster once N nodes see each other through gossip, and -join (repeatable,
retried until it succeeds) names gossip addresses of other nodes; the same
-join list (every server, this one included) can be given to every node.
The node id is kept in the data dir: restarting with the same -data-dir
brings the node back with its data, and a different -node-id is refused.

-config FILE reads settings from an HCL (.hcl) or JSON (.json) file whose
keys are the flag names with underscores (node_id, data_dir, http_addr,
bootstrap_expect, join = [...], max_payload = "2MiB", heartbeat_window =
"15s", ...); a value of the wrong type is refused. Flags given on the
command line override the file. docs/examples has examples.

-encrypt KEY turns on gossip encryption (AES-GCM): KEY is base64 of 16, 24
or 32 bytes, made by 'cronoq operator keyring generate', the same on every
node. On first start it is written to the data dir (gossip.keyring, mode
0600), and from then on that file wins over -encrypt, so that keys rotated
with 'cronoq operator keyring' survive restarts. A node whose keys do not
match the others' cannot join them.

The -raft-* flags tune raft; 0 keeps the default. A follower that hears
nothing from the leader for -raft-heartbeat-timeout becomes a candidate, a
candidate elects itself after -raft-election-timeout, and a leader that
cannot reach a quorum for -raft-leader-lease-timeout steps down; they must
keep lease <= heartbeat <= election. Every -raft-snapshot-interval (plus up
to as much again) a node snapshots its state if -raft-snapshot-threshold
entries were committed since its last snapshot, and keeps the last
-raft-trailing-logs entries, so that a follower lagging by fewer is caught up
from the log rather than by sending it the snapshot.

A node keeps every task in memory. Its garbage collector runs when the heap
has grown -gc-percent (400) over the live data: a busy leader allocates for
every command, and fewer, larger collections cost less CPU and fewer latency
spikes than Go's default of 100, for up to five times the live data in
memory. -memory-limit (default: half of the cgroup's or the machine's
memory) caps that: nearing it, the collector runs more often. GOGC and
GOMEMLIMIT in the environment win over both.

SIZE is a number of bytes with an optional unit: 512KiB, 1MiB, 2MB, 1G.

-tls-ca, -tls-cert and -tls-key (all three, or none) turn TLS on: the API
serves HTTPS (HTTP/2 and HTTP/1.1), calls forwarded to the leader go over
HTTPS with the node's certificate as client certificate, and raft links are
mutual TLS, where both nodes present a server certificate of the CA. With
-tls-verify-incoming, every API client (GET /v1/health, /metrics and the
console's browser too) must present a certificate of the CA. 'cronoq tls' makes a CA and the
certificates. On SIGHUP the node reads the three files again: new
connections use them, and on an error it keeps the ones it has. With TLS
off, a node whose API, raft or gossip address is not on loopback warns at
start and reports itself degraded. See docs/security.md.

-otlp-endpoint turns tracing on: a task whose tags carry a W3C traceparent
(the Go SDK adds the span of the submitting code) continues that trace on the
leader, with spans of its submit, of each dispatch and completion, and of the
commit of each, exported over OTLP/HTTP to a collector. Untraced tasks cost
nothing, and without -otlp-endpoint nothing is traced. See docs/tracing.md.

On SIGINT or SIGTERM the node stops cleanly and exits 0 (1 only if
stopping itself failed): it refuses new calls, hands leadership to another
voter if it leads, finishes what is in flight, and closes its connections.
It stays in the Raft configuration unless -leave-on-terminate is set. A
second signal kills it at once.`

// agentFlags registers the agent's flags on c, bound to cfg.
func agentFlags(c *cmd, cfg *agentConfig) {
	fs := c.fs
	fs.BoolVar(&cfg.dev, "dev", cfg.dev, "run a single self-bootstrapping node with a temporary data dir (unless -data-dir)")
	fs.StringVar(&cfg.nodeID, "node-id", cfg.nodeID, "node `ID` (raft server id, gossip name); default: the id kept in the data dir, else a new one (the host name with -dev)")
	fs.StringVar(&cfg.dataDir, "data-dir", cfg.dataDir, "`DIR` holding the node id, the raft log and snapshots (required unless -dev)")
	fs.StringVar(&cfg.httpAddr, "http-addr", cfg.httpAddr, "`HOST:PORT` of the HTTP API (RPC, /v1/health, /metrics, the console at /ui/)")
	fs.StringVar(&cfg.httpAdvertise, "http-advertise", cfg.httpAdvertise, "`HOST:PORT` other nodes and workers are given for the API (default: -http-addr)")
	fs.StringVar(&cfg.raftAddr, "raft-addr", cfg.raftAddr, "`IP:PORT` raft listens on, advertises and dials from")
	fs.StringVar(&cfg.gossipAddr, "gossip-addr", cfg.gossipAddr, "`IP:PORT` of gossip (TCP and UDP)")
	fs.Var(intValue{&cfg.bootstrapExpect, 0}, "bootstrap-expect", "form the cluster once `N` nodes see each other (0: join an existing cluster)")
	fs.Var(&fileList{list: &cfg.join}, "join", "gossip `HOST:PORT` of a node to join, retried until it succeeds (repeatable, or comma-separated)")
	fs.StringVar(&cfg.configFile, "config", cfg.configFile, "read settings from `FILE` (.hcl or .json); flags override it")
	fs.BoolVar(&cfg.logJSON, "log-json", cfg.logJSON, "log in JSON")
	fs.Var(enumValue{&cfg.logLevel, []string{"trace", "debug", "info", "warn", "error"}}, "log-level", "log `LEVEL`: trace, debug, info, warn or error")
	fs.BoolVar(&cfg.leaveOnTerminate, "leave-on-terminate", cfg.leaveOnTerminate, "leave the cluster (gossip and raft configuration) on SIGINT/SIGTERM")
	fs.BoolVar(&cfg.enableDebug, "enable-debug", cfg.enableDebug, "serve Go's profiler under /debug/pprof/ on the HTTP address")
	fs.BoolVar(&cfg.acl, "acl", cfg.acl, "enable ACLs: every call needs a token whose policies allow it (see cronoq acl)")
	fs.StringVar(&cfg.aclInitialMgmt, "acl-initial-management", cfg.aclInitialMgmt,
		"with -acl (ignored without): make a management token with `SECRET` if ACLs were never bootstrapped (the same on every server); env CRONOQ_ACL_INITIAL_MANAGEMENT")
	fs.StringVar(&cfg.tlsCA, "tls-ca", cfg.tlsCA, "CA certificate `FILE` (PEM) that verifies the other nodes and API clients; turns TLS on, with -tls-cert and -tls-key")
	fs.StringVar(&cfg.tlsCert, "tls-cert", cfg.tlsCert, "this node's server certificate `FILE` (PEM, signed by -tls-ca), for the API, raft and forwarding")
	fs.StringVar(&cfg.tlsKey, "tls-key", cfg.tlsKey, "private key `FILE` (PEM) of -tls-cert")
	fs.BoolVar(&cfg.tlsVerifyIncoming, "tls-verify-incoming", cfg.tlsVerifyIncoming, "require a client certificate of the CA from every API client (health and metrics included)")
	fs.StringVar(&cfg.encrypt, "encrypt", cfg.encrypt, "encrypt gossip with `KEY` (base64 of 16, 24 or 32 bytes; cronoq operator keyring generate); seeds the data dir's keyring, which wins once it exists")
	fs.Var(sizeValue{&cfg.maxPayload}, "max-payload", "largest task payload, `SIZE`; larger submits are refused")
	fs.Var(sizeValue{&cfg.maxOutput}, "max-output", "largest task output, `SIZE`; a larger output fails the attempt permanently")
	fs.Var(sizeValue{&cfg.writeQueueLimit}, "write-queue-limit", "write path threshold, `SIZE` of changes waiting for the log past which submits are refused as overloaded (with a retry-after hint) and health says the write path is saturated, until half of it drains")
	fs.Var(&fileList{list: &cfg.pools}, "pools", "fixed list of pool `NAMES` (comma-separated); tasks of other pools are refused (default: any pool)")
	fs.Var(durationValue{&cfg.heartbeatWindow, true}, "heartbeat-window", "a lease is lost after `DUR` without a heartbeat")
	fs.Var(durationValue{&cfg.retention, true}, "retention", "keep ended tasks and their outputs for `DUR`")
	fs.Var(durationValue{&cfg.retentionCap, true}, "retention-cap", "keep an ended task at most `DUR` after its end while a subscription has not acked its events (default 10 x -retention)")
	fs.Var(intValue{&cfg.maxAttempts, 1}, "max-attempts", "at most `N` attempts per task whose spec sets none")
	fs.Var(intValue{&cfg.maxPending, 1}, "max-pending", "pending (scheduled, queued, retrying) tasks per pool, at most `N`")
	fs.Var(enumValue{&cfg.overflow, []string{"reject", "wait", "park"}}, "overflow", "`POLICY` for a submit that does not fit -max-pending: reject (answer overloaded), wait (the submitter waits until there is room) or park (accept its tasks as parked, admitted as room frees)")
	fs.Var(durationValue{&cfg.holdTimeout, true}, "hold-timeout", "hold calls that need the leader up to `DUR` while none is known")
	fs.Var(durationValue{&cfg.shutdownTimeout, true}, "shutdown-timeout", "bound the graceful stop to `DUR`")
	fs.Var(durationValue{&cfg.maxClockSkew, false}, "max-clock-skew", "the leader holds recurring fires and lease expiries while its clock differs from a majority of the voters' by more than `DUR`, and health says clock skew (0: no check)")
	fs.Var(intValue{&cfg.gcPercent, 1}, "gc-percent", "collect garbage when the heap has grown `N` percent over the live data (the GOGC environment variable wins when set)")
	fs.Var(memSizeValue{sizeValue{&cfg.memoryLimit}}, "memory-limit", "soft memory limit, `SIZE`: nearing it, garbage is collected more often (default: half of the cgroup's or the machine's memory; GOMEMLIMIT wins when set)")
	traceFlags(fs, &cfg.trace, "traced tasks (their submits, dispatches and completions, with the commits of each)")

	rd := raftDefaults
	fs.Var(durationValue{&cfg.raftHeartbeatTimeout, false}, "raft-heartbeat-timeout",
		fmt.Sprintf("a follower without contact from the leader for `DUR` becomes a candidate (default %s, %s with -dev)", rd.HeartbeatTimeout, devHeartbeatTimeout))
	fs.Var(durationValue{&cfg.raftElectionTimeout, false}, "raft-election-timeout",
		fmt.Sprintf("a candidate without a leader for `DUR` starts an election; at least -raft-heartbeat-timeout (default %s, %s with -dev)", rd.ElectionTimeout, devElectionTimeout))
	fs.Var(durationValue{&cfg.raftLeaderLeaseTimeout, false}, "raft-leader-lease-timeout",
		fmt.Sprintf("a leader that cannot reach a quorum for `DUR` steps down; at most -raft-heartbeat-timeout (default %s, %s with -dev)", rd.LeaderLeaseTimeout, devLeaderLeaseTimeout))
	fs.Var(intValue{&cfg.raftSnapshotThreshold, 0}, "raft-snapshot-threshold",
		fmt.Sprintf("snapshot once `N` log entries were committed since the last snapshot (default %d)", rd.SnapshotThreshold))
	fs.Var(durationValue{&cfg.raftSnapshotInterval, false}, "raft-snapshot-interval",
		fmt.Sprintf("check every `DUR` (plus a random part up to as much again) whether to snapshot (default %s)", rd.SnapshotInterval))
	fs.Var(intValue{&cfg.raftTrailingLogs, 0}, "raft-trailing-logs",
		fmt.Sprintf("keep the last `N` log entries after a snapshot, to catch up followers that lag by fewer without sending the snapshot (default %d)", rd.TrailingLogs))
}

// raftDefaults holds the raft settings a node runs with when its flags
// leave them at 0.
var raftDefaults = cluster.Config{}.WithDefaults()

// parseAgentArgs parses the agent's command line and configuration file.
// The file is read first and the flags given on the command line override
// it.
func parseAgentArgs(s stdio, args []string) (agentConfig, error) {
	usage := "cronoq agent [-dev] [-node-id ID -data-dir DIR] [-config FILE] [flags]"
	// First pass: find -config (errors are reported by the second pass).
	scratch := defaultAgentConfig()
	pre := newCmd("agent", usage, agentAbout)
	agentFlags(pre, &scratch)
	_, _ = parseInterleaved(pre.fs, args)

	cfg := defaultAgentConfig()
	c := newCmd("agent", usage, agentAbout)
	agentFlags(c, &cfg)
	if scratch.configFile != "" {
		blocks, err := loadConfigFile(c.fs, scratch.configFile)
		if err != nil {
			return cfg, usagef("%v", err)
		}
		cfg.poolBlocks = blocks
	}
	if err := c.parse(s, args, 0); err != nil {
		return cfg, err
	}
	if err := cfg.validate(); err != nil {
		return cfg, c.usageErr("%v", err)
	}
	return cfg, nil
}

func (cfg agentConfig) validate() error {
	if !cfg.dev && cfg.dataDir == "" {
		return errors.New("-data-dir is required (or -dev)")
	}
	if cfg.dev && cfg.bootstrapExpect > 1 {
		return fmt.Errorf("-dev runs one node: -bootstrap-expect %d is not allowed", cfg.bootstrapExpect)
	}
	if _, _, err := net.SplitHostPort(cfg.httpAddr); err != nil {
		return fmt.Errorf("invalid -http-addr %q: want HOST:PORT", cfg.httpAddr)
	}
	if cfg.httpAdvertise != "" {
		host, _, err := net.SplitHostPort(cfg.httpAdvertise)
		if err != nil {
			return fmt.Errorf("invalid -http-advertise %q: want HOST:PORT", cfg.httpAdvertise)
		}
		if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() || host == "" {
			return fmt.Errorf("invalid -http-advertise %q: other nodes cannot reach an unspecified address", cfg.httpAdvertise)
		}
	}
	if err := cfg.validateTLS(); err != nil {
		return err
	}
	if cfg.encrypt != "" {
		if _, err := cluster.ParseGossipKey(cfg.encrypt); err != nil {
			return fmt.Errorf("invalid -encrypt: %v", err)
		}
	}
	if err := cfg.trace.validate(); err != nil {
		return err
	}
	return cfg.validateRaft()
}

// validateRaft checks the raft settings as raft itself would, with the
// defaults in place of the settings left at 0, and names the flags in its
// errors.
func (cfg agentConfig) validateRaft() error {
	eff := cfg.clusterConfig("", nil).WithDefaults()
	type setting struct {
		flag     string
		given, v time.Duration
	}
	hb := setting{"raft-heartbeat-timeout", cfg.raftHeartbeatTimeout, eff.HeartbeatTimeout}
	el := setting{"raft-election-timeout", cfg.raftElectionTimeout, eff.ElectionTimeout}
	lease := setting{"raft-leader-lease-timeout", cfg.raftLeaderLeaseTimeout, eff.LeaderLeaseTimeout}
	snap := setting{"raft-snapshot-interval", cfg.raftSnapshotInterval, eff.SnapshotInterval}
	describe := func(s setting) string {
		switch {
		case s.given == 0 && cfg.dev:
			return fmt.Sprintf("-%s %s (the -dev default)", s.flag, s.v)
		case s.given == 0:
			return fmt.Sprintf("-%s %s (the default)", s.flag, s.v)
		}
		return fmt.Sprintf("-%s %s", s.flag, s.v)
	}
	for _, s := range []setting{hb, el, lease, snap} {
		if s.given != 0 && s.given < minRaftTimeout {
			return fmt.Errorf("%s is too short: at least %s", describe(s), minRaftTimeout)
		}
	}
	if lease.v > hb.v {
		return fmt.Errorf("%s is longer than %s: raft needs lease <= heartbeat <= election timeout", describe(lease), describe(hb))
	}
	if el.v < hb.v {
		return fmt.Errorf("%s is shorter than %s: raft needs lease <= heartbeat <= election timeout", describe(el), describe(hb))
	}
	return nil
}

// fileConfig is the configuration file: each key is a flag name with
// underscores instead of dashes, with the flag's value (durations and sizes
// as strings, lists as lists).
type fileConfig struct {
	Dev              *bool    `hcl:"dev,optional"`
	NodeID           *string  `hcl:"node_id,optional"`
	DataDir          *string  `hcl:"data_dir,optional"`
	HTTPAddr         *string  `hcl:"http_addr,optional"`
	HTTPAdvertise    *string  `hcl:"http_advertise,optional"`
	RaftAddr         *string  `hcl:"raft_addr,optional"`
	GossipAddr       *string  `hcl:"gossip_addr,optional"`
	BootstrapExpect  *int     `hcl:"bootstrap_expect,optional"`
	Join             []string `hcl:"join,optional"`
	LogJSON          *bool    `hcl:"log_json,optional"`
	LogLevel         *string  `hcl:"log_level,optional"`
	LeaveOnTerminate *bool    `hcl:"leave_on_terminate,optional"`
	EnableDebug      *bool    `hcl:"enable_debug,optional"`
	ACL              *bool    `hcl:"acl,optional"`
	ACLInitialMgmt   *string  `hcl:"acl_initial_management,optional"`
	Encrypt          *string  `hcl:"encrypt,optional"`
	MaxPayload       *string  `hcl:"max_payload,optional"`
	MaxOutput        *string  `hcl:"max_output,optional"`
	WriteQueueLimit  *string  `hcl:"write_queue_limit,optional"`
	Pools            []string `hcl:"pools,optional"`
	HeartbeatWindow  *string  `hcl:"heartbeat_window,optional"`
	Retention        *string  `hcl:"retention,optional"`
	RetentionCap     *string  `hcl:"retention_cap,optional"`
	MaxAttempts      *int     `hcl:"max_attempts,optional"`
	MaxPending       *int     `hcl:"max_pending,optional"`
	Overflow         *string  `hcl:"overflow,optional"`
	HoldTimeout      *string  `hcl:"hold_timeout,optional"`
	ShutdownTimeout  *string  `hcl:"shutdown_timeout,optional"`
	MaxClockSkew     *string  `hcl:"max_clock_skew,optional"`
	GCPercent        *int     `hcl:"gc_percent,optional"`
	MemoryLimit      *string  `hcl:"memory_limit,optional"`
	OTLPEndpoint     *string  `hcl:"otlp_endpoint,optional"`
	OTLPInsecure     *bool    `hcl:"otlp_insecure,optional"`
	TraceSampleRatio *float64 `hcl:"trace_sample_ratio,optional"`

	RaftHeartbeatTimeout   *string `hcl:"raft_heartbeat_timeout,optional"`
	RaftElectionTimeout    *string `hcl:"raft_election_timeout,optional"`
	RaftLeaderLeaseTimeout *string `hcl:"raft_leader_lease_timeout,optional"`
	RaftSnapshotThreshold  *int    `hcl:"raft_snapshot_threshold,optional"`
	RaftSnapshotInterval   *string `hcl:"raft_snapshot_interval,optional"`
	RaftTrailingLogs       *int    `hcl:"raft_trailing_logs,optional"`

	TLSCA             *string `hcl:"tls_ca,optional"`
	TLSCert           *string `hcl:"tls_cert,optional"`
	TLSKey            *string `hcl:"tls_key,optional"`
	TLSVerifyIncoming *bool   `hcl:"tls_verify_incoming,optional"`

	// Pool blocks give the settings of named pools; they are not flags.
	Pool []poolBlock `hcl:"pool,block"`
}

// poolBlock is a pool "NAME" { ... } block of the configuration file: the
// settings a pool starts with until an operator changes them (cronoq pool
// set). Unset keys take the agent's defaults.
type poolBlock struct {
	Name             string   `hcl:"name,label"`
	MaxPending       *int     `hcl:"max_pending,optional"`
	MaxRunning       *int     `hcl:"max_running,optional"`
	Overflow         *string  `hcl:"overflow,optional"`
	Rate             *float64 `hcl:"rate,optional"`
	Burst            *int     `hcl:"burst,optional"`
	ConcurrencyLimit *int     `hcl:"concurrency_limit,optional"`
	Ordering         *string  `hcl:"ordering,optional"`
	MaxAttempts      *int     `hcl:"max_attempts,optional"`
	LeaseGrace       *string  `hcl:"lease_grace,optional"`
	Paused           *bool    `hcl:"paused,optional"`
}

// config returns the pool's configuration: def with the block's settings.
func (b poolBlock) config(def core.PoolConfig) (core.PoolConfig, error) {
	pc := def
	bad := func(key string, err error) error { return fmt.Errorf("pool %q: %s: %w", b.Name, key, err) }
	nonNeg := func(key string, v *int, dst *int) error {
		if v == nil {
			return nil
		}
		if *v < 0 {
			return bad(key, errors.New("must not be negative"))
		}
		*dst = *v
		return nil
	}
	for _, f := range []struct {
		key string
		v   *int
		dst *int
	}{
		{"max_pending", b.MaxPending, &pc.Bounds.MaxPending},
		{"max_running", b.MaxRunning, &pc.MaxRunning},
		{"burst", b.Burst, &pc.Burst},
		{"concurrency_limit", b.ConcurrencyLimit, &pc.ConcurrencyLimit},
	} {
		if err := nonNeg(f.key, f.v, f.dst); err != nil {
			return pc, err
		}
	}
	if b.Overflow != nil {
		o, ok := fsm.ParseOverflow(*b.Overflow)
		if !ok {
			return pc, bad("overflow", fmt.Errorf("%q: want reject, wait or park", *b.Overflow))
		}
		pc.Overflow = o
	}
	if b.Rate != nil {
		if *b.Rate < 0 {
			return pc, bad("rate", errors.New("must not be negative"))
		}
		pc.Rate = *b.Rate
	}
	if b.Ordering != nil {
		o, ok := fsm.ParseOrderingPolicy(*b.Ordering)
		if !ok {
			return pc, bad("ordering", fmt.Errorf("%q: want continue or block", *b.Ordering))
		}
		pc.Ordering = o
	}
	if b.MaxAttempts != nil {
		if *b.MaxAttempts < 0 {
			return pc, bad("max_attempts", errors.New("must not be negative"))
		}
		pc.MaxAttempts = uint32(*b.MaxAttempts)
	}
	if b.LeaseGrace != nil {
		d, err := time.ParseDuration(*b.LeaseGrace)
		if err != nil || d < 0 {
			return pc, bad("lease_grace", fmt.Errorf("%q: want a duration such as 30s", *b.LeaseGrace))
		}
		pc.LeaseGrace = d
	}
	if b.Paused != nil {
		pc.Paused = *b.Paused
	}
	return pc, nil
}

// loadConfigFile reads path and sets the flags it names on fs, as if given
// before every command-line flag; it returns its pool blocks.
func loadConfigFile(fs *flag.FlagSet, path string) ([]poolBlock, error) {
	var fc fileConfig
	if err := checkConfigTypes(path); err != nil {
		return nil, fmt.Errorf("reading -config %s: %w", path, err)
	}
	if err := hclsimple.DecodeFile(path, nil, &fc); err != nil {
		return nil, fmt.Errorf("reading -config %s: %w", path, err)
	}
	v := reflect.ValueOf(fc)
	for i := range v.NumField() {
		key, kind, _ := strings.Cut(v.Type().Field(i).Tag.Get("hcl"), ",")
		if kind == "block" {
			continue
		}
		name := strings.ReplaceAll(key, "_", "-")
		f := v.Field(i)
		var values []string
		switch f.Kind() {
		case reflect.Pointer:
			if f.IsNil() {
				continue
			}
			values = []string{fmt.Sprint(f.Elem().Interface())}
		case reflect.Slice:
			if f.IsNil() {
				continue
			}
			values = f.Interface().([]string)
			if len(values) == 0 {
				values = []string{""}
			}
		}
		for _, val := range values {
			if err := fs.Set(name, val); err != nil {
				return nil, fmt.Errorf("reading -config %s: %s = %q: %w", path, key, val, err)
			}
		}
		if l, ok := fs.Lookup(name).Value.(*fileList); ok {
			l.fromFile = true
		}
	}
	seen := make(map[string]bool)
	for _, b := range fc.Pool {
		if b.Name == "" || seen[b.Name] {
			return nil, fmt.Errorf("reading -config %s: pool %q: empty or repeated name", path, b.Name)
		}
		seen[b.Name] = true
		if _, err := b.config(core.PoolConfig{}); err != nil {
			return nil, fmt.Errorf("reading -config %s: %w", path, err)
		}
	}
	return fc.Pool, nil
}

// fileList is a repeatable, comma-separated list flag. Values from the
// configuration file are replaced, not extended, by the command line's.
type fileList struct {
	list     *[]string
	fromFile bool
}

func (l *fileList) String() string {
	if l == nil || l.list == nil {
		return ""
	}
	return strings.Join(*l.list, ",")
}

func (l *fileList) Set(s string) error {
	if l.fromFile {
		*l.list, l.fromFile = nil, false
	}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l.list = append(*l.list, item)
		}
	}
	return nil
}

// sizeValue is a byte size flag: a number with an optional unit (B, K/KiB,
// M/MiB, G/GiB binary; KB, MB, GB decimal).
type sizeValue struct{ n *int }

func (v sizeValue) String() string {
	if v.n == nil {
		return ""
	}
	return formatSize(*v.n)
}

func (v sizeValue) Set(s string) error { return v.set(s, parseSize) }

// set stores what parse makes of s.
func (v sizeValue) set(s string, parse func(string) (int, error)) error {
	n, err := parse(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

// memSizeValue is a sizeValue for memory sizes, which may pass 2GiB.
type memSizeValue struct{ sizeValue }

// String is empty for 0 (the default: derived from the memory size).
func (v memSizeValue) String() string {
	if v.n == nil || *v.n == 0 {
		return ""
	}
	return v.sizeValue.String()
}

func (v memSizeValue) Set(s string) error {
	return v.set(s, func(s string) (int, error) { return parseSizeUpTo(s, maxMemoryLimit, "1048576GiB") })
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
}

func parseSize(s string) (int, error) { return parseSizeUpTo(s, 1<<31-1, "2GiB") }

// maxMemoryLimit bounds -memory-limit.
const maxMemoryLimit = 1 << 50

func parseSizeUpTo(s string, limit int64, limitText string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, errors.New("not a size (examples: 1048576, 512KiB, 1MiB, 2MB)")
	}
	if n <= 0 {
		return 0, errors.New("must be positive")
	}
	if n > limit/mult {
		return 0, fmt.Errorf("too large (at most %s)", limitText)
	}
	return int(n * mult), nil
}

func formatSize(n int) string {
	switch {
	case n > 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.Itoa(n)
}

// engineConfig is the engine configuration the flags ask for.
func (cfg agentConfig) engineConfig() core.Config {
	c := core.Config{
		HeartbeatWindow: cfg.heartbeatWindow,
		Retention:       cfg.retention,
		RetentionCap:    cfg.retentionCap,
		MaxPayload:      cfg.maxPayload,
		MaxOutput:       cfg.maxOutput,
		MaxAttempts:     uint32(cfg.maxAttempts),
		DefaultPool:     core.PoolConfig{Bounds: core.Bounds{MaxPending: cfg.maxPending}},
	}
	if o, ok := fsm.ParseOverflow(cfg.overflow); ok {
		c.DefaultPool.Overflow = o
	}
	if len(cfg.pools) > 0 {
		c.FixedPools = true
		c.Pools = make(map[string]core.PoolConfig, len(cfg.pools))
		for _, p := range cfg.pools {
			c.Pools[p] = c.DefaultPool
		}
	}
	for _, b := range cfg.poolBlocks {
		if c.Pools == nil {
			c.Pools = make(map[string]core.PoolConfig)
		}
		pc, _ := b.config(c.DefaultPool) // checked when the file was read
		c.Pools[b.Name] = pc
	}
	return c
}

// clusterConfig is the node configuration the flags ask for; advertise is
// the API address given to the other nodes. Raft settings left at 0 are
// filled in by cluster.Config.WithDefaults (the -dev timings with -dev).
func (cfg *agentConfig) clusterConfig(advertise string, root hclog.Logger) cluster.Config {
	c := cluster.Config{
		NodeID:           cfg.nodeID,
		DataDir:          cfg.dataDir,
		Dev:              cfg.dev,
		RaftAddr:         cfg.raftAddr,
		GossipAddr:       cfg.gossipAddr,
		HTTPAddr:         advertise,
		Version:          agentVersion(),
		BootstrapExpect:  cfg.bootstrapExpect,
		Join:             cfg.join,
		LeaveOnTerminate: cfg.leaveOnTerminate,
		Logger:           root,
	}
	if c.Dev && c.NodeID == "" && c.DataDir == "" {
		// Named after the host, as Nomad and Consul dev agents are (a
		// generated id otherwise).
		c.NodeID = hostNodeID(os.Hostname)
	}
	if cfg.acl {
		c.ACLInitialManagement = cfg.aclInitialMgmt
	}
	if key, err := cluster.ParseGossipKey(cfg.encrypt); err == nil {
		c.GossipKeys = [][]byte{key} // "" (no encryption) does not parse
	}
	c.Engine.Core = cfg.engineConfig()
	c.Engine.MaxQueuedBytes = cfg.writeQueueLimit
	c.MaxClockSkew = cfg.maxClockSkew
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = -1 // no clock check
	}
	if cfg.dev {
		c.HeartbeatTimeout = devHeartbeatTimeout
		c.ElectionTimeout = devElectionTimeout
		c.LeaderLeaseTimeout = devLeaderLeaseTimeout
		c.CommitTimeout = devCommitTimeout
	}
	set := func(dst *time.Duration, d time.Duration) {
		if d > 0 {
			*dst = d
		}
	}
	set(&c.HeartbeatTimeout, cfg.raftHeartbeatTimeout)
	set(&c.ElectionTimeout, cfg.raftElectionTimeout)
	set(&c.LeaderLeaseTimeout, cfg.raftLeaderLeaseTimeout)
	set(&c.SnapshotInterval, cfg.raftSnapshotInterval)
	c.SnapshotThreshold = uint64(cfg.raftSnapshotThreshold)
	c.TrailingLogs = uint64(cfg.raftTrailingLogs)
	return c
}

// newAgentLogger is the root logger; components log through named
// sub-loggers (agent, raft, memberlist, transport, engine).
func newAgentLogger(cfg *agentConfig, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Level:      hclog.LevelFromString(cfg.logLevel),
		JSONFormat: cfg.logJSON,
		Output:     w,
	})
}

func agentVersion() string { return binaryVersion() }

func runAgent(ctx context.Context, s stdio, args []string) error {
	cfg, err := parseAgentArgs(s, args)
	if err != nil {
		return err
	}
	root := newAgentLogger(&cfg, s.Stdout)
	applyGC(cfg.gcPercent, cfg.memoryLimit, os.Getenv, availableMemory).log(root.Named("agent"))
	return runNode(ctx, &cfg, root)
}

// runNode runs a node until ctx ends (a signal), then stops it gracefully.
func runNode(ctx context.Context, cfg *agentConfig, root hclog.Logger) error {
	start := time.Now()
	log := root.Named("agent")
	// SIGHUP reloads the TLS certificates (and is never fatal) from the
	// start.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	tlsr, err := cfg.loadTLS()
	if err != nil {
		return err
	}
	if tlsr != nil {
		logTLS(log, "TLS is on", tlsr, cfg.tlsVerifyIncoming)
	}

	// Listen first: a taken port fails before raft starts, and port 0
	// resolves to the address advertised to the others.
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		return fmt.Errorf("listening on -http-addr %s: %w", cfg.httpAddr, err)
	}
	advertise := cfg.httpAdvertise
	if advertise == "" {
		advertise = ln.Addr().String()
	}

	m := metrics.New()
	if err := m.RaftTelemetry(); err != nil {
		log.Warn("raft telemetry is not exported", "error", err)
	}
	// The hooks carry the engine's aborts to the worker streams of the API
	// server; the node feeds the metrics itself.
	hooks := transport.NewHooks(m)
	ccfg := cfg.clusterConfig(advertise, root)
	ccfg.Engine.OnAbort = hooks.Abort
	ccfg.Metrics = m
	ccfg.TLS = tlsr
	ccfg.HTTPBindAddr = ln.Addr().String()
	node, err := cluster.New(ccfg)
	if err == nil {
		err = node.Start(ctx)
	}
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("starting node: %w", err)
	}
	tp, err := cfg.trace.tracerProvider(ctx, root.Named("tracing"),
		attribute.String("service.name", "cronoq"), attribute.String("service.instance.id", node.ID()),
		attribute.String("service.version", agentVersion()))
	if err != nil {
		_ = ln.Close()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		defer cancel()
		return errors.Join(err, node.Stop(sctx))
	}
	defer shutdownTracing(tp, log)
	console, err := newConsole(cfg, node.ID(), ln.Addr().String(), root.Named("ui"))
	if err != nil {
		_ = ln.Close()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		defer cancel()
		return errors.Join(err, node.Stop(sctx))
	}
	defer func() { _ = console.Close() }()
	scfg := transport.Config{
		Backend:         node,
		Listener:        ln,
		Logger:          root.Named("transport"),
		Metrics:         m,
		Hooks:           hooks,
		HoldTimeout:     cfg.holdTimeout,
		HeartbeatWindow: cfg.heartbeatWindow,
		MaxPayload:      cfg.maxPayload,
		MaxOutput:       cfg.maxOutput,
		EnableDebug:     cfg.enableDebug,
		ACLs:            cfg.acl,
		TLS:             tlsr,
		Console:         console,

		TLSVerifyIncoming: cfg.tlsVerifyIncoming,
	}
	if tp != nil {
		scfg.TracerProvider = tp
	}
	srv, err := transport.New(scfg)
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		_ = ln.Close()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		defer cancel()
		return errors.Join(fmt.Errorf("starting API server: %w", err), node.Stop(sctx))
	}
	log.Info("agent started", "node", node.ID(), "http_addr", ln.Addr().String(), "advertise", advertise,
		"raft_addr", node.RaftAddr(), "gossip_addr", node.GossipAddr(), "data_dir", node.DataDir(), "dev", cfg.dev)

	var wg sync.WaitGroup
	readyCtx, stopReady := context.WithCancel(ctx)
	wg.Add(1)
	var next []string
	if cfg.dev {
		next = devNextSteps(ln.Addr().String())
	}
	go func() {
		defer wg.Done()
		logReady(readyCtx, node, log, start, next)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		reloadOnHangup(readyCtx, hup, tlsr, cfg.tlsVerifyIncoming, log)
	}()

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("signal received: stopping")
	case <-srv.Done():
		serveErr = srv.Err()
		log.Error("API server failed: stopping", "error", serveErr)
	}
	stopReady()
	wg.Wait()

	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	srv.Drain()
	nodeErr := node.Stop(sctx)
	srvErr := srv.Stop(sctx)
	if err := errors.Join(serveErr, nodeErr, srvErr); err != nil {
		log.Error("stopped with errors", "error", err)
		return fmt.Errorf("stopping agent: %w", err)
	}
	log.Info("agent stopped")
	return nil
}

// hostNodeID is the node id of a dev agent: the host name, with what a node
// id cannot hold replaced by '-', at most 64 bytes; "" (a generated id)
// when there is no usable host name.
func hostNodeID(hostname func() (string, error)) string {
	h, err := hostname()
	if err != nil {
		return ""
	}
	h, _, _ = strings.Cut(h, ".") // the short name, as Consul shows it
	b := []byte(h)
	for i, r := range b {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
		if !ok {
			b[i] = '-'
		}
	}
	id := strings.Trim(string(b[:min(len(b), 64)]), "-")
	return id
}

// devNextSteps are the lines a dev agent logs once ready: what to try,
// against its API address addr.
func devNextSteps(addr string) []string {
	a := ""
	if addr != defaultAddr {
		a = " -addr " + addr
	}
	return []string{
		"try it: in another terminal, run a worker, then submit a task and wait for it:",
		"  cronoq worker" + a + " -pool default -handler 'hello=tr a-z A-Z'",
		"  cronoq submit" + a + " -pool default -kind hello -payload hi -wait",
	}
}

// logReady logs once the node is ready: it serves as leader, or it knows a
// leader that does.
func logReady(ctx context.Context, node *cluster.Node, log hclog.Logger, start time.Time, next []string) {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		h := node.Health()
		if h.Leader != "" && (h.Leader != h.Node || h.Ready) {
			log.Info("agent ready", "leader", h.Leader, "epoch", h.Epoch, "is_leader", h.Ready, "after", time.Since(start).Round(time.Millisecond).String())
			for _, line := range next {
				log.Info(line)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
