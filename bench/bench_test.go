package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

func TestPayloadCarriesItsSequence(t *testing.T) {
	for _, seq := range []int{0, 1, 255, 99_999, 1 << 40} {
		p := payload(seq)
		require.Len(t, p, PayloadSize)
		got, err := seqOf(p)
		require.NoError(t, err)
		require.Equal(t, seq, got)
	}
	_, err := seqOf([]byte("short"))
	require.Error(t, err)
}

func envelope(t *testing.T, flags byte, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	if flags&0x01 != 0 {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, err := zw.Write(b)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		b = z.Bytes()
	}
	out := make([]byte, 5, 5+len(b))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

func ack(results ...*cronoqv1.LeaseResult) *cronoqv1.ServerMessage {
	return &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_CompleteAck{CompleteAck: &cronoqv1.CompleteAck{Results: results}}}
}

// oneByte reads at most one byte per call, to split every envelope.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(1, len(p))]) }

func TestEnvelopeTapReportsAcceptedCompletions(t *testing.T) {
	var stream bytes.Buffer
	stream.Write(envelope(t, 0, &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Grants{Grants: &cronoqv1.Grants{
		Grants: []*cronoqv1.Grant{{Lease: 99, Task: &cronoqv1.Task{Id: "x", Template: &cronoqv1.TaskTemplate{Payload: payload(7)}}}},
	}}}))
	stream.Write(envelope(t, 0, ack(&cronoqv1.LeaseResult{Lease: 1}, &cronoqv1.LeaseResult{Lease: 2, Code: "stale_lease", Error: "stale"})))
	stream.Write(envelope(t, 0x01, ack(&cronoqv1.LeaseResult{Lease: 3})))
	stream.Write(envelope(t, 0, &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_HeartbeatAck{HeartbeatAck: &cronoqv1.HeartbeatAck{
		Results: []*cronoqv1.LeaseResult{{Lease: 4}},
	}}}))
	end := []byte(`{}`)
	stream.Write(append([]byte{0x02, 0, 0, 0, byte(len(end))}, end...))

	for name, r := range map[string]io.Reader{"whole": bytes.NewReader(stream.Bytes()), "byte by byte": oneByte{bytes.NewReader(stream.Bytes())}} {
		t.Run(name, func(t *testing.T) {
			var got []uint64
			tap := &envelopeTap{rc: io.NopCloser(r), gzip: true, onAck: func(l []uint64) { got = append(got, l...) }}
			b, err := io.ReadAll(tap)
			require.NoError(t, err)
			require.Equal(t, stream.Bytes(), b, "the SDK reads the stream unchanged")
			require.Equal(t, []uint64{1, 3}, got)
		})
	}
}

func TestDoneHookMatchesOnlyAsynqDone(t *testing.T) {
	var got []int
	h := doneHook{done: func(seq int) { got = append(got, seq) }}
	ok := func(context.Context, redis.Cmder) error { return nil }
	run := h.ProcessHook(ok)
	ctx := context.Background()
	done := redis.NewCmd(ctx, "evalsha", "sha", 5,
		"asynq:{bench}:active", "asynq:{bench}:lease", "asynq:{bench}:t:s42",
		"asynq:{bench}:processed:2026-11-30", "asynq:{bench}:processed", "s42", int64(1), int64(math.MaxInt64))
	require.NoError(t, run(ctx, done))
	other := redis.NewCmd(ctx, "evalsha", "sha", 5, "a", "b", "c", "d", "e", "s43", int64(1), int64(2))
	require.NoError(t, run(ctx, other))
	require.NoError(t, run(ctx, redis.NewCmd(ctx, "ping")))
	require.Equal(t, []int{42}, got)
}

func TestPercentileAndStat(t *testing.T) {
	vs := []float64{5, 1, 4, 2, 3}
	require.Equal(t, 3.0, percentile(vs, 0.5))
	require.Equal(t, 5.0, percentile(vs, 0.99))
	withInf := []float64{1, 2, math.Inf(1), math.Inf(1)}
	require.True(t, math.IsInf(percentile(withInf, 0.99), 1))
	require.Equal(t, 2.0, percentile(withInf, 0.5))
	s := statOf([]float64{30, 10, 20, 40})
	require.Equal(t, jf(25), s.Median)
	require.Equal(t, jf(10), s.Min)
	require.Equal(t, jf(40), s.Max)
	b, err := json.Marshal(struct{ V jf }{jf(math.Inf(1))})
	require.NoError(t, err)
	require.JSONEq(t, `{"V": null}`, string(b))
}

func TestPlanAlternatesSystems(t *testing.T) {
	o := options{runs: 3, systems: []string{"cronoq", "river", "asynq-always", "raft"}, workloads: []string{"w1", "w3"}, w3Rates: []int{1000, 5000}}
	cells := plan(o)
	require.Len(t, cells, 3*(1+3+2*3))
	firsts := map[string]bool{}
	for run := 1; run <= 3; run++ {
		var w1 []string
		for _, c := range cells {
			if c.run == run && c.workload == "w1" {
				w1 = append(w1, c.system)
			}
		}
		require.ElementsMatch(t, []string{"cronoq", "river", "asynq-always"}, w1)
		firsts[w1[0]] = true
	}
	require.Len(t, firsts, 3, "every system goes first once")
}

func TestFanOutPayloadCarriesSequenceAndChildren(t *testing.T) {
	p := fanOutPayload(200, 10000)
	require.Len(t, p, PayloadSize)
	seq, n, err := fanOutOf(p)
	require.NoError(t, err)
	require.Equal(t, 200, seq)
	require.Equal(t, 10000, n)
	_, _, err = fanOutOf(payload(3)) // filler where the count goes
	require.Error(t, err)
}

func TestPlanRunsW4OnCronoqOnly(t *testing.T) {
	o := options{runs: 2, systems: []string{"cronoq", "river", "asynq-always", "raft"}, workloads: []string{"w1", "w4"}}
	var w4 []cell
	for _, c := range plan(o) {
		if c.workload == "w4" {
			w4 = append(w4, c)
		}
	}
	require.Equal(t, []cell{{system: "cronoq", workload: "w4", run: 1}, {system: "cronoq", workload: "w4", run: 2}}, w4)
	sk := skipped(o)
	require.Len(t, sk, 2)
	require.Equal(t, "river", sk[0].System)
	require.Equal(t, "asynq-always", sk[1].System)
	require.Nil(t, skipped(options{systems: o.systems, workloads: []string{"w1"}}))

	rep := &Report{Options: map[string]any{"w4_children": 10000}, Skipped: sk, Cells: []CellResult{
		{System: "cronoq", Workload: "w4", Run: 1, Copies: 3, W4: &W4Result{Children: 10000, Seconds: 2, ChildrenRate: 5000, SpawnCommitS: 0.5}},
		{System: "cronoq", Workload: "w4", Run: 2, Copies: 3, W4: &W4Result{Children: 10000, Seconds: 4, ChildrenRate: 2500, SpawnCommitS: 0.7}},
	}}
	md := renderTables(rep)
	require.Contains(t, md, "## W4 — fan-out: one task spawns 10000 no-op children")
	require.Contains(t, md, "| cronoq | 3 (raft, fsync on every node) | **3.00** | 2.00–4.00 | 2.00 / 4.00 | **3,750** | 2,500–5,000 |")
	require.Contains(t, md, "Not run on river, asynq-always: no equivalent")
}

func TestSecureABPairsRunByRun(t *testing.T) {
	o := options{runs: 2, systems: []string{"cronoq", "cronoq-secure"}, workloads: []string{"w1"}}
	require.Equal(t, []cell{
		{system: "cronoq", workload: "w1", run: 1}, {system: "cronoq-secure", workload: "w1", run: 1},
		{system: "cronoq-secure", workload: "w1", run: 2}, {system: "cronoq", workload: "w1", run: 2},
	}, plan(o))

	rep := &Report{Options: map[string]any{"w1_tasks": 1000}, Cells: []CellResult{
		{System: "cronoq", Workload: "w1", Run: 1, Copies: 3, ServerCPUs: 1, W1: &W1Result{Tasks: 1000, Rate: 10000}},
		{System: "cronoq-secure", Workload: "w1", Run: 1, Copies: 3, ServerCPUs: 1.5, W1: &W1Result{Tasks: 1000, Rate: 8000}},
		{System: "cronoq-secure", Workload: "w1", Run: 2, Copies: 3, ServerCPUs: 2, W1: &W1Result{Tasks: 1000, Rate: 6000}},
		{System: "cronoq", Workload: "w1", Run: 2, Copies: 3, ServerCPUs: 1, W1: &W1Result{Tasks: 1000, Rate: 10000}},
		// A failed run has no pair.
		{System: "cronoq", Workload: "w1", Run: 3, Copies: 3, Error: "boom"},
		{System: "cronoq-secure", Workload: "w1", Run: 3, Copies: 3, W1: &W1Result{Tasks: 1000, Rate: 1}},
		{System: "cronoq", Workload: "w3", Rate: 1000, Run: 1, Copies: 3, ServerCPUs: 2, W3: &W3Result{P50ms: 4, P99ms: 10}},
		{System: "cronoq-secure", Workload: "w3", Rate: 1000, Run: 1, Copies: 3, ServerCPUs: 3, W3: &W3Result{P50ms: 5, P99ms: jf(math.Inf(1))}},
	}}
	md := renderTables(rep)
	require.Contains(t, md, "| 1 | cronoq | 10,000 | 8,000 | 0.800 | 1,000 | 1,500 | 1.500 |")
	require.Contains(t, md, "| 2 | cronoq-secure | 10,000 | 6,000 | 0.600 | 1,000 | 2,000 | 2.000 |")
	require.Contains(t, md, "| **median** | | **10,000** | **7,000** | **0.700** |")
	require.NotContains(t, md, "| 3 |")
	require.Contains(t, md, "| 1 | cronoq | 4.00 | 5.00 | 1.250 | 10.0 | n/c | — | 2.0 | 3.0 | 1.500 |")

	require.Empty(t, renderSecureAB(&Report{Cells: rep.Cells[:1]}))
}

func TestSubABPairsRunByRun(t *testing.T) {
	rep := &Report{Options: map[string]any{"w1_tasks": 1000}, Cells: []CellResult{
		{System: "cronoq", Workload: "w1", Run: 1, Copies: 3, ServerCPUs: 1, W1: &W1Result{Tasks: 1000, Rate: 10000}},
		{System: "cronoq-sub", Workload: "w1", Run: 1, Copies: 3, ServerCPUs: 1.2, W1: &W1Result{Tasks: 1000, Rate: 9000, SubEvents: 1000, SubRate: 8000, SubLagMs: 12}},
		{System: "cronoq-secure", Workload: "w1", Run: 1, Copies: 3, ServerCPUs: 1.5, W1: &W1Result{Tasks: 1000, Rate: 8000}},
		{System: "cronoq-sub", Workload: "w1", Run: 2, Copies: 3, Error: "subscription: 10 of 1000 events read"},
		{System: "cronoq", Workload: "w1", Run: 2, Copies: 3, ServerCPUs: 1, W1: &W1Result{Tasks: 1000, Rate: 10000}},
	}}
	md := renderTables(rep)
	require.Contains(t, md, "### A durable subscription — W1, cronoq-sub against cronoq run by run")
	require.Contains(t, md, "| 1 | cronoq | 10,000 | 9,000 | 0.900 | 8,000 | 12 | 1,000 | 1,200 | 1.200 |")
	require.Contains(t, md, "| **median** | | **10,000** | **9,000** | **0.900** | **8,000** |")
	// The secure comparison pairs only cronoq-secure.
	require.Contains(t, md, "| 1 | cronoq | 10,000 | 8,000 | 0.800 | 1,000 | 1,500 | 1.500 |")
	require.Empty(t, renderSubAB(&Report{Cells: rep.Cells[:1]}))
}
