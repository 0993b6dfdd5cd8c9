package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/internal/tlsutil"
)

func readCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block, file)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

func mode(t *testing.T, file string) os.FileMode {
	t.Helper()
	st, err := os.Stat(file)
	require.NoError(t, err)
	return st.Mode().Perm()
}

func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }

	r := runCLI(t, "", "tls", "ca", "create", "-dir", dir)
	requireOK(t, r)
	require.Equal(t, "==> Saved "+p("cronoq-ca.pem")+"\n==> Saved "+p("cronoq-ca-key.pem")+"\n", r.stdout)
	require.Equal(t, os.FileMode(0o600), mode(t, p("cronoq-ca-key.pem")))
	require.Equal(t, os.FileMode(0o644), mode(t, p("cronoq-ca.pem")))
	ca := readCert(t, p("cronoq-ca.pem"))
	require.True(t, ca.IsCA)
	require.WithinDuration(t, time.Now().AddDate(0, 0, tlsutil.DefaultCADays), ca.NotAfter, time.Minute)
	caBefore, err := os.ReadFile(p("cronoq-ca.pem"))
	require.NoError(t, err)
	requireFailure(t, runCLI(t, "", "tls", "ca", "create", "-dir", dir), exitError, "cronoq-ca.pem already exists")
	caAfter, err := os.ReadFile(p("cronoq-ca.pem"))
	require.NoError(t, err)
	require.Equal(t, caBefore, caAfter, "never overwritten")

	// Server certificates, numbered; a taken number is skipped, and the
	// file that took it left alone.
	r = runCLI(t, "", "tls", "cert", "create", "-server", "-dir", dir, "-ip", "10.0.0.5", "-dns", "node1.example", "-days", "30")
	requireOK(t, r)
	require.Contains(t, r.stdout, "==> Saved "+p("cronoq-server-0.pem"))
	require.Equal(t, os.FileMode(0o600), mode(t, p("cronoq-server-0-key.pem")))
	srv := readCert(t, p("cronoq-server-0.pem"))
	require.Equal(t, []string{tlsutil.ServerName, "localhost", "node1.example"}, srv.DNSNames)
	require.Len(t, srv.IPAddresses, 2)
	require.True(t, srv.IPAddresses[1].Equal(net.ParseIP("10.0.0.5")))
	require.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, srv.ExtKeyUsage)
	require.WithinDuration(t, time.Now().AddDate(0, 0, 30), srv.NotAfter, time.Minute)
	require.NoError(t, srv.CheckSignatureFrom(ca))

	require.NoError(t, os.WriteFile(p("cronoq-server-1.pem"), []byte("mine"), 0o644))
	r = runCLI(t, "", "tls", "cert", "create", "-server", "-dir", dir, "-o", "json")
	requireOK(t, r)
	require.Equal(t, map[string]any{"cert": p("cronoq-server-2.pem"), "key": p("cronoq-server-2-key.pem")}, decodeObject(t, r.stdout))
	require.WithinDuration(t, time.Now().AddDate(0, 0, tlsutil.DefaultCertDays), readCert(t, p("cronoq-server-2.pem")).NotAfter, time.Minute)
	mine, err := os.ReadFile(p("cronoq-server-1.pem"))
	require.NoError(t, err)
	require.Equal(t, "mine", string(mine))
	_, err = os.Stat(p("cronoq-server-1-key.pem"))
	require.ErrorIs(t, err, os.ErrNotExist, "no key left behind for the skipped number")

	// A CA shorter-lived than a certificate's default lifetime: the
	// certificate ends with it.
	short := t.TempDir()
	requireOK(t, runCLI(t, "", "tls", "ca", "create", "-dir", short, "-days", "10"))
	requireOK(t, runCLI(t, "", "tls", "cert", "create", "-server", "-dir", short))
	require.Equal(t, readCert(t, filepath.Join(short, "cronoq-ca.pem")).NotAfter, readCert(t, filepath.Join(short, "cronoq-server-0.pem")).NotAfter)

	// A client certificate, with the CA named explicitly from elsewhere.
	other := t.TempDir()
	r = runCLI(t, "", "tls", "cert", "create", "-client", "-dir", other, "-ca", p("cronoq-ca.pem"), "-ca-key", p("cronoq-ca-key.pem"))
	requireOK(t, r)
	cli := readCert(t, filepath.Join(other, "cronoq-client-0.pem"))
	require.Equal(t, []string{tlsutil.ClientName}, cli.DNSNames)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cli.ExtKeyUsage)
	require.NoError(t, cli.CheckSignatureFrom(ca))
	// The certificates serve as they should.
	_, err = tlsutil.NewReloader(p("cronoq-ca.pem"), p("cronoq-server-0.pem"), p("cronoq-server-0-key.pem"))
	require.NoError(t, err)
	_, err = tlsutil.NewReloader(p("cronoq-ca.pem"), filepath.Join(other, "cronoq-client-0.pem"), filepath.Join(other, "cronoq-client-0-key.pem"))
	require.ErrorContains(t, err, "not a valid server certificate", "a client certificate cannot serve a node")

	requireOK(t, runCLI(t, "", "tls", "ca", "create", "-dir", other))
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-dir", dir}, exitUsage, []string{"-server or -client is required"}},
		{[]string{"-server", "-client", "-dir", dir}, exitUsage, []string{"-server and -client exclude each other"}},
		{[]string{"-server", "-dir", dir, "-ip", "node1"}, exitUsage, []string{`invalid -ip "node1"`}},
		{[]string{"-server", "-dir", t.TempDir()}, exitUsage, []string{"reading -ca", "cronoq tls ca create"}},
		{[]string{"-server", "-dir", dir, "-ca-key", filepath.Join(other, "cronoq-ca-key.pem")}, exitUsage, []string{"not the key of the CA certificate"}},
		{[]string{"-server", "-dir", dir, "-days", "100000"}, exitError, []string{"would outlast the CA"}},
		{[]string{"-server", "-dir", dir, "-days", "0"}, exitUsage, []string{"flag -days: must be at least 1"}},
	} {
		requireFailure(t, runCLI(t, "", append([]string{"tls", "cert", "create"}, tc.args...)...), tc.code, tc.want...)
	}
	requireFailure(t, runCLI(t, "", "tls"), exitUsage, "missing command after 'cronoq tls'")
	requireFailure(t, runCLI(t, "", "tls", "key"), exitUsage, `unknown command "tls key"`)
	requireFailure(t, runCLI(t, "", "tls", "ca"), exitUsage, "missing command after 'cronoq tls ca'")
}

func TestAgentTLSFlags(t *testing.T) {
	cfg, err := parseAgent(t, "-dev", "-tls-ca", "ca.pem", "-tls-cert", "c.pem", "-tls-key", "k.pem", "-tls-verify-incoming")
	require.NoError(t, err)
	require.Equal(t, "ca.pem", cfg.tlsCA)
	require.Equal(t, "c.pem", cfg.tlsCert)
	require.Equal(t, "k.pem", cfg.tlsKey)
	require.True(t, cfg.tlsVerifyIncoming)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dev", "-tls-ca", "ca.pem"}, "TLS needs -tls-ca, -tls-cert and -tls-key together: -tls-ca given without -tls-cert, -tls-key"},
		{[]string{"-dev", "-tls-cert", "c.pem", "-tls-key", "k.pem"}, "-tls-cert, -tls-key given without -tls-ca"},
		{[]string{"-dev", "-tls-verify-incoming"}, "-tls-verify-incoming needs TLS"},
	} {
		_, err := parseAgent(t, tc.args...)
		var ue *usageError
		require.ErrorAs(t, err, &ue, "%v", tc.args)
		require.ErrorContains(t, err, tc.want)
	}

	file := writeFile(t, "agent.hcl", `
tls_ca              = "/etc/cronoq/ca.pem"
tls_cert            = "/etc/cronoq/server.pem"
tls_key             = "/etc/cronoq/server-key.pem"
tls_verify_incoming = true
`)
	cfg, err = parseAgent(t, "-dev", "-config", file)
	require.NoError(t, err)
	require.Equal(t, "/etc/cronoq/ca.pem", cfg.tlsCA)
	require.Equal(t, "/etc/cronoq/server.pem", cfg.tlsCert)
	require.Equal(t, "/etc/cronoq/server-key.pem", cfg.tlsKey)
	require.True(t, cfg.tlsVerifyIncoming)
	file = writeFile(t, "agent.json", `{"tls_ca": "/ca.pem"}`)
	_, err = parseAgent(t, "-dev", "-config", file)
	require.ErrorContains(t, err, "given without -tls-cert")

	// Files that do not make a node's TLS are refused at start.
	dir := t.TempDir()
	requireOK(t, runCLI(t, "", "tls", "ca", "create", "-dir", dir))
	requireOK(t, runCLI(t, "", "tls", "cert", "create", "-client", "-dir", dir))
	flags, _ := agentPorts(t)
	r := runCLI(t, "", append([]string{"agent", "-dev", "-log-level", "error", "-tls-ca", filepath.Join(dir, "cronoq-ca.pem"),
		"-tls-cert", filepath.Join(dir, "cronoq-client-0.pem"), "-tls-key", filepath.Join(dir, "cronoq-client-0-key.pem")}, flags...)...)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "loading TLS certificates (-tls-ca, -tls-cert, -tls-key)")
	require.Contains(t, r.stderr, "not a valid server certificate of the CA")
}

// pki makes a CA, a server certificate and a client certificate with the
// CLI in a new directory.
func pki(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	requireOK(t, runCLI(t, "", "tls", "ca", "create", "-dir", dir))
	requireOK(t, runCLI(t, "", "tls", "cert", "create", "-server", "-dir", dir))
	requireOK(t, runCLI(t, "", "tls", "cert", "create", "-client", "-dir", dir))
	return dir
}

// httpsClient trusts the CA of dir and presents its client certificate.
func tlsHTTPClient(t testing.TB, dir string) *http.Client {
	t.Helper()
	cfg, err := tlsutil.ClientConfig(tlsutil.ClientFiles{
		CAFile:   filepath.Join(dir, "cronoq-ca.pem"),
		CertFile: filepath.Join(dir, "cronoq-client-0.pem"), KeyFile: filepath.Join(dir, "cronoq-client-0-key.pem"),
	})
	require.NoError(t, err)
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Second}
}

// healthTLS polls https://addr/v1/health until it answers 200.
func healthTLS(t testing.TB, hc *http.Client, addr string, within time.Duration, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := hc.Get("https://" + addr + "/v1/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatal("agent exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready within %s (last error %v)", within, err)
		}
		time.Sleep(5 * time.Millisecond) // polling an external process
	}
}

// A node with TLS and -tls-verify-incoming serves the client commands
// and a worker that give the CA and a client certificate, by flags or by
// environment, and no client that does not.
func TestAgentTLSInProcess(t *testing.T) {
	dir := pki(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	flags, addr := agentPorts(t)
	out := &syncWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		code <- run(ctx, append([]string{"agent", "-dev", "-tls-ca", f("cronoq-ca.pem"), "-tls-cert", f("cronoq-server-0.pem"),
			"-tls-key", f("cronoq-server-0-key.pem"), "-tls-verify-incoming"}, flags...),
			stdio{Stdin: strings.NewReader(""), Stdout: out, Stderr: out})
	}()
	healthTLS(t, tlsHTTPClient(t, dir), addr, 10*time.Second, exited)

	tlsArgs := []string{"-addr", addr, "-ca-cert", f("cronoq-ca.pem"), "-client-cert", f("cronoq-client-0.pem"), "-client-key", f("cronoq-client-0-key.pem")}
	r := runCLI(t, "", append([]string{"health", "-o", "json"}, tlsArgs...)...)
	requireOK(t, r)
	h := decodeObject(t, r.stdout)
	require.Equal(t, "ok", h["status"], r.stdout)

	// A worker over TLS runs what a submit over TLS asks for.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	worker := make(chan cliResult, 1)
	go func() {
		worker <- runCLIContext(wctx, "", append([]string{"worker", "-pool", "p", "-handler", "echo=cat"}, tlsArgs...)...)
	}()
	r = runCLI(t, "", append([]string{"submit", "-pool", "p", "-kind", "echo", "-payload", "over tls", "-wait", "-o", "json"}, tlsArgs...)...)
	requireOK(t, r)
	task := decodeObject(t, r.stdout)
	require.Equal(t, "succeeded", task["status"])
	require.Equal(t, "over tls", task["output"])
	wcancel()
	select {
	case wr := <-worker:
		require.Equal(t, exitOK, wr.code, wr.stderr)
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop")
	}

	// The environment gives the same.
	t.Setenv("CRONOQ_CACERT", f("cronoq-ca.pem"))
	t.Setenv("CRONOQ_CLIENT_CERT", f("cronoq-client-0.pem"))
	t.Setenv("CRONOQ_CLIENT_KEY", f("cronoq-client-0-key.pem"))
	requireOK(t, runCLI(t, "", "members", "-addr", addr))

	// Without a client certificate, or without TLS, nothing is served.
	r = runCLI(t, "", "health", "-addr", addr, "-client-cert", "", "-client-key", "")
	requireFailure(t, r, exitError)
	require.Contains(t, r.stderr, "tls")
	r = runCLI(t, "", "health", "-addr", addr, "-ca-cert", "", "-client-cert", "", "-client-key", "")
	requireFailure(t, r, exitError)
	requireFailure(t, runCLI(t, "", "health", "-addr", addr, "-client-key", ""), exitUsage, "-client-cert needs -client-key")
	requireFailure(t, runCLI(t, "", "health", "-addr", addr, "-ca-cert", f("missing.pem")), exitUsage, "invalid -ca-cert", "missing.pem")

	cancel()
	select {
	case c := <-code:
		require.Equal(t, exitOK, c, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	require.Contains(t, out.String(), "agent: TLS is on")
	require.NotContains(t, out.String(), "TLS is off")
}

// On SIGHUP the agent reads its certificates again: new connections get
// the new one; a broken file is reported and the certificate in use kept.
func TestAgentTLSReloadOnSIGHUP(t *testing.T) {
	dir := pki(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	requireOK(t, runCLI(t, "", "tls", "cert", "create", "-server", "-dir", dir)) // cronoq-server-1, the next one
	node, nodeKey := filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	install := func(cert, key string) {
		for src, dst := range map[string]string{cert: node, key: nodeKey} {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst, b, 0o600))
		}
	}
	install(f("cronoq-server-0.pem"), f("cronoq-server-0-key.pem"))

	flags, addr := agentPorts(t)
	args := append([]string{"-test.run=^TestAgentHelperProcess$", "--", "agent", "-data-dir", t.TempDir(),
		"-node-id", "solo", "-bootstrap-expect", "1", "-tls-ca", f("cronoq-ca.pem"), "-tls-cert", node, "-tls-key", nodeKey}, flags...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CRONOQ_AGENT_HELPER=1")
	out := &syncWriter{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() {
		defer close(exited)
		waitErr = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	hc := tlsHTTPClient(t, dir)
	healthTLS(t, hc, addr, 30*time.Second, exited)

	serial := func() string {
		pool, err := tlsutil.LoadCAPool(f("cronoq-ca.pem"))
		require.NoError(t, err)
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first, second := readCert(t, f("cronoq-server-0.pem")).SerialNumber.String(), readCert(t, f("cronoq-server-1.pem")).SerialNumber.String()
	require.Equal(t, first, serial())

	install(f("cronoq-server-1.pem"), f("cronoq-server-1-key.pem"))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return serial() == second }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "reloaded TLS certificates") }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, os.WriteFile(node, []byte("broken"), 0o600))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		return strings.Contains(out.String(), "reloading TLS certificates failed: keeping the current ones")
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, second, serial())
	healthTLS(t, hc, addr, 5*time.Second, exited)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
	case <-time.After(40 * time.Second):
		t.Fatalf("agent did not exit; output:\n%s", out.String())
	}
	require.NoError(t, waitErr, out.String())
}
