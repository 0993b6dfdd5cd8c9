package execworker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	waitFor = 10 * time.Second
	tick    = 5 * time.Millisecond
)

func TestRunSuccessOutputAndStdin(t *testing.T) {
	t.Parallel()
	res, err := Run(context.Background(), Spec{
		Command: `cat; printf ' done'; echo "some noise" >&2`,
		Payload: []byte("hello"),
	})
	require.NoError(t, err)
	require.Equal(t, "hello done", string(res.Output))
	require.Equal(t, "some noise", res.Stderr)
	require.Positive(t, res.Pid)
}

func TestRunEmptyOutputIsNotNil(t *testing.T) {
	t.Parallel()
	res, err := Run(context.Background(), Spec{Command: "true"})
	require.NoError(t, err)
	require.NotNil(t, res.Output)
	require.Empty(t, res.Output)
}

func TestRunUnreadPayloadDoesNotBlock(t *testing.T) {
	t.Parallel()
	res, err := Run(context.Background(), Spec{
		Command: "echo ok",
		Payload: bytes.Repeat([]byte("x"), 1<<20),
	})
	require.NoError(t, err)
	require.Equal(t, "ok\n", string(res.Output))
}

func TestRunExitStatuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		command   string
		code      int
		signal    syscall.Signal
		retryable bool
		stderr    string
		message   string
	}{
		{
			name: "tempfail is retryable", command: `echo "db busy" >&2; exit 75`,
			code: 75, retryable: true, stderr: "db busy", message: "exit status 75: db busy",
		},
		{
			name: "exit 1 is permanent", command: `echo "bad input" >&2; exit 1`,
			code: 1, stderr: "bad input", message: "exit status 1: bad input",
		},
		{
			name: "exit 2 without stderr", command: `exit 2`,
			code: 2, message: "exit status 2",
		},
		{
			name: "signal is permanent", command: `echo dying >&2; kill -KILL $$`,
			code: -1, signal: syscall.SIGKILL, stderr: "dying", message: "killed by signal 9 (killed): dying",
		},
		{
			name: "command not found", command: `no-such-command-cronoq`,
			code: 127,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Run(context.Background(), Spec{Command: tc.command})
			var xe *ExitError
			require.ErrorAs(t, err, &xe)
			require.Equal(t, tc.code, xe.Code)
			require.Equal(t, tc.signal, xe.Signal)
			require.Equal(t, tc.retryable, xe.Retryable())
			if tc.message != "" {
				require.Equal(t, tc.stderr, xe.Stderr)
				require.Equal(t, tc.message, xe.Error())
			} else {
				require.Contains(t, xe.Stderr, "no-such-command-cronoq")
			}
		})
	}
}

func TestRunStderrTail(t *testing.T) {
	t.Parallel()
	// 10,000 bytes of noise, then the line that matters.
	res, err := Run(context.Background(), Spec{
		Command: `head -c 10000 /dev/zero | tr '\0' 'n' >&2; printf '\nthe real reason\n' >&2; exit 3`,
	})
	var xe *ExitError
	require.ErrorAs(t, err, &xe)
	require.Equal(t, 3, xe.Code)
	require.True(t, strings.HasPrefix(xe.Stderr, "...nnn"), "tail marked as cut: %.20q", xe.Stderr)
	require.True(t, strings.HasSuffix(xe.Stderr, "\nthe real reason"))
	require.LessOrEqual(t, len(xe.Stderr), StderrTail+len("..."))
	require.Greater(t, len(xe.Stderr), StderrTail-10)
	require.Equal(t, xe.Stderr, res.Stderr)
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{name: "fits", writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "exactly full", writes: []string{"abcdefgh"}, want: "abcdefgh"},
		{name: "overflow across writes", writes: []string{"abcdef", "ghij"}, want: "...cdefghij"},
		{name: "one big write", writes: []string{"0123456789"}, want: "...23456789"},
		{name: "big write after data", writes: []string{"x", "abcdefgh"}, want: "...abcdefgh"},
		{name: "trimmed", writes: []string{"  hi \n"}, want: "hi"},
		{name: "no cut rune", writes: []string{"ébbbbbbb"}, want: "...bbbbbbb"},
		{name: "invalid utf8", writes: []string{"a\xffb"}, want: "a\uFFFDb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := &tailBuffer{max: 8}
			for _, w := range tc.writes {
				n, err := tb.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.Equal(t, tc.want, tb.String())
		})
	}
}

func TestRunEnvAndDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, err := Run(context.Background(), Spec{
		Command: `printf '%s|%s|%s|%s' "$CRONOQ_TASK_ID" "$PATH" "$OVERRIDDEN" "$(pwd -P)"`,
		Env:     []string{"CRONOQ_TASK_ID=t1", "OVERRIDDEN=first", "OVERRIDDEN=second"},
		Dir:     dir,
	})
	require.NoError(t, err)
	realDir, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	require.NotEmpty(t, os.Getenv("PATH"))
	require.Equal(t, "t1|"+os.Getenv("PATH")+"|second|"+realDir, string(res.Output))
}

func TestRunOutputBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		command  string
		tooLarge bool
	}{
		{name: "exactly the bound", command: "head -c 1024 /dev/zero"},
		{name: "one byte over", command: "head -c 1025 /dev/zero", tooLarge: true},
		{name: "far over, then success", command: "head -c 100000 /dev/zero; exit 0", tooLarge: true},
		{name: "endless", command: "yes", tooLarge: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := Run(context.Background(), Spec{Command: tc.command, MaxOutput: 1024})
			if !tc.tooLarge {
				require.NoError(t, err)
				require.Len(t, res.Output, 1024)
				return
			}
			require.ErrorIs(t, err, ErrOutputTooLarge)
			require.EqualError(t, err, "output too large: stdout exceeded 1024 bytes")
			require.Nil(t, res.Output, "output is never truncated")
			requireGone(t, res.Pid)
		})
	}
}

func TestRunEmptyCommand(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Spec{Command: "  "})
	require.EqualError(t, err, "empty command")
}

func TestRunContextAlreadyDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	_, err := Run(ctx, Spec{Command: "touch ran", Dir: dir})
	require.ErrorIs(t, err, context.Canceled)
	_, statErr := os.Stat(filepath.Join(dir, "ran"))
	require.ErrorIs(t, statErr, os.ErrNotExist, "the command never started")
}

func TestRunBadDir(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Spec{Command: "true", Dir: filepath.Join(t.TempDir(), "missing")})
	require.ErrorIs(t, err, os.ErrNotExist)
	var xe *ExitError
	require.False(t, errors.As(err, &xe))
}

// spawnScript starts a background sleep, records its pid and the shell's in
// dir (atomically, via rename), then blocks in a foreground sleep.
func spawnScript(dir, prefix string) string {
	return spawnScriptThen(dir, prefix, "sleep 1000")
}

// spawnScriptThen is spawnScript ending in last instead of a foreground
// sleep.
func spawnScriptThen(dir, prefix, last string) string {
	d := strconv.Quote(dir)
	return prefix + `
sleep 1000 & echo $! > ` + d + `/child.tmp && mv ` + d + `/child.tmp ` + d + `/child
echo $$ > ` + d + `/sh.tmp && mv ` + d + `/sh.tmp ` + d + `/sh
` + last
}

type runResult struct {
	res Result
	err error
}

func startRun(ctx context.Context, spec Spec) <-chan runResult {
	ch := make(chan runResult, 1)
	go func() {
		res, err := Run(ctx, spec)
		ch <- runResult{res, err}
	}()
	return ch
}

func TestRunCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startRun(ctx, Spec{Command: spawnScript(dir, ""), KillGrace: time.Minute})

	sh, child := readPid(t, dir, "sh"), readPid(t, dir, "child")
	require.True(t, alive(sh))
	require.True(t, alive(child))
	pgid, err := syscall.Getpgid(child)
	require.NoError(t, err)
	require.Equal(t, sh, pgid, "the command leads its own process group")
	require.NotEqual(t, syscall.Getpgrp(), pgid)

	cancel()
	r := <-done
	require.ErrorIs(t, r.err, context.Canceled)
	require.Equal(t, sh, r.res.Pid)
	requireGone(t, sh)
	requireGone(t, child)
	requireGroupGone(t, pgid)
}

func TestRunTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r := <-startRun(ctx, Spec{Command: spawnScript(dir, "")})
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	sh, child := readPid(t, dir, "sh"), readPid(t, dir, "child")
	requireGone(t, sh)
	requireGone(t, child)
	requireGroupGone(t, sh)
}

func TestRunSigtermComesFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The shell waits in the wait builtin, which a trapped signal
	// interrupts at once. (A signal landing between a fork and its exec
	// would reach the shell's handler in the child and be lost.)
	script := spawnScriptThen(dir, `trap 'echo cleaned > `+strconv.Quote(dir)+`/cleanup; exit 9' TERM`, "wait")
	done := startRun(ctx, Spec{Command: script, KillGrace: time.Minute})
	sh, child := readPid(t, dir, "sh"), readPid(t, dir, "child")
	waitExec(t, child, "sleep")
	cancel()
	r := <-done
	require.ErrorIs(t, r.err, context.Canceled)
	got, err := os.ReadFile(filepath.Join(dir, "cleanup"))
	require.NoError(t, err)
	require.Equal(t, "cleaned\n", string(got))
	requireGone(t, sh)
	requireGone(t, child)
}

func TestRunSigkillAfterGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// An ignored signal stays ignored in children: nobody dies of SIGTERM.
	const grace = 300 * time.Millisecond
	done := startRun(ctx, Spec{Command: spawnScript(dir, `trap '' TERM`), KillGrace: grace})
	sh, child := readPid(t, dir, "sh"), readPid(t, dir, "child")
	cancelled := time.Now()
	cancel()
	r := <-done
	require.GreaterOrEqual(t, time.Since(cancelled), grace, "SIGKILL only after the grace period")
	require.ErrorIs(t, r.err, context.Canceled)
	requireGone(t, sh)
	requireGone(t, child)
	requireGroupGone(t, sh)
}

func TestRunKillsLeftoversAfterExit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := strconv.Quote(dir)
	// The background sleep keeps stdout open: Run must not wait for it.
	res, err := Run(context.Background(), Spec{
		Command:   `sleep 1000 & echo $! > ` + d + `/child.tmp && mv ` + d + `/child.tmp ` + d + `/child; echo finished`,
		KillGrace: time.Minute,
	})
	require.NoError(t, err)
	require.Equal(t, "finished\n", string(res.Output))
	requireGone(t, readPid(t, dir, "child"))
	requireGroupGone(t, res.Pid)
}

// readPid waits until the command has written dir/name and returns the pid
// in it.
func readPid(t *testing.T, dir, name string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, waitFor, tick, "pid file %s", name)
	return pid
}

// waitExec waits until process pid runs the program named comm.
func waitExec(t *testing.T, pid int, comm string) {
	t.Helper()
	require.Eventually(t, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		return err == nil && strings.TrimSpace(string(b)) == comm
	}, waitFor, tick, "process %d never ran %s", pid, comm)
}

// procState returns the state letter and process group of pid from
// /proc/PID/stat, or ok=false when the process does not exist.
func procState(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid pgrp ...": comm may contain anything, so
	// parse after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pgrp, true
}

// alive reports whether pid is a process that has not died. A zombie (dead,
// waiting to be reaped by whoever adopted it) is not alive.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, _, ok := procState(pid)
	return ok && state != 'Z' && state != 'X'
}

func requireGone(t *testing.T, pid int) {
	t.Helper()
	require.Positive(t, pid)
	require.Eventually(t, func() bool { return !alive(pid) }, waitFor, tick, "process %d still alive", pid)
}

// requireGroupGone waits until no live process is left in group pgid.
func requireGroupGone(t *testing.T, pgid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return false
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if state, pgrp, ok := procState(pid); ok && pgrp == pgid && state != 'Z' && state != 'X' {
				return false
			}
		}
		return true
	}, waitFor, tick, "process group %d still has live members", pgid)
}
