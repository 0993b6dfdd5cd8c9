package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
)

var (
	// ErrStaleEpoch is returned for a commit batch whose epoch is not the
	// current epoch (the engine that made it was fenced off), and for an epoch
	// bump that is not exactly the current epoch plus one.
	ErrStaleEpoch = errors.New("fsm: stale epoch")
	// ErrCorrupt is returned for a log entry that does not decode.
	ErrCorrupt = errors.New("fsm: corrupt entry")
	// ErrUnknownEntry is returned for an entry of an unknown type that does
	// not carry IgnoreUnknownFlag.
	ErrUnknownEntry = errors.New("fsm: unknown entry type")
	// ErrUnknownMutation is returned for a commit batch holding a mutation
	// of a kind this release does not know.
	ErrUnknownMutation = errors.New("fsm: unknown mutation kind")
	// ErrNewerVersion is returned for an entry or a snapshot that needs a
	// newer log format than this release understands.
	ErrNewerVersion = errors.New("fsm: newer log format")
)

// RejectedError reports a commit batch that was not applied because the
// precondition of one of its mutations did not hold. Nothing of the batch was
// applied.
type RejectedError struct {
	Index  int    // position of the failing mutation in the batch
	Reason string // what did not hold
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("fsm: mutation %d rejected: %s", e.Index, e.Reason)
}

// The bodies of log entries and snapshot records are the MessagePack
// encoding written by the generated codec (types_gen.go). Every body is
// checked by validate (wire.go) before it is decoded, which bounds what the
// decoder allocates by the size of the input.

// decodeBody validates body, which must hold exactly one MessagePack map,
// and decodes it into v. Fields absent from body are left as they are.
func decodeBody(body []byte, v interface {
	UnmarshalMsg([]byte) ([]byte, error)
}) error {
	if err := validate(body); err != nil {
		return err
	}
	if c := body[0]; !(c >= mpFixMap && c <= mpFixMapMax || c == mpMap16 || c == mpMap32) {
		return fmt.Errorf("type code 0x%02x, want a map", c)
	}
	rest, err := v.UnmarshalMsg(body)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d bytes left after decoding", len(rest))
	}
	return nil
}

// EncodeEpochBump encodes an epoch bump as a log entry.
func EncodeEpochBump(b *EpochBump) ([]byte, error) {
	if b == nil {
		return nil, errors.New("encoding epoch bump: nil")
	}
	data, err := encode(EntryEpochBump, b)
	if err != nil {
		return nil, fmt.Errorf("encoding epoch bump: %w", err)
	}
	return data, nil
}

// scratch holds encoding buffers for reuse: Msgsize is an upper bound, so
// entries are encoded into scratch space and copied out at their size (raft
// keeps entries in memory).
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledSize is the largest buffer put back in scratch, so that one huge
// entry does not pin its memory.
const maxPooledSize = 1 << 20

// encode returns the entry of type typ with body v, at its exact size.
func encode(typ EntryType, v interface {
	MarshalMsg([]byte) ([]byte, error)
	Msgsize() int
}) ([]byte, error) {
	bp := scratch.Get().(*[]byte)
	buf := append((*bp)[:0], byte(typ))
	buf, err := v.MarshalMsg(buf)
	var out []byte
	if err == nil {
		out = bytes.Clone(buf)
	}
	if cap(buf) <= maxPooledSize {
		*bp = buf
		scratch.Put(bp)
	}
	return out, err
}

// EncodeCommitBatch encodes a commit batch as a log entry, setting its
// Version to what its mutations need. Every mutation must have exactly one
// field set.
func EncodeCommitBatch(b *CommitBatch) ([]byte, error) {
	if b == nil {
		return nil, errors.New("encoding commit batch: nil")
	}
	b.Version = 0
	for i := range b.Mutations {
		m := &b.Mutations[i]
		if err := m.check(); err != nil {
			return nil, fmt.Errorf("encoding commit batch: mutation %d: %w", i, err)
		}
		if v := m.Version(); v > 1 && v > b.Version {
			b.Version = v
		}
	}
	data, err := encode(EntryCommitBatch, b)
	if err != nil {
		return nil, fmt.Errorf("encoding commit batch: %w", err)
	}
	return data, nil
}

// DecodeEntry decodes a log entry. It returns the entry's type (without
// IgnoreUnknownFlag for known types) and a *EpochBump or a *CommitBatch.
// For an unknown type with IgnoreUnknownFlag it returns the raw type and a
// nil value and error; without the flag, an error wrapping ErrUnknownEntry.
// Undecodable bytes give an error wrapping ErrCorrupt, a mutation of no
// known kind one wrapping ErrUnknownMutation.
func DecodeEntry(data []byte) (EntryType, any, error) {
	if len(data) == 0 {
		return 0, nil, fmt.Errorf("%w: empty entry", ErrCorrupt)
	}
	typ := EntryType(data[0])
	switch typ &^ IgnoreUnknownFlag {
	case EntryEpochBump:
		b := new(EpochBump)
		if err := decodeEpochBump(data[1:], b); err != nil {
			return EntryEpochBump, nil, err
		}
		return EntryEpochBump, b, nil
	case EntryCommitBatch:
		b := new(CommitBatch)
		if err := decodeCommitBatch(data[1:], b); err != nil {
			return EntryCommitBatch, nil, err
		}
		return EntryCommitBatch, b, nil
	}
	if typ&IgnoreUnknownFlag != 0 {
		return typ, nil, nil
	}
	return typ, nil, fmt.Errorf("entry type %d: %w", typ, ErrUnknownEntry)
}

// decodeEpochBump decodes into b, which should be zero.
func decodeEpochBump(body []byte, b *EpochBump) error {
	if err := decodeBody(body, b); err != nil {
		return fmt.Errorf("%w: epoch bump: %v", ErrCorrupt, err)
	}
	return nil
}

// decodeCommitBatch decodes into b, reusing the capacity of b.Mutations.
func decodeCommitBatch(body []byte, b *CommitBatch) error {
	// The decoder fills existing elements in place and follows their
	// pointers, so whatever the scratch space held must go first.
	ms := b.Mutations[:cap(b.Mutations)]
	clear(ms)
	*b = CommitBatch{Mutations: ms[:0]}
	if err := decodeBody(body, b); err != nil {
		return fmt.Errorf("%w: commit batch: %v", ErrCorrupt, err)
	}
	for i := range b.Mutations {
		switch n := b.Mutations[i].fields(); {
		case n == 0:
			// A well-formed mutation whose only key this release does not
			// know: a kind added by a newer one.
			return fmt.Errorf("%w: commit batch: mutation %d", ErrUnknownMutation, i)
		case n > 1:
			return fmt.Errorf("%w: commit batch: mutation %d: %d fields set, want exactly 1", ErrCorrupt, i, n)
		}
	}
	shareStrings(b)
	return nil
}

// shareStrings makes the tasks of b share one copy of the pool, kind and
// worker strings they repeat (most tasks of a batch have the same), so that
// the state holds one copy per batch rather than one per task.
func shareStrings(b *CommitBatch) {
	var pool, kind, worker string
	share := func(s, last *string) {
		if *s == *last {
			*s = *last
		} else {
			*last = *s
		}
	}
	for i := range b.Mutations {
		switch m := &b.Mutations[i]; {
		case m.Insert != nil:
			share(&m.Insert.Pool, &pool)
			share(&m.Insert.Kind, &kind)
			share(&m.Insert.Worker, &worker)
		case m.Start != nil:
			share(&m.Start.Worker, &worker)
		}
	}
}
