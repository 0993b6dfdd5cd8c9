// Package nodes starts, kills, pauses and restarts the cronoq node processes
// of a fault-injection run, and talks to their test-only admin API.
//
// Every node runs as its own process group, spawned from a goroutine that
// holds its OS thread for the child's whole life, so that the child's
// parent-death signal (SIGKILL) fires only when the harness itself dies
// (golang/go#27505).
package nodes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Ports every node uses on its own IP.
const (
	HTTPPort   = 8080
	RaftPort   = 7000
	GossipPort = 7946
)

// Spec describes one node.
type Spec struct {
	ID      string
	IP      string
	DataDir string
	LogPath string
}

// HTTPAddr is the node's API address.
func (s Spec) HTTPAddr() string { return net.JoinHostPort(s.IP, fmt.Sprint(HTTPPort)) }

// RaftAddr is the node's raft address.
func (s Spec) RaftAddr() string { return net.JoinHostPort(s.IP, fmt.Sprint(RaftPort)) }

// GossipAddr is the node's gossip address.
func (s Spec) GossipAddr() string { return net.JoinHostPort(s.IP, fmt.Sprint(GossipPort)) }

// ErrNotRunning is returned when a signal is sent to a node that is down.
var ErrNotRunning = errors.New("node is not running")

// Node is one cronoq agent process, restartable on the same data dir.
type Node struct {
	Spec
	bin  string
	args []string

	mu      sync.Mutex
	pid     int // process (and group) id while running, 0 otherwise
	paused  bool
	exited  chan struct{}
	exitErr error
	starts  int
	// stopping is set when the harness kills or stops the process: any
	// other exit is the node's own doing (a crash).
	stopping bool

	// OnCrash, when set before Start, is called (from the goroutine that
	// waited for the process) when the process exits without the harness
	// having killed or stopped it.
	OnCrash func(id string, err error)
}

// New returns a node that runs bin with args (the agent subcommand and its
// flags).
func New(spec Spec, bin string, args []string) *Node {
	return &Node{Spec: spec, bin: bin, args: args}
}

// Args returns the command line the node runs with.
func (n *Node) Args() []string { return append([]string(nil), n.args...) }

// Running reports whether the process is alive (paused counts as alive).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid != 0
}

// Paused reports whether the node is stopped with SIGSTOP.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// Starts counts how many times the node was started.
func (n *Node) Starts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.starts
}

// Start launches the process. It returns once the process exists.
func (n *Node) Start() error {
	n.mu.Lock()
	if n.pid != 0 {
		n.mu.Unlock()
		return fmt.Errorf("starting %s: already running", n.ID)
	}
	n.mu.Unlock()
	if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
		return fmt.Errorf("starting %s: %w", n.ID, err)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("starting %s: opening log: %w", n.ID, err)
	}
	fmt.Fprintf(logf, "\n===== harness: starting %s at %s: %s %s\n", n.ID, time.Now().UTC().Format(time.RFC3339Nano), n.bin, strings.Join(n.args, " "))

	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		// The parent-death signal is tied to the thread that forked the
		// child: keep this thread for as long as the child lives.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(n.bin, n.args...)
		cmd.Stdout = logf
		cmd.Stderr = logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = logf.Close()
			started <- err
			close(exited)
			return
		}
		n.mu.Lock()
		n.pid = cmd.Process.Pid
		n.paused = false
		n.stopping = false
		n.exited = exited
		n.starts++
		n.mu.Unlock()
		started <- nil
		werr := cmd.Wait()
		fmt.Fprintf(logf, "===== harness: %s exited at %s: %v\n", n.ID, time.Now().UTC().Format(time.RFC3339Nano), werr)
		_ = logf.Close()
		n.mu.Lock()
		n.pid = 0
		n.paused = false
		n.exitErr = werr
		crashed, onCrash := !n.stopping, n.OnCrash
		n.mu.Unlock()
		if crashed && onCrash != nil {
			onCrash(n.ID, werr)
		}
		close(exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting %s: %w", n.ID, err)
	}
	return nil
}

func (n *Node) signal(sig syscall.Signal) (chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pid == 0 {
		return nil, ErrNotRunning
	}
	// The whole process group: the agent and anything it started.
	if err := syscall.Kill(-n.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("signalling %s (pgid %d) with %v: %w", n.ID, n.pid, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	case syscall.SIGKILL, syscall.SIGTERM:
		n.stopping = true
	}
	return n.exited, nil
}

// Kill sends SIGKILL to the node's process group and waits for it to exit.
func (n *Node) Kill() error {
	exited, err := n.signal(syscall.SIGKILL)
	if err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("killing %s: still running after 10s", n.ID)
	}
}

// Stop asks the node to stop (SIGTERM) and waits up to grace, then kills it.
func (n *Node) Stop(grace time.Duration) error {
	_, _ = n.signal(syscall.SIGCONT)
	exited, err := n.signal(syscall.SIGTERM)
	if err != nil {
		if errors.Is(err, ErrNotRunning) {
			return nil
		}
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(grace):
		return n.Kill()
	}
}

// Pause stops the node's processes with SIGSTOP.
func (n *Node) Pause() error {
	_, err := n.signal(syscall.SIGSTOP)
	return err
}

// Resume continues a paused node with SIGCONT.
func (n *Node) Resume() error {
	_, err := n.signal(syscall.SIGCONT)
	return err
}

// Cluster is the set of nodes of a run.
type Cluster struct {
	Nodes []*Node
	Admin *Admin
}

// Node returns the node named id, or nil.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// IDs returns the node ids in order.
func (c *Cluster) IDs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.ID
	}
	return out
}

// HTTPAddrs returns the API addresses in node order.
func (c *Cluster) HTTPAddrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.HTTPAddr()
	}
	return out
}

// StartAll starts every node that is not running.
func (c *Cluster) StartAll() error {
	var errs []error
	for _, n := range c.Nodes {
		if !n.Running() {
			errs = append(errs, n.Start())
		}
	}
	return errors.Join(errs...)
}

// ResumeAll sends SIGCONT to every running node.
func (c *Cluster) ResumeAll() {
	for _, n := range c.Nodes {
		if n.Running() {
			_ = n.Resume()
		}
	}
}

// KillAll kills every running node.
func (c *Cluster) KillAll() error {
	var errs []error
	for _, n := range c.Nodes {
		if n.Running() {
			if err := n.Kill(); err != nil && !errors.Is(err, ErrNotRunning) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// HelpText returns `bin agent -h` output, to find optional flags.
func HelpText(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "agent", "-h")
	cmd.Stdout = &out
	cmd.Stderr = &out
	_ = cmd.Run()
	return out.String()
}

// HasFlag reports whether help lists -name.
func HasFlag(help, name string) bool {
	for _, line := range strings.Split(help, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "-"+name || strings.HasPrefix(f[0], "-"+name+"=")) {
			return true
		}
	}
	return false
}

// TailLog returns the last limit bytes of a node's log.
func TailLog(path string, limit int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, st.Size()-limit)
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// DirSize returns the total size of the files under dir.
func DirSize(dir string) int64 {
	var total int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += info.Size()
		}
		return nil
	})
	return total
}
