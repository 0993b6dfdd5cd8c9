package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Job is one attempt of a task, handed to a Handler.
type Job struct {
	Task *Task
	// Lease is the attempt's fencing token: pass it to downstream systems so
	// they can refuse writes from an attempt that lost its lease.
	Lease   uint64
	Attempt int
}

// Handler runs attempts of one task kind. Work returns the task's output, or
// an error: Retryable(err, after) and plain errors are retryable failures,
// Permanent(err) fails the task without further attempts. A panic is a
// retryable failure carrying the panic message. ctx is cancelled when the
// attempt is aborted (cancelled task, timeout, lost lease); the result of an
// aborted attempt is dropped.
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

// PanicError is the failure reported for a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
