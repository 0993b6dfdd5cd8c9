package transport_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/internal/testcluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Limits of the test clusters' engines, small enough to test cheaply.
const (
	testMaxPayload = 4 << 10
	testMaxOutput  = 4 << 10
	testWindow     = 2 * time.Second
	tinyPool       = "tiny" // holds one pending task at most
)

// testNode is one node with its API server.
type testNode = testcluster.Node

// newTestCluster starts n nodes that form one cluster (bootstrap-expect
// expect, each joining all), with the given forwarding hold timeout and
// the tests' engine limits.
func newTestCluster(t *testing.T, n, expect int, hold time.Duration) *testcluster.Cluster {
	return testcluster.New(t, n, testcluster.Expect(expect), testcluster.Hold(hold),
		testcluster.Configure(func(_ int, cfg *cluster.Config) {
			cfg.Engine.Core = core.Config{
				HeartbeatWindow: testWindow,
				MaxPayload:      testMaxPayload,
				MaxOutput:       testMaxOutput,
				Pools:           map[string]core.PoolConfig{tinyPool: {Bounds: core.Bounds{MaxPending: 1}}},
			}
		}))
}
