package cluster

import (
	"context"

	"github.com/cronoq/cronoq/engine"
)

// Upgrades: every server advertises in its gossip metadata the newest log
// format it understands (Config.LogVersion). The leader writes an entry
// only if every server of the raft configuration understands it, voters
// and non-voters alike (both apply the log): its engine refuses the
// operations that need more. A server gossip has not shown is taken to
// understand the first format only, so a server that cannot say holds the
// cluster back rather than being stopped by an entry it cannot apply.

// logVersion is the newest log format every server of the raft
// configuration understands.
func (n *Node) logVersion() uint16 {
	v := n.cfg.LogVersion
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 1
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.id {
			continue
		}
		m, ok := n.members.get(string(s.ID))
		if !ok || m.LogVersion == 0 {
			return 1
		}
		v = min(v, m.LogVersion)
	}
	return v
}

// versionSync keeps the log format of a term's engine in step with the
// servers of the cluster.
type versionSync struct {
	set uint16 // the version the engine was last given
}

// sync gives eng the cluster's version if it changed.
func (vs *versionSync) sync(ctx context.Context, n *Node, eng *engine.Engine) {
	v := n.logVersion()
	if v == vs.set {
		return
	}
	if err := eng.SetLogVersion(ctx, v); err != nil {
		return // the engine stopped: the next term starts afresh
	}
	if vs.set != 0 {
		n.logger.Info("log format every server understands changed", "from", vs.set, "to", v)
	}
	vs.set = v
}
