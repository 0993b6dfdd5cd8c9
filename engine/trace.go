package engine

import (
	"context"
	"time"
)

// EntryTrace describes the log entry that made the answer of one call
// durable: when the call's step began to wait for an entry, when its entry
// was appended, and when it was applied on this node. Tracing builds the
// span of a commit from it.
type EntryTrace struct {
	// Seq numbers the entry among those of this engine (its term).
	Seq uint64
	// Index is the entry's raft index, when the log reports it (else 0).
	Index uint64
	// Mutations and Bytes are the size of the whole entry, which the
	// call's step shares with the steps committed with it.
	Mutations int
	Bytes     int
	// Queued is when the call's step was produced and began to wait for
	// an entry; Appended when its entry was handed to the log; Applied
	// when the log reported it applied.
	Queued, Appended, Applied time.Time
}

// CommitObserver receives the entry that made a call's answer durable,
// before the answer is sent. i is the call's index in a CompleteMany (0
// for every other call). It runs on the engine's goroutine and must not
// block.
type CommitObserver func(i int, ent EntryTrace)

type observerKey struct{}

// WithCommitObserver returns a copy of ctx whose calls to the engine report
// to fn the entry that made their answer durable (the way
// net/http/httptrace hooks a request). A call whose answer needed no entry
// of its own (a duplicate submit, a read) reports nothing, and neither does
// one that fails before its entry applied.
func WithCommitObserver(ctx context.Context, fn CommitObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, fn)
}

// commitObserver returns the observer ctx carries, or nil.
func commitObserver(ctx context.Context) CommitObserver {
	fn, _ := ctx.Value(observerKey{}).(CommitObserver)
	return fn
}

// indexed is a Pending that knows the raft index of its entry once Wait
// returned nil.
type indexed interface{ Index() uint64 }

// trace describes ent for a call of step s.
func (ent *entry) trace(s *pendingStep) EntryTrace {
	return EntryTrace{
		Seq: ent.seq, Index: ent.index, Mutations: ent.muts, Bytes: ent.bytes,
		Queued: s.queued, Appended: ent.appendedAt, Applied: ent.appliedAt,
	}
}
