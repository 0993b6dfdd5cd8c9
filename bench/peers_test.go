package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaultSystemsAlternateTunedPeers(t *testing.T) {
	o, err := parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, []string{"cronoq", "river", "river-tuned", "asynq-always", "asynq-always-tuned", "asynq-everysec", "asynq-everysec-tuned", "raft"}, o.systems)
	env := &Env{opts: o}
	for _, name := range allSystems {
		if name == "raft" {
			continue
		}
		sys, err := newSystem(env, name)
		require.NoError(t, err, name)
		require.Equal(t, name, sys.Name())
	}
	// Every queue system goes first once over as many runs as systems.
	o.runs = 7
	o.workloads = []string{"w1"}
	first := map[int]string{}
	for _, c := range plan(o) {
		if _, ok := first[c.run]; !ok && c.workload == "w1" {
			first[c.run] = c.system
		}
	}
	firsts := map[string]bool{}
	for _, s := range first {
		firsts[s] = true
	}
	require.Len(t, firsts, 7)
	require.True(t, env.needs()["postgresql"] && env.needs()["redis-server"])
	env.opts.systems = []string{"river-tuned"}
	require.Equal(t, map[string]bool{"postgresql": true}, env.needs())
}

func TestTunedFlagsRespectTheLibrariesMinimums(t *testing.T) {
	o, err := parseFlags([]string{"-river-tuned-fetch-cooldown", "5ms", "-river-tuned-fetch-poll-interval", "50ms", "-asynq-tuned-task-check-interval", "20ms", "-asynq-tuned-pool", "256"})
	require.NoError(t, err)
	require.Equal(t, riverTuning{fetchCooldown: 5 * time.Millisecond, fetchPollInterval: 50 * time.Millisecond, pool: 80}, o.riverTuned)
	require.Equal(t, asynqTuning{taskCheckInterval: 20 * time.Millisecond, pool: 256}, o.asynqTuned)
	for _, bad := range [][]string{
		{"-river-tuned-fetch-cooldown", "500us"},
		{"-river-tuned-fetch-poll-interval", "0"},
		{"-river-tuned-fetch-cooldown", "30ms", "-river-tuned-fetch-poll-interval", "20ms"},
		{"-river-tuned-pool", "0"},
		{"-asynq-tuned-task-check-interval", "0"},
		{"-asynq-task-check-interval", "-1s"},
		{"-asynq-tuned-pool", "-1"},
	} {
		_, err := parseFlags(bad)
		require.Error(t, err, "%v", bad)
	}
}

func TestPeerSettingsStateDefaultsAndTuning(t *testing.T) {
	o, err := parseFlags(nil)
	require.NoError(t, err)
	env := &Env{opts: o}
	setting := func(sys System, name string) string {
		for _, s := range sys.(settinger).Settings() {
			if s.Name == name {
				return s.Value
			}
		}
		t.Fatalf("%s has no setting %s", sys.Name(), name)
		return ""
	}
	river, _ := newSystem(env, "river")
	tuned, _ := newSystem(env, "river-tuned")
	require.Equal(t, "100ms (default)", setting(river, "FetchCooldown"))
	require.Equal(t, "1s (default)", setting(river, "FetchPollInterval"))
	require.Contains(t, setting(river, "pgx pool_max_conns"), "32 ")
	require.Equal(t, "2ms (min 1ms)", setting(tuned, "FetchCooldown"))
	require.Equal(t, "20ms (min 1ms, ≥ FetchCooldown)", setting(tuned, "FetchPollInterval"))
	require.Contains(t, setting(tuned, "pgx pool_max_conns"), "80 ")
	require.Contains(t, tuned.Config(), "FetchCooldown: 2ms")
	require.Contains(t, river.Config(), "completer: batch completer")

	asq, _ := newSystem(env, "asynq-everysec")
	asqT, _ := newSystem(env, "asynq-everysec-tuned")
	require.Equal(t, "1s (default; idle wait 0.5–1.5 s)", setting(asq, "TaskCheckInterval"))
	require.True(t, strings.HasPrefix(setting(asqT, "TaskCheckInterval"), "10ms "))
	require.Equal(t, "10 × GOMAXPROCS (go-redis default)", setting(asq, "server go-redis PoolSize"))
	require.Equal(t, "1024 (one per handler slot)", setting(asqT, "server go-redis PoolSize"))
	require.Equal(t, 1024, asqT.(*asynqSys).serverPool())
	require.Equal(t, 0, asq.(*asynqSys).serverPool())
	require.Contains(t, asqT.Config(), "--appendfsync everysec")

	rep := &Report{}
	for _, sys := range []System{river, tuned, asq, asqT} {
		rep.Systems = append(rep.Systems, SystemInfo{Name: sys.Name(), Settings: sys.(settinger).Settings()})
	}
	md := renderPeerSettings(rep)
	require.Contains(t, md, "| river setting | river | river-tuned |")
	require.Contains(t, md, "| FetchCooldown | 100ms (default) | 2ms (min 1ms) |")
	require.Contains(t, md, "| asynq setting | asynq-everysec | asynq-everysec-tuned |")
	require.Contains(t, md, "| server go-redis PoolSize | 10 × GOMAXPROCS (go-redis default) | 1024 (one per handler slot) |")
	require.Empty(t, renderPeerSettings(&Report{}))
}

const nodeMetrics = `# HELP cronoq_epoch Current engine epoch of the replicated state.
# TYPE cronoq_epoch gauge
cronoq_epoch 3
# TYPE cronoq_leader_changes_total counter
cronoq_leader_changes_total 1
# TYPE cronoq_raft_state_candidate counter
cronoq_raft_state_candidate 2
cronoq_raft_state_leader 1
cronoq_rpc_requests_total{code="ok",procedure="/x"} 7
cronoq_raft_commitTime{quantile="0.5"} NaN
`

func TestParseElections(t *testing.T) {
	ne, err := parseElections(strings.NewReader(nodeMetrics))
	require.NoError(t, err)
	require.Equal(t, nodeElections{Candidacies: 2, Won: 1, LeaderChanges: 1, Epoch: 3}, ne)
	// A node that never stood has no raft counters yet.
	ne, err = parseElections(strings.NewReader("cronoq_epoch 3\ncronoq_leader_changes_total 0\n"))
	require.NoError(t, err)
	require.Equal(t, nodeElections{Epoch: 3}, ne)
	_, err = parseElections(strings.NewReader("cronoq_epoch 3\n"))
	require.ErrorContains(t, err, "cronoq_leader_changes_total")
	_, err = parseElections(strings.NewReader("cronoq_epoch x\ncronoq_leader_changes_total 0\n"))
	require.Error(t, err)
}

func TestSampleWithoutRaftTelemetryIsRefused(t *testing.T) {
	require.NoError(t, checkSample(map[string]nodeElections{"n1": {Candidacies: 1, Won: 1}, "n2": {}, "n3": {}}))
	require.ErrorContains(t, checkSample(map[string]nodeElections{"n1": {Epoch: 1}, "n2": {}, "n3": {}}), metricLeader)
}

func TestCountElections(t *testing.T) {
	before := map[string]nodeElections{"n1": {Candidacies: 1, Won: 1, Epoch: 2}, "n2": {Epoch: 2}, "n3": {Epoch: 1}}
	same := countElections(before, before)
	require.Empty(t, same.Error)
	require.Equal(t, 0, same.Elections)
	require.Equal(t, "elections during W1: 0 (won 0, leader changes seen 0, epoch +0)", same.Summary())

	after := map[string]nodeElections{
		"n1": {Candidacies: 1, Won: 1, LeaderChanges: 1, Epoch: 3},
		"n2": {Candidacies: 2, Won: 1, LeaderChanges: 1, Epoch: 3},
		"n3": {Candidacies: 1, LeaderChanges: 1, Epoch: 3},
	}
	ec := countElections(before, after)
	require.Empty(t, ec.Error)
	require.Equal(t, 3, ec.Elections)
	require.Equal(t, 1, ec.Won)
	require.Equal(t, 1, ec.LeaderChanges)
	require.Equal(t, 1, ec.EpochIncrease)
	require.Equal(t, map[string]int{"n1": 0, "n2": 2, "n3": 1}, ec.CandidaciesByNode)

	missing := countElections(before, map[string]nodeElections{"n1": {}, "n2": {}})
	require.NotEmpty(t, missing.Error)
	require.Contains(t, missing.Summary(), "elections during W1: unknown")
	var none *ElectionCount
	require.Equal(t, "elections during W1: not counted", none.Summary())
}

func TestReportShowsElectionsPerW1Cell(t *testing.T) {
	zero := &ElectionCount{CandidaciesByNode: map[string]int{"n1": 0}}
	rep := &Report{Options: map[string]any{"w1_tasks": 1000}, Cells: []CellResult{
		{System: "cronoq", Workload: "w1", Run: 1, Copies: 3, W1: &W1Result{Tasks: 1000, Rate: 10000, Elections: zero}},
		{System: "river-tuned", Workload: "w1", Run: 1, Copies: 1, W1: &W1Result{Tasks: 1000, Rate: 5000}},
		{System: "river", Workload: "w1", Run: 1, Copies: 1, W1: &W1Result{Tasks: 1000, Rate: 2000}},
		{System: "cronoq", Workload: "w1", Run: 2, Copies: 3, W1: &W1Result{Tasks: 1000, Rate: 10000, Elections: &ElectionCount{Elections: 2, Won: 1, LeaderChanges: 1, EpochIncrease: 1}}},
		{System: "cronoq", Workload: "w1", Run: 3, Copies: 3, W1: &W1Result{Tasks: 1000, Rate: 10000, Elections: &ElectionCount{Error: "node n2 not read after the window"}}},
	}}
	md := renderTables(rep)
	require.Contains(t, md, "| 0 / 2 / ? |")
	require.Contains(t, md, "| n/a (no raft) |")
	require.Contains(t, md, "- cronoq run 1: elections during W1: 0 (won 0, leader changes seen 0, epoch +0)")
	require.Contains(t, md, "- cronoq run 2: elections during W1: 2 (won 1, leader changes seen 1, epoch +1)")
	require.Contains(t, md, "- cronoq run 3: elections during W1: unknown (node n2 not read after the window)")
	// Default and tuned rows of a library sit next to each other.
	require.Less(t, strings.Index(md, "| river |"), strings.Index(md, "| river-tuned |"))
	require.Equal(t, jf(1), rep.find("cronoq", "w1", 0).Metrics["elections"].Median)

	b, err := json.Marshal(rep.Cells[0])
	require.NoError(t, err)
	require.Contains(t, string(b), `"elections_during_w1":{"elections":0,"won":0,"leader_changes":0,"epoch_increase":0`)
}
