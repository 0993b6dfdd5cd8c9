package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// The hand-written codec is held to the library: every value must encode to
// the library's bytes, and every body the fast decoder takes must decode to
// exactly the library's value.

// wildString returns strings of every length class (fixstr, str8, str16,
// str32, on both sides of each boundary) and of several scripts.
func wildString(r *prng) string {
	switch r.intn(16) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("a", 31)
	case 2:
		return strings.Repeat("b", 32)
	case 3:
		return strings.Repeat("c", 255)
	case 4:
		return strings.Repeat("d", 256)
	case 5:
		if r.intn(64) == 0 { // rare: they are slow to check
			return strings.Repeat("e", 65535)
		}
	case 6:
		if r.intn(64) == 0 { // rare: they are slow to check
			return strings.Repeat("f", 65536)
		}
	case 7:
		return "héllo wörld"
	case 8:
		return "日本語のテキスト"
	case 9:
		return "emoji 🎉🚀 and \x00 nul"
	case 10:
		return strings.Repeat("é", 128) // 256 bytes
	case 11:
		return "01J" + strings.Repeat("Z", 23) // a 26-character ULID
	}
	return fmt.Sprintf("s-%d", r.intn(1000))
}

// wildBytes returns nil, empty and non-empty byte slices of every bin class.
func wildBytes(r *prng) []byte {
	switch r.intn(10) {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return bytes.Repeat([]byte{0xff}, 255)
	case 3:
		return bytes.Repeat([]byte{0xc1}, 256)
	case 4:
		if r.intn(64) == 0 { // rare: they are slow to check
			return make([]byte, 65535)
		}
	case 5:
		if r.intn(64) == 0 { // rare: they are slow to check
			return make([]byte, 65536)
		}
	case 6:
		return []byte{0}
	}
	return []byte(wildString(r))
}

// wildInt covers every integer class on both sides of its boundaries.
func wildInt(r *prng) int64 {
	classes := []int64{0, 1, 126, 127, 128, 254, 255, 256, 65534, 65535, 65536,
		1<<32 - 1, 1 << 32, baseTime, math.MaxInt64 - 1, math.MaxInt64,
		-1, -31, -32, -33, -127, -128, -129, -32767, -32768, -32769,
		math.MinInt32 + 1, math.MinInt32, math.MinInt32 - 1, -baseTime, math.MinInt64 + 1, math.MinInt64}
	return classes[r.intn(len(classes))]
}

func wildUint(r *prng, bits int) uint64 {
	classes := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, math.MaxUint64}
	n := classes[r.intn(len(classes))]
	if bits < 64 {
		n &= 1<<bits - 1
	}
	return n
}

func wildFloat(r *prng) float64 {
	classes := []float64{0, math.Copysign(0, -1), 0.2, -0.5, 1, 1e300, -1e-300,
		math.SmallestNonzeroFloat64, math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN(),
		math.Float64frombits(0x7ff0000000000001)} // a NaN with another payload
	return classes[r.intn(len(classes))]
}

// wildKVs returns nil, empty and non-empty lists, some longer than a
// fixarray holds.
func wildKVs(r *prng) []KV {
	var n int
	switch r.intn(6) {
	case 0:
		return nil
	case 1:
		return []KV{}
	case 2:
		n = 15 + r.intn(4)
	default:
		n = 1 + r.intn(3)
	}
	kvs := make([]KV, n)
	for i := range kvs {
		kvs[i] = KV{K: wildString(r), V: wildString(r)}
	}
	return kvs
}

// fillWild sets every field of the struct v at random, leaving each one zero
// with probability 1/zeroOdds.
func fillWild(r *prng, v reflect.Value, zeroOdds int) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if r.intn(zeroOdds) == 0 {
			continue
		}
		switch {
		case f.Type() == reflect.TypeOf(Backoff{}):
			fillWild(r, f, zeroOdds)
		case f.Type() == reflect.TypeOf([]KV{}):
			f.Set(reflect.ValueOf(wildKVs(r)))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Uint8:
			f.SetBytes(wildBytes(r))
		case f.Kind() == reflect.String:
			f.SetString(wildString(r))
		case f.Kind() == reflect.Bool:
			f.SetBool(r.coin())
		case f.Kind() == reflect.Int64:
			f.SetInt(wildInt(r))
		case f.Kind() == reflect.Uint8, f.Kind() == reflect.Uint32, f.Kind() == reflect.Uint64:
			f.SetUint(wildUint(r, f.Type().Bits()))
		case f.Kind() == reflect.Float64:
			f.SetFloat(wildFloat(r))
		default:
			panic("fillWild: unhandled field type " + f.Type().String())
		}
	}
}

// wildMutation returns a mutation with, usually, one field set; sometimes
// none or two, which the codec functions (below the check of
// EncodeCommitBatch and decodeCommitBatch) must carry all the same.
func wildMutation(r *prng) Mutation {
	var m Mutation
	mv := reflect.ValueOf(&m).Elem()
	set := 1
	switch r.intn(20) {
	case 0:
		set = 0
	case 1:
		set = 2
	}
	for i := 0; i < set; i++ {
		f := mv.Field(r.intn(mv.NumField()))
		p := reflect.New(f.Type().Elem())
		fillWild(r, p.Elem(), 1+r.intn(4))
		f.Set(p)
	}
	return m
}

func wildBatch(r *prng) *CommitBatch {
	b := &CommitBatch{Epoch: wildUint(r, 64), Time: wildInt(r)}
	var n int
	switch r.intn(8) {
	case 0: // nil
		return b
	case 1:
		b.Mutations = []Mutation{}
		return b
	case 2:
		n = 16 + r.intn(8) // array16
	default:
		n = 1 + r.intn(numMutationKinds)
	}
	for i := 0; i < n; i++ {
		b.Mutations = append(b.Mutations, wildMutation(r))
	}
	return b
}

// requireSame requires want and got to be the same value: like
// reflect.DeepEqual, telling nil from empty slices, but comparing floats by
// their bits (NaN equals itself, -0 differs from 0).
func requireSame(t testing.TB, want, got any, msgAndArgs ...any) {
	t.Helper()
	if path, ok := same(reflect.ValueOf(want), reflect.ValueOf(got), "v"); !ok {
		require.Fail(t, "values differ at "+path, msgAndArgs...)
	}
}

func same(a, b reflect.Value, path string) (string, bool) {
	if a.Type() != b.Type() {
		return path + " (type)", false
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return path, a.IsNil() == b.IsNil()
		}
		return same(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if p, ok := same(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); !ok {
				return p, false
			}
		}
		return "", true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() {
			return path + fmt.Sprintf(" (nil %v vs %v)", a.IsNil(), b.IsNil()), false
		}
		if a.Len() != b.Len() {
			return path + fmt.Sprintf(" (len %d vs %d)", a.Len(), b.Len()), false
		}
		for i := 0; i < a.Len(); i++ {
			if p, ok := same(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	case reflect.String:
		return path, a.String() == b.String()
	case reflect.Bool:
		return path, a.Bool() == b.Bool()
	case reflect.Int64:
		return path, a.Int() == b.Int()
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		return path, a.Uint() == b.Uint()
	case reflect.Float64:
		return path, math.Float64bits(a.Float()) == math.Float64bits(b.Float())
	}
	panic("same: unhandled kind " + a.Kind().String())
}

// libraryDecodeBatch decodes body as decodeCommitBatch did before the fast
// path, into a batch whose scratch space holds stale mutations.
func libraryDecodeBatch(body []byte, scratch []Mutation) (*CommitBatch, error) {
	b := &CommitBatch{Mutations: scratch}
	ms := b.Mutations[:cap(b.Mutations)]
	clear(ms)
	*b = CommitBatch{Mutations: ms[:0]}
	return b, decodeBody(body, b)
}

// fastDecodeBatch decodes body with the fast path alone.
func fastDecodeBatch(body []byte, scratch []Mutation) (*CommitBatch, bool) {
	b := &CommitBatch{Mutations: scratch}
	ms := b.Mutations[:cap(b.Mutations)]
	clear(ms)
	*b = CommitBatch{Mutations: ms[:0]}
	return b, fastDecodeCommitBatch(body, b)
}

// staleScratch returns a mutation slice of length 0 whose capacity holds
// mutations, as Apply's reused batch may.
func staleScratch(n, capacity int) []Mutation {
	if capacity < 0 {
		return nil
	}
	s := make([]Mutation, capacity)
	for i := range s {
		s[i] = Mutation{Purge: &Purge{ID: "stale"}, Start: &Start{ID: "stale"}}
	}
	return s[:min(n, capacity)]
}

// scratchCapacities are the states of the scratch space a batch is decoded
// into: nil, empty, and room for a few or for many mutations.
var scratchCapacities = []int{-1, 0, 2, 64}

// checkDecode requires the fast path, if it takes body, to decode it as the
// library does (from the same scratch state), and decodeCommitBatch to
// agree with the library whether or not the fast path takes it, for each
// scratch state. It reports whether the fast path took body.
func checkDecode(t testing.TB, body []byte, msgAndArgs ...any) bool {
	t.Helper()
	return checkDecodeInto(t, body, scratchCapacities, msgAndArgs...)
}

// checkDecodeInto is checkDecode for the given scratch capacities (-1 for
// a nil slice).
func checkDecodeInto(t testing.TB, body []byte, capacities []int, msgAndArgs ...any) bool {
	t.Helper()
	if validate(body) != nil {
		return false
	}
	took := false
	for _, capacity := range capacities {
		want, wantErr := libraryDecodeBatch(body, staleScratch(0, capacity))

		got, ok := fastDecodeBatch(body, staleScratch(0, capacity))
		if ok {
			took = true
			require.NoError(t, wantErr, msgAndArgs...)
			requireSame(t, want, got, msgAndArgs...)
		}

		full := &CommitBatch{Epoch: 77, Time: 77, Mutations: staleScratch(1, capacity)}
		err := decodeCommitBatch(body, full)
		if wantErr != nil {
			require.Error(t, err, msgAndArgs...)
			continue
		}
		var bad bool
		for i := range want.Mutations {
			bad = bad || want.Mutations[i].check() != nil
		}
		if bad {
			require.Error(t, err, msgAndArgs...)
			continue
		}
		require.NoError(t, err, msgAndArgs...)
		requireSame(t, want, full, msgAndArgs...)
	}
	return took
}

func TestFastCodecMatchesLibrary(t *testing.T) {
	r := &prng{s: 11}
	rounds := 1000
	if testing.Short() {
		rounds = 200
	}
	for round := 0; round < rounds; round++ {
		b := wildBatch(r)
		body := appendCommitBatch(nil, b)
		require.Equal(t, libraryEncode(t, b, true), body, "round %d", round)
		capacity := []int{scratchCapacities[r.intn(len(scratchCapacities))]}
		require.True(t, checkDecodeInto(t, body, capacity, "round %d", round), "round %d: the fast path refused its own output", round)

		// Other writers may use fixed-width integers.
		wide := libraryEncode(t, b, false)
		require.True(t, checkDecodeInto(t, wide, capacity, "round %d, wide", round), "round %d: the fast path refused wide integers", round)

		bump := &EpochBump{Epoch: wildUint(r, 64), Leader: wildString(r), Time: wildInt(r)}
		require.Equal(t, libraryEncode(t, bump, true), appendEpochBump(nil, bump), "round %d", round)
	}
}

// TestFastEncodeBoundaries checks every length and integer boundary on its
// own, so that a failure names the value.
func TestFastEncodeBoundaries(t *testing.T) {
	lib := func(v any) []byte { return libraryEncode(t, v, true) }
	var ints []int64
	for _, n := range []int64{0, 127, 255, 65535, 1<<32 - 1, math.MaxInt64, -32, -128, -32768, math.MinInt32} {
		ints = append(ints, n-1, n, n+1)
	}
	for _, n := range ints {
		require.Equal(t, lib(n), appendInt(nil, n), "int %d", n)
		require.Equal(t, lib(uint64(n)), appendUint(nil, uint64(n)), "uint %d", uint64(n))
		require.Equal(t, lib(uint32(n)), appendUint(nil, uint64(uint32(n))), "uint32 %d", uint32(n))
		require.Equal(t, lib(Status(n)), appendUint(nil, uint64(Status(n))), "status %d", Status(n))
	}
	for _, n := range []int{0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("x", n)
		require.Equal(t, lib(s), appendStr(nil, s), "str of %d", n)
		require.Equal(t, lib([]byte(s)), appendBin(nil, []byte(s)), "bin of %d", n)
		h := appendArrayLen(nil, n)
		require.Equal(t, lib(make([]int, n))[:len(h)], h, "array header of %d", n)
		m := make(map[string]int, n)
		for i := 0; i < n; i++ {
			m[fmt.Sprint(i)] = 0
		}
		h = appendMapLen(nil, n)
		require.Equal(t, lib(m)[:len(h)], h, "map header of %d", n)
	}
	require.Equal(t, lib([]byte(nil)), appendBin(nil, nil))
	for _, f := range []float64{0, math.Copysign(0, -1), 0.2, math.NaN(), math.Inf(-1)} {
		require.Equal(t, lib(f), appendFloat(nil, f), "float %v", f)
	}
	require.Equal(t, lib(true), appendBool(nil, true))
	require.Equal(t, lib(false), appendBool(nil, false))
}

// TestFastEncodeOmitEmpty covers the emptiness rules one field at a time:
// empty but non-nil slices and a Backoff whose only field is -0.0 are left
// out, a NaN jitter is not, and a nil mutation list is written as nil.
func TestFastEncodeOmitEmpty(t *testing.T) {
	values := []*CommitBatch{
		{},
		{Mutations: []Mutation{}},
		{Mutations: []Mutation{{}}},
		{Mutations: []Mutation{{Insert: &Task{}}}},
		{Mutations: []Mutation{{Insert: &Task{Payload: []byte{}, Labels: []KV{}, Tags: []KV{}, Output: []byte{}}}}},
		{Mutations: []Mutation{{Insert: &Task{Backoff: Backoff{Jitter: math.Copysign(0, -1)}}}}},
		{Mutations: []Mutation{{Insert: &Task{Backoff: Backoff{Jitter: math.NaN()}}}}},
		{Mutations: []Mutation{{Insert: &Task{Backoff: Backoff{Max: -1}}}}},
		{Mutations: []Mutation{{PutSchedule: &Schedule{Payload: []byte{}, Labels: []KV{}}}}},
		{Mutations: []Mutation{{Finish: &Finish{Output: []byte{}}}}},
		{Mutations: []Mutation{{Ready: &Ready{}, Purge: &Purge{}, Tombstone: &Tombstone{}}}},
		{Mutations: []Mutation{{Tombstone: &Tombstone{Remove: true}}, {PauseSchedule: &PauseSchedule{}}}},
	}
	for i, b := range values {
		body := appendCommitBatch(nil, b)
		require.Equal(t, libraryEncode(t, b, true), body, "value %d", i)
		require.True(t, checkDecode(t, body, "value %d", i), "value %d", i)
	}
}

func TestFastCodecLongMutationList(t *testing.T) {
	// More mutations than an array16 holds, and maps over 15 entries.
	task := goldenBatch().Mutations[0]
	b := &CommitBatch{Epoch: 1, Time: baseTime}
	for i := 0; i < 70_000; i++ {
		if i%10_000 == 0 {
			b.Mutations = append(b.Mutations, task)
		} else {
			b.Mutations = append(b.Mutations, purge(fmt.Sprint(i)))
		}
	}
	body := appendCommitBatch(nil, b)
	require.Equal(t, libraryEncode(t, b, true), body)
	require.Equal(t, byte(mpArray32), body[17])
	require.True(t, checkDecodeInto(t, body, []int{2}))
}

// Handmade bodies, in the compact notation of msgpack type codes.
func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case int:
			b = append(b, byte(p))
		case byte:
			b = append(b, p)
		case rune: // a byte written as a character
			b = append(b, byte(p))
		case string: // a fixstr
			b = append(append(b, mpFixStr|byte(len(p))), p...)
		case []byte:
			b = append(b, p...)
		default:
			panic(fmt.Sprintf("cat: %T", p))
		}
	}
	return b
}

// oddBodies are forms a writer of the format does not produce, or produces
// rarely: the fast path must either take them as the library does, or leave
// them to the library.
func oddBodies(t testing.TB) map[string]struct {
	body []byte
	fast bool // the fast path takes it
} {
	lib := func(v any) []byte { return libraryEncode(t, v, false) }
	// A batch of one mutation: {"e": 1, "m": [{<key>: <value>}]}.
	one := func(key string, value ...any) []byte {
		return cat(0x82, "e", 1, "m", 0x91, 0x81, key, cat(value...))
	}
	// A batch of one insert: {"m": [{"in": {<fields>}}]} with n fields.
	task := func(n int, fields ...any) []byte {
		return cat(0x81, "m", 0x91, 0x81, "in", 0x80|n, cat(fields...))
	}
	type tc = struct {
		body []byte
		fast bool
	}
	return map[string]tc{
		"empty map":                  {cat(0x80), true},
		"nil mutations":              {cat(0x81, "m", 0xc0), true},
		"empty mutations":            {cat(0x81, "m", 0x90), true},
		"map16 and array16":          {cat(0xde, 0, 1, "m", 0xdc, 0, 1, 0xde, 0, 1, "pg", 0xdf, 0, 0, 0, 1, "id", "x"), true},
		"nil mutation":               {cat(0x81, "m", 0x91, 0xc0), true},
		"nil mutation field":         {one("in", 0xc0), true},
		"nil values":                 {task(5, "id", 0xc0, "pl", 0xc0, "lb", 0xc0, "bo", 0xc0, "st", 0xc0), true},
		"nil key":                    {task(2, 0xc0, 5, "id", "a"), true},
		"empty key":                  {task(2, "", 5, "id", "a"), true},
		"bin key":                    {task(1, 0xc4, 2, 'i', 'd', "a"), true},
		"str8 key":                   {task(1, 0xd9, 2, 'i', 'd', "a"), true},
		"bin string":                 {task(1, "id", 0xc4, 1, 'a'), true},
		"str bytes":                  {task(1, "pl", "abc"), true},
		"empty bin":                  {task(1, "pl", 0xc4, 0), true},
		"empty str bytes":            {task(1, "out", ""), true},
		"empty labels":               {task(1, "lb", 0x90), true},
		"nil label":                  {task(1, "lb", 0x91, 0xc0), true},
		"label with extra key":       {task(1, "lb", 0x91, 0x83, "k", "a", "zz", 0x92, 1, 2, "v", "b"), true},
		"negative uint":              {task(2, "st", 0xff, "ls", 0xd3, lib(int64(-5))[1:]), true},
		"huge status":                {task(1, "st", 0xcf, lib(uint64(1<<40 + 3))[1:]), true},
		"uint64 for int64":           {task(1, "ra", 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe), true},
		"int8 for uint32":            {task(1, "ma", 0xd0, 0x80), true},
		"float32 jitter":             {task(1, "bo", 0x81, "j", lib(float32(0.25))), true},
		"int jitter":                 {task(1, "bo", 0x81, "j", 0xd1, 0x80, 0x00), true},
		"uint64 jitter":              {task(1, "bo", 0x81, "j", 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0), true},
		"nil jitter":                 {task(1, "bo", 0x81, "j", 0xc0), true},
		"nil bool":                   {one("pz", 0x81, "p", 0xc0), true},
		"unknown keys of every type": {cat(0x83, "x", lib(map[string]any{"a": []any{nil, 1.5, "s", []byte{1}, int8(-3), map[string]any{}}}), "y", lib(float32(1)), "z", 0xd8, 1, make([]byte, 16)), true},
		"unknown ext key value":      {task(2, "zz", 0xc7, 2, 5, 1, 2, "id", "a"), true},
		"unknown mutation":           {one("zz", 0x81, "id", "x"), true},
		"extra batch key":            {cat(0x82, "note", 0xdb, 0, 0, 0, 2, 'h', 'i', "e", 7), true},

		"struct as array":        {one("pg", 0x91, "x"), false},
		"struct as empty array":  {one("pg", 0x90), false},
		"batch as array":         {cat(0x93, 1, 2, 0x90), false},
		"nil batch":              {cat(0xc0), false},
		"mutation as array":      {cat(0x81, "m", 0x91, 0x91, 0xc0), false},
		"duplicate batch key":    {cat(0x82, "e", 1, "e", 2), false},
		"duplicate mutation key": {cat(0x81, "m", 0x91, 0x82, "pg", 0x81, "id", "a", "pg", 0x80), false},
		"duplicate task key":     {task(2, "lb", 0x91, 0x81, "k", "a", "lb", 0x91, 0x81, "v", "b"), false},
		"duplicate nil":          {task(2, "id", 0xc0, "id", "a"), false},
		"int key":                {task(1, 1, "a"), false},
		"string for int":         {task(1, "ra", "1"), false},
		"float for int":          {task(1, "ra", lib(1.0)), false},
		"bool for int":           {task(1, "ra", 0xc3), false},
		"int for string":         {task(1, "id", 1), false},
		"int for bytes":          {task(1, "pl", 1), false},
		"map for labels":         {task(1, "lb", 0x80), false},
		"string for bool":        {one("pz", 0x81, "p", "t"), false},
		"int for bool":           {one("pz", 0x81, "p", 1), false},
		"string for jitter":      {task(1, "bo", 0x81, "j", "x"), false},
		"ext for time":           {cat(0x81, "t", lib(msgpack.RawMessage{0xd6, 0xff, 0, 0, 0, 1})), false},
		"array for mutations":    {cat(0x81, "m", 0x80), false},
	}
}

func TestFastDecodeOddBodies(t *testing.T) {
	for name, tc := range oddBodies(t) {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, validate(tc.body), "% x", tc.body)
			require.Equal(t, tc.fast, checkDecode(t, tc.body, "% x", tc.body), "does the fast path take it")
		})
	}
}

func TestFastDecodeReusesScratch(t *testing.T) {
	body := appendCommitBatch(nil, &CommitBatch{Epoch: 1, Mutations: []Mutation{purge("a"), purge("b")}})
	for _, capacity := range []int{1, 2, 3} {
		scratch := staleScratch(0, capacity)
		b := &CommitBatch{Mutations: scratch}
		require.NoError(t, decodeCommitBatch(body, b))
		require.Equal(t, []Mutation{purge("a"), purge("b")}, b.Mutations)
		require.Equal(t, capacity >= 2, &scratch[:1][0] == &b.Mutations[0], "capacity %d", capacity)
		// What the batch does not use is cleared, not left stale.
		unused := scratch[:capacity]
		if capacity >= 2 {
			unused = unused[2:]
		}
		for _, m := range unused {
			require.Zero(t, m)
		}
	}
}

func TestFastDecodeAllocations(t *testing.T) {
	// Each task of a run shares the pool, kind and worker strings of the
	// one before.
	data, err := EncodeCommitBatch(hotPathBatch(300))
	require.NoError(t, err)
	var b CommitBatch
	allocs := testing.AllocsPerRun(20, func() {
		if err := decodeCommitBatch(data[1:], &b); err != nil {
			panic(err)
		}
	})
	// Per insert: the task, its id and payload; per start: the start and
	// its id; per finish: the finish and its id. Plus the first pool, kind
	// and worker strings.
	require.LessOrEqual(t, allocs, float64(100*(3+2+2)+3))
}

func FuzzFastDecode(f *testing.F) {
	r := &prng{s: 12}
	for i := 0; i < 20; i++ {
		b := wildBatch(r)
		if body := appendCommitBatch(nil, b); len(body) < 4096 {
			f.Add(body)
		}
	}
	f.Add(appendCommitBatch(nil, goldenBatch()))
	f.Add(libraryEncode(f, goldenBatch(), false))
	for _, tc := range oddBodies(f) {
		f.Add(tc.body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkDecode(t, body)
	})
}

func TestFastRecordsMatchLibrary(t *testing.T) {
	r := &prng{s: 13}
	for round := 0; round < 500; round++ {
		zeroOdds := 1 + r.intn(4)
		var task Task
		fillWild(r, reflect.ValueOf(&task).Elem(), zeroOdds)
		require.Equal(t, recordBody(&task), appendTask(nil, &task), "round %d", round)
		var sched Schedule
		fillWild(r, reflect.ValueOf(&sched).Elem(), zeroOdds)
		require.Equal(t, recordBody(&sched), appendSchedule(nil, &sched), "round %d", round)
		var tomb Tombstone
		fillWild(r, reflect.ValueOf(&tomb).Elem(), zeroOdds)
		require.Equal(t, recordBody(&tomb), appendTombstone(nil, &tomb), "round %d", round)
	}
}

// TestSnapshotMatchesLibrary writes a snapshot of a varied state and the
// same snapshot with record bodies encoded by the library.
func TestSnapshotMatchesLibrary(t *testing.T) {
	s := richState(t)
	v := s.View()
	tb := v.t
	w := &snapshotWriter{}
	w.buf.WriteString(snapshotMagic)
	_ = binary.Write(&w.buf, binary.BigEndian, uint16(snapshotVersion))
	_ = binary.Write(&w.buf, binary.BigEndian, [3]uint64{tb.epoch, tb.epochTerm, tb.applied})
	tb.tasks.Ascend(func(it taskItem) bool { w.record(recTask, recordBody(it.t)); return true })
	tb.scheds.Ascend(func(it schedItem) bool { w.record(recSchedule, recordBody(it.s)); return true })
	tb.tombs.Ascend(func(tomb Tombstone) bool { w.record(recTombstone, recordBody(&tomb)); return true })
	want := w.end(uint64(tb.tasks.Len()), uint64(tb.scheds.Len()), uint64(tb.tombs.Len()))
	require.Positive(t, tb.scheds.Len())
	require.Positive(t, tb.tombs.Len())
	require.Equal(t, want, snapshotBytes(t, s))
}
