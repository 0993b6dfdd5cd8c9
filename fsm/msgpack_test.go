package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tinylib/msgp/msgp"
)

// Tools to write MessagePack bodies the way another writer could have: the
// generated encoder is one writer among others (the previous release wrote
// integers differently, a later one may add fields), and the decoder must
// read whatever a conforming writer produces.

// intForm is how rewrite writes integers.
type intForm int

const (
	intsAsWritten intForm = iota // keep the bytes as they are
	// intsV1 is what the previous release wrote: a positive or negative
	// fixint when the value fits, else the narrowest uint code for values
	// >= 0 (even in signed fields) and the narrowest int code below 0.
	intsV1
	intsUint   // the narrowest uint code for values >= 0, never a fixint; int codes below 0
	intsInt    // the narrowest int code, never a fixint (uint64 only above MaxInt64)
	intsUint64 // uint64 for every value >= 0, int64 below 0
	intsInt64  // int64 for every value (uint64 only above MaxInt64)
)

var intForms = []intForm{intsAsWritten, intsV1, intsUint, intsInt, intsUint64, intsInt64}

func (f intForm) String() string {
	return [...]string{"as written", "v1", "uint", "int", "uint64", "int64"}[f]
}

// rewrite re-encodes a MessagePack value. The result holds the same values
// in other encodings, plus the unknown fields of extra.
type rewrite struct {
	ints intForm
	// wide writes every map, array, str and bin header in its 32-bit form.
	wide bool
	// float32 writes a float64 as a float32 where that is exact.
	float32 bool
	// extra are values added to every map (every struct of the schema)
	// under keys no release uses: the first before the map's own entries,
	// the others after them.
	extra [][]byte
}

// apply returns b rewritten; b must hold exactly one value.
func (w rewrite) apply(t testing.TB, b []byte) []byte {
	t.Helper()
	out, rest, err := w.value(nil, b)
	require.NoError(t, err)
	require.Empty(t, rest)
	return out
}

// unknownKey is the key of the i-th extra field: no struct uses it.
func unknownKey(i int) string { return fmt.Sprintf("zz%d", i) }

func (w rewrite) value(dst, b []byte) ([]byte, []byte, error) {
	var err error
	switch msgp.NextType(b) {
	case msgp.MapType:
		var n uint32
		if n, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
			return nil, nil, err
		}
		dst = w.header(dst, 0xdf, n+uint32(len(w.extra)), msgp.AppendMapHeader)
		for i, x := range w.extra {
			if i == 0 {
				dst = append(w.str(dst, unknownKey(i)), x...)
			}
		}
		for range 2 * n {
			if dst, b, err = w.value(dst, b); err != nil {
				return nil, nil, err
			}
		}
		for i, x := range w.extra {
			if i > 0 {
				dst = append(w.str(dst, unknownKey(i)), x...)
			}
		}
		return dst, b, nil
	case msgp.ArrayType:
		var n uint32
		if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, nil, err
		}
		dst = w.header(dst, 0xdd, n, msgp.AppendArrayHeader)
		for range n {
			if dst, b, err = w.value(dst, b); err != nil {
				return nil, nil, err
			}
		}
		return dst, b, nil
	case msgp.IntType, msgp.UintType:
		if w.ints == intsAsWritten {
			break
		}
		var (
			neg bool
			u   uint64
		)
		if msgp.NextType(b) == msgp.IntType {
			var i int64
			i, b, err = msgp.ReadInt64Bytes(b)
			neg, u = i < 0, uint64(i)
		} else {
			u, b, err = msgp.ReadUint64Bytes(b)
		}
		if err != nil {
			return nil, nil, err
		}
		return appendIntAs(dst, w.ints, neg, u), b, nil
	case msgp.StrType:
		if !w.wide {
			break
		}
		var s []byte
		if s, b, err = msgp.ReadStringZC(b); err != nil {
			return nil, nil, err
		}
		return append(appendCode(dst, 0xdb, 4, uint64(len(s))), s...), b, nil
	case msgp.BinType:
		if !w.wide {
			break
		}
		var p []byte
		if p, b, err = msgp.ReadBytesZC(b); err != nil {
			return nil, nil, err
		}
		return append(appendCode(dst, 0xc6, 4, uint64(len(p))), p...), b, nil
	case msgp.Float64Type:
		if !w.float32 {
			break
		}
		var f float64
		if f, b, err = msgp.ReadFloat64Bytes(b); err != nil {
			return nil, nil, err
		}
		if float64(float32(f)) == f {
			return msgp.AppendFloat32(dst, float32(f)), b, nil
		}
		return msgp.AppendFloat64(dst, f), b, nil
	}
	rest, err := msgp.Skip(b)
	if err != nil {
		return nil, nil, err
	}
	return append(dst, b[:len(b)-len(rest)]...), rest, nil
}

func (w rewrite) header(dst []byte, code32 byte, n uint32, compact func([]byte, uint32) []byte) []byte {
	if w.wide {
		return appendCode(dst, code32, 4, uint64(n))
	}
	return compact(dst, n)
}

func (w rewrite) str(dst []byte, s string) []byte {
	if w.wide {
		return append(appendCode(dst, 0xdb, 4, uint64(len(s))), s...)
	}
	return msgp.AppendString(dst, s)
}

// appendCode appends a type code followed by the low width bytes of v,
// big-endian.
func appendCode(dst []byte, code byte, width int, v uint64) []byte {
	dst = append(dst, code)
	for k := width - 1; k >= 0; k-- {
		dst = append(dst, byte(v>>(8*k)))
	}
	return dst
}

// appendIntAs appends an integer in form f: the value is int64(u) when neg,
// else u.
func appendIntAs(dst []byte, f intForm, neg bool, u uint64) []byte {
	i := int64(u)
	signed := func() []byte { // the narrowest int code
		switch {
		case i >= math.MinInt8 && i <= math.MaxInt8:
			return appendCode(dst, 0xd0, 1, u)
		case i >= math.MinInt16 && i <= math.MaxInt16:
			return appendCode(dst, 0xd1, 2, u)
		case i >= math.MinInt32 && i <= math.MaxInt32:
			return appendCode(dst, 0xd2, 4, u)
		}
		return appendCode(dst, 0xd3, 8, u)
	}
	unsigned := func() []byte { // the narrowest uint code
		switch {
		case u <= math.MaxUint8:
			return appendCode(dst, 0xcc, 1, u)
		case u <= math.MaxUint16:
			return appendCode(dst, 0xcd, 2, u)
		case u <= math.MaxUint32:
			return appendCode(dst, 0xce, 4, u)
		}
		return appendCode(dst, 0xcf, 8, u)
	}
	switch {
	case f == intsV1 && !neg && u <= 0x7f:
		return append(dst, byte(u))
	case f == intsV1 && neg && i >= -32:
		return append(dst, byte(i))
	case neg && f == intsInt64, neg && f == intsUint64:
		return appendCode(dst, 0xd3, 8, u)
	case neg:
		return signed()
	case u > math.MaxInt64, f == intsUint64:
		return appendCode(dst, 0xcf, 8, u)
	case f == intsInt64:
		return appendCode(dst, 0xd3, 8, u)
	case f == intsInt:
		return signed()
	}
	return unsigned()
}

// mpValue is one MessagePack value and what it is.
type mpValue struct {
	name string
	data []byte
}

// everyType returns values of every MessagePack type and of every length
// class of each, built with the msgp appenders where they write the form
// wanted and by hand otherwise.
func everyType() []mpValue {
	ext := func(typ int8, n int) []byte {
		b, err := msgp.AppendExtension(nil, &msgp.RawExtension{Type: typ, Data: bytes.Repeat([]byte{0xc1}, n)})
		if err != nil {
			panic(err)
		}
		return b
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	mapOf := func(n int) []byte {
		b := msgp.AppendMapHeader(nil, uint32(n))
		for i := range n {
			b = msgp.AppendInt(msgp.AppendString(b, fmt.Sprintf("k%d", i)), i)
		}
		return b
	}
	arrayOf := func(n int) []byte {
		b := msgp.AppendArrayHeader(nil, uint32(n))
		for i := range n {
			b = msgp.AppendUint64(b, uint64(i)<<(i%64))
		}
		return b
	}
	nested := func(depth int) []byte {
		var b []byte
		for i := range depth {
			if i%2 == 0 {
				b = msgp.AppendArrayHeader(b, 1)
			} else {
				b = msgp.AppendString(msgp.AppendMapHeader(b, 1), "n")
			}
		}
		return msgp.AppendNil(b)
	}
	return []mpValue{
		{"nil", msgp.AppendNil(nil)},
		{"false", msgp.AppendBool(nil, false)},
		{"true", msgp.AppendBool(nil, true)},
		{"positive fixint", msgp.AppendInt64(nil, 127)},
		{"negative fixint", msgp.AppendInt64(nil, -32)},
		{"uint8", msgp.AppendUint8(nil, 200)},
		{"uint16", msgp.AppendUint16(nil, 60000)},
		{"uint32", msgp.AppendUint32(nil, 1<<31)},
		{"uint64", msgp.AppendUint64(nil, math.MaxUint64)},
		{"int8", msgp.AppendInt8(nil, -100)},
		{"int16", msgp.AppendInt16(nil, -300)},
		{"int32", msgp.AppendInt32(nil, -70000)},
		{"int64", msgp.AppendInt64(nil, math.MinInt64)},
		{"float32", msgp.AppendFloat32(nil, 1.5)},
		{"float64", msgp.AppendFloat64(nil, -2.25)},
		{"float64 NaN", msgp.AppendFloat64(nil, math.NaN())},
		{"empty fixstr", msgp.AppendString(nil, "")},
		{"fixstr", msgp.AppendString(nil, strings.Repeat("a", 31))},
		{"str8", msgp.AppendString(nil, strings.Repeat("é", 100))},
		{"str16", msgp.AppendString(nil, strings.Repeat("b", 300))},
		{"str32", msgp.AppendString(nil, strings.Repeat("c", 70000))},
		{"short str32", cat(appendCode(nil, 0xdb, 4, 2), []byte("hi"))},
		{"empty bin8", msgp.AppendBytes(nil, []byte{})},
		{"bin8", msgp.AppendBytes(nil, []byte{0xc1, 0xff, 0})},
		{"bin16", msgp.AppendBytes(nil, bytes.Repeat([]byte{9}, 300))},
		{"bin32", msgp.AppendBytes(nil, bytes.Repeat([]byte{8}, 70000))},
		{"short bin32", cat(appendCode(nil, 0xc6, 4, 2), []byte{0xc1, 0xc1})},
		{"empty fixarray", msgp.AppendArrayHeader(nil, 0)},
		{"fixarray", cat(msgp.AppendArrayHeader(nil, 3), msgp.AppendNil(nil), msgp.AppendFloat64(nil, 1), msgp.AppendString(nil, "s"))},
		{"array16", arrayOf(20)},
		{"array32", arrayOf(70000)},
		{"short array32", cat(appendCode(nil, 0xdd, 4, 1), msgp.AppendNil(nil))},
		{"empty fixmap", msgp.AppendMapHeader(nil, 0)},
		{"fixmap", mapOf(3)},
		{"map16", mapOf(20)},
		{"short map32", cat(appendCode(nil, 0xdf, 4, 1), msgp.AppendString(nil, "id"), msgp.AppendString(nil, "not mine"))},
		{"map with keys of other types", cat(msgp.AppendMapHeader(nil, 4),
			msgp.AppendInt(nil, -1), msgp.AppendNil(nil),
			msgp.AppendNil(nil), msgp.AppendBool(nil, true),
			msgp.AppendArrayHeader(nil, 0), msgp.AppendMapHeader(nil, 0),
			msgp.AppendBytes(nil, []byte("k")), msgp.AppendFloat32(nil, 0))},
		{"fixext1", ext(1, 1)},
		{"fixext2", ext(2, 2)},
		{"fixext4", ext(3, 4)},
		{"fixext8", ext(4, 8)},
		{"fixext16", ext(5, 16)},
		{"ext8", ext(6, 3)},
		{"empty ext8", ext(7, 0)},
		{"ext16", ext(-8, 300)},
		{"ext32", ext(9, 70000)},
		{"short ext32", cat(appendCode(nil, 0xc9, 4, 1), []byte{10, 0xaa})},
		{"timestamp", msgp.AppendTime(nil, baseTime.Time())},
		{"timestamp ext -1", ext(-1, 12)},
		{"nested 20 deep", nested(20)},
	}
}

// mutationBody is the body of a mutation whose only key is key.
func mutationBody(key string, value []byte) []byte {
	return append(msgp.AppendString(msgp.AppendMapHeader(nil, 1), key), value...)
}

// batchBody returns a commit batch entry of epoch 1 and time 0 holding the
// given mutation bodies.
func batchBody(muts ...[]byte) []byte {
	b := msgp.AppendMapHeader([]byte{byte(EntryCommitBatch)}, 3)
	b = msgp.AppendUint64(msgp.AppendString(b, "e"), 1)
	b = msgp.AppendInt64(msgp.AppendString(b, "t"), 0)
	b = msgp.AppendArrayHeader(msgp.AppendString(b, "m"), uint32(len(muts)))
	for _, m := range muts {
		b = append(b, m...)
	}
	return b
}

// marshal returns the generated encoding of v.
func marshal(t testing.TB, v msgp.Marshaler) []byte {
	t.Helper()
	b, err := v.MarshalMsg(nil)
	require.NoError(t, err)
	return b
}

// recordBody encodes v as the body of a snapshot record.
func recordBody(v msgp.Marshaler) []byte {
	b, err := v.MarshalMsg(nil)
	if err != nil {
		panic(err)
	}
	return b
}

func TestRewriteWritesWhatItSays(t *testing.T) {
	// The forms of the integer rewriter, on the boundary values.
	tests := []struct {
		form intForm
		neg  bool
		u    uint64
		want string
	}{
		{intsV1, false, 5, "05"},
		{intsV1, false, 200, "ccc8"},
		{intsV1, true, uint64(1<<64 - 32), "e0"},   // -32
		{intsV1, true, uint64(1<<64 - 33), "d0df"}, // -33
		{intsUint, false, 5, "cc05"},
		{intsUint, false, 1 << 32, "cf0000000100000000"},
		{intsInt, false, 5, "d005"},
		{intsInt, false, 200, "d100c8"},
		{intsInt, false, math.MaxUint64, "cfffffffffffffffff"},
		{intsUint64, false, 0, "cf0000000000000000"},
		{intsUint64, true, uint64(1<<64 - 1), "d3ffffffffffffffff"},
		{intsInt64, false, 1, "d30000000000000001"},
		{intsInt64, false, 1 << 63, "cf8000000000000000"},
	}
	for _, tc := range tests {
		got := appendIntAs(nil, tc.form, tc.neg, tc.u)
		require.Equal(t, tc.want, fmt.Sprintf("%x", got), "%v %v %d", tc.form, tc.neg, tc.u)
		// msgp reads it back.
		if tc.neg {
			i, _, err := msgp.ReadInt64Bytes(got)
			require.NoError(t, err)
			require.Equal(t, int64(tc.u), i)
		} else {
			u, _, err := msgp.ReadUint64Bytes(got)
			require.NoError(t, err)
			require.Equal(t, tc.u, u)
		}
	}
	// Containers and strings.
	in := msgp.AppendString(msgp.AppendMapHeader(nil, 1), "a")
	in = msgp.AppendFloat64(in, 0.5)
	out := rewrite{wide: true, float32: true, extra: [][]byte{{0xc0}, {0xc3}}}.apply(t, in)
	want := appendCode(nil, 0xdf, 4, 3)
	want = append(appendCode(want, 0xdb, 4, 3), "zz0"...)
	want = append(want, 0xc0)
	want = append(appendCode(want, 0xdb, 4, 1), 'a')
	want = msgp.AppendFloat32(want, 0.5)
	want = append(appendCode(want, 0xdb, 4, 3), "zz1"...)
	want = append(want, 0xc3)
	require.Equal(t, want, out)
	require.Equal(t, uint32(3), binary.BigEndian.Uint32(out[1:]), "a map32 header")
}
