package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// poolJSON is an entry of `cronoq pools -o json` (CONTRACT: "Pools,
// workers and ordering").
type poolJSON struct {
	Pool             string           `json:"pool"`
	Counts           map[string]int64 `json:"counts"`
	OldestQueuedAgeS *float64         `json:"oldest_queued_age_s"`
	Workers          int64            `json:"workers"`
	Slots            int64            `json:"slots"`
	Running          int64            `json:"running"`
	Parked           int64            `json:"parked"`
	Paused           bool             `json:"paused"`
	Limits           map[string]any   `json:"limits"`
}

type workerJSON struct {
	ID       string            `json:"id"`
	Pool     string            `json:"pool"`
	Labels   map[string]string `json:"labels"`
	Slots    int64             `json:"slots"`
	Busy     int64             `json:"busy"`
	Node     string            `json:"node"`
	LastSeen string            `json:"last_seen"`
}

// TestPoolsShowTheQueueAndItsWorkers: tasks submitted to a pool nobody
// serves show in `cronoq pools` with the age of the oldest; a worker
// started for the pool shows in `cronoq pools` and `cronoq workers`, and
// drains the queue.
func TestPoolsShowTheQueueAndItsWorkers(t *testing.T) {
	c := newCluster(t)
	c.waitStable(30 * time.Second)

	for range 3 {
		c.cli(t, "submit", "-pool", "lonely", "-kind", "echo", "-payload", "hi", "-o", "json").ok(t)
	}
	find := func(pools []poolJSON) *poolJSON {
		for i := range pools {
			if pools[i].Pool == "lonely" {
				return &pools[i]
			}
		}
		return nil
	}
	// pools and workers read the CLI's JSON inside the polling loops, where
	// a failure is a retry, not the end of the test.
	pools := func(ct *assert.CollectT) *poolJSON {
		var ps []poolJSON
		r := c.cli(t, "pools", "-o", "json")
		if !assert.Equal(ct, 0, r.code, "%s", r) || !assert.NoError(ct, decodeStrictErr([]byte(r.stdout), &ps)) {
			return nil
		}
		return find(ps)
	}
	var p *poolJSON
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p = pools(ct)
		if assert.NotNil(ct, p) && assert.NotNil(ct, p.OldestQueuedAgeS) {
			assert.GreaterOrEqual(ct, *p.OldestQueuedAgeS, 0.2)
		}
	}, 20*time.Second, 100*time.Millisecond)
	require.Equal(t, int64(3), p.Counts["queued"])
	require.Zero(t, p.Workers)
	require.Zero(t, p.Slots)
	require.False(t, p.Paused)

	c.startWorker(t, "worker-lonely", c.addrs(), "-pool", "lonely", "-concurrency", "2", "-handler", `echo=cat`)
	var ws []workerJSON
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ws = nil
		r := c.cli(t, "workers", "-pool", "lonely", "-o", "json")
		if assert.Equal(ct, 0, r.code, "%s", r) && assert.NoError(ct, decodeStrictErr([]byte(r.stdout), &ws)) {
			assert.Len(ct, ws, 1)
		}
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, "lonely", ws[0].Pool)
	require.NotEmpty(t, ws[0].Node)
	require.NotEmpty(t, ws[0].LastSeen)

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p = pools(ct)
		if assert.NotNil(ct, p) {
			assert.Equal(ct, int64(3), p.Counts["succeeded"])
			assert.Zero(ct, p.Counts["queued"])
			assert.Nil(ct, p.OldestQueuedAgeS)
			assert.Equal(ct, int64(1), p.Workers)
			assert.Equal(ct, int64(2), p.Slots)
		}
	}, 30*time.Second, 100*time.Millisecond)
}
