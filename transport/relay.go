package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
)

// The streams that need the leader (the worker stream, backups) are taken
// by any node: a node that does not lead relays them to the leader over its
// forwarding client, with the caller's token, as it forwards unary calls.
// A relayed worker stream lasts as long as the leader it reaches: when this
// node sees the leader change, or loses the connection to it, it ends the
// worker's stream with UNAVAILABLE, and the worker connects again (to this
// node or any other).

// relayLeaderCheck is how often a relayed worker stream checks that its
// leader still leads.
const relayLeaderCheck = 100 * time.Millisecond

// target is where a call that needs the leader goes: this node, or the
// leader at addr.
type target struct {
	local    bool
	id, addr string
}

// leaderTarget waits (until hold fires) until this node serves as leader
// or knows another leader to relay to. A call another node forwarded is
// never forwarded again (one hop at most): it answers last (why the
// previous try failed), or not_leader naming the leader.
func (s *Server) leaderTarget(ctx context.Context, h http.Header, hold <-chan time.Time, last error) (target, error) {
	for {
		if s.stopping() {
			return target{}, apierr.ShuttingDown()
		}
		_, err := s.node.Leading()
		if err == nil {
			return target{local: true}, nil
		}
		if errors.Is(err, cluster.ErrDiskFull) {
			// This node leads with a full disk: no other node serves until
			// it hands leadership over or space is freed.
			return target{}, s.apiError(err)
		}
		id, addr := s.node.Leader()
		switch {
		case forwarded(h):
			if last != nil {
				return target{}, last
			}
			return target{}, s.leaderHint(id, addr)
		case id != "" && id != s.node.ID() && addr != "":
			return target{id: id, addr: addr}, nil
		}
		// No leader known, this node leads but does not serve yet, or the
		// leader's address is not known yet.
		last = s.leaderHint(id, addr)
		if !pause(ctx, hold, s.baseCtx.Done()) {
			if s.stopping() {
				return target{}, apierr.ShuttingDown()
			}
			if ctx.Err() != nil {
				return target{}, s.apiError(ctx.Err())
			}
			return target{}, last
		}
	}
}

// forwardHeaders marks a request this node relays and passes on the
// caller's token (the leader checks the call again).
func (s *Server) forwardHeaders(out, in http.Header) {
	out.Set(HeaderForwarded, s.node.ID())
	if tok := tokenSecret(in); tok != "" {
		out.Set(HeaderToken, tok)
	}
}

// workerDown is a worker's stream as this node's handler has it.
type workerDown = connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]

// relayEnd is why this node ended a relayed stream: the leader changed, or
// the server stops. It is the answer to the worker.
type relayEnd struct{ err error }

func (e relayEnd) Error() string { return e.err.Error() }
func (e relayEnd) Unwrap() error { return e.err }

// workerEnd is the worker's side failing or going away.
type workerEnd struct{ err error }

func (e workerEnd) Error() string { return fmt.Sprintf("worker side of the stream: %v", e.err) }
func (e workerEnd) Unwrap() error { return e.err }

// relayWorker serves a worker stream on a node that does not lead (t, the
// leader to relay to, came from leaderTarget): it reads the worker's Hello
// and relays the stream to the leader. Until the leader has welcomed the
// worker nothing but the Hello reached it, so a leader that does not take
// the stream (it no longer leads, or cannot be reached) is looked for
// again, until hold fires; if this node comes to lead meanwhile, it serves
// the stream itself.
func (s *Server) relayWorker(ctx context.Context, down *workerDown, hold <-chan time.Time, t target) error {
	first, err := down.Receive()
	if err != nil {
		if errors.Is(err, io.EOF) || ctx.Err() != nil {
			return nil // the worker went away before its Hello
		}
		return err
	}
	procedure := down.Spec().Procedure
	for {
		if t.local {
			return s.serveWorker(ctx, down, first)
		}
		s.m.Forwarded(procedure)
		relayed, err := s.relayTo(ctx, down, t, first)
		if relayed || ctx.Err() != nil {
			return err
		}
		final, again := forwardOutcome(readCall, t.id, t.addr, err)
		var re relayEnd
		if errors.As(err, &re) {
			final, again = nil, re.err
		}
		if final != nil {
			return final
		}
		s.log.Debug("relayed worker stream not taken, routing again", "leader", t.id, "error", err)
		if !pause(ctx, hold, s.baseCtx.Done()) {
			if s.stopping() {
				return apierr.ShuttingDown()
			}
			if ctx.Err() != nil {
				return nil
			}
			return again
		}
		if t, err = s.leaderTarget(ctx, down.RequestHeader(), hold, again); err != nil {
			return err
		}
	}
}

// relayTo relays the worker stream down, whose Hello is first, to the
// leader t. relayed reports whether the leader welcomed the worker (its
// Welcome was relayed): then err is the stream's answer. Otherwise nothing
// reached the worker and err is why the leader did not take the stream.
func (s *Server) relayTo(ctx context.Context, down *workerDown, t target, first *cronoqv1.WorkerMessage) (relayed bool, err error) {
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	up := s.fwd.endpoint(t.addr).workers.Connect(uctx)
	s.forwardHeaders(up.RequestHeader(), down.RequestHeader())
	var helpers sync.WaitGroup
	defer func() {
		cancel(nil)
		helpers.Wait()
		_ = up.CloseRequest()
		_ = up.CloseResponse()
	}()

	// The watchdog ends the relay when the leader changes or the server
	// stops. Once the relay ends, for any reason, it closes both halves of
	// the leader's stream: a context that ends after the response began
	// does not reset the stream (net/http's HTTP/2 transport waits on the
	// open request body), and the leader would keep serving, and granting
	// tasks to, a worker that is gone.
	watchDone := make(chan struct{})
	defer close(watchDone)
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		s.watchRelay(t, watchDone, uctx.Done(), func(err error) { cancel(relayEnd{err}) })
		_ = up.CloseRequest()
		_ = up.CloseResponse()
	}()

	// upErr is err from the leader's side, or why this node cut it.
	upErr := func(err error) error {
		if cause := context.Cause(uctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
	if err := up.Send(first); err != nil && !errors.Is(err, io.EOF) {
		return false, upErr(err) // with io.EOF, Receive has the leader's answer
	}
	welcome, err := up.Receive()
	if err != nil {
		return false, upErr(err)
	}
	// Name the leader, as a forwarded answer does, so that a client may
	// connect there next time.
	down.ResponseHeader().Set(apierr.HeaderLeader, t.id)
	down.ResponseHeader().Set(apierr.HeaderLeaderAddr, t.addr)
	if err := down.Send(welcome); err != nil {
		return true, nil // the worker went away
	}
	s.m.WorkerStreamsRelayed(1)
	defer s.m.WorkerStreamsRelayed(-1)

	// The worker's messages go to the leader until the worker closes its
	// side (the leader then answers what is in flight and ends the
	// stream), or either side fails.
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		for {
			msg, err := down.Receive()
			if err != nil {
				if errors.Is(err, io.EOF) {
					_ = up.CloseRequest()
					return
				}
				cancel(workerEnd{err})
				return
			}
			if err := up.Send(msg); err != nil {
				return // the leader ended the stream: Receive has why
			}
		}
	}()
	// The leader's messages go to the worker.
	var end error
	for {
		msg, err := up.Receive()
		if err != nil {
			end = upErr(err)
			break
		}
		if err := down.Send(msg); err != nil {
			end = workerEnd{err}
			break
		}
	}
	cancel(end)
	interrupt(ctx) // the worker's side: a Receive pending returns
	helpers.Wait()

	var re relayEnd
	var we workerEnd
	var ce *connect.Error
	switch {
	case errors.As(end, &re):
		return true, re.err
	case errors.As(end, &we):
		if errors.As(we.err, &ce) && ctx.Err() == nil && !connect.IsWireError(ce) {
			return true, we.err // the worker sent what could not be read
		}
		return true, nil // the worker went away
	case ctx.Err() != nil:
		return true, nil
	case errors.Is(end, io.EOF):
		return true, nil // the leader ended the stream cleanly
	case connect.IsWireError(end):
		return true, apierr.Relay(end)
	}
	return true, connect.NewError(connect.CodeUnavailable,
		fmt.Errorf("worker stream: lost the connection to the leader %s at %s: %w", t.id, t.addr, end))
}

// watchRelay calls end, once, when the leader is no longer t or the server
// stops, unless stop or done is closed first.
func (s *Server) watchRelay(t target, stop, done <-chan struct{}, end func(error)) {
	tick := time.NewTicker(relayLeaderCheck)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-done:
			return
		case <-s.baseCtx.Done():
			end(apierr.ShuttingDown())
			return
		case <-tick.C:
			if id, addr := s.node.Leader(); id != t.id {
				end(s.leaderHint(id, addr))
				return
			}
		}
	}
}
