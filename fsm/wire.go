package fsm

import (
	"errors"
	"fmt"
)

// Log entries and snapshot records are decoded by the msgpack library, but
// only after validate has accepted the bytes. The library sizes slices and
// byte strings from the length headers it reads, without comparing them with
// the input (its allocation limit does not take effect in v5.4.1), so a few
// hostile bytes claiming four billion array elements would make it allocate
// them all. validate walks the bytes once, without allocating, and refuses:
//
//   - a str, bin or ext value longer than the bytes that remain;
//   - an array of n elements with fewer than n bytes remaining, or a map of n
//     entries with fewer than 2n (every value takes at least one byte);
//   - nesting deeper than maxDepth (the library decodes recursively);
//   - the unused type code 0xc1, and anything after the first value.
//
// Once a body passes, every container and byte string it declares is backed
// by bytes actually present, so what the decoder allocates is bounded by a
// small multiple of the input size (at most the size of the largest element
// type, about a hundred bytes, per input byte).
//
// validate knows nothing of the schema: types and field names are the
// decoder's business.

// maxDepth bounds the nesting of values. The schema itself nests six deep
// (batch, mutations, mutation, task, labels, label); the rest is room for
// fields added by newer versions.
const maxDepth = 32

// MessagePack type codes, where the ranges matter to validate.
const (
	mpPosFixMax = 0x7f
	mpFixMap    = 0x80
	mpFixMapMax = 0x8f
	mpFixArrMax = 0x9f
	mpFixStrMax = 0xbf
	mpNil       = 0xc0
	mpUnused    = 0xc1
	mpFalse     = 0xc2
	mpTrue      = 0xc3
	mpBin8      = 0xc4 // bin8, bin16, bin32
	mpBin32     = 0xc6
	mpExt8      = 0xc7 // ext8, ext16, ext32
	mpExt32     = 0xc9
	mpFloat32   = 0xca
	mpFloat64   = 0xcb
	mpUint8     = 0xcc // uint8 .. uint64
	mpUint64    = 0xcf
	mpInt8      = 0xd0 // int8 .. int64
	mpInt64     = 0xd3
	mpFixExt1   = 0xd4 // fixext 1, 2, 4, 8, 16
	mpFixExt16  = 0xd8
	mpStr8      = 0xd9 // str8, str16, str32
	mpStr32     = 0xdb
	mpArray16   = 0xdc // array16, array32
	mpArray32   = 0xdd
	mpMap16     = 0xde // map16, map32
	mpMap32     = 0xdf
	mpNegFixMin = 0xe0
)

// errTruncated reports input that ends inside a value, or a length that
// claims more than the input holds.
var errTruncated = errors.New("unexpected end of input")

// validate checks that b holds exactly one well-formed MessagePack value
// within the limits described above.
func validate(b []byte) error {
	// pending[d] counts the values still to read at depth d; depth 0 is the
	// top level, which holds one value.
	var pending [maxDepth + 1]uint64
	pending[0] = 1
	depth, off := 0, 0
	// be reads a k-byte big-endian length at off.
	be := func(k int) (uint64, error) {
		if k > len(b)-off {
			return 0, errTruncated
		}
		var v uint64
		for _, c := range b[off : off+k] {
			v = v<<8 | uint64(c)
		}
		off += k
		return v, nil
	}
	for {
		for pending[depth] == 0 {
			if depth == 0 {
				if off != len(b) {
					return fmt.Errorf("%d trailing bytes", len(b)-off)
				}
				return nil
			}
			depth--
		}
		pending[depth]--
		if off >= len(b) {
			return errTruncated
		}
		c := b[off]
		off++

		var (
			n   uint64 // payload bytes, or entries of a container
			per uint64 // values per entry: 1 for an array, 2 for a map, 0 for a payload
			err error
		)
		switch {
		case c <= mpPosFixMax, c >= mpNegFixMin, c == mpNil, c == mpFalse, c == mpTrue:
		case c <= mpFixMapMax:
			n, per = uint64(c&0x0f), 2
		case c <= mpFixArrMax:
			n, per = uint64(c&0x0f), 1
		case c <= mpFixStrMax:
			n = uint64(c & 0x1f)
		case c == mpUnused:
			return fmt.Errorf("invalid type code 0x%02x", c)
		case c <= mpBin32:
			n, err = be(1 << (c - mpBin8))
		case c <= mpExt32:
			n, err = be(1 << (c - mpExt8))
			n++ // the ext type byte
		case c == mpFloat32:
			n = 4
		case c == mpFloat64:
			n = 8
		case c <= mpUint64:
			n = 1 << (c - mpUint8)
		case c <= mpInt64:
			n = 1 << (c - mpInt8)
		case c <= mpFixExt16:
			n = 1 + 1<<(c-mpFixExt1)
		case c <= mpStr32:
			n, err = be(1 << (c - mpStr8))
		case c <= mpArray32:
			n, err = be(2 << (c - mpArray16))
			per = 1
		default: // map16, map32
			n, err = be(2 << (c - mpMap16))
			per = 2
		}
		if err != nil {
			return err
		}
		rest := uint64(len(b) - off)
		if per == 0 {
			if n > rest {
				return errTruncated
			}
			off += int(n)
			continue
		}
		if n*per > rest {
			return fmt.Errorf("container of %d entries in %d bytes: %w", n, rest, errTruncated)
		}
		if n > 0 {
			if depth == maxDepth {
				return fmt.Errorf("values nested more than %d deep", maxDepth)
			}
			depth++
			pending[depth] = n * per
		}
	}
}
