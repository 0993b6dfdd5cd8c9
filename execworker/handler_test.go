package execworker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronoq/cronoq/client"
)

func newHandler(t *testing.T, command string, mod ...func(*Config)) (*Handler, string) {
	t.Helper()
	root := t.TempDir()
	cfg := Config{Command: command, Root: root}
	for _, m := range mod {
		m(&cfg)
	}
	h, err := New(cfg)
	require.NoError(t, err)
	return h, root
}

func job(id string, payload string) *client.Job {
	return &client.Job{
		Task: &client.Task{
			ID: id, Template: client.Template{Pool: "billing", Kind: "invoice", Payload: []byte(payload)}, Status: client.StatusRunning, Attempt: 3, Lease: 4294967301,
		},
		Lease:   4294967301,
		Attempt: 3,
	}
}

func TestHandlerSuccess(t *testing.T) {
	t.Parallel()
	h, root := newHandler(t, `
printf 'stdin=%s\n' "$(cat)"
printf 'id=%s attempt=%s lease=%s pool=%s kind=%s\n' "$CRONOQ_TASK_ID" "$CRONOQ_ATTEMPT" "$CRONOQ_LEASE" "$CRONOQ_POOL" "$CRONOQ_KIND"
printf 'pwd=%s mode=%s extra=%s\n' "$(pwd -P)" "$(stat -c %a .)" "$EXTRA"`,
		func(c *Config) { c.Env = []string{"EXTRA=yes", "CRONOQ_TASK_ID=overridden"} })
	out, err := h.Work(context.Background(), job("01JD3ZQ8Y6A5B4C3D2E1F0G9H8", "hello"))
	require.NoError(t, err)
	realRoot, err := filepath.EvalSymlinks(root)
	require.NoError(t, err)
	require.Equal(t, "stdin=hello\n"+
		"id=01JD3ZQ8Y6A5B4C3D2E1F0G9H8 attempt=3 lease=4294967301 pool=billing kind=invoice\n"+
		"pwd="+realRoot+"/01JD3ZQ8Y6A5B4C3D2E1F0G9H8 mode=700 extra=yes\n", string(out))
	requireEmptyDir(t, root)
}

// TestHandlerTraceEnv: a command of a traced attempt (its ctx carries a
// span) gets TRACEPARENT and TRACESTATE naming it; an untraced one gets
// neither.
func TestHandlerTraceEnv(t *testing.T) {
	t.Parallel()
	h, _ := newHandler(t, `printf '%s|%s|%s' "${TRACEPARENT-unset}" "${TRACESTATE-unset}" "$CRONOQ_TASK_ID"`)
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	state, err := trace.ParseTraceState("vendor=1")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: state})
	out, err := h.Work(trace.ContextWithSpanContext(context.Background(), sc), job("T1", ""))
	require.NoError(t, err)
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01|vendor=1|T1", string(out))

	out, err = h.Work(context.Background(), job("T2", ""))
	require.NoError(t, err)
	require.Equal(t, "unset|unset|T2", string(out))
}

func TestHandlerFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		command   string
		permanent bool
		message   string
	}{
		{name: "exit 75 is retryable", command: `echo "try later" >&2; exit 75`, message: "exit status 75: try later"},
		{name: "exit 1 is permanent", command: `echo "bad payload" >&2; exit 1`, permanent: true, message: "exit status 1: bad payload"},
		{name: "signal is permanent", command: `kill -TERM $$`, permanent: true, message: "killed by signal 15 (terminated)"},
		{
			name: "oversized output is permanent", command: `head -c 2048 /dev/zero`, permanent: true,
			message: "output too large: stdout exceeded 1024 bytes",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, root := newHandler(t, tc.command, func(c *Config) { c.MaxOutput = 1024 })
			out, err := h.Work(context.Background(), job("t1", ""))
			require.Nil(t, out)
			require.EqualError(t, err, tc.message)
			var perm *client.PermanentError
			var retry *client.RetryableError
			if tc.permanent {
				require.ErrorAs(t, err, &perm)
				require.NotErrorAs(t, err, &retry)
			} else {
				require.ErrorAs(t, err, &retry)
				require.Zero(t, retry.After)
				require.NotErrorAs(t, err, &perm)
			}
			requireEmptyDir(t, root)
		})
	}
}

func TestHandlerUnsafeTaskID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", ".", "..", "../x", "a/b", "a\x00b", "a\nb", `a\b`} {
		h, root := newHandler(t, "touch ran")
		_, err := h.Work(context.Background(), job(id, ""))
		require.ErrorIs(t, err, ErrUnsafeID, "id %q", id)
		var perm *client.PermanentError
		require.ErrorAs(t, err, &perm, "id %q", id)
		requireEmptyDir(t, root)
	}
}

func TestHandlerReplacesLeftoverDir(t *testing.T) {
	t.Parallel()
	h, root := newHandler(t, `ls -A`)
	left := filepath.Join(root, "t1", "sub")
	require.NoError(t, os.MkdirAll(left, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(left, "old"), []byte("x"), 0o600))
	out, err := h.Work(context.Background(), job("t1", ""))
	require.NoError(t, err)
	require.Empty(t, string(out))
	requireEmptyDir(t, root)
}

func TestHandlerCancel(t *testing.T) {
	t.Parallel()
	h, root := newHandler(t, spawnScript("$PWD", ""), func(c *Config) { c.KillGrace = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := h.Work(ctx, job("t1", ""))
		done <- result{out, err}
	}()
	dir := filepath.Join(root, "t1")
	sh, child := readPid(t, dir, "sh"), readPid(t, dir, "child")
	cancel()
	r := <-done
	require.Nil(t, r.out)
	require.ErrorIs(t, r.err, context.Canceled)
	var perm *client.PermanentError
	require.NotErrorAs(t, r.err, &perm, "a stopped attempt is not a permanent failure")
	requireGone(t, sh)
	requireGone(t, child)
	requireEmptyDir(t, root)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Root: "/tmp"}, "creating exec handler: Command is empty"},
		{Config{Command: " ", Root: "/tmp"}, "creating exec handler: Command is empty"},
		{Config{Command: "true"}, "creating exec handler: Root is empty"},
		{Config{Command: "true", Root: "/tmp", MaxOutput: -1}, "creating exec handler: MaxOutput -1 is negative"},
		{Config{Command: "true", Root: "/tmp", KillGrace: -time.Second}, "creating exec handler: KillGrace -1s is negative"},
		{Config{Command: "true", Root: "/tmp", MaxSpawn: -1}, "creating exec handler: MaxSpawn -1 is negative"},
	}
	for _, tc := range tests {
		_, err := New(tc.cfg)
		require.EqualError(t, err, tc.want)
	}
	h, err := New(Config{Command: "true", Root: "relative"})
	require.NoError(t, err)
	require.True(t, filepath.IsAbs(h.cfg.Root))
	require.Equal(t, DefaultMaxOutput, h.cfg.MaxOutput)
	require.Equal(t, DefaultKillGrace, h.cfg.KillGrace)
	require.Equal(t, DefaultMaxSpawn, h.cfg.MaxSpawn)
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Empty(t, names, "left in %s: %s", dir, strings.Join(names, ", "))
}
