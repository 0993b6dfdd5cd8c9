package client

import (
	"context"
	"errors"
	"net"
	"strings"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
)

// Sentinel errors; check them with errors.Is. Errors returned by the Client
// wrap them when the node answered with the matching detail.
var (
	// ErrNotFound: the task, schedule or peer does not exist.
	ErrNotFound = errors.New("not found")
	// ErrOverloaded: the submit does not fit the cluster's bounds; it was not
	// admitted and is not retried by the SDK.
	ErrOverloaded = errors.New("overloaded")
	// ErrStaleLease: the lease is not the task's current one (another attempt
	// owns the task, or it has ended).
	ErrStaleLease = errors.New("stale lease")
	// ErrOutcomeUnknown: the call may or may not have taken effect. The SDK
	// retries idempotent calls itself; it reports this when it had to give
	// up (ctx ended) after such an answer or a lost connection. A read
	// (Get, List, Wait, ...) takes no effect, and its error does not say
	// this for a lost connection or a cut-off attempt.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrShuttingDown: the node is stopping.
	ErrShuttingDown = errors.New("node shutting down")
	// ErrNoLeader: the cluster has no leader at the moment.
	ErrNoLeader = errors.New("no leader")
	// ErrNotLeader: the node does not lead and the call needs the leader.
	ErrNotLeader = errors.New("not the leader")
	// ErrInvalid: a field has a bad value; the error is an *InvalidError.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client closed")
	// ErrNotWaiting: Complete or Fail on a task that is not an external
	// task waiting for its completion.
	ErrNotWaiting = errors.New("task not waiting for an external completion")
	// ErrPermissionDenied: the call's ACL token (or the anonymous policy,
	// without one) does not allow it; nothing changed.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrACLBootstrapped: the ACL bootstrap was done already.
	ErrACLBootstrapped = errors.New("ACL bootstrap already done")
	// ErrNotRetryable: RetryTask on a task that is live or succeeded (only
	// a task that ended failed, expired or cancelled can be retried).
	ErrNotRetryable = errors.New("task not retryable")
	// ErrDiskFull: the leader's data directory has no space left; the call
	// was not executed and is not retried by the SDK. The node takes writes
	// again once space is freed.
	ErrDiskFull = errors.New("disk full")
)

// InvalidError names the field a node (or the SDK, before sending) refused
// and why. errors.Is(err, ErrInvalid) holds for it.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return apierr.InvalidMessage(e.Field, e.Reason) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// APIError is an error answered by a node: its connect code, message and
// cronoq detail kind. It unwraps to the sentinel of its kind (or an
// *InvalidError) and to the underlying *connect.Error when there is one.
type APIError struct {
	Code    connect.Code
	Message string
	// Kind is the detail kind (apierr.Kind* values), "" when none was sent.
	Kind string
	// LeaderID and LeaderAddr are the leader hint of a not_leader error.
	LeaderID   string
	LeaderAddr string

	kindErr error
	cause   error
}

// Error is the node's message; the code, in words, when there is none.
func (e *APIError) Error() string {
	if e.Message == "" {
		return codeWords(e.Code)
	}
	return e.Message
}

// codeWords is a connect code for people: "unavailable", "deadline
// exceeded".
func codeWords(c connect.Code) string { return strings.ReplaceAll(c.String(), "_", " ") }

// Describe words an error of a call for people: a failure to connect names
// the address and why, a transport error drops its RPC code; others are
// their text.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		if oe.Addr != nil {
			return oe.Addr.String() + ": " + DescribeDialError(err)
		}
		return DescribeDialError(err)
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return err.Error()
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "" {
		return strings.Replace(err.Error(), ce.Error(), ce.Message(), 1)
	}
	return err.Error()
}

// describedError is an error whose text is Describe's; it unwraps to the
// error.
type describedError struct{ err error }

func (e describedError) Error() string { return Describe(e.err) }
func (e describedError) Unwrap() error { return e.err }

// described wraps err so that its text is Describe's (nil stays nil).
func described(err error) error {
	if err == nil {
		return nil
	}
	return describedError{err}
}

// Unwrap gives the sentinel of the kind and the connect error.
func (e *APIError) Unwrap() []error {
	var out []error
	if e.kindErr != nil {
		out = append(out, e.kindErr)
	}
	if e.cause != nil {
		out = append(out, e.cause)
	}
	return out
}

// kindError is the SDK error a detail kind stands for; nil for "" and
// unknown kinds.
func kindError(kind, msg string) error {
	switch kind {
	case apierr.KindNotFound:
		return ErrNotFound
	case apierr.KindOverloaded:
		return ErrOverloaded
	case apierr.KindStaleLease:
		return ErrStaleLease
	case apierr.KindOutcomeUnknown:
		return ErrOutcomeUnknown
	case apierr.KindShuttingDown:
		return ErrShuttingDown
	case apierr.KindNoLeader:
		return ErrNoLeader
	case apierr.KindNotLeader:
		return ErrNotLeader
	case apierr.KindNotWaiting:
		return ErrNotWaiting
	case apierr.KindPermissionDenied:
		return ErrPermissionDenied
	case apierr.KindACLBootstrapped:
		return ErrACLBootstrapped
	case apierr.KindDiskFull:
		return ErrDiskFull
	case apierr.KindNotRetryable:
		return ErrNotRetryable
	case apierr.KindInvalid:
		if f, r, ok := apierr.ParseInvalid(msg); ok {
			return &InvalidError{Field: f, Reason: r}
		}
		return &InvalidError{Reason: msg}
	default:
		return nil
	}
}

// decodeError turns what a connect call returned into an SDK error: an
// *APIError when the node answered with a cronoq detail (or a code that
// implies one), otherwise err unchanged (transport failures, context ends).
func decodeError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	kind := apierr.Kind(ce)
	if kind == "" && !connect.IsWireError(ce) {
		return err
	}
	ae := &APIError{Code: ce.Code(), Message: ce.Message(), Kind: kind, cause: ce}
	ae.LeaderID, ae.LeaderAddr = apierr.Leader(ce)
	if kind == apierr.KindInvalid {
		f, r := apierr.Field(ce)
		ae.kindErr = &InvalidError{Field: f, Reason: r}
	} else {
		ae.kindErr = kindError(kind, ce.Message())
	}
	return ae
}

// itemError decodes a per-item result (EnqueueMany items, lease results):
// code carries the detail kind, msg the message. Empty msg and code mean
// success (nil).
func itemError(code, msg string) error {
	if code == "" && msg == "" {
		return nil
	}
	ae := &APIError{Code: apierr.Code(code), Message: msg, Kind: code}
	ae.kindErr = kindError(code, msg)
	return ae
}

// verdict says what a failed attempt means for retrying.
type verdict int

const (
	// final: give the error to the caller.
	final verdict = iota
	// notExecuted: the node refused before doing anything (not leader, no
	// leader, shutting down); any call may be retried elsewhere.
	notExecuted
	// uncertain: the call may have taken effect (outcome unknown, lost
	// connection, attempt timeout); only idempotent calls are retried.
	uncertain
)

// classify decides how an attempt's error (already decoded) affects the
// retry loop; parent is the caller's context.
func classify(parent context.Context, err error) verdict {
	if parent.Err() != nil {
		return final
	}
	return classifyErr(err)
}

// classifyErr says what an attempt's error means on its own: whether the
// call certainly did not run, may have run, or failed for good.
func classifyErr(err error) verdict {
	// A connection that was never made carried no request; nor did one
	// whose TLS handshake failed: this client refused the node's
	// certificate, or the node refused the TLS session (a remote alert,
	// such as a missing or unknown client certificate).
	if isDialError(err) {
		return notExecuted
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Kind {
		case apierr.KindNotLeader, apierr.KindNoLeader, apierr.KindShuttingDown:
			return notExecuted
		case apierr.KindOutcomeUnknown:
			return uncertain
		case "":
			// A server-sent error without detail: unavailable, or a call the
			// server gave up (its deadline, which is the caller's, passed
			// there first) are transient, anything else is final.
			switch ae.Code {
			case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
				return uncertain
			}
			return final
		default:
			return final
		}
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal,
			connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeAborted:
			return uncertain
		}
		return final
	}
	// Not from connect: a context end of the attempt (the caller's ctx is
	// still alive) or an I/O failure.
	return uncertain
}

// resubscribable reports whether a lost subscription (events) is worth
// re-establishing: anything but a refusal of the request itself.
func resubscribable(err error) bool {
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeUnimplemented,
			connect.CodePermissionDenied, connect.CodeUnauthenticated:
			return false
		}
	}
	return true
}
