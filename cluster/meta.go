package cluster

//go:generate go run github.com/tinylib/msgp@v1.6.5 -file meta.go -o meta_gen.go -tests=false -io=false -unexported

import (
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// metaVersion is the first byte of the gossip metadata of a cronoq node. A
// node whose metadata starts with anything else is not one of ours.
const metaVersion byte = 1

// errNotCronoq marks gossip metadata that is not a cronoq node's.
var errNotCronoq = errors.New("not a cronoq node")

// nodeMeta is what a node tells every other node through gossip.
type nodeMeta struct {
	ID       string `msgpack:"id"`
	RaftAddr string `msgpack:"ra"`
	HTTPAddr string `msgpack:"ha,omitempty"`
	Version  string `msgpack:"v,omitempty"`
	// Expect is the node's -bootstrap-expect (0 = none).
	Expect int `msgpack:"be,omitempty"`
	// HasState reports that the node has raft state (it bootstrapped,
	// joined a cluster, or restarted from a data dir that had).
	HasState bool `msgpack:"hs,omitempty"`
	// Applied is the node's raft applied index. It is published while the
	// node is not a voter, so that the leader can tell when it caught up.
	Applied uint64 `msgpack:"ai,omitempty"`
	// Leaving announces that the node is about to leave on purpose.
	// memberlist v0.7.0 reports a graceful leave and a failure alike (the
	// Node.State it hands to NotifyLeave is never set), so a node
	// publishes this intent before it leaves, as serf does with its leave
	// intents, and others record it as left rather than failed.
	Leaving bool `msgpack:"lv,omitempty"`
	// LogVersion is the newest log format the node understands (see
	// fsm.LogVersion). Releases before it advertised none: 1.
	LogVersion uint16 `msgpack:"fv,omitempty"`
}

// encodeMeta encodes m and checks that it fits memberlist's limit.
func encodeMeta(m nodeMeta) ([]byte, error) {
	out, err := m.MarshalMsg([]byte{metaVersion})
	if err != nil {
		return nil, fmt.Errorf("encoding node meta: %w", err)
	}
	if len(out) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("encoding node meta: %d bytes exceeds the gossip limit of %d (shorten the node id or addresses)",
			len(out), memberlist.MetaMaxSize)
	}
	return out, nil
}

// decodeMeta decodes gossip metadata written by encodeMeta.
func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) == 0 || b[0] != metaVersion {
		return m, errNotCronoq
	}
	rest, err := m.UnmarshalMsg(b[1:])
	if err != nil {
		return m, fmt.Errorf("decoding node meta: %w", err)
	}
	if len(rest) != 0 {
		return m, fmt.Errorf("decoding node meta: %d bytes after it", len(rest))
	}
	if m.ID == "" || m.RaftAddr == "" {
		return m, fmt.Errorf("decoding node meta: %w: missing id or raft address", errNotCronoq)
	}
	return m, nil
}
