package transport_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// A failing background loop shows in GET /v1/health (a reason naming it and
// its error, and its entry under loops), in the Health call and in
// /metrics; once it succeeds again the node is ok.
func TestLoopHealthOverTheAPI(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	injected := errors.New("raft configuration unreadable (injected)")
	c := testcluster.New(t, 1, testcluster.Configure(func(_ int, cfg *cluster.Config) {
		cfg.Loops.Fault = func(loop string) error {
			if loop == cluster.LoopReconcile && failing.Load() {
				return injected
			}
			return nil
		}
	}))
	n, _ := c.Leader()
	op := operatorClient(t, n)

	type loopJSON struct {
		Name        string  `json:"name"`
		Degraded    bool    `json:"degraded"`
		Failures    int     `json:"consecutive_failures"`
		Total       uint64  `json:"failures_total"`
		LastError   string  `json:"last_error"`
		LastSuccess string  `json:"last_success"`
		Backoff     float64 `json:"backoff_seconds"`
	}
	type healthBody struct {
		Status  string     `json:"status"`
		Reasons []string   `json:"reasons"`
		Loops   []loopJSON `json:"loops"`
	}
	var body healthBody
	reconcile := func() loopJSON {
		for _, l := range body.Loops {
			if l.Name == cluster.LoopReconcile {
				return l
			}
		}
		return loopJSON{}
	}
	const want = "loop reconcile: "
	require.Eventually(t, func() bool {
		code, raw := httpGet(t, n, "/v1/health")
		require.Equal(t, http.StatusOK, code, "degraded is still 200: %s", raw)
		body = healthBody{}
		require.NoError(t, json.Unmarshal([]byte(raw), &body))
		return body.Status == cluster.HealthDegraded && reconcile().Degraded
	}, 20*time.Second, 10*time.Millisecond, "reconcile never degraded the node")
	l := reconcile()
	require.GreaterOrEqual(t, l.Failures, 3)
	require.Equal(t, injected.Error(), l.LastError)
	require.Positive(t, l.Backoff)
	var reason string
	for _, r := range body.Reasons {
		if strings.HasPrefix(r, want) {
			reason = r
		}
	}
	require.Contains(t, reason, injected.Error(), "reasons: %q", body.Reasons)

	resp, err := op.Health(ctxT(t, 5*time.Second), connect.NewRequest(&cronoqv1.HealthRequest{}))
	require.NoError(t, err)
	require.Equal(t, cluster.HealthDegraded, resp.Msg.GetStatus())
	require.True(t, hasPrefix(resp.Msg.GetReasons(), want), "reasons: %q", resp.Msg.GetReasons())

	code, metrics := httpGet(t, n, "/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, s := range []string{
		`cronoq_loop_failures_total{loop="reconcile"}`,
		`cronoq_loop_consecutive_failures{loop="reconcile"}`,
		`cronoq_loop_backoff_seconds{loop="reconcile"}`,
		`cronoq_loop_degraded{loop="reconcile"} 1`,
		`cronoq_loop_degraded{loop="gossip-meta"} 0`,
	} {
		require.Contains(t, metrics, s)
	}

	failing.Store(false)
	require.Eventually(t, func() bool {
		resp, err := op.Health(ctxT(t, 5*time.Second), connect.NewRequest(&cronoqv1.HealthRequest{}))
		require.NoError(t, err)
		return resp.Msg.GetStatus() == cluster.HealthOK && !hasPrefix(resp.Msg.GetReasons(), want)
	}, 20*time.Second, 10*time.Millisecond, "the node did not recover")
	code, raw := httpGet(t, n, "/v1/health")
	require.Equal(t, http.StatusOK, code)
	body = healthBody{}
	require.NoError(t, json.Unmarshal([]byte(raw), &body))
	require.Equal(t, cluster.HealthOK, body.Status)
	l = reconcile()
	require.False(t, l.Degraded)
	require.Zero(t, l.Failures)
	require.Empty(t, l.LastError)
	require.NotEmpty(t, l.LastSuccess)
	require.GreaterOrEqual(t, l.Total, uint64(3))
}

func hasPrefix(reasons []string, prefix string) bool {
	for _, r := range reasons {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}
