package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// backoffSchedule is an operation that needs log format version 2: a
// schedule whose task carries a retry backoff.
func backoffSchedule(name string) cluster.ScheduleSpec {
	return cluster.ScheduleSpec{
		Name: name, Cron: "@every 1h",
		Task: fsm.Template{Pool: "p", Kind: "k", Backoff: fsm.Backoff{Initial: time.Second, Max: time.Minute}},
	}
}

// addOnLeader runs AddSchedule on whichever node leads.
func addOnLeader(ctx context.Context, c *testcluster.Cluster, spec cluster.ScheduleSpec) error {
	l, _ := c.Leader()
	_, err := l.Node.AddSchedule(ctx, spec)
	return err
}

// TestRollingUpgrade plays a rolling upgrade: one of three servers runs a
// release that understands log format 1 only. While it is in the cluster,
// an operation that needs format 2 is refused with a clear error (and one
// that needs format 1 works); once it is upgraded, the operation works and
// every server applies it. A server of the old release that joins after
// that entry was written does not skip it: it stops applying the log and
// reports itself failed, and the others go on.
func TestRollingUpgrade(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Configure(func(i int, cfg *cluster.Config) {
		if i == 2 {
			cfg.LogVersion = 1 // n3 plays the older release
		}
	}))
	c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	err := addOnLeader(ctx, c, backoffSchedule("needs-v2"))
	var ve *cluster.VersionError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, uint16(2), ve.Need)
	require.Equal(t, uint16(1), ve.Have)
	require.Contains(t, err.Error(), "upgrade every server")
	plain := backoffSchedule("v1-only")
	plain.Task.Backoff = fsm.Backoff{}
	require.NoError(t, addOnLeader(ctx, c, plain), "what the old server understands still works")

	// Upgrade n3: the same data dir, the new release.
	c.Stop("n3")
	cfg := c.Node("n3").Config
	cfg.LogVersion = 0 // the release's own
	c.Start(cfg)
	var last error
	require.Eventually(t, func() bool {
		last = addOnLeader(ctx, c, backoffSchedule("needs-v2"))
		return last == nil || !errors.As(last, &ve)
	}, 30*time.Second, 50*time.Millisecond, "the upgraded cluster never took the operation")
	require.NoError(t, last)
	c.Converged()
	for _, n := range c.Live() {
		s, ok := n.Node.FSM().Schedule("needs-v2")
		require.True(t, ok, "on %s", n.ID)
		require.Equal(t, time.Second, s.Backoff.Initial, "on %s", n.ID)
		require.Equal(t, cluster.HealthOK, n.Node.Health().Status, "%s: %v", n.ID, n.Node.Health().Reasons)
	}

	// A server of the old release joins: it halts at the format 2 entry,
	// says so, and the others are not affected.
	old := c.Config("n4")
	old.LogVersion = 1
	old.Join = []string{c.Node("n1").Addrs.Gossip}
	var logged lockedBuffer
	old.Logger = hclog.New(&hclog.LoggerOptions{Name: "n4", Output: &logged})
	n4 := c.Start(old)
	require.Eventually(t, func() bool {
		h := n4.Node.Health()
		return h.Status == cluster.HealthFailed && len(h.Reasons) > 0 &&
			strings.Contains(h.Reasons[0], "needs log format version 2 (this node understands 1)")
	}, 30*time.Second, 20*time.Millisecond, "the old server did not report the entry it cannot apply")
	_, ok := n4.Node.FSM().Schedule("needs-v2")
	require.False(t, ok, "the old server applied nothing of the entry it cannot apply")
	_, ok = n4.Node.FSM().Schedule("v1-only")
	require.True(t, ok, "the old server applied the entries before it")
	halted := n4.Node.FSM().Halted()
	require.NotNil(t, halted)
	require.Equal(t, halted.Index-1, n4.Node.FSM().AppliedIndex(), "it stopped right before the entry")
	var fatal []string
	for _, line := range strings.Split(logged.String(), "\n") {
		if strings.Contains(line, "FATAL") {
			fatal = append(fatal, line)
		}
	}
	require.Len(t, fatal, 1, "one fatal line:\n%s", logged.String())
	require.Contains(t, fatal[0], fmt.Sprintf("index=%d", halted.Index))
	require.Contains(t, fatal[0], "needs_log_version=2")

	// While it is in the cluster, the leader writes no format 2 entry.
	require.Eventually(t, func() bool {
		return errors.As(addOnLeader(ctx, c, backoffSchedule("again")), &ve)
	}, 30*time.Second, 50*time.Millisecond)
	l, _ := c.Leader()
	require.NotEqual(t, "n4", l.ID)
	require.Equal(t, cluster.HealthOK, l.Node.Health().Status, "%v", l.Node.Health().Reasons)
}

// lockedBuffer is a bytes.Buffer safe for a logger and a reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
