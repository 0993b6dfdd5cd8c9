package cluster_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
	"github.com/cronoq/cronoq/internal/tlsutil"
)

// submitTo submits one task on the leader n.
func submitTo(t *testing.T, n *cluster.Node, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subs, errs, err := submitted(n.Submit(ctx, cluster.SubmitOne, []cluster.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: key}}))
	require.NoError(t, err)
	if len(errs) > 0 {
		require.NoError(t, errs[0])
	}
	require.NotEmpty(t, subs[0].ID)
}

// raftServerCert connects to the raft listener at addr with cfg and
// returns the serial of the certificate it presents, or the error of the
// exchange (a read follows the handshake: in TLS 1.3 the listener judges
// the client's certificate after the client has finished).
func raftServerCert(addr string, cfg *tls.Config) (string, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(&d, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	serial := c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return serial, nil // accepted: raft waits for a request
	}
	return "", err
}

func TestTLSRaft(t *testing.T) {
	t.Parallel()
	ca := testcluster.NewCA(t)
	c := testcluster.New(t, 3, testcluster.TLS(ca, false))
	leader, followers := c.Leader()
	submitTo(t, leader.Node, "first")
	c.Converged()
	for _, n := range c.Live() {
		require.Empty(t, n.Node.Health().Reasons, "%s: TLS is on", n.ID)
	}

	// The raft listener speaks mutual TLS only: a plain connection, no
	// client certificate, and a client certificate of the same CA (which is
	// not a server certificate) are all refused.
	raftAddr := leader.Node.RaftAddr()
	plain, err := net.DialTimeout("tcp", raftAddr, 5*time.Second)
	require.NoError(t, err)
	_, _ = plain.Write([]byte{0, 0x80, 0, 0, 0, 0, 0, 0, 0}) // rpcAppendEntries, then junk
	_ = plain.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = plain.Read(make([]byte, 1))
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the listener closes a plain connection: %v", err)
	_ = plain.Close()

	peerCfg := followers[0].Config.TLS.PeerClientConfig()
	_, err = raftServerCert(raftAddr, peerCfg)
	require.NoError(t, err, "another node is accepted")
	noCert := peerCfg.Clone()
	noCert.Certificates = nil
	_, err = raftServerCert(raftAddr, noCert)
	require.ErrorContains(t, err, "tls: certificate required")
	clientCert, clientKey := ca.Client()
	cert, err := tlsutil.LoadKeyPair(clientCert, clientKey)
	require.NoError(t, err)
	asClient := peerCfg.Clone()
	asClient.Certificates = []tls.Certificate{cert}
	_, err = raftServerCert(raftAddr, asClient)
	require.ErrorContains(t, err, "remote error: tls", "a client certificate cannot pass for a node")

	t.Run("a node of another CA never gets the log", func(t *testing.T) {
		other := testcluster.NewCA(t)
		cfg := c.Config("foreign")
		host, _, err := net.SplitHostPort(cfg.HTTPAddr)
		require.NoError(t, err)
		cfg.TLS = other.Reloader(host)
		cfg.Join = []string{leader.Addrs.Gossip}
		foreign := c.Start(cfg)

		// Gossip lets it in and the leader adds it to the configuration, but
		// every raft dial to it fails its TLS handshake.
		before := leader.Node.RaftTLSFailures()
		require.Eventually(t, func() bool {
			_, inConfig := peerMap(t, leader.Node)["foreign"]
			return inConfig && leader.Node.RaftTLSFailures() >= before+3
		}, 30*time.Second, 10*time.Millisecond)
		submitTo(t, leader.Node, "second")
		require.False(t, peerMap(t, leader.Node)["foreign"], "never promoted to voter")
		st := foreign.Node.RaftStats()
		require.Equal(t, "0", st["last_log_index"], "%v", st)
		require.Equal(t, "0", st["applied_index"])
		id, _ := foreign.Node.Leader()
		require.Empty(t, id, "it never heard from the leader")

		// It cannot append to the others either: its dial fails the
		// handshake before a byte of raft is sent, and the leader's term
		// stays where it was.
		term := leader.Node.RaftStats()["term"]
		var resp raft.AppendEntriesResponse
		err = foreign.Node.RaftTransport().AppendEntries(raft.ServerID(leader.ID), raft.ServerAddress(raftAddr), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ID: []byte("foreign"), Addr: []byte(foreign.Node.RaftAddr())},
			Term:      1 << 40, PrevLogEntry: 1 << 40, LeaderCommitIndex: 1 << 40,
			Entries: []*raft.Log{{Index: 1<<40 + 1, Term: 1 << 40, Type: raft.LogCommand, Data: []byte("forged")}},
		}, &resp)
		require.ErrorContains(t, err, "TLS handshake")
		require.ErrorContains(t, err, "certificate signed by unknown authority")
		require.Equal(t, term, leader.Node.RaftStats()["term"])
		// And the leader refuses its certificate on its own.
		foreignCfg := foreign.Config.TLS.PeerClientConfig()
		foreignCfg.InsecureSkipVerify = true
		_, err = raftServerCert(raftAddr, foreignCfg)
		require.ErrorContains(t, err, "remote error: tls")

		c.Stop("foreign")
		c.Converged()
	})

	t.Run("a reload switches new connections to the new certificate", func(t *testing.T) {
		f := followers[0]
		old, err := raftServerCert(f.Node.RaftAddr(), leader.Config.TLS.PeerClientConfig())
		require.NoError(t, err)
		require.Equal(t, f.Config.TLS.Leaf().SerialNumber.String(), old)

		// New files in place of the old ones, then the reload.
		newCert, newKey := ca.Server(f.Addrs.IP)
		_, certFile, keyFile := f.Config.TLS.Files()
		for src, dst := range map[string]string{newCert: certFile, newKey: keyFile} {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst, b, 0o600))
		}
		require.NoError(t, f.Config.TLS.Reload())
		serial, err := raftServerCert(f.Node.RaftAddr(), leader.Config.TLS.PeerClientConfig())
		require.NoError(t, err)
		require.NotEqual(t, old, serial)
		require.Equal(t, f.Config.TLS.Leaf().SerialNumber.String(), serial)

		// Raft makes new connections with it, both ways.
		f.Node.IsolateRaft(true)
		f.Node.IsolateRaft(false)
		// The reconnection may cost the leader its term on a loaded
		// machine: the keyed submit is repeated on the leader of the
		// moment until it is acknowledged.
		require.Eventually(t, func() bool {
			l, _ := c.Leader()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			subs, errs, err := submitted(l.Node.Submit(ctx, cluster.SubmitOne, []cluster.Spec{{Template: fsm.Template{Pool: "p", Kind: "k"}, Key: "after-reload"}}))
			if err != nil {
				t.Logf("submit after the reload (%s): %v", retryKind(err), err)
				return false
			}
			require.Empty(t, errs)
			return subs[0].ID != ""
		}, 30*time.Second, 50*time.Millisecond)
		c.Converged()
	})
}
