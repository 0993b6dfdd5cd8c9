package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/jepsen/history"
)

// LanesPool is the pool of the ordering workload: every task carries an
// ordering key, so the pool's tasks run in lanes.
const LanesPool = "lanes"

// LanesMaxAttempts is the attempts an ordering task allows.
const LanesMaxAttempts = 4

// NumLaneKeys is how many ordering keys the workload draws from.
const NumLaneKeys = 8

// OrdSubmit is the operation name of an ordering submit (one task or an
// atomic batch of tasks with the same key).
const OrdSubmit = "ord-submit"

// LaneKey is the ordering key number i.
func LaneKey(i int) string { return fmt.Sprintf("lane-%d", i) }

// LanePayload is the payload of an ordering task: its key and its
// idempotency key.
func LanePayload(okey, key string) string { return "ord|" + okey + "|" + key }

// Lanes is the ordering workload: submitters send tasks with an ordering
// key drawn from NumLaneKeys keys, one at a time or in atomic batches of
// 2 to 5 tasks of the same key, each to a random node (an unknown outcome
// is retried with the same keys). Its workers (LaneBehavior) run each
// attempt for a few milliseconds.
type Lanes struct {
	env        *Env
	submitters []Process
	// Interval is the mean pause between two submits of one submitter.
	Interval time.Duration
	// BatchRate is the share of submits that are batches.
	BatchRate float64

	stopped atomic.Bool
	burstC  chan laneBurst
	seq     atomic.Int64
}

type laneBurst struct {
	keys []string
	n    int
	done chan int
}

// NewLanes returns the ordering workload.
func NewLanes(env *Env, submitters []Process) *Lanes {
	return &Lanes{env: env, submitters: submitters, Interval: 250 * time.Millisecond, BatchRate: 0.5,
		burstC: make(chan laneBurst)}
}

// StopSubmitting ends the submit loops.
func (l *Lanes) StopSubmitting() { l.stopped.Store(true) }

// Run runs the submitters until ctx ends; the first one also serves
// bursts.
func (l *Lanes) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, p := range l.submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.submitter(ctx, p, l.env.Rand(), i == 0)
		}()
	}
	wg.Wait()
}

// Burst has the first submitter send, for each key, one atomic batch of n
// tasks, and returns how many batches were acknowledged.
func (l *Lanes) Burst(ctx context.Context, keys []string, n int) int {
	b := laneBurst{keys: keys, n: n, done: make(chan int, 1)}
	select {
	case l.burstC <- b:
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

func (l *Lanes) submitter(ctx context.Context, p Process, r *rand.Rand, bursts bool) {
	var burstC chan laneBurst
	if bursts {
		burstC = l.burstC
	}
	next := time.Now()
	for ctx.Err() == nil && !l.stopped.Load() {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case b := <-burstC:
			t.Stop()
			acked := 0
			for _, k := range b.keys {
				if l.submit(ctx, p, r, k, b.n) {
					acked++
				}
			}
			b.done <- acked
			continue
		case <-t.C:
		}
		n := 1
		if r.Float64() < l.BatchRate {
			n = 2 + r.IntN(4)
		}
		l.submit(ctx, p, r, LaneKey(r.IntN(NumLaneKeys)), n)
		next = time.Now().Add(l.Interval/2 + time.Duration(r.Int64N(int64(l.Interval))))
	}
}

// submit sends n tasks of ordering key okey (one Submit, or one atomic
// SubmitBatch when n > 1) up to four times (the first attempt and three
// retries after unknown outcomes) with the same idempotency keys, each to
// a random node.
func (l *Lanes) submit(ctx context.Context, p Process, r *rand.Rand, okey string, n int) bool {
	seq := l.seq.Add(1)
	keys := make([]string, n)
	specs := make([]client.TaskSpec, n)
	for i := range n {
		keys[i] = fmt.Sprintf("o-%s-%d-%d", p.Name, seq, i)
		specs[i] = client.TaskSpec{Template: client.Template{Pool: LanesPool, Kind: "ord", Payload: []byte(LanePayload(okey, keys[i])),
			MaxAttempts: LanesMaxAttempts, OrderingKey: okey}, Key: keys[i]}
	}
	for attempt := 0; attempt < 4 && ctx.Err() == nil; attempt++ {
		node := l.env.Nodes[r.IntN(len(l.env.Nodes))]
		c, err := l.env.Client(p.IP, node)
		if err != nil {
			return false
		}
		done := l.env.Rec.Invoke(p.Name, OrdSubmit, node.ID, &history.Value{Pool: LanesPool, OrderingKey: okey, Keys: keys})
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var ids []string
		if n == 1 {
			var sub client.Submitted
			sub, err = c.Submit(actx, specs[0])
			if err == nil {
				ids = []string{sub.ID}
			}
		} else {
			var subs []client.Submitted
			subs, err = c.SubmitBatch(actx, specs)
			for _, s := range subs {
				ids = append(ids, s.ID)
			}
		}
		cancel()
		switch t := Outcome(err); t {
		case history.OK:
			done(t, &history.Value{Pool: LanesPool, OrderingKey: okey, Keys: keys, IDs: ids}, nil)
			return true
		case history.Fail:
			done(t, &history.Value{Pool: LanesPool, OrderingKey: okey, Keys: keys}, err)
			return false
		default:
			done(t, &history.Value{Pool: LanesPool, OrderingKey: okey, Keys: keys}, err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return false
			}
		}
	}
	return false
}

// LaneKeyOf is the ordering key an ordering task's payload names ("" for
// another payload).
func LaneKeyOf(payload string) string {
	parts := strings.Split(payload, "|")
	if len(parts) == 3 && parts[0] == "ord" {
		return parts[1]
	}
	return ""
}

// LaneBehavior is the ordering workers' mix: every attempt holds its task
// for 5 to 50 ms; 10% of the attempts fail retryably (the task keeps its
// place at the head of its lane), 2% fail for good (the lane goes on), and
// 1% outlive their lease (no heartbeats), so that the task is granted
// again while the first attempt still runs and completes stale.
func LaneBehavior(ttl time.Duration) func(r *rand.Rand, g Grant) Behavior {
	return func(r *rand.Rand, g Grant) Behavior {
		b := Behavior{Exec: time.Duration(5+r.IntN(46)) * time.Millisecond, Outcome: "success"}
		x := r.Float64()
		switch {
		case x < 0.01:
			b.Outlive = true
			b.Exec = ttl + 1500*time.Millisecond + time.Duration(r.IntN(1000))*time.Millisecond
		case x < 0.11:
			b.Outcome = "retryable"
		case x < 0.13:
			b.Outcome = "permanent"
		}
		return b
	}
}
