// Package cluster turns cronoq's deterministic core into a replicated
// system: hashicorp/raft with raft-boltdb and file snapshots, hashicorp
// memberlist for gossip membership, bootstrap-expect and join, the leadership
// lifecycle (barrier, epoch bump, engine start and stop), reconciliation of
// gossip members into the raft configuration, and the operator operations.
//
// Every connection a node opens leaves from the node's own raft or gossip IP,
// so that a firewall rule on a node's address cuts all of its links.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/webhook"
)

const (
	raftLogCacheSize  = 512
	snapshotsRetained = 2
	raftMaxPool       = 3
)

// Node is one cronoq server: a raft peer, a gossip member and, while it
// leads, the host of the engine.
type Node struct {
	cfg           Config
	faults        *faults // injected clock and disk faults (jepsenfaults builds)
	id            string
	logger        hclog.Logger
	dataDir       string
	removeDataDir bool
	raftAddr      string
	gossipAddr    string

	state  *fsm.State
	events *EventHub // the status events the state applies
	store  *raftboltdb.BoltStore
	disk   *diskState // the data directory's disk-full condition
	stream *streamLayer
	trans  *raft.NetworkTransport
	filter *memberFilter // trans as raft sees it: only members reach raft
	raft   *raft.Raft

	ml      *memberlist.Memberlist
	gossip  *gossipDelegate
	members *memberTable
	metaMu  sync.Mutex
	meta    nodeMeta

	// Gossip encryption (keyring.go): nil keyring when disabled.
	keyring     *memberlist.Keyring
	keyringPath string // "" when kept in memory only
	keyringMu   sync.Mutex

	reconcileCh chan struct{}
	bootstrapCh chan struct{}
	transferCh  chan transferRequest
	restoreCh   chan restoreRequest

	shutdownCh chan struct{}
	loopsWG    sync.WaitGroup // join, reconnect, bootstrap and meta loops
	leaderWG   sync.WaitGroup // the leadership monitor
	futures    waiters        // goroutines waiting on raft futures

	// Lifecycle: lifeMu serializes Start and Stop; stopped is closed once
	// the node has stopped (or its Start failed).
	lifeMu   sync.Mutex
	started  bool
	startErr error
	stopErr  error
	stopOnce sync.Once
	stopped  chan struct{}

	mu    sync.Mutex // guards the leader state below
	eng   *engine.Engine
	feed  *termFeed          // the metrics feed of the term
	hooks *webhook.Deliverer // the webhook deliveries of the term
	ready bool
	epoch uint64

	leaderWatch *leaderWatch // counts leader changes into the metrics, wakes routeCh

	routeMu sync.Mutex
	routeCh chan struct{} // closed at the next routing change (RoutingChanged)

	clock       *clockGuard // the engine clock, checked against the voters' (clock.go)
	clockReader atomic.Pointer[ClockReader]

	loops         loopSet
	plaintext     []exposure // addresses off loopback while TLS is off
	reconcileRuns atomic.Uint64
	left          atomic.Bool
}

// New builds a node from cfg (with defaults applied) after checking it. It
// opens nothing: Start does.
func New(cfg Config) (*Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:         cfg,
		logger:      cfg.Logger,
		reconcileCh: make(chan struct{}, 1),
		bootstrapCh: make(chan struct{}, 1),
		transferCh:  make(chan transferRequest),
		restoreCh:   make(chan restoreRequest),
		shutdownCh:  make(chan struct{}),
		stopped:     make(chan struct{}),
		events:      NewEventHub(0),
	}
	n.futures.init()
	n.faults = newFaults(&n.cfg)
	n.installClockGuard()
	n.loops = newLoopSet(n.cfg)
	n.plaintext = cfg.plaintextExposure()
	return n, nil
}

// Start opens (or creates) the data directory, starts raft and gossip, and
// begins joining, bootstrapping and watching leadership. It returns once the
// node runs; it does not wait for a cluster to form. It may be called once;
// a node whose Start failed holds nothing open. ctx bounds nothing after
// Start returns: Stop stops the node.
func (n *Node) Start(ctx context.Context) error {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.started {
		return errors.New("starting node: already started or stopped")
	}
	n.started = true
	err := ctx.Err()
	if err == nil {
		err = n.open()
	}
	if err != nil {
		n.startErr = err
		n.events.Close()
		n.stopOnce.Do(func() { close(n.stopped) })
	}
	return err
}

// open does the work of Start.
func (n *Node) open() error {
	cfg := n.cfg
	var cleanup []func()
	ok := false
	defer func() {
		if !ok {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	n.dataDir = cfg.DataDir
	if n.dataDir == "" {
		dir, err := os.MkdirTemp("", "cronoq-dev-")
		if err != nil {
			return fmt.Errorf("creating dev data dir: %w", err)
		}
		n.dataDir, n.removeDataDir = dir, true
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
	}
	if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	id, err := resolveNodeID(n.dataDir, cfg.NodeID)
	if err != nil {
		return err
	}
	n.id = id
	n.logger = cfg.Logger.With("node", id)

	// Raft storage.
	raftDir := filepath.Join(n.dataDir, "raft")
	if err := os.MkdirAll(raftDir, 0o700); err != nil {
		return fmt.Errorf("creating raft dir: %w", err)
	}
	logPath := filepath.Join(raftDir, "raft.db")
	store, err := openLogStore(logPath, cfg.NoSync)
	if err != nil {
		return err
	}
	n.store = store
	cleanup = append(cleanup, func() { store.Close() })
	n.disk = newDiskState(n.dataDir, raftDir, time.Now, n.logger)
	logs, err := raft.NewLogCache(raftLogCacheSize, &diskLogStore{LogStore: n.faults.logStore(store), disk: n.disk})
	if err != nil {
		return fmt.Errorf("creating raft log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(raftDir, snapshotsRetained, n.logger.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("opening snapshot store: %w", err)
	}
	if err := guardCorruption(logPath, func() error {
		return checkSnapshots(raftDir, id, snaps, logs, n.logger.Named("snapshot"))
	}); err != nil {
		return err
	}

	// Raft transport.
	raftBind, _ := parseHostPort(cfg.RaftAddr) // checked by Validate
	stream, err := newStreamLayer(raftBind)
	if err != nil {
		return err
	}
	if cfg.TLS != nil {
		stream.useTLS(cfg.TLS)
	}
	n.stream = stream
	n.raftAddr = stream.Addr().String()
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:                  stream,
		MaxPool:                 raftMaxPool,
		Timeout:                 cfg.RaftIOTimeout,
		Logger:                  n.logger.Named("raft-net"),
		MsgpackUseNewTimeFormat: true,
	})
	n.filter = newMemberFilter(n.trans, n.logger.Named("raft-net"))
	cleanup = append(cleanup, func() { n.filter.Close() })

	// Raft itself.
	rc := cfg.raftConfig(id)
	rc.Logger = n.logger.Named("raft")
	stable := &diskStableStore{StableStore: n.faults.stableStore(store), disk: n.disk}
	var hasState bool
	if err := guardCorruption(logPath, func() (err error) {
		hasState, err = raft.HasExistingState(logs, stable, snaps)
		return err
	}); err != nil {
		return fmt.Errorf("checking raft state: %w", err)
	}
	if cfg.Dev && !hasState {
		conf := raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(n.raftAddr),
		}}}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, pipelineTransport{n.trans}, conf); err != nil {
			return fmt.Errorf("bootstrapping dev node: %w", err)
		}
		hasState = true
	}
	if recovered, err := n.recoverPeers(rc, raftDir, logs, stable, snaps, n.trans); err != nil {
		return err
	} else if recovered {
		hasState = true
	}
	n.state = fsm.NewVersion(cfg.LogVersion)
	// Set before raft restores or applies anything: every applied entry's
	// events reach the hub.
	n.state.SetEventSink(n.events.Publish)
	rfsm := fsm.NewRaftFSM(n.state)
	rfsm.SetRestoreGuard(staleSnapshotGuard(logs, n.logger.Named("fsm")))
	rfsm.SetHaltHandler(func(h *fsm.HaltError) {
		n.logger.Error("FATAL: this node cannot apply the raft log and stops applying it until it runs a release that can",
			"index", h.Index, "needs_log_version", h.Need, "log_version", h.Version, "error", h.Err)
	})
	r, err := newRaft(logPath, rc, eventFSM{rfsm, n.events}, logs, stable, snaps, n.filter)
	if err != nil {
		return fmt.Errorf("starting raft: %w", err)
	}
	n.raft = r
	cleanup = append(cleanup, func() { r.Shutdown().Error() })

	// Gossip.
	n.members = newMemberTable(id, cfg.MemberReapTime, func(others int) time.Duration {
		return time.Duration(2*max(others, 1))*cfg.GossipProbeInterval + 2*cfg.GossipProbeTimeout
	}, time.Now, n.membershipChanged)
	n.gossip = &gossipDelegate{table: n.members}
	n.meta = nodeMeta{
		ID: id, RaftAddr: n.raftAddr, HTTPAddr: cfg.HTTPAddr, Version: cfg.Version,
		Expect: cfg.BootstrapExpect, HasState: hasState, LogVersion: cfg.LogVersion,
	}
	if cfg.Dev {
		n.meta.Expect = 0 // bootstrapped above; never counted by others
	}
	if err := n.publishMeta(n.meta); err != nil {
		return err
	}
	gossipBind, _ := parseHostPort(cfg.GossipAddr)
	mlLogger := n.logger.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	gt, err := newGossipTransport(gossipBind, mlLogger)
	if err != nil {
		return err
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = id
	mc.Transport = gt
	mc.BindAddr = gossipBind.Addr().String()
	mc.BindPort = gt.GetAutoBindPort()
	mc.AdvertiseAddr = gossipBind.Addr().String()
	mc.AdvertisePort = gt.GetAutoBindPort()
	mc.Delegate = n.gossip
	mc.Events = n.gossip
	mc.Ping = n.gossip
	mc.Logger = mlLogger
	mc.ProbeInterval = cfg.GossipProbeInterval
	mc.ProbeTimeout = cfg.GossipProbeTimeout
	mc.GossipInterval = cfg.GossipInterval
	mc.PushPullInterval = cfg.GossipPushPullInterval
	mc.SuspicionMult = cfg.GossipSuspicionMult
	mc.DeadNodeReclaimTime = cfg.GossipDeadNodeReclaimTime
	if err := n.setupGossipEncryption(mc); err != nil {
		gt.Shutdown()
		return err
	}
	if cfg.GossipProbeInterval < time.Second {
		// Short test timings: faster TCP fallbacks and gossip to the dead.
		mc.TCPTimeout = 4 * cfg.GossipProbeInterval
		mc.GossipToTheDeadTime = 4 * cfg.GossipPushPullInterval
	}
	n.gossipAddr = net.JoinHostPort(mc.AdvertiseAddr, fmt.Sprint(mc.AdvertisePort))
	ml, err := memberlist.Create(mc)
	if err != nil {
		gt.Shutdown()
		return fmt.Errorf("starting gossip: %w", err)
	}
	n.ml = ml
	n.filter.attach(func() (raft.Configuration, error) {
		f := n.raft.GetConfiguration()
		return f.Configuration(), f.Error()
	}, n.admittedByGossip)
	if m := cfg.Metrics; m != nil {
		if err := m.Registry().Register(n.loops.set); err != nil {
			return fmt.Errorf("registering the loop series: %w", err)
		}
	}

	ok = true
	n.logger.Info("node started", "raft_addr", n.raftAddr, "gossip_addr", n.gossipAddr,
		"http_addr", cfg.HTTPAddr, "has_state", hasState, "dev", cfg.Dev, "tls", cfg.TLS != nil)
	n.warnPlaintext()

	if m := cfg.Metrics; m != nil {
		m.SetSource(metricsSource{n})
		m.SetClockSource(n.clockGauges)
	}
	n.leaderWatch = watchLeader(n.raft, cfg.Metrics, n.routingChanged)
	n.leaderWG.Add(1)
	go n.monitorLeadership()
	n.loopsWG.Add(1)
	go n.metaLoop()
	n.loopsWG.Add(1)
	go n.probeLoop()
	if cfg.MaxClockSkew >= 0 {
		n.loopsWG.Add(1)
		go n.clockLoop()
	}
	if cfg.BootstrapExpect > 0 && !hasState && !cfg.Dev {
		n.loopsWG.Add(1)
		go n.bootstrapLoop()
	}
	if len(cfg.Join) > 0 {
		n.loopsWG.Add(1)
		go n.joinLoop(cfg.Join)
	}
	n.loopsWG.Add(1)
	go n.reconnectLoop()
	return nil
}

// ID returns the node id.
func (n *Node) ID() string { return n.id }

// RaftAddr returns the address raft listens on (with the port chosen when
// the configuration asked for port 0).
func (n *Node) RaftAddr() string { return n.raftAddr }

// GossipAddr returns the gossip address (ip:port).
func (n *Node) GossipAddr() string { return n.gossipAddr }

// HTTPAddr returns the API address this node advertises.
func (n *Node) HTTPAddr() string { return n.cfg.HTTPAddr }

// DataDir returns the data directory in use.
func (n *Node) DataDir() string { return n.dataDir }

// IsLeader reports whether this node is the raft leader (not necessarily
// ready to serve yet; see Engine).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the id and advertised API address of the current leader,
// both empty when none is known (the address is empty when the leader is
// not tracked by gossip).
func (n *Node) Leader() (id, httpAddr string) {
	_, lid := n.raft.LeaderWithID()
	id = string(lid)
	if id == "" {
		return "", ""
	}
	if id == n.id {
		return id, n.cfg.HTTPAddr
	}
	if m, ok := n.members.get(id); ok {
		return id, m.HTTPAddr
	}
	return id, ""
}

// RoutingChanged returns a channel closed at the next change of what a call
// that needs the leader is routed by: the leader this node knows (raft's
// view, none included), or this node's readiness to serve as the leader.
// A caller takes it before looking at Leader and Leading, and waits on it
// (with a bound) when they told it to wait.
func (n *Node) RoutingChanged() <-chan struct{} {
	n.routeMu.Lock()
	defer n.routeMu.Unlock()
	if n.routeCh == nil {
		n.routeCh = make(chan struct{})
	}
	return n.routeCh
}

// routingChanged wakes the waiters of RoutingChanged.
func (n *Node) routingChanged() {
	n.routeMu.Lock()
	defer n.routeMu.Unlock()
	if n.routeCh != nil {
		close(n.routeCh)
		n.routeCh = nil
	}
}

// now is the engine's clock (injectable for fault tests).
func (n *Node) now() time.Time {
	if n.cfg.Engine.Now != nil {
		return n.cfg.Engine.Now()
	}
	return time.Now()
}

// membershipChanged is called by the member table on every gossip event. It
// never blocks: a reconcile or bootstrap check already pending covers it.
func (n *Node) membershipChanged() {
	select {
	case n.reconcileCh <- struct{}{}:
	default:
	}
	select {
	case n.bootstrapCh <- struct{}{}:
	default:
	}
}

// Stop stops the node. If it leads, it first hands leadership to another
// voter; it stops the engine, leaves the cluster if LeaveOnTerminate (gossip
// leave and removal from the raft configuration), then stops gossip and raft
// and closes the stores. The node stays in the raft configuration otherwise.
// Stop is idempotent; later calls return the first call's result. ctx
// bounds the hand-off and the leave, not the closing of local resources.
func (n *Node) Stop(ctx context.Context) error {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	n.stopOnce.Do(func() {
		if n.started && n.startErr == nil {
			n.stopErr = n.shutdown(ctx)
		}
		n.started = true // a later Start is refused
		close(n.stopped)
	})
	return n.stopErr
}

// Done is closed once the node has stopped (or its Start failed).
func (n *Node) Done() <-chan struct{} { return n.stopped }

// Err returns why the node stopped: the error of its Start or of its Stop;
// nil while it runs and after a clean stop.
func (n *Node) Err() error {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.startErr != nil {
		return n.startErr
	}
	return n.stopErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.logger.Info("shutting down", "leave", n.cfg.LeaveOnTerminate)
	var errs []error
	close(n.shutdownCh)
	n.leaderWG.Wait() // leadership monitor gone: the engine is stopped

	if n.cfg.LeaveOnTerminate {
		if err := n.leave(ctx); err != nil {
			errs = append(errs, err)
		}
	} else if n.raft.State() == raft.Leader {
		if err := n.handOffLeadership(ctx); err != nil {
			n.logger.Warn("could not hand off leadership before shutdown", "error", err)
		}
	}

	if err := n.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("stopping gossip: %w", err))
	}
	n.loopsWG.Wait() // join, reconnect, bootstrap and meta loops (gossip dials cancelled)
	// Let in-flight raft futures resolve while raft still runs: raft
	// never answers a future still queued for its FSM when it shuts down.
	drain := n.futures.close()
	select {
	case <-drain:
	case <-ctx.Done():
	case <-time.After(2 * n.cfg.ElectionTimeout):
	}
	if err := n.raft.Shutdown().Error(); err != nil {
		errs = append(errs, fmt.Errorf("stopping raft: %w", err))
	}
	n.events.Close() // nothing is applied any more
	if n.leaderWatch != nil {
		n.leaderWatch.stop()
	}
	if m := n.cfg.Metrics; m != nil {
		m.Registry().Unregister(n.loops.set)
	}
	select {
	case <-drain:
	case <-time.After(n.cfg.ElectionTimeout):
		n.logger.Warn("raft futures still unanswered after shutdown", "count", n.futures.pending())
	}
	if err := n.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing raft log store: %w", err))
	}
	if n.removeDataDir {
		if err := os.RemoveAll(n.dataDir); err != nil {
			errs = append(errs, fmt.Errorf("removing dev data dir: %w", err))
		}
	}
	n.logger.Info("stopped")
	return errors.Join(errs...)
}

// handOffLeadership transfers leadership to another voter (three tries, as
// Nomad does) and waits until this node no longer leads.
func (n *Node) handOffLeadership(ctx context.Context) error {
	if !n.hasOtherVoters() {
		return nil
	}
	if err := n.transfer(ctx, "", ""); err != nil {
		return err
	}
	return n.waitFor(ctx, func() bool { return n.raft.State() != raft.Leader })
}

// hasOtherVoters reports whether the configuration has a voter besides this
// node.
func (n *Node) hasOtherVoters() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.id {
			return true
		}
	}
	return false
}

// Leave leaves the cluster for good, as Nomad servers do: a leader hands off
// leadership (or, failing that, removes itself from the raft
// configuration), then the node announces its leave through gossip, and
// waits (up to LeaveDrainTime) until the leader has removed it from the raft
// configuration. Shutdown calls it when LeaveOnTerminate is set.
func (n *Node) Leave(ctx context.Context) error {
	select {
	case <-n.shutdownCh:
		return ErrShutdown
	default:
	}
	return n.leave(ctx)
}

func (n *Node) leave(ctx context.Context) error {
	if !n.left.CompareAndSwap(false, true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.LeaveDrainTime)
	defer cancel()
	alone := !n.hasOtherVoters()
	if n.raft.State() == raft.Leader && !alone {
		var err error
		select {
		case <-n.shutdownCh:
			// The leadership monitor is gone and the engine stopped.
			err = n.handOffLeadership(ctx)
		default:
			// Let the leader loop stop the engine before the transfer.
			_, err = n.TransferLeadership(ctx, "")
		}
		if err != nil {
			n.logger.Warn("leaving: hand-off failed, removing self from the raft configuration", "error", err)
			if err := n.await(ctx, n.raft.RemoveServer(raft.ServerID(n.id), 0, 0)); err != nil {
				return fmt.Errorf("leaving: removing self: %w", err)
			}
		}
	}
	// Announce the intent first: memberlist reports a leave like a failure.
	n.metaMu.Lock()
	m := n.meta
	m.Leaving = true
	err := n.publishMeta(m)
	if err == nil {
		n.meta = m
	}
	n.metaMu.Unlock()
	if err != nil {
		return fmt.Errorf("leaving: %w", err)
	}
	if err := n.ml.UpdateNode(n.cfg.LeaveDrainTime / 2); err != nil {
		n.logger.Warn("leaving: leave intent not confirmed", "error", err)
	}
	if err := n.ml.Leave(n.cfg.LeaveDrainTime); err != nil {
		n.logger.Warn("leaving: gossip leave not confirmed", "error", err)
	}
	if alone {
		// No other server could remove this one.
		n.logger.Info("left the gossip pool (no other server in the raft configuration)")
		return nil
	}
	err = n.waitFor(ctx, func() bool {
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == n.id {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("leaving: not removed from the raft configuration in time: %w", err)
	}
	n.logger.Info("left the cluster")
	return nil
}

// waitFor polls cond every few milliseconds until it holds or ctx ends.
func (n *Node) waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// await waits for a raft future under ctx. The future is waited on by a
// tracked goroutine (raft futures expose no channel), which outlives ctx
// until raft answers.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	ch := make(chan error, 1)
	if !n.futures.add() {
		return ErrShutdown
	}
	go func() {
		defer n.futures.done()
		ch <- f.Error()
	}()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// applyAwait appends data to the raft log and waits (under ctx) until it is
// applied here, returning the FSM's response.
func (n *Node) applyAwait(ctx context.Context, data []byte) (any, error) {
	type result struct {
		resp any
		err  error
	}
	if !n.futures.add() {
		return nil, ErrShutdown
	}
	f := n.raft.Apply(data, 0)
	ch := make(chan result, 1)
	go func() {
		defer n.futures.done()
		if err := f.Error(); err != nil {
			ch <- result{err: err}
			return
		}
		ch <- result{resp: f.Response()}
	}()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waiters counts goroutines waiting on raft futures, so that shutdown can
// wait for them, and refuses new ones once closed.
type waiters struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{}
}

func (w *waiters) init() { w.idle = make(chan struct{}) }

func (w *waiters) add() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.n++
	return true
}

func (w *waiters) done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if w.closed && w.n == 0 {
		close(w.idle)
	}
}

// close refuses new waiters and returns a channel closed once none is left.
func (w *waiters) close() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		if w.n == 0 {
			close(w.idle)
		}
	}
	return w.idle
}

func (w *waiters) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// parseJoinAddr returns addr with the default gossip port when it has none.
func parseJoinAddr(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		return netip.AddrPortFrom(ip, 8652).String()
	}
	return net.JoinHostPort(addr, defaultGossipPort)
}
