package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

const (
	// DefaultSubmitConcurrency is how many Submit calls of one Client go
	// out on their own at once; see WithSubmitConcurrency.
	DefaultSubmitConcurrency = 4

	// Bounds of one coalesced call.
	maxCoalescedSpecs = 512
	maxCoalescedBytes = 1 << 20
)

// coalescer turns Submit calls made while enough others are in flight into
// EnqueueMany calls. Below the limit a Submit goes out alone, as if there
// were no coalescer; at the limit it waits in a queue, and when a call in
// flight returns, everything queued goes out together in one EnqueueMany
// call (each spec still admitted or refused on its own, with its own key).
// Nothing waits for a timer: under a light load nothing is ever queued, and
// under a heavy one the batches grow with the load, which is what keeps a
// node from spending its CPU on one RPC per task.
type coalescer struct {
	c     *Client
	limit int

	mu       sync.Mutex
	inflight int // Submit and EnqueueMany calls in flight
	queue    []*queuedSubmit
}

// queuedSubmit is one Submit waiting in the queue, or in a coalesced call.
type queuedSubmit struct {
	ctx   context.Context
	spec  *cronoqv1.TaskSpec
	key   string
	gen   bool
	taken bool               // in a coalesced call (guarded by coalescer.mu)
	done  chan submitOutcome // buffered: the sender never blocks
}

type submitOutcome struct {
	sub Submitted
	err error
}

// submit runs one Submit through the coalescer.
func (q *coalescer) submit(ctx context.Context, what string, spec *cronoqv1.TaskSpec, key string, gen bool) (Submitted, error) {
	q.mu.Lock()
	if q.inflight < q.limit {
		q.inflight++
		q.mu.Unlock()
		sub, err := q.c.submitAlone(ctx, what, spec, key, gen)
		q.release()
		return sub, err
	}
	qs := &queuedSubmit{ctx: ctx, spec: spec, key: key, gen: gen, done: make(chan submitOutcome, 1)}
	q.queue = append(q.queue, qs)
	q.mu.Unlock()

	select {
	case out := <-qs.done:
		return out.sub, out.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	taken := qs.taken
	if !taken {
		for i, o := range q.queue {
			if o == qs {
				q.queue = append(q.queue[:i], q.queue[i+1:]...)
				break
			}
		}
	}
	q.mu.Unlock()
	if !taken {
		// Never sent: no effect.
		return Submitted{}, fmt.Errorf("%s: %w", what, ctx.Err())
	}
	select {
	case out := <-qs.done:
		return out.sub, out.err
	default:
		return Submitted{}, fmt.Errorf("%s: %w: %w", what, ctx.Err(), ErrOutcomeUnknown)
	}
}

// release ends a call in flight: its slot goes to a coalesced call of what
// is queued, if anything is.
func (q *coalescer) release() {
	q.mu.Lock()
	batch := q.take()
	if len(batch) == 0 {
		q.inflight--
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	// The Client owns the goroutine: Close cancels its calls and waits.
	c := q.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		q.answer(batch, fmt.Errorf("submitting task: %w", ErrClosed))
		q.send(nil)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		q.send(batch)
	}()
}

// answer fails every submit of batch with err.
func (q *coalescer) answer(batch []*queuedSubmit, err error) {
	for _, qs := range batch {
		qs.done <- submitOutcome{err: err}
	}
}

// take removes the next batch from the queue, skipping submits whose
// caller gave up. The caller holds mu.
func (q *coalescer) take() []*queuedSubmit {
	var batch []*queuedSubmit
	size, n := 0, 0
	for n < len(q.queue) && len(batch) < maxCoalescedSpecs {
		qs := q.queue[n]
		if qs.ctx.Err() != nil {
			n++ // its caller is returning "not sent": drop it unsent
			continue
		}
		s := proto.Size(qs.spec)
		if len(batch) > 0 && size+s > maxCoalescedBytes {
			break
		}
		qs.taken = true
		batch = append(batch, qs)
		size += s
		n++
	}
	q.queue = q.queue[n:]
	if len(q.queue) == 0 {
		q.queue = nil
	}
	return batch
}

// send sends batches as one EnqueueMany call each until the queue is
// empty, then gives up the slot.
func (q *coalescer) send(batch []*queuedSubmit) {
	for {
		if len(batch) > 0 {
			q.sendOne(batch)
		}
		q.mu.Lock()
		batch = q.take()
		if len(batch) == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

// sendOne makes one EnqueueMany call for batch and answers every submit in
// it. The call lasts as long as its most patient caller: until the latest
// of their deadlines (none if one has none), or until the Client closes.
func (q *coalescer) sendOne(batch []*queuedSubmit) {
	const what = "submitting task"
	ctx := q.c.base
	var latest time.Time
	bounded := true
	for _, qs := range batch {
		d, ok := qs.ctx.Deadline()
		if !ok {
			bounded = false
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	specs := make([]*cronoqv1.TaskSpec, len(batch))
	for i, qs := range batch {
		specs[i] = qs.spec
	}
	resp, err := unary(ctx, q.c, what, idempotent, &cronoqv1.EnqueueManyRequest{Specs: specs},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
			return ep.tasks.EnqueueMany
		})
	if err == nil && len(resp.GetResults()) != len(batch) {
		err = fmt.Errorf("%s: node answered %d results for %d specs: %w", what, len(resp.GetResults()), len(batch), ErrOutcomeUnknown)
	}
	if err != nil {
		q.answer(batch, err)
		return
	}
	for i, qs := range batch {
		r := resp.GetResults()[i]
		if e := itemError(r.GetCode(), r.GetError()); e != nil {
			qs.done <- submitOutcome{err: fmt.Errorf("%s: %w", what, e)}
			continue
		}
		if r.GetSubmitted().GetId() == "" {
			qs.done <- submitOutcome{err: fmt.Errorf("%s: node answered without a task id", what)}
			continue
		}
		qs.done <- submitOutcome{sub: submittedFromProto(r.GetSubmitted(), qs.key, qs.gen)}
	}
}
