// Package metrics holds the Prometheus metrics of one cronoq node: its own
// registry (never the global default one), the task, engine, raft and API
// series, and the Go runtime and process collectors. It imports nothing of
// cronoq: the cluster and the API server feed it plain values.
//
// Names follow the Nomad and Consul style with a cronoq_ prefix. Counters
// about tasks (submitted, dispatched, completed, retried) and the attempt
// duration histogram are fed from the status events of the engine while this
// node leads, so each transition is counted once, by the leader of the
// moment. Gauges of the replicated state (tasks by pool and status, epoch,
// applied index) are read from this node's replica at scrape time.
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every cronoq series.
const Namespace = "cronoq"

// maxTrackedAttempts bounds the attempt start times kept to measure attempt
// durations; past it the table is cleared (a few durations go unmeasured).
const maxTrackedAttempts = 1 << 20

// Source is this node's replicated state, read at scrape time.
type Source interface {
	// TaskCounts calls fn with the number of tasks of every pool in every
	// status.
	TaskCounts(fn func(pool, status string, n int64))
	// Epoch returns the current engine epoch of the replicated state.
	Epoch() uint64
	// IsLeader reports whether this node is the raft leader.
	IsLeader() bool
	// AppliedIndex returns the raft index last applied on this node.
	AppliedIndex() uint64
	// Pools calls fn with the age of the oldest queued task of every
	// pool that has one (in this node's replica).
	Pools(fn func(pool string, oldestQueuedAge time.Duration))
	// Engine returns the gauges of this node's engine while it leads.
	Engine() (EngineGauges, bool)
	// Subscriptions calls fn with every durable subscription of this
	// node's replica: the events it holds (not acked) and whether it
	// stalled.
	Subscriptions(fn func(name string, pending int64, stalled bool))
}

// WorkerSource calls fn with the worker streams connected to this node and
// the free slots they offer, for every pool that has any.
type WorkerSource func(fn func(pool string, streams, freeSlots int64))

// EngineGauges are the depths of the leader's engine and write path.
type EngineGauges struct {
	Inbox       int  // calls waiting for the engine's goroutine
	Requests    int  // calls the core holds (long polls, waiting submitters, held answers)
	Queued      int  // steps waiting for a log entry
	QueuedBytes int  // and the size of their changes
	InFlight    int  // entries appended and not applied yet
	Saturated   bool // submits are refused until the write path drains
	// DesiredSlots is the autoscaling signal of each pool: the worker
	// slots it could use now (queued and running, at most its running
	// cap).
	DesiredSlots []PoolSlots
}

// PoolSlots is a number of worker slots of one pool.
type PoolSlots struct {
	Pool  string
	Slots int
}

// Metrics is the metrics of one node. Its methods are safe for concurrent
// use; the observers never block.
type Metrics struct {
	reg     *prometheus.Registry
	src     atomic.Pointer[sourceBox]
	workerS atomic.Pointer[WorkerSource]
	clockS  atomic.Pointer[ClockSource]

	submitted  *prometheus.CounterVec
	dispatched *prometheus.CounterVec
	completed  *prometheus.CounterVec
	retried    *prometheus.CounterVec
	attempts   *prometheus.HistogramVec

	commitSeconds  prometheus.Histogram
	batchMutations prometheus.Histogram
	batchBytes     prometheus.Histogram
	commitErrors   prometheus.Counter
	leaderChanges  prometheus.Counter

	rpcs       *prometheus.CounterVec
	rpcSeconds *prometheus.HistogramVec
	forwarded  *prometheus.CounterVec
	workers    prometheus.Gauge
	aborts     prometheus.Counter
	eventsLost prometheus.Counter
	relayed    prometheus.Gauge
	lagged     prometheus.Counter

	redeliveries       *prometheus.CounterVec
	retentionCapPurges prometheus.Counter
	webhook            *webhookMetrics

	mu     sync.Mutex
	starts map[string]time.Time // running attempts: task id -> start
}

type sourceBox struct{ s Source }

// New returns the metrics of a node with a fresh registry holding every
// cronoq series plus the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg:    prometheus.NewRegistry(),
		starts: make(map[string]time.Time),
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	}
	m.submitted = counter("tasks_submitted_total", "Tasks admitted (by submits and schedule fires), counted by the leader.", "pool")
	m.dispatched = counter("tasks_dispatched_total", "Attempts granted to workers (durable leases), counted by the leader.", "pool")
	m.completed = counter("tasks_completed_total", "Tasks that reached a terminal status, by that status (succeeded, failed, cancelled, expired).", "pool", "outcome")
	m.retried = counter("tasks_retried_total", "Attempts that ended with a retryable failure while attempts remained.", "pool")
	m.attempts = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "attempt_duration_seconds",
		Help:    "Duration of attempts from their grant to their end (completion, failure, expiry or revocation), as seen by the leader.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
	}, []string{"pool", "kind", "outcome"})
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "raft_commit_seconds",
		Help:    "Time from appending a commit batch to the raft log to its application on the leader.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
	})
	m.batchMutations = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "raft_batch_mutations",
		Help:    "Mutations per commit batch (one raft log entry).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})
	m.batchBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "raft_batch_bytes",
		Help:    "Encoded size of commit batches in bytes.",
		Buckets: prometheus.ExponentialBuckets(64, 4, 11),
	})
	m.commitErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "raft_commit_errors_total",
		Help: "Commit batches that failed (fenced, rejected or lost with leadership); each one stops the engine.",
	})
	m.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "leader_changes_total",
		Help: "Changes of the leader observed by this node.",
	})
	m.rpcs = counter("rpc_requests_total", "API calls served by this node, by procedure and result code.", "procedure", "code")
	m.rpcSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "rpc_request_duration_seconds",
		Help:    "Time this node took to serve unary API calls (forwarding included), by procedure. Long polls and waits last as long as they wait.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30},
	}, []string{"procedure"})
	m.forwarded = counter("rpc_forwarded_total", "API calls this node forwarded to the leader, by procedure.", "procedure")
	m.workers = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "worker_streams",
		Help: "Worker streams connected to this node.",
	})
	m.aborts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "worker_aborts_total",
		Help: "Abort messages sent to workers (revoked or lost leases).",
	})
	m.eventsLost = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "metrics_events_dropped_total",
		Help: "Status events the metrics subscription missed (task counters undercount by this much).",
	})
	m.relayed = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "worker_streams_relayed",
		Help: "Worker streams this node relays to the leader (it does not lead).",
	})
	m.lagged = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "event_stream_lagged_total",
		Help: "Lagged markers sent on event streams: a subscriber missed events (it fell behind the node's history of events, resumed from beyond it, or the replica was replaced by a snapshot).",
	})
	m.redeliveries = counter("subscription_redeliveries_total",
		"Times the leader sent a subscription's unacked events again after its ack timeout, by subscription.", "subscription")
	m.retentionCapPurges = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "retention_cap_purges_total",
		Help: "Ended tasks the leader purged at the retention cap while a subscription had not acked an event of them.",
	})
	m.webhook = newWebhookMetrics()
	m.reg.MustRegister(m.webhook.collectors()...)
	m.reg.MustRegister(
		m.redeliveries, m.retentionCapPurges,
		m.submitted, m.dispatched, m.completed, m.retried, m.attempts,
		m.commitSeconds, m.batchMutations, m.batchBytes, m.commitErrors, m.leaderChanges,
		m.rpcs, m.rpcSeconds, m.forwarded, m.workers, m.aborts, m.eventsLost, m.relayed, m.lagged,
		&stateCollector{m: m},
		clockCollector{m: m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry returns the node's registry (to register more collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// SetSource sets the replicated state the gauges read at scrape time. Until
// it is set, those gauges are absent.
func (m *Metrics) SetSource(s Source) {
	if s == nil {
		m.src.Store(nil)
		return
	}
	m.src.Store(&sourceBox{s: s})
}

// SetWorkerSource sets what the worker gauges read at scrape time (the
// API server's worker streams).
func (m *Metrics) SetWorkerSource(w WorkerSource) {
	if w == nil {
		m.workerS.Store(nil)
		return
	}
	m.workerS.Store(&w)
}

// Commit is one resolved commit batch (one raft log entry).
type Commit struct {
	Mutations int
	Bytes     int
	Latency   time.Duration // from its append to its application on the leader
	Failed    bool          // fenced, refused or lost with leadership
}

// ObserveCommit records one resolved commit batch.
func (m *Metrics) ObserveCommit(c Commit) {
	if c.Failed {
		m.commitErrors.Inc()
		return
	}
	m.commitSeconds.Observe(c.Latency.Seconds())
	m.batchMutations.Observe(float64(c.Mutations))
	m.batchBytes.Observe(float64(c.Bytes))
}

// Task statuses, as events name them.
const (
	StatusScheduled = "scheduled"
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusRetrying  = "retrying"
)

// TaskEvent is one durable status transition of a task, published by the
// leader's engine.
type TaskEvent struct {
	TaskID   string
	Pool     string
	Kind     string
	Status   string // its name: queued, running, succeeded, ...
	Terminal bool   // the status is final
	Attempt  uint32
	At       time.Time
}

// ObserveEvent records one durable status transition.
func (m *Metrics) ObserveEvent(ev TaskEvent) {
	running := ev.Status == StatusRunning
	m.mu.Lock()
	start, wasRunning := m.starts[ev.TaskID]
	if wasRunning && !running {
		delete(m.starts, ev.TaskID)
	}
	if running {
		if len(m.starts) >= maxTrackedAttempts {
			clear(m.starts)
		}
		m.starts[ev.TaskID] = ev.At
	}
	m.mu.Unlock()

	if wasRunning && !running && !ev.At.Before(start) {
		// The attempt's outcome is the status it ended in: succeeded,
		// failed, cancelled, expired, or retrying (a failure retried,
		// queued at once or after a backoff).
		outcome := ev.Status
		if outcome == StatusQueued {
			outcome = StatusRetrying
		}
		m.attempts.WithLabelValues(ev.Pool, ev.Kind, outcome).Observe(ev.At.Sub(start).Seconds())
	}
	switch {
	case running:
		m.dispatched.WithLabelValues(ev.Pool).Inc()
	case ev.Terminal:
		m.completed.WithLabelValues(ev.Pool, ev.Status).Inc()
	case ev.Attempt == 0 && (ev.Status == StatusQueued || ev.Status == StatusScheduled):
		m.submitted.WithLabelValues(ev.Pool).Inc()
	case ev.Status == StatusRetrying || ev.Status == StatusQueued:
		m.retried.WithLabelValues(ev.Pool).Inc()
	}
}

// ResetAttempts forgets the attempts in progress, when this node stops
// leading (their ends are observed by the next leader, if any).
func (m *Metrics) ResetAttempts() {
	m.mu.Lock()
	clear(m.starts)
	m.mu.Unlock()
}

// EventsLost records status events the metrics subscription missed.
func (m *Metrics) EventsLost(n uint64) { m.eventsLost.Add(float64(n)) }

// WorkerStreamsRelayed adds delta to the worker streams this node relays
// to the leader.
func (m *Metrics) WorkerStreamsRelayed(delta int) { m.relayed.Add(float64(delta)) }

// EventStreamLagged records a lagged marker sent on an event stream.
func (m *Metrics) EventStreamLagged() { m.lagged.Inc() }

// LeaderChanged records that this node saw the leader change.
func (m *Metrics) LeaderChanged() { m.leaderChanges.Inc() }

// RPC records one API call served, with its result code ("ok" or a connect
// code name).
func (m *Metrics) RPC(procedure, code string) { m.rpcs.WithLabelValues(procedure, code).Inc() }

// RPCDuration records how long one unary API call took to serve.
func (m *Metrics) RPCDuration(procedure string, took time.Duration) {
	m.rpcSeconds.WithLabelValues(procedure).Observe(took.Seconds())
}

// Forwarded records one API call forwarded to the leader.
func (m *Metrics) Forwarded(procedure string) { m.forwarded.WithLabelValues(procedure).Inc() }

// WorkerStreams adds delta to the number of connected worker streams.
func (m *Metrics) WorkerStreams(delta int) { m.workers.Add(float64(delta)) }

// Aborted records one abort sent to a worker.
func (m *Metrics) Aborted() { m.aborts.Inc() }

// Redelivered records that the events of subscription name went out again.
func (m *Metrics) Redelivered(name string) { m.redeliveries.WithLabelValues(name).Inc() }

// RetentionCapPurged records a task purged at the retention cap.
func (m *Metrics) RetentionCapPurged() { m.retentionCapPurges.Inc() }

// stateCollector reads the replicated state at scrape time.
type stateCollector struct{ m *Metrics }

var (
	descTasks = prometheus.NewDesc(Namespace+"_tasks",
		"Tasks in this node's replica, by pool and status.", []string{"pool", "status"}, nil)
	descEpoch = prometheus.NewDesc(Namespace+"_epoch",
		"Current engine epoch of the replicated state.", nil, nil)
	descIsLeader = prometheus.NewDesc(Namespace+"_is_leader",
		"1 when this node is the raft leader, else 0.", nil, nil)
	descApplied = prometheus.NewDesc(Namespace+"_raft_applied_index",
		"Raft log index last applied on this node.", nil, nil)
	descQueueAge = prometheus.NewDesc(Namespace+"_pool_oldest_queued_age_seconds",
		"Age of the oldest queued task of each pool (since it became ready), in this node's replica.", []string{"pool"}, nil)
	descWorkers = prometheus.NewDesc(Namespace+"_pool_worker_streams",
		"Worker streams connected to this node, by pool.", []string{"pool"}, nil)
	descOffered = prometheus.NewDesc(Namespace+"_pool_offered_slots",
		"Free slots the worker streams connected to this node offer, by pool.", []string{"pool"}, nil)
	descInbox = prometheus.NewDesc(Namespace+"_engine_inbox",
		"Calls waiting for the leader's engine goroutine.", nil, nil)
	descRequests = prometheus.NewDesc(Namespace+"_engine_requests",
		"Calls the leader's engine holds: long polls, waiting submitters, answers held for their entry.", nil, nil)
	descWriteSteps = prometheus.NewDesc(Namespace+"_engine_write_queue_steps",
		"Engine steps whose changes wait for a log entry.", nil, nil)
	descWriteBytes = prometheus.NewDesc(Namespace+"_engine_write_queue_bytes",
		"Size of the changes waiting for a log entry.", nil, nil)
	descInFlight = prometheus.NewDesc(Namespace+"_engine_entries_in_flight",
		"Log entries appended by the leader's engine and not applied yet.", nil, nil)
	descSaturated = prometheus.NewDesc(Namespace+"_engine_write_path_saturated",
		"1 while the write path is past its threshold and submits are refused, else 0.", nil, nil)
	descDesired = prometheus.NewDesc(Namespace+"_pool_desired_slots",
		"Worker slots each pool could use now: its running attempts and its queued tasks ready to run, at most its max_running; reported by the leader (the autoscaling signal).", []string{"pool"}, nil)
	descSubPending = prometheus.NewDesc(Namespace+"_subscription_pending",
		"Events a durable subscription holds, not acked yet, in this node's replica.", []string{"subscription"}, nil)
	descSubStalled = prometheus.NewDesc(Namespace+"_subscription_stalled",
		"1 while a durable subscription is stalled (its events went out as many times as it allows without an ack), else 0.", []string{"subscription"}, nil)
)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTasks
	ch <- descEpoch
	ch <- descIsLeader
	ch <- descApplied
	ch <- descQueueAge
	ch <- descWorkers
	ch <- descOffered
	ch <- descInbox
	ch <- descRequests
	ch <- descWriteSteps
	ch <- descWriteBytes
	ch <- descInFlight
	ch <- descSaturated
	ch <- descDesired
	ch <- descSubPending
	ch <- descSubStalled
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	box := c.m.src.Load()
	if box == nil {
		return
	}
	s := box.s
	s.TaskCounts(func(pool, status string, n int64) {
		ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(n), pool, status)
	})
	leader := 0.0
	if s.IsLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(s.Epoch()))
	ch <- prometheus.MustNewConstMetric(descIsLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(s.AppliedIndex()))
	s.Pools(func(pool string, age time.Duration) {
		ch <- prometheus.MustNewConstMetric(descQueueAge, prometheus.GaugeValue, age.Seconds(), pool)
	})
	s.Subscriptions(func(name string, pending int64, stalled bool) {
		st := 0.0
		if stalled {
			st = 1
		}
		ch <- prometheus.MustNewConstMetric(descSubPending, prometheus.GaugeValue, float64(pending), name)
		ch <- prometheus.MustNewConstMetric(descSubStalled, prometheus.GaugeValue, st, name)
	})
	if w := c.m.workerS.Load(); w != nil {
		(*w)(func(pool string, streams, free int64) {
			ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(streams), pool)
			ch <- prometheus.MustNewConstMetric(descOffered, prometheus.GaugeValue, float64(free), pool)
		})
	}
	if g, ok := s.Engine(); ok {
		saturated := 0.0
		if g.Saturated {
			saturated = 1
		}
		for _, v := range []struct {
			d *prometheus.Desc
			n float64
		}{
			{descInbox, float64(g.Inbox)}, {descRequests, float64(g.Requests)},
			{descWriteSteps, float64(g.Queued)}, {descWriteBytes, float64(g.QueuedBytes)},
			{descInFlight, float64(g.InFlight)}, {descSaturated, saturated},
		} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.n)
		}
		for _, p := range g.DesiredSlots {
			ch <- prometheus.MustNewConstMetric(descDesired, prometheus.GaugeValue, float64(p.Slots), p.Pool)
		}
	}
}
