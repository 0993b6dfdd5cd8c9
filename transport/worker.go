package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/acl"
	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

const (
	// maxSlots bounds the capacity one stream may offer.
	maxSlots = 1 << 20
	// maxOutbox bounds the messages waiting to be sent on one stream; a
	// worker that stops reading has its stream ended.
	maxOutbox = 1 << 16
	// grantDependencyOutputs bounds the outputs of dependencies that one
	// Grants message carries, for all its grants together (their total, in
	// bytes, 4 MiB): a task may depend on many others, each with an output
	// up to the engine's limit. Taken in grant order and each task's
	// dependency order, an output that does not fit in what is left is left
	// out and marked so; the worker reads it with TaskService.Get.
	grantDependencyOutputs = 4 << 20
)

var (
	errOutboxFull = errors.New("worker stream: too many unsent messages (the worker does not read)")
	errSendFailed = errors.New("worker stream: send failed")
)

type workerService struct{ s *Server }

// Connect serves one worker stream: Hello, then any number of Poll,
// Heartbeat and Complete messages; the node answers with Welcome, Grants,
// acks and Aborts. The leader serves it; any other node relays it to the
// leader (see relayWorker). Leases are not revoked when the stream ends:
// the worker may reconnect and heartbeat them within the window.
func (w *workerService) Connect(ctx context.Context, stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]) error {
	s := w.s
	hold := time.NewTimer(s.cfg.HoldTimeout)
	defer hold.Stop()
	t, err := s.leaderTarget(ctx, stream.RequestHeader(), hold.C, nil)
	if err != nil {
		return err
	}
	if !t.local {
		return s.relayWorker(ctx, stream, hold.C, t)
	}
	return s.serveWorker(ctx, stream, nil)
}

// serveWorker serves a worker stream on this node, the leader, for its
// current term. first is the Hello when it was read already.
func (s *Server) serveWorker(ctx context.Context, stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage], first *cronoqv1.WorkerMessage) error {
	term, err := s.node.Leading()
	if err != nil {
		return s.apiError(err)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ws := &workerStream{
		s: s, term: term, stream: stream, reqCtx: ctx, ctx: sctx, cancel: cancel,
		first:     first,
		out:       newOutbox(),
		slotsWake: make(chan struct{}, 1),
	}
	return ws.run()
}

// workerStream is one connected worker, served for one term of this node's
// leadership: the stream ends with the term.
type workerStream struct {
	s      *Server
	term   cluster.Term
	stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]
	// reqCtx is the call's context: heartbeats and completions in progress
	// run under it, so that a worker closing its side still gets their
	// acks. ctx ends with the stream (its cause is the answer) and stops
	// the poller.
	reqCtx context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	first  *cronoqv1.WorkerMessage // the Hello, when read before

	worker string
	pool   string
	labels []fsm.KV

	out *outbox

	// Capacity offered by Poll messages and not yet handed to the poller.
	slotsMu   sync.Mutex
	slots     int
	slotsWake chan struct{}

	calls sync.WaitGroup // heartbeats and completions in progress

	// For the workers list: slots offered and not granted, and when the
	// worker last sent a message (unix ns).
	free     atomic.Int64
	lastSeen atomic.Int64
}

func (ws *workerStream) run() error {
	s := ws.s
	var helpers sync.WaitGroup
	defer helpers.Wait()
	// The watchdog ends the stream when the term ends (this node no longer
	// leads) or the server shuts down, by interrupting the pending Receive.
	watchDone := make(chan struct{})
	defer close(watchDone)
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		select {
		case <-ws.term.Done:
			ws.cancel(s.apiError(cluster.ErrStopped))
		case <-s.baseCtx.Done():
			ws.cancel(apierr.ShuttingDown())
		case <-ws.ctx.Done():
		case <-watchDone:
			return
		}
		interrupt(ws.reqCtx)
	}()

	if err := ws.hello(); err != nil {
		ws.cancel(err)
		return ws.answer()
	}
	s.workers.add(ws)
	s.m.WorkerStreams(1)
	defer s.m.WorkerStreams(-1)
	defer s.workers.remove(ws)
	log := s.log.With("worker", ws.worker, "pool", ws.pool)
	log.Debug("worker connected")

	ws.out.push(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Welcome{Welcome: &cronoqv1.Welcome{
		Node: s.node.ID(), Epoch: ws.term.Epoch, HeartbeatWindow: durationToProto(s.cfg.HeartbeatWindow),
	}}})
	sendDone := make(chan struct{})
	helpers.Add(2)
	go func() {
		defer helpers.Done()
		defer close(sendDone)
		ws.send()
	}()
	go func() {
		defer helpers.Done()
		ws.poll()
	}()

	ws.cancel(ws.read())
	// The poller stops; let the calls in progress answer, then flush what
	// is left to send.
	ws.calls.Wait()
	ws.out.close()
	<-sendDone
	err := ws.answer()
	log.Debug("worker disconnected", "cause", context.Cause(ws.ctx))
	return err
}

// hello reads and checks the first message.
func (ws *workerStream) hello() error {
	first := ws.first
	if first == nil {
		var err error
		if first, err = ws.stream.Receive(); err != nil {
			if cause := context.Cause(ws.ctx); cause != nil {
				return cause
			}
			return err
		}
	}
	hello := first.GetHello()
	switch {
	case hello == nil:
		return apierr.Invalid("hello", "the first message must be a Hello")
	case hello.GetWorker() == "":
		return apierr.Invalid("worker", "must not be empty")
	case hello.GetPool() == "":
		return apierr.Invalid("pool", "must not be empty")
	}
	if err := needPool(ws.reqCtx, acl.Work, hello.GetPool()); err != nil {
		return err
	}
	labels, err := kvsFromProto("labels", hello.GetLabels())
	if err != nil {
		return err
	}
	ws.worker, ws.pool, ws.labels = hello.GetWorker(), hello.GetPool(), labels
	return nil
}

// answer is what the handler returns, from why the stream ended.
func (ws *workerStream) answer() error {
	cause := context.Cause(ws.ctx)
	switch {
	case cause == nil, errors.Is(cause, io.EOF), errors.Is(cause, errSendFailed):
		return nil
	case ws.reqCtx.Err() != nil && !ws.s.stopping():
		// The worker went away.
		return nil
	}
	var ce *connect.Error
	if errors.As(cause, &ce) {
		return cause
	}
	return ws.s.apiError(cause)
}

// read handles the worker's messages until the stream ends or is
// interrupted; it returns why reading stopped (io.EOF when the worker
// closed its side).
func (ws *workerStream) read() error {
	for {
		msg, err := ws.stream.Receive()
		if err != nil {
			if cause := context.Cause(ws.ctx); cause != nil {
				return cause
			}
			return err
		}
		ws.lastSeen.Store(time.Now().UnixNano())
		switch m := msg.GetMsg().(type) {
		case *cronoqv1.WorkerMessage_Hello:
			return apierr.Invalid("hello", "a stream takes one Hello")
		case *cronoqv1.WorkerMessage_Poll:
			n := int(m.Poll.GetSlots())
			if n <= 0 || n > maxSlots {
				return apierr.Invalid("slots", fmt.Sprintf("must be in [1, %d]", maxSlots))
			}
			ws.offer(n)
		case *cronoqv1.WorkerMessage_Heartbeat:
			ws.call(func() { ws.heartbeat(m.Heartbeat.GetLeases()) })
		case *cronoqv1.WorkerMessage_Complete:
			ws.call(func() { ws.complete(m.Complete.GetCompletions()) })
		default:
			return apierr.Invalid("msg", "unknown message")
		}
	}
}

// call runs fn on its own goroutine, tracked by calls.
func (ws *workerStream) call(fn func()) {
	ws.calls.Add(1)
	go func() {
		defer ws.calls.Done()
		fn()
	}()
}

// emit queues msg; a stream whose worker stopped reading is ended.
func (ws *workerStream) emit(msg *cronoqv1.ServerMessage) {
	if !ws.out.push(msg) && !ws.out.isClosed() {
		ws.cancel(errOutboxFull)
	}
}

// send writes the queued messages until the outbox is closed and empty.
func (ws *workerStream) send() {
	for {
		msgs, ok := ws.out.take()
		for _, msg := range msgs {
			if err := ws.stream.Send(msg); err != nil {
				ws.cancel(fmt.Errorf("%w: %w", errSendFailed, err))
				ws.out.close()
				return
			}
		}
		if !ok {
			return
		}
	}
}

// offer adds capacity for the poller. It never blocks, so heartbeats
// behind a Poll message are read at once.
func (ws *workerStream) offer(n int) {
	ws.free.Add(int64(n))
	ws.slotsMu.Lock()
	ws.slots = min(ws.slots+n, maxSlots)
	ws.slotsMu.Unlock()
	select {
	case ws.slotsWake <- struct{}{}:
	default:
	}
}

// takeSlots returns the capacity offered since the last call.
func (ws *workerStream) takeSlots() int {
	ws.slotsMu.Lock()
	defer ws.slotsMu.Unlock()
	n := ws.slots
	ws.slots = 0
	return n
}

// poll offers the worker's free slots to the engine, one long poll at a
// time, and sends what it grants. Slots offered while a poll is open are
// added to the next one.
func (ws *workerStream) poll() {
	slots := 0
	for {
		slots += ws.takeSlots()
		if slots == 0 {
			select {
			case <-ws.slotsWake:
				continue
			case <-ws.ctx.Done():
				return
			}
		}
		slots = min(slots, maxSlots)
		ctx := ws.ctx
		var tr *traced
		if ws.s.tr != nil {
			tr = ws.s.tr.newTraced(1)
			ctx = tr.observe(ctx)
		}
		grants, err := ws.s.node.Poll(ctx, cluster.Offer{Worker: ws.worker, Pool: ws.pool, Labels: ws.labels, Slots: slots})
		if err != nil {
			if ws.ctx.Err() == nil {
				ws.cancel(err)
			}
			return
		}
		slots -= len(grants)
		ws.free.Add(-int64(len(grants)))
		if len(grants) == 0 {
			continue
		}
		state, _ := ws.s.node.StaleRead()
		out := &cronoqv1.Grants{Grants: make([]*cronoqv1.Grant, len(grants))}
		budget := ws.s.grantDepOutputs
		for i, g := range grants {
			grant := &cronoqv1.Grant{Lease: g.Lease, Attempt: g.Attempt}
			// The grant is durable, so applied here (the leader) already,
			// and so are the ends of the task's dependencies before it.
			if t, ok := state.Get(g.ID); ok {
				grant.Task = taskToProto(t)
				grant.Dependencies = dependencies(state, t.DependsOn(), &budget)
				if tr != nil {
					tr.startDispatch(t, grant, ws.worker)
				}
			} else {
				grant.Task = &cronoqv1.Task{Id: g.ID}
			}
			out.Grants[i] = grant
		}
		ws.emit(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Grants{Grants: out}})
		if tr != nil {
			tr.endSpans()
		}
	}
}

// dependencies is what the dependencies ids of a granted task ended with,
// in their order, read from state: each output inline when it fits in what
// is left of *budget bytes (which it then spends), else left out and marked
// so. A dependency that no longer exists (purges wait for the dependents
// that have not ended, so it should not happen) is reported without a
// status.
func dependencies(state fsm.Reader, ids []string, budget *int) []*cronoqv1.DependencyResult {
	if len(ids) == 0 {
		return nil
	}
	out := make([]*cronoqv1.DependencyResult, len(ids))
	for i, id := range ids {
		d, ok := state.Get(id)
		if !ok {
			out[i] = &cronoqv1.DependencyResult{Id: id, Error: fmt.Sprintf("dependency %s no longer exists (purged)", id)}
			continue
		}
		fits := len(d.Output) <= *budget
		if fits {
			*budget -= len(d.Output)
		}
		out[i] = dependencyToProto(d, !fits)
	}
	return out
}

func (ws *workerStream) heartbeat(leases []uint64) {
	ack := &cronoqv1.HeartbeatAck{Results: make([]*cronoqv1.LeaseResult, len(leases))}
	errs, err := ws.s.node.Heartbeat(ws.reqCtx, leases)
	for i, lease := range leases {
		res := &cronoqv1.LeaseResult{Lease: lease}
		e := err
		if e == nil && i < len(errs) {
			e = errs[i]
		}
		res.Code, res.Error = ws.s.itemError(e)
		ack.Results[i] = res
	}
	ws.emit(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_HeartbeatAck{HeartbeatAck: ack}})
}

func (ws *workerStream) complete(comps []*cronoqv1.Completion) {
	ack := &cronoqv1.CompleteAck{Results: make([]*cronoqv1.LeaseResult, len(comps))}
	valid := make([]cluster.Completion, 0, len(comps))
	at := make([]*cronoqv1.LeaseResult, 0, len(comps))
	index := make([]int, 0, len(comps)) // valid[j] is comps[index[j]]
	for i, c := range comps {
		res := &cronoqv1.LeaseResult{Lease: c.GetLease()}
		ack.Results[i] = res
		out, err := outcomeFromProto(c)
		if err == nil {
			err = ws.spawnedAs(&out)
		}
		if err != nil {
			res.Code, res.Error = ws.s.itemError(err)
			continue
		}
		valid = append(valid, cluster.Completion{Lease: c.GetLease(), Outcome: out})
		at = append(at, res)
		index = append(index, i)
	}
	if len(valid) > 0 {
		ctx := ws.reqCtx
		var tr *traced
		if ws.s.tr != nil {
			tr = ws.s.tr.newTraced(len(valid))
			for i, c := range valid {
				tr.startCompletion(comps[index[i]], c.Outcome, i)
			}
			if len(tr.spans) == 0 {
				tr = nil // none of them is traced
			} else {
				ctx = tr.observe(ctx)
			}
		}
		errs := ws.s.node.Complete(ctx, valid)
		for i, err := range errs {
			at[i].Code, at[i].Error = ws.s.itemError(err)
		}
		if tr != nil {
			tr.endCompletions(errs)
		}
	}
	ws.emit(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_CompleteAck{CompleteAck: ack}})
}

// spawnedAs checks that the worker's token may submit the children and
// the continuation a completion spawns, and records it as their
// principal: the worker submits them.
func (ws *workerStream) spawnedAs(out *cluster.Outcome) error {
	if len(out.Children) == 0 && out.Then == nil {
		return nil
	}
	who := principal(ws.reqCtx)
	steps := make([]*cluster.StepSpec, 0, len(out.Children)+1)
	for i := range out.Children {
		steps = append(steps, &out.Children[i])
	}
	if out.Then != nil {
		steps = append(steps, out.Then)
	}
	for _, st := range steps {
		if err := needPool(ws.reqCtx, acl.Submit, st.Pool); err != nil {
			return err
		}
		st.Principal = who
	}
	return nil
}

// outbox is the queue of messages for one stream. push never blocks, so
// that aborts can be queued from the engine's goroutine.
type outbox struct {
	mu     sync.Mutex
	msgs   []*cronoqv1.ServerMessage
	closed bool
	wake   chan struct{}
}

func newOutbox() *outbox { return &outbox{wake: make(chan struct{}, 1)} }

// push queues msg; false when the outbox is closed or full.
func (o *outbox) push(msg *cronoqv1.ServerMessage) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || len(o.msgs) >= maxOutbox {
		return false
	}
	o.msgs = append(o.msgs, msg)
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return true
}

// close refuses further pushes; what is queued is still taken.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

func (o *outbox) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// take waits for queued messages and returns them all; ok is false once
// the outbox is closed and drained (msgs holds the last ones).
func (o *outbox) take() (msgs []*cronoqv1.ServerMessage, ok bool) {
	for {
		o.mu.Lock()
		msgs, o.msgs = o.msgs, nil
		closed := o.closed
		o.mu.Unlock()
		if len(msgs) > 0 || closed {
			return msgs, !closed
		}
		<-o.wake
	}
}
