package transport

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/metrics"
)

// Hooks connect the engine a node runs while it leads to the API server:
// aborts reach the stream of the worker holding the lease. Create them
// before the node, give Abort to the node's engine configuration
// (engine.Config.OnAbort), and the same Hooks to the Server.
type Hooks struct {
	workers *registry
}

// NewHooks returns hooks counting the aborts they deliver into m (nil: not
// counted).
func NewHooks(m *metrics.Metrics) *Hooks {
	return &Hooks{workers: newRegistry(m)}
}

// Abort tells every stream of worker to stop the attempt under lease. It
// never blocks: it runs on the engine's goroutine.
func (h *Hooks) Abort(worker string, lease uint64, reason string) {
	h.workers.abort(worker, lease, reason)
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

// list returns the open streams of pool (every pool when empty), by worker
// id.
func (r *registry) list(pool string) []*workerStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*workerStream
	for _, set := range r.streams {
		for ws := range set {
			if pool == "" || ws.pool == pool {
				out = append(out, ws)
			}
		}
	}
	slices.SortFunc(out, func(a, b *workerStream) int {
		if c := strings.Compare(a.worker, b.worker); c != 0 {
			return c
		}
		return cmp.Compare(a.lastSeen.Load(), b.lastSeen.Load()) // two streams of one worker
	})
	return out
}

// gauges calls fn with the streams and free slots of every pool that has
// streams (the metrics' worker source).
func (r *registry) gauges(fn func(pool string, streams, free int64)) {
	type agg struct{ streams, free int64 }
	by := make(map[string]*agg)
	for _, ws := range r.list("") {
		a := by[ws.pool]
		if a == nil {
			a = &agg{}
			by[ws.pool] = a
		}
		a.streams++
		a.free += max(ws.free.Load(), 0)
	}
	pools := make([]string, 0, len(by))
	for p := range by {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	for _, p := range pools {
		fn(p, by[p].streams, by[p].free)
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
