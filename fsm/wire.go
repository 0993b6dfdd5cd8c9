package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// This file holds a small MessagePack writer and a bounded MessagePack reader
// working directly on byte slices.
//
// The writer produces exactly the bytes that github.com/vmihailenco/msgpack/v5
// produces for the tagged schema types with UseCompactInts(true): structs as
// maps keyed by their tags in declaration order, omitempty fields left out,
// integers in their shortest form, floats as float64 (the tests check this
// byte for byte). The reader accepts everything that library writes.
//
// The codec is hand-written rather than reflective for two reasons. Entries
// come from the log and must never crash a node, but the library's reflective
// decoder sizes slices from untrusted length headers (its allocation limit
// does not take effect in v5.4.1), so a few hostile bytes could claim billions
// of elements. Here every length is checked against the bytes that remain,
// nesting is bounded, and nothing can panic. It is also several times faster
// and allocates only the decoded values, which matters on the apply path.

// maxDepth bounds the nesting of values skipped as unknown fields. The schema
// itself nests less than ten deep.
const maxDepth = 32

// MessagePack type codes.
const (
	mpPosFixMax  = 0x7f
	mpFixMap     = 0x80
	mpFixArray   = 0x90
	mpFixStr     = 0xa0
	mpNil        = 0xc0
	mpFalse      = 0xc2
	mpTrue       = 0xc3
	mpBin8       = 0xc4
	mpBin16      = 0xc5
	mpBin32      = 0xc6
	mpExt8       = 0xc7
	mpExt16      = 0xc8
	mpExt32      = 0xc9
	mpFloat32    = 0xca
	mpFloat64    = 0xcb
	mpUint8      = 0xcc
	mpUint16     = 0xcd
	mpUint32     = 0xce
	mpUint64     = 0xcf
	mpInt8       = 0xd0
	mpInt16      = 0xd1
	mpInt32      = 0xd2
	mpInt64      = 0xd3
	mpFixExt1    = 0xd4
	mpFixExt16   = 0xd8
	mpStr8       = 0xd9
	mpStr16      = 0xda
	mpStr32      = 0xdb
	mpArray16    = 0xdc
	mpArray32    = 0xdd
	mpMap16      = 0xde
	mpMap32      = 0xdf
	mpNegFixMin  = 0xe0
	mpFixMapMax  = 0x8f
	mpFixArrMax  = 0x9f
	mpFixStrMax  = 0xbf
	mpFixLenMask = 0x0f
	mpFixStrMask = 0x1f
)

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, mpFixMap|byte(n))
	case n <= math.MaxUint16:
		return append(b, mpMap16, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, mpMap32), uint32(n))
	}
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, mpFixArray|byte(n))
	case n <= math.MaxUint16:
		return append(b, mpArray16, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, mpArray32), uint32(n))
	}
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, mpFixStr|byte(n))
	case n < 256:
		b = append(b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		b = append(b, mpStr16, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

// appendBin writes v as bin (nil as nil, like the library does).
func appendBin(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, mpNil)
	}
	n := len(v)
	switch {
	case n < 256:
		b = append(b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		b = append(b, mpBin16, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(n))
	}
	return append(b, v...)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= mpPosFixMax:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, mpUint8, byte(v))
	case v <= math.MaxUint16:
		return append(b, mpUint16, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, mpUint64), v)
	}
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, mpInt8, byte(v))
	case v >= math.MinInt16:
		return append(b, mpInt16, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
	}
}

func appendFloat64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, mpFloat64), math.Float64bits(f))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, mpTrue)
	}
	return append(b, mpFalse)
}

// ---------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------

// errTruncated reports input that ends inside a value.
var errTruncated = errors.New("unexpected end of input")

// reader decodes MessagePack values from a byte slice. Every method either
// returns a value or an error; none can panic or allocate more than the
// input can describe.
type reader struct {
	b   []byte
	off int
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// next returns the next n bytes (aliasing the input).
func (r *reader) next(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, errTruncated
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p, nil
}

func (r *reader) be(n int) (uint64, error) {
	p, err := r.next(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// nil consumes a nil if one comes next.
func (r *reader) nil() bool {
	if r.off < len(r.b) && r.b[r.off] == mpNil {
		r.off++
		return true
	}
	return false
}

func typeError(want string, c byte) error {
	return fmt.Errorf("expected %s, found type code 0x%02x", want, c)
}

// mapLen reads a map header; nil reads as an empty map. The length is
// checked against the remaining input (every entry takes at least 2 bytes).
func (r *reader) mapLen() (int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= mpFixMap && c <= mpFixMapMax:
		n = uint64(c & mpFixLenMask)
	case c == mpMap16:
		n, err = r.be(2)
	case c == mpMap32:
		n, err = r.be(4)
	case c == mpNil:
		return 0, nil
	default:
		return 0, typeError("map", c)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining())/2 {
		return 0, fmt.Errorf("map of %d entries: %w", n, errTruncated)
	}
	return int(n), nil
}

// arrayLen reads an array header; nil reads as -1. The length is checked
// against the remaining input (every element takes at least 1 byte).
func (r *reader) arrayLen() (int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= mpFixArray && c <= mpFixArrMax:
		n = uint64(c & mpFixLenMask)
	case c == mpArray16:
		n, err = r.be(2)
	case c == mpArray32:
		n, err = r.be(4)
	case c == mpNil:
		return -1, nil
	default:
		return 0, typeError("array", c)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()) {
		return 0, fmt.Errorf("array of %d elements: %w", n, errTruncated)
	}
	return int(n), nil
}

// raw reads a str or bin value and returns its bytes aliasing the input;
// nil reads as (nil, false).
func (r *reader) raw() ([]byte, bool, error) {
	c, err := r.byte()
	if err != nil {
		return nil, false, err
	}
	var n uint64
	switch {
	case c >= mpFixStr && c <= mpFixStrMax:
		n = uint64(c & mpFixStrMask)
	case c == mpStr8 || c == mpBin8:
		n, err = r.be(1)
	case c == mpStr16 || c == mpBin16:
		n, err = r.be(2)
	case c == mpStr32 || c == mpBin32:
		n, err = r.be(4)
	case c == mpNil:
		return nil, false, nil
	default:
		return nil, false, typeError("string", c)
	}
	if err != nil {
		return nil, false, err
	}
	if n > uint64(r.remaining()) {
		return nil, false, errTruncated
	}
	p, err := r.next(int(n))
	return p, true, err
}

// key reads a map key, aliasing the input.
func (r *reader) key() ([]byte, error) {
	p, ok, err := r.raw()
	if err == nil && !ok {
		err = errors.New("nil map key")
	}
	return p, err
}

func (r *reader) str() (string, error) {
	p, _, err := r.raw()
	if err != nil || len(p) == 0 {
		return "", err
	}
	return string(p), nil
}

// bin reads bytes into a fresh slice (nil stays nil, empty stays empty).
func (r *reader) bin() ([]byte, error) {
	p, ok, err := r.raw()
	if err != nil || !ok {
		return nil, err
	}
	return append([]byte{}, p...), nil
}

// number reads any integer. neg reports a negative value, whose two's
// complement is returned in v.
func (r *reader) number() (v uint64, neg bool, err error) {
	c, err := r.byte()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= mpPosFixMax:
		return uint64(c), false, nil
	case c >= mpNegFixMin:
		return uint64(int64(int8(c))), true, nil
	case c == mpNil:
		return 0, false, nil
	case c >= mpUint8 && c <= mpUint64:
		v, err = r.be(1 << (c - mpUint8))
		return v, false, err
	case c >= mpInt8 && c <= mpInt64:
		size := 1 << (c - mpInt8)
		v, err = r.be(size)
		if err != nil {
			return 0, false, err
		}
		shift := 64 - 8*size
		s := int64(v<<shift) >> shift // sign-extend
		return uint64(s), s < 0, nil
	}
	return 0, false, typeError("integer", c)
}

func (r *reader) uint(max uint64) (uint64, error) {
	v, neg, err := r.number()
	if err != nil {
		return 0, err
	}
	if neg || v > max {
		return 0, fmt.Errorf("integer out of range [0, %d]", max)
	}
	return v, nil
}

func (r *reader) u64() (uint64, error) { return r.uint(math.MaxUint64) }

func (r *reader) u32() (uint32, error) {
	v, err := r.uint(math.MaxUint32)
	return uint32(v), err
}

func (r *reader) u8() (uint8, error) {
	v, err := r.uint(math.MaxUint8)
	return uint8(v), err
}

func (r *reader) i64() (int64, error) {
	v, neg, err := r.number()
	if err != nil {
		return 0, err
	}
	if !neg && v > math.MaxInt64 {
		return 0, errors.New("integer out of range for int64")
	}
	return int64(v), nil
}

func (r *reader) f64() (float64, error) {
	if r.off < len(r.b) {
		switch r.b[r.off] {
		case mpFloat32:
			r.off++
			v, err := r.be(4)
			return float64(math.Float32frombits(uint32(v))), err
		case mpFloat64:
			r.off++
			v, err := r.be(8)
			return math.Float64frombits(v), err
		}
	}
	v, neg, err := r.number()
	if err != nil {
		return 0, err
	}
	if neg {
		return float64(int64(v)), nil
	}
	return float64(v), nil
}

func (r *reader) bool() (bool, error) {
	c, err := r.byte()
	if err != nil {
		return false, err
	}
	switch c {
	case mpTrue:
		return true, nil
	case mpFalse, mpNil:
		return false, nil
	}
	return false, typeError("bool", c)
}

// skip steps over one value of any type, nested at most maxDepth deep.
func (r *reader) skip() error { return r.skipDepth(0) }

func (r *reader) skipDepth(depth int) error {
	if depth > maxDepth {
		return errors.New("values nested too deep")
	}
	c, err := r.byte()
	if err != nil {
		return err
	}
	var items uint64 // nested values that follow
	var size uint64  // raw bytes that follow
	switch {
	case c <= mpPosFixMax || c >= mpNegFixMin, c == mpNil, c == mpFalse, c == mpTrue:
	case c >= mpFixMap && c <= mpFixMapMax:
		items = 2 * uint64(c&mpFixLenMask)
	case c >= mpFixArray && c <= mpFixArrMax:
		items = uint64(c & mpFixLenMask)
	case c >= mpFixStr && c <= mpFixStrMax:
		size = uint64(c & mpFixStrMask)
	case c == mpBin8 || c == mpStr8:
		size, err = r.be(1)
	case c == mpBin16 || c == mpStr16:
		size, err = r.be(2)
	case c == mpBin32 || c == mpStr32:
		size, err = r.be(4)
	case c == mpExt8:
		size, err = r.be(1)
		size++ // the ext type byte
	case c == mpExt16:
		size, err = r.be(2)
		size++
	case c == mpExt32:
		size, err = r.be(4)
		size++
	case c == mpFloat32:
		size = 4
	case c == mpFloat64:
		size = 8
	case c >= mpUint8 && c <= mpUint64:
		size = 1 << (c - mpUint8)
	case c >= mpInt8 && c <= mpInt64:
		size = 1 << (c - mpInt8)
	case c >= mpFixExt1 && c <= mpFixExt16:
		size = 1 + 1<<(c-mpFixExt1)
	case c == mpArray16:
		items, err = r.be(2)
	case c == mpArray32:
		items, err = r.be(4)
	case c == mpMap16:
		items, err = r.be(2)
		items *= 2
	case c == mpMap32:
		items, err = r.be(4)
		items *= 2
	default: // 0xc1 is never used
		return typeError("value", c)
	}
	if err != nil {
		return err
	}
	if size > uint64(r.remaining()) || items > uint64(r.remaining()) {
		return errTruncated
	}
	r.off += int(size)
	for i := uint64(0); i < items; i++ {
		if err := r.skipDepth(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
