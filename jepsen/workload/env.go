// Package workload drives the cluster during a run: queue submitters and
// workers, a per-task register workload for linearizability checking, and
// recurring schedules. Every operation is recorded in the history; every
// connection leaves from the process's own source address.
package workload

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/jepsen/history"
)

// Node names a node of the cluster for the workloads.
type Node struct {
	ID   string
	Addr string // host:port of the API
}

// Env is what every workload needs.
type Env struct {
	Rec   *history.Recorder
	Nodes []Node
	// TTL is the cluster's heartbeat window (lease lifetime without
	// heartbeats).
	TTL time.Duration
	// Seed feeds every random choice of the workloads.
	Seed uint64
	// TLS, when set, is the client TLS configuration every connection to
	// the nodes uses (the CA, the client certificate, the server name).
	TLS *tls.Config
	// Token, when set, is the ACL token every call carries.
	Token string

	mu      sync.Mutex
	clients map[string]*client.Client
	readers map[string]*http.Client // per source ip, shared by ReadClient's clients
	rngs    int
}

// Rand returns a new random source derived from the seed; each caller gets a
// distinct stream.
func (e *Env) Rand() *rand.Rand {
	e.mu.Lock()
	e.rngs++
	n := e.rngs
	e.mu.Unlock()
	return rand.New(rand.NewPCG(e.Seed, uint64(n)*0x9e3779b97f4a7c15))
}

// Client returns the SDK client of a process (source ip) talking to node
// (only that node's address: the SDK still follows leader hints).
func (e *Env) Client(ip string, node Node) (*client.Client, error) {
	k := ip + ">" + node.Addr
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.clients == nil {
		e.clients = make(map[string]*client.Client)
	}
	if c, ok := e.clients[k]; ok {
		return c, nil
	}
	c, err := client.New([]string{node.Addr}, e.secure(client.WithLocalAddr(ip), client.WithTimeout(2*time.Second),
		client.WithBackoff(50*time.Millisecond, 400*time.Millisecond), client.WithWaitPoll(2*time.Second))...)
	if err != nil {
		return nil, err
	}
	e.clients[k] = c
	return c, nil
}

// ClientAll returns the SDK client of a process that knows every node.
func (e *Env) ClientAll(ip string) (*client.Client, error) {
	k := ip + ">*"
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.clients == nil {
		e.clients = make(map[string]*client.Client)
	}
	if c, ok := e.clients[k]; ok {
		return c, nil
	}
	addrs := make([]string, len(e.Nodes))
	for i, n := range e.Nodes {
		addrs[i] = n.Addr
	}
	c, err := client.New(addrs, e.secure(client.WithLocalAddr(ip), client.WithTimeout(3*time.Second),
		client.WithBackoff(50*time.Millisecond, 500*time.Millisecond), client.WithWaitPoll(2*time.Second))...)
	if err != nil {
		return nil, err
	}
	e.clients[k] = c
	return c, nil
}

// ReadClient returns a new SDK client of a process (source ip) for one
// read from node, to Close after the call. Unlike Client's, it has followed
// no leader hint yet, so the read goes to node itself, which must answer
// linearizably (forward it, or serve it only as the leader): a node that
// answers from its own replica is caught. Its connections are shared with
// the other ReadClients of ip.
func (e *Env) ReadClient(ip string, node Node) (*client.Client, error) {
	e.mu.Lock()
	if e.readers == nil {
		e.readers = make(map[string]*http.Client)
	}
	hc, ok := e.readers[ip]
	if !ok {
		hc = e.httpClient(ip)
		e.readers[ip] = hc
	}
	e.mu.Unlock()
	// hc dials TLS itself and carries the token: WithTLS and WithToken
	// are not needed (WithTLS excludes WithHTTPClient).
	return client.New([]string{node.Addr}, client.WithHTTPClient(hc), client.WithTimeout(2*time.Second),
		client.WithBackoff(50*time.Millisecond, 400*time.Millisecond), client.WithWaitPoll(2*time.Second))
}

// secure adds the TLS and token options of e to opts.
func (e *Env) secure(opts ...client.Option) []client.Option {
	if e.TLS != nil {
		opts = append(opts, client.WithTLS(client.TLSConfig{
			CAPool: e.TLS.RootCAs, Certificate: &e.TLS.Certificates[0], ServerName: e.TLS.ServerName,
		}))
	}
	if e.Token != "" {
		opts = append(opts, client.WithToken(e.Token))
	}
	return opts
}

// Close closes every SDK client.
func (e *Env) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.clients {
		_ = c.Close()
	}
	e.clients = nil
	for _, hc := range e.readers {
		hc.CloseIdleConnections()
	}
	e.readers = nil
}

// NodeByID returns the node named id.
func (e *Env) NodeByID(id string) (Node, bool) {
	for _, n := range e.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// NodeByAddr returns the node whose API address is addr.
func (e *Env) NodeByAddr(addr string) (Node, bool) {
	for _, n := range e.Nodes {
		if n.Addr == addr {
			return n, true
		}
	}
	return Node{}, false
}

// httpClient returns an HTTP client speaking HTTP/2 with prior knowledge
// from ip, for the generated worker-stream client and the register's
// readers: without TLS (h2c), or, when e.TLS is set, over TLS connections
// it opens itself (ALPN h2), as the SDK does, so that URLs stay http://.
// When e.Token is set every request carries it.
func (e *Env) httpClient(ip string) *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	dial := d.DialContext
	if e.TLS != nil {
		cfg := e.TLS.Clone()
		cfg.NextProtos = []string{"h2"}
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(raw, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = raw.Close()
				return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
			}
			return tc, nil
		}
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		DialContext:         dial,
		Protocols:           &p,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     10 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 2 * time.Second,
			PingTimeout:     2 * time.Second,
		},
	}
	if e.Token != "" {
		return &http.Client{Transport: &tokenTransport{base: tr, token: e.Token}}
	}
	return &http.Client{Transport: tr}
}

// tokenTransport sets the ACL token header on every request.
type tokenTransport struct {
	base  *http.Transport
	token string
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set(client.HeaderToken, t.token)
	return t.base.RoundTrip(r)
}

// CloseIdleConnections closes the transport's idle connections.
func (t *tokenTransport) CloseIdleConnections() { t.base.CloseIdleConnections() }

// Outcome classifies an SDK error for the history.
//   - nil: ok
//   - outcome unknown (an answer saying so, a lost connection, or the SDK
//     giving up while an attempt may have run): info
//   - invalid, overloaded: the node refused before doing anything: fail
//   - the call's ctx ended and the SDK does not report an unknown outcome:
//     every attempt was refused unexecuted (no leader, not the leader,
//     shutting down, connection refused): fail
//   - anything else: info
func Outcome(err error) history.Type {
	switch {
	case err == nil:
		return history.OK
	case errors.Is(err, client.ErrOutcomeUnknown):
		return history.Info
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrOverloaded):
		return history.Fail
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return history.Fail
	}
	return history.Info
}

// leaderHint extracts the leader's API address from a not_leader answer.
func leaderHint(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		if a := ce.Meta().Get("Cronoq-Leader-Addr"); a != "" {
			return a
		}
	}
	return ""
}

// errorKind is the cronoq detail kind of an answer ("" when none).
func errorKind(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Meta().Get("Cronoq-Error")
	}
	return ""
}

// ResultFor is the output a worker reports for payload under token: it
// names the token, so the final state tells which attempt's result won.
func ResultFor(payload string, token uint64) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d", payload, token)
	return fmt.Sprintf("r-%d-%016x", token, h.Sum64())
}

// ErrorFor is the message of a failure reported under token.
func ErrorFor(token uint64) string { return fmt.Sprintf("e-%d", token) }

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func boolp(b bool) *bool { return &b }
