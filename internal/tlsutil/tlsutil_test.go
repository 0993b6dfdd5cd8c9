package tlsutil

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCA is a CA with its PEM.
type testCA struct {
	cert, key []byte
	file      string
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	cert, key, err := GenerateCA(30, time.Now())
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(file, cert, 0o600))
	return testCA{cert: cert, key: key, file: file}
}

// issue writes a certificate of ca and returns its files.
func (ca testCA) issue(t *testing.T, o CertOptions) (certFile, keyFile string) {
	t.Helper()
	o.CACert, o.CAKey = ca.cert, ca.key
	cert, key, err := GenerateCert(o, time.Now())
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, cert, 0o600))
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	return certFile, keyFile
}

func parseCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

func TestGenerate(t *testing.T) {
	ca := newTestCA(t)
	caCert, caKey, err := ParseCA(ca.cert, ca.key)
	require.NoError(t, err)
	require.True(t, caCert.IsCA)
	require.Equal(t, elliptic.P256(), caKey.Public().(*ecdsa.PublicKey).Curve)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)

	srvFile, _ := ca.issue(t, CertOptions{Server: true, IPs: []net.IP{net.ParseIP("10.1.2.3"), net.ParseIP("127.0.0.1")}, DNSNames: []string{"node1.example"}, Days: 10})
	srv := parseCert(t, srvFile)
	require.Equal(t, []string{ServerName, "localhost", "node1.example"}, srv.DNSNames)
	require.Len(t, srv.IPAddresses, 2, "127.0.0.1 once")
	require.True(t, srv.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)))
	require.True(t, srv.IPAddresses[1].Equal(net.ParseIP("10.1.2.3")))
	require.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, srv.ExtKeyUsage)
	require.False(t, srv.IsCA)
	require.Equal(t, elliptic.P256(), srv.PublicKey.(*ecdsa.PublicKey).Curve)
	require.WithinDuration(t, time.Now().AddDate(0, 0, 10), srv.NotAfter, time.Minute)
	for _, name := range []string{ServerName, "localhost", "127.0.0.1", "10.1.2.3", "node1.example"} {
		_, err := srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: name})
		require.NoError(t, err, name)
	}

	cliFile, _ := ca.issue(t, CertOptions{})
	cli := parseCert(t, cliFile)
	require.Equal(t, []string{ClientName}, cli.DNSNames)
	require.Equal(t, ClientName, cli.Subject.CommonName)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cli.ExtKeyUsage)
	require.Equal(t, caCert.NotAfter, cli.NotAfter, "by default, until the CA expires when that is sooner than a year")
	_, err = cli.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.Error(t, err, "a client certificate cannot serve")

	// Refusals.
	_, _, err = GenerateCert(CertOptions{Server: true, Days: 31, CACert: ca.cert, CAKey: ca.key}, time.Now())
	require.ErrorContains(t, err, "would outlast the CA")
	_, _, err = GenerateCert(CertOptions{Server: true, DNSNames: []string{""}, CACert: ca.cert, CAKey: ca.key}, time.Now())
	require.ErrorContains(t, err, "empty DNS name")
	other := newTestCA(t)
	_, _, err = ParseCA(ca.cert, other.key)
	require.ErrorContains(t, err, "not the key of the CA certificate")
	srvPEM, err := os.ReadFile(srvFile)
	require.NoError(t, err)
	_, _, err = ParseCA(srvPEM, ca.key)
	require.ErrorContains(t, err, "not a CA certificate")
	_, _, err = ParseCA(ca.cert, []byte("junk"))
	require.ErrorContains(t, err, "no PEM private key")
	_, _, err = GenerateCA(0, time.Now())
	require.Error(t, err)
}

func TestLoad(t *testing.T) {
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, CertOptions{Server: true})
	cliCert, cliKey := ca.issue(t, CertOptions{})
	other := newTestCA(t)
	foreignCert, foreignKey := other.issue(t, CertOptions{Server: true})
	missing := filepath.Join(t.TempDir(), "missing.pem")
	junk := filepath.Join(t.TempDir(), "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not PEM"), 0o600))

	_, err := NewReloader(ca.file, srvCert, srvKey)
	require.NoError(t, err)
	for _, tc := range []struct {
		name          string
		ca, cert, key string
		want          string
	}{
		{"client certificate", ca.file, cliCert, cliKey, "not a valid server certificate of the CA"},
		{"other CA", ca.file, foreignCert, foreignKey, "not a valid server certificate of the CA"},
		{"key of another certificate", ca.file, srvCert, cliKey, "private key does not match"},
		{"missing CA", missing, srvCert, srvKey, "reading CA file"},
		{"junk CA", junk, srvCert, srvKey, "no PEM certificate"},
		{"missing key", ca.file, srvCert, missing, "loading certificate"},
	} {
		_, err := NewReloader(tc.ca, tc.cert, tc.key)
		require.ErrorContains(t, err, tc.want, tc.name)
	}

	_, err = ClientConfig(ClientFiles{CertFile: cliCert})
	require.ErrorContains(t, err, "both")
	cfg, err := ClientConfig(ClientFiles{CAFile: ca.file, CertFile: cliCert, KeyFile: cliKey, ServerName: ServerName})
	require.NoError(t, err)
	require.Len(t, cfg.Certificates, 1)
	require.NotNil(t, cfg.RootCAs)
	require.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
}

// handshake runs a TLS handshake between the two configurations and
// returns the client's view of it, or the first error of either side.
func handshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srvErr := make(chan error, 1)
	srv := tls.Server(a, server)
	go func() {
		err := srv.HandshakeContext(ctx)
		if err != nil {
			a.Close() // unblock the client
		}
		srvErr <- err
	}()
	cli := tls.Client(b, client)
	err := cli.HandshakeContext(ctx)
	if err == nil {
		// TLS 1.3: the server judges the client's certificate after the
		// client has finished; a read sees its verdict.
		go func() { _, _ = srv.Write([]byte{1}) }()
		_, err = cli.Read(make([]byte, 1))
	}
	if err2 := <-srvErr; err2 != nil {
		return tls.ConnectionState{}, err2
	}
	if err != nil {
		return tls.ConnectionState{}, err
	}
	return cli.ConnectionState(), nil
}

func TestHandshakes(t *testing.T) {
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, CertOptions{Server: true})
	node, err := NewReloader(ca.file, srvCert, srvKey)
	require.NoError(t, err)
	peerCert, peerKey := ca.issue(t, CertOptions{Server: true})
	peer, err := NewReloader(ca.file, peerCert, peerKey)
	require.NoError(t, err)
	cliCert, cliKey := ca.issue(t, CertOptions{})
	other := newTestCA(t)
	foreignCert, foreignKey := other.issue(t, CertOptions{Server: true})
	foreign, err := NewReloader(other.file, foreignCert, foreignKey)
	require.NoError(t, err)

	client := func(cert, key string) *tls.Config {
		cfg, err := ClientConfig(ClientFiles{CAFile: ca.file, CertFile: cert, KeyFile: key, ServerName: ServerName})
		require.NoError(t, err)
		cfg.NextProtos = []string{"h2"} // as the SDK's dialer offers
		return cfg
	}

	// The API without -tls-verify-incoming: a certificate is optional, but
	// must be the CA's when given.
	cs, err := handshake(t, node.ServerConfig(false), client("", ""))
	require.NoError(t, err)
	require.Equal(t, uint16(tls.VersionTLS13), cs.Version, "TLS 1.3 preferred")
	require.Equal(t, "h2", cs.NegotiatedProtocol)
	_, err = handshake(t, node.ServerConfig(false), client(cliCert, cliKey))
	require.NoError(t, err)
	_, err = handshake(t, node.ServerConfig(false), foreign.PeerClientConfig())
	require.Error(t, err, "the foreign node refuses the node's certificate")
	forced := &tls.Config{
		InsecureSkipVerify: true, // only the server's verdict counts here
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := foreign.PeerClientConfig().Certificates[0]
			return &c, nil
		},
	}
	_, err = handshake(t, node.ServerConfig(false), forced)
	require.ErrorContains(t, err, "certificate signed by unknown authority", "a certificate given must be the CA's")

	// With -tls-verify-incoming a certificate of the CA is required.
	_, err = handshake(t, node.ServerConfig(true), client("", ""))
	require.Error(t, err)
	_, err = handshake(t, node.ServerConfig(true), client(cliCert, cliKey))
	require.NoError(t, err)

	// TLS 1.2 still works; older does not.
	old := client(cliCert, cliKey)
	old.MaxVersion = tls.VersionTLS12
	cs, err = handshake(t, node.ServerConfig(true), old)
	require.NoError(t, err)
	require.Equal(t, uint16(tls.VersionTLS12), cs.Version)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	_, err = handshake(t, node.ServerConfig(true), old)
	require.Error(t, err)

	// Between nodes: mutual, server certificates of the CA only.
	cs, err = handshake(t, node.PeerServerConfig(), peer.PeerClientConfig())
	require.NoError(t, err)
	require.Equal(t, ServerName, cs.PeerCertificates[0].Subject.CommonName)
	_, err = handshake(t, node.PeerServerConfig(), client("", ""))
	require.Error(t, err, "no certificate")
	_, err = handshake(t, node.PeerServerConfig(), client(cliCert, cliKey))
	require.ErrorContains(t, err, "not a cronoq server certificate", "a client certificate cannot pass for a node")
	_, err = handshake(t, node.PeerServerConfig(), foreign.PeerClientConfig())
	require.Error(t, err)
	_, err = handshake(t, foreign.PeerServerConfig(), peer.PeerClientConfig())
	require.Error(t, err)
}

func TestReload(t *testing.T) {
	ca := newTestCA(t)
	certA, keyA := ca.issue(t, CertOptions{Server: true})
	certB, keyB := ca.issue(t, CertOptions{Server: true})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	install := func(cert, key string) {
		for src, dst := range map[string]string{cert: certFile, key: keyFile} {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst, b, 0o600))
		}
	}
	install(certA, keyA)
	r, err := NewReloader(ca.file, certFile, keyFile)
	require.NoError(t, err)
	server := r.ServerConfig(false) // built once, as a listener's
	cli, err := ClientConfig(ClientFiles{CAFile: ca.file, ServerName: ServerName})
	require.NoError(t, err)
	serial := func() string {
		cs, err := handshake(t, server, cli)
		require.NoError(t, err)
		return cs.PeerCertificates[0].SerialNumber.String()
	}
	serialA, serialB := parseCert(t, certA).SerialNumber.String(), parseCert(t, certB).SerialNumber.String()
	require.Equal(t, serialA, serial())
	require.Equal(t, serialA, r.Leaf().SerialNumber.String())

	install(certB, keyB)
	require.Equal(t, serialA, serial(), "nothing changes before the reload")
	require.NoError(t, r.Reload())
	require.Equal(t, serialB, serial())
	require.Equal(t, serialB, r.PeerClientConfig().Certificates[0].Leaf.SerialNumber.String())

	// A bad reload keeps the certificate in use.
	require.NoError(t, os.WriteFile(certFile, []byte("broken"), 0o600))
	require.Error(t, r.Reload())
	require.Equal(t, serialB, serial())
	install(certA, keyB) // mismatched pair
	require.Error(t, r.Reload())
	require.Equal(t, serialB, serial())

	// A new CA applies too: the node's certificate from another CA is
	// refused while the CA file is the old one, accepted with the new.
	other := newTestCA(t)
	certC, keyC := other.issue(t, CertOptions{Server: true})
	install(certC, keyC)
	require.ErrorContains(t, r.Reload(), "not a valid server certificate of the CA")
	b, err := os.ReadFile(other.file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ca.file, b, 0o600))
	require.NoError(t, r.Reload())
	_, err = handshake(t, server, cli)
	require.Error(t, err, "the client still trusts the old CA only")
}
