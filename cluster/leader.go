package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/loophealth"
)

// transferRequest asks the leader loop to hand leadership to ID (any voter
// when empty).
type transferRequest struct {
	id   raft.ServerID
	addr raft.ServerAddress
	resp chan error
}

// monitorLeadership is the only reader of raft's LeaderCh. Each term of
// leadership runs leaderLoop under its own context; on loss the context is
// cancelled and the loop is waited for before anything else happens. A true
// after a true means leadership was lost and regained in between: the old
// term is torn down and a new one started.
func (n *Node) monitorLeadership() {
	defer n.leaderWG.Done()
	leaderCh := n.raft.LeaderCh()
	var (
		cancel context.CancelFunc
		done   chan struct{}
	)
	stop := func() {
		if cancel != nil {
			cancel()
			<-done
			cancel = nil
		}
	}
	start := func() {
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		done = make(chan struct{})
		go func(done chan struct{}) {
			defer close(done)
			n.leaderLoop(ctx)
		}(done)
	}
	for {
		select {
		case isLeader := <-leaderCh:
			switch {
			case isLeader && cancel != nil:
				n.logger.Warn("leadership lost and regained: re-establishing")
				stop()
				start()
			case isLeader:
				n.logger.Info("gained leadership")
				start()
			case cancel != nil:
				n.logger.Info("lost leadership")
				stop()
			}
		case <-n.shutdownCh:
			stop()
			return
		}
	}
}

// leaderLoop runs one term of leadership: establish (barrier, epoch bump,
// engine start), then reconcile membership periodically and on events, and
// re-establish when the engine stops by itself (a failed commit). A failed
// establishment, a failed engine and a failed reconciliation are each
// tried again after their loop's backoff (see package loophealth), the
// term serving transfer requests meanwhile. The engine is stopped when the
// loop returns.
func (n *Node) leaderLoop(ctx context.Context) {
	defer n.revoke()
	rs := newReconcileState()
	lead, engLoop, rec := n.loops.leadership, n.loops.engine, n.loops.reconcile
	defer func() {
		// These loops run only while this node leads: a follower is not
		// degraded by the failures of its last term.
		for _, l := range []*loophealth.Loop{lead, engLoop, rec, n.loops.aclInit} {
			l.Reset()
		}
	}()
	var (
		eng     *engine.Engine
		engDone <-chan struct{}
		version versionSync
	)
	for {
		// Establish, unless the last establishment or engine of the term
		// failed and its backoff runs: the wait below ends with it, and
		// leaves the term answering transfers meanwhile.
		if engDone == nil && lead.Ready() && engLoop.Ready() {
			err := lead.Injected()
			if err == nil {
				eng, err = n.establish(ctx)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				wait := lead.Failed(err)
				n.logger.Error("failed to establish leadership", "error", err, "retry_in", wait)
				n.revoke()
				if n.transfer(ctx, "", "") == nil {
					// Someone else takes over; the term ends shortly.
					if !sleepCtx(ctx, 2*n.cfg.ElectionTimeout) {
						return
					}
				} else if errors.Is(err, ErrDiskFull) {
					// Alone with a full disk: establish again once the
					// space is back, not before, and then at once.
					if !n.waitDiskSpace(ctx) {
						return
					}
					lead.Reset()
					continue
				}
			} else {
				lead.Succeeded()
				engDone = eng.Done()
				version = versionSync{}
			}
		}

		var wait time.Duration
		if engDone != nil {
			if rec.Ready() && ctx.Err() == nil {
				err := rec.Injected()
				if err == nil {
					err = n.reconcile(ctx, rs)
				}
				switch {
				case err == nil:
					rec.Succeeded()
				case ctx.Err() == nil:
					backoff := rec.Failed(err)
					n.logger.Warn("reconcile failed", "error", err, "retry_in", backoff)
				}
			}
			version.sync(ctx, n, eng)
			n.initialManagement(ctx, eng)
			// The next pass: after ReconcileInterval, or what is left of
			// the backoff of a failing reconciliation.
			wait = rec.Next(n.cfg.ReconcileInterval)
		} else {
			// Not established: the next attempt once both backoffs ran.
			wait = max(lead.Next(0), engLoop.Next(0))
		}

		tick := rec.Timer(wait)
		select {
		case <-ctx.Done():
			tick.Stop()
			return
		case <-tick.C():
		case <-n.reconcileCh:
		case <-engDone:
			err := eng.Err()
			n.revoke()
			engDone = nil
			if n.engineFailed(ctx, err) {
				backoff := engLoop.Failed(fmt.Errorf("engine stopped: %w", err))
				n.logger.Error("engine stopped while leading: re-establishing", "error", err, "in", backoff)
			} else {
				n.logger.Warn("engine stopped while leading: re-establishing", "error", err)
			}
		case req := <-n.transferCh:
			n.revoke()
			engDone = nil
			err := n.transfer(ctx, req.id, req.addr)
			req.resp <- err
			if err == nil && !sleepCtx(ctx, 2*n.cfg.ElectionTimeout) {
				tick.Stop()
				return
			}
		case req := <-n.restoreCh:
			// The state is replaced: the engine's memory of it is stale.
			// Leadership is established again, as for a new term.
			n.revoke()
			engDone = nil
			res, err := n.restore(ctx, req)
			req.resp <- restoreOutcome{res: res, err: err}
			// A new state: its first engine does not wait for the
			// failures of the old one's.
			lead.Reset()
			engLoop.Reset()
		}
		tick.Stop()
	}
}

// engineFailed reports whether an engine that stopped by itself with err
// failed, rather than lost its leadership (which ends the term, and is no
// failure of the engine's loop).
func (n *Node) engineFailed(ctx context.Context, err error) bool {
	var nle *NotLeaderError
	switch {
	case err == nil, ctx.Err() != nil, n.raft.State() != raft.Leader:
		return false
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrRaftShutdown), errors.As(err, &nle):
		return false
	}
	return true
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// transfer hands leadership to id (any voter when empty), trying three
// times. A successful transfer ends the term, so the futures are awaited
// under their own deadline rather than the term's context (raft answers a
// transfer within an election timeout).
func (n *Node) transfer(ctx context.Context, id raft.ServerID, addr raft.ServerAddress) error {
	if !n.hasOtherVoters() {
		return errors.New("no other voter to transfer leadership to")
	}
	var err error
	for range 3 {
		var f raft.Future
		if id == "" {
			f = n.raft.LeadershipTransfer()
		} else {
			f = n.raft.LeadershipTransferToServer(id, addr)
		}
		fctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.ElectionTimeout+n.cfg.RaftIOTimeout)
		err = n.await(fctx, f)
		cancel()
		if err == nil {
			return nil
		}
		n.logger.Warn("leadership transfer failed", "to", id, "error", err)
		if ctx.Err() != nil || errors.Is(err, ErrShutdown) {
			break
		}
	}
	return fmt.Errorf("transferring leadership: %w", err)
}

// establish makes this node a serving leader: it waits until everything
// committed before its term is applied (barrier), commits a new epoch,
// rebuilds an engine from the FSM and starts it.
func (n *Node) establish(ctx context.Context) (*engine.Engine, error) {
	if err := n.disk.err(); err != nil {
		// Its entries would not fit in the log: raft would step down on the
		// first one.
		return nil, err
	}
	if err := n.await(ctx, n.raft.Barrier(n.cfg.BarrierTimeout)); err != nil {
		return nil, fmt.Errorf("barrier: %w", err)
	}
	next := n.state.Epoch() + 1
	data, err := fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: next, Leader: n.id, Time: fsm.InstantOf(n.now())})
	if err != nil {
		return nil, fmt.Errorf("encoding epoch bump: %w", err)
	}
	resp, err := n.applyAwait(ctx, data)
	if err != nil {
		return nil, fmt.Errorf("committing epoch bump: %w", err)
	}
	var epoch uint64
	switch r := resp.(type) {
	case uint64:
		epoch = r
	case error:
		return nil, fmt.Errorf("epoch bump refused: %w", r)
	default:
		return nil, fmt.Errorf("epoch bump: unexpected response %T", resp)
	}

	ccfg := n.cfg.Engine.Core
	if ccfg.Seed == 0 {
		ccfg.Seed = randomSeed()
	}
	ccfg.LogVersion = n.logVersion()
	c, err := core.Recover(ccfg, n.state.View(), epoch, n.now())
	if err != nil {
		return nil, fmt.Errorf("recovering engine at epoch %d: %w", epoch, err)
	}
	c.SetHolds(n.state) // retention waits for the subscriptions' acks
	ecfg := n.cfg.Engine
	ecfg.Core = ccfg
	if ecfg.Logger == nil {
		ecfg.Logger = n.logger.Named("engine")
	}
	m, engLoop, onCommit := n.cfg.Metrics, n.loops.engine, ecfg.OnCommit
	ecfg.OnCommit = func(ci engine.CommitInfo) {
		if m != nil {
			observeCommit(m, ci)
		}
		if ci.Err == nil {
			engLoop.Succeeded() // a failure stops the engine: leaderLoop records it
		}
		if onCommit != nil {
			onCommit(ci)
		}
		onRedelivery, onNotice := ecfg.OnRedelivery, ecfg.OnNotice
		ecfg.OnRedelivery = func(r core.Redelivery) {
			m.Redelivered(r.Subscription)
			if onRedelivery != nil {
				onRedelivery(r)
			}
		}
		ecfg.OnNotice = func(nt core.Notice) {
			if nt.Kind == core.NoticeRetentionCap {
				m.RetentionCapPurged()
			}
			if onNotice != nil {
				onNotice(nt)
			}
		}
	}
	eng := engine.New(ecfg, c, raftLog{n: n})
	var feed *termFeed
	if n.cfg.Metrics != nil {
		feed = feedTerm(eng, n.cfg.Metrics) // subscribed before any event
	}
	if err := eng.Start(ctx); err != nil {
		_ = eng.Stop(ctx)
		if feed != nil {
			feed.wait()
		}
		return nil, fmt.Errorf("starting engine at epoch %d: %w", epoch, err)
	}
	hooks, err := n.startWebhooks(ctx, eng)
	if err != nil {
		_ = eng.Stop(ctx)
		if feed != nil {
			feed.wait()
		}
		return nil, err
	}
	n.mu.Lock()
	n.eng, n.epoch, n.ready, n.feed, n.hooks = eng, epoch, true, feed, hooks
	n.mu.Unlock()
	n.routingChanged()
	n.logger.Info("leadership established", "epoch", epoch)
	return eng, nil
}

// revoke stops serving: it clears readiness, stops the webhook deliveries,
// then stops the engine and waits for it and for the term's metrics feed.
func (n *Node) revoke() {
	n.mu.Lock()
	eng, feed, hooks := n.eng, n.feed, n.hooks
	n.eng, n.ready, n.feed, n.hooks = nil, false, nil, nil
	n.mu.Unlock()
	n.routingChanged()
	if hooks != nil {
		hooks.Stop() // ends requests in flight; what was not acked goes out again from the durable cursor
	}
	if eng != nil {
		_ = eng.Stop(context.Background()) // bounded by the engine's stop grace
	}
	if feed != nil {
		feed.wait()
	}
}

func randomSeed() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on supported platforms; fall back to the
		// clock rather than a constant.
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:])
}

// Epoch returns the epoch of this node's engine while it leads and is ready
// (0 otherwise).
func (n *Node) Epoch() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.ready {
		return 0
	}
	return n.epoch
}

// notLeader builds the *NotLeaderError for this node's current view; cause
// overrides the reason when not nil.
func (n *Node) notLeader(cause error) *NotLeaderError {
	id, addr := n.Leader()
	e := &NotLeaderError{LeaderID: id, LeaderHTTPAddr: addr, Err: cause}
	if e.Err == nil {
		switch {
		case id == n.id && n.disk.err() != nil:
			e.Err = n.disk.err()
		case id == "" && n.disk.err() != nil && !n.hasOtherVoters():
			// Alone, with a full disk, it does not stand for election:
			// no leader comes until space is freed.
			e.Err = n.disk.err()
		case id == "":
			e.Err = ErrNoLeader
		case id == n.id:
			e.Err = ErrNotReady
		default:
			e.Err = raft.ErrNotLeader
		}
	}
	return e
}

// requireReady returns nil when this node leads and its engine is serving.
func (n *Node) requireReady() error {
	_, err := n.engine()
	return err
}

// raftLog is the engine's view of the raft log.
type raftLog struct{ n *Node }

var _ engine.Log = raftLog{}

// Append implements engine.Log: it hands data to raft without waiting for
// the commit. Entries appended from one goroutine reach raft in call order.
func (l raftLog) Append(data []byte) (engine.Pending, error) {
	n := l.n
	if n.raft.State() != raft.Leader {
		return nil, n.notLeader(raft.ErrNotLeader)
	}
	if err := n.disk.err(); err != nil {
		return nil, err // not appended: raft would step down on it
	}
	if err := n.loops.engine.Injected(); err != nil {
		return nil, fmt.Errorf("appending to the raft log: %w", err)
	}
	if !n.futures.add() {
		return nil, ErrShutdown
	}
	f := n.raft.Apply(data, 0)
	p := &pending{done: make(chan struct{})}
	go func() {
		defer n.futures.done()
		p.err = n.applyError(f)
		if p.err == nil {
			p.index = f.Index()
		}
		close(p.done)
	}()
	return p, nil
}

// applyError turns the result of an apply future into the engine's terms.
func (n *Node) applyError(f raft.ApplyFuture) error {
	err := f.Error()
	if err == nil {
		if rerr, ok := f.Response().(error); ok && rerr != nil {
			return rerr
		}
		return nil
	}
	switch {
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		// The entry may still commit in a later term.
		return fmt.Errorf("%w: %w", engine.ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return n.notLeader(err)
	default:
		// ErrEnqueueTimeout, ErrAbortedByRestore: not appended.
		return fmt.Errorf("appending to the raft log: %w", err)
	}
}

// pending is one appended entry.
type pending struct {
	done  chan struct{}
	err   error
	index uint64 // the entry's raft index, once applied
}

// Index returns the entry's raft index once Wait returned nil.
func (p *pending) Index() uint64 { return p.index }

// Wait implements engine.Pending.
func (p *pending) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", engine.ErrOutcomeUnknown, ctx.Err())
	}
}
