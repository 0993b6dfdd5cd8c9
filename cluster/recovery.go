package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/fsm"
)

// PeersFile is the name, in the raft directory of a data dir
// (<data-dir>/raft/peers.json), of the file that drives a lost-quorum
// recovery, as Consul's and Nomad's peers.json do:
//
//	[{"id": "node1", "address": "10.0.0.1:8651", "non_voter": false}]
//
// When a node starts and finds it, it replaces the raft configuration
// stored in its data dir with the servers the file lists (raft's
// RecoverCluster: every entry of its log is taken as committed), then
// deletes the file. See docs/operations.md.
const PeersFile = "peers.json"

// recoverPeers does the lost-quorum recovery when raftDir holds a
// peers.json; it reports whether it did. It runs before raft starts, on the
// node's stores.
func (n *Node) recoverPeers(rc *raft.Config, raftDir string, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, trans raft.Transport,
) (bool, error) {
	path := filepath.Join(raftDir, PeersFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("checking for %s: %w", path, err)
	}
	conf, err := raft.ReadConfigJSON(path)
	if err != nil {
		return false, fmt.Errorf("lost-quorum recovery: reading %s: %w", path, err)
	}
	self := false
	var servers []string
	for _, s := range conf.Servers {
		servers = append(servers, fmt.Sprintf("%s=%s (%s)", s.ID, s.Address, s.Suffrage))
		if string(s.ID) == n.id {
			self = true
			if s.Suffrage != raft.Voter {
				return false, fmt.Errorf("lost-quorum recovery: %s lists this node (%s) as a non-voter; a recovering node must be a voter", path, n.id)
			}
			if string(s.Address) != n.raftAddr {
				n.logger.Warn("lost-quorum recovery: peers.json gives this node another raft address than it listens on",
					"peers_json_address", s.Address, "raft_addr", n.raftAddr)
			}
		}
	}
	if !self {
		return false, fmt.Errorf("lost-quorum recovery: %s does not list this node (id %q)", path, n.id)
	}
	n.logger.Warn("lost-quorum recovery: found peers.json, replacing the raft configuration",
		"path", path, "servers", servers)
	// RecoverCluster replays the log into a state of its own and writes a
	// snapshot of it with the new configuration; the node's state is then
	// restored from that snapshot when raft starts.
	scratch := fsm.NewRaftFSM(fsm.NewVersion(n.cfg.LogVersion))
	if err := raft.RecoverCluster(rc, scratch, logs, stable, snaps, trans, conf); err != nil {
		return false, fmt.Errorf("lost-quorum recovery from %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("lost-quorum recovery: deleting %s after recovering: %w", path, err)
	}
	n.logger.Warn("lost-quorum recovery done: the raft configuration is now the servers of peers.json; the file was deleted",
		"servers", servers)
	return true, nil
}
