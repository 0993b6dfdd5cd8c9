package metrics

import (
	"fmt"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
)

// RaftTelemetry routes the go-metrics telemetry of hashicorp/raft and
// memberlist into m's registry, named the way Consul and Nomad export it:
// cronoq_raft_commitTime, cronoq_raft_leader_dispatchLog (the leader's own
// log write), cronoq_raft_rpc_appendEntries_storeLogs (a follower's),
// cronoq_raft_replication_appendEntries_rpc, cronoq_memberlist_*, ...
// Timings are summaries in milliseconds with the 0.5, 0.9 and 0.99
// quantiles of the last 10 seconds.
//
// go-metrics keeps one global sink per process: the agent, which runs one
// node per process, calls this once.
func (m *Metrics) RaftTelemetry() error {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: m.reg, Name: "cronoq_go_metrics"})
	if err != nil {
		return fmt.Errorf("registering the raft telemetry sink: %w", err)
	}
	cfg := gometrics.DefaultConfig(Namespace)
	cfg.EnableHostname = false
	cfg.EnableHostnameLabel = false
	cfg.EnableServiceLabel = false
	cfg.EnableRuntimeMetrics = false // the Go collector exports them
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		return fmt.Errorf("starting the raft telemetry: %w", err)
	}
	return nil
}
