package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/internal/loophealth"
)

// publishMeta encodes m and makes it the metadata memberlist serves.
func (n *Node) publishMeta(m nodeMeta) error {
	b, err := encodeMeta(m)
	if err != nil {
		return err
	}
	n.gossip.meta.Store(&b)
	return nil
}

// metaLoop keeps this node's gossip metadata current: whether it has raft
// state, and its applied index while it is not a voter. It refreshes every
// MetaRefreshInterval, and backs off while refreshing fails.
func (n *Node) metaLoop() {
	defer n.loopsWG.Done()
	l := n.loops.meta
	for {
		if !n.sleepOrShutdown(l, l.Next(n.cfg.MetaRefreshInterval)) {
			return
		}
		if err := l.Do(n.refreshMeta); err != nil {
			n.logger.Debug("refreshing gossip metadata", "error", err)
		}
	}
}

func (n *Node) refreshMeta() error {
	hasState := n.raft.LastIndex() > 0
	voter := false
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == n.id && s.Suffrage == raft.Voter {
				voter = true
			}
		}
	}
	var applied uint64
	if !voter {
		applied = n.raft.AppliedIndex()
	}

	n.metaMu.Lock()
	m := n.meta
	m.HasState = m.HasState || hasState
	m.Applied = applied
	changed := m != n.meta
	if changed {
		if err := n.publishMeta(m); err != nil {
			n.metaMu.Unlock()
			return err
		}
		n.meta = m
	}
	n.metaMu.Unlock()
	if !changed {
		return nil
	}
	if err := n.ml.UpdateNode(2 * n.cfg.MetaRefreshInterval); err != nil {
		// The update goes out with the next gossip round anyway.
		n.logger.Debug("gossip metadata update not confirmed", "error", err)
	}
	return nil
}

// bootstrapLoop bootstraps raft once bootstrap-expect is satisfied (see
// decideBootstrap), re-deciding on every membership event and every
// MetaRefreshInterval. A failed bootstrap is tried again after its backoff,
// not before.
func (n *Node) bootstrapLoop() {
	defer n.loopsWG.Done()
	l := n.loops.bootstrap
	for {
		hasState := n.raft.LastIndex() > 0
		d := decideBootstrap(n.id, n.cfg.BootstrapExpect, hasState, n.Members())
		if d.Final {
			n.logger.Debug("not bootstrapping", "reason", d.Reason)
			l.Reset() // the node has raft state now: nothing left to fail
			return
		}
		switch {
		case len(d.Servers) == 0:
			n.logger.Debug("waiting to bootstrap", "reason", d.Reason)
		case l.Ready():
			n.logger.Info("bootstrapping raft", "servers", fmt.Sprint(d.Servers))
			err := l.Do(func() error {
				err := n.await(context.Background(), n.raft.BootstrapCluster(raft.Configuration{Servers: d.Servers}))
				if errors.Is(err, raft.ErrCantBootstrap) {
					return nil // some state came in meanwhile: nothing to do
				}
				return err
			})
			if err == nil {
				if err := n.refreshMeta(); err != nil {
					n.logger.Warn("refreshing gossip metadata after bootstrap", "error", err)
				}
				return
			}
			n.logger.Error("bootstrapping raft failed", "error", err, "retry_in", l.Status().Backoff)
		}
		t := l.Timer(l.Next(n.cfg.MetaRefreshInterval))
		select {
		case <-n.shutdownCh:
			t.Stop()
			return
		case <-n.bootstrapCh:
			t.Stop()
		case <-t.C():
		}
	}
}

// joinLoop joins the gossip pool through addrs, retrying with backoff
// (JoinRetryMin doubling up to JoinRetryMax) until some node other than
// this one answered.
func (n *Node) joinLoop(addrs []string) {
	defer n.loopsWG.Done()
	l := n.loops.join
	for {
		joined := 0
		var targets []string
		err := l.Do(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			targets = n.joinTargets(ctx, addrs)
			cancel()
			if len(targets) == 0 {
				return nil
			}
			var err error
			joined, err = n.ml.Join(targets)
			switch {
			case joined > 0:
				return nil
			case err == nil:
				return errors.New("no node answered")
			}
			return fmt.Errorf("joining %v: %w", targets, err)
		})
		if err == nil {
			if joined > 0 {
				n.logger.Info("joined the gossip pool", "contacted", joined)
			} else {
				n.logger.Debug("join list names only this node")
			}
			return
		}
		wait := l.Next(0)
		n.logger.Warn("join failed, retrying", "addrs", fmt.Sprint(addrs), "in", wait, "error", err)
		if !n.sleepOrShutdown(l, wait) {
			return
		}
	}
}

// reconnectLoop joins the gossip pool again through each member gossip
// declared failed, every GossipReconnectInterval, as serf does for Consul
// and Nomad. memberlist stops probing a member once it declared it dead,
// and gossips to it only for a while after that: when a network partition
// heals later, or a failed node comes back without a join list, each side
// would go on listing the other as failed. A join exchanges the full
// member state with the failed member, whereupon each refutes the other's
// claim that it is dead.
//
// Only servers of the raft configuration are tried: one that left on
// purpose or was removed is not (its address may serve another cluster by
// now). A server that is really gone costs one failed dial per interval
// until it is removed or reaped.
func (n *Node) reconnectLoop() {
	defer n.loopsWG.Done()
	t := time.NewTimer(n.cfg.GossipReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		}
		n.reconnectFailed()
		t.Reset(n.cfg.GossipReconnectInterval)
	}
}

// reconnectFailed tries once each failed member that is a server of the
// raft configuration.
func (n *Node) reconnectFailed() {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		n.logger.Debug("not reconnecting failed members: reading the raft configuration", "error", err)
		return
	}
	servers := make(map[string]bool)
	for _, s := range f.Configuration().Servers {
		servers[string(s.ID)] = true
	}
	for _, m := range n.Members() {
		if m.Name == n.id || m.Status != StatusFailed || m.Addr == "" || !servers[m.Name] {
			continue
		}
		select {
		case <-n.shutdownCh:
			return
		default:
		}
		if _, err := n.ml.Join([]string{m.Addr}); err != nil {
			n.logger.Debug("failed member still unreachable", "member", m.Name, "addr", m.Addr, "error", err)
			continue
		}
		n.logger.Info("reached a failed member again", "member", m.Name, "addr", m.Addr)
	}
}

// Join adds this node to the gossip pool through addrs (as the agent's
// -join does, once). It returns how many nodes answered.
func (n *Node) Join(addrs []string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	targets := n.joinTargets(ctx, addrs)
	if len(targets) == 0 {
		return 0, nil
	}
	joined, err := n.ml.Join(targets)
	if joined > 0 {
		return joined, nil
	}
	return 0, fmt.Errorf("joining %v: %w", targets, err)
}

// joinTargets normalises addrs (default port) and drops this node's own
// gossip address, so that one join list can be given to every node.
func (n *Node) joinTargets(ctx context.Context, addrs []string) []string {
	self, err := netip.ParseAddrPort(n.gossipAddr)
	if err != nil {
		return addrs
	}
	var out []string
	for _, a := range addrs {
		a = parseJoinAddr(a)
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			out = append(out, a)
			continue
		}
		if port != fmt.Sprint(self.Port()) {
			out = append(out, a)
			continue
		}
		ips := []netip.Addr{}
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = append(ips, ip)
		} else if resolved, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host); err == nil {
			ips = resolved
		}
		isSelf := false
		for _, ip := range ips {
			if ip.Unmap() == self.Addr().Unmap() {
				isSelf = true
			}
		}
		if !isSelf {
			out = append(out, a)
		}
	}
	return out
}

// sleepOrShutdown waits d on l's clock; it reports false if the node shut
// down first.
func (n *Node) sleepOrShutdown(l *loophealth.Loop, d time.Duration) bool {
	t := l.Timer(d)
	defer t.Stop()
	select {
	case <-n.shutdownCh:
		return false
	case <-t.C():
		return true
	}
}

// Members returns every gossip member this node knows of, itself included,
// sorted by name; failed and left members stay listed (with the time they
// entered that status) until reaped after MemberReapTime.
func (n *Node) Members() []Member {
	return n.members.list()
}
