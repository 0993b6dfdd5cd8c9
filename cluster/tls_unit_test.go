package cluster

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

func TestPlaintextExposure(t *testing.T) {
	lo := Config{HTTPAddr: "127.0.0.1:8650", RaftAddr: "127.0.0.1:8651", GossipAddr: "127.0.0.1:8652"}
	require.Empty(t, lo.plaintextExposure())
	require.Empty(t, plaintextReason(lo.plaintextExposure()))
	v6 := Config{HTTPAddr: "localhost:8650", RaftAddr: "[::1]:8651", GossipAddr: "127.9.9.9:8652"}
	require.Empty(t, v6.plaintextExposure(), "every loopback form")

	wide := Config{HTTPAddr: "10.0.0.1:8650", HTTPBindAddr: "0.0.0.0:8650", RaftAddr: "10.0.0.1:8651", GossipAddr: "10.0.0.1:8652"}
	require.Equal(t, []exposure{{"API", "0.0.0.0:8650"}, {"raft", "10.0.0.1:8651"}, {"gossip", "10.0.0.1:8652"}}, wide.plaintextExposure())
	require.Equal(t, "tls disabled on non-loopback address: API 0.0.0.0:8650, raft 10.0.0.1:8651, gossip 10.0.0.1:8652",
		plaintextReason(wide.plaintextExposure()))

	// The API advertised under a name, on loopback otherwise.
	named := lo
	named.HTTPAddr = "node1.example:8650"
	require.Equal(t, []exposure{{"API", "node1.example:8650"}}, named.plaintextExposure())
}

// A node with TLS off whose API listens on every interface warns at start
// and reports itself degraded for it.
func TestPlaintextHealth(t *testing.T) {
	var logs bytes.Buffer
	cfg := Config{
		NodeID: "m1", DataDir: t.TempDir(), Dev: true,
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:1", HTTPBindAddr: "0.0.0.0:1",
		NoSync: true, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn}),
	}.WithTestTimings()
	n, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	require.Eventually(t, func() bool { return n.Health().Ready }, 10*time.Second, 10*time.Millisecond)
	h := n.Health()
	require.Equal(t, HealthDegraded, h.Status)
	require.Equal(t, []string{"tls disabled on non-loopback address: API 0.0.0.0:1"}, h.Reasons)
	require.NoError(t, n.Stop(context.Background()))
	require.Contains(t, logs.String(), "TLS is off and the API listens on a non-loopback address")
	require.Equal(t, 1, strings.Count(logs.String(), "TLS is off"))
}
