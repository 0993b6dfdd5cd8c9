package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
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
	"github.com/cronoq/cronoq/jepsen/workload"
)

// tlsServerName is the name every server certificate of `cronoq tls cert
// create -server` carries, which the nodes check on each other.
const tlsServerName = "server.cronoq"

// secureSetup is the material of a -secure run: a CA, one server
// certificate every node serves, a client certificate every harness
// process presents, a gossip key and the initial management token's
// secret. The files live in the run's tls/ folder.
type secureSetup struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	GossipKey                                        string
	Secret                                           string
	// Client is the TLS configuration of every harness connection.
	Client *tls.Config
}

// prepareSecure makes the material with the node binary's own commands
// (`cronoq tls ca create`, `cronoq tls cert create`, `cronoq operator
// keyring generate`) into dir.
func prepareSecure(ctx context.Context, bin, dir string) (*secureSetup, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	run := func(args ...string) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var stderr bytes.Buffer
		cmd := exec.CommandContext(cctx, bin, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %v: %w: %s", filepath.Base(bin), args, err, bytes.TrimSpace(stderr.Bytes()))
		}
		return out, nil
	}
	s := &secureSetup{CA: filepath.Join(dir, "cronoq-ca.pem")}
	if _, err := run("tls", "ca", "create", "-dir", dir, "-o", "json"); err != nil {
		return nil, fmt.Errorf("making the CA: %w", err)
	}
	pair := func(kind string) (cert, key string, err error) {
		out, err := run("tls", "cert", "create", "-"+kind, "-dir", dir, "-o", "json")
		if err != nil {
			return "", "", fmt.Errorf("making the %s certificate: %w", kind, err)
		}
		var p struct{ Cert, Key string }
		if err := json.Unmarshal(out, &p); err != nil || p.Cert == "" || p.Key == "" {
			return "", "", fmt.Errorf("making the %s certificate: unexpected output %q", kind, out)
		}
		return p.Cert, p.Key, nil
	}
	var err error
	if s.ServerCert, s.ServerKey, err = pair("server"); err != nil {
		return nil, err
	}
	if s.ClientCert, s.ClientKey, err = pair("client"); err != nil {
		return nil, err
	}
	out, err := run("operator", "keyring", "generate", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("making the gossip key: %w", err)
	}
	var k struct{ Key string }
	if err := json.Unmarshal(out, &k); err != nil || k.Key == "" {
		return nil, fmt.Errorf("making the gossip key: unexpected output %q", out)
	}
	s.GossipKey = k.Key
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("making the management secret: %w", err)
	}
	s.Secret = hex.EncodeToString(b)

	caPEM, err := os.ReadFile(s.CA)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("reading the CA: no certificate in %s", s.CA)
	}
	cert, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("loading the client certificate: %w", err)
	}
	s.Client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: tlsServerName, MinVersion: tls.VersionTLS12}
	return s, nil
}

// agentArgs are the node flags of the secure setup: TLS everywhere with
// client certificates required, gossip encryption, ACLs with an initial
// management token.
func (s *secureSetup) agentArgs() []string {
	return []string{
		"-tls-ca", s.CA, "-tls-cert", s.ServerCert, "-tls-key", s.ServerKey, "-tls-verify-incoming",
		"-encrypt", s.GossipKey,
		"-acl", "-acl-initial-management", s.Secret,
	}
}

// waitSecure waits until every node knows the management token (the
// leader makes it once it leads; the followers apply it), then checks that
// the security is really on: a call without a token is refused, a plain
// HTTP request is not served, a TLS client without a certificate is turned
// away. It returns what it found, for the summary.
func waitSecure(ctx context.Context, s *secureSetup, env *workload.Env) ([]string, error) {
	for _, n := range env.Nodes {
		for {
			c, err := env.Client("127.0.0.1", n)
			if err != nil {
				return nil, err
			}
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			tok, anonymous, enabled, err := c.ACLSelf(actx)
			cancel()
			if err == nil && !enabled {
				return nil, fmt.Errorf("node %s answers with ACLs off", n.ID)
			}
			if err == nil && !anonymous && tok.Management {
				break
			}
			if !sleepCtx(ctx, 250*time.Millisecond) {
				return nil, fmt.Errorf("node %s does not know the management token yet (last answer: anonymous %v, error %v): %w", n.ID, anonymous, err, ctx.Err())
			}
		}
	}
	var notes []string
	n := env.Nodes[0]

	// Anonymous: refused (the anonymous policy grants nothing).
	anon, err := client.New([]string{n.Addr}, client.WithLocalAddr("127.0.0.1"), client.WithTimeout(3*time.Second),
		client.WithTLS(client.TLSConfig{CAPool: s.Client.RootCAs, Certificate: &s.Client.Certificates[0], ServerName: tlsServerName}))
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, _, err = anon.List(actx, client.ListOptions{Pools: []string{workload.QueuePool}, Limit: 1})
	cancel()
	_ = anon.Close()
	if !errors.Is(err, client.ErrPermissionDenied) {
		return nil, fmt.Errorf("a call without a token to %s was not refused as permission denied: %v", n.ID, err)
	}
	notes = append(notes, "a call without a token is refused (permission denied)")

	d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	get := func(scheme string, cfg *tls.Config) (int, error) {
		tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: cfg, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr, Timeout: 3 * time.Second}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+n.Addr+"/v1/health", nil)
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Plain HTTP: the TLS listener does not serve it.
	if code, err := get("http", nil); err == nil && code == http.StatusOK {
		return nil, fmt.Errorf("%s serves plain HTTP", n.ID)
	}
	// TLS without a client certificate: refused (-tls-verify-incoming).
	if code, err := get("https", &tls.Config{RootCAs: s.Client.RootCAs, ServerName: tlsServerName, MinVersion: tls.VersionTLS12}); err == nil {
		return nil, fmt.Errorf("%s served a TLS client without a certificate (HTTP %d)", n.ID, code)
	}
	// And with it: served.
	if code, err := get("https", s.Client); err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("health of %s with the client certificate: HTTP %d, %v", n.ID, code, err)
	}
	notes = append(notes, "plain HTTP and TLS without a client certificate are not served")
	return notes, nil
}
