package cluster

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemberStatus is a node's gossip status as seen from this node.
type MemberStatus string

// Gossip statuses. memberlist itself forgets failed and left nodes after a
// while; this node keeps them, with the time they entered the status, until
// they come back or are reaped.
const (
	StatusAlive   MemberStatus = "alive"
	StatusSuspect MemberStatus = "suspect" // missed probes; not yet declared failed
	StatusFailed  MemberStatus = "failed"  // declared dead by gossip
	StatusLeft    MemberStatus = "left"    // left on purpose
)

// Member is one node of the gossip pool.
type Member struct {
	Name   string       // node id (the gossip name)
	Addr   string       // gossip address, ip:port
	Status MemberStatus // alive, suspect, failed or left
	Since  time.Time    // when this node saw it enter Status (suspect: of its last alive)

	// From the node's gossip metadata (empty for a node that is not a
	// cronoq node).
	RaftAddr        string
	HTTPAddr        string
	Version         string
	BootstrapExpect int
	HasRaftState    bool
	Applied         uint64 // raft applied index, published while not a voter
	LogVersion      uint16 // newest log format it understands (1 for releases that did not say)

	leaving bool      // its last metadata announced a leave
	lastAck time.Time // this node's last direct probe ack from it
}

// memberTable is this node's record of every gossip member it has seen.
// memberlist calls into it from its packet loop, so no method blocks.
//
// memberlist v0.7.0 exposes no suspect state (Members() hides it and the
// Node.State it reports is never set), so an alive member is listed as
// suspect when this node has had no direct probe ack from it for longer
// than suspectAfter(number of other alive members); memberlist probes the
// members in shuffled rounds, one per probe interval, so a healthy member
// is acknowledged at least once every 2n intervals.
type memberTable struct {
	self         string
	reapAfter    time.Duration
	suspectAfter func(others int) time.Duration
	now          func() time.Time
	onChange     func() // non-blocking

	mu      sync.Mutex
	members map[string]*Member
}

func newMemberTable(self string, reapAfter time.Duration, suspectAfter func(others int) time.Duration,
	now func() time.Time, onChange func()) *memberTable {
	return &memberTable{
		self:         self,
		reapAfter:    reapAfter,
		suspectAfter: suspectAfter,
		now:          now,
		onChange:     onChange,
		members:      make(map[string]*Member),
	}
}

// acked records a direct probe ack from name.
func (t *memberTable) acked(name string) {
	now := t.now()
	t.mu.Lock()
	if m, ok := t.members[name]; ok {
		m.lastAck = now
	}
	t.mu.Unlock()
}

// observe records the state of n as reported by memberlist.
func (t *memberTable) observe(n *memberlist.Node, status MemberStatus) {
	now := t.now()
	t.mu.Lock()
	m, ok := t.members[n.Name]
	if !ok {
		m = &Member{Name: n.Name}
		t.members[n.Name] = m
	}
	m.Addr = n.Address()
	if meta, err := decodeMeta(n.Meta); err == nil {
		m.RaftAddr = meta.RaftAddr
		m.HTTPAddr = meta.HTTPAddr
		m.Version = meta.Version
		m.BootstrapExpect = meta.Expect
		m.HasRaftState = meta.HasState
		m.Applied = meta.Applied
		m.LogVersion = max(meta.LogVersion, 1)
		m.leaving = meta.Leaving
	} else if status == StatusAlive {
		// An alive node reports its current metadata; one that is not
		// decodable is not a cronoq node (or is broken).
		m.RaftAddr, m.HTTPAddr, m.Version = "", "", ""
		m.BootstrapExpect, m.HasRaftState, m.Applied, m.LogVersion, m.leaving = 0, false, 0, 0, false
	}
	if status == StatusFailed && m.leaving {
		status = StatusLeft
	}
	if !ok || m.Status != status {
		m.Since = now
	}
	m.Status = status
	t.mu.Unlock()
	if t.onChange != nil {
		t.onChange()
	}
}

// list returns every member sorted by name, alive ones without a recent
// probe ack as suspect. Failed and left members older than reapAfter are
// dropped first.
func (t *memberTable) list() []Member {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	others := 0
	for name, m := range t.members {
		if m.Status == StatusAlive && name != t.self {
			others++
		}
	}
	var quiet time.Duration
	if t.suspectAfter != nil {
		quiet = t.suspectAfter(others)
	}
	out := make([]Member, 0, len(t.members))
	for name, m := range t.members {
		if (m.Status == StatusFailed || m.Status == StatusLeft) && t.reapAfter > 0 &&
			now.Sub(m.Since) > t.reapAfter && name != t.self {
			delete(t.members, name)
			continue
		}
		c := *m
		if c.Status == StatusAlive && name != t.self && quiet > 0 {
			last := c.lastAck
			if last.Before(c.Since) {
				last = c.Since
			}
			if now.Sub(last) > quiet {
				c.Status = StatusSuspect
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// get returns the member named name.
func (t *memberTable) get(name string) (Member, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[name]
	if !ok {
		return Member{}, false
	}
	return *m, true
}

// gossipDelegate connects memberlist to a node: it serves the node's
// metadata and feeds membership events into the member table.
type gossipDelegate struct {
	meta  atomic.Pointer[[]byte]
	table *memberTable
}

var (
	_ memberlist.Delegate      = (*gossipDelegate)(nil)
	_ memberlist.EventDelegate = (*gossipDelegate)(nil)
	_ memberlist.PingDelegate  = (*gossipDelegate)(nil)
)

// AckPayload implements memberlist.PingDelegate.
func (d *gossipDelegate) AckPayload() []byte { return nil }

// NotifyPingComplete implements memberlist.PingDelegate.
func (d *gossipDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	d.table.acked(other.Name)
}

// NodeMeta implements memberlist.Delegate.
func (d *gossipDelegate) NodeMeta(limit int) []byte {
	p := d.meta.Load()
	if p == nil || len(*p) > limit {
		// encodeMeta checked MetaMaxSize; a smaller limit is never asked
		// for, and memberlist panics on an oversized answer.
		return nil
	}
	return *p
}

// NotifyMsg implements memberlist.Delegate (no user messages are used).
func (d *gossipDelegate) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate.
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate.
func (d *gossipDelegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyJoin implements memberlist.EventDelegate.
func (d *gossipDelegate) NotifyJoin(n *memberlist.Node) { d.table.observe(n, StatusAlive) }

// NotifyUpdate implements memberlist.EventDelegate.
func (d *gossipDelegate) NotifyUpdate(n *memberlist.Node) { d.table.observe(n, StatusAlive) }

// NotifyLeave implements memberlist.EventDelegate: a node that announced its
// leave (see nodeMeta.Leaving) is left, one that was declared dead is
// failed.
func (d *gossipDelegate) NotifyLeave(n *memberlist.Node) {
	if n.State == memberlist.StateLeft {
		d.table.observe(n, StatusLeft)
		return
	}
	d.table.observe(n, StatusFailed)
}
