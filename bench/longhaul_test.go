package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP go_gc_duration_seconds A summary.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="1"} 0.0123
go_gc_duration_seconds_sum 1.5
go_gc_duration_seconds_count 300
cronoq_is_leader 1
cronoq_rpc_requests_total{code="ok",procedure="/a b"} 7 1700000000
broken_line
`))
	require.NoError(t, err)
	require.Equal(t, 0.0123, m[`go_gc_duration_seconds{quantile="1"}`])
	require.Equal(t, 1.5, m["go_gc_duration_seconds_sum"])
	require.Equal(t, 300.0, m["go_gc_duration_seconds_count"])
	require.Equal(t, 1.0, m["cronoq_is_leader"])
	require.Equal(t, 7.0, m[`cronoq_rpc_requests_total{code="ok",procedure="/a b"}`])
	require.Len(t, m, 5)
}

func TestLongHaulFlags(t *testing.T) {
	o, err := parseFlags([]string{"-long-haul", "1h", "-systems", "river"})
	require.NoError(t, err)
	require.Equal(t, []string{"cronoq"}, o.systems, "the long haul runs cronoq only")
	require.Empty(t, o.workloads)
	_, err = parseFlags([]string{"-long-haul", "10m", "-long-haul-outage", "4m"})
	require.ErrorContains(t, err, "under a third")
	_, err = parseFlags([]string{"-long-haul", "10m", "-long-haul-rate", "0"})
	require.ErrorContains(t, err, "-long-haul-rate")
}

// A synthetic run: the latencies per minute, the lost tasks, the heap
// growth between the reference and the end, and both renderings.
func TestSummarizeLongHaul(t *testing.T) {
	o := options{longHaul: 30 * time.Minute, lhRate: 1, lhRetention: 5 * time.Minute}
	total := 1800
	tr := newTracker(total)
	t0 := int64(time.Second)
	for i := 0; i < total; i++ {
		tr.sched[i] = t0 + int64(i)*int64(time.Second)
		tr.acked[i] = tr.sched[i] + 1
		if i == 100 {
			continue // acknowledged, never completed: lost
		}
		tr.done[i] = tr.sched[i] + int64(time.Duration(10+i/60)*time.Millisecond)
	}
	res := &LongHaulResult{DurationS: o.longHaul.Seconds(), Rate: 1, RetentionS: o.lhRetention.Seconds()}
	for s := 0.0; s <= 1800; s += 10 {
		heap := 100.0
		if s > 1500 {
			heap = 110
		}
		res.Samples = append(res.Samples, LongHaulSample{T: s, Load: 1, Nodes: []NodeHaulSample{
			{Up: true, Leader: true, HeapMB: heap, RSSMB: 300, GCMaxMs: 2, Snapshots: int(s / 600)},
			{Up: s < 600 || s > 700, HeapMB: 50, RSSMB: 200, GCMaxMs: 1, Installs: map[bool]int{true: 1}[s > 700]},
		}})
	}
	res.Outages = []LongHaulOutage{{Node: "n2", StoppedS: 600, StartedS: 700, CaughtUpS: 710, Installed: true}}
	summarizeLongHaul(res, tr, 0, total, t0, o)

	require.Equal(t, total-1, res.Completed)
	require.Equal(t, 1, res.Lost)
	require.Len(t, res.Windows, 30)
	require.Equal(t, 60, res.Windows[0].Due)
	require.Equal(t, 59, res.Windows[1].Completed, "the lost task is in minute 1")
	require.True(t, math.IsInf(float64(res.Windows[1].MaxMs), 1))
	require.InDelta(t, 39, float64(res.Windows[29].P50ms), 1)
	require.Len(t, res.Nodes, 2)
	require.Equal(t, 3, res.Nodes[0].Snapshots)
	require.Equal(t, 1, res.Nodes[1].Installs)
	require.InDelta(t, 100, res.Nodes[0].HeapRefMB, 0.01)
	// The end is the last retention period: one sample at 100, thirty at 110.
	require.InDelta(t, (100+30*110)/31.0/100-1, float64(res.Nodes[0].Growth), 1e-9)

	md := renderLongHaulMarkdown(res)
	require.Contains(t, md, "| n2 | 600 s | 700 s | 710 s (10.0 s after its start) | true |")
	require.Contains(t, md, "| 1799 | 1 |")
	svg := renderLongHaulChart(res)
	require.True(t, strings.HasPrefix(svg, "<svg"))
	require.Equal(t, 3, strings.Count(svg, "font-weight=\"bold\">")-1, "three panels under the title")
	require.Greater(t, strings.Count(svg, "<polyline"), 5, "n2's RSS line is broken where it was down")
}
