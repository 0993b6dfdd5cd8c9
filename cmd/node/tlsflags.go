package main

import (
	"os"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/tlsutil"
)

// tlsClientFlags are the TLS flags of every client command: with any of
// them, the nodes are dialled with HTTPS.
type tlsClientFlags struct {
	caCert, clientCert, clientKey, serverName string
}

// tlsClientFlags registers -ca-cert, -client-cert, -client-key and
// -tls-server-name, with their environment variables as defaults.
func (c *cmd) tlsClientFlags(f *tlsClientFlags) {
	c.fs.StringVar(&f.caCert, "ca-cert", os.Getenv("CRONOQ_CACERT"),
		"dial the nodes with HTTPS and verify them with the CA certificate in `FILE` (PEM); env CRONOQ_CACERT")
	c.fs.StringVar(&f.clientCert, "client-cert", os.Getenv("CRONOQ_CLIENT_CERT"),
		"present the client certificate in `FILE` (PEM, with -client-key; nodes with -tls-verify-incoming require one); env CRONOQ_CLIENT_CERT")
	c.fs.StringVar(&f.clientKey, "client-key", os.Getenv("CRONOQ_CLIENT_KEY"),
		"private key of -client-cert, `FILE` (PEM); env CRONOQ_CLIENT_KEY")
	c.fs.StringVar(&f.serverName, "tls-server-name", os.Getenv("CRONOQ_TLS_SERVER_NAME"),
		"check the nodes' certificates for `NAME` instead of the host of -addr ("+tlsutil.ServerName+" is in every server certificate of 'cronoq tls cert create'); env CRONOQ_TLS_SERVER_NAME")
}

// config returns the client's TLS configuration, nil when no TLS flag is
// set. It reads the files, so that a missing or bad one is reported with
// its flag.
func (f *tlsClientFlags) config() (*client.TLSConfig, error) {
	if f.caCert == "" && f.clientCert == "" && f.clientKey == "" && f.serverName == "" {
		return nil, nil
	}
	cfg := &client.TLSConfig{ServerName: f.serverName}
	if f.caCert != "" {
		pool, err := tlsutil.LoadCAPool(f.caCert)
		if err != nil {
			return nil, usagef("invalid -ca-cert: %v", err)
		}
		cfg.CAPool = pool
	}
	switch {
	case f.clientCert != "" && f.clientKey == "":
		return nil, usagef("-client-cert needs -client-key (env CRONOQ_CLIENT_KEY)")
	case f.clientKey != "" && f.clientCert == "":
		return nil, usagef("-client-key needs -client-cert (env CRONOQ_CLIENT_CERT)")
	case f.clientCert != "":
		cert, err := tlsutil.LoadKeyPair(f.clientCert, f.clientKey)
		if err != nil {
			return nil, usagef("invalid -client-cert/-client-key: %v", err)
		}
		cfg.Certificate = &cert
	}
	return cfg, nil
}
