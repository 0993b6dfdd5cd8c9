package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/internal/tlsutil"
)

func init() {
	register("tls", command{Summary: "Make a CA and the certificates it signs, for TLS between nodes and clients: ca create, cert create", Run: runTLS})
}

// File names of `cronoq tls`, as Consul names its own.
const (
	caCertFile = "cronoq-ca.pem"
	caKeyFile  = "cronoq-ca-key.pem"
)

func runTLS(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq tls", map[string]command{
		"ca":   {Summary: "Make a certificate authority: ca create", Run: runTLSCA},
		"cert": {Summary: "Make a server or client certificate signed by the CA: cert create", Run: runTLSCert},
	}, args)
}

func runTLSCA(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq tls ca", map[string]command{
		"create": {Summary: "Make a CA certificate and its key", Run: runTLSCACreate},
	}, args)
}

func runTLSCert(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq tls cert", map[string]command{
		"create": {Summary: "Make a server or client certificate and its key, signed by the CA", Run: runTLSCertCreate},
	}, args)
}

// savedJSON is the output of `tls ... create -o json`.
type savedJSON struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

func runTLSCACreate(_ context.Context, s stdio, args []string) error {
	c := newCmd("tls ca create", "cronoq tls ca create [-dir DIR] [-days N]", `
Make a certificate authority for a cluster: writes `+caCertFile+` (the CA
certificate, which every node and client is given with -tls-ca or -ca-cert)
and `+caKeyFile+` (its private key, readable by the owner only; keep it off
the nodes, it is only needed to make certificates) in DIR. An ECDSA P-256
key. Existing files are never overwritten.

JSON output: {"cert": PATH, "key": PATH}`)
	dir := "."
	days := tlsutil.DefaultCADays
	c.fs.StringVar(&dir, "dir", dir, "write the files into `DIR`")
	c.fs.Var(intValue{&days, 1}, "days", "the CA is valid for `N` days")
	out := c.outputFlag()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s already exists: remove it or choose another -dir", p)
		}
	}
	certPEM, keyPEM, err := tlsutil.GenerateCA(days, time.Now())
	if err != nil {
		return err
	}
	if err := writeKeyPair(certPath, certPEM, keyPath, keyPEM); err != nil {
		return err
	}
	return printSaved(s, out, certPath, keyPath)
}

func runTLSCertCreate(_ context.Context, s stdio, args []string) error {
	c := newCmd("tls cert create",
		"cronoq tls cert create -server|-client [-dir DIR] [-ca FILE -ca-key FILE] [-ip IP]... [-dns NAME]... [-days N]", `
Make a certificate and its key signed by the CA, in DIR:
cronoq-server-N.pem and cronoq-server-N-key.pem with -server,
cronoq-client-N.pem and cronoq-client-N-key.pem with -client, N the first
number not taken (the key readable by the owner only). An ECDSA P-256 key.

A server certificate is a node's (-tls-cert of 'cronoq agent'): it serves
the API, and authenticates the node to the other nodes and to them. It
names `+tlsutil.ServerName+`, which nodes check on each other, "localhost" and
127.0.0.1, and the -ip and -dns given: clients check the host of -addr
against these names (or -tls-server-name `+tlsutil.ServerName+`), so give each
node's API address. A client certificate (-client-cert of the client
commands) names `+tlsutil.ClientName+` and authenticates a client only: it can
never pass for a node.

JSON output: {"cert": PATH, "key": PATH}`)
	var (
		server, clientCert bool
		dir                = "."
		caFile, caKey      string
		ips, names         []string
		days               int // 0: the default of tlsutil.GenerateCert
	)
	c.fs.BoolVar(&server, "server", false, "make a server certificate (for a node)")
	c.fs.BoolVar(&clientCert, "client", false, "make a client certificate (for the CLI, workers and the SDK)")
	c.fs.StringVar(&dir, "dir", dir, "write the files into `DIR`")
	c.fs.StringVar(&caFile, "ca", "", "CA certificate `FILE` (default: "+caCertFile+" in -dir)")
	c.fs.StringVar(&caKey, "ca-key", "", "CA private key `FILE` (default: "+caKeyFile+" in -dir)")
	c.fs.Var(listValue{&ips}, "ip", "add `IP` to the certificate's names (repeatable, or comma-separated)")
	c.fs.Var(listValue{&names}, "dns", "add the DNS `NAME` to the certificate's names (repeatable, or comma-separated)")
	c.fs.Var(intValue{&days, 1}, "days", fmt.Sprintf("the certificate is valid for `N` days, at most until the CA expires (default %d, or until the CA expires if sooner)", tlsutil.DefaultCertDays))
	out := c.outputFlag()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	switch {
	case server && clientCert:
		return c.usageErr("-server and -client exclude each other")
	case !server && !clientCert:
		return c.usageErr("-server or -client is required")
	}
	var ipList []net.IP
	for _, a := range ips {
		ip := net.ParseIP(a)
		if ip == nil {
			return c.usageErr("invalid -ip %q: not an IP address", a)
		}
		ipList = append(ipList, ip)
	}
	if caFile == "" {
		caFile = filepath.Join(dir, caCertFile)
	}
	if caKey == "" {
		caKey = filepath.Join(dir, caKeyFile)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return usagef("reading -ca: %v (make a CA with 'cronoq tls ca create')", err)
	}
	caKeyPEM, err := os.ReadFile(caKey)
	if err != nil {
		return usagef("reading -ca-key: %v", err)
	}
	if _, _, err := tlsutil.ParseCA(caPEM, caKeyPEM); err != nil {
		return usagef("-ca %s with -ca-key %s: %v", caFile, caKey, err)
	}
	certPEM, keyPEM, err := tlsutil.GenerateCert(tlsutil.CertOptions{
		Server: server, IPs: ipList, DNSNames: names, Days: days, CACert: caPEM, CAKey: caKeyPEM,
	}, time.Now())
	if err != nil {
		return err
	}
	prefix := "cronoq-client-"
	if server {
		prefix = "cronoq-server-"
	}
	for n := 0; ; n++ {
		certPath := filepath.Join(dir, fmt.Sprintf("%s%d.pem", prefix, n))
		keyPath := filepath.Join(dir, fmt.Sprintf("%s%d-key.pem", prefix, n))
		err := writeKeyPair(certPath, certPEM, keyPath, keyPEM)
		if errors.Is(err, fs.ErrExist) {
			continue // taken: the next number
		}
		if err != nil {
			return err
		}
		return printSaved(s, out, certPath, keyPath)
	}
}

// writeKeyPair writes a certificate (0644) and its key (0600), neither of
// which may exist yet; on any error it leaves neither behind. An error
// wrapping fs.ErrExist means one of them exists.
func writeKeyPair(certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if err := os.MkdirAll(filepath.Dir(certPath), 0o755); err != nil {
		return fmt.Errorf("creating -dir: %w", err)
	}
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, certPEM, 0o644); err != nil {
		_ = os.Remove(keyPath)
		return err
	}
	return nil
}

// writeNew creates path with data; it fails if path exists.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func printSaved(s stdio, out *outputFlag, certPath, keyPath string) error {
	if out.json() {
		return writeJSON(s.Stdout, savedJSON{Cert: certPath, Key: keyPath})
	}
	_, err := fmt.Fprintf(s.Stdout, "==> Saved %s\n==> Saved %s\n", certPath, keyPath)
	return err
}

// ---------------------------------------------------------------------------
// The agent's TLS
// ---------------------------------------------------------------------------

// validateTLS checks that the TLS flags are all given or none.
func (cfg agentConfig) validateTLS() error {
	set := map[string]bool{"-tls-ca": cfg.tlsCA != "", "-tls-cert": cfg.tlsCert != "", "-tls-key": cfg.tlsKey != ""}
	var given, missing []string
	for _, name := range []string{"-tls-ca", "-tls-cert", "-tls-key"} {
		if set[name] {
			given = append(given, name)
		} else {
			missing = append(missing, name)
		}
	}
	switch {
	case len(given) > 0 && len(missing) > 0:
		return fmt.Errorf("TLS needs -tls-ca, -tls-cert and -tls-key together: %s given without %s",
			strings.Join(given, ", "), strings.Join(missing, ", "))
	case len(given) == 0 && cfg.tlsVerifyIncoming:
		return errors.New("-tls-verify-incoming needs TLS: give -tls-ca, -tls-cert and -tls-key")
	}
	return nil
}

// loadTLS reads the node's certificates; nil when TLS is off.
func (cfg *agentConfig) loadTLS() (*tlsutil.Reloader, error) {
	if cfg.tlsCA == "" {
		return nil, nil
	}
	r, err := tlsutil.NewReloader(cfg.tlsCA, cfg.tlsCert, cfg.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificates (-tls-ca, -tls-cert, -tls-key): %w", err)
	}
	return r, nil
}

// certExpiryWarning is how close to its expiry a certificate is warned
// about.
const certExpiryWarning = 30 * 24 * time.Hour

// logTLS logs the certificate the node presents.
func logTLS(log hclog.Logger, msg string, r *tlsutil.Reloader, verifyIncoming bool) {
	leaf := r.Leaf()
	args := []any{"cert", certSummary(leaf), "expires", leaf.NotAfter.UTC().Format(time.RFC3339), "verify_incoming", verifyIncoming}
	log.Info(msg, args...)
	if left := time.Until(leaf.NotAfter); left < certExpiryWarning {
		log.Warn("the node's TLS certificate expires soon: make a new one and reload (SIGHUP)", "expires", leaf.NotAfter.UTC().Format(time.RFC3339), "left", left.Round(time.Minute).String())
	}
}

// certSummary names a certificate for the logs: its serial and names.
func certSummary(c *x509.Certificate) string {
	names := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return fmt.Sprintf("serial %x (%s)", c.SerialNumber, strings.Join(names, ", "))
}

// reloadTLS reads the node's certificates again; on an error it keeps the
// ones it has. New connections use what it read.
func reloadTLS(log hclog.Logger, r *tlsutil.Reloader, verifyIncoming bool) error {
	if err := r.Reload(); err != nil {
		log.Error("reloading TLS certificates failed: keeping the current ones", "error", err)
		return err
	}
	logTLS(log, "reloaded TLS certificates", r, verifyIncoming)
	return nil
}

// reloadOnHangup reloads the TLS certificates on each signal of hup until
// ctx ends.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, r *tlsutil.Reloader, verifyIncoming bool, log hclog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if r == nil {
				log.Info("SIGHUP: nothing to reload (TLS is off)")
				continue
			}
			_ = reloadTLS(log, r, verifyIncoming)
		}
	}
}
