package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerHandler checks the exit-status semantics of `cronoq worker
// -handler KIND=COMMAND`, one subtest per rule, each with a worker of its
// own on a pool of its own, on one cluster.
func TestWorkerHandler(t *testing.T) {
	c := newCluster(t, withAgentFlags("-max-output", "1KiB"))

	// newWorker starts a worker on pool with one handler for kind "job".
	newWorker := func(t *testing.T, pool, command string, flags ...string) *worker {
		args := append([]string{"-pool", pool, "-kill-grace", "1s", "-handler", "job=" + command}, flags...)
		return c.startWorker(t, "worker-"+pool, c.addrs(), args...)
	}

	t.Run("exit_0_succeeds_with_stdout_as_output", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		newWorker(t, "exit0",
			`cat; echo; echo "id=$CRONOQ_TASK_ID attempt=$CRONOQ_ATTEMPT pool=$CRONOQ_POOL kind=$CRONOQ_KIND"; echo "lease=$CRONOQ_LEASE"; pwd; echo 'not output' >&2`,
			"-workdir", root)
		task := decodeStrict[taskJSON](t, c.cli(t, "submit", "-pool", "exit0", "-kind", "job", "-payload", "the payload", "-wait", "-o", "json").ok(t))
		checkTask(t, task)
		require.Equal(t, "succeeded", task.Status)
		require.Equal(t, 1, task.Attempt)
		require.Empty(t, task.Error)
		lines := strings.Split(*task.Output, "\n")
		require.Len(t, lines, 5, "output %q", *task.Output)
		require.Equal(t, "the payload", lines[0])
		require.Equal(t, fmt.Sprintf("id=%s attempt=1 pool=exit0 kind=job", task.ID), lines[1])
		lease, err := strconv.ParseUint(strings.TrimPrefix(lines[2], "lease="), 10, 64)
		require.NoError(t, err, "lease line %q", lines[2])
		require.NotZero(t, lease)
		require.Equal(t, filepath.Join(root, task.ID), lines[3], "working directory")
		require.Empty(t, lines[4])
	})

	t.Run("exit_75_is_retried", func(t *testing.T) {
		t.Parallel()
		newWorker(t, "exit75", `if [ "$CRONOQ_ATTEMPT" -lt 2 ]; then echo 'try later' >&2; exit 75; fi; echo "ok on attempt $CRONOQ_ATTEMPT"`)
		task := decodeStrict[taskJSON](t, c.cli(t, "submit", "-pool", "exit75", "-kind", "job", "-wait", "-o", "json").ok(t))
		checkTask(t, task)
		require.Equal(t, "succeeded", task.Status)
		require.Equal(t, 2, task.Attempt)
		require.Equal(t, "ok on attempt 2\n", *task.Output)

		// With one attempt allowed, the retryable failure is the end.
		r := c.cli(t, "submit", "-pool", "exit75", "-kind", "job", "-max-attempts", "1", "-wait", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task = decodeStrict[taskJSON](t, r.stdout)
		require.Equal(t, "failed", task.Status)
		require.Equal(t, 1, task.Attempt)
		require.Contains(t, task.Error, "try later")
	})

	t.Run("exit_1_fails_with_stderr_tail", func(t *testing.T) {
		t.Parallel()
		newWorker(t, "exit1", `echo 'some output'; i=0; while [ $i -lt 2000 ]; do echo "noise line $i" >&2; i=$((i+1)); done; echo 'the real reason' >&2; exit 1`)
		r := c.cli(t, "submit", "-pool", "exit1", "-kind", "job", "-wait", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task := decodeStrict[taskJSON](t, r.stdout)
		checkTask(t, task)
		require.Equal(t, "failed", task.Status)
		require.Equal(t, 1, task.Attempt, "a permanent failure is not retried")
		require.Contains(t, task.Error, "the real reason")
		require.NotContains(t, task.Error, "noise line 0\n", "the error is the tail of stderr")
		require.Less(t, len(task.Error), 20000, "the error is bounded")
	})

	t.Run("killed_by_signal_fails", func(t *testing.T) {
		t.Parallel()
		newWorker(t, "signal", `echo 'about to die' >&2; kill -KILL $$`)
		r := c.cli(t, "submit", "-pool", "signal", "-kind", "job", "-wait", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task := decodeStrict[taskJSON](t, r.stdout)
		require.Equal(t, "failed", task.Status)
		require.Equal(t, 1, task.Attempt)
		require.NotEmpty(t, task.Error)
	})

	t.Run("output_over_limit_fails", func(t *testing.T) {
		t.Parallel()
		newWorker(t, "bigout", `head -c 100 /dev/zero | tr '\0' x`, "-max-output", "16")
		r := c.cli(t, "submit", "-pool", "bigout", "-kind", "job", "-wait", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task := decodeStrict[taskJSON](t, r.stdout)
		require.Equal(t, "failed", task.Status)
		require.Equal(t, 1, task.Attempt, "an oversized output fails permanently")
		require.Contains(t, task.Error, "output")
		require.NotEqual(t, strings.Repeat("x", 16), *task.Output, "never truncated")
	})

	t.Run("output_over_agent_limit_fails", func(t *testing.T) {
		t.Parallel()
		// The worker would take 1 MiB; the cluster takes 1 KiB.
		newWorker(t, "agentout", `head -c 2000 /dev/zero | tr '\0' x`)
		r := c.cli(t, "submit", "-pool", "agentout", "-kind", "job", "-wait", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task := decodeStrict[taskJSON](t, r.stdout)
		require.Equal(t, "failed", task.Status)
		require.Equal(t, 1, task.Attempt, "an oversized output fails permanently")
		require.Contains(t, task.Error, "output")
		require.NotEqual(t, strings.Repeat("x", 1024), *task.Output, "never truncated")
	})

	t.Run("labels_select_the_worker", func(t *testing.T) {
		t.Parallel()
		newWorker(t, "labels", `echo ran`, "-label", "gpu=1", "-label", "zone=eu")
		task := decodeStrict[taskJSON](t, c.cli(t, "submit", "-pool", "labels", "-kind", "job", "-label", "gpu=1", "-wait", "-o", "json").ok(t))
		require.Equal(t, "succeeded", task.Status)
		task = decodeStrict[taskJSON](t, c.cli(t, "submit", "-pool", "labels", "-kind", "job", "-wait", "-o", "json").ok(t))
		require.Equal(t, "succeeded", task.Status, "a task without labels runs anywhere")
		// No capacity offers gpu=2: the task waits, even behind nothing.
		other := c.submit(t, "-pool", "labels", "-kind", "job", "-label", "gpu=2")
		after := decodeStrict[taskJSON](t, c.cli(t, "submit", "-pool", "labels", "-kind", "job", "-label", "zone=eu", "-wait", "-o", "json").ok(t))
		require.Equal(t, "succeeded", after.Status, "a ready task does not starve behind one no worker can take")
		task = c.status(t, other)
		require.Equal(t, "queued", task.Status)
		require.Equal(t, 0, task.Attempt)
	})

	// A command that leaves a child ignoring SIGTERM in its process group:
	// only SIGKILL of the group, after -kill-grace, ends it.
	stubborn := func(dir string) string {
		return fmt.Sprintf(`echo $$ > %[1]s/$CRONOQ_TASK_ID.sh.tmp && mv %[1]s/$CRONOQ_TASK_ID.sh.tmp %[1]s/$CRONOQ_TASK_ID.sh; `+
			`(trap '' TERM; exec sleep 60) & echo $! > %[1]s/$CRONOQ_TASK_ID.child.tmp && mv %[1]s/$CRONOQ_TASK_ID.child.tmp %[1]s/$CRONOQ_TASK_ID.child; `+
			`wait`, shellQuote(dir))
	}

	t.Run("timeout_kills_the_process_group", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		newWorker(t, "timeout", stubborn(dir))
		id := c.submit(t, "-pool", "timeout", "-kind", "job", "-timeout", "3s", "-max-attempts", "1")
		sh := readPid(t, filepath.Join(dir, id+".sh"), 20*time.Second)
		child := readPid(t, filepath.Join(dir, id+".child"), 20*time.Second)
		killLeftovers(t, sh)
		require.False(t, processGone(child), "the child should run until the timeout")

		task := c.waitStatus(t, id, 30*time.Second, "failed", "succeeded", "cancelled", "expired")
		require.Equal(t, "failed", task.Status)
		require.Equal(t, 1, task.Attempt)
		require.NotEmpty(t, task.Error)
		eventually(t, 15*time.Second, func() (bool, string) {
			return processGone(sh) && processGone(child), fmt.Sprintf("shell %d gone: %v, child %d gone: %v", sh, processGone(sh), child, processGone(child))
		})
	})

	t.Run("cancel_kills_the_running_command", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		newWorker(t, "cancel", stubborn(dir))
		id := c.submit(t, "-pool", "cancel", "-kind", "job")
		sh := readPid(t, filepath.Join(dir, id+".sh"), 20*time.Second)
		child := readPid(t, filepath.Join(dir, id+".child"), 20*time.Second)
		killLeftovers(t, sh)
		require.Equal(t, "running", c.status(t, id).Status)

		got := decodeStrict[cancelJSON](t, c.cli(t, "cancel", id, "-o", "json").ok(t))
		require.Equal(t, cancelJSON{ID: id, Cancelled: true}, got)
		require.Equal(t, "cancelled", c.status(t, id).Status, "cancelled as soon as the cancel is committed")
		eventually(t, 15*time.Second, func() (bool, string) {
			return processGone(sh) && processGone(child), fmt.Sprintf("shell %d gone: %v, child %d gone: %v", sh, processGone(sh), child, processGone(child))
		})
		// The killed command's completion does not overwrite the cancel.
		task := c.status(t, id)
		require.Equal(t, "cancelled", task.Status)
		require.Equal(t, 1, task.Attempt)
	})

	t.Run("sigterm_lets_running_tasks_finish", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		release := filepath.Join(dir, "release")
		// The command runs until the test releases it, well after SIGTERM.
		w := newWorker(t, "drain", fmt.Sprintf(`echo $$ > %[1]s/$CRONOQ_TASK_ID.tmp && mv %[1]s/$CRONOQ_TASK_ID.tmp %[1]s/$CRONOQ_TASK_ID; `+
			`while [ ! -e %[2]s ]; do sleep 0.05; done; echo finished`, shellQuote(dir), shellQuote(release)),
			"-concurrency", "1")
		id := c.submit(t, "-pool", "drain", "-kind", "job")
		killLeftovers(t, readPid(t, filepath.Join(dir, id), 20*time.Second))

		require.NoError(t, w.signal(syscall.SIGTERM))
		// Submitted after SIGTERM: the worker must not take it.
		after := c.submit(t, "-pool", "drain", "-kind", "job")
		// The worker waits for its running command.
		require.False(t, w.exited(), "the worker exited with a task running")
		require.Equal(t, "running", c.status(t, id).Status)
		require.NoError(t, os.WriteFile(release, nil, 0o600))

		require.Equal(t, 0, w.waitExit(t, 30*time.Second), "worker exit status after SIGTERM\n%s", tail(w.logText(), 30))
		task := c.status(t, id)
		require.Equal(t, "succeeded", task.Status)
		require.Equal(t, "finished\n", *task.Output)
		require.Equal(t, 1, task.Attempt)
		late := c.status(t, after)
		require.Equal(t, "queued", late.Status)
		require.Equal(t, 0, late.Attempt)
	})
}

// killLeftovers kills process group pgid when the test ends, in case the
// worker under test left it running.
func killLeftovers(t *testing.T, pgid int) {
	t.Cleanup(func() {
		if !processGone(pgid) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
}
