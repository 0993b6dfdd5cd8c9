package transport

import (
	"sync"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/metrics"
)

// Hooks connect the engine a node runs while it leads to the API server:
// aborts reach the stream of the worker holding the lease, and commit
// results feed the metrics. Create them before the node, put Engine's
// result into the node's engine configuration, and give the same Hooks to
// the Server.
type Hooks struct {
	m       *metrics.Metrics
	workers *registry
}

// NewHooks returns hooks recording into m (nil: commits are not recorded).
func NewHooks(m *metrics.Metrics) *Hooks {
	return &Hooks{m: m, workers: newRegistry(m)}
}

// Engine returns cfg with OnAbort and OnCommit set to the hooks' (any
// callbacks already set are called as well).
func (h *Hooks) Engine(cfg engine.Config) engine.Config {
	prevAbort, prevCommit := cfg.OnAbort, cfg.OnCommit
	cfg.OnAbort = func(worker string, lease uint64, reason string) {
		h.workers.abort(worker, lease, reason)
		if prevAbort != nil {
			prevAbort(worker, lease, reason)
		}
	}
	cfg.OnCommit = func(ci engine.CommitInfo) {
		if h.m != nil {
			h.m.ObserveCommit(ci)
		}
		if prevCommit != nil {
			prevCommit(ci)
		}
	}
	return cfg
}

// registry maps worker ids to their open streams, so that an abort from the
// engine reaches the stream of the worker holding the lease.
type registry struct {
	m *metrics.Metrics

	mu      sync.Mutex
	streams map[string]map[*workerStream]struct{}
}

func newRegistry(m *metrics.Metrics) *registry {
	return &registry{m: m, streams: make(map[string]map[*workerStream]struct{})}
}

func (r *registry) add(ws *workerStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.streams[ws.worker]
	if set == nil {
		set = make(map[*workerStream]struct{})
		r.streams[ws.worker] = set
	}
	set[ws] = struct{}{}
}

func (r *registry) remove(ws *workerStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.streams[ws.worker]
	delete(set, ws)
	if len(set) == 0 {
		delete(r.streams, ws.worker)
	}
}

// abort tells every stream of worker to stop the attempt under lease. It
// never blocks (it runs on the engine's goroutine). A worker that is not
// connected learns it when its next heartbeat for the lease is refused.
func (r *registry) abort(worker string, lease uint64, reason string) {
	msg := &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Abort{Abort: &cronoqv1.Abort{Lease: lease, Reason: reason}}}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ws := range r.streams[worker] {
		if ws.out.push(msg) && r.m != nil {
			r.m.Aborted()
		}
	}
}
