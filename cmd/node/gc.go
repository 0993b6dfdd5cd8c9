package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// defaultGCPercent is the agent's garbage collection target. A node keeps
// every task it knows in memory, and the leader allocates for each command
// it serves: with Go's default of 100 the collector runs every time the heap
// doubles, which on a busy leader is several times a second, and each
// collection costs CPU and latency in proportion to the whole (growing)
// heap. At 400 it runs a fifth as often; the heap may reach five times the
// live data, bounded by the memory limit below.
const defaultGCPercent = 400

// gcSettings are the garbage collector settings a node runs with, and
// where they came from.
type gcSettings struct {
	percent     int
	percentFrom string // "flag" or "GOGC"
	limit       int64  // bytes; 0: none
	limitFrom   string // "flag", "GOMEMLIMIT", or what the default was taken from
}

// applyGC sets the collector's target and soft memory limit from the flags,
// unless GOGC or GOMEMLIMIT is set in the environment: the runtime has read
// those already, and they win. A limit of 0 takes half of the memory the
// process may use (the cgroup's limit, else the machine's).
func applyGC(percent, limit int, getenv func(string) string, memory func() (int64, string)) gcSettings {
	s := gcSettings{percent: percent, percentFrom: "flag", limit: int64(limit), limitFrom: "flag"}
	if v := getenv("GOGC"); v != "" {
		s.percent, s.percentFrom = debug.SetGCPercent(-1), "GOGC"
		debug.SetGCPercent(s.percent)
	} else {
		debug.SetGCPercent(percent)
	}
	if v := getenv("GOMEMLIMIT"); v != "" {
		s.limit, s.limitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
		return s
	}
	if s.limit == 0 {
		total, from := memory()
		if total <= 0 {
			s.limitFrom = "none: " + from
			return s
		}
		s.limit, s.limitFrom = total/2, "half of "+from
	}
	debug.SetMemoryLimit(s.limit)
	return s
}

func (s gcSettings) log(log hclog.Logger) {
	limit := "none"
	if s.limit > 0 && s.limit < 1<<62 {
		limit = formatSize(int(s.limit))
	}
	log.Info("garbage collector", "gc_percent", s.percent, "from", s.percentFrom, "memory_limit", limit, "limit_from", s.limitFrom)
}

// availableMemory is the memory this process may use: the cgroup (v2)
// limit if there is one, else the machine's total.
func availableMemory() (int64, string) {
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, ok := parseCgroupMax(b); ok {
			return n, "the cgroup's memory.max"
		}
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, "memory size unknown"
	}
	n, err := parseMemTotal(b)
	if err != nil {
		return 0, "memory size unknown"
	}
	return n, "MemTotal"
}

// parseCgroupMax reads a cgroup v2 memory.max: a byte count, or "max"
// (no limit: ok is false).
func parseCgroupMax(b []byte) (int64, bool) {
	s := string(bytes.TrimSpace(b))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// parseMemTotal reads MemTotal (in kB) from /proc/meminfo.
func parseMemTotal(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("meminfo: unexpected MemTotal line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, fmt.Errorf("meminfo: unexpected MemTotal line %q", sc.Text())
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("meminfo: no MemTotal line")
}
