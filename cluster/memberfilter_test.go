package cluster

import (
	"bytes"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// filterFixture is a memberFilter on a real NetworkTransport, with a
// configuration and a gossip view the test sets, and a client transport
// that sends it RPCs.
type filterFixture struct {
	f      *memberFilter
	client *raft.NetworkTransport
	target raft.ServerAddress

	mu     sync.Mutex
	config raft.Configuration
	known  map[raft.ServerID]bool

	beats chan raft.RPC // heartbeats that reached the handler
}

func newFilterFixture(t *testing.T) *filterFixture {
	t.Helper()
	newTrans := func() *raft.NetworkTransport {
		sl, err := newStreamLayer(netip.MustParseAddrPort("127.0.0.1:0"))
		require.NoError(t, err)
		return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: sl, MaxPool: 2, Timeout: 5 * time.Second, Logger: hclog.NewNullLogger(),
			MsgpackUseNewTimeFormat: true,
		})
	}
	fx := &filterFixture{known: map[raft.ServerID]bool{}, beats: make(chan raft.RPC, 16)}
	server := newTrans()
	fx.target = server.LocalAddr()
	fx.f = newMemberFilter(server, hclog.NewNullLogger())
	fx.client = newTrans()
	t.Cleanup(func() {
		_ = fx.client.Close()
		_ = fx.f.Close()
	})
	fx.f.SetHeartbeatHandler(func(rpc raft.RPC) {
		fx.beats <- rpc
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	fx.f.attach(func() (raft.Configuration, error) {
		fx.mu.Lock()
		defer fx.mu.Unlock()
		return fx.config.Clone(), nil
	}, func(id raft.ServerID) bool {
		fx.mu.Lock()
		defer fx.mu.Unlock()
		return fx.known[id]
	})
	// What raft would do with the admitted RPCs: answer them.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case rpc := <-fx.f.Consumer():
				switch rpc.Command.(type) {
				case *raft.AppendEntriesRequest:
					rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
				case *raft.RequestPreVoteRequest:
					rpc.Respond(&raft.RequestPreVoteResponse{Granted: true}, nil)
				case *raft.TimeoutNowRequest:
					rpc.Respond(&raft.TimeoutNowResponse{}, nil)
				case *raft.InstallSnapshotRequest:
					_, _ = io.Copy(io.Discard, rpc.Reader)
					rpc.Respond(&raft.InstallSnapshotResponse{Success: true}, nil)
				}
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		wg.Wait()
	})
	return fx
}

func (fx *filterFixture) setConfig(ids ...string) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.config = raft.Configuration{}
	for i, id := range ids {
		fx.config.Servers = append(fx.config.Servers, raft.Server{
			Suffrage: raft.Voter, ID: raft.ServerID(id),
			Address: raft.ServerAddress(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(9000+i)).String()),
		})
	}
}

func (fx *filterFixture) setKnown(id string, known bool) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.known[raft.ServerID(id)] = known
}

func header(id, addr string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)}
}

// appendEntries sends an AppendEntries with an entry (not a heartbeat).
func (fx *filterFixture) appendEntries(id, addr string) error {
	req := &raft.AppendEntriesRequest{
		RPCHeader: header(id, addr), Term: 7, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1,
		Entries: []*raft.Log{{Index: 2, Term: 7, Type: raft.LogCommand, Data: []byte("x")}},
	}
	return fx.client.AppendEntries(raft.ServerID("n1"), fx.target, req, &raft.AppendEntriesResponse{})
}

// heartbeat sends an AppendEntries that takes the transport's heartbeat
// fast path.
func (fx *filterFixture) heartbeat(id, addr string) error {
	req := &raft.AppendEntriesRequest{RPCHeader: header(id, addr), Term: 7}
	return fx.client.AppendEntries(raft.ServerID("n1"), fx.target, req, &raft.AppendEntriesResponse{})
}

func (fx *filterFixture) vote(id, addr string) error {
	req := &raft.RequestVoteRequest{RPCHeader: header(id, addr), Term: 9, LastLogIndex: 5, LastLogTerm: 7}
	return fx.client.RequestVote(raft.ServerID("n1"), fx.target, req, &raft.RequestVoteResponse{})
}

func (fx *filterFixture) preVote(id, addr string) error {
	req := &raft.RequestPreVoteRequest{RPCHeader: header(id, addr), Term: 9, LastLogIndex: 5, LastLogTerm: 7}
	return fx.client.RequestPreVote(raft.ServerID("n1"), fx.target, req, &raft.RequestPreVoteResponse{})
}

func (fx *filterFixture) timeoutNow(id, addr string) error {
	req := &raft.TimeoutNowRequest{RPCHeader: header(id, addr)}
	return fx.client.TimeoutNow(raft.ServerID("n1"), fx.target, req, &raft.TimeoutNowResponse{})
}

func (fx *filterFixture) installSnapshot(id, addr string) error {
	data := []byte("snapshot")
	req := &raft.InstallSnapshotRequest{
		RPCHeader: header(id, addr), SnapshotVersion: raft.SnapshotVersionMax, Term: 9,
		LastLogIndex: 10, LastLogTerm: 9, Size: int64(len(data)),
	}
	return fx.client.InstallSnapshot(raft.ServerID("n1"), fx.target, req, &raft.InstallSnapshotResponse{}, bytes.NewReader(data))
}

// TestMemberFilter: every kind of raft RPC from a server outside the
// configuration is refused (heartbeats included), unless the configuration
// is empty or gossip admits the server; members pass.
func TestMemberFilter(t *testing.T) {
	fx := newFilterFixture(t)
	rpcs := map[string]func(id, addr string) error{
		"AppendEntries":   fx.appendEntries,
		"Heartbeat":       fx.heartbeat,
		"RequestVote":     fx.vote,
		"RequestPreVote":  fx.preVote,
		"TimeoutNow":      fx.timeoutNow,
		"InstallSnapshot": fx.installSnapshot,
	}
	const memberAddr = "127.0.0.1:9000" // n1's address in setConfig

	// A fresh node (empty configuration) takes RPCs from anyone: the
	// leader that adds it is not in its configuration yet.
	for name, send := range rpcs {
		require.NoError(t, send("stranger", "127.0.0.9:1"), "%s with an empty configuration", name)
	}
	require.Zero(t, fx.f.Refused())

	// Members only, once the configuration names servers; a server added
	// since the filter's copy was made is admitted at its first RPC.
	fx.setConfig("n1", "n2")
	refused := fx.f.Refused()
	for name, send := range rpcs {
		require.NoError(t, send("n1", memberAddr), "%s from a member", name)
		err := send("rogue", "127.0.0.9:1")
		require.Error(t, err, "%s from a non-member", name)
		require.Contains(t, err.Error(), errNotMember.Error())
		refused++
		require.Equal(t, refused, fx.f.Refused())
	}
	fx.setConfig("n1", "n2", "n3")
	require.NoError(t, fx.appendEntries("n3", "127.0.0.1:9002"), "a server just added")

	// A header without an id is matched by its address.
	require.NoError(t, fx.appendEntries("", memberAddr))
	require.Error(t, fx.appendEntries("", "127.0.0.9:1"))

	// Gossip admits a live, untombstoned member missing from a stale
	// configuration.
	require.Error(t, fx.appendEntries("n4", "127.0.0.1:9003"))
	fx.setKnown("n4", true)
	require.NoError(t, fx.appendEntries("n4", "127.0.0.1:9003"))
	require.NoError(t, fx.heartbeat("n4", "127.0.0.1:9003"))

	// A member removed from the configuration is refused once the copy is
	// refreshed (at most filterRefreshInterval later).
	fx.setConfig("n1", "n2")
	require.Eventually(t, func() bool { return fx.appendEntries("n3", "127.0.0.1:9002") != nil },
		5*filterRefreshInterval, 10*time.Millisecond)
	require.Error(t, fx.heartbeat("n3", "127.0.0.1:9002"))

	// Only admitted heartbeats reached the handler.
	close(fx.beats)
	var from []string
	for rpc := range fx.beats {
		from = append(from, string(rpc.Command.(*raft.AppendEntriesRequest).ID))
	}
	require.Equal(t, []string{"stranger", "n1", "n4"}, from)
}
