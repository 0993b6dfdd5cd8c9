package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Job is one attempt of a task, handed to a Handler.
type Job struct {
	Task *Task
	// Lease is the attempt's fencing token: pass it to downstream systems so
	// they can refuse writes from an attempt that lost its lease.
	Lease   uint64
	Attempt int
	// Dependencies are what the task's dependencies ended with, in the
	// order of Task.DependsOn.
	Dependencies []Dependency

	client   *Client // reads omitted outputs
	children []Step
	then     *Step
}

// Dependency is what one dependency of a job's task ended with.
type Dependency struct {
	ID     string
	Step   string
	Status string
	Output []byte
	Error  string
	// OutputOmitted reports that the grant left Output out (the grant's
	// budget for outputs was spent): DependencyOutput reads it.
	OutputOmitted bool
}

// Dependency returns the dependency named by step name or task id.
func (j *Job) Dependency(name string) (*Dependency, bool) {
	for i := range j.Dependencies {
		if d := &j.Dependencies[i]; d.Step == name || d.ID == name {
			return d, true
		}
	}
	return nil, false
}

// DependencyOutput returns the output of the dependency named by step name
// or task id, reading it from the cluster when the grant left it out.
func (j *Job) DependencyOutput(ctx context.Context, name string) ([]byte, error) {
	d, ok := j.Dependency(name)
	if !ok {
		return nil, fmt.Errorf("dependency %q of task %s: %w", name, j.Task.ID, ErrNotFound)
	}
	if !d.OutputOmitted {
		return d.Output, nil
	}
	if j.client == nil {
		return nil, fmt.Errorf("reading the output of dependency %q: the job has no client", name)
	}
	t, err := j.client.Get(ctx, d.ID)
	if err != nil {
		return nil, fmt.Errorf("reading the output of dependency %q: %w", name, err)
	}
	return t.Output, nil
}

// Spawn adds children to the attempt: tasks inserted in the same commit as
// its success, in the task's workflow (one is created when it has none).
// Their DependsOn may name other children, and steps of the workflow. They
// are dropped if the handler fails; if the completion is refused (a stale
// lease), none is inserted. Children that cannot be inserted as given (a
// bad field, a name the workflow has, a dependency on no step) fail the
// attempt permanently, with the reason, instead of its success.
func (j *Job) Spawn(children ...Step) { j.children = append(j.children, children...) }

// Then sets a continuation: a task inserted with the children that depends
// on every one of them (and on its own DependsOn).
func (j *Job) Then(step Step) { j.then = &step }

// Handler runs attempts of one task kind. Work returns the task's output, or
// an error that says how the attempt ended:
//
//   - Retryable(err, after) and plain errors are retryable failures: the
//     task is tried again after its backoff (or after) while it has
//     attempts left, else it ends failed.
//   - Permanent(err) fails the task without further attempts.
//   - Cancel(reason), or any error wrapping ErrCancelAttempt, ends the task
//     cancelled, without further attempts, with reason as its error (for
//     work that turns out to be moot: the order was withdrawn, the
//     account closed).
//
// A panic in Work is recovered: the attempt is a retryable failure whose
// error is "panic: " and the panic value, followed by an excerpt of the
// stack from the panicking call (a PanicError); the worker logs the whole
// stack and keeps running its other attempts.
//
// ctx is cancelled when the attempt is aborted (cancelled task, timeout,
// lost lease); the result of an aborted attempt is dropped. When the task
// is traced (a traceparent tag), ctx carries the span of the attempt.
type Handler interface {
	Work(ctx context.Context, job *Job) ([]byte, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) ([]byte, error)

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, job *Job) ([]byte, error) { return f(ctx, job) }

// Typed returns a Handler that JSON-decodes the payload into T before calling
// fn. An empty payload gives the zero T; a payload that does not decode fails
// the task permanently.
func Typed[T any](fn func(ctx context.Context, job *Job, args T) ([]byte, error)) Handler {
	return HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
		var args T
		if len(job.Task.Payload) > 0 {
			if err := json.Unmarshal(job.Task.Payload, &args); err != nil {
				return nil, Permanent(fmt.Errorf("decoding payload as %T: %w", args, err))
			}
		}
		return fn(ctx, job, args)
	})
}

// RetryableError is a failure to retry, after After when it is positive
// (overriding the task's backoff).
type RetryableError struct {
	Err   error
	After time.Duration
}

func (e *RetryableError) Error() string { return e.Err.Error() }

// Unwrap gives the wrapped error.
func (e *RetryableError) Unwrap() error { return e.Err }

// Retryable marks err as a retryable failure with a retry-after hint (0 for
// the task's backoff).
func Retryable(err error, after time.Duration) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryableError{Err: err, After: after}
}

// PermanentError is a failure that ends the task without further attempts.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap gives the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as a permanent failure.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &PermanentError{Err: err}
}

// ErrCancelAttempt reports an attempt as cancelled: a handler that returns
// it (or an error wrapping it, such as Cancel's) ends the task cancelled,
// without further attempts.
var ErrCancelAttempt = errors.New("attempt cancelled by its handler")

// CancelError is the error of Cancel: it wraps ErrCancelAttempt.
type CancelError struct {
	Reason string
}

func (e *CancelError) Error() string {
	if e.Reason == "" {
		return ErrCancelAttempt.Error()
	}
	return e.Reason
}

// Is reports that a CancelError is an ErrCancelAttempt.
func (e *CancelError) Is(target error) bool { return target == ErrCancelAttempt }

// Cancel returns the error a handler returns to end its task cancelled,
// with reason as the task's error.
func Cancel(reason string) error { return &CancelError{Reason: reason} }

// PanicError is the failure reported for a handler that panicked: a
// retryable failure. The completion's message is Error and an excerpt of
// Stack (see Report).
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Maximum size of the stack excerpt of a PanicError's report.
const (
	panicFrames = 8
	panicBytes  = 2 << 10
)

// Report is the error recorded for the attempt: Error, then the stack
// from the call that panicked on down to the handler's Work (the
// goroutine header, the recovery frames and the worker's own frames left
// out), at most 8 frames and 2 KiB.
func (e *PanicError) Report() string {
	excerpt := stackExcerpt(e.Stack)
	if excerpt == "" {
		return e.Error()
	}
	return e.Error() + "\n" + excerpt
}

// stackExcerpt is the part of a goroutine's stack (runtime/debug.Stack)
// from the frame that called panic on, down to the worker's own frames,
// at most panicFrames frames and panicBytes bytes. Without a panic frame
// it keeps the frames after the goroutine header.
func stackExcerpt(stack []byte) string {
	lines := strings.Split(strings.TrimRight(string(stack), "\n"), "\n")
	if len(lines) > 0 && strings.HasPrefix(lines[0], "goroutine ") {
		lines = lines[1:]
	}
	// Frames are two lines: the function, then its file and line. The
	// panicking call is the frame after runtime's panic.
	for i := 0; i+1 < len(lines); i += 2 {
		if strings.HasPrefix(lines[i], "panic(") {
			lines = lines[i+2:]
			break
		}
	}
	var frames []string
	for i := 0; i+1 < len(lines) && len(frames) < 2*panicFrames; i += 2 {
		if strings.HasPrefix(lines[i], workerFrames) || strings.HasPrefix(lines[i], "created by ") {
			break
		}
		frames = append(frames, lines[i], lines[i+1])
	}
	out := strings.Join(frames, "\n")
	if len(out) > panicBytes {
		out = out[:panicBytes]
		if i := strings.LastIndexByte(out, '\n'); i > 0 {
			out = out[:i]
		}
	}
	return out
}

// workerFrames begins the stack frames of the worker that runs a handler.
var workerFrames = reflect.TypeFor[workerRun]().PkgPath() + ".(*workerRun)."
