package engine

import (
	"context"
	"time"
)

// waiter waits on appended entries, strictly in append order, and reports
// each outcome to the loop. It runs on its own goroutine so that the loop
// keeps serving while entries commit.
type waiter struct {
	items   chan waitItem
	results chan waitResult
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

type waitItem struct {
	seq     uint64
	pending Pending
	at      time.Time // when it was appended
}

type waitResult struct {
	seq     uint64
	err     error
	latency time.Duration
}

// newWaiter makes a waiter for up to n entries in flight: neither of its
// channels ever blocks the loop.
func newWaiter(n int) *waiter {
	ctx, cancel := context.WithCancel(context.Background())
	return &waiter{
		items:   make(chan waitItem, n),
		results: make(chan waitResult, n),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
}

func (w *waiter) run() {
	defer close(w.done)
	for it := range w.items {
		err := w.ctx.Err()
		if err == nil {
			err = it.pending.Wait(w.ctx)
		}
		w.results <- waitResult{seq: it.seq, err: err, latency: time.Since(it.at)}
	}
}

// stop abandons the entries still awaited and waits for the goroutine.
func (w *waiter) stop() {
	w.cancel()
	close(w.items)
	<-w.done
}
