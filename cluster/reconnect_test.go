package cluster_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
)

// memberStatuses is n's view of the gossip pool: "name=status ...".
func memberStatuses(n *cluster.Node) string {
	var parts []string
	for _, m := range n.Members() {
		parts = append(parts, m.Name+"="+string(m.Status))
	}
	return strings.Join(parts, " ")
}

// TestGossipReconnectsFailedMembers: a member gossip declared failed is
// reached again once it is back, although it contacts no one itself.
// memberlist never probes a dead member again; without the reconnect loop
// the others would list it as failed for ever (as the two sides of a healed
// network partition would each other).
func TestGossipReconnectsFailedMembers(t *testing.T) {
	c := newTestCluster(t)
	// memberlist gossips to a dead member for a while (four push-pull
	// intervals with test timings): shorten that, and restart the member
	// after it, so that only a reconnect can bring it back.
	const pushPull = 250 * time.Millisecond
	var cfgs []cluster.Config
	var join []string
	for _, name := range []string{"n1", "n2", "n3"} {
		cfg := c.config(name)
		cfg.BootstrapExpect = 3
		cfg.GossipPushPullInterval = pushPull
		cfgs = append(cfgs, cfg)
		join = append(join, cfg.GossipAddr)
	}
	for _, cfg := range cfgs {
		cfg.Join = join
		c.start(cfg)
	}
	c.leader()
	all := "n1=alive n2=alive n3=alive"
	for _, n := range c.live() {
		require.Eventually(t, func() bool { return memberStatuses(n) == all }, 10*time.Second, 10*time.Millisecond,
			"%s sees %s", n.ID(), memberStatuses(n))
	}

	c.stop("n3")
	for _, id := range []string{"n1", "n2"} {
		n := c.node(id)
		require.Eventually(t, func() bool {
			m, ok := n.Member("n3")
			return ok && m.Status == cluster.StatusFailed
		}, 10*time.Second, 10*time.Millisecond, "%s never saw n3 fail: %s", id, memberStatuses(n))
	}

	time.Sleep(4*pushPull + 500*time.Millisecond) // past the gossip to the dead

	// Back on its data dir and addresses, with no join list: only the
	// others' reconnect attempts can bring it back into the pool.
	cfg := c.Node("n3").Config
	cfg.Join = nil
	n3 := c.start(cfg)
	start := time.Now()
	for _, n := range []*cluster.Node{c.node("n1"), c.node("n2"), n3} {
		require.Eventually(t, func() bool { return memberStatuses(n) == all }, 10*cfg.GossipReconnectInterval+5*time.Second,
			10*time.Millisecond, "%s sees %s", n.ID(), memberStatuses(n))
	}
	t.Logf("all three alive again %s after the restart (reconnect interval %s)", time.Since(start).Round(time.Millisecond), cfg.GossipReconnectInterval)
	for _, n := range c.live() {
		h := n.Health()
		for _, r := range h.Reasons {
			require.NotContains(t, r, "n3 is failed", "%s: %q", n.ID(), h.Reasons)
		}
	}
}
