package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// count is the number of tasks of one pool in one status.
type count struct {
	pool, status string
	n            int64
}

type fakeSource struct {
	counts  []count
	epoch   uint64
	leader  bool
	applied uint64
	ages    map[string]time.Duration
	engine  EngineGauges
	subs    []sub
}

type sub struct {
	name    string
	pending int64
	stalled bool
}

func (f fakeSource) Subscriptions(fn func(name string, pending int64, stalled bool)) {
	for _, s := range f.subs {
		fn(s.name, s.pending, s.stalled)
	}
}

func (f fakeSource) TaskCounts(fn func(pool, status string, n int64)) {
	for _, c := range f.counts {
		fn(c.pool, c.status, c.n)
	}
}
func (f fakeSource) Epoch() uint64        { return f.epoch }
func (f fakeSource) IsLeader() bool       { return f.leader }
func (f fakeSource) AppliedIndex() uint64 { return f.applied }
func (f fakeSource) Pools(fn func(pool string, age time.Duration)) {
	for pool, age := range f.ages {
		fn(pool, age)
	}
}
func (f fakeSource) Engine() (EngineGauges, bool) { return f.engine, f.leader }

func TestTaskEvents(t *testing.T) {
	m := New()
	t0 := time.Unix(1000, 0)
	terminal := map[string]bool{"succeeded": true, "failed": true, "cancelled": true, "expired": true}
	ev := func(id, pool, st string, attempt uint32, at time.Duration) {
		m.ObserveEvent(TaskEvent{TaskID: id, Pool: pool, Kind: "k-" + pool, Status: st, Terminal: terminal[st], Attempt: attempt, At: t0.Add(at)})
	}
	// a: submitted, runs 2s, fails retryably, runs 3s, succeeds.
	ev("a", "p", "queued", 0, 0)
	ev("a", "p", "running", 1, time.Second)
	ev("a", "p", "retrying", 1, 3*time.Second)
	ev("a", "p", "queued", 1, 4*time.Second) // not an event the core sends; counted as a retry anyway
	ev("a", "p", "running", 2, 5*time.Second)
	ev("a", "p", "succeeded", 2, 8*time.Second)
	// b: scheduled, cancelled before it ran.
	ev("b", "q", "scheduled", 0, 0)
	ev("b", "q", "cancelled", 0, time.Second)
	// c: started under a previous leader: its end is not timed.
	ev("c", "q", "failed", 3, time.Second)

	out := scrape(t, m)
	for _, want := range []string{
		`cronoq_tasks_submitted_total{pool="p"} 1`,
		`cronoq_tasks_submitted_total{pool="q"} 1`,
		`cronoq_tasks_dispatched_total{pool="p"} 2`,
		`cronoq_tasks_retried_total{pool="p"} 2`,
		`cronoq_tasks_completed_total{outcome="succeeded",pool="p"} 1`,
		`cronoq_tasks_completed_total{outcome="cancelled",pool="q"} 1`,
		`cronoq_tasks_completed_total{outcome="failed",pool="q"} 1`,
	} {
		require.Contains(t, out, want+"\n")
	}
	require.NotContains(t, out, `cronoq_tasks_dispatched_total{pool="q"}`)
	// Attempts by kind and outcome: a retried one of 2s, a succeeded one
	// of 3s.
	require.Contains(t, out, `cronoq_attempt_duration_seconds_count{kind="k-p",outcome="retrying",pool="p"} 1`)
	require.Contains(t, out, `cronoq_attempt_duration_seconds_sum{kind="k-p",outcome="retrying",pool="p"} 2`)
	require.Contains(t, out, `cronoq_attempt_duration_seconds_count{kind="k-p",outcome="succeeded",pool="p"} 1`)
	require.Contains(t, out, `cronoq_attempt_duration_seconds_sum{kind="k-p",outcome="succeeded",pool="p"} 3`)
	require.NotContains(t, out, `cronoq_attempt_duration_seconds_count{kind="k-q"`)
	require.Empty(t, m.starts)

	ev("d", "p", "running", 1, 0)
	m.ResetAttempts()
	ev("d", "p", "succeeded", 1, time.Second)
	require.Contains(t, scrape(t, m), `cronoq_attempt_duration_seconds_count{kind="k-p",outcome="succeeded",pool="p"} 1`)
}

func TestCommitsAndState(t *testing.T) {
	m := New()
	m.ObserveCommit(Commit{Mutations: 3, Bytes: 300, Latency: 2 * time.Millisecond})
	m.ObserveCommit(Commit{Mutations: 1, Bytes: 100, Latency: time.Millisecond, Failed: true})
	m.LeaderChanged()
	m.RPC("/x", "ok")
	m.RPCDuration("/x", 3*time.Millisecond)
	m.Forwarded("/x")
	m.WorkerStreams(2)
	m.WorkerStreams(-1)
	m.Aborted()
	m.EventsLost(3)

	out := scrape(t, m)
	require.NotContains(t, out, "cronoq_tasks{", "no source yet")
	for _, want := range []string{
		"cronoq_raft_commit_seconds_count 1",
		"cronoq_raft_batch_mutations_sum 3",
		"cronoq_raft_batch_bytes_sum 300",
		"cronoq_raft_commit_errors_total 1",
		"cronoq_leader_changes_total 1",
		`cronoq_rpc_requests_total{code="ok",procedure="/x"} 1`,
		`cronoq_rpc_request_duration_seconds_bucket{procedure="/x",le="0.002"} 0`,
		`cronoq_rpc_request_duration_seconds_bucket{procedure="/x",le="0.005"} 1`,
		`cronoq_rpc_forwarded_total{procedure="/x"} 1`,
		"cronoq_worker_streams 1",
		"cronoq_worker_aborts_total 1",
		"cronoq_metrics_events_dropped_total 3",
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		require.Contains(t, out, want)
	}

	m.SetSource(fakeSource{counts: []count{{"p", "queued", 4}, {"p", "succeeded", 2}, {"p", "failed", 0}}, epoch: 7, leader: true, applied: 42,
		ages: map[string]time.Duration{"p": 90 * time.Second},
		engine: EngineGauges{Inbox: 3, Requests: 5, Queued: 7, QueuedBytes: 4096, InFlight: 2, Saturated: true,
			DesiredSlots: []PoolSlots{{"p", 9}, {"idle", 0}}},
		subs: []sub{{"billing", 12, true}, {"audit", 0, false}}})
	m.Redelivered("billing")
	m.Redelivered("billing")
	m.RetentionCapPurged()
	m.SetWorkerSource(func(fn func(pool string, streams, free int64)) { fn("p", 2, 12) })
	out = scrape(t, m)
	for _, want := range []string{
		`cronoq_tasks{pool="p",status="queued"} 4`,
		`cronoq_tasks{pool="p",status="succeeded"} 2`,
		`cronoq_tasks{pool="p",status="failed"} 0`,
		"cronoq_epoch 7",
		"cronoq_is_leader 1",
		"cronoq_raft_applied_index 42",
		`cronoq_pool_oldest_queued_age_seconds{pool="p"} 90`,
		`cronoq_pool_worker_streams{pool="p"} 2`,
		`cronoq_pool_offered_slots{pool="p"} 12`,
		"cronoq_engine_inbox 3",
		"cronoq_engine_requests 5",
		"cronoq_engine_write_queue_steps 7",
		"cronoq_engine_write_queue_bytes 4096",
		"cronoq_engine_entries_in_flight 2",
		"cronoq_engine_write_path_saturated 1",
		`cronoq_pool_desired_slots{pool="p"} 9`,
		`cronoq_pool_desired_slots{pool="idle"} 0`,
		`cronoq_subscription_pending{subscription="billing"} 12`,
		`cronoq_subscription_stalled{subscription="billing"} 1`,
		`cronoq_subscription_pending{subscription="audit"} 0`,
		`cronoq_subscription_stalled{subscription="audit"} 0`,
		`cronoq_subscription_redeliveries_total{subscription="billing"} 2`,
		"cronoq_retention_cap_purges_total 1",
	} {
		require.Contains(t, out, want)
	}
	_, err := m.Registry().Gather()
	require.NoError(t, err)

	m.SetSource(nil)
	require.NotContains(t, scrape(t, m), "cronoq_epoch")
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, rec.Code)
	b, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(b), "# TYPE"))
	return string(b)
}

func TestRaftTelemetry(t *testing.T) {
	m := New()
	require.NoError(t, m.RaftTelemetry())
	gometrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	gometrics.IncrCounter([]string{"raft", "apply"}, 2)

	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	found := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		found[f.GetName()] = f
	}
	commit := found["cronoq_raft_commitTime"]
	require.NotNil(t, commit, "raft's commit time, named as Consul names it")
	require.Equal(t, dto.MetricType_SUMMARY, commit.GetType())
	require.EqualValues(t, 1, commit.GetMetric()[0].GetSummary().GetSampleCount())
	require.GreaterOrEqual(t, commit.GetMetric()[0].GetSummary().GetSampleSum(), 3.0, "milliseconds")
	apply := found["cronoq_raft_apply"]
	require.NotNil(t, apply)
	require.EqualValues(t, 2, apply.GetMetric()[0].GetCounter().GetValue())
}
