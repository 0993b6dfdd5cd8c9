package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
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
// encoding of the tagged schema types, as github.com/vmihailenco/msgpack/v5
// writes and reads them: structs as maps keyed by their tags in declaration
// order, omitempty fields left out, integers in their shortest form
// (UseCompactInts), floats as float64. Decoding ignores unknown keys, so a
// newer version may add fields, and accepts integers of any width
// (converting them to the field's type as Go conversions do). Every body is
// checked by validate (wire.go) before it is decoded.
//
// The bodies are written by the hand-written appenders of fastcodec.go,
// which produce the library's bytes exactly. Commit batches are read by the
// fast decoder of fastcodec.go, which falls back to the library for any
// form it does not reproduce exactly; other bodies are read by the library.

// maxPooledSize is the largest buffer an encoder or decoder may keep when it
// goes back to its pool, so that one huge entry does not pin its memory.
const maxPooledSize = 1 << 20

// decoder reads validated MessagePack bodies into schema values, reusing
// its library decoder.
type decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

func newDecoder() *decoder {
	d := new(decoder)
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}

// errDecoderPanic reports a panic of the library decoder.
var errDecoderPanic = errors.New("decoder panic")

// decode validates body, which must hold one MessagePack map, and decodes it
// into v, a pointer to a schema struct. Fields absent from body are left as
// they are in *v.
func (d *decoder) decode(body []byte, v any) (err error) {
	if err := validate(body); err != nil {
		return err
	}
	if c := body[0]; !(c >= mpFixMap && c <= mpFixMapMax || c == mpMap16 || c == mpMap32) {
		return fmt.Errorf("type code 0x%02x, want a map", c)
	}
	// The library is not expected to panic on validated input; if it ever
	// does, the input is corrupt, not the node.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errDecoderPanic, p)
		}
	}()
	d.r.Reset(body)
	d.dec.Reset(&d.r)
	if err := d.dec.Decode(v); err != nil {
		return err
	}
	if d.r.Len() != 0 {
		return fmt.Errorf("%d bytes left after decoding", d.r.Len())
	}
	return nil
}

var decoders = sync.Pool{New: func() any { return newDecoder() }}

// decodeBody decodes body into v with a pooled decoder.
func decodeBody(body []byte, v any) error {
	d := decoders.Get().(*decoder)
	err := d.decode(body, v)
	d.r.Reset(nil)
	// A decoder keeps a buffer as long as the longest string it read; one
	// that panicked may be in any state.
	if len(body) <= maxPooledSize && !errors.Is(err, errDecoderPanic) {
		decoders.Put(d)
	}
	return err
}

// EncodeEpochBump encodes an epoch bump as a log entry.
func EncodeEpochBump(b *EpochBump) ([]byte, error) {
	if b == nil {
		return nil, errors.New("encoding epoch bump: nil")
	}
	return appendEntry(EntryEpochBump, func(dst []byte) []byte { return appendEpochBump(dst, b) }), nil
}

// EncodeCommitBatch encodes a commit batch as a log entry. Every mutation
// must have exactly one field set.
func EncodeCommitBatch(b *CommitBatch) ([]byte, error) {
	if b == nil {
		return nil, errors.New("encoding commit batch: nil")
	}
	for i := range b.Mutations {
		if err := b.Mutations[i].check(); err != nil {
			return nil, fmt.Errorf("encoding commit batch: mutation %d: %w", i, err)
		}
	}
	return appendEntry(EntryCommitBatch, func(dst []byte) []byte { return appendCommitBatch(dst, b) }), nil
}

// DecodeEntry decodes a log entry. It returns the entry's type (without
// IgnoreUnknownFlag for known types) and a *EpochBump or a *CommitBatch.
// For an unknown type with IgnoreUnknownFlag it returns the raw type and a
// nil value and error; without the flag, an error wrapping ErrUnknownEntry.
// Undecodable bytes give an error wrapping ErrCorrupt; a commit batch
// decodes only if every mutation has exactly one field set.
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
	if validate(body) != nil || !fastDecodeCommitBatch(body, b) {
		// The library decodes what the fast path does not take, from
		// the same start.
		clear(ms)
		*b = CommitBatch{Mutations: ms[:0]}
		if err := decodeBody(body, b); err != nil {
			return fmt.Errorf("%w: commit batch: %v", ErrCorrupt, err)
		}
	}
	for i := range b.Mutations {
		if err := b.Mutations[i].check(); err != nil {
			return fmt.Errorf("%w: commit batch: mutation %d: %v", ErrCorrupt, i, err)
		}
	}
	return nil
}

// fields reports how many fields of m are set.
func (m *Mutation) fields() int {
	n := 0
	for _, set := range [...]bool{
		m.Insert != nil, m.Ready != nil, m.Start != nil, m.Retry != nil,
		m.Finish != nil, m.Purge != nil, m.PutSchedule != nil,
		m.DelSchedule != nil, m.PauseSchedule != nil, m.Fire != nil,
		m.Tombstone != nil,
	} {
		if set {
			n++
		}
	}
	return n
}

func (m *Mutation) check() error {
	if n := m.fields(); n != 1 {
		return fmt.Errorf("%d fields set, want exactly 1", n)
	}
	return nil
}
