package cluster

import (
	"net"
	"net/netip"
	"strings"
)

// exposure is an address of the node that other machines may reach.
type exposure struct {
	what string // api, raft or gossip
	addr string
}

// plaintextExposure lists the addresses of the node that are not on
// loopback when TLS is off (none when it is on): their traffic is neither
// encrypted nor authenticated.
func (c Config) plaintextExposure() []exposure {
	if c.TLS != nil {
		return nil
	}
	var out []exposure
	seen := map[string]bool{}
	for _, e := range []exposure{
		{"API", c.HTTPBindAddr}, {"API", c.HTTPAddr}, {"raft", c.RaftAddr}, {"gossip", c.GossipAddr},
	} {
		if e.addr == "" || seen[e.what] || onLoopback(e.addr) {
			continue
		}
		seen[e.what] = true
		out = append(out, e)
	}
	return out
}

// onLoopback reports whether a host:port address is on loopback (a
// loopback IP or "localhost"); a host name is taken as reachable from
// elsewhere.
func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// plaintextReason is the health reason for exposed addresses ("" for none).
func plaintextReason(exposed []exposure) string {
	if len(exposed) == 0 {
		return ""
	}
	parts := make([]string, len(exposed))
	for i, e := range exposed {
		parts[i] = e.what + " " + e.addr
	}
	return "tls disabled on non-loopback address: " + strings.Join(parts, ", ")
}

// warnPlaintext logs, once at start, each address that is exposed without
// TLS.
func (n *Node) warnPlaintext() {
	for _, e := range n.plaintext {
		n.logger.Warn("TLS is off and the "+e.what+" listens on a non-loopback address: its traffic is neither encrypted nor authenticated (see -tls-ca, -tls-cert, -tls-key)",
			"addr", e.addr)
	}
}
