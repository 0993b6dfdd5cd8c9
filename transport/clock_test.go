package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/transport"
)

// Every node serves its engine clock to the others, and the leader reads
// the voters' clocks through the API servers' client: its clock check runs
// and finds the clocks of the one machine in agreement.
func TestClockEndpointAndCheck(t *testing.T) {
	c := newTestCluster(t, 3, 3, 5*time.Second)
	c.Leader()
	for _, n := range c.Live() {
		req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, "http://"+n.Addr()+transport.ClockPath, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var got struct {
			Node     string `json:"node"`
			UnixNano int64  `json:"unix_nano"`
		}
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		resp.Body.Close()
		require.Equal(t, n.ID, got.Node)
		require.WithinDuration(t, time.Now(), time.Unix(0, got.UnixNano), time.Second)
	}
	// The leader of the moment (it may change on a loaded machine) checks
	// its clock, finds all three voters agreeing, and its health is clean.
	require.Eventually(t, func() bool {
		for _, n := range c.Live() {
			if !n.Node.IsLeader() {
				continue
			}
			st := n.Node.ClockStatus()
			if !st.Armed || st.Held || st.Verdict.Voters != 3 || st.Verdict.Agree != 3 {
				return false
			}
			for _, r := range n.Node.Health().Reasons {
				if strings.HasPrefix(r, "clock skew") {
					return false
				}
			}
			return true
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "the leader's clock check never agreed")
}
