package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/jepsen/history"
)

// QueuePool is the queue workload's pool.
const QueuePool = "q"

// QueueMaxAttempts is the attempts the queue workload's tasks allow.
const QueueMaxAttempts = 4

// Process is a client process: a name and its source address.
type Process struct {
	Name string
	IP   string
}

// Queue is the queue workload: submitters that retry an unknown outcome
// with the same key on any node, occasional cancels, and a racer that
// cancels tasks while a worker completes them.
type Queue struct {
	env        *Env
	submitters []Process
	racer      Process
	// Interval is the pause between two submits of one submitter.
	Interval time.Duration

	pin     atomic.Pointer[string]
	stopped atomic.Bool
	held    atomic.Bool

	mu     sync.Mutex
	acked  []ackedTask // recent acked tasks, for cancels
	raceC  chan Grant
	burstC chan burst

	Submitted atomic.Int64
}

type ackedTask struct{ id, key string }

// NewQueue returns the queue workload.
func NewQueue(env *Env, submitters []Process, racer Process) *Queue {
	return &Queue{env: env, submitters: submitters, racer: racer, Interval: 150 * time.Millisecond,
		raceC: make(chan Grant, 4), burstC: make(chan burst)}
}

// Pin makes every submit attempt go to node id ("" unpins).
func (q *Queue) Pin(id string) {
	if id == "" {
		q.pin.Store(nil)
		return
	}
	q.pin.Store(&id)
}

// Hold pauses (true) or resumes the submitters.
func (q *Queue) Hold(held bool) { q.held.Store(held) }

// StopSubmitting ends the submit loops (the racer goes on).
func (q *Queue) StopSubmitting() { q.stopped.Store(true) }

// Race asks the racer to cancel g's task now (dropped when it is busy).
func (q *Queue) Race(g Grant) {
	select {
	case q.raceC <- g:
	default:
	}
}

// Run runs the submitters and the racer until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range q.submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.submitter(ctx, p, q.env.Rand())
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.runRacer(ctx)
	}()
	wg.Wait()
}

func (q *Queue) node(r *rand.Rand) Node {
	if p := q.pin.Load(); p != nil {
		if n, ok := q.env.NodeByID(*p); ok {
			return n
		}
	}
	return q.env.Nodes[r.IntN(len(q.env.Nodes))]
}

func (q *Queue) submitter(ctx context.Context, p Process, r *rand.Rand) {
	for seq := 1; ctx.Err() == nil && !q.stopped.Load(); seq++ {
		for q.held.Load() && !q.stopped.Load() {
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
		}
		key := fmt.Sprintf("p-%s-%d", p.Name, seq)
		id, ok := q.submit(ctx, p, r, key)
		if ok {
			q.mu.Lock()
			q.acked = append(q.acked, ackedTask{id: id, key: key})
			if len(q.acked) > 64 {
				q.acked = q.acked[len(q.acked)-64:]
			}
			q.mu.Unlock()
		}
		if r.Float64() < 0.05 {
			q.cancelRecent(ctx, p, r)
		}
		jitter := time.Duration(r.Int64N(int64(q.Interval)))
		if !sleepCtx(ctx, q.Interval/2+jitter) {
			return
		}
	}
}

// submit sends key up to four times (the first attempt and three retries
// after unknown outcomes), each to a random node.
func (q *Queue) submit(ctx context.Context, p Process, r *rand.Rand, key string) (string, bool) {
	return q.submitSpec(ctx, p, r, key, "")
}

func (q *Queue) submitSpec(ctx context.Context, p Process, r *rand.Rand, key, priority string) (string, bool) {
	for attempt := 0; attempt < 4 && ctx.Err() == nil; attempt++ {
		n := q.node(r)
		c, err := q.env.Client(p.IP, n)
		if err != nil {
			return "", false
		}
		q.Submitted.Add(1)
		done := q.env.Rec.Invoke(p.Name, "submit", n.ID, &history.Value{Pool: QueuePool, Key: key, Payload: key})
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		sub, err := c.Submit(actx, client.TaskSpec{Template: client.Template{Pool: QueuePool, Kind: "q", Payload: []byte(key), MaxAttempts: QueueMaxAttempts, Priority: priority}, Key: key})
		cancel()
		t := Outcome(err)
		switch t {
		case history.OK:
			done(t, &history.Value{Key: key, ID: sub.ID, Duplicate: sub.Duplicate}, nil)
			return sub.ID, true
		case history.Fail:
			done(t, &history.Value{Key: key}, err)
			return "", false
		default:
			done(t, &history.Value{Key: key}, err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return "", false
			}
		}
	}
	return "", false
}

func (q *Queue) cancelRecent(ctx context.Context, p Process, r *rand.Rand) {
	q.mu.Lock()
	if len(q.acked) == 0 {
		q.mu.Unlock()
		return
	}
	t := q.acked[r.IntN(len(q.acked))]
	q.mu.Unlock()
	q.cancel(ctx, p, q.node(r), t.id, t.key)
}

func (q *Queue) cancel(ctx context.Context, p Process, n Node, id, key string) {
	c, err := q.env.Client(p.IP, n)
	if err != nil {
		return
	}
	done := q.env.Rec.Invoke(p.Name, "cancel", n.ID, &history.Value{Pool: QueuePool, ID: id, Key: key})
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	res, err := c.CancelTask(actx, id)
	cancel()
	switch {
	case err == nil:
		done(history.OK, &history.Value{ID: id, Key: key, Cancelled: boolp(res.Cancelled), LastLease: &res.LastLease}, nil)
	case errors.Is(err, client.ErrNotFound):
		done(history.Fail, &history.Value{ID: id, Key: key, Code: "not_found"}, err)
	default:
		done(Outcome(err), &history.Value{ID: id, Key: key}, err)
	}
}

type burst struct {
	n        int
	priority string
	done     chan int
}

// Burst has the racer process submit n tasks of the given priority (keys
// p-<racer>-b<seq>) and returns how many were acknowledged.
func (q *Queue) Burst(ctx context.Context, n int, priority string) int {
	b := burst{n: n, priority: priority, done: make(chan int, 1)}
	select {
	case q.burstC <- b:
	case <-ctx.Done():
		return 0
	}
	select {
	case k := <-b.done:
		return k
	case <-ctx.Done():
		return 0
	}
}

func (q *Queue) runRacer(ctx context.Context) {
	r := q.env.Rand()
	seq := 0
	for {
		select {
		case <-ctx.Done():
			return
		case g := <-q.raceC:
			q.cancel(ctx, q.racer, q.env.Nodes[r.IntN(len(q.env.Nodes))], g.TaskID, g.Key)
		case b := <-q.burstC:
			acked := 0
			for range b.n {
				seq++
				if _, ok := q.submitSpec(ctx, q.racer, r, fmt.Sprintf("p-%s-b%d", q.racer.Name, seq), b.priority); ok {
					acked++
				}
			}
			b.done <- acked
		}
	}
}
