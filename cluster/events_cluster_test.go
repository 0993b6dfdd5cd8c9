package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
)

// collect reads sub until it has n events (failing on a gap).
func collect(t *testing.T, sub *cluster.EventSub, n int) []cluster.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []cluster.Event
	for len(out) < n {
		evs, gap, err := sub.Next(ctx, make([]cluster.Event, 0, 64))
		require.NoError(t, err, "after %d events", len(out))
		require.False(t, gap, "after %d events", len(out))
		out = append(out, evs...)
	}
	return out
}

// Every node derives the same events, with the same cursors, in the same
// order, from the entries it applies, and serves them whether it leads or
// not; a subscriber may resume after any cursor on any node, and is told
// of a gap when a snapshot replaces the replica.
func TestEventsOnEveryNode(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	nodes := c.formCluster("e1", "e2", "e3")
	c.leader()
	subs := make([]*cluster.EventSub, len(nodes))
	for i, n := range nodes {
		subs[i] = n.Subscribe(0)
		defer subs[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const tasks = 5
	ids := map[string]bool{}
	for i := range tasks {
		id, err := c.submitKey(ctx, fmt.Sprint("k", i))
		require.NoError(t, err)
		ids[id] = true
	}
	want := collect(t, subs[0], tasks)
	var last uint64
	for _, ev := range want {
		require.True(t, ids[ev.TaskID], "event of an unknown task: %+v", ev)
		require.Equal(t, fsm.StatusQueued, ev.Status)
		require.Greater(t, ev.Cursor, last, "cursors grow")
		last = ev.Cursor
	}
	for i := range nodes[1:] {
		require.Equal(t, want, collect(t, subs[i+1], tasks), "events of %s", nodes[i+1].ID())
	}

	// Resume after the second event, on each node.
	for _, n := range nodes {
		sub := n.Subscribe(want[1].Cursor)
		require.Equal(t, want[2:], collect(t, sub, tasks-2), "resumed on %s", n.ID())
		sub.Close()
	}

	// A restored backup replaces every replica: each subscriber is told
	// it may have missed events.
	var file bytes.Buffer
	_, err := c.Client().SnapshotSave(ctx, &file)
	require.NoError(t, err)
	restoreFile(ctx, t, c.Client(), file.Bytes())
	for i, sub := range subs {
		for {
			_, gap, err := sub.Next(ctx, make([]cluster.Event, 0, 64))
			require.NoError(t, err, "node %s", nodes[i].ID())
			if gap {
				break
			}
		}
	}
}
