package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/internal/tlsutil"
)

func TestWithTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, caKey, err := tlsutil.GenerateCA(1, time.Now())
	require.NoError(t, err)
	certPEM, keyPEM, err := tlsutil.GenerateCert(tlsutil.CertOptions{CACert: caPEM, CAKey: caKey}, time.Now())
	require.NoError(t, err)
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string][]byte{caFile: caPEM, certFile: certPEM, keyFile: keyPEM} {
		require.NoError(t, os.WriteFile(f, b, 0o600))
	}
	pool, err := tlsutil.LoadCAPool(caFile)
	require.NoError(t, err)
	cert, err := tlsutil.LoadKeyPair(certFile, keyFile)
	require.NoError(t, err)

	for _, tc := range []TLSConfig{
		{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: tlsutil.ServerName},
		{CAPool: pool, Certificate: &cert},
		{CAFile: caFile},
		{},
	} {
		c := newTestClient(t, []string{"127.0.0.1:1"}, WithTLS(tc))
		cfg := c.tls
		require.NotNil(t, cfg)
		require.Equal(t, tc.ServerName, cfg.ServerName)
		require.Equal(t, tc.CAFile != "" || tc.CAPool != nil, cfg.RootCAs != nil)
		require.Equal(t, tc.CertFile != "" || tc.Certificate != nil, len(cfg.Certificates) == 1)
	}
	require.Nil(t, newTestClient(t, []string{"127.0.0.1:1"}).tls)

	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithTLS(TLSConfig{CAFile: caFile}), WithHTTPClient(http.DefaultClient)}, "exclude each other"},
		{[]Option{WithTLS(TLSConfig{CAFile: caFile, CAPool: pool})}, "not both"},
		{[]Option{WithTLS(TLSConfig{CertFile: certFile, KeyFile: keyFile, Certificate: &cert})}, "not both"},
		{[]Option{WithTLS(TLSConfig{CertFile: certFile})}, "both its certificate and its key"},
		{[]Option{WithTLS(TLSConfig{CAFile: filepath.Join(dir, "missing.pem")})}, "reading CA file"},
		{[]Option{WithTLS(TLSConfig{CAFile: keyFile})}, "no PEM certificate"},
	} {
		_, err := New([]string{"127.0.0.1:1"}, tc.opts...)
		require.ErrorContains(t, err, tc.want)
	}
}

// A failed TLS handshake, on either side, carried no request.
func TestTLSErrorsNotExecuted(t *testing.T) {
	remote := &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}
	require.Equal(t, notExecuted, classifyErr(remote))
	verify := &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}
	require.Equal(t, notExecuted, classifyErr(verify))
	require.Equal(t, uncertain, classifyErr(&net.OpError{Op: "read", Err: errors.New("connection reset")}))
	// Nor can the same address take it later: it counts as not accepting
	// connections (WithFailFast, the worker's warnings, health).
	require.True(t, isDialError(remote))
	require.True(t, isDialError(verify))
	require.False(t, isDialError(&net.OpError{Op: "read", Err: errors.New("connection reset")}))
}
