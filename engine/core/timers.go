package core

import (
	"container/heap"

	"github.com/cronoq/cronoq/fsm"
)

// timerKind orders timers due at the same instant: a deadline is handled
// before an attempt's timeout or lost lease, which come before promotions
// and recurring fires.
type timerKind uint8

const (
	tmDeadline  timerKind = iota + 1 // the task's deadline: it ends expired
	tmTimeout                        // the attempt under lease gen ran too long
	tmLease                          // the attempt under lease gen may have missed its heartbeat window
	tmReady                          // a scheduled or retrying task reaches its run time (gen = task generation)
	tmFire                           // a recurring schedule's next slot (id = name, gen = schedule generation)
	tmRate                           // a pool's rate limit allows dispatches again (id = pool)
	tmRedeliver                      // a subscription's ack timeout passed (id = name, gen = its timer generation)
)

// timer is one entry of the timer heap. Entries are never removed when they
// become obsolete; they are checked against the current state when they come
// due (lazy invalidation).
type timer struct {
	when fsm.Instant
	kind timerKind
	id   string
	gen  uint64
}

func (a timer) less(b timer) bool {
	if a.when != b.when {
		return a.when < b.when
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if a.id != b.id {
		return a.id < b.id
	}
	return a.gen < b.gen
}

// timerHeap is a min-heap of timers under a total order, so that the pop
// order depends only on the entries, never on how they were pushed.
type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	*h = old[:n-1]
	return t
}

func (h *timerHeap) push(t timer) { heap.Push(h, t) }
func (h *timerHeap) pop() timer   { return heap.Pop(h).(timer) }
func (h timerHeap) top() timer    { return h[0] }
