package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one server process the benchmark started.
type proc struct {
	name  string
	pid   int
	start uint64 // start time in clock ticks since boot, from /proc/PID/stat
	cmd   *exec.Cmd
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// procs tracks every process the benchmark started, so that all of them are
// stopped by pid however the run ends. Their pids are also written to a file
// of this run (.running-pids-<stamp> in the results dir, headed by this
// process's own pid and the run's data dir), so that the leftovers of a run
// killed with SIGKILL are stopped, and its data removed, by the next run.
type procs struct {
	mu      sync.Mutex
	live    map[int]*proc
	pidFile string
	header  string
}

func newProcs(outDir, stamp, dataDir string) *procs {
	self := os.Getpid()
	start, _ := procStartTime(self)
	return &procs{
		live:    make(map[int]*proc),
		pidFile: filepath.Join(outDir, ".running-pids-"+stamp),
		header:  fmt.Sprintf("owner %d %d %s\n", self, start, dataDir),
	}
}

// start runs bin with args as a child in its own process group, its output
// appended to logPath. cred, when set, runs it as another user. The child
// gets SIGKILL if the benchmark dies.
func (ps *procs) start(name, logPath string, cred *syscall.Credential, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	defer f.Close()
	if cred != nil {
		_ = os.Chown(logPath, int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	p.start, _ = procStartTime(p.pid)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.live[p.pid] = p
	ps.writePidsLocked()
	ps.mu.Unlock()
	return p, nil
}

// exited reports whether p has exited, with its error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends sig to p, waits up to grace for it to exit, then kills its
// process group.
func (ps *procs) stop(p *proc, sig syscall.Signal, grace time.Duration) error {
	if p == nil {
		return nil
	}
	defer func() {
		ps.mu.Lock()
		delete(ps.live, p.pid)
		ps.writePidsLocked()
		ps.mu.Unlock()
	}()
	if done, _ := p.exited(); done {
		return nil
	}
	_ = syscall.Kill(p.pid, sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("%s (pid %d) did not stop within %s after %s: killed", p.name, p.pid, grace, sig)
}

// stopAll stops every live process: SIGTERM, then SIGKILL after 15 s.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	var all []*proc
	for _, p := range ps.live {
		all = append(all, p)
	}
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = ps.stop(p, syscall.SIGTERM, 15*time.Second)
		}()
	}
	wg.Wait()
	_ = os.Remove(ps.pidFile)
}

func (ps *procs) writePidsLocked() {
	if len(ps.live) == 0 {
		_ = os.Remove(ps.pidFile)
		return
	}
	var b strings.Builder
	b.WriteString(ps.header)
	pids := make([]int, 0, len(ps.live))
	for pid := range ps.live {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		fmt.Fprintf(&b, "%d %d %s\n", pid, ps.live[pid].start, ps.live[pid].name)
	}
	_ = os.WriteFile(ps.pidFile, []byte(b.String()), 0o644)
}

// reapStale looks at the pid files of earlier runs in dir. Those whose
// benchmark process is gone (killed with SIGKILL) have their listed
// processes killed and their data dir removed. A pid counts only while its
// start time still matches, so a reused pid is left alone, and a run that is
// still going is not touched.
func reapStale(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, ".running-pids-*"))
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		head := strings.Fields(lines[0])
		if len(head) != 4 || head[0] != "owner" {
			continue
		}
		if alive(head[1], head[2]) {
			continue
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) >= 2 && alive(f[0], f[1]) {
				pid, _ := strconv.Atoi(f[0])
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if data := head[3]; filepath.Base(data) == "data" && strings.HasPrefix(data, dir+string(filepath.Separator)) {
			_ = os.RemoveAll(data)
		}
		_ = os.Remove(path)
	}
}

// alive reports whether the process pid is running and started at start.
func alive(pidStr, startStr string) bool {
	pid, err1 := strconv.Atoi(pidStr)
	start, err2 := strconv.ParseUint(startStr, 10, 64)
	if err1 != nil || err2 != nil || pid <= 1 {
		return false
	}
	st, err := readProcStat(pid)
	return err == nil && st.start == start && st.state != 'Z' && st.state != 'X'
}

// procStat is the part of /proc/PID/stat the benchmark reads.
type procStat struct {
	state                        byte
	ppid                         int
	utime, stime, cutime, cstime uint64
	start                        uint64
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	// Fields after the command: state is field 3, so f[0] is field 3.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(k int) uint64 { v, _ := strconv.ParseUint(f[k-3], 10, 64); return v }
	return procStat{
		state:  f[0][0],
		ppid:   int(num(4)),
		utime:  num(14),
		stime:  num(15),
		cutime: num(16),
		cstime: num(17),
		start:  num(22),
	}, nil
}

func procStartTime(pid int) (uint64, error) {
	st, err := readProcStat(pid)
	return st.start, err
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// treeCPU returns the CPU seconds (user+system) used by the processes rooted
// at the given pids: every live process of each tree plus the children they
// have already reaped (cutime+cstime), so that PostgreSQL backends that come
// and go are counted.
func treeCPU(roots []int) float64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	children := make(map[int][]int)
	stats := make(map[int]procStat)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
	}
	var ticks uint64
	seen := make(map[int]bool)
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		st, ok := stats[pid]
		if !ok {
			return
		}
		ticks += st.utime + st.stime + st.cutime + st.cstime
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return float64(ticks) / clockTicks
}

// selfCPU returns the CPU seconds used by this process (the clients and
// workers of every system run here).
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// freePorts returns n distinct loopback ports that were free for both TCP
// and UDP a moment ago.
func freePorts(n int) ([]int, error) {
	var out []int
	var hold []net.Listener
	defer func() {
		for _, l := range hold {
			l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			l.Close()
			continue
		}
		u.Close()
		hold = append(hold, l)
		out = append(out, port)
	}
	return out, nil
}

// tailFile returns the last n bytes of a log, for error messages.
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(b, off)
	return strings.TrimSpace(string(b[:k]))
}

// logPath names the log of a process of a cell.
func logPath(dir, name string) string { return filepath.Join(dir, name+".log") }
