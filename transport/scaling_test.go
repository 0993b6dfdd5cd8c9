package transport_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/client"
)

// TestDesiredSlots follows the autoscaling signal of a pool on three real
// nodes: the slots it could use (running and ready queued tasks, at most
// its running cap) in the pool object read through a follower, and as the
// gauge cronoq_pool_desired_slots, which the leader alone reports.
func TestDesiredSlots(t *testing.T) {
	c := newTestCluster(t, 3, 3, 2*time.Second)
	leader, followers := c.Leader()
	pc := poolClient(t, followers[0])
	cl := c.Client(followers[1])
	const pool = "scale"

	_, err := pc.Set(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetPoolRequest{Pool: pool, MaxRunning: proto.Int64(3)}))
	require.NoError(t, err)
	for i := range 5 {
		_, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: pool, Kind: "k"}})
		require.NoError(t, err, "task %d", i)
	}
	// A task waiting for its run time is not counted.
	_, err = cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: pool, Kind: "k"}, Delay: time.Hour})
	require.NoError(t, err)

	want := func(running, desired int64) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			resp, err := pc.Get(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.GetPoolRequest{Pool: pool}))
			if !assert.NoError(ct, err) {
				return
			}
			p := resp.Msg.GetPool()
			assert.Equal(ct, running, p.GetRunning(), "running")
			assert.Equal(ct, desired, p.GetDesiredSlots(), "desired slots")
			_, body := httpGet(t, leader, "/metrics")
			assert.Contains(ct, body, fmt.Sprintf("cronoq_pool_desired_slots{pool=%q} %d\n", pool, desired))
		}, 15*time.Second, 20*time.Millisecond)
	}
	// Five queued, capped at three.
	want(0, 3)
	list, err := pc.List(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.ListPoolsRequest{}))
	require.NoError(t, err)
	desired := map[string]int64{}
	for _, p := range list.Msg.GetPools() {
		desired[p.GetPool()] = p.GetDesiredSlots()
	}
	require.Equal(t, map[string]int64{pool: 3, tinyPool: 0}, desired)
	for _, f := range followers {
		_, body := httpGet(t, f, "/metrics")
		require.NotContains(t, body, "cronoq_pool_desired_slots{", "a follower reports no signal")
	}

	// A worker of four slots runs three (the cap); two wait.
	release := make(chan struct{})
	var once sync.Once
	runWorker(t, c.Client(leader), pool, map[string]client.Handler{
		"k": client.HandlerFunc(func(ctx context.Context, _ *client.Job) ([]byte, error) {
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
	})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	want(3, 3)

	// Without the cap the pool could use all five: four run, one waits.
	_, err = pc.Set(ctxT(t, 10*time.Second), connect.NewRequest(&cronoqv1.SetPoolRequest{Pool: pool, MaxRunning: proto.Int64(0)}))
	require.NoError(t, err)
	want(4, 5)

	// Once everything ready has run, the pool wants nothing.
	once.Do(func() { close(release) })
	want(0, 0)
	_, body := httpGet(t, leader, "/metrics")
	require.True(t, strings.Contains(body, "# TYPE cronoq_pool_desired_slots gauge"), "gauge type")
}
