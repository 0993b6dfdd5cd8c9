package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cronoq/cronoq/client"
)

// The secure mode: with CRONOQ_E2E_SECURE=1 the whole suite runs again
// with TLS (verify-incoming), gossip encryption and ACLs on every agent.
// The CA, a server certificate every node shares (nodes verify the name
// server.cronoq, not the address), a client certificate, a gossip key and
// the initial management token are made once with the binary under test;
// the CLI finds them in its environment (CRONOQ_CACERT, CRONOQ_CLIENT_CERT,
// CRONOQ_CLIENT_KEY, CRONOQ_TOKEN), the SDK clients through sdkOptions.
var secure struct {
	on        bool
	agentArgs []string // added to every agent's command line
	caFile    string
	certFile  string
	keyFile   string
	token     string
}

// secureToken is the initial management token of every secure cluster.
const secureToken = "e2e00000-0000-4000-8000-000000000001"

// setupSecure makes the certificates and the gossip key into dir and sets
// the environment every CLI call inherits.
func setupSecure(dir string) error {
	run := func(args ...string) (string, error) {
		cmd := exec.Command(binary, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("cronoq %s: %w: %s", strings.Join(args, " "), err, errb.String())
		}
		return strings.TrimSpace(out.String()), nil
	}
	if _, err := run("tls", "ca", "create", "-dir", dir); err != nil {
		return err
	}
	ca, caKey := filepath.Join(dir, "cronoq-ca.pem"), filepath.Join(dir, "cronoq-ca-key.pem")
	if _, err := run("tls", "cert", "create", "-server", "-dir", dir, "-ca", ca, "-ca-key", caKey); err != nil {
		return err
	}
	if _, err := run("tls", "cert", "create", "-client", "-dir", dir, "-ca", ca, "-ca-key", caKey); err != nil {
		return err
	}
	key, err := run("operator", "keyring", "generate")
	if err != nil {
		return err
	}
	secure.on = true
	secure.caFile = ca
	secure.certFile = filepath.Join(dir, "cronoq-client-0.pem")
	secure.keyFile = filepath.Join(dir, "cronoq-client-0-key.pem")
	secure.token = secureToken
	secure.agentArgs = []string{
		"-tls-ca", ca,
		"-tls-cert", filepath.Join(dir, "cronoq-server-0.pem"),
		"-tls-key", filepath.Join(dir, "cronoq-server-0-key.pem"),
		"-tls-verify-incoming",
		"-encrypt", key,
		"-acl", "-acl-initial-management", secureToken,
	}
	for k, v := range map[string]string{
		"CRONOQ_CACERT":      ca,
		"CRONOQ_CLIENT_CERT": secure.certFile,
		"CRONOQ_CLIENT_KEY":  secure.keyFile,
		"CRONOQ_TOKEN":       secureToken,
		// The nodes share one server certificate: the clients check its
		// name, not the address they dial.
		"CRONOQ_TLS_SERVER_NAME": "server.cronoq",
	} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	// Health is read over HTTPS with the client certificate.
	pem, err := os.ReadFile(ca)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(secure.certFile, secure.keyFile)
	if err != nil {
		return err
	}
	httpc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "server.cronoq", MinVersion: tls.VersionTLS12,
	}}}
	scheme = "https://"
	return nil
}

// scheme is how the tests reach the nodes' HTTP endpoints.
var scheme = "http://"

// sdkOptions are the options of the suite's SDK clients: TLS and the token
// in the secure mode.
func sdkOptions(opts ...client.Option) []client.Option {
	if !secure.on {
		return opts
	}
	return append(opts,
		client.WithTLS(client.TLSConfig{CAFile: secure.caFile, CertFile: secure.certFile, KeyFile: secure.keyFile, ServerName: "server.cronoq"}),
		client.WithToken(secure.token))
}

// aclReady reports whether the node at addr knows the initial management
// token (the leader makes it once it serves).
func aclReady(addr string) bool {
	cl, err := client.New([]string{addr}, sdkOptions(client.WithTimeout(2*time.Second))...)
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tok, _, _, err := cl.ACLSelf(ctx)
	return err == nil && tok.Management
}
