// Package apierr is the wire convention for cronoq API errors, shared by the
// nodes that encode them and the Go SDK that decodes them.
//
// An error travels as a connect code plus a detail kind in the `Cronoq-Error`
// header (or trailer, for streams); a not_leader error also names the leader
// in `Cronoq-Leader` and `Cronoq-Leader-Addr`, and an invalid-argument error
// names the field in `Cronoq-Field`. The message of an invalid-argument error
// reads "invalid FIELD: reason". Per-item results (EnqueueMany items,
// heartbeat and completion results) carry the same kind strings in their
// `code` field.
//
// The package knows nothing of the engine or the cluster: callers pass kinds,
// messages and leader hints as plain values.
package apierr

import (
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
)

// Header names carrying the structured part of an error, and the leader
// hint of a forwarded answer.
const (
	// HeaderError carries the detail kind (one of the Kind constants).
	HeaderError = "Cronoq-Error"
	// HeaderLeader carries the leader's node id on a not_leader error, and
	// on a successful answer that a follower forwarded from the leader.
	HeaderLeader = "Cronoq-Leader"
	// HeaderLeaderAddr carries the leader's HTTP API address (host:port) on a
	// not_leader error, and on a successful answer that a follower forwarded
	// from the leader, so that clients can send their next calls there.
	HeaderLeaderAddr = "Cronoq-Leader-Addr"
	// HeaderField carries the offending field on an invalid-argument error.
	HeaderField = "Cronoq-Field"
	// HeaderRetryAfter carries, on an overloaded error that will pass on
	// its own (the write path is saturated) and on a disk_full error, how
	// many seconds to wait before trying again.
	HeaderRetryAfter = "Retry-After"
)

// Detail kinds. The zero kind "" means the error has no cronoq detail (for
// instance a transport failure).
const (
	KindNotLeader      = "not_leader"
	KindNoLeader       = "no_leader"
	KindShuttingDown   = "shutting_down"
	KindOverloaded     = "overloaded"
	KindInvalid        = "invalid"
	KindNotFound       = "not_found"
	KindStaleLease     = "stale_lease"
	KindOutcomeUnknown = "outcome_unknown"
	// KindUpgradeRequired: the call needs a log format some server of the
	// cluster does not understand yet; upgrading every server lifts it.
	KindUpgradeRequired = "upgrade_required"
	// KindNotWaiting: the task is not an external task waiting for its
	// completion (not external, blocked, or ended).
	KindNotWaiting = "not_waiting"
	// KindPermissionDenied: the call's ACL token (or the anonymous policy)
	// does not allow it; nothing changed.
	KindPermissionDenied = "permission_denied"
	// KindACLBootstrapped: the ACL bootstrap was done already.
	KindACLBootstrapped = "acl_bootstrapped"
	// KindACLDisabled: ACLs are not enabled on the node.
	KindACLDisabled = "acl_disabled"
	// KindNotRetryable: the task is live or succeeded: only a task that
	// ended failed, expired or cancelled can be retried.
	KindNotRetryable = "not_retryable"
	// KindDiskFull: the leader's data directory has no space left; it
	// takes no writes until space is freed (Retry-After says when to try
	// again). Nothing was done.
	KindDiskFull = "disk_full"
)

// Code is the connect code that goes with a kind. Unknown kinds map to
// connect.CodeUnknown.
func Code(kind string) connect.Code {
	switch kind {
	case KindNotLeader, KindNoLeader, KindShuttingDown:
		return connect.CodeUnavailable
	case KindOverloaded, KindDiskFull:
		return connect.CodeResourceExhausted
	case KindInvalid:
		return connect.CodeInvalidArgument
	case KindNotFound:
		return connect.CodeNotFound
	case KindStaleLease, KindUpgradeRequired, KindNotWaiting, KindNotRetryable, KindACLBootstrapped, KindACLDisabled:
		return connect.CodeFailedPrecondition
	case KindPermissionDenied:
		return connect.CodePermissionDenied
	default:
		return connect.CodeUnknown
	}
}

// New returns a connect error of the kind's code carrying msg and the kind
// header. An empty msg is replaced by the kind itself.
func New(kind, msg string) *connect.Error {
	if msg == "" {
		msg = strings.ReplaceAll(kind, "_", " ")
	}
	err := connect.NewError(Code(kind), errors.New(msg))
	err.Meta().Set(HeaderError, kind)
	return err
}

// PermissionDenied refuses a call its ACL token does not allow; msg
// starts with "permission denied".
func PermissionDenied(msg string) *connect.Error { return New(KindPermissionDenied, msg) }

// NotLeader says this node does not lead; leaderID and leaderAddr (the
// leader's HTTP API address) are the hint, either may be empty when unknown.
func NotLeader(leaderID, leaderAddr string) *connect.Error {
	msg := "not the leader"
	if leaderID != "" || leaderAddr != "" {
		msg = fmt.Sprintf("not the leader; leader is %s at %s", leaderID, leaderAddr)
	}
	err := New(KindNotLeader, msg)
	if leaderID != "" {
		err.Meta().Set(HeaderLeader, leaderID)
	}
	if leaderAddr != "" {
		err.Meta().Set(HeaderLeaderAddr, leaderAddr)
	}
	return err
}

// NoLeader says the cluster has no known leader at the moment.
func NoLeader() *connect.Error { return New(KindNoLeader, "no leader") }

// ShuttingDown says this node is stopping and takes no more work.
func ShuttingDown() *connect.Error { return New(KindShuttingDown, "shutting down") }

// Overloaded says the request does not fit the configured bounds.
func Overloaded(msg string) *connect.Error { return New(KindOverloaded, msg) }

// DiskFull says the leader's disk is full: it takes no writes until space
// is freed. retryAfter (seconds, 0 for none) goes in Retry-After.
func DiskFull(msg string, retryAfter int) *connect.Error {
	err := New(KindDiskFull, msg)
	if retryAfter > 0 {
		err.Meta().Set(HeaderRetryAfter, fmt.Sprint(retryAfter))
	}
	return err
}

// NotFound says the named task, schedule or peer does not exist.
func NotFound(msg string) *connect.Error { return New(KindNotFound, msg) }

// StaleLease says a lease is no longer the task's current one.
func StaleLease(msg string) *connect.Error { return New(KindStaleLease, msg) }

// UpgradeRequired says the call needs a newer log format than some server
// of the cluster understands.
func UpgradeRequired(msg string) *connect.Error { return New(KindUpgradeRequired, msg) }

// NotWaiting says the task is not an external task waiting for its
// completion.
func NotWaiting(msg string) *connect.Error { return New(KindNotWaiting, msg) }

// NotRetryable says the task is live or succeeded, so it cannot be
// retried.
func NotRetryable(msg string) *connect.Error { return New(KindNotRetryable, msg) }

// OutcomeUnknown says the request may or may not have taken effect (for
// instance leadership was lost while its entry was in flight); retrying with
// the same idempotency key is safe.
func OutcomeUnknown(msg string) *connect.Error { return New(KindOutcomeUnknown, msg) }

// Invalid says field has a bad value. The message reads
// "invalid FIELD: reason".
func Invalid(field, reason string) *connect.Error {
	err := New(KindInvalid, InvalidMessage(field, reason))
	err.Meta().Set(HeaderField, field)
	return err
}

// InvalidMessage formats the message of an invalid-argument error, also used
// for per-item errors.
func InvalidMessage(field, reason string) string {
	return "invalid " + field + ": " + reason
}

// ParseInvalid splits a message made by InvalidMessage into field and
// reason; ok is false when msg does not have that shape.
func ParseInvalid(msg string) (field, reason string, ok bool) {
	rest, found := strings.CutPrefix(msg, "invalid ")
	if !found {
		return "", "", false
	}
	field, reason, found = strings.Cut(rest, ": ")
	if !found || field == "" || strings.ContainsAny(field, " \t\n") {
		return "", "", false
	}
	return field, reason, true
}

// Kind decodes the detail kind of err (which may wrap a *connect.Error): the
// Cronoq-Error header when present, otherwise the kind implied by the code
// alone (resource exhausted, invalid argument, not found). Errors without a
// cronoq detail give "".
func Kind(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	if k := ce.Meta().Get(HeaderError); k != "" {
		return k
	}
	if !connect.IsWireError(ce) {
		return ""
	}
	switch ce.Code() {
	case connect.CodeResourceExhausted:
		return KindOverloaded
	case connect.CodeInvalidArgument:
		return KindInvalid
	case connect.CodeNotFound:
		return KindNotFound
	default:
		return ""
	}
}

// Leader decodes the leader hint of a not_leader error; both are empty when
// err carries none.
func Leader(err error) (id, addr string) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return "", ""
	}
	return ce.Meta().Get(HeaderLeader), ce.Meta().Get(HeaderLeaderAddr)
}

// Field decodes the field and reason of an invalid-argument error: the
// Cronoq-Field header when present, otherwise parsed from the message.
func Field(err error) (field, reason string) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return "", ""
	}
	f, r, ok := ParseInvalid(ce.Message())
	if h := ce.Meta().Get(HeaderField); h != "" {
		if !ok || f != h {
			r = ce.Message()
		}
		return h, r
	}
	if ok {
		return f, r
	}
	return "", ce.Message()
}

// Relay prepares an error received from another node (for instance the
// leader, when this node forwarded a call) to be returned by a handler:
// connect strips the metadata of errors that came off the wire, so the code,
// message, details and cronoq headers are copied onto a fresh error. Errors
// that are not wire errors are returned unchanged.
func Relay(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) || !connect.IsWireError(ce) {
		return err
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	for _, h := range []string{HeaderError, HeaderLeader, HeaderLeaderAddr, HeaderField, HeaderRetryAfter} {
		if v := ce.Meta().Get(h); v != "" {
			out.Meta().Set(h, v)
		}
	}
	return out
}
