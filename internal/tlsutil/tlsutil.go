// Package tlsutil builds the TLS configurations of cronoq's nodes and
// clients from PEM files, reloads a node's certificates without a restart,
// and makes a CA and the certificates it signs (`cronoq tls`).
//
// Every server certificate names ServerName ("server.cronoq") and allows
// both server and client authentication: a node presents it to clients, to
// the other nodes it dials (raft, forwarding) and to those that dial it.
// Nodes check that name on each other, so a client certificate of the same
// CA (ClientName, client authentication only) reaches the API but can never
// pass for a node.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Names every certificate made by GenerateCert carries.
const (
	// ServerName is the DNS name of every server certificate; nodes verify
	// it on each other.
	ServerName = "server.cronoq"
	// ClientName is the DNS name (and common name) of client certificates.
	ClientName = "client.cronoq"
)

// MinVersion is the oldest TLS version cronoq speaks (1.3 is preferred:
// Go negotiates the newest both sides support).
const MinVersion = tls.VersionTLS12

// LoadCAPool reads the PEM certificates of file (one CA or a bundle).
func LoadCAPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("reading CA file %s: %w", file, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("reading CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// LoadKeyPair reads a PEM certificate (with its chain, if any) and its
// private key; the result has its Leaf set.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("loading certificate %s with key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("loading certificate %s: %w", certFile, err)
		}
	}
	return cert, nil
}

// Reloader holds a node's CA pool and certificate, read from files, and
// reads them again on Reload. The configurations it returns consult it at
// every handshake, so that a reload applies to new connections at once;
// connections already open keep the certificates they were made with.
type Reloader struct {
	caFile, certFile, keyFile string

	mu   sync.RWMutex
	pool *x509.CertPool
	cert *tls.Certificate
}

// NewReloader reads the CA file and the node's certificate and key. The
// certificate must be a valid server certificate of that CA (see Reload).
func NewReloader(caFile, certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{caFile: caFile, certFile: certFile, keyFile: keyFile}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again. It keeps what it held when any of them
// cannot be read, or when the certificate is not a server certificate (for
// ServerName, valid now, for server and client authentication) that the CA
// file verifies.
func (r *Reloader) Reload() error {
	pool, err := LoadCAPool(r.caFile)
	if err != nil {
		return err
	}
	cert, err := LoadKeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	if err := checkServerCert(cert, pool); err != nil {
		return fmt.Errorf("certificate %s: %w", r.certFile, err)
	}
	r.mu.Lock()
	r.pool, r.cert = pool, &cert
	r.mu.Unlock()
	return nil
}

// checkServerCert checks that cert can serve as a node's certificate.
func checkServerCert(cert tls.Certificate, pool *x509.CertPool) error {
	leaf := cert.Leaf
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("not a valid server certificate of the CA: %w", err)
		}
	}
	if err := leaf.VerifyHostname(ServerName); err != nil {
		return fmt.Errorf("not a cronoq server certificate: it does not name %s (make one with 'cronoq tls cert create -server')", ServerName)
	}
	return nil
}

// current returns what the reloader holds.
func (r *Reloader) current() (*x509.CertPool, *tls.Certificate) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pool, r.cert
}

// Leaf is the node's current certificate.
func (r *Reloader) Leaf() *x509.Certificate {
	_, c := r.current()
	return c.Leaf
}

// Files returns the files the reloader reads.
func (r *Reloader) Files() (caFile, certFile, keyFile string) {
	return r.caFile, r.certFile, r.keyFile
}

// ServerConfig is the configuration of the node's API listener: it
// presents the node's certificate, offers HTTP/2 and HTTP/1.1 through ALPN
// and, with verifyIncoming, requires a client certificate of the CA;
// without it, a client certificate is optional but, when given, must be
// one of the CA's.
func (r *Reloader) ServerConfig(verifyIncoming bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if verifyIncoming {
		auth = tls.RequireAndVerifyClientCert
	}
	return r.serverConfig(auth, []string{"h2", "http/1.1"}, nil)
}

// PeerServerConfig is the configuration of the node's raft listener:
// mutual TLS, where the dialing node must present a server certificate of
// the CA (one that names ServerName).
func (r *Reloader) PeerServerConfig() *tls.Config {
	return r.serverConfig(tls.RequireAndVerifyClientCert, nil, verifyPeerIsServer)
}

func (r *Reloader) serverConfig(auth tls.ClientAuthType, protos []string, verify func(tls.ConnectionState) error) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool, cert := r.current()
			return &tls.Config{
				MinVersion:       MinVersion,
				Certificates:     []tls.Certificate{*cert},
				ClientAuth:       auth,
				ClientCAs:        pool,
				NextProtos:       protos,
				VerifyConnection: verify,
			}, nil
		},
	}
}

// verifyPeerIsServer checks that the (already verified) client certificate
// of a connection is a node's.
func verifyPeerIsServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	if err := cs.PeerCertificates[0].VerifyHostname(ServerName); err != nil {
		return fmt.Errorf("the client certificate is not a cronoq server certificate: %w", err)
	}
	return nil
}

// PeerClientConfig is the configuration for one connection to another node
// (raft, forwarded API calls): it presents the node's certificate and
// verifies that the other node's is a server certificate (ServerName) of
// the CA. It reflects the certificates held at the time of the call: build
// one for each dial.
func (r *Reloader) PeerClientConfig() *tls.Config {
	pool, cert := r.current()
	return &tls.Config{
		MinVersion:   MinVersion,
		Certificates: []tls.Certificate{*cert},
		RootCAs:      pool,
		ServerName:   ServerName,
	}
}

// ClientFiles name the files of a client's TLS configuration. All are
// optional: without CAFile the system's roots verify the nodes, without
// CertFile and KeyFile (both or neither) no client certificate is sent.
type ClientFiles struct {
	CAFile   string
	CertFile string
	KeyFile  string
	// ServerName is the name the nodes' certificates are checked for
	// (default: the host of the address dialled).
	ServerName string
}

// ClientConfig builds the TLS configuration of an API client from files.
// It names no application protocol: an http.Transport adds those it
// speaks.
func ClientConfig(f ClientFiles) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion: MinVersion,
		ServerName: f.ServerName,
	}
	if f.CAFile != "" {
		pool, err := LoadCAPool(f.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		cert, err := LoadKeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	return cfg, nil
}
