package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/cronoq/cronoq/client"
)

// cronoqSecurity is what a cronoq-secure cell adds to a plain one: a CA, a
// server certificate every node uses (nodes verify each other by the name
// server.cronoq, which `cronoq tls cert create -server` puts in every
// server certificate, with 127.0.0.1), a client certificate and the secret
// of the initial management token, all made in the cell's directory. The
// nodes run with TLS (client certificates required) and ACLs on; every
// client of the benchmark presents the client certificate and carries the
// token.
type cronoqSecurity struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	token                 string
	tls                   *tls.Config // the clients': the CA and the client certificate
}

// newCronoqSecurity makes the certificates with `bin tls` and a random
// management secret under dir.
func newCronoqSecurity(ctx context.Context, bin, dir string) (*cronoqSecurity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the TLS dir: %w", err)
	}
	s := &cronoqSecurity{dir: dir}
	var err error
	if s.caFile, _, err = tlsCreate(ctx, bin, "ca", "create", "-dir", dir); err != nil {
		return nil, err
	}
	if s.serverCert, s.serverKey, err = tlsCreate(ctx, bin, "cert", "create", "-server", "-dir", dir); err != nil {
		return nil, err
	}
	if s.clientCert, s.clientKey, err = tlsCreate(ctx, bin, "cert", "create", "-client", "-dir", dir); err != nil {
		return nil, err
	}
	s.token = rand.Text()
	if err := os.WriteFile(filepath.Join(dir, "management-token"), []byte(s.token+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing the management secret: %w", err)
	}
	caPEM, err := os.ReadFile(s.caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", s.caFile)
	}
	pair, err := tls.LoadX509KeyPair(s.clientCert, s.clientKey)
	if err != nil {
		return nil, fmt.Errorf("loading the client certificate: %w", err)
	}
	s.tls = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return s, nil
}

// tlsCreate runs `bin tls ARGS -o json` and returns the paths it saved.
func tlsCreate(ctx context.Context, bin string, args ...string) (cert, key string, err error) {
	args = append(append([]string{"tls"}, args...), "-o", "json")
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", "", fmt.Errorf("cronoq %v: %w: %s", args, err, ee.Stderr)
		}
		return "", "", fmt.Errorf("cronoq %v: %w", args, err)
	}
	var saved struct {
		Cert string `json:"cert"`
		Key  string `json:"key"`
	}
	if err := json.Unmarshal(out, &saved); err != nil {
		return "", "", fmt.Errorf("reading the output of cronoq %v: %w", args, err)
	}
	return saved.Cert, saved.Key, nil
}

// agentArgs are the flags every node gets.
func (s *cronoqSecurity) agentArgs() []string {
	return []string{
		"-tls-ca", s.caFile,
		"-tls-cert", s.serverCert,
		"-tls-key", s.serverKey,
		"-tls-verify-incoming",
		"-acl",
		"-acl-initial-management", s.token,
	}
}

// clientOptions make an SDK client use TLS with the client certificate
// and carry the token.
func (s *cronoqSecurity) clientOptions() []client.Option {
	return []client.Option{
		client.WithTLS(client.TLSConfig{CAFile: s.caFile, CertFile: s.clientCert, KeyFile: s.clientKey}),
		client.WithToken(s.token),
	}
}

// workerTransport is the transport of a worker's client, which the ack tap
// wraps (so the SDK cannot make it: WithTLS excludes WithHTTPClient): HTTP/2
// with prior knowledge over a TLS connection with ALPN h2, as the SDK's own
// transport does with WithTLS.
func (s *cronoqSecurity) workerTransport() (*http.Transport, error) {
	tr, err := h2cTransport()
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := s.tls.Clone()
		cfg.NextProtos = []string{"h2"}
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			_ = tc.Close()
			return nil, fmt.Errorf("the node at %s does not offer HTTP/2 over TLS (ALPN %q)", addr, p)
		}
		return tc, nil
	}
	return tr, nil
}

// httpClient is the client of the health checks and the profiler: HTTPS
// with the client certificate.
func (s *cronoqSecurity) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: s.tls.Clone(), ForceAttemptHTTP2: true}}
}

// waitToken waits until a call with the token succeeds (the leader makes
// the management token once it leads, and the node asked must have applied
// it), then checks that a call without it is refused, so that the cell
// measures a cluster that enforces ACLs.
func (s *cronoqSecurity) waitToken(ctx context.Context, c *client.Client, addrs []string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Counts(cctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a call with the management token still fails after 60s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	anon, err := client.New(addrs, client.WithTLS(client.TLSConfig{CAFile: s.caFile, CertFile: s.clientCert, KeyFile: s.clientKey}))
	if err != nil {
		return err
	}
	defer anon.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = anon.Counts(cctx)
	if !errors.Is(err, client.ErrPermissionDenied) {
		return fmt.Errorf("a call without a token was not refused with permission denied (are ACLs on?): %v", err)
	}
	return nil
}
