package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMemTotal(t *testing.T) {
	n, err := parseMemTotal([]byte("MemFree:  1000 kB\nMemTotal:       24681984 kB\nBuffers: 1 kB\n"))
	require.NoError(t, err)
	require.Equal(t, int64(24681984)<<10, n)
	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemTotal: 12 MB\n", "MemTotal: x kB\n", "MemTotal: -4 kB\n"} {
		_, err := parseMemTotal([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

func TestParseCgroupMax(t *testing.T) {
	n, ok := parseCgroupMax([]byte("1073741824\n"))
	require.True(t, ok)
	require.Equal(t, int64(1<<30), n)
	for _, none := range []string{"max\n", "", "0", "-1", "lots"} {
		_, ok := parseCgroupMax([]byte(none))
		require.False(t, ok, "%q", none)
	}
}

func TestApplyGC(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	mem := func() (int64, string) { return 8 << 30, "MemTotal" }

	// The flags, with the limit defaulting to half of the memory.
	s := applyGC(400, 0, env(nil), mem)
	require.Equal(t, gcSettings{percent: 400, percentFrom: "flag", limit: 4 << 30, limitFrom: "half of MemTotal"}, s)
	require.Equal(t, 400, debug.SetGCPercent(400))
	require.Equal(t, int64(4<<30), debug.SetMemoryLimit(-1))

	// An explicit limit.
	s = applyGC(200, 1<<30, env(nil), mem)
	require.Equal(t, gcSettings{percent: 200, percentFrom: "flag", limit: 1 << 30, limitFrom: "flag"}, s)
	require.Equal(t, int64(1<<30), debug.SetMemoryLimit(-1))

	// The environment wins: what the runtime has is kept.
	debug.SetGCPercent(75)
	debug.SetMemoryLimit(3 << 30)
	s = applyGC(400, 1<<30, env(map[string]string{"GOGC": "75", "GOMEMLIMIT": "3GiB"}), mem)
	require.Equal(t, gcSettings{percent: 75, percentFrom: "GOGC", limit: 3 << 30, limitFrom: "GOMEMLIMIT"}, s)
	require.Equal(t, 75, debug.SetGCPercent(75))
	require.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1))

	// Memory of unknown size: no limit.
	debug.SetMemoryLimit(1 << 62)
	s = applyGC(400, 0, env(nil), func() (int64, string) { return 0, "memory size unknown" })
	require.Equal(t, gcSettings{percent: 400, percentFrom: "flag", limitFrom: "none: memory size unknown"}, s)
}
