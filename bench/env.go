package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Env is what every cell shares: options, paths, the process registry and
// the progress line.
type Env struct {
	opts    options
	root    string // repository root
	runDir  string // results of this run
	dataDir string // servers' data, removed at the end unless -keep
	procs   *procs
	prog    *progress

	redisBin string
	pgBin    string // directory of initdb and postgres
	pgCred   *syscall.Credential
	pgTmpl   string   // initdb'd and migrated data dir, copied for each cell
	cleanup  []func() // run at the end, after every process stopped
	pgRoot   string   // where PostgreSQL data dirs go: dataDir, unless the postgres user cannot reach it

	scalePrev *ScaleResult // the last scale size measured, for the next one's memory projection
}

// debPackages maps a needed binary to the Debian package that ships it.
var debPackages = []struct{ pkg, check string }{
	{"redis-server", "redis-server"},
	{"postgresql", "initdb"},
}

// prepare installs the Debian packages that are missing and finds the
// binaries.
func (e *Env) prepare(ctx context.Context) error {
	need := e.needs()
	var missing []string
	for _, d := range debPackages {
		if !need[d.pkg] {
			continue
		}
		if (d.check == "initdb" && findPgBin() == "") || (d.check == "redis-server" && lookRedis() == "") {
			missing = append(missing, d.pkg)
		}
	}
	if len(missing) > 0 {
		if e.opts.noInstall {
			return fmt.Errorf("missing Debian packages %s (and -no-install is set)", strings.Join(missing, " "))
		}
		e.prog.phase("installing " + strings.Join(missing, " ") + " with apt-get")
		if err := aptInstall(ctx, e.runDir, missing); err != nil {
			return err
		}
	}
	if need["redis-server"] {
		if e.redisBin = lookRedis(); e.redisBin == "" {
			return fmt.Errorf("redis-server not found after installing it")
		}
	}
	if need["postgresql"] {
		if os.Geteuid() != 0 {
			return fmt.Errorf("PostgreSQL runs as the postgres user: run the benchmark as root")
		}
		if e.pgBin = findPgBin(); e.pgBin == "" {
			return fmt.Errorf("PostgreSQL binaries (initdb) not found under /usr/lib/postgresql after installing it")
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("looking up the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		e.pgCred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		e.pgRoot = e.dataDir
		if !reachable(e.dataDir) {
			// A parent directory is closed to other users: keep PostgreSQL's
			// data in a temp dir instead, removed at the end.
			d, err := os.MkdirTemp("", "cronoq-bench-pg-")
			if err != nil {
				return fmt.Errorf("creating a PostgreSQL data dir: %w", err)
			}
			if err := os.Chmod(d, 0o755); err != nil {
				return err
			}
			e.pgRoot = d
			e.cleanup = append(e.cleanup, func() { os.RemoveAll(d) })
		}
	}
	return nil
}

// reachable reports whether every directory from / down to dir lets other
// users through (the postgres user needs to reach its data dir).
func reachable(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if filepath.Dir(d) == d {
			return true
		}
	}
}

// needs reports which Debian packages the planned cells use.
func (e *Env) needs() map[string]bool {
	n := map[string]bool{}
	for _, c := range plan(e.opts) {
		switch {
		case strings.HasPrefix(c.system, "river"):
			n["postgresql"] = true
		case strings.HasPrefix(c.system, "asynq"):
			n["redis-server"] = true
		}
	}
	return n
}

func aptInstall(ctx context.Context, dir string, pkgs []string) error {
	logf := filepath.Join(dir, "apt-get.log")
	runApt := func(args ...string) error {
		f, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.Run()
	}
	install := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	if err := runApt(install...); err == nil {
		return nil
	}
	// The package lists may be missing or stale on a fresh machine.
	if err := runApt("update"); err != nil {
		return fmt.Errorf("apt-get update: %w (log: %s)", err, logf)
	}
	if err := runApt(install...); err != nil {
		return fmt.Errorf("apt-get install %s: %w (log: %s)", strings.Join(pkgs, " "), err, logf)
	}
	return nil
}

func lookRedis() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	return ""
}

// findPgBin returns the newest /usr/lib/postgresql/N/bin holding initdb and
// postgres.
func findPgBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "postgres"))
		if e1 == nil && e2 == nil {
			return d
		}
	}
	return ""
}

// MachineInfo describes where the numbers were taken.
type MachineInfo struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	MemoryGiB int    `json:"memory_gib"`
	Kernel    string `json:"kernel"`
	OS        string `json:"os"`
	GoVersion string `json:"go"`
	LoadAvg   string `json:"loadavg_at_start"`
}

func machineInfo(e *Env) MachineInfo {
	m := MachineInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					m.CPUModel = strings.TrimSpace(v)
				}
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryGiB = (kb + 512*1024) / (1024 * 1024)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// versions names the version of every system measured.
func versions(e *Env) map[string]string {
	v := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5",
				"github.com/jackc/pgx/v5", "github.com/hibiken/asynq", "github.com/redis/go-redis/v9",
				"github.com/hashicorp/raft", "github.com/hashicorp/raft-boltdb/v2":
				v[d.Path] = d.Version
			}
		}
	}
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if e.redisBin != "" {
		v["redis-server"] = run(e.redisBin, "--version")
	}
	if e.pgBin != "" {
		v["postgres"] = run(filepath.Join(e.pgBin, "postgres"), "--version")
	}
	if !onlyNonCronoq(e.opts.systems) {
		rev := run("git", "-C", e.root, "rev-parse", "--short", "HEAD")
		if dirty := run("git", "-C", e.root, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
			rev += " (modified)"
		}
		v["cronoq"] = rev
	}
	return v
}
