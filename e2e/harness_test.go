// Package e2e holds the end-to-end tests of cronoq: they build the cronoq
// binary once, start real three-node clusters of `cronoq agent` processes on
// loopback, drive them with the CLI (and, where the CLI has no equivalent,
// the Go SDK), and check what users and scripts rely on (CONTRACT.md and
// SEMANTICS.md).
//
// The package is skipped with -short. Set CRONOQ_E2E_BINARY to test an
// already built binary instead of building one, and CRONOQ_E2E_KEEP=1 to
// keep the logs and data directories of failed tests.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/internal/testcluster"

	// Zones for checking schedule times, whatever the host's tzdata.
	_ "time/tzdata"
)

// binary is the path of the cronoq binary under test.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped with -short (starts real clusters)")
		os.Exit(0)
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if b := os.Getenv("CRONOQ_E2E_BINARY"); b != "" {
		abs, err := filepath.Abs(b)
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: CRONOQ_E2E_BINARY: %v\n", err)
			return 1
		}
		binary = abs
	}
	dir, err := os.MkdirTemp("", "cronoq-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if binary == "" {
		binary = filepath.Join(dir, "cronoq")
		if err := buildBinary(binary); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: building cronoq: %v\n", err)
			return 1
		}
	}
	if os.Getenv("CRONOQ_E2E_SECURE") == "1" {
		if err := setupSecure(dir); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: setting up TLS, gossip encryption and ACLs: %v\n", err)
			return 1
		}
		fmt.Println("e2e: TLS (verify incoming), gossip encryption and ACLs on every agent")
	}
	return m.Run()
}

// buildBinary builds ./cmd/node of the module holding this package into out
// (without -race: the agents are the system under test, not the tests).
func buildBinary(out string) error {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("finding the module root: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command("go", "build", "-o", out, "./cmd/node")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/node: %w\n%s", err, b)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Processes

// proc is a child process running in a process group of its own, with its
// stdout and stderr captured to a log file.
type proc struct {
	name    string
	args    []string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	state   *os.ProcessState
}

// startProc starts the binary with args, appending its output to logPath.
// The process is killed (its whole group) when the test ends.
func startProc(t testing.TB, name, logPath string, env []string, args ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	fmt.Fprintf(f, "=== %s start %s: %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), name, filepath.Base(binary), strings.Join(args, " "))
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start(), "starting %s", name)
	p := &proc{name: name, args: args, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process group and waits until the process is
// reaped.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// signal sends sig to the process (not its group).
func (p *proc) signal(sig syscall.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// waitExit waits up to timeout for the process to end and returns its exit
// code (-1 when killed by a signal).
func (p *proc) waitExit(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
	}
	return p.state.ExitCode()
}

// logText returns the process's log so far.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// ---------------------------------------------------------------------------
// Cluster

// node is one `cronoq agent` of a test cluster.
type node struct {
	id         string
	httpAddr   string
	raftAddr   string
	gossipAddr string
	dataDir    string
	logPath    string
	args       []string
	proc       *proc
}

// cluster is a set of agents started by the test, plus the workers it ran.
type cluster struct {
	t       *testing.T
	nodes   []*node
	logDir  string
	procs   []*proc // every process started, for the failure dump
	procsMu sync.Mutex
}

type clusterOptions struct {
	size  int
	extra []string // extra agent flags, for every node
}

// clusterOption tunes newCluster.
type clusterOption func(*clusterOptions)

// withAgentFlags adds flags to every agent's command line.
func withAgentFlags(flags ...string) clusterOption {
	return func(o *clusterOptions) { o.extra = append(o.extra, flags...) }
}

// newCluster starts a three-node cluster (each node on a loopback IP of its
// own, see testcluster.NewAddrs,
// -bootstrap-expect 3, the same -join list for every node, data dirs in
// t.TempDir()) and waits until it has a leader every node knows. Every
// process is killed when the test ends; on failure their logs are dumped.
func newCluster(t *testing.T, opts ...clusterOption) *cluster {
	t.Helper()
	o := clusterOptions{size: 3}
	for _, opt := range opts {
		opt(&o)
	}
	c := &cluster{t: t, logDir: t.TempDir()}
	// Registered after TempDir's removal, so it runs before it.
	t.Cleanup(c.cleanup)

	var join []string
	for i := range o.size {
		a := testcluster.NewAddrs()
		n := &node{
			id:         fmt.Sprintf("node%d", i+1),
			httpAddr:   a.HTTP,
			raftAddr:   a.Raft,
			gossipAddr: a.Gossip,
			dataDir:    filepath.Join(c.logDir, fmt.Sprintf("data%d", i+1)),
		}
		n.logPath = filepath.Join(c.logDir, n.id+".log")
		join = append(join, n.gossipAddr)
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		n.args = append([]string{"agent",
			"-node-id", n.id,
			"-data-dir", n.dataDir,
			"-http-addr", n.httpAddr,
			"-raft-addr", n.raftAddr,
			"-gossip-addr", n.gossipAddr,
			"-bootstrap-expect", strconv.Itoa(o.size),
			"-join", strings.Join(join, ","),
			"-log-level", "debug",
			"-shutdown-timeout", "10s",
		}, append(append([]string(nil), secure.agentArgs...), o.extra...)...)
		c.start(n)
	}
	c.waitStable(30 * time.Second)
	return c
}

func (c *cluster) cleanup() {
	c.procsMu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.procsMu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	if !c.t.Failed() {
		return
	}
	seen := map[string]bool{}
	for _, p := range procs {
		if seen[p.logPath] {
			continue
		}
		seen[p.logPath] = true
		c.t.Logf("----- log of %s (%s), last lines -----\n%s", p.name, p.logPath, tail(p.logText(), 150))
	}
	if os.Getenv("CRONOQ_E2E_KEEP") != "" {
		keep, err := os.MkdirTemp("", "cronoq-e2e-failed-")
		if err == nil {
			if err := os.CopyFS(keep, os.DirFS(c.logDir)); err == nil {
				c.t.Logf("logs and data kept in %s", keep)
			}
		}
	}
}

func (c *cluster) track(p *proc) {
	c.procsMu.Lock()
	c.procs = append(c.procs, p)
	c.procsMu.Unlock()
}

// start starts (or restarts, on the same data dir and addresses) node n.
func (c *cluster) start(n *node) {
	c.t.Helper()
	n.proc = startProc(c.t, n.id, n.logPath, nil, n.args...)
	c.track(n.proc)
}

// kill9 kills node n with SIGKILL.
func (c *cluster) kill9(n *node) {
	c.t.Helper()
	c.t.Logf("kill -9 %s", n.id)
	n.proc.kill()
}

// terminate sends SIGTERM to node n and returns its exit code.
func (c *cluster) terminate(n *node, timeout time.Duration) int {
	c.t.Helper()
	require.NoError(c.t, n.proc.signal(syscall.SIGTERM))
	return n.proc.waitExit(c.t, timeout)
}

// restart starts node n again on its data dir and addresses.
func (c *cluster) restart(n *node) {
	c.t.Helper()
	require.True(c.t, n.proc.exited(), "restarting %s while it runs", n.id)
	c.t.Logf("restart %s", n.id)
	c.start(n)
}

// node returns the node whose id is id.
func (c *cluster) node(id string) *node {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// alive returns the nodes whose process runs.
func (c *cluster) alive() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.proc != nil && !n.proc.exited() {
			out = append(out, n)
		}
	}
	return out
}

// addrs is the -addr value naming the given nodes (all by default).
func (c *cluster) addrs(nodes ...*node) string {
	if len(nodes) == 0 {
		nodes = c.nodes
	}
	var a []string
	for _, n := range nodes {
		a = append(a, n.httpAddr)
	}
	return strings.Join(a, ",")
}

// httpHealth is GET /v1/health of one node.
type httpHealth struct {
	Node   string `json:"node"`
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	Status string `json:"status"`
	// Ready (an addition to the contract) tells whether a leader's engine
	// serves.
	Ready *bool `json:"ready,omitempty"`
}

var httpc = &http.Client{Timeout: 5 * time.Second}

// getHealth fetches GET /v1/health from addr.
func getHealth(addr string) (code int, h httpHealth, body []byte, err error) {
	resp, err := httpc.Get(scheme + addr + "/v1/health")
	if err != nil {
		return 0, h, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return resp.StatusCode, h, nil, err
	}
	body = buf.Bytes()
	if err := decodeStrictErr(body, &h); err != nil {
		return resp.StatusCode, h, body, err
	}
	return resp.StatusCode, h, body, nil
}

// waitStable waits until every running node answers /v1/health with 200 and
// the same leader, which is one of them and says it is ready. It returns
// that leader.
func (c *cluster) waitStable(timeout time.Duration) *node {
	c.t.Helper()
	var leader string
	eventually(c.t, timeout, func() (bool, string) {
		alive := c.alive()
		if len(alive) == 0 {
			return false, "no node runs"
		}
		leader = ""
		for _, n := range alive {
			code, h, body, err := getHealth(n.httpAddr)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", n.id, err)
			}
			if code != http.StatusOK || h.Leader == "" {
				return false, fmt.Sprintf("%s: %d %s", n.id, code, body)
			}
			if leader != "" && h.Leader != leader {
				return false, fmt.Sprintf("%s sees leader %s, another sees %s", n.id, h.Leader, leader)
			}
			leader = h.Leader
		}
		var ln *node
		for _, n := range alive {
			if n.id == leader {
				ln = n
			}
		}
		if ln == nil {
			return false, fmt.Sprintf("leader %s is not a running node", leader)
		}
		_, h, _, err := getHealth(ln.httpAddr)
		if err != nil || h.Ready != nil && !*h.Ready {
			return false, fmt.Sprintf("leader %s not ready yet", leader)
		}
		if secure.on && !aclReady(ln.httpAddr) {
			return false, fmt.Sprintf("leader %s has not made the initial management token yet", leader)
		}
		return true, ""
	})
	return c.node(leader)
}

// leader returns the current leader once the running nodes agree on one.
func (c *cluster) leader() *node {
	c.t.Helper()
	return c.waitStable(30 * time.Second)
}

// followers returns the running nodes other than the leader.
func (c *cluster) followers() (leader *node, followers []*node) {
	c.t.Helper()
	leader = c.leader()
	for _, n := range c.alive() {
		if n != leader {
			followers = append(followers, n)
		}
	}
	return leader, followers
}

// ---------------------------------------------------------------------------
// CLI

// result is the outcome of one run of the binary.
type result struct {
	args   []string
	stdout string
	stderr string
	code   int
}

func (r result) String() string {
	return fmt.Sprintf("cronoq %s\nexit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// runCLI runs the binary with args (nothing added) and stdin, bounded by
// ctx. It is safe to call from any goroutine.
func runCLI(ctx context.Context, stdin []byte, args ...string) (result, error) {
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("cronoq %s: %w", strings.Join(args, " "), ctx.Err())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return r, fmt.Errorf("running cronoq %s: %w", strings.Join(args, " "), err)
	}
	return r, nil
}

// cliTimeout bounds every CLI run of the tests.
const cliTimeout = 60 * time.Second

// cli runs the binary with args followed by -addr naming every node of the
// cluster.
func (c *cluster) cli(t testing.TB, args ...string) result {
	t.Helper()
	return cliAt(t, c.addrs(), args...)
}

// cliAt runs the binary with args followed by -addr addrs.
func cliAt(t testing.TB, addrs string, args ...string) result {
	t.Helper()
	return cliRaw(t, nil, append(args, "-addr", addrs)...)
}

// cliRaw runs the binary with exactly args.
func cliRaw(t testing.TB, stdin []byte, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	r, err := runCLI(ctx, stdin, args...)
	require.NoError(t, err, "%s", r)
	return r
}

// ok fails the test unless r exited 0, and returns its stdout.
func (r result) ok(t testing.TB) string {
	t.Helper()
	require.Equal(t, 0, r.code, "%s", r)
	return r.stdout
}

// requireOneLineError checks that r failed with a one-line message on stderr
// that contains every one of words, and printed nothing on stdout.
func requireOneLineError(t testing.TB, r result, words ...string) {
	t.Helper()
	require.NotEqual(t, 0, r.code, "%s", r)
	msg := strings.TrimRight(r.stderr, "\n")
	require.NotEmpty(t, msg, "%s", r)
	require.NotContains(t, msg, "\n", "error is not one line: %s", r)
	require.Empty(t, strings.TrimSpace(r.stdout), "%s", r)
	for _, w := range words {
		require.Contains(t, msg, w, "error does not name %q: %s", w, r)
	}
}

// ---------------------------------------------------------------------------
// Workers

// worker is a `cronoq worker` process.
type worker struct {
	*proc
}

// startWorker runs `cronoq worker` with args plus -addr addrs, its work
// directories under the cluster's temporary directory unless args set
// -workdir (a later flag wins).
func (c *cluster) startWorker(t testing.TB, name, addrs string, args ...string) *worker {
	t.Helper()
	args = append([]string{"worker", "-addr", addrs, "-log-level", "debug", "-workdir", filepath.Join(c.logDir, name+"-work")}, args...)
	p := startProc(t, name, filepath.Join(c.logDir, name+".log"), nil, args...)
	c.track(p)
	return &worker{p}
}

// ---------------------------------------------------------------------------
// JSON

// decodeStrict decodes data, which must be exactly one JSON value, into v,
// after checking that every field of v's type (recursively) whose json tag
// has no omitempty is present and, unless it is a pointer, not null. Fields
// the type does not know are allowed (the contract lets outputs grow).
func decodeStrict[T any](t testing.TB, data string) T {
	t.Helper()
	var v T
	require.NoError(t, decodeStrictErr([]byte(data), &v), "output:\n%s", data)
	return v
}

func decodeStrictErr(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	if err := checkShape(reflect.TypeOf(v).Elem(), raw, "$"); err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

func checkShape(typ reflect.Type, raw json.RawMessage, path string) error {
	isNull := bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	if typ.Kind() == reflect.Pointer {
		if isNull {
			return nil
		}
		return checkShape(typ.Elem(), raw, path)
	}
	if isNull {
		return fmt.Errorf("%s is null", path)
	}
	switch typ.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("%s: want an object: %w", path, err)
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			val, ok := obj[name]
			if !ok {
				if strings.Contains(opts, "omitempty") {
					continue
				}
				return fmt.Errorf("%s: missing field %q", path, name)
			}
			if err := checkShape(f.Type, val, path+"."+name); err != nil {
				return err
			}
		}
	case reflect.Slice:
		var arr []json.RawMessage
		if err := json.Unmarshal(raw, &arr); err != nil {
			return fmt.Errorf("%s: want an array: %w", path, err)
		}
		for i, el := range arr {
			if err := checkShape(typ.Elem(), el, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("%s: want an object: %w", path, err)
		}
	}
	return nil
}

// The JSON shapes of CONTRACT.md. Every field without omitempty is required.

type submitJSON struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

type taskJSON struct {
	ID            string            `json:"id"`
	Pool          string            `json:"pool"`
	Kind          string            `json:"kind"`
	Key           string            `json:"key"`
	Status        string            `json:"status"`
	Attempt       int               `json:"attempt"`
	Priority      string            `json:"priority"`
	Labels        map[string]string `json:"labels"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	Output        *string           `json:"output,omitempty"`
	OutputBase64  *string           `json:"output_base64,omitempty"`
	Error         string            `json:"error"`
	SubmittedAt   string            `json:"submitted_at"`
	RunAt         string            `json:"run_at"`
	FinishedAt    *string           `json:"finished_at"`
	// Additions to the contract the CLI makes.
	Schedule *string `json:"schedule,omitempty"`
}

type listJSON struct {
	Tasks []taskJSON `json:"tasks"`
	Next  string     `json:"next"`
}

type cancelJSON struct {
	ID        string `json:"id"`
	Cancelled bool   `json:"cancelled"`
}

type scheduleAddJSON struct {
	Name     string `json:"name"`
	NextFire string `json:"next_fire"`
}

type scheduleJSON struct {
	Name     string  `json:"name"`
	Cron     string  `json:"cron"`
	TZ       string  `json:"tz"`
	Pool     string  `json:"pool"`
	Kind     string  `json:"kind"`
	NextFire *string `json:"next_fire"`
	LastFire *string `json:"last_fire"`
	// An addition to the contract.
	Paused *bool `json:"paused,omitempty"`
}

type scheduleRmJSON struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
}

type schedulePauseJSON struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
}

type memberJSON struct {
	Name     string `json:"name"`
	Addr     string `json:"addr"`
	Status   string `json:"status"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

type peerJSON struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
}

type removePeerJSON struct {
	Removed string `json:"removed"`
}

type transferJSON struct {
	Leader string `json:"leader"`
}

type healthJSON struct {
	Node   string `json:"node"`
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	Status string `json:"status"`
}

// parseTime parses an RFC 3339 instant that must be in UTC ("Z").
func parseTime(t testing.TB, field, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err, "%s %q is not RFC 3339", field, s)
	require.True(t, strings.HasSuffix(s, "Z"), "%s %q is not in UTC", field, s)
	return ts
}

// checkTask checks the invariants of every task object: RFC 3339 UTC times,
// payload and output each given once (as text or base64), finished_at set
// exactly when the task has ended.
func checkTask(t testing.TB, task taskJSON) {
	t.Helper()
	require.NotEmpty(t, task.ID)
	require.Contains(t, []string{"scheduled", "queued", "running", "retrying", "succeeded", "failed", "cancelled", "expired"}, task.Status)
	require.Contains(t, []string{"high", "normal", "low"}, task.Priority)
	require.True(t, (task.Payload == nil) != (task.PayloadBase64 == nil), "task %s: exactly one of payload and payload_base64", task.ID)
	require.True(t, (task.Output == nil) != (task.OutputBase64 == nil), "task %s: exactly one of output and output_base64", task.ID)
	parseTime(t, "submitted_at", task.SubmittedAt)
	parseTime(t, "run_at", task.RunAt)
	if terminal(task.Status) {
		require.NotNil(t, task.FinishedAt, "task %s is %s without finished_at", task.ID, task.Status)
		parseTime(t, "finished_at", *task.FinishedAt)
	} else {
		require.Nil(t, task.FinishedAt, "task %s is %s with finished_at", task.ID, task.Status)
	}
}

func terminal(status string) bool {
	switch status {
	case "succeeded", "failed", "cancelled", "expired":
		return true
	}
	return false
}

// ---------------------------------------------------------------------------
// Task helpers

// submit submits a task with the given flags and returns its id.
func (c *cluster) submit(t testing.TB, args ...string) string {
	t.Helper()
	out := c.cli(t, append(append([]string{"submit"}, args...), "-o", "json")...).ok(t)
	s := decodeStrict[submitJSON](t, out)
	require.NotEmpty(t, s.ID)
	return s.ID
}

// status returns the task object of id.
func (c *cluster) status(t testing.TB, id string) taskJSON {
	t.Helper()
	task := decodeStrict[taskJSON](t, c.cli(t, "status", id, "-o", "json").ok(t))
	checkTask(t, task)
	return task
}

// waitStatus polls the task until its status is one of want.
func (c *cluster) waitStatus(t testing.TB, id string, timeout time.Duration, want ...string) taskJSON {
	t.Helper()
	var task taskJSON
	eventually(t, timeout, func() (bool, string) {
		task = c.status(t, id)
		for _, w := range want {
			if task.Status == w {
				return true, ""
			}
		}
		return false, fmt.Sprintf("task %s is %s (attempt %d, error %q), want %v", id, task.Status, task.Attempt, task.Error, want)
	})
	return task
}

// listAll lists every task of pool (all pages).
func (c *cluster) listAll(t testing.TB, extra ...string) []taskJSON {
	t.Helper()
	var all []taskJSON
	after := ""
	for {
		args := append([]string{"list", "-limit", "500", "-o", "json"}, extra...)
		if after != "" {
			args = append(args, "-after", after)
		}
		page := decodeStrict[listJSON](t, c.cli(t, args...).ok(t))
		for _, task := range page.Tasks {
			checkTask(t, task)
		}
		all = append(all, page.Tasks...)
		if page.Next == "" {
			return all
		}
		after = page.Next
	}
}

// ---------------------------------------------------------------------------
// Waiting

// eventually polls cond until it holds, failing the test with cond's last
// reason after timeout.
func eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	poll := 20 * time.Millisecond
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", timeout, why)
		}
		<-time.After(poll)
		if poll < 200*time.Millisecond {
			poll *= 2
		}
	}
}

// processGone reports whether pid no longer runs (absent, or a zombie no
// one reaped yet).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// readPid waits for path to hold a pid and returns it.
func readPid(t testing.TB, path string, timeout time.Duration) int {
	t.Helper()
	var pid int
	eventually(t, timeout, func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		s := strings.TrimSpace(string(b))
		if !strings.HasSuffix(string(b), "\n") {
			return false, "pid file not complete yet"
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return false, fmt.Sprintf("pid file %q: %v", s, err)
		}
		pid = n
		return true, ""
	})
	return pid
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
