package client

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

// logBuffer is an io.Writer safe for the worker's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func infoLogger(out *logBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info})
}

// At the default level, a worker that cannot connect says so at WARN after
// about two seconds, with the error, and no more than once per warnEvery.
func TestWorkerWarnsWhileItCannotConnect(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t)
	out := &logBuffer{}
	c := newTestClient(t, []string{dead})
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Logger: infoLogger(out),
		Handlers: map[string]Handler{"k": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil })}})
	require.NoError(t, err)
	start := time.Now()
	stop := runWorker(t, w)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "[WARN]") }, 5*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), warnAfter-100*time.Millisecond)
	require.Contains(t, out.String(), "cannot connect to the cluster, still trying")
	require.Contains(t, out.String(), "addr="+dead)
	require.Contains(t, out.String(), `error="connection refused`)
	// More failed attempts, within warnEvery: no second warning.
	require.Never(t, func() bool { return strings.Count(out.String(), "[WARN]") > 1 }, time.Second, 20*time.Millisecond, out.String())
	require.NoError(t, stop())
	require.Equal(t, 1, strings.Count(out.String(), "[WARN]"), out.String())
	require.NotContains(t, out.String(), "connected")
}

// At the default level, a worker says when its stream connects, naming the
// node and whether it is the leader.
func TestWorkerLogsWhenConnected(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	out := &logBuffer{}
	c := newTestClient(t, addrs(fc, 0))
	w, err := c.NewWorker(WorkerConfig{Pool: "p", Logger: infoLogger(out),
		Handlers: map[string]Handler{"k": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil })}})
	require.NoError(t, err)
	stop := runWorker(t, w)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "connected") }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	line := out.String()
	require.Contains(t, line, "[INFO]  worker: connected")
	require.Contains(t, line, "addr="+fc.Node(0).Addr())
	require.Contains(t, line, "node=node0")
	require.Contains(t, line, `leader="this node"`)
	require.NotContains(t, line, "[WARN]")
}
