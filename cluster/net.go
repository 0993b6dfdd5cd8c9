package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/internal/tlsutil"
)

// parseHostPort parses an "ip:port" address with a literal, specified IP (a
// node advertises it and dials from it, so neither a host name nor 0.0.0.0
// will do).
func parseHostPort(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not ip:port: %w", s, err)
	}
	if ap.Addr().IsUnspecified() {
		return netip.AddrPort{}, fmt.Errorf("%q: the address is advertised to other nodes, so it must be a specific IP", s)
	}
	return ap, nil
}

// boundDialer returns a dialer whose connections leave from ip, so that a
// firewall rule on the node's address cuts every link of the node, in both
// directions.
func boundDialer(ip netip.Addr) net.Dialer {
	return net.Dialer{LocalAddr: &net.TCPAddr{IP: ip.AsSlice(), Zone: ip.Zone()}}
}

// streamLayer is raft's network layer: a TCP listener plus a dialer bound to
// the node's raft IP (raft's stock TCPStreamLayer dials without a source
// address). It tracks every connection it accepted or dialed and closes them
// all on Close: raft's transport closes neither its inbound connections nor
// its pooled outbound ones, which would leave goroutines reading on both
// sides after a shutdown. With TLS (useTLS), every link is mutual TLS
// between server certificates of the CA.
type streamLayer struct {
	ln     net.Listener
	addr   net.Addr
	dialer net.Dialer

	// tls, when set, holds the node's certificates; serverTLS is the
	// configuration of accepted connections.
	tls       *tlsutil.Reloader
	serverTLS *tls.Config
	// tlsFailures counts dials whose TLS handshake failed.
	tlsFailures atomic.Uint64

	mu      sync.Mutex
	closed  bool
	blocked bool // see block
	conns   map[*trackedConn]struct{}
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// newStreamLayer listens on bind ("ip:port", port 0 picks one) and dials from
// the same IP.
func newStreamLayer(bind netip.AddrPort) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bind.String())
	if err != nil {
		return nil, fmt.Errorf("listening for raft on %s: %w", bind, err)
	}
	return &streamLayer{
		ln:     ln,
		addr:   ln.Addr(),
		dialer: boundDialer(bind.Addr()),
		conns:  make(map[*trackedConn]struct{}),
	}, nil
}

// useTLS makes the layer speak mutual TLS with the certificates r holds
// (at each handshake: a reload applies to new connections). It must be
// called before the layer is used.
func (s *streamLayer) useTLS(r *tlsutil.Reloader) {
	s.tls = r
	s.serverTLS = r.PeerServerConfig()
}

// Dial implements raft.StreamLayer. With TLS the handshake is part of the
// dial (and of its timeout), so that a peer that refuses this node's
// certificate, or whose certificate this node refuses, fails the dial.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := s.dialer
	d.Timeout = timeout
	s.mu.Lock()
	blocked := s.blocked
	s.mu.Unlock()
	if blocked {
		return nil, errBlocked
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		tc := tls.Client(c, s.tls.PeerClientConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			s.tlsFailures.Add(1)
			return nil, fmt.Errorf("TLS handshake with raft peer %s: %w", address, err)
		}
		c = tc
	}
	return s.track(c)
}

// errBlocked is the dial error of a blocked layer.
var errBlocked = errors.New("raft stream layer blocked")

// block cuts (or restores) every raft link of the node, as a network
// partition would: open connections are closed, dials fail and accepted
// connections are dropped. It exists for in-process fault tests.
func (s *streamLayer) block(b bool) {
	s.mu.Lock()
	s.blocked = b
	var conns []*trackedConn
	if b {
		for c := range s.conns {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Accept implements net.Listener.
func (s *streamLayer) Accept() (net.Conn, error) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		blocked := s.blocked
		s.mu.Unlock()
		if blocked {
			c.Close()
			continue
		}
		if s.serverTLS != nil {
			// The handshake runs on raft's first read, in the goroutine
			// that serves the connection, not in the accept loop.
			c = tls.Server(c, s.serverTLS)
		}
		return s.track(c)
	}
}

func (s *streamLayer) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, layer: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

// Close implements net.Listener: it stops accepting and closes every
// connection of the layer.
func (s *streamLayer) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	return err
}

// Addr implements net.Listener: the address other nodes reach this one at.
func (s *streamLayer) Addr() net.Addr { return s.addr }

// trackedConn removes itself from its layer when closed.
type trackedConn struct {
	net.Conn
	layer *streamLayer
	once  sync.Once
}

// Close closes the connection. A TLS connection is closed without a
// close_notify alert, which could block for seconds on a peer that does not
// read (raft does not rely on it).
func (c *trackedConn) Close() error {
	conn := c.Conn
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	err := conn.Close()
	c.once.Do(func() {
		c.layer.mu.Lock()
		delete(c.layer.conns, c)
		c.layer.mu.Unlock()
	})
	return err
}

// gossipTransport is memberlist's NetTransport with stream dials bound to the
// node's gossip IP. Its UDP packets already leave from the bound socket.
type gossipTransport struct {
	*memberlist.NetTransport
	dialer net.Dialer
	// ctx ends at Shutdown, cancelling dials in progress (a join to an
	// unreachable address would otherwise hold shutdown for a TCP timeout).
	ctx    context.Context
	cancel context.CancelFunc
}

var _ memberlist.NodeAwareTransport = (*gossipTransport)(nil)

// newGossipTransport binds TCP and UDP on bind (port 0 picks one free for
// both).
func newGossipTransport(bind netip.AddrPort, logger *log.Logger) (*gossipTransport, error) {
	cfg := &memberlist.NetTransportConfig{
		BindAddrs: []string{bind.Addr().String()},
		BindPort:  int(bind.Port()),
		Logger:    logger,
	}
	// Binding TCP and UDP to the same random port races with other
	// processes; memberlist itself retries the same way.
	tries := 1
	if bind.Port() == 0 {
		tries = 10
	}
	var lastErr error
	for range tries {
		nt, err := memberlist.NewNetTransport(cfg)
		if err == nil {
			ctx, cancel := context.WithCancel(context.Background())
			return &gossipTransport{NetTransport: nt, dialer: boundDialer(bind.Addr()), ctx: ctx, cancel: cancel}, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("listening for gossip on %s: %w", bind, lastErr)
}

// DialTimeout implements memberlist.Transport.
func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *gossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := t.dialer
	d.Timeout = timeout
	return d.DialContext(t.ctx, "tcp", a.Addr)
}

// Shutdown implements memberlist.Transport: it cancels dials in progress
// and closes the listeners.
func (t *gossipTransport) Shutdown() error {
	t.cancel()
	return t.NetTransport.Shutdown()
}
