package testcluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/tlsutil"
)

// CA is a certificate authority of a test, its files in a temporary
// directory.
type CA struct {
	t       testing.TB
	Dir     string
	File    string // the CA certificate, PEM
	certPEM []byte
	keyPEM  []byte

	mu sync.Mutex
	n  int // files written
}

// NewCA makes a CA (with tlsutil, as `cronoq tls ca create` does).
func NewCA(t testing.TB) *CA {
	t.Helper()
	certPEM, keyPEM, err := tlsutil.GenerateCA(1, time.Now())
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(file, certPEM, 0o600))
	return &CA{t: t, Dir: dir, File: file, certPEM: certPEM, keyPEM: keyPEM}
}

// Server writes a new server certificate of the CA naming ips (besides
// tlsutil.ServerName, localhost and 127.0.0.1) and returns its files.
func (ca *CA) Server(ips ...string) (certFile, keyFile string) {
	return ca.cert(true, ips)
}

// Client writes a new client certificate of the CA and returns its files.
func (ca *CA) Client() (certFile, keyFile string) { return ca.cert(false, nil) }

func (ca *CA) cert(server bool, ips []string) (string, string) {
	t := ca.t
	t.Helper()
	var list []net.IP
	for _, s := range ips {
		ip := net.ParseIP(s)
		require.NotNil(t, ip, "IP %q", s)
		list = append(list, ip)
	}
	certPEM, keyPEM, err := tlsutil.GenerateCert(tlsutil.CertOptions{
		Server: server, IPs: list, CACert: ca.certPEM, CAKey: ca.keyPEM,
	}, time.Now())
	require.NoError(t, err)
	ca.mu.Lock()
	ca.n++
	n := ca.n
	ca.mu.Unlock()
	certFile := filepath.Join(ca.Dir, fmt.Sprintf("cert-%d.pem", n))
	keyFile := filepath.Join(ca.Dir, fmt.Sprintf("cert-%d-key.pem", n))
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	return certFile, keyFile
}

// Reloader returns the TLS of a node with a new server certificate of the
// CA naming ips.
func (ca *CA) Reloader(ips ...string) *tlsutil.Reloader {
	ca.t.Helper()
	certFile, keyFile := ca.Server(ips...)
	r, err := tlsutil.NewReloader(ca.File, certFile, keyFile)
	require.NoError(ca.t, err)
	return r
}

// ClientTLS is the SDK's TLS configuration for the CA, with a new client
// certificate when withCert is set. It checks the nodes' certificates for
// tlsutil.ServerName.
func (ca *CA) ClientTLS(withCert bool) client.TLSConfig {
	cfg := client.TLSConfig{CAFile: ca.File, ServerName: tlsutil.ServerName}
	if withCert {
		cfg.CertFile, cfg.KeyFile = ca.Client()
	}
	return cfg
}

// TLS runs every node made by Config with TLS: a server certificate of ca
// naming its IP, and, with verifyIncoming, API clients required to present
// a certificate of ca. Client then connects over TLS with a client
// certificate.
func TLS(ca *CA, verifyIncoming bool) Option {
	return func(o *options) { o.ca, o.verifyIncoming = ca, verifyIncoming }
}
