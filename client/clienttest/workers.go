package clienttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

// maxSlots bounds the capacity one stream may offer, as on a real node.
const maxSlots = 1 << 20

// WorkerLog is what the cluster saw of the worker protocol, in order.
type WorkerLog struct {
	// Streams counts the worker streams opened (a Hello received).
	Streams int
	// Hellos, Polls and Heartbeats are the messages received.
	Hellos     []*cronoqv1.Hello
	Polls      []int32
	Heartbeats []Heartbeat
	// Grants are the leases granted.
	Grants []*cronoqv1.Grant
	// Received is every completion received, duplicates included; Accepted
	// the ones taken (their lease was current).
	Received []Completion
	Accepted []Completion
	// Violations are breaches of the protocol by a worker: a second Hello
	// on a stream, a heartbeat for a lease whose previous heartbeat is not
	// acknowledged yet.
	Violations []string
}

// Heartbeat is a heartbeat received on stream Stream (numbered from 1 in
// the order streams opened).
type Heartbeat struct {
	Stream int
	Leases []uint64
}

// Completion is a completion received on stream Stream, for task TaskID
// ("" when its lease was unknown).
type Completion struct {
	Stream int
	TaskID string
	*cronoqv1.Completion
}

// workerStream is one worker's stream as the cluster sees it. Its fields
// are guarded by the cluster's lock.
type workerStream struct {
	id       int
	c        *Cluster
	worker   string // the id its Hello gave
	node     string // the node it is connected to
	pool     string
	labels   map[string]string
	lastSeen time.Time       // when its last message arrived (the cluster's clock)
	credit   int             // slots offered and not granted yet
	inflight map[uint64]bool // heartbeats not acknowledged yet
	out      []outMsg
	wake     chan struct{}
	ended    bool
	cause    error
	ctx      context.Context // the call's, to interrupt it
}

// outMsg is a message for the stream's sender: sent at (real time) at,
// with before run under the cluster's lock just before.
type outMsg struct {
	msg    *cronoqv1.ServerMessage
	at     time.Time
	before func()
}

func (s *workerStream) pushLocked(msg *cronoqv1.ServerMessage, delay time.Duration, before func()) {
	if s.ended {
		return
	}
	m := outMsg{msg: msg, before: before}
	if delay > 0 {
		m.at = time.Now().Add(delay)
	}
	s.out = append(s.out, m)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// endLocked ends the stream with err: the handler's pending Receive is
// interrupted and the call answers err.
func (s *workerStream) endLocked(err error) {
	if s.ended {
		return
	}
	s.ended, s.cause = true, err
	interrupt(s.ctx)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

type workerService struct{ n *Node }

// Connect serves one worker stream on the leader: a Welcome for the Hello,
// Grants of queued tasks of the stream's pool for the slots it polls, acks
// for its heartbeats and completions, and Aborts for attempts revoked.
func (w *workerService) Connect(ctx context.Context, stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]) error {
	c := w.n.c
	if _, err := w.n.begin(ctx, cronoqv1connect.WorkerServiceConnectProcedure, nil, leaderStream); err != nil {
		return err
	}
	c.settleLocked()
	c.mu.Unlock()

	first, err := stream.Receive()
	if err != nil {
		return nil
	}
	hello := first.GetHello()
	switch {
	case hello == nil:
		return apierr.Invalid("hello", "the first message must be a Hello")
	case hello.GetWorker() == "":
		return apierr.Invalid("worker", "must not be empty")
	}
	labels, err := checkKVs("labels", hello.GetLabels())
	if err == nil {
		err = c.checkPool(hello.GetPool())
	}
	if err != nil {
		return apiError(err)
	}

	c.mu.Lock()
	if c.closed || c.leader < 0 || c.nodes[c.leader] != w.n {
		err := c.notLeaderLocked()
		if c.closed {
			err = apierr.ShuttingDown()
		}
		c.mu.Unlock()
		return err
	}
	c.wlog.Streams++
	s := &workerStream{
		id: c.wlog.Streams, c: c, worker: hello.GetWorker(), node: w.n.id, pool: hello.GetPool(),
		labels: map[string]string{}, lastSeen: c.now(),
		inflight: map[uint64]bool{}, wake: make(chan struct{}, 1), ctx: ctx,
	}
	for _, kv := range labels {
		s.labels[kv.GetKey()] = kv.GetValue()
	}
	c.wlog.Hellos = append(c.wlog.Hellos, proto.Clone(hello).(*cronoqv1.Hello))
	c.streams[s] = struct{}{}
	s.pushLocked(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Welcome{Welcome: &cronoqv1.Welcome{
		Node: w.n.id, Epoch: c.epoch, HeartbeatWindow: dur(c.cfg.window),
	}}}, 0, nil)
	c.notifyLocked()
	c.mu.Unlock()

	senderDone := make(chan struct{})
	stopSender := make(chan struct{})
	go func() {
		defer close(senderDone)
		s.send(ctx, stream, stopSender)
	}()
	defer func() {
		close(stopSender)
		<-senderDone
		c.mu.Lock()
		delete(c.streams, s)
		s.ended = true
		for _, t := range c.leases {
			if t.stream == s {
				t.stream = nil
			}
		}
		c.notifyLocked()
		c.mu.Unlock()
	}()

	for {
		msg, err := stream.Receive()
		c.mu.Lock()
		if s.ended {
			cause := s.cause
			c.mu.Unlock()
			return cause
		}
		if err != nil {
			c.mu.Unlock()
			// The worker went away or closed its side; a message over the
			// read limit ends the stream with that error.
			if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled {
				return nil
			}
			return err
		}
		s.lastSeen = c.now()
		err = c.handleLocked(s, msg)
		if err != nil {
			s.ended, s.cause = true, err
		}
		c.settleLocked()
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// send writes the stream's messages, each when it is due, until stop is
// closed or the call ends.
func (s *workerStream) send(ctx context.Context, stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage], stop <-chan struct{}) {
	c := s.c
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		now := time.Now()
		var ready []*cronoqv1.ServerMessage
		var next time.Time
		keep := s.out[:0]
		ran := false
		for _, m := range s.out {
			if m.at.After(now) {
				keep = append(keep, m)
				if next.IsZero() || m.at.Before(next) {
					next = m.at
				}
				continue
			}
			if m.before != nil {
				m.before()
				ran = true
			}
			ready = append(ready, m.msg)
		}
		clear(s.out[len(keep):])
		s.out = keep
		if ran {
			c.notifyLocked()
		}
		c.mu.Unlock()
		for _, msg := range ready {
			if err := stream.Send(msg); err != nil {
				return
			}
		}
		var tc <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			tc = timer.C
		}
		select {
		case <-s.wake:
		case <-tc:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// handleLocked applies one message of a worker; an error ends the stream
// with it.
func (c *Cluster) handleLocked(s *workerStream, msg *cronoqv1.WorkerMessage) error {
	switch m := msg.GetMsg().(type) {
	case *cronoqv1.WorkerMessage_Hello:
		c.wlog.Violations = append(c.wlog.Violations, fmt.Sprintf("stream %d: second hello", s.id))
		return apierr.Invalid("hello", "a stream takes one Hello")
	case *cronoqv1.WorkerMessage_Poll:
		n := m.Poll.GetSlots()
		c.wlog.Polls = append(c.wlog.Polls, n)
		if n <= 0 || n > maxSlots {
			return apierr.Invalid("slots", fmt.Sprintf("must be in [1, %d]", maxSlots))
		}
		s.credit = min(s.credit+int(n), maxSlots)
	case *cronoqv1.WorkerMessage_Heartbeat:
		c.heartbeatLocked(s, m.Heartbeat.GetLeases())
	case *cronoqv1.WorkerMessage_Complete:
		comps := m.Complete.GetCompletions()
		for _, comp := range comps {
			if t := c.leases[comp.GetLease()]; t != nil && c.dropOnCompletion[t.p.GetId()] {
				delete(c.dropOnCompletion, t.p.GetId())
				c.wlog.Received = append(c.wlog.Received, c.completionLocked(s, comp))
				return errDropped
			}
		}
		ack := &cronoqv1.CompleteAck{}
		for _, comp := range comps {
			rec := c.completionLocked(s, comp)
			c.wlog.Received = append(c.wlog.Received, rec)
			res := &cronoqv1.LeaseResult{Lease: comp.GetLease()}
			if err := c.completeLocked(comp); err != nil {
				res.Code, res.Error = itemError(err)
			} else {
				c.wlog.Accepted = append(c.wlog.Accepted, rec)
				c.accepted[rec.TaskID] = rec.Completion
			}
			ack.Results = append(ack.Results, res)
		}
		s.pushLocked(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_CompleteAck{CompleteAck: ack}}, 0, nil)
	default:
		return apierr.Invalid("msg", "unknown message")
	}
	return nil
}

// completionLocked records a completion received on s.
func (c *Cluster) completionLocked(s *workerStream, comp *cronoqv1.Completion) Completion {
	rec := Completion{Stream: s.id, Completion: proto.Clone(comp).(*cronoqv1.Completion)}
	if t := c.leases[comp.GetLease()]; t != nil {
		rec.TaskID = t.p.GetId()
	}
	return rec
}

// heartbeatLocked extends the leases of a heartbeat and acknowledges it
// (after the scripted delay).
func (c *Cluster) heartbeatLocked(s *workerStream, leases []uint64) {
	c.wlog.Heartbeats = append(c.wlog.Heartbeats, Heartbeat{Stream: s.id, Leases: slices.Clone(leases)})
	now := c.now()
	ack := &cronoqv1.HeartbeatAck{}
	for _, lease := range leases {
		if s.inflight[lease] {
			c.wlog.Violations = append(c.wlog.Violations,
				fmt.Sprintf("stream %d: heartbeat for lease %d while one is in flight", s.id, lease))
		}
		s.inflight[lease] = true
		res := &cronoqv1.LeaseResult{Lease: lease}
		t := c.leases[lease]
		switch {
		case t == nil:
			res.Code, res.Error = apierr.KindStaleLease, fmt.Sprintf("lease %d is not current", lease)
		case c.refuseHB[t.p.GetId()] != "":
			res.Code, res.Error = c.refuseHB[t.p.GetId()], "heartbeat refused by the fake cluster"
		default:
			if d := now.Add(c.cfg.window); d.After(t.hbDeadline) {
				t.hbDeadline = d
			}
			t.stream = s
		}
		ack.Results = append(ack.Results, res)
	}
	leases = slices.Clone(leases)
	s.pushLocked(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_HeartbeatAck{HeartbeatAck: ack}}, c.ackDelay, func() {
		for _, id := range leases {
			delete(s.inflight, id)
		}
	})
}

// dispatchLocked grants queued tasks to the streams with free slots, oldest
// stream first, in priority then ready order, to workers offering the
// tasks' labels. A paused pool's tasks are not granted.
func (c *Cluster) dispatchLocked() {
	if c.leader < 0 || len(c.streams) == 0 {
		return
	}
	streams := slices.Collect(maps.Keys(c.streams))
	slices.SortFunc(streams, func(a, b *workerStream) int { return a.id - b.id })
	for _, s := range streams {
		rq := c.ready[s.pool]
		if s.ended || s.credit == 0 || rq == nil || c.pausedLocked(s.pool) {
			continue
		}
		var grants []*cronoqv1.Grant
		for r := range rq.q {
			for i := 0; i < len(rq.q[r]) && s.credit > 0; {
				t := rq.q[r][i]
				if !labelsSubset(t.p.GetTemplate().GetLabels(), s.labels) {
					i++
					continue
				}
				rq.q[r] = slices.Delete(rq.q[r], i, i+1)
				t.inQueue = false
				s.credit--
				grants = append(grants, c.startLocked(t, s))
			}
		}
		if len(grants) > 0 {
			s.pushLocked(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Grants{Grants: &cronoqv1.Grants{Grants: grants}}}, 0, nil)
		}
	}
}

// labelsSubset reports whether a worker offering offered can run a task
// with labels need.
func labelsSubset(need []*cronoqv1.KV, offered map[string]string) bool {
	for _, kv := range need {
		if v, ok := offered[kv.GetKey()]; !ok || v != kv.GetValue() {
			return false
		}
	}
	return true
}
