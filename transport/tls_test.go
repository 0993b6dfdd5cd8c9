package transport_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/testcluster"
	"github.com/cronoq/cronoq/internal/tlsutil"
)

// httpsClient is an HTTP client for the test CA presenting cert (none when
// empty) and speaking protos.
func httpsClient(t *testing.T, ca *testcluster.CA, withCert bool, http1Only bool) *http.Client {
	t.Helper()
	cfg := ca.ClientTLS(withCert)
	pool, err := tlsutil.LoadCAPool(cfg.CAFile)
	require.NoError(t, err)
	tc := &tls.Config{RootCAs: pool, ServerName: tlsutil.ServerName}
	if withCert {
		cert, err := tlsutil.LoadKeyPair(cfg.CertFile, cfg.KeyFile)
		require.NoError(t, err)
		tc.Certificates = []tls.Certificate{cert}
	}
	var p http.Protocols
	p.SetHTTP1(true)
	if !http1Only {
		p.SetHTTP2(true)
	}
	tr := &http.Transport{TLSClientConfig: tc, Protocols: &p, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// get fetches https://addr/path.
func get(hc *http.Client, addr, path string) (int, string, string, error) {
	resp, err := hc.Get("https://" + addr + path)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Proto, string(body), err
}

// sdk is an SDK client of the given nodes with tc.
func sdk(t *testing.T, tc client.TLSConfig, nodes ...*testNode) *client.Client {
	t.Helper()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cl, err := client.New(addrs, client.WithTLS(tc), client.WithTimeout(2*time.Second), client.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// serverSerial is the serial of the certificate the API at addr presents.
func serverSerial(t *testing.T, ca *testcluster.CA, addr string) string {
	t.Helper()
	cfg := ca.ClientTLS(true)
	pool, err := tlsutil.LoadCAPool(cfg.CAFile)
	require.NoError(t, err)
	cert, err := tlsutil.LoadKeyPair(cfg.CertFile, cfg.KeyFile)
	require.NoError(t, err)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: pool, ServerName: tlsutil.ServerName, Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// A cluster with TLS on and -tls-verify-incoming: it forms, replicates and
// serves through a follower (which forwards over TLS) to clients with a
// certificate of the CA, and refuses every other client.
func TestTLSVerifyIncoming(t *testing.T) {
	t.Parallel()
	ca := testcluster.NewCA(t)
	c := testcluster.New(t, 3, testcluster.TLS(ca, true))
	leader, followers := c.Leader()
	f := followers[0]

	// A call through the follower is forwarded to the leader over TLS.
	hc := httpsClient(t, ca, true, false)
	tc := cronoqv1connect.NewTaskServiceClient(hc, "https://"+f.Addr())
	resp, err := tc.Submit(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SubmitRequest{
		Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "echo", Payload: []byte("hi")}},
	}))
	require.NoError(t, err)
	require.Equal(t, leader.Addr(), resp.Header().Get(apierr.HeaderLeaderAddr), "forwarded to the leader")
	id := resp.Msg.GetResult().GetId()
	require.NotEmpty(t, id)
	c.Converged()

	// The SDK over TLS: reads, health, and a worker (the stream needs
	// HTTP/2) that finds the leader through the follower.
	cl := c.Client(f)
	runWorker(t, cl, "p", map[string]client.Handler{"echo": client.HandlerFunc(echo)})
	task, err := cl.Wait(ctxT(t, 20*time.Second), id)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, task.Status)
	require.Equal(t, "done:hi", string(task.Output))
	h, err := cl.Health(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	require.Equal(t, f.ID, h.Node)
	require.Equal(t, "ok", h.Status, "%v", h.Reasons)

	// Health and metrics, over HTTP/2 and HTTP/1.1, with a certificate.
	code, proto, body, err := get(hc, f.Addr(), "/v1/health")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "HTTP/2.0", proto)
	code, proto, body, err = get(httpsClient(t, ca, true, true), f.Addr(), "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "HTTP/1.1", proto)
	require.Contains(t, body, "cronoq_rpc_forwarded_total")

	t.Run("clients without a certificate of the CA are refused", func(t *testing.T) {
		_, _, _, err := get(httpsClient(t, ca, false, false), f.Addr(), "/v1/health")
		require.Error(t, err, "health needs a certificate too")
		_, err = sdk(t, ca.ClientTLS(false), f).Health(ctxT(t, 5*time.Second))
		require.Error(t, err)
		_, err = sdk(t, ca.ClientTLS(false), f, leader).Get(ctxT(t, 2*time.Second), id)
		require.Error(t, err)
		// The node's refusal is what the caller sees, and a write it
		// refused is known not to have run. A client that gives up when
		// no address takes its connections (as the CLI does) counts a
		// refused TLS session as one, and stops with the refusal well
		// before its deadline, which therefore never cuts an attempt.
		failFast, err := client.New([]string{f.Addr()}, client.WithTLS(ca.ClientTLS(false)), client.WithTimeout(2*time.Second),
			client.WithBackoff(10*time.Millisecond, 100*time.Millisecond), client.WithFailFast(500*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = failFast.Close() })
		_, err = failFast.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "echo"}})
		require.ErrorIs(t, err, client.ErrUnreachable)
		require.ErrorContains(t, err, "tls: certificate required")
		require.NotErrorIs(t, err, client.ErrOutcomeUnknown)

		other := testcluster.NewCA(t)
		foreign := ca.ClientTLS(false)
		foreign.CertFile, foreign.KeyFile = other.Client()
		// Go's client presents only a certificate of a CA the server
		// names: force it, as another client may.
		cert, err := tlsutil.LoadKeyPair(foreign.CertFile, foreign.KeyFile)
		require.NoError(t, err)
		pool, err := tlsutil.LoadCAPool(ca.File)
		require.NoError(t, err)
		forced := &tls.Config{RootCAs: pool, ServerName: tlsutil.ServerName,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
		conn, err := tls.Dial("tcp", f.Addr(), forced)
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			_ = conn.Close()
		}
		require.ErrorContains(t, err, "remote error: tls")
		_, err = sdk(t, foreign, f).Health(ctxT(t, 5*time.Second))
		require.Error(t, err)

		// Plain HTTP/2 (h2c) and HTTP/1.1 get nothing.
		_, err = cronoqv1connect.NewOperatorServiceClient(h2c(t), "http://"+f.Addr()).Health(ctxT(t, 5*time.Second), connect.NewRequest(&cronoqv1.HealthRequest{}))
		require.Error(t, err)
		plain, err := client.New([]string{f.Addr()}, client.WithTimeout(2*time.Second))
		require.NoError(t, err)
		defer plain.Close()
		_, err = plain.Health(ctxT(t, 5*time.Second))
		require.Error(t, err)
	})

	t.Run("a reload switches new connections to the new certificate", func(t *testing.T) {
		r := leader.Config.TLS
		old := serverSerial(t, ca, leader.Addr())
		require.Equal(t, r.Leaf().SerialNumber.String(), old)
		newCert, newKey := ca.Server(leader.Addrs.IP)
		_, certFile, keyFile := r.Files()
		for src, dst := range map[string]string{newCert: certFile, newKey: keyFile} {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst, b, 0o600))
		}
		require.NoError(t, r.Reload())
		serial := serverSerial(t, ca, leader.Addr())
		require.NotEqual(t, old, serial)
		require.Equal(t, r.Leaf().SerialNumber.String(), serial)
		// Calls go on, forwarded ones too (a new client: new connections).
		_, err := c.Client(f).Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "echo"}})
		require.NoError(t, err)
	})
}

// Without -tls-verify-incoming a client certificate is optional.
func TestTLSOptionalClientCert(t *testing.T) {
	t.Parallel()
	ca := testcluster.NewCA(t)
	c := testcluster.New(t, 1, testcluster.TLS(ca, false))
	n, _ := c.Leader()
	for _, withCert := range []bool{false, true} {
		cl := sdk(t, ca.ClientTLS(withCert), n)
		res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
		require.NoError(t, err, "with certificate: %v", withCert)
		require.NotEmpty(t, res.ID)
	}
	// The nodes' certificates are checked: a client trusting another CA
	// does not talk to them.
	other := testcluster.NewCA(t)
	_, err := sdk(t, other.ClientTLS(false), n).Health(ctxT(t, 5*time.Second))
	require.ErrorContains(t, err, "certificate signed by unknown authority")
}
