package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/internal/tlsutil"
)

// pkiFiles writes a CA and n server certificates of it into dir; it
// returns the CA file and the certificates' files.
func pkiFiles(t *testing.T, dir string, n int) (caFile string, certs [][2]string) {
	t.Helper()
	caPEM, caKey, err := tlsutil.GenerateCA(1, time.Now())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	caFile = filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))
	for i := range n {
		cert, key, err := tlsutil.GenerateCert(tlsutil.CertOptions{Server: true, CACert: caPEM, CAKey: caKey}, time.Now())
		require.NoError(t, err)
		files := [2]string{filepath.Join(dir, fmt.Sprintf("cert-%d.pem", i)), filepath.Join(dir, fmt.Sprintf("key-%d.pem", i))}
		require.NoError(t, os.WriteFile(files[0], cert, 0o600))
		require.NoError(t, os.WriteFile(files[1], key, 0o600))
		certs = append(certs, files)
	}
	return caFile, certs
}

func reloader(t *testing.T, ca string, cert [2]string) *tlsutil.Reloader {
	t.Helper()
	r, err := tlsutil.NewReloader(ca, cert[0], cert[1])
	require.NoError(t, err)
	return r
}

// Forwarding over TLS: the forwarder presents the node's certificate and
// verifies the leader's; a node of another CA reaches nothing, on either
// side. (The leader verifies incoming certificates: otherwise Go's client,
// finding no certificate of the leader's CA to present, would present none
// and be served as any anonymous client is.)
func TestForwarderTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, certs := pkiFiles(t, filepath.Join(dir, "good"), 2)
	otherCA, otherCerts := pkiFiles(t, filepath.Join(dir, "other"), 1)
	leaderTLS, nodeTLS := reloader(t, caFile, certs[0]), reloader(t, caFile, certs[1])
	foreignTLS := reloader(t, otherCA, otherCerts[0])
	// A node of the other CA that trusts both: it accepts the leader's
	// certificate, and only the leader can refuse it.
	both := filepath.Join(dir, "both.pem")
	a, err := os.ReadFile(caFile)
	require.NoError(t, err)
	b, err := os.ReadFile(otherCA)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(both, append(a, b...), 0o600))
	trustingTLS := reloader(t, both, otherCerts[0])

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []string // protocol of each request that reached the handler
	mux := http.NewServeMux()
	mux.Handle(cronoqv1connect.NewOperatorServiceHandler(cronoqv1connect.UnimplementedOperatorServiceHandler{}))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Proto)
		mu.Unlock()
		mux.ServeHTTP(w, r)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tls.NewListener(ln, leaderTLS.ServerConfig(true)))
	}()
	defer func() {
		_ = srv.Close()
		<-done
	}()
	requests := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}

	health := func(r *tlsutil.Reloader) error {
		f, err := newForwarder("127.0.0.1:8650", 1<<20)
		require.NoError(t, err)
		f.useTLS(r)
		defer f.close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = f.endpoint(ln.Addr().String()).operator.Health(ctx, connect.NewRequest(&cronoqv1.HealthRequest{}))
		return err
	}

	err = health(nodeTLS)
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "reached the handler: %v", err)
	require.Equal(t, []string{"HTTP/2.0"}, requests())

	// The foreign node does not trust the leader: nothing is sent, which a
	// write may safely be routed again after.
	err = health(foreignTLS)
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	require.True(t, neverSent(err), "%v", err)
	// The leader does not trust the foreign node's certificate.
	err = health(trustingTLS)
	require.Error(t, err)
	require.Len(t, requests(), 1, "no request from a node of another CA reached the handler")
}
