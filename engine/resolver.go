package engine

import (
	"context"
	"time"
)

// resolver waits on appended entries, strictly in append order, and reports
// each outcome to the loop. It runs on its own goroutine so that the loop
// keeps serving while entries commit.
type resolver struct {
	items   chan resolveItem
	results chan resolveResult
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

type resolveItem struct {
	seq     uint64
	pending Pending
	at      time.Time // when it was appended
}

type resolveResult struct {
	seq     uint64
	err     error
	latency time.Duration
	index   uint64 // the entry's raft index, when applied and the log tells
}

// newResolver makes a resolver for up to n entries in flight: neither of
// its channels ever blocks the loop.
func newResolver(n int) *resolver {
	ctx, cancel := context.WithCancel(context.Background())
	return &resolver{
		items:   make(chan resolveItem, n),
		results: make(chan resolveResult, n),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
}

func (r *resolver) run() {
	defer close(r.done)
	for it := range r.items {
		err := r.ctx.Err()
		if err == nil {
			err = it.pending.Wait(r.ctx)
		}
		res := resolveResult{seq: it.seq, err: err, latency: time.Since(it.at)}
		if ix, ok := it.pending.(indexed); ok && err == nil {
			res.index = ix.Index()
		}
		r.results <- res
	}
}

// stop abandons the entries still awaited and waits for the goroutine.
func (r *resolver) stop() {
	r.cancel()
	close(r.items)
	<-r.done
}
