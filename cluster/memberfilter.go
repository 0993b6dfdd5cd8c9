package cluster

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hashicorp/raft takes AppendEntries, InstallSnapshot and TimeoutNow from
// any sender whose term is high enough: a server that is not a member (a
// removed peer still running, a node of another cluster pointed at this
// one, a rogue instance) could make a member adopt its term and its log.
// memberFilter wraps the node's raft transport and refuses, before raft
// sees it, every RPC whose sender is not admitted:
//
//   - while this node's latest raft configuration is empty (a fresh node
//     waiting to be bootstrapped or joined) every sender is admitted: the
//     leader that adds the node is not in its configuration yet;
//   - a server of the latest configuration is admitted (by the id of the
//     RPC header, or by its address when the header has no id);
//   - so is a server that gossip knows alive under that id and that is not
//     tombstoned by RemovePeer. A node that was down while the membership
//     changed restarts with a stale configuration that may not name the
//     current leader; raft would never let it catch up if that leader were
//     refused. Gossip membership is what admits servers to the
//     configuration anyway (reconciliation adds live members), so this
//     admits no one the cluster would not add.
//
// Everything else is answered with an error, which the sender's raft logs
// and retries. The filter trusts the id an RPC claims: it keeps out servers
// that are not members, not impostors (that is the transport's
// authentication, when enabled).
//
// The filter keeps a copy of the configuration, refreshed every
// filterRefreshInterval and whenever a sender is not in it (or it is
// empty): a member just added is admitted at its first RPC, a member just
// removed is refused within a refresh interval. The copy is read with
// raft.GetConfiguration, which in hashicorp/raft v1.8 loads raft's own
// copy of the latest configuration (an atomic value, not a round trip
// through raft's main loop); an unchanged configuration reuses the copy.
type memberFilter struct {
	inner  *raft.NetworkTransport
	logger hclog.Logger

	out    chan raft.RPC
	ready  chan struct{} // closed by attach
	stopCh chan struct{}
	stop   sync.Once
	wg     sync.WaitGroup // the forwarding loop

	// Set by attach, before ready is closed.
	config func() (raft.Configuration, error)
	known  func(id raft.ServerID) bool

	members   atomic.Pointer[memberSet]
	refreshMu sync.Mutex // serializes reads of the configuration

	refused  atomic.Uint64
	logMu    sync.Mutex
	loggedAt map[raft.ServerID]time.Time // last refusal logged, per sender
}

const (
	// filterRefreshInterval bounds how long a removed member may still be
	// admitted.
	filterRefreshInterval = time.Second
	// filterLogEvery bounds the refusals logged per sender.
	filterLogEvery = time.Minute
	// filterLogSenders bounds the senders whose last log time is kept.
	filterLogSenders = 256
)

// errNotMember answers an RPC from a server that is not admitted.
var errNotMember = errors.New("sender is not a member of this node's raft configuration")

// memberSet is a copy of the latest raft configuration.
type memberSet struct {
	servers []raft.Server // as read
	ids     map[raft.ServerID]bool
	addrs   map[raft.ServerAddress]bool
}

func newMemberSet(c raft.Configuration) *memberSet {
	s := &memberSet{servers: c.Servers, ids: map[raft.ServerID]bool{}, addrs: map[raft.ServerAddress]bool{}}
	for _, srv := range c.Servers {
		s.ids[srv.ID] = true
		s.addrs[srv.Address] = true
	}
	return s
}

func (s *memberSet) empty() bool { return len(s.ids) == 0 }

func (s *memberSet) has(id raft.ServerID, addr raft.ServerAddress) bool {
	if id != "" {
		return s.ids[id]
	}
	return addr != "" && s.addrs[addr]
}

// newMemberFilter wraps inner. It serves nothing until attach.
func newMemberFilter(inner *raft.NetworkTransport, logger hclog.Logger) *memberFilter {
	f := &memberFilter{
		inner:    inner,
		logger:   logger,
		out:      make(chan raft.RPC),
		ready:    make(chan struct{}),
		stopCh:   make(chan struct{}),
		loggedAt: map[raft.ServerID]time.Time{},
	}
	f.wg.Add(1)
	go f.run()
	return f
}

// attach gives the filter its sources: the latest raft configuration, and
// whether gossip knows a server as a live, untombstoned member. RPCs wait
// until it is called.
func (f *memberFilter) attach(config func() (raft.Configuration, error), known func(raft.ServerID) bool) {
	f.config, f.known = config, known
	close(f.ready)
}

// run forwards the admitted RPCs to raft and refreshes the copy of the
// configuration, until Close.
func (f *memberFilter) run() {
	defer f.wg.Done()
	select {
	case <-f.ready:
	case <-f.stopCh:
		return
	}
	f.refresh()
	ticker := time.NewTicker(filterRefreshInterval)
	defer ticker.Stop()
	in := f.inner.Consumer()
	for {
		select {
		case rpc := <-in:
			if err := f.admit(rpc); err != nil {
				rpc.Respond(nil, err)
				continue
			}
			select {
			case f.out <- rpc:
			case <-f.stopCh:
				rpc.Respond(nil, raft.ErrTransportShutdown)
				return
			}
		case <-ticker.C:
			f.refresh()
		case <-f.stopCh:
			return
		}
	}
}

// refresh reads the latest configuration into the copy. On failure (raft
// shutting down) the copy stays as it was.
func (f *memberFilter) refresh() *memberSet {
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	old := f.members.Load()
	c, err := f.config()
	if err != nil || old != nil && slices.Equal(old.servers, c.Servers) {
		return old
	}
	s := newMemberSet(c)
	f.members.Store(s)
	return s
}

// admit returns nil when rpc's sender is admitted, else the error it is
// answered with.
func (f *memberFilter) admit(rpc raft.RPC) error {
	select {
	case <-f.ready:
	case <-f.stopCh:
		return raft.ErrTransportShutdown
	}
	cmd, ok := rpc.Command.(raft.WithRPCHeader)
	if !ok {
		return fmt.Errorf("refusing raft RPC %T: no header", rpc.Command)
	}
	h := cmd.GetRPCHeader()
	id := raft.ServerID(h.ID)
	var addr raft.ServerAddress
	if len(h.Addr) > 0 {
		addr = f.inner.DecodePeer(h.Addr)
	}
	s := f.members.Load()
	if s == nil || s.empty() || !s.has(id, addr) {
		// Perhaps added (or the node joined) since the copy was made.
		s = f.refresh()
	}
	if s == nil || s.empty() || s.has(id, addr) || id != "" && f.known(id) {
		return nil
	}
	f.refused.Add(1)
	f.logRefusal(rpc.Command, id, addr)
	return fmt.Errorf("refusing raft %s from %q at %q: %w", rpcName(rpc.Command), id, addr, errNotMember)
}

// logRefusal logs a refusal, at most once per filterLogEvery per sender.
func (f *memberFilter) logRefusal(cmd any, id raft.ServerID, addr raft.ServerAddress) {
	now := time.Now()
	f.logMu.Lock()
	last, seen := f.loggedAt[id]
	if seen && now.Sub(last) < filterLogEvery {
		f.logMu.Unlock()
		return
	}
	if len(f.loggedAt) >= filterLogSenders {
		clear(f.loggedAt)
	}
	f.loggedAt[id] = now
	f.logMu.Unlock()
	f.logger.Warn("refused a raft RPC from a server that is not a member", "rpc", rpcName(cmd), "from", id, "addr", addr)
}

func rpcName(cmd any) string {
	switch cmd.(type) {
	case *raft.AppendEntriesRequest:
		return "AppendEntries"
	case *raft.RequestVoteRequest:
		return "RequestVote"
	case *raft.RequestPreVoteRequest:
		return "RequestPreVote"
	case *raft.InstallSnapshotRequest:
		return "InstallSnapshot"
	case *raft.TimeoutNowRequest:
		return "TimeoutNow"
	default:
		return fmt.Sprintf("%T", cmd)
	}
}

// Refused counts the RPCs refused so far.
func (f *memberFilter) Refused() uint64 { return f.refused.Load() }

// The raft.Transport of the node: the inner transport's, except for what
// reaches raft.

// Consumer returns the admitted RPCs.
func (f *memberFilter) Consumer() <-chan raft.RPC { return f.out }

// SetHeartbeatHandler installs cb behind the filter: heartbeats take a
// fast path of the inner transport that bypasses its consumer channel.
func (f *memberFilter) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		f.inner.SetHeartbeatHandler(nil)
		return
	}
	f.inner.SetHeartbeatHandler(func(rpc raft.RPC) {
		if err := f.admit(rpc); err != nil {
			rpc.Respond(nil, err)
			return
		}
		cb(rpc)
	})
}

// Close stops the filter and closes the inner transport. Idempotent.
func (f *memberFilter) Close() error {
	f.stop.Do(func() { close(f.stopCh) })
	err := f.inner.Close()
	f.wg.Wait()
	return err
}

func (f *memberFilter) LocalAddr() raft.ServerAddress { return f.inner.LocalAddr() }

// AppendEntriesPipeline returns the transport's pipeline, drained (see
// pipelineTransport).
func (f *memberFilter) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	return pipelineTransport{f.inner}.AppendEntriesPipeline(id, target)
}

func (f *memberFilter) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return f.inner.AppendEntries(id, target, args, resp)
}

func (f *memberFilter) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return f.inner.RequestVote(id, target, args, resp)
}

func (f *memberFilter) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return f.inner.RequestPreVote(id, target, args, resp)
}

func (f *memberFilter) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return f.inner.InstallSnapshot(id, target, args, resp, data)
}

func (f *memberFilter) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return f.inner.EncodePeer(id, addr)
}

func (f *memberFilter) DecodePeer(b []byte) raft.ServerAddress { return f.inner.DecodePeer(b) }

func (f *memberFilter) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return f.inner.TimeoutNow(id, target, args, resp)
}

var (
	_ raft.Transport   = (*memberFilter)(nil)
	_ raft.WithPreVote = (*memberFilter)(nil)
	_ raft.WithClose   = (*memberFilter)(nil)
)

// admittedByGossip reports whether gossip knows server id as a live cronoq
// node that RemovePeer did not tombstone.
func (n *Node) admittedByGossip(id raft.ServerID) bool {
	m, ok := n.members.get(string(id))
	if !ok || m.RaftAddr == "" || m.Status != StatusAlive && m.Status != StatusSuspect {
		return false
	}
	return !n.state.Tombstoned(string(id))
}
