//go:build jepsenfaults

package transport_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/transport"
)

// adminCall sends method path with body (none when empty) to node n and
// decodes the JSON answer into a map.
func adminCall(t *testing.T, n *testNode, method, path, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), method, "http://"+n.Addr()+path, rd)
	require.NoError(t, err)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func num(t *testing.T, m map[string]any, k string) uint64 {
	t.Helper()
	v, ok := m[k].(float64)
	require.True(t, ok, "%s missing or not a number in %v", k, m)
	return uint64(v)
}

func TestAdminAPI(t *testing.T) {
	c := newTestCluster(t, 3, 3, 2*time.Second)
	leader, followers := c.Leader()
	cl := c.Client(leader)
	for i := range 5 {
		_, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}, Key: string(rune('a' + i))})
		require.NoError(t, err)
	}

	t.Run("raft", func(t *testing.T) {
		code, r := adminCall(t, leader, http.MethodGet, "/admin/raft", "")
		require.Equal(t, http.StatusOK, code)
		for _, k := range []string{"node", "state", "term", "leader", "applied_index", "epoch", "commit_index"} {
			require.Contains(t, r, k)
		}
		require.Equal(t, leader.ID, r["node"])
		require.Equal(t, "leader", r["state"])
		require.Equal(t, leader.ID, r["leader"])
		require.Positive(t, num(t, r, "term"))
		require.Positive(t, num(t, r, "epoch"))
		require.Equal(t, true, r["ready"])
		require.GreaterOrEqual(t, num(t, r, "commit_index"), num(t, r, "fsm_index"))

		code, f := adminCall(t, followers[0], http.MethodGet, "/admin/raft", "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "follower", f["state"])
		require.Equal(t, leader.ID, f["leader"])
		require.Equal(t, false, f["ready"])
	})

	t.Run("barrier and hash agree across nodes", func(t *testing.T) {
		code, lb := adminCall(t, leader, http.MethodPost, "/admin/barrier", "")
		require.Equal(t, http.StatusOK, code, "%v", lb)
		require.Len(t, lb["hash"], 64)
		_, r := adminCall(t, leader, http.MethodGet, "/admin/raft", "")
		commit := num(t, r, "commit_index")
		for _, f := range followers {
			code, fb := adminCall(t, f, http.MethodPost, "/admin/barrier", `{"index":`+jsonNum(commit)+`}`)
			require.Equal(t, http.StatusOK, code, "%v", fb)
			require.Equal(t, lb, fb, "follower %s", f.ID)
			code, fh := adminCall(t, f, http.MethodGet, "/admin/fsm/hash", "")
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, lb, fh)
		}
		code, e := adminCall(t, followers[0], http.MethodPost, "/admin/barrier", `{"idx":1}`)
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, e["error"], "idx")
	})

	t.Run("clock", func(t *testing.T) {
		code, r := adminCall(t, leader, http.MethodPost, "/admin/clock", `{"offset_ms":600000,"rate":1}`)
		require.Equal(t, http.StatusOK, code, "%v", r)
		require.Equal(t, float64(600000), r["offset_ms"])
		require.Equal(t, float64(1), r["rate"])
		now, err := time.Parse(time.RFC3339Nano, r["now"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now().Add(10*time.Minute), now, time.Minute)

		// The engine stamps its entries with the injected clock, once the
		// other voters' clocks agree with it (until then the leader's
		// clock check holds it at its last trusted reading).
		for _, f := range followers {
			code, r := adminCall(t, f, http.MethodPost, "/admin/clock", `{"offset_ms":600000,"rate":1}`)
			require.Equal(t, http.StatusOK, code, "%v", r)
		}
		require.Eventually(t, func() bool {
			res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
			if err != nil {
				return false
			}
			task, err := cl.Get(ctxT(t, 10*time.Second), res.ID)
			return err == nil && task.SubmittedAt.Sub(time.Now().Add(10*time.Minute)).Abs() < time.Minute
		}, 20*time.Second, 50*time.Millisecond, "the engine does not stamp entries with the injected clock")

		for _, n := range append(followers, leader) {
			code, r = adminCall(t, n, http.MethodPost, "/admin/clock", `{"offset_ms":0,"rate":1}`)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, float64(0), r["offset_ms"])
		}
		code, r = adminCall(t, leader, http.MethodGet, "/admin/clock", "")
		require.Equal(t, http.StatusOK, code)
		now, err = time.Parse(time.RFC3339Nano, r["now"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), now, time.Minute)

		code, _ = adminCall(t, leader, http.MethodPost, "/admin/clock", `{"offset_ms":0,"rate":-2}`)
		require.Equal(t, http.StatusBadRequest, code)
	})

	t.Run("disk", func(t *testing.T) {
		code, r := adminCall(t, leader, http.MethodPost, "/admin/disk", `{"fsync_delay_ms":20,"stall_ms":0}`)
		require.Equal(t, http.StatusOK, code, "%v", r)
		require.Equal(t, float64(20), r["fsync_delay_ms"])
		before := num(t, r, "delayed_writes")
		_, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
		require.NoError(t, err)
		_, r = adminCall(t, leader, http.MethodGet, "/admin/disk", "")
		require.Greater(t, num(t, r, "delayed_writes"), before)
		require.GreaterOrEqual(t, num(t, r, "injected_ms"), uint64(20))

		code, r = adminCall(t, leader, http.MethodPost, "/admin/disk", `{}`)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, float64(0), r["fsync_delay_ms"])
		require.Equal(t, float64(0), r["stall_remaining_ms"])
	})
}

func jsonNum(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// The stale-insert failpoint makes the leader append a batch of the epoch
// before its own. The FSM refuses it as stale on every node; with the
// noepoch fault it is applied and the task appears although no client
// submitted it.
func TestAdminStaleInsertFailpoint(t *testing.T) {
	c := newTestCluster(t, 3, 3, 2*time.Second)
	leader, followers := c.Leader()
	cl := c.Client(leader)
	_, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}, Key: "before"})
	require.NoError(t, err)
	_, r := adminCall(t, leader, http.MethodGet, "/admin/raft", "")
	epoch := num(t, r, "epoch")
	require.Positive(t, epoch)

	const key = "stale-epoch-probe"
	code, out := adminCall(t, leader, http.MethodPost, "/admin/failpoint/stale-insert", `{"pool":"p","key":"`+key+`"}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, epoch-1, num(t, out, "epoch"))
	id, _ := out["id"].(string)
	require.Len(t, id, 26)

	// Every node has applied as far as the leader has committed.
	code, lb := adminCall(t, leader, http.MethodPost, "/admin/barrier", "")
	require.Equal(t, http.StatusOK, code, "%v", lb)
	_, r = adminCall(t, leader, http.MethodGet, "/admin/raft", "")
	commit := num(t, r, "commit_index")
	for _, f := range followers {
		code, fb := adminCall(t, f, http.MethodPost, "/admin/barrier", `{"index":`+jsonNum(commit)+`}`)
		require.Equal(t, http.StatusOK, code, "%v", fb)
		require.Equal(t, lb, fb, "follower %s", f.ID)
	}
	nodes := append([]*testNode{leader}, followers...)

	if noEpochBug {
		require.Equal(t, true, out["applied"], "%v", out)
		require.NotContains(t, out, "error")
		for _, n := range nodes {
			st, _ := n.Node.StaleRead()
			task, ok := st.Get(id)
			require.True(t, ok, "node %s lacks the stale task", n.ID)
			require.Equal(t, "p", task.Pool)
			require.Equal(t, key, task.Key)
			require.Equal(t, transport.StaleProbeKind, task.Kind)
			require.Equal(t, fsm.StatusQueued, task.Status)
		}
		task, err := cl.Get(ctxT(t, 10*time.Second), id)
		require.NoError(t, err)
		require.Equal(t, key, task.Key)
		res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}, Key: key})
		require.NoError(t, err)
		require.True(t, res.Duplicate, "the key is taken by the stale task")
		require.Equal(t, id, res.ID)
	} else {
		require.Equal(t, false, out["applied"], "%v", out)
		require.Contains(t, out["error"], "stale epoch")
		for _, n := range nodes {
			st, _ := n.Node.StaleRead()
			_, ok := st.Get(id)
			require.False(t, ok, "node %s applied the stale task", n.ID)
		}
		_, err := cl.Get(ctxT(t, 10*time.Second), id)
		require.ErrorIs(t, err, client.ErrNotFound)
		res, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}, Key: key})
		require.NoError(t, err)
		require.False(t, res.Duplicate, "the key was taken by the refused batch")
		require.NotEqual(t, id, res.ID)
	}
	// The engine goes on: the leader still commits.
	_, err = cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}, Key: "after"})
	require.NoError(t, err)

	code, e := adminCall(t, followers[0], http.MethodPost, "/admin/failpoint/stale-insert", `{"pool":"p","key":"x"}`)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", e)
	code, e = adminCall(t, leader, http.MethodPost, "/admin/failpoint/stale-insert", `{"key":"x"}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", e)
	require.Contains(t, e["error"], "pool")
	code, e = adminCall(t, leader, http.MethodPost, "/admin/failpoint/stale-insert", `{"pool":"p","nope":1}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", e)
}
