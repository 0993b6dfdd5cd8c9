package cluster

import (
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func TestResolveNodeID(t *testing.T) {
	t.Run("first start writes the requested id", func(t *testing.T) {
		dir := t.TempDir()
		id, err := resolveNodeID(dir, "n1")
		require.NoError(t, err)
		require.Equal(t, "n1", id)
		b, err := os.ReadFile(filepath.Join(dir, nodeIDFile))
		require.NoError(t, err)
		require.Equal(t, "n1\n", string(b))
	})
	t.Run("restart keeps the id, with or without -node-id", func(t *testing.T) {
		dir := t.TempDir()
		_, err := resolveNodeID(dir, "n1")
		require.NoError(t, err)
		id, err := resolveNodeID(dir, "")
		require.NoError(t, err)
		require.Equal(t, "n1", id)
		id, err = resolveNodeID(dir, "n1")
		require.NoError(t, err)
		require.Equal(t, "n1", id)
	})
	t.Run("another id is refused naming both", func(t *testing.T) {
		dir := t.TempDir()
		_, err := resolveNodeID(dir, "n1")
		require.NoError(t, err)
		_, err = resolveNodeID(dir, "n2")
		var mismatch *IdentityMismatchError
		require.ErrorAs(t, err, &mismatch)
		require.Equal(t, "n1", mismatch.Stored)
		require.Equal(t, "n2", mismatch.Requested)
		require.Contains(t, err.Error(), `"n1"`)
		require.Contains(t, err.Error(), `"n2"`)
	})
	t.Run("generated when none is given", func(t *testing.T) {
		dir := t.TempDir()
		id, err := resolveNodeID(dir, "")
		require.NoError(t, err)
		require.Len(t, id, 36)
		again, err := resolveNodeID(dir, "")
		require.NoError(t, err)
		require.Equal(t, id, again)
	})
	t.Run("invalid ids", func(t *testing.T) {
		for _, bad := range []string{"a/b", "has space", strings.Repeat("x", 65), "é"} {
			_, err := resolveNodeID(t.TempDir(), bad)
			require.Error(t, err, bad)
		}
	})
	t.Run("corrupt id file", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, nodeIDFile), []byte("\n"), 0o600))
		_, err := resolveNodeID(dir, "n1")
		require.Error(t, err)
	})
}

func TestMetaRoundTrip(t *testing.T) {
	in := nodeMeta{ID: "n1", RaftAddr: "127.0.0.1:7000", HTTPAddr: "127.0.0.1:8080", Version: "1.2.3",
		Expect: 3, HasState: true, Applied: 42}
	b, err := encodeMeta(in)
	require.NoError(t, err)
	out, err := decodeMeta(b)
	require.NoError(t, err)
	require.Equal(t, in, out)

	_, err = decodeMeta(nil)
	require.ErrorIs(t, err, errNotCronoq)
	_, err = decodeMeta([]byte("consul"))
	require.ErrorIs(t, err, errNotCronoq)
	_, err = decodeMeta(append([]byte{metaVersion}, 0xc1)) // msgpack "never used" byte
	require.Error(t, err)
	b, err = encodeMeta(nodeMeta{ID: "n1"})
	require.NoError(t, err)
	_, err = decodeMeta(b)
	require.ErrorIs(t, err, errNotCronoq, "no raft address")

	// The worst case the config allows still fits the gossip limit.
	big := nodeMeta{ID: strings.Repeat("x", maxNodeIDLen), RaftAddr: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
		HTTPAddr: strings.Repeat("h", 255), Version: strings.Repeat("v", 64), Expect: 5, HasState: true, Applied: 1 << 63}
	b, err = encodeMeta(big)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), memberlist.MetaMaxSize)
	_, err = encodeMeta(nodeMeta{ID: "n1", RaftAddr: "a", HTTPAddr: strings.Repeat("h", 600)})
	require.Error(t, err)
}

func TestParseHostPort(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"127.0.0.1:8651", true},
		{"127.0.0.11:0", true},
		{"[::1]:7000", true},
		{"0.0.0.0:7000", false},
		{"[::]:7000", false},
		{"localhost:7000", false},
		{"127.0.0.1", false},
		{"", false},
	} {
		_, err := parseHostPort(tc.in)
		require.Equal(t, tc.ok, err == nil, "%q: %v", tc.in, err)
	}
}

// acceptOne accepts one connection on ln and returns its remote address.
func acceptOne(t *testing.T, ln net.Listener) <-chan string {
	ch := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- "error: " + err.Error()
			return
		}
		ch <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		c.Close()
	}()
	return ch
}

func TestStreamLayerDialsFromItsAddress(t *testing.T) {
	// The whole of 127/8 is loopback on Linux: a dial from 127.0.0.2 must
	// arrive with that source address.
	sl, err := newStreamLayer(netip.MustParseAddrPort("127.0.0.2:0"))
	require.NoError(t, err)
	defer sl.Close()
	require.Equal(t, "127.0.0.2", sl.Addr().(*net.TCPAddr).IP.String())

	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	got := acceptOne(t, target)
	c, err := sl.Dial(raft.ServerAddress(target.Addr().String()), time.Second)
	require.NoError(t, err)
	c.Close()
	require.Equal(t, "127.0.0.2", <-got)

	// And it accepts.
	got2 := make(chan error, 1)
	go func() {
		c, err := sl.Accept()
		if err == nil {
			c.Close()
		}
		got2 <- err
	}()
	c2, err := net.Dial("tcp", sl.Addr().String())
	require.NoError(t, err)
	c2.Close()
	require.NoError(t, <-got2)
}

func TestGossipTransportDialsFromItsAddress(t *testing.T) {
	tr, err := newGossipTransport(netip.MustParseAddrPort("127.0.0.3:0"), log.New(io.Discard, "", 0))
	require.NoError(t, err)
	defer tr.Shutdown()
	require.NotZero(t, tr.GetAutoBindPort())

	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	got := acceptOne(t, target)
	c, err := tr.DialTimeout(target.Addr().String(), time.Second)
	require.NoError(t, err)
	c.Close()
	require.Equal(t, "127.0.0.3", <-got)

	got = acceptOne(t, target)
	c, err = tr.DialAddressTimeout(memberlist.Address{Addr: target.Addr().String(), Name: "x"}, time.Second)
	require.NoError(t, err)
	c.Close()
	require.Equal(t, "127.0.0.3", <-got)
}

func gossipNode(t *testing.T, name string, meta nodeMeta, state memberlist.NodeStateType) *memberlist.Node {
	t.Helper()
	b, err := encodeMeta(meta)
	require.NoError(t, err)
	return &memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.1"), Port: 7946, Meta: b, State: state}
}

func TestMemberTable(t *testing.T) {
	now := time.Unix(1000, 0)
	changes := 0
	quiet := func(others int) time.Duration { return time.Duration(others) * 10 * time.Second }
	tab := newMemberTable("n1", time.Hour, quiet, func() time.Time { return now }, func() { changes++ })
	d := &gossipDelegate{table: tab}

	d.NotifyJoin(gossipNode(t, "n1", nodeMeta{ID: "n1", RaftAddr: "127.0.0.1:1", Expect: 3}, memberlist.StateAlive))
	d.NotifyJoin(gossipNode(t, "n2", nodeMeta{ID: "n2", RaftAddr: "127.0.0.1:2", HTTPAddr: "h2"}, memberlist.StateAlive))
	d.NotifyJoin(gossipNode(t, "n3", nodeMeta{ID: "n3", RaftAddr: "127.0.0.1:3"}, memberlist.StateAlive))
	d.NotifyJoin(&memberlist.Node{Name: "alien", Addr: net.ParseIP("127.0.0.9"), Port: 1, Meta: []byte("x")})
	require.Equal(t, 4, changes)

	now = now.Add(time.Minute)
	d.NotifyUpdate(gossipNode(t, "n2", nodeMeta{ID: "n2", RaftAddr: "127.0.0.1:2", HTTPAddr: "h2", HasState: true}, memberlist.StateAlive))
	// memberlist v0.7.0 hands NotifyLeave a node whose State is never set:
	// without a leave intent, it is a failure.
	d.NotifyLeave(gossipNode(t, "n3", nodeMeta{ID: "n3", RaftAddr: "127.0.0.1:3"}, memberlist.StateAlive))
	// alien and n2 acked recently, n3 is failed anyway.
	d.NotifyPingComplete(&memberlist.Node{Name: "alien"}, time.Millisecond, nil)
	d.NotifyPingComplete(&memberlist.Node{Name: "n2"}, time.Millisecond, nil)
	d.NotifyPingComplete(&memberlist.Node{Name: "unknown"}, time.Millisecond, nil)

	list := tab.list()
	require.Len(t, list, 4)
	require.Equal(t, []string{"alien", "n1", "n2", "n3"}, []string{list[0].Name, list[1].Name, list[2].Name, list[3].Name})
	require.Equal(t, StatusAlive, list[0].Status)
	require.Empty(t, list[0].RaftAddr)
	require.Equal(t, 3, list[1].BootstrapExpect)
	require.Equal(t, StatusAlive, list[1].Status, "never suspect of itself")
	require.Equal(t, StatusAlive, list[2].Status)
	require.True(t, list[2].HasRaftState)
	require.Equal(t, "h2", list[2].HTTPAddr)
	require.Equal(t, time.Unix(1000, 0), list[2].Since, "a meta update is not a status change")
	require.Equal(t, StatusFailed, list[3].Status)
	require.Equal(t, now, list[3].Since)
	require.Equal(t, "127.0.0.1:3", list[3].RaftAddr, "a failed member keeps its last metadata")

	// No ack for longer than the quiet period (2 others alive: 20s): suspect.
	now = now.Add(15 * time.Second)
	d.NotifyPingComplete(&memberlist.Node{Name: "alien"}, time.Millisecond, nil)
	now = now.Add(10 * time.Second)
	list = tab.list()
	require.Equal(t, StatusAlive, list[0].Status)
	require.Equal(t, StatusSuspect, list[2].Status)
	d.NotifyPingComplete(&memberlist.Node{Name: "n2"}, time.Millisecond, nil)
	require.Equal(t, StatusAlive, tab.list()[2].Status)

	// n3 comes back, announces its leave, then leaves: left, not failed.
	now = now.Add(time.Minute)
	d.NotifyJoin(gossipNode(t, "n3", nodeMeta{ID: "n3", RaftAddr: "127.0.0.1:3"}, memberlist.StateAlive))
	m, ok := tab.get("n3")
	require.True(t, ok)
	require.Equal(t, StatusAlive, m.Status)
	d.NotifyUpdate(gossipNode(t, "n3", nodeMeta{ID: "n3", RaftAddr: "127.0.0.1:3", Leaving: true}, memberlist.StateAlive))
	d.NotifyLeave(gossipNode(t, "n3", nodeMeta{ID: "n3", RaftAddr: "127.0.0.1:3", Leaving: true}, memberlist.StateAlive))
	m, _ = tab.get("n3")
	require.Equal(t, StatusLeft, m.Status)
	// A state memberlist might report one day is honoured too.
	d.NotifyJoin(gossipNode(t, "n3", nodeMeta{ID: "n3", RaftAddr: "127.0.0.1:3"}, memberlist.StateAlive))
	d.NotifyLeave(gossipNode(t, "n3", nodeMeta{ID: "n3", RaftAddr: "127.0.0.1:3"}, memberlist.StateLeft))
	m, _ = tab.get("n3")
	require.Equal(t, StatusLeft, m.Status)

	// Reaped after reapAfter.
	now = now.Add(time.Hour + time.Second)
	list = tab.list()
	require.Len(t, list, 3)
	_, ok = tab.get("n3")
	require.False(t, ok)
}

func TestGossipDelegateMeta(t *testing.T) {
	d := &gossipDelegate{}
	require.Nil(t, d.NodeMeta(512))
	b, err := encodeMeta(nodeMeta{ID: "n1", RaftAddr: "127.0.0.1:1"})
	require.NoError(t, err)
	d.meta.Store(&b)
	require.Equal(t, b, d.NodeMeta(512))
	require.Nil(t, d.NodeMeta(len(b)-1))
}

func member(name string, expect int, hasState bool) Member {
	return Member{Name: name, Status: StatusAlive, RaftAddr: "127.0.0.1:" + name, BootstrapExpect: expect, HasRaftState: hasState}
}

func TestDecideBootstrap(t *testing.T) {
	servers := func(ids ...string) []raft.Server {
		var out []raft.Server
		for _, id := range ids {
			out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress("127.0.0.1:" + id)})
		}
		return out
	}
	failed := member("n4", 3, false)
	failed.Status = StatusFailed
	suspect := member("n3", 3, false)
	suspect.Status = StatusSuspect
	for _, tc := range []struct {
		name     string
		self     string
		expect   int
		hasState bool
		members  []Member
		want     []raft.Server
		final    bool
	}{
		{name: "no expect", self: "n1", expect: 0, members: []Member{member("n1", 0, false)}, final: true},
		{name: "self has state", self: "n1", expect: 1, hasState: true, members: []Member{member("n1", 1, false)}, final: true},
		{name: "single", self: "n1", expect: 1, members: []Member{member("n1", 1, false)}, want: servers("n1")},
		{name: "too few", self: "n1", expect: 3, members: []Member{member("n1", 3, false), member("n2", 3, false)}},
		{name: "failed ones do not count", self: "n1", expect: 3,
			members: []Member{member("n1", 3, false), member("n2", 3, false), failed}},
		{name: "three in id order", self: "n2", expect: 3,
			members: []Member{member("n3", 3, false), member("n1", 3, false), member("n2", 3, false)},
			want:    servers("n1", "n2", "n3")},
		{name: "suspect counts", self: "n1", expect: 3,
			members: []Member{member("n1", 3, false), member("n2", 3, false), suspect},
			want:    servers("n1", "n2", "n3")},
		{name: "a member with state means a cluster exists", self: "n1", expect: 3,
			members: []Member{member("n1", 3, false), member("n2", 3, false), member("n3", 3, false), member("n4", 0, true)},
			final:   true},
		{name: "expect mismatch", self: "n1", expect: 3,
			members: []Member{member("n1", 3, false), member("n2", 5, false), member("n3", 3, false)}},
		{name: "members without expect are not counted", self: "n1", expect: 2,
			members: []Member{member("n1", 2, false), member("n0", 0, false), member("n2", 2, false)},
			want:    servers("n1", "n2")},
		{name: "more than expected: the first by id", self: "n1", expect: 2,
			members: []Member{member("n3", 2, false), member("n2", 2, false), member("n1", 2, false)},
			want:    servers("n1", "n2")},
		{name: "more than expected, self not chosen", self: "n3", expect: 2,
			members: []Member{member("n3", 2, false), member("n2", 2, false), member("n1", 2, false)}},
		{name: "non-cronoq members ignored", self: "n1", expect: 1,
			members: []Member{member("n1", 1, false), {Name: "alien", Status: StatusAlive}}, want: servers("n1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideBootstrap(tc.self, tc.expect, tc.hasState, tc.members)
			require.Equal(t, tc.want, d.Servers, d.Reason)
			require.Equal(t, tc.final, d.Final, d.Reason)
			if len(d.Servers) == 0 {
				require.NotEmpty(t, d.Reason)
			}
		})
	}

	dup := []Member{member("n1", 2, false), member("n2", 2, false)}
	dup[1].RaftAddr = dup[0].RaftAddr
	d := decideBootstrap("n1", 2, false, dup)
	require.Empty(t, d.Servers)
	require.Contains(t, d.Reason, "same raft address")
}
