package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2/hclsimple"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine/core"
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

	maxPayload      int
	maxOutput       int
	pools           []string
	heartbeatWindow time.Duration
	retention       time.Duration
	maxAttempts     int
	maxPending      int
	overflow        string
	holdTimeout     time.Duration
	shutdownTimeout time.Duration
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
		heartbeatWindow: d.HeartbeatWindow,
		retention:       d.Retention,
		maxAttempts:     int(d.MaxAttempts),
		maxPending:      d.DefaultPool.Bounds.MaxPending,
		overflow:        "reject",
		holdTimeout:     transport.DefaultHoldTimeout,
		shutdownTimeout: defaultShutdownTimeout,
	}
}

const agentAbout = `
Run a cronoq node: a Raft voter, a gossip member, and the HTTP API that
clients, workers and the CLI use (ConnectRPC, GET /v1/health, GET /metrics),
all on the addresses below. The leader runs the scheduler; any node serves
any call and forwards what needs the leader.

-dev runs one node with a temporary data dir that bootstraps itself, for
local use. Otherwise -data-dir is required; -bootstrap-expect N forms a new
cluster once N nodes see each other through gossip, and -join (repeatable,
retried until it succeeds) names gossip addresses of other nodes; the same
-join list (every server, this one included) can be given to every node.
The node id is kept in the data dir: restarting with the same -data-dir
brings the node back with its data, and a different -node-id is refused.

-config FILE reads settings from an HCL (.hcl) or JSON (.json) file whose
keys are the flag names with underscores (node_id, data_dir, http_addr,
bootstrap_expect, join = [...], max_payload = "2MiB", heartbeat_window =
"15s", ...). Flags given on the command line override the file.

SIZE is a number of bytes with an optional unit: 512KiB, 1MiB, 2MB, 1G.

On SIGINT or SIGTERM the node stops cleanly and exits 0 (1 only if
stopping itself failed): it refuses new calls, hands leadership to another
voter if it leads, finishes what is in flight, and closes its connections.
It stays in the Raft configuration unless -leave-on-terminate is set. A
second signal kills it at once.`

// agentFlags registers the agent's flags on c, bound to cfg.
func agentFlags(c *cmd, cfg *agentConfig) {
	fs := c.fs
	fs.BoolVar(&cfg.dev, "dev", cfg.dev, "run a single self-bootstrapping node with a temporary data dir (unless -data-dir)")
	fs.StringVar(&cfg.nodeID, "node-id", cfg.nodeID, "node `ID` (raft server id, gossip name); default: the id kept in the data dir, else a new one")
	fs.StringVar(&cfg.dataDir, "data-dir", cfg.dataDir, "`DIR` holding the node id, the raft log and snapshots (required unless -dev)")
	fs.StringVar(&cfg.httpAddr, "http-addr", cfg.httpAddr, "`HOST:PORT` of the HTTP API (RPC, /v1/health, /metrics)")
	fs.StringVar(&cfg.httpAdvertise, "http-advertise", cfg.httpAdvertise, "`HOST:PORT` other nodes and workers are given for the API (default: -http-addr)")
	fs.StringVar(&cfg.raftAddr, "raft-addr", cfg.raftAddr, "`IP:PORT` raft listens on, advertises and dials from")
	fs.StringVar(&cfg.gossipAddr, "gossip-addr", cfg.gossipAddr, "`IP:PORT` of gossip (TCP and UDP)")
	fs.Var(intValue{&cfg.bootstrapExpect, 0}, "bootstrap-expect", "form the cluster once `N` nodes see each other (0: join an existing cluster)")
	fs.Var(&fileList{list: &cfg.join}, "join", "gossip `HOST:PORT` of a node to join, retried until it succeeds (repeatable, or comma-separated)")
	fs.StringVar(&cfg.configFile, "config", cfg.configFile, "read settings from `FILE` (.hcl or .json); flags override it")
	fs.BoolVar(&cfg.logJSON, "log-json", cfg.logJSON, "log in JSON")
	fs.Var(enumValue{&cfg.logLevel, []string{"trace", "debug", "info", "warn", "error"}}, "log-level", "log `LEVEL`: trace, debug, info, warn or error")
	fs.BoolVar(&cfg.leaveOnTerminate, "leave-on-terminate", cfg.leaveOnTerminate, "leave the cluster (gossip and raft configuration) on SIGINT/SIGTERM")
	fs.Var(sizeValue{&cfg.maxPayload}, "max-payload", "largest task payload, `SIZE`; larger submits are refused")
	fs.Var(sizeValue{&cfg.maxOutput}, "max-output", "largest task output, `SIZE`; a larger output fails the attempt permanently")
	fs.Var(&fileList{list: &cfg.pools}, "pools", "fixed list of pool `NAMES` (comma-separated); tasks of other pools are refused (default: any pool)")
	fs.Var(durationValue{&cfg.heartbeatWindow, true}, "heartbeat-window", "a lease is lost after `DUR` without a heartbeat")
	fs.Var(durationValue{&cfg.retention, true}, "retention", "keep ended tasks and their outputs for `DUR`")
	fs.Var(intValue{&cfg.maxAttempts, 1}, "max-attempts", "at most `N` attempts per task whose spec sets none")
	fs.Var(intValue{&cfg.maxPending, 1}, "max-pending", "pending (scheduled, queued, retrying) tasks per pool, at most `N`")
	fs.Var(enumValue{&cfg.overflow, []string{"reject", "wait"}}, "overflow", "`POLICY` for a submit that does not fit -max-pending: reject (answer overloaded) or wait (park it until there is room)")
	fs.Var(durationValue{&cfg.holdTimeout, true}, "hold-timeout", "hold calls that need the leader up to `DUR` while none is known")
	fs.Var(durationValue{&cfg.shutdownTimeout, true}, "shutdown-timeout", "bound the graceful stop to `DUR`")
}

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
		if err := loadConfigFile(c.fs, scratch.configFile); err != nil {
			return cfg, usagef("%v", err)
		}
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
	MaxPayload       *string  `hcl:"max_payload,optional"`
	MaxOutput        *string  `hcl:"max_output,optional"`
	Pools            []string `hcl:"pools,optional"`
	HeartbeatWindow  *string  `hcl:"heartbeat_window,optional"`
	Retention        *string  `hcl:"retention,optional"`
	MaxAttempts      *int     `hcl:"max_attempts,optional"`
	MaxPending       *int     `hcl:"max_pending,optional"`
	Overflow         *string  `hcl:"overflow,optional"`
	HoldTimeout      *string  `hcl:"hold_timeout,optional"`
	ShutdownTimeout  *string  `hcl:"shutdown_timeout,optional"`
}

// loadConfigFile reads path and sets the flags it names on fs, as if given
// before every command-line flag.
func loadConfigFile(fs *flag.FlagSet, path string) error {
	var fc fileConfig
	if err := hclsimple.DecodeFile(path, nil, &fc); err != nil {
		return fmt.Errorf("reading -config %s: %w", path, err)
	}
	v := reflect.ValueOf(fc)
	for i := range v.NumField() {
		key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("hcl"), ",")
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
				return fmt.Errorf("reading -config %s: %s = %q: %w", path, key, val, err)
			}
		}
		if l, ok := fs.Lookup(name).Value.(*fileList); ok {
			l.fromFile = true
		}
	}
	return nil
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

func (v sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
}

func parseSize(s string) (int, error) {
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
	if n > (1<<31-1)/mult {
		return 0, errors.New("too large (at most 2GiB)")
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
		MaxPayload:      cfg.maxPayload,
		MaxOutput:       cfg.maxOutput,
		MaxAttempts:     uint32(cfg.maxAttempts),
		DefaultPool:     core.PoolConfig{Bounds: core.Bounds{MaxPending: cfg.maxPending}},
	}
	if cfg.overflow == "wait" {
		c.Overflow = core.OverflowWait
	}
	if len(cfg.pools) > 0 {
		c.FixedPools = true
		c.Pools = make(map[string]core.PoolConfig, len(cfg.pools))
		for _, p := range cfg.pools {
			c.Pools[p] = c.DefaultPool
		}
	}
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

func agentVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}

func runAgent(ctx context.Context, s stdio, args []string) error {
	cfg, err := parseAgentArgs(s, args)
	if err != nil {
		return err
	}
	root := newAgentLogger(&cfg, s.Stdout)
	return runNode(ctx, &cfg, root)
}

// runNode runs a node until ctx ends (a signal), then stops it gracefully.
func runNode(ctx context.Context, cfg *agentConfig, root hclog.Logger) error {
	start := time.Now()
	log := root.Named("agent")

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
	hooks := transport.NewHooks(m)
	ccfg := cluster.Config{
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
	ccfg.Engine.Core = cfg.engineConfig()
	ccfg.Engine = hooks.Engine(ccfg.Engine)
	if cfg.dev {
		// One node: elect it at once.
		ccfg.HeartbeatTimeout = 200 * time.Millisecond
		ccfg.ElectionTimeout = 200 * time.Millisecond
		ccfg.LeaderLeaseTimeout = 100 * time.Millisecond
		ccfg.CommitTimeout = 5 * time.Millisecond
	}
	node, err := cluster.New(ccfg)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("starting node: %w", err)
	}
	srv, err := transport.New(transport.Config{
		Node:            node,
		Listener:        ln,
		Logger:          root.Named("transport"),
		Metrics:         m,
		Hooks:           hooks,
		HoldTimeout:     cfg.holdTimeout,
		HeartbeatWindow: cfg.heartbeatWindow,
		MaxPayload:      cfg.maxPayload,
		MaxOutput:       cfg.maxOutput,
	})
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		_ = ln.Close()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		defer cancel()
		return errors.Join(fmt.Errorf("starting API server: %w", err), node.Shutdown(sctx))
	}
	log.Info("agent started", "node", node.ID(), "http_addr", ln.Addr().String(), "advertise", advertise,
		"raft_addr", node.RaftAddr(), "gossip_addr", node.GossipAddr(), "data_dir", node.DataDir(), "dev", cfg.dev)

	var wg sync.WaitGroup
	readyCtx, stopReady := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		logReady(readyCtx, node, log, start)
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
	nodeErr := node.Shutdown(sctx)
	srvErr := srv.Shutdown(sctx)
	if err := errors.Join(serveErr, nodeErr, srvErr); err != nil {
		log.Error("stopped with errors", "error", err)
		return fmt.Errorf("stopping agent: %w", err)
	}
	log.Info("agent stopped")
	return nil
}

// logReady logs once the node is ready: it serves as leader, or it knows a
// leader that does.
func logReady(ctx context.Context, node *cluster.Node, log hclog.Logger, start time.Time) {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		h := node.Health()
		if h.Leader != "" && (h.Leader != h.Node || h.Ready) {
			log.Info("agent ready", "leader", h.Leader, "epoch", h.Epoch, "is_leader", h.Ready, "after", time.Since(start).Round(time.Millisecond).String())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
