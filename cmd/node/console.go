package main

import (
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/tlsutil"
	"github.com/cronoq/cronoq/ui"
)

// newConsole returns the web console of a node whose API listens on
// listenAddr: its pages call that API with the SDK, carrying the token the
// user entered, over TLS with the node's own certificate when TLS is on.
func newConsole(cfg *agentConfig, nodeID, listenAddr string, log hclog.Logger) (*ui.Console, error) {
	addr := dialable(listenAddr)
	var opts []client.Option
	if cfg.tlsCA != "" {
		opts = append(opts, client.WithTLS(client.TLSConfig{
			CAFile: cfg.tlsCA, CertFile: cfg.tlsCert, KeyFile: cfg.tlsKey, ServerName: tlsutil.ServerName,
		}))
	}
	return ui.New(ui.Config{
		Node:   nodeID,
		Logger: log,
		NewClient: func(token string) (*client.Client, error) {
			o := append([]client.Option{client.WithLogger(log)}, opts...)
			if token != "" {
				o = append(o, client.WithToken(token))
			}
			return client.New([]string{addr}, o...)
		},
	})
}

// dialable turns a listening address into one to dial: an unspecified IP
// (0.0.0.0 or ::) becomes the loopback address of its family.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}
