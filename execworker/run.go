// Package execworker runs shell commands as task handlers: the built-in
// worker of `cronoq worker -handler KIND=COMMAND`.
//
// A command runs with /bin/sh -c in a process group of its own, with the
// task's payload on stdin. Its stdout, bounded in size, becomes the task's
// output; the tail of its stderr explains a failure. Exit status 0 is a
// success, 75 (EX_TEMPFAIL) a retryable failure, anything else (or death by
// a signal) a permanent failure. When the task's context ends (timeout,
// cancel, lost lease) the whole process group receives SIGTERM and, after a
// grace period, SIGKILL.
//
// # Dependencies
//
// A Handler gives each attempt the outputs of its task's dependencies as
// files in the directory named by $CRONOQ_DEPS_DIR, one file per
// dependency, named by the dependency's step name, or by its task id when
// it has none (or when two dependencies share a step name). The directory
// is created for the attempt (empty when the task has no dependencies) and
// removed after it. Outputs the grant left out are read from the cluster
// first. With the dependency policy "done" a dependency may have ended
// without success: its file holds whatever output it left (often nothing).
//
// # Spawning
//
// A command may add tasks to its workflow by writing to the file named by
// $CRONOQ_SPAWN (created empty for the attempt) one JSON object per line,
// each a step with the fields of a workflow file's steps (name, pool, kind,
// payload, payload_base64, priority, labels, tags, timeout, max_attempts,
// depends_on, dependency_policy, external, delay, run_at, deadline). Names
// are optional; depends_on names earlier lines or existing steps of the
// workflow. One line may set "then": true: that step is the continuation,
// which depends on every other line's step. For example:
//
//	{"name": "part-1", "pool": "etl", "kind": "convert", "payload": "a.csv"}
//	{"name": "part-2", "pool": "etl", "kind": "convert", "payload": "b.csv"}
//	{"name": "merge", "pool": "etl", "kind": "merge", "then": true}
//
// The steps are committed with the attempt's success, and only with it: a
// failed attempt spawns nothing. A line that is not such an object (an
// unknown field, a bad value), or a second "then", fails the attempt
// permanently with an error naming the line. A task not in a workflow gets
// one, named after its kind, when it spawns.
//
// # Tracing
//
// When the attempt is traced (the worker has a tracer provider and the
// task a traceparent tag), the command gets the W3C trace context of the
// attempt's span in TRACEPARENT (and TRACESTATE), the variables
// OpenTelemetry's SDKs read to continue a trace from the environment. The
// steps it spawns continue the same trace.
package execworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	// Shell runs every command, as Shell -c COMMAND.
	Shell = "/bin/sh"
	// DefaultMaxOutput bounds a command's stdout when Spec.MaxOutput is unset.
	DefaultMaxOutput = 1 << 20
	// DefaultKillGrace is the time between SIGTERM and SIGKILL when
	// Spec.KillGrace is unset.
	DefaultKillGrace = 5 * time.Second
	// ExitTempFail is the exit status (EX_TEMPFAIL from sysexits.h) that
	// makes a failure retryable.
	ExitTempFail = 75
	// StderrTail is how many trailing bytes of stderr are kept for the error
	// message.
	StderrTail = 4 << 10
)

// ErrOutputTooLarge is wrapped by the error Run returns when a command writes
// more than its output bound to stdout. The command is stopped; its output is
// never truncated.
var ErrOutputTooLarge = errors.New("output too large")

// ExitError reports a command that ended with a non-zero exit status or was
// killed by a signal.
type ExitError struct {
	// Code is the exit status, or -1 when a signal ended the command.
	Code int
	// Signal is the signal that ended the command, or 0.
	Signal syscall.Signal
	// Stderr is the tail (at most StderrTail bytes, trimmed) of its stderr.
	Stderr string
}

func (e *ExitError) Error() string {
	var what string
	if e.Signal != 0 {
		what = fmt.Sprintf("killed by signal %d (%s)", int(e.Signal), e.Signal)
	} else {
		what = fmt.Sprintf("exit status %d", e.Code)
	}
	if e.Stderr == "" {
		return what
	}
	return what + ": " + e.Stderr
}

// Retryable reports whether the command asked to be retried (exit status
// ExitTempFail).
func (e *ExitError) Retryable() bool { return e.Signal == 0 && e.Code == ExitTempFail }

// Spec describes one run of a command.
type Spec struct {
	// Command is the shell command line, run as Shell -c Command.
	Command string
	// Payload is written to the command's stdin, which is then closed.
	Payload []byte
	// Env holds KEY=VALUE pairs added to (and overriding) the environment
	// inherited from this process.
	Env []string
	// Dir is the working directory; "" means this process's.
	Dir string
	// MaxOutput bounds stdout in bytes; 0 or less means DefaultMaxOutput.
	MaxOutput int
	// KillGrace is the time between SIGTERM and SIGKILL when the command is
	// stopped; 0 or less means DefaultKillGrace.
	KillGrace time.Duration
}

// Result is what a command left behind.
type Result struct {
	// Output is everything the command wrote to stdout.
	Output []byte
	// Stderr is the tail of its stderr (at most StderrTail bytes, trimmed).
	Stderr string
	// Pid is the process id of the shell, which is also the process group
	// id of the command.
	Pid int
}

// Run runs spec.Command and waits until it has ended.
//
// The command gets a process group of its own. When it exits, whatever it
// left running in that group is killed. When ctx ends first, the group gets
// SIGTERM, then SIGKILL after spec.KillGrace unless it has ended by then, and
// Run returns an error wrapping ctx.Err().
//
// The error is nil after exit status 0; an *ExitError after any other exit
// status or a fatal signal; an error wrapping ErrOutputTooLarge when stdout
// went over the bound (the command is stopped as for ctx); otherwise it
// reports why the command could not be started.
func Run(ctx context.Context, spec Spec) (Result, error) {
	if strings.TrimSpace(spec.Command) == "" {
		return Result{}, errors.New("empty command")
	}
	maxOut := spec.MaxOutput
	if maxOut <= 0 {
		maxOut = DefaultMaxOutput
	}
	grace := spec.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("command not started: %w", err)
	}

	p, err := newPipes()
	if err != nil {
		return Result{}, fmt.Errorf("creating pipes: %w", err)
	}
	cmd := exec.Command(Shell, "-c", spec.Command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdinR, p.stdoutW, p.stderrW
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	startErr := cmd.Start()
	p.closeChildEnds()
	if startErr != nil {
		p.closeParentEnds()
		return Result{}, fmt.Errorf("starting %s: %w", Shell, startErr)
	}
	pgid := cmd.Process.Pid

	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		// A command that does not read its stdin makes this fail with
		// EPIPE, which is not an error of the run.
		_, _ = p.stdinW.Write(spec.Payload)
		_ = p.stdinW.Close()
	}()

	var out []byte
	var tooLarge bool
	overflow := make(chan struct{})
	stdoutDone := make(chan struct{})
	go func() {
		defer close(stdoutDone)
		out, tooLarge = readBounded(p.stdoutR, maxOut)
		if tooLarge {
			close(overflow)
		}
	}()

	tail := &tailBuffer{max: StderrTail}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(tail, p.stderrR)
	}()

	var waitErr error
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitErr = cmd.Wait()
	}()

	var stopCause error
	select {
	case <-exited:
	case <-ctx.Done():
		stopCause = ctx.Err()
	case <-overflow:
		stopCause = ErrOutputTooLarge
	}

	if stopCause == nil {
		// The shell is gone: nothing it left behind in its group may
		// outlive the task.
		killGroup(pgid, syscall.SIGKILL)
	} else {
		killGroup(pgid, syscall.SIGTERM)
		timer := time.NewTimer(grace)
		if !waitAll(timer.C, exited, stdoutDone, stderrDone) {
			killGroup(pgid, syscall.SIGKILL)
		}
		timer.Stop()
		<-exited
		// Stragglers still in the group after the shell exited within the
		// grace period.
		killGroup(pgid, syscall.SIGKILL)
	}

	// Everything in the group is dead; a process that left the group could
	// still hold the pipes open, so reading ends after one more grace period.
	timer := time.NewTimer(grace)
	if !waitAll(timer.C, stdoutDone, stderrDone) {
		_ = p.stdoutR.Close()
		_ = p.stderrR.Close()
		<-stdoutDone
		<-stderrDone
	}
	timer.Stop()
	_ = p.stdinW.Close() // unblocks the writer if nobody reads stdin
	<-stdinDone
	p.closeParentEnds()

	res := Result{Stderr: tail.String(), Pid: pgid}
	if tooLarge {
		return res, fmt.Errorf("%w: stdout exceeded %d bytes", ErrOutputTooLarge, maxOut)
	}
	res.Output = out
	if stopCause != nil {
		return res, fmt.Errorf("command stopped: %w", stopCause)
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		xe := &ExitError{Code: ee.ExitCode(), Stderr: res.Stderr}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			xe.Code = -1
			xe.Signal = ws.Signal()
		}
		return res, xe
	}
	if waitErr != nil {
		return res, fmt.Errorf("waiting for the command: %w", waitErr)
	}
	return res, nil
}

// killGroup sends sig to every process in process group pgid. A group that
// no longer exists is not an error.
func killGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// waitAll waits until every channel in chs is closed (true) or timeout fires
// first (false).
func waitAll(timeout <-chan time.Time, chs ...<-chan struct{}) bool {
	for _, ch := range chs {
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
	return true
}

// readBounded reads r to EOF. It stops early, reporting tooLarge, as soon as
// more than max bytes have arrived.
func readBounded(r io.Reader, max int) (data []byte, tooLarge bool) {
	buf := []byte{}
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if len(buf)+n > max {
			return nil, true
		}
		buf = append(buf, chunk[:n]...)
		if err != nil {
			return buf, false
		}
	}
}

// tailBuffer is an io.Writer keeping the last max bytes written to it.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.truncated = t.truncated || len(t.buf) > 0 || len(p) > t.max
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept bytes as trimmed, valid UTF-8 text, marked with a
// leading "..." when earlier bytes were dropped.
func (t *tailBuffer) String() string {
	b := t.buf
	if t.truncated {
		// Do not start in the middle of a multi-byte character.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if t.truncated && s != "" {
		s = "..." + s
	}
	return s
}

// pipes are the three standard streams of a command. The parent ends are
// pollable *os.File values, so closing one unblocks a pending Read or Write.
type pipes struct {
	stdinR, stdinW   *os.File
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
}

func newPipes() (*pipes, error) {
	p := &pipes{}
	var err error
	if p.stdinR, p.stdinW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stdoutR, p.stdoutW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, err
	}
	if p.stderrR, p.stderrW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, err
	}
	return p, nil
}

func (p *pipes) closeChildEnds() {
	closeFiles(p.stdinR, p.stdoutW, p.stderrW)
}

func (p *pipes) closeParentEnds() {
	closeFiles(p.stdinW, p.stdoutR, p.stderrR)
}

func (p *pipes) closeAll() {
	p.closeChildEnds()
	p.closeParentEnds()
}

func closeFiles(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}
