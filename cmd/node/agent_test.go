package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/engine/core"
)

func parseAgent(t *testing.T, args ...string) (agentConfig, error) {
	t.Helper()
	var out bytes.Buffer
	return parseAgentArgs(stdio{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}, args)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestAgentFlags(t *testing.T) {
	def := defaultAgentConfig()
	require.Equal(t, "127.0.0.1:8650", def.httpAddr)
	require.Equal(t, "127.0.0.1:8651", def.raftAddr)
	require.Equal(t, "127.0.0.1:8652", def.gossipAddr)
	require.Equal(t, 1<<20, def.maxPayload)
	require.Equal(t, 1<<20, def.maxOutput)
	require.Equal(t, 5*time.Second, def.holdTimeout)
	require.Equal(t, 400, def.gcPercent)
	require.Zero(t, def.memoryLimit, "0: half of the available memory")
	require.Equal(t, time.Second, def.maxClockSkew)

	cfg, err := parseAgent(t, "-dev")
	require.NoError(t, err)
	require.True(t, cfg.dev)
	require.Equal(t, def.httpAddr, cfg.httpAddr)

	cfg, err = parseAgent(t, "-node-id", "n1", "-data-dir", "/d", "-http-addr", "10.0.0.1:1",
		"-raft-addr", "10.0.0.1:2", "-gossip-addr", "10.0.0.1:3", "-bootstrap-expect", "3",
		"-join", "10.0.0.1:3", "-join", "10.0.0.2:3,10.0.0.3:3", "-log-json", "-log-level", "debug",
		"-leave-on-terminate", "-max-payload", "2MiB", "-max-output", "512KiB", "-pools", "a,b",
		"-heartbeat-window", "15s", "-retention", "1h", "-max-attempts", "3", "-max-pending", "10",
		"-overflow", "wait", "-hold-timeout", "2s", "-shutdown-timeout", "9s", "-http-advertise", "10.0.0.1:1",
		"-gc-percent", "150", "-memory-limit", "2GiB", "-max-clock-skew", "500ms",
		"-otlp-endpoint", "collector:4318", "-otlp-insecure", "-trace-sample-ratio", "0.25")
	require.NoError(t, err)
	want := agentConfig{
		nodeID: "n1", dataDir: "/d", httpAddr: "10.0.0.1:1", httpAdvertise: "10.0.0.1:1",
		raftAddr: "10.0.0.1:2", gossipAddr: "10.0.0.1:3", bootstrapExpect: 3,
		join: []string{"10.0.0.1:3", "10.0.0.2:3", "10.0.0.3:3"}, logJSON: true, logLevel: "debug",
		leaveOnTerminate: true, maxPayload: 2 << 20, maxOutput: 512 << 10, writeQueueLimit: def.writeQueueLimit, pools: []string{"a", "b"},
		heartbeatWindow: 15 * time.Second, retention: time.Hour, maxAttempts: 3, maxPending: 10,
		overflow: "wait", holdTimeout: 2 * time.Second, shutdownTimeout: 9 * time.Second,
		gcPercent: 150, memoryLimit: 2 << 30, maxClockSkew: 500 * time.Millisecond,
		trace: traceConfig{endpoint: "collector:4318", insecure: true, ratio: 0.25},
	}
	require.Equal(t, want, cfg)
	require.Equal(t, traceConfig{ratio: 1}, def.trace, "no tracing by default")
	require.Equal(t, 500*time.Millisecond, cfg.clusterConfig("10.0.0.1:1", nil).MaxClockSkew)
	off, err := parseAgent(t, "-dev", "-max-clock-skew", "0")
	require.NoError(t, err)
	require.Negative(t, off.clusterConfig("127.0.0.1:8650", nil).MaxClockSkew, "0 turns the check off")

	ec := cfg.engineConfig()
	require.True(t, ec.FixedPools)
	require.Equal(t, map[string]core.PoolConfig{
		"a": {Bounds: core.Bounds{MaxPending: 10}, Overflow: core.OverflowWait},
		"b": {Bounds: core.Bounds{MaxPending: 10}, Overflow: core.OverflowWait},
	}, ec.Pools)
	require.Equal(t, core.OverflowWait, ec.DefaultPool.Overflow)
	require.Equal(t, uint32(3), ec.MaxAttempts)
	require.Equal(t, 15*time.Second, ec.HeartbeatWindow)
	require.NoError(t, ec.WithDefaults().Validate())
	require.False(t, defaultAgentConfig().engineConfig().FixedPools)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "-data-dir is required"},
		{[]string{"-dev", "-bootstrap-expect", "3"}, "-dev runs one node"},
		{[]string{"-dev", "-max-payload", "lots"}, "not a size"},
		{[]string{"-dev", "-max-output", "0"}, "must be positive"},
		{[]string{"-dev", "-heartbeat-window", "0s"}, "must be positive"},
		{[]string{"-dev", "-log-level", "loud"}, "must be one of"},
		{[]string{"-dev", "-http-addr", "nope"}, "invalid -http-addr"},
		{[]string{"-dev", "-http-advertise", "0.0.0.0:1"}, "unspecified"},
		{[]string{"-dev", "extra"}, "unexpected argument"},
		{[]string{"-dev", "-trace-sample-ratio", "2"}, "from 0 to 1"},
		{[]string{"-dev", "-trace-sample-ratio", "-0.1"}, "from 0 to 1"},
		{[]string{"-dev", "-otlp-endpoint", "collector"}, "invalid -otlp-endpoint"},
		{[]string{"-dev", "-otlp-endpoint", "grpc://collector:4317"}, "invalid -otlp-endpoint"},
		{[]string{"-dev", "-otlp-endpoint", "https://collector:4318", "-otlp-insecure"}, "contradicts"},
	} {
		_, err := parseAgent(t, tc.args...)
		var ue *usageError
		require.ErrorAs(t, err, &ue, "%v", tc.args)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}

	_, err = parseAgent(t, "-h")
	require.ErrorIs(t, err, errHelp)
}

func TestAgentConfigFile(t *testing.T) {
	hcl := writeFile(t, "agent.hcl", `
node_id          = "from-file"
data_dir         = "/var/lib/cronoq"
http_addr        = "127.0.0.1:9650"
bootstrap_expect = 3
join             = ["127.0.0.1:9652", "127.0.0.1:9752"]
pools            = ["a"]
max_payload      = "2MiB"
max_output       = 65536
heartbeat_window = "20s"
log_json         = true
leave_on_terminate = true
enable_debug     = true
gc_percent       = 200
memory_limit     = "512MiB"
max_clock_skew   = "2s"
otlp_endpoint    = "http://collector:4318"
otlp_insecure    = false
trace_sample_ratio = 0.5
`)
	cfg, err := parseAgent(t, "-config", hcl)
	require.NoError(t, err)
	require.Equal(t, "from-file", cfg.nodeID)
	require.Equal(t, "/var/lib/cronoq", cfg.dataDir)
	require.Equal(t, "127.0.0.1:9650", cfg.httpAddr)
	require.Equal(t, 3, cfg.bootstrapExpect)
	require.Equal(t, []string{"127.0.0.1:9652", "127.0.0.1:9752"}, cfg.join)
	require.Equal(t, []string{"a"}, cfg.pools)
	require.Equal(t, 2<<20, cfg.maxPayload)
	require.Equal(t, 65536, cfg.maxOutput)
	require.Equal(t, 20*time.Second, cfg.heartbeatWindow)
	require.True(t, cfg.logJSON)
	require.True(t, cfg.leaveOnTerminate)
	require.True(t, cfg.enableDebug)
	require.Equal(t, 200, cfg.gcPercent)
	require.Equal(t, 512<<20, cfg.memoryLimit)
	require.Equal(t, 2*time.Second, cfg.maxClockSkew)
	require.Equal(t, traceConfig{endpoint: "http://collector:4318", ratio: 0.5}, cfg.trace)
	require.Equal(t, "127.0.0.1:8651", cfg.raftAddr, "keys not in the file keep their defaults")

	// Flags override the file, wherever -config appears; a list given on
	// the command line replaces the file's.
	cfg, err = parseAgent(t, "-node-id", "from-flag", "-config", hcl, "-join", "10.0.0.9:1", "-max-payload", "1KiB", "-log-json=false")
	require.NoError(t, err)
	require.Equal(t, "from-flag", cfg.nodeID)
	require.Equal(t, []string{"10.0.0.9:1"}, cfg.join)
	require.Equal(t, []string{"a"}, cfg.pools)
	require.Equal(t, 1<<10, cfg.maxPayload)
	require.False(t, cfg.logJSON)
	require.Equal(t, "/var/lib/cronoq", cfg.dataDir)

	js := writeFile(t, "agent.json", `{"dev": true, "http_addr": "127.0.0.1:9999", "retention": "2h", "max_pending": 7, "overflow": "wait"}`)
	cfg, err = parseAgent(t, "-config", js)
	require.NoError(t, err)
	require.True(t, cfg.dev)
	require.Equal(t, "127.0.0.1:9999", cfg.httpAddr)
	require.Equal(t, 2*time.Hour, cfg.retention)
	require.Equal(t, 7, cfg.maxPending)
	require.Equal(t, "wait", cfg.overflow)

	for _, tc := range []struct {
		name, content, want string
	}{
		{"unknown.hcl", `nope = 1`, `"nope" is not expected`},
		{"badsize.hcl", `dev = true` + "\n" + `max_payload = "lots"`, `max_payload = "lots": not a size`},
		{"badenum.json", `{"dev": true, "log_level": "loud"}`, `log_level`},
		{"syntax.hcl", `dev = `, `syntax.hcl`},
		{"agent.yaml", `dev: true`, `agent.yaml`},
	} {
		_, err := parseAgent(t, "-config", writeFile(t, tc.name, tc.content))
		var ue *usageError
		require.ErrorAs(t, err, &ue, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	_, err = parseAgent(t, "-config", filepath.Join(t.TempDir(), "missing.hcl"))
	require.ErrorContains(t, err, "missing.hcl")

	// Every key of the file is a flag of the same name, but the pool
	// blocks.
	c := newCmd("agent", "", "")
	scratch := defaultAgentConfig()
	agentFlags(c, &scratch)
	ft := reflect.TypeOf(fileConfig{})
	for i := range ft.NumField() {
		key, kind, _ := strings.Cut(ft.Field(i).Tag.Get("hcl"), ",")
		if kind == "block" {
			continue
		}
		require.NotNil(t, c.fs.Lookup(strings.ReplaceAll(key, "_", "-")), "key %s", key)
	}
}

func TestAgentRaftFlags(t *testing.T) {
	// Unset: the cluster defaults, or the -dev timings.
	cfg, err := parseAgent(t, "-data-dir", "/d")
	require.NoError(t, err)
	cc := cfg.clusterConfig("127.0.0.1:8650", nil)
	require.Zero(t, cc.HeartbeatTimeout)
	require.Zero(t, cc.ElectionTimeout)
	require.Zero(t, cc.LeaderLeaseTimeout)
	require.Zero(t, cc.SnapshotThreshold)
	require.Zero(t, cc.SnapshotInterval)
	require.Zero(t, cc.TrailingLogs)
	d := cc.WithDefaults()
	require.Equal(t, 500*time.Millisecond, d.HeartbeatTimeout)
	require.Equal(t, 500*time.Millisecond, d.ElectionTimeout)
	require.Equal(t, 250*time.Millisecond, d.LeaderLeaseTimeout)
	require.Equal(t, uint64(8192), d.SnapshotThreshold)
	require.Equal(t, 2*time.Minute, d.SnapshotInterval)
	require.Equal(t, uint64(10240), d.TrailingLogs)

	cfg, err = parseAgent(t, "-dev")
	require.NoError(t, err)
	cc = cfg.clusterConfig("127.0.0.1:8650", nil)
	require.Equal(t, devHeartbeatTimeout, cc.HeartbeatTimeout)
	require.Equal(t, devElectionTimeout, cc.ElectionTimeout)
	require.Equal(t, devLeaderLeaseTimeout, cc.LeaderLeaseTimeout)
	require.Equal(t, devCommitTimeout, cc.CommitTimeout)

	// Given: they reach the cluster configuration, which accepts them.
	raftArgs := []string{"-raft-heartbeat-timeout", "500ms", "-raft-election-timeout", "750ms",
		"-raft-leader-lease-timeout", "250ms", "-raft-snapshot-threshold", "200",
		"-raft-snapshot-interval", "2s", "-raft-trailing-logs", "100"}
	cfg, err = parseAgent(t, append([]string{"-data-dir", "/d"}, raftArgs...)...)
	require.NoError(t, err)
	require.Equal(t, 500*time.Millisecond, cfg.raftHeartbeatTimeout)
	require.Equal(t, 750*time.Millisecond, cfg.raftElectionTimeout)
	require.Equal(t, 250*time.Millisecond, cfg.raftLeaderLeaseTimeout)
	require.Equal(t, 200, cfg.raftSnapshotThreshold)
	require.Equal(t, 2*time.Second, cfg.raftSnapshotInterval)
	require.Equal(t, 100, cfg.raftTrailingLogs)
	cc = cfg.clusterConfig("127.0.0.1:8650", nil)
	require.Equal(t, 500*time.Millisecond, cc.HeartbeatTimeout)
	require.Equal(t, 750*time.Millisecond, cc.ElectionTimeout)
	require.Equal(t, 250*time.Millisecond, cc.LeaderLeaseTimeout)
	require.Equal(t, uint64(200), cc.SnapshotThreshold)
	require.Equal(t, 2*time.Second, cc.SnapshotInterval)
	require.Equal(t, uint64(100), cc.TrailingLogs)
	require.NoError(t, cc.WithDefaults().Validate())

	// Flags override the -dev timings; 0 keeps them.
	cfg, err = parseAgent(t, "-dev", "-raft-heartbeat-timeout", "150ms", "-raft-election-timeout", "0")
	require.NoError(t, err)
	cc = cfg.clusterConfig("127.0.0.1:8650", nil)
	require.Equal(t, 150*time.Millisecond, cc.HeartbeatTimeout)
	require.Equal(t, devElectionTimeout, cc.ElectionTimeout)
	require.Equal(t, devLeaderLeaseTimeout, cc.LeaderLeaseTimeout)

	// The configuration file takes the same settings.
	hcl := writeFile(t, "raft.hcl", `
data_dir                  = "/d"
raft_heartbeat_timeout    = "400ms"
raft_election_timeout     = "400ms"
raft_leader_lease_timeout = "200ms"
raft_snapshot_threshold   = 300
raft_snapshot_interval    = "3s"
raft_trailing_logs        = 50
`)
	cfg, err = parseAgent(t, "-config", hcl, "-raft-trailing-logs", "60")
	require.NoError(t, err)
	cc = cfg.clusterConfig("127.0.0.1:8650", nil)
	require.Equal(t, 400*time.Millisecond, cc.HeartbeatTimeout)
	require.Equal(t, 400*time.Millisecond, cc.ElectionTimeout)
	require.Equal(t, 200*time.Millisecond, cc.LeaderLeaseTimeout)
	require.Equal(t, uint64(300), cc.SnapshotThreshold)
	require.Equal(t, 3*time.Second, cc.SnapshotInterval)
	require.Equal(t, uint64(60), cc.TrailingLogs, "the command line overrides the file")

	for _, tc := range []struct {
		args []string
		want string
	}{
		// lease <= heartbeat <= election, with the defaults for what is unset.
		{[]string{"-raft-heartbeat-timeout", "500ms", "-raft-leader-lease-timeout", "600ms"},
			"-raft-leader-lease-timeout 600ms is longer than -raft-heartbeat-timeout 500ms"},
		{[]string{"-raft-heartbeat-timeout", "100ms"},
			"-raft-leader-lease-timeout 250ms (the default) is longer than -raft-heartbeat-timeout 100ms"},
		{[]string{"-raft-heartbeat-timeout", "2s", "-raft-leader-lease-timeout", "1s"},
			"-raft-election-timeout 500ms (the default) is shorter than -raft-heartbeat-timeout 2s"},
		{[]string{"-raft-election-timeout", "300ms", "-raft-heartbeat-timeout", "400ms", "-raft-leader-lease-timeout", "100ms"},
			"-raft-election-timeout 300ms is shorter than -raft-heartbeat-timeout 400ms"},
		{[]string{"-raft-election-timeout", "300ms"},
			"-raft-election-timeout 300ms is shorter than -raft-heartbeat-timeout 500ms (the default)"},
		{[]string{"-dev", "-raft-heartbeat-timeout", "1s"},
			"-raft-election-timeout 200ms (the -dev default) is shorter than -raft-heartbeat-timeout 1s"},
		// Raft's lower bounds, and malformed values.
		{[]string{"-raft-leader-lease-timeout", "1ms"}, "-raft-leader-lease-timeout 1ms is too short: at least 5ms"},
		{[]string{"-raft-snapshot-interval", "1ms"}, "-raft-snapshot-interval 1ms is too short: at least 5ms"},
		{[]string{"-raft-heartbeat-timeout", "-1s"}, "must not be negative"},
		{[]string{"-raft-election-timeout", "soon"}, "not a duration"},
		{[]string{"-raft-snapshot-threshold", "-1"}, "must be at least 0"},
		{[]string{"-raft-trailing-logs", "many"}, "not an integer"},
	} {
		_, err := parseAgent(t, append([]string{"-data-dir", "/d"}, tc.args...)...)
		var ue *usageError
		require.ErrorAs(t, err, &ue, "%v", tc.args)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	_, err = parseAgent(t, "-config", writeFile(t, "bad.hcl", `dev = true`+"\n"+`raft_snapshot_interval = "often"`))
	require.ErrorContains(t, err, `raft_snapshot_interval = "often": not a duration`)

	// Every combination the agent accepts, raft accepts.
	for _, hb := range []string{"0", "5ms", "100ms", "1s", "3s"} {
		for _, el := range []string{"0", "5ms", "100ms", "1s", "3s"} {
			for _, lease := range []string{"0", "5ms", "100ms", "1s", "3s"} {
				for _, dev := range []bool{false, true} {
					args := []string{"-data-dir", "/d", "-raft-heartbeat-timeout", hb, "-raft-election-timeout", el, "-raft-leader-lease-timeout", lease}
					if dev {
						args = append(args, "-dev")
					}
					cfg, err := parseAgent(t, args...)
					if err != nil {
						continue
					}
					require.NoError(t, cfg.clusterConfig("127.0.0.1:8650", nil).WithDefaults().Validate(), "%v", args)
				}
			}
		}
	}

	// The help lists every raft flag with its default.
	var out bytes.Buffer
	_, err = parseAgentArgs(stdio{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}, []string{"-h"})
	require.ErrorIs(t, err, errHelp)
	help := out.String()
	for _, want := range []string{
		"  -raft-heartbeat-timeout DUR\n", "(default 500ms, 200ms with -dev)",
		"  -raft-election-timeout DUR\n",
		"  -raft-leader-lease-timeout DUR\n", "(default 250ms, 100ms with -dev)",
		"  -raft-snapshot-threshold N\n", "(default 8192)",
		"  -raft-snapshot-interval DUR\n", "(default 2m0s)",
		"  -raft-trailing-logs N\n", "(default 10240)",
	} {
		require.Contains(t, help, want)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{
		"1": 1, "1048576": 1 << 20, "1MiB": 1 << 20, "1mib": 1 << 20, "512KiB": 512 << 10, "2MB": 2_000_000,
		"1G": 1 << 30, "10 KB": 10_000, "3k": 3 << 10, "100b": 100,
	} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "-1", "0", "1.5MiB", "3TiB", "9GiB"} {
		_, err := parseSize(in)
		require.Error(t, err, in)
	}
	require.Equal(t, "1MiB", formatSize(1<<20))
	require.Equal(t, "1000", formatSize(1000))
}

// syncWriter is a goroutine-safe buffer.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// agentPorts returns -http-addr, -raft-addr and -gossip-addr flags with
// free ports on 127.0.0.1, and the HTTP address.
func agentPorts(t testing.TB) ([]string, string) {
	t.Helper()
	// Every listener is held until all three ports are picked: a port
	// closed at once can be handed out again by the next Listen, and the
	// agent then refuses two roles on one address.
	var ports []int
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			_ = ln.Close()
		}
	}()
	for len(ports) < 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			_ = ln.Close()
			continue
		}
		_ = pc.Close()
		held = append(held, ln)
		ports = append(ports, port)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	return []string{
		"-http-addr", httpAddr,
		"-raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"-gossip-addr", fmt.Sprintf("127.0.0.1:%d", ports[2]),
	}, httpAddr
}

// healthOK polls GET /v1/health until it answers 200 and returns its body.
func healthOK(t testing.TB, addr string, within time.Duration, exited <-chan struct{}) map[string]any {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := hc.Get("http://" + addr + "/v1/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				var h map[string]any
				require.NoError(t, json.Unmarshal(body, &h))
				return h
			}
		}
		select {
		case <-exited:
			t.Fatal("agent exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready within %s (last error %v)", within, err)
		}
		time.Sleep(5 * time.Millisecond) // polling an external process
	}
}

func TestAgentDevInProcess(t *testing.T) {
	flags, addr := agentPorts(t)
	out := &syncWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	exited := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(exited)
		code <- run(ctx, append([]string{"agent", "-dev", "-log-level", "debug", "-enable-debug"}, flags...),
			stdio{Stdin: strings.NewReader(""), Stdout: out, Stderr: out})
	}()
	h := healthOK(t, addr, 10*time.Second, exited)
	ready := time.Since(start)
	// The start-up time is reported, not asserted: timing targets belong in
	// benchmarks (BenchmarkAgentDevStartup).
	t.Logf("dev agent ready after %s", ready)
	require.Equal(t, h["node"], h["leader"])
	require.Equal(t, true, h["ready"])
	// Named after the host, as Nomad and Consul dev agents are.
	if host := hostNodeID(os.Hostname); host != "" {
		require.Equal(t, host, h["node"])
	}

	// -enable-debug serves the profiler.
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	cl, err := client.New([]string{addr})
	require.NoError(t, err)
	defer cl.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	res, err := cl.Submit(cctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k", Payload: []byte("x")}})
	require.NoError(t, err)
	task, err := cl.Get(cctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusQueued, task.Status)
	_, err = cl.Submit(cctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k", Payload: make([]byte, 1<<20+1)}})
	var ie *client.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "payload", ie.Field)

	// The JSON API as the README's curl example calls it.
	post := func(method, body string) (int, map[string]any) {
		resp, err := http.Post("http://"+addr+"/cronoq.v1.TaskService/"+method, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return resp.StatusCode, m
	}
	status, body := post("Submit", `{"spec": {"template": {"pool": "default", "kind": "hello", "payload": "aGk="}, "key": "order-42"}}`)
	require.Equal(t, http.StatusOK, status, "%v", body)
	id := body["result"].(map[string]any)["id"]
	require.NotEmpty(t, id)
	status, body = post("Get", `{"ref": {"key": "order-42"}}`)
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.Equal(t, id, body["task"].(map[string]any)["id"])
	require.Equal(t, "aGk=", body["task"].(map[string]any)["template"].(map[string]any)["payload"])
	status, body = post("Get", `{"ref": {"id": "nope"}}`)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "not_found", body["code"])

	// The ready line is logged by a poller: wait for it before stopping.
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "agent: agent ready") }, 10*time.Second, 10*time.Millisecond, out.String())
	cancel() // what the first SIGINT/SIGTERM does
	select {
	case c := <-code:
		require.Equal(t, exitOK, c, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	logs := out.String()
	for _, want := range []string{"agent: agent started", "agent: agent ready", "raft: ", "transport: serving the API", "agent: agent stopped",
		// The next step, against this agent's address.
		"cronoq submit -addr " + addr + " -pool default -kind hello -payload hi -wait",
		"cronoq worker -addr " + addr + " -pool default -handler 'hello=tr a-z A-Z'"} {
		require.Contains(t, logs, want)
	}
}

// TestAgentHelperProcess is the agent run as a real process by
// TestAgentSignal (it does nothing in a normal test run).
func TestAgentHelperProcess(t *testing.T) {
	if os.Getenv("CRONOQ_AGENT_HELPER") != "1" {
		t.Skip("helper process for TestAgentSignal")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Args = append([]string{"cronoq"}, args...)
	main() // exits
}

func TestAgentSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			flags, addr := agentPorts(t)
			dataDir := t.TempDir()
			args := append([]string{"-test.run=^TestAgentHelperProcess$", "--", "agent", "-data-dir", dataDir,
				"-node-id", "solo", "-bootstrap-expect", "1", "-log-json"}, flags...)
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "CRONOQ_AGENT_HELPER=1")
			out := &syncWriter{}
			cmd.Stdout, cmd.Stderr = out, out
			require.NoError(t, cmd.Start())
			exited := make(chan struct{})
			var waitErr error
			go func() {
				defer close(exited)
				waitErr = cmd.Wait()
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			h := healthOK(t, addr, 30*time.Second, exited)
			require.Equal(t, "solo", h["node"])

			require.NoError(t, cmd.Process.Signal(sig))
			select {
			case <-exited:
			case <-time.After(40 * time.Second):
				t.Fatalf("agent did not exit after %s; output:\n%s", sig, out.String())
			}
			var ee *exec.ExitError
			if errors.As(waitErr, &ee) {
				t.Fatalf("agent exited with %v after %s; output:\n%s", waitErr, sig, out.String())
			}
			require.NoError(t, waitErr)
			// JSON logs, one object per line, with the module names.
			modules := map[string]bool{}
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if !strings.HasPrefix(line, "{") {
					continue // the test binary's own output
				}
				var entry map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
				if m, ok := entry["@module"].(string); ok {
					modules[m] = true
				}
			}
			for _, m := range []string{"agent", "raft", "transport"} {
				require.True(t, modules[m], "module %s in %v", m, modules)
			}
			require.Contains(t, out.String(), `"agent stopped"`)
			// The node id stays with the data dir.
			id, err := os.ReadFile(filepath.Join(dataDir, "node-id"))
			require.NoError(t, err)
			require.Equal(t, "solo", strings.TrimSpace(string(id)))
		})
	}
}

// BenchmarkAgentDevStartup measures how long `cronoq agent -dev` takes from
// start to a healthy, leading node (the contract asks for under 2 seconds).
func BenchmarkAgentDevStartup(b *testing.B) {
	for b.Loop() {
		flags, addr := agentPorts(b)
		ctx, cancel := context.WithCancel(context.Background())
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			run(ctx, append([]string{"agent", "-dev", "-log-level", "error"}, flags...),
				stdio{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
		}()
		healthOK(b, addr, 10*time.Second, exited)
		cancel()
		<-exited
	}
}

// A configuration value of the wrong type is refused, naming the key, where
// it is, and the type wanted (not converted: "data_dir": 5 is no
// directory "5").
func TestAgentConfigFileTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content, want string }{
		{"c.json", `{"data_dir": 5}`, "data_dir (" + "%s:1,2-15): want a string, got a number"},
		{"c.json", `{"bootstrap_expect": "3"}`, "bootstrap_expect (%s:1,2-25): want a number, got a string"},
		{"c.json", `{"log_json": "yes"}`, "log_json (%s:1,2-19): want true or false, got a string"},
		{"c.hcl", "join = [\"127.0.0.1:8652\", 8662]\n", "join (%s:1,1-32): want a list of strings, got a list"},
		{"c.hcl", "pool \"etl\" {\n  max_pending = \"lots\"\n}\n", `pool "etl": max_pending (%s:2,3-23): want a number, got a string`},
		{"c.json", `{"node_id": ["a"]}`, "node_id (%s:1,2-18): want a string, got a list"},
	} {
		path := writeFile(t, tc.name, tc.content)
		_, err := parseAgent(t, "-config", path)
		require.Error(t, err, tc.content)
		require.Contains(t, err.Error(), fmt.Sprintf(tc.want, path), tc.content)
	}
	// Sizes may be numbers.
	cfg, err := parseAgent(t, "-dev", "-config", writeFile(t, "c.json", `{"max_payload": 2048, "max_output": "1MiB"}`))
	require.NoError(t, err)
	require.Equal(t, 2048, cfg.maxPayload)
	require.Equal(t, 1<<20, cfg.maxOutput)
}

func TestHostNodeID(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"build-7":               "build-7",
		"web01.example.com":     "web01",
		"my host_name":          "my-host_name",
		"":                      "",
		strings.Repeat("h", 80): strings.Repeat("h", 64),
		"émile":                 "mile",
	} {
		got := hostNodeID(func() (string, error) { return host, nil })
		require.Equal(t, want, got, "%q", host)
	}
	require.Empty(t, hostNodeID(func() (string, error) { return "", errors.New("no host name") }))
	require.Equal(t, []string{
		"try it: in another terminal, run a worker, then submit a task and wait for it:",
		"  cronoq worker -pool default -handler 'hello=tr a-z A-Z'",
		"  cronoq submit -pool default -kind hello -payload hi -wait",
	}, devNextSteps(defaultAddr))
}
