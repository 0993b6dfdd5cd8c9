package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// fakeWorkers is the leader's side of the worker protocol, guarded by the
// cluster's mutex.
type fakeWorkers struct {
	window    time.Duration
	ackDelay  time.Duration // heartbeat acks are held this long
	queue     []string      // task ids to grant
	nextLease uint64
	leases    map[uint64]*fakeLease
	byTask    map[string]uint64

	streams    int
	hellos     []*cronoqv1.Hello
	polls      []int32
	heartbeats []fakeHeartbeat
	received   []fakeCompletion // every completion received, duplicates included
	accepted   map[uint64]*cronoqv1.Completion
	violations []string

	dropOnCompletion map[string]bool   // task id: drop the stream when its completion arrives
	refuseHeartbeat  map[string]string // task id: answer its heartbeats with this code

	cur *fakeStream // the current stream, nil when none
}

type fakeLease struct {
	task  string
	state string // running, done, aborted
}

type fakeHeartbeat struct {
	stream int
	leases []uint64
}

type fakeCompletion struct {
	stream int
	c      *cronoqv1.Completion
}

// fakeStream is one worker stream as the fake sees it.
type fakeStream struct {
	id       int
	credit   int
	inflight map[uint64]bool // heartbeats not yet acknowledged
	push     chan pushed
}

// pushed is a server message for the stream's pusher goroutine: sent after
// delay, with before run (under the cluster mutex) just before the send.
type pushed struct {
	msg    *cronoqv1.ServerMessage
	delay  time.Duration
	before func()
}

func (w *fakeWorkers) init() {
	w.window = 2 * time.Second
	w.leases = make(map[uint64]*fakeLease)
	w.byTask = make(map[string]uint64)
	w.accepted = make(map[uint64]*cronoqv1.Completion)
	w.dropOnCompletion = make(map[string]bool)
	w.refuseHeartbeat = make(map[string]string)
}

// enqueue makes the tasks grantable (they must exist) and grants what the
// current stream has credit for.
func (c *fakeCluster) enqueue(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wk.queue = append(c.wk.queue, ids...)
	c.grantLocked()
	c.notifyLocked()
}

func (c *fakeCluster) grantLocked() {
	w := &c.wk
	s := w.cur
	if s == nil {
		return
	}
	var grants []*cronoqv1.Grant
	for s.credit > 0 && len(w.queue) > 0 {
		id := w.queue[0]
		w.queue = w.queue[1:]
		s.credit--
		w.nextLease++
		t := c.tasks[id]
		t.Status = cronoqv1.Status_STATUS_RUNNING
		t.Attempt++
		t.Lease = w.nextLease
		w.leases[w.nextLease] = &fakeLease{task: id, state: "running"}
		w.byTask[id] = w.nextLease
		grants = append(grants, &cronoqv1.Grant{Task: cloneTask(t), Lease: w.nextLease, Attempt: t.GetAttempt()})
	}
	if len(grants) > 0 {
		s.push <- pushed{msg: &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Grants{Grants: &cronoqv1.Grants{Grants: grants}}}}
	}
}

func cloneTask(t *cronoqv1.Task) *cronoqv1.Task {
	return proto.Clone(t).(*cronoqv1.Task)
}

// abort revokes the lease of task id and tells the current stream.
func (c *fakeCluster) abort(id, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &c.wk
	lease := w.byTask[id]
	w.leases[lease].state = "aborted"
	c.tasks[id].Status = cronoqv1.Status_STATUS_CANCELLED
	if w.cur != nil {
		w.cur.push <- pushed{msg: &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Abort{Abort: &cronoqv1.Abort{Lease: lease, Reason: reason}}}}
	}
	c.notifyLocked()
}

type fakeWorkerSvc struct{ n *fakeNode }

func (s *fakeWorkerSvc) Connect(ctx context.Context, stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]) error {
	if err := s.n.leaderOnly(); err != nil {
		return err
	}
	c := s.n.c
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return apierr.Invalid("hello", "the first message must be a Hello")
	}

	c.mu.Lock()
	w := &c.wk
	w.streams++
	fs := &fakeStream{id: w.streams, inflight: make(map[uint64]bool), push: make(chan pushed, 1024)}
	w.cur = fs
	w.hellos = append(w.hellos, hello)
	window := w.window
	c.notifyLocked()
	c.mu.Unlock()

	// The pusher sends everything the server says on this stream, in order
	// except for delayed messages.
	stop := make(chan struct{})
	var pusher sync.WaitGroup
	pusher.Add(1)
	go func() {
		defer pusher.Done()
		c.pushLoop(ctx, stream, fs, stop)
	}()
	defer func() {
		c.mu.Lock()
		if w.cur == fs {
			w.cur = nil
		}
		c.notifyLocked()
		c.mu.Unlock()
		close(stop)
		pusher.Wait()
	}()
	fs.push <- pushed{msg: &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Welcome{Welcome: &cronoqv1.Welcome{
		Node: s.n.id, Epoch: 1, HeartbeatWindowMs: window.Milliseconds(),
	}}}}

	for {
		msg, err := stream.Receive()
		if err != nil {
			// Ends the stream with the read error (for instance a message
			// over the read limit).
			return err
		}
		if drop := c.handleWorkerMessage(fs, msg); drop {
			return connect.NewError(connect.CodeUnavailable, errors.New("stream dropped by the fake"))
		}
	}
}

func (c *fakeCluster) pushLoop(ctx context.Context, stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage], fs *fakeStream, stop <-chan struct{}) {
	type due struct {
		at time.Time
		p  pushed
	}
	var pending []due
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	send := func(p pushed) bool {
		if p.before != nil {
			c.mu.Lock()
			p.before()
			c.notifyLocked()
			c.mu.Unlock()
		}
		return stream.Send(p.msg) == nil
	}
	for {
		select {
		case p := <-fs.push:
			if p.delay <= 0 {
				if !send(p) {
					return
				}
				continue
			}
			pending = append(pending, due{at: time.Now().Add(p.delay), p: p})
			timer.Reset(time.Until(pending[0].at))
		case <-timer.C:
			for len(pending) > 0 && !time.Now().Before(pending[0].at) {
				if !send(pending[0].p) {
					return
				}
				pending = pending[1:]
			}
			if len(pending) > 0 {
				timer.Reset(time.Until(pending[0].at))
			}
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// handleWorkerMessage applies one worker message; drop asks to end the
// stream with an error before anything of the message is processed.
func (c *fakeCluster) handleWorkerMessage(fs *fakeStream, msg *cronoqv1.WorkerMessage) (drop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.notifyLocked()
	w := &c.wk
	switch m := msg.GetMsg().(type) {
	case *cronoqv1.WorkerMessage_Hello:
		w.violations = append(w.violations, fmt.Sprintf("stream %d: second hello", fs.id))
	case *cronoqv1.WorkerMessage_Poll:
		w.polls = append(w.polls, m.Poll.GetSlots())
		fs.credit += int(m.Poll.GetSlots())
		c.grantLocked()
	case *cronoqv1.WorkerMessage_Heartbeat:
		leases := m.Heartbeat.GetLeases()
		w.heartbeats = append(w.heartbeats, fakeHeartbeat{stream: fs.id, leases: leases})
		ack := &cronoqv1.HeartbeatAck{}
		for _, id := range leases {
			if fs.inflight[id] {
				w.violations = append(w.violations, fmt.Sprintf("stream %d: heartbeat for lease %d while one is in flight", fs.id, id))
			}
			fs.inflight[id] = true
			res := &cronoqv1.LeaseResult{Lease: id}
			l := w.leases[id]
			switch {
			case l == nil || l.state != "running":
				res.Code, res.Error = apierr.KindStaleLease, "lease is not current"
			case w.refuseHeartbeat[l.task] != "":
				res.Code, res.Error = w.refuseHeartbeat[l.task], "refused by the fake"
			}
			ack.Results = append(ack.Results, res)
		}
		fs.push <- pushed{
			msg:   &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_HeartbeatAck{HeartbeatAck: ack}},
			delay: w.ackDelay,
			before: func() {
				for _, id := range leases {
					delete(fs.inflight, id)
				}
			},
		}
	case *cronoqv1.WorkerMessage_Complete:
		for _, comp := range m.Complete.GetCompletions() {
			if l := w.leases[comp.GetLease()]; l != nil && w.dropOnCompletion[l.task] {
				delete(w.dropOnCompletion, l.task)
				w.received = append(w.received, fakeCompletion{stream: fs.id, c: comp})
				return true
			}
		}
		ack := &cronoqv1.CompleteAck{}
		for _, comp := range m.Complete.GetCompletions() {
			w.received = append(w.received, fakeCompletion{stream: fs.id, c: comp})
			res := &cronoqv1.LeaseResult{Lease: comp.GetLease()}
			l := w.leases[comp.GetLease()]
			if l == nil || l.state != "running" {
				res.Code, res.Error = apierr.KindStaleLease, "lease is not current"
			} else {
				l.state = "done"
				w.accepted[comp.GetLease()] = comp
				t := c.tasks[l.task]
				switch comp.GetOutcome() {
				case cronoqv1.OutcomeKind_OUTCOME_SUCCESS:
					t.Status = cronoqv1.Status_STATUS_SUCCEEDED
				case cronoqv1.OutcomeKind_OUTCOME_PERMANENT:
					t.Status = cronoqv1.Status_STATUS_FAILED
				default:
					t.Status = cronoqv1.Status_STATUS_RETRYING
				}
				t.Output, t.Error = comp.GetOutput(), comp.GetMessage()
			}
			ack.Results = append(ack.Results, res)
		}
		fs.push <- pushed{msg: &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_CompleteAck{CompleteAck: ack}}}
	}
	return false
}

// acceptedFor returns the accepted completion of task id, nil when none.
func (c *fakeCluster) acceptedFor(id string) *cronoqv1.Completion {
	lease, ok := c.wk.byTask[id]
	if !ok {
		return nil
	}
	return c.wk.accepted[lease]
}
