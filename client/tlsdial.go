package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// verdictWait bounds the wait for a node's first bytes after a TLS
// handshake (see dialTLS).
const verdictWait = 5 * time.Second

// dialTLS returns a dial function that opens TLS connections (ALPN h2)
// with cfg, over which the transport speaks HTTP/2 with prior knowledge,
// as it does over plain TCP.
//
// In TLS 1.3 a node judges the client's certificate after the client's
// side of the handshake is done, so a refusal (no certificate, or one of
// another CA) would only show on the first read, where HTTP/2 hides it
// behind "client conn could not be established". So the dial waits for the
// node's first bytes (an HTTP/2 server opens with its settings) and keeps
// them for the transport: a refused certificate fails the dial with the
// node's alert, before any request is sent.
func dialTLS(d *net.Dialer, cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.NextProtos = []string{"h2"}
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			}
		}
		tc := tls.Client(raw, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			_ = raw.Close()
			return nil, fmt.Errorf("the node at %s does not offer HTTP/2 over TLS (ALPN %q)", addr, p)
		}
		deadline := time.Now().Add(verdictWait)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		_ = tc.SetReadDeadline(deadline)
		buf := make([]byte, 4096)
		n, err := tc.Read(buf)
		_ = tc.SetReadDeadline(time.Time{})
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				_ = raw.Close()
				return nil, err
			}
			n = 0 // a node that waits for the client to speak first
		}
		return &prefixConn{Conn: tc, prefix: buf[:n]}, nil
	}
}

// prefixConn is a connection whose first reads return prefix.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
