package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/jepsen/history"
)

// Operation names of the delivery workload.
const (
	// SubCreate creates a subscription (its filter in the value).
	SubCreate = "sub-create"
	// SubRead is a lone ok: what one message of a consumer's read stream
	// delivered (session, node, events).
	SubRead = "sub-read"
	// SubDrop is a lone ok: a consumer discards the events of a read it
	// has not processed and closes its stream, as a consumer that crashes
	// does; they must come again.
	SubDrop = "sub-drop"
	// SubAck acknowledges a cursor; its value lists the events processed
	// since the last acknowledged ack, which the ack covers.
	SubAck = "sub-ack"
	// SubFinal is the consumer's catch-up after the drain: ok when the
	// subscription had nothing left to deliver (value: its durable
	// cursor), info when it did not get there.
	SubFinal = "sub-final"
)

// SubSpec is a subscription of the delivery workload.
type SubSpec struct {
	Name     string
	Pools    []string
	Statuses []string // empty: every status
}

// The subscriptions of the delivery workload, both on the queue pool (its
// tasks succeed, fail, are retried and cancelled): one for the terminal
// statuses, one for every status.
var (
	SubTerminal = SubSpec{Name: "jd-terminal", Pools: []string{QueuePool},
		Statuses: []string{"succeeded", "failed", "cancelled", "expired"}}
	SubEvery = SubSpec{Name: "jd-every", Pools: []string{QueuePool}}
)

// DeliverySubs lists the delivery workload's subscriptions.
var DeliverySubs = []SubSpec{SubTerminal, SubEvery}

// TerminalStatus reports whether a status name is terminal.
func TerminalStatus(s string) bool {
	switch s {
	case "succeeded", "failed", "cancelled", "expired":
		return true
	}
	return false
}

// Settings of the delivery workload's subscriptions and consumers.
const (
	// SubAckTimeout: events sent and not acked go out again this soon.
	SubAckTimeout = 3 * time.Second
	// subMaxDeliveries is high enough that a consumer cut off for a
	// whole fault does not stall its subscription.
	subMaxDeliveries = 1000
	// DefaultDropRate is the share of reads a consumer discards
	// unprocessed, closing its stream as if it crashed.
	DefaultDropRate = 0.03
	// subAckEvery: a consumer acks after this many processed events, or
	// after subAckAfter.
	subAckEvery = 25
	subAckAfter = 200 * time.Millisecond
	// subReadBatch bounds the events recorded as one read.
	subReadBatch = 100
)

// Delivery is the delivery workload: a consumer per subscription reads it
// through a stream from a random node (a follower relays it), processes
// the events above the last one it processed, in the order they come,
// and acks what it processed (through a random node); now and then it
// discards a read unprocessed and reconnects elsewhere, as a consumer that
// crashes does, and each stream lasts a few seconds at most. The streams
// and acks use the generated API client over the process's own address,
// without the SDK's leader hints.
type Delivery struct {
	env       *Env
	consumers []*consumer

	mu       sync.Mutex
	dropRate float64
}

// consumer reads one subscription.
type consumer struct {
	d     *Delivery
	spec  SubSpec
	proc  Process
	httpc *http.Client
	rnd   *rand.Rand

	session   int
	processed uint64               // the highest cursor processed
	pending   []history.EventState // processed, not covered by an ok ack yet
	lastAck   time.Time
}

// NewDelivery returns the delivery workload: procs[i] consumes
// DeliverySubs[i].
func NewDelivery(env *Env, procs []Process) *Delivery {
	d := &Delivery{env: env, dropRate: DefaultDropRate}
	for i, s := range DeliverySubs {
		p := procs[i%len(procs)]
		d.consumers = append(d.consumers, &consumer{d: d, spec: s, proc: p, httpc: env.httpClient(p.IP), rnd: env.Rand()})
	}
	return d
}

// SetDropRate sets the share of reads the consumers discard (0 to 1).
func (d *Delivery) SetDropRate(p float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropRate = p
}

func (d *Delivery) drops() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropRate
}

func (c *consumer) node() Node { return c.d.env.Nodes[c.rnd.IntN(len(c.d.env.Nodes))] }

func (c *consumer) api(n Node) cronoqv1connect.SubscriptionServiceClient {
	return cronoqv1connect.NewSubscriptionServiceClient(c.httpc, "http://"+n.Addr)
}

// statusName is the lower-case name of a status, as the history writes it.
func statusName(s cronoqv1.Status) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_"))
}

func statusOf(name string) cronoqv1.Status {
	return cronoqv1.Status(cronoqv1.Status_value["STATUS_"+strings.ToUpper(name)])
}

// Setup creates the subscriptions, each through random nodes until one
// create is acknowledged (creating one that exists with the same settings
// answers it).
func (d *Delivery) Setup(ctx context.Context) error {
	for _, c := range d.consumers {
		var sts []cronoqv1.Status
		for _, s := range c.spec.Statuses {
			sts = append(sts, statusOf(s))
		}
		req := &cronoqv1.CreateSubscriptionRequest{Subscription: &cronoqv1.Subscription{
			Name: c.spec.Name, Pools: c.spec.Pools, Statuses: sts,
			AckTimeout: durationpb.New(SubAckTimeout), MaxDeliveries: subMaxDeliveries,
		}}
		v := &history.Value{Subscription: c.spec.Name, Pool: c.spec.Pools[0], Statuses: c.spec.Statuses}
		for {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("creating subscription %s: %w", c.spec.Name, err)
			}
			n := c.node()
			done := d.env.Rec.Invoke(c.proc.Name, SubCreate, n.ID, v)
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := c.api(n).Create(cctx, connect.NewRequest(req))
			cancel()
			done(subOutcome(err), v, err)
			if err == nil {
				break
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	return nil
}

// subOutcome classifies an answer of the subscription API: a refusal of
// the request itself is definite, anything else may have taken effect.
func subOutcome(err error) history.Type {
	if err == nil {
		return history.OK
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition, connect.CodePermissionDenied:
		return history.Fail
	}
	return history.Info
}

// Run consumes every subscription until ctx ends.
func (d *Delivery) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range d.consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c.stream(ctx, 3*time.Second+time.Duration(c.rnd.IntN(7000))*time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

type subRecv struct {
	ev  *cronoqv1.Event
	err error
}

// stream runs one read session on a random node for at most life: it
// processes and acks what comes, and ends early when it discards a read,
// the stream fails or ctx ends. Whatever it processed is acked before it
// returns (if the ack fails it stays pending for the next session). After
// a failed stream it waits a little, so that a cluster down is not
// hammered.
func (c *consumer) stream(ctx context.Context, life time.Duration) {
	n := c.node()
	c.session++
	session := c.session
	sctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	st, err := c.api(n).Read(sctx, connect.NewRequest(&cronoqv1.ReadSubscriptionRequest{Name: c.spec.Name}))
	if err != nil {
		sleepCtx(ctx, 200*time.Millisecond)
		return
	}
	in := make(chan subRecv, subReadBatch)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(in)
		for st.Receive() {
			select {
			case in <- subRecv{ev: st.Msg()}:
			case <-sctx.Done():
				return
			}
		}
		if err := st.Err(); err != nil {
			select {
			case in <- subRecv{err: err}:
			case <-sctx.Done():
			}
		}
	}()
	failed := false
	defer func() {
		cancel()
		_ = st.Close()
		wg.Wait()
		if len(c.pending) > 0 {
			c.ack(context.WithoutCancel(ctx))
		}
		if failed {
			sleepCtx(ctx, time.Duration(100+c.rnd.IntN(200))*time.Millisecond)
		}
	}()
	tick := time.NewTicker(subAckAfter)
	defer tick.Stop()
	for {
		select {
		case <-sctx.Done():
			return
		case <-tick.C:
			if len(c.pending) > 0 && time.Since(c.lastAck) >= subAckAfter {
				c.ack(sctx)
			}
		case r, ok := <-in:
			if !ok || r.err != nil {
				failed = sctx.Err() == nil
				return
			}
			evs := []history.EventState{eventState(r.ev)}
		more:
			for len(evs) < subReadBatch {
				select {
				case r, ok := <-in:
					if !ok || r.err != nil {
						break more
					}
					evs = append(evs, eventState(r.ev))
				default:
					break more
				}
			}
			c.d.env.Rec.Add(history.Op{Process: c.proc.Name, Type: history.OK, F: SubRead, Node: n.ID,
				Value: &history.Value{Subscription: c.spec.Name, Session: session, Events: evs}})
			if c.rnd.Float64() < c.d.drops() {
				c.d.env.Rec.Add(history.Op{Process: c.proc.Name, Type: history.OK, F: SubDrop, Node: n.ID,
					Value: &history.Value{Subscription: c.spec.Name, Session: session, Events: evs}})
				sleepCtx(ctx, time.Duration(50+c.rnd.IntN(250))*time.Millisecond)
				return
			}
			for _, e := range evs {
				if e.Cursor > c.processed {
					c.processed = e.Cursor
					c.pending = append(c.pending, e)
				}
			}
			if len(c.pending) >= subAckEvery {
				c.ack(sctx)
			}
		}
	}
}

func eventState(e *cronoqv1.Event) history.EventState {
	return history.EventState{Cursor: e.GetCursor(), ID: e.GetTaskId(), Pool: e.GetPool(), Status: statusName(e.GetStatus()), Attempt: int(e.GetAttempt())}
}

// ack acknowledges the processed cursor through a random node; an ok
// answer covers every pending event.
func (c *consumer) ack(ctx context.Context) {
	c.lastAck = time.Now()
	n := c.node()
	v := &history.Value{Subscription: c.spec.Name, Cursor: c.processed, Events: append([]history.EventState(nil), c.pending...)}
	done := c.d.env.Rec.Invoke(c.proc.Name, SubAck, n.ID, v)
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := c.api(n).Ack(actx, connect.NewRequest(&cronoqv1.AckSubscriptionRequest{Name: c.spec.Name, Cursor: c.processed}))
	cancel()
	done(subOutcome(err), v, err)
	if err == nil {
		c.pending = nil
	}
}

// errNotCaughtUp: the catch-up ended with events still held.
var errNotCaughtUp = errors.New("events still held")

// CatchUp has every consumer, discarding nothing now, read its
// subscription until the subscription holds no event and everything the
// consumer processed is acknowledged, or ctx ends; each records how far
// it got (SubFinal). Call it once nothing changes in the pool any more.
func (d *Delivery) CatchUp(ctx context.Context) {
	d.SetDropRate(0)
	var wg sync.WaitGroup
	for _, c := range d.consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.catchUp(ctx)
		}()
	}
	wg.Wait()
}

func (c *consumer) catchUp(ctx context.Context) {
	done := c.d.env.Rec.Invoke(c.proc.Name, SubFinal, "", &history.Value{Subscription: c.spec.Name})
	var last *cronoqv1.Subscription
	for {
		if len(c.pending) == 0 {
			gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			resp, err := c.api(c.node()).Get(gctx, connect.NewRequest(&cronoqv1.GetSubscriptionRequest{Name: c.spec.Name}))
			cancel()
			if err == nil {
				last = resp.Msg.GetSubscription()
				if last.GetPending() == 0 {
					done(history.OK, &history.Value{Subscription: c.spec.Name, Cursor: last.GetAcked()}, nil)
					return
				}
			}
		}
		if ctx.Err() != nil {
			v := &history.Value{Subscription: c.spec.Name}
			err := fmt.Errorf("%w: %d processed events not acknowledged", errNotCaughtUp, len(c.pending))
			if last != nil {
				v.Cursor = last.GetAcked()
				err = fmt.Errorf("%w: %d held by the subscription, %d processed events not acknowledged", errNotCaughtUp, last.GetPending(), len(c.pending))
			}
			done(history.Info, v, err)
			return
		}
		c.stream(ctx, 2*time.Second)
	}
}
