package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FsyncResult is the latency of a 4 KiB write followed by fsync on the
// filesystem that holds the servers' data.
type FsyncResult struct {
	Dir     string  `json:"dir"`
	FS      string  `json:"filesystem"`
	Samples int     `json:"samples"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// fsyncProbe writes 4 KiB at the end of a file and fsyncs it, n times.
func fsyncProbe(ctx context.Context, dir string, n int) (FsyncResult, error) {
	res := FsyncResult{Dir: dir, Samples: n, FS: fsOf(dir)}
	path := filepath.Join(dir, "fsync-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return res, err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	lats := make([]float64, 0, n)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return res, err
		}
		if err := f.Sync(); err != nil {
			return res, err
		}
		lats = append(lats, float64(time.Since(t))/1e6)
	}
	res.Samples = len(lats)
	res.P50ms = percentile(lats, 0.50)
	res.P99ms = percentile(lats, 0.99)
	res.MaxMs = percentile(lats, 1)
	return res, ctx.Err()
}

// fsOf names the mount holding dir: device and type, from /proc/mounts.
func fsOf(dir string) string {
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	best, bestLen := "unknown", -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 3 {
			continue
		}
		mp := fl[1]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > bestLen {
			best, bestLen = fmt.Sprintf("%s %s on %s", fl[0], fl[2], mp), len(mp)
		}
	}
	return best
}
