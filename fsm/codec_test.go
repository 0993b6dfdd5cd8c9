package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// fillValue sets v to random content. With prob 1 every field is set, else
// each field is set or left zero at random, so that every combination of
// omitted fields gets exercised. Slices are nil or non-empty (never empty
// and non-nil) so that decoded values compare equal.
func fillValue(r *prng, v reflect.Value, all bool) {
	set := all || r.coin()
	switch v.Kind() {
	case reflect.String:
		if set {
			v.SetString(randString(r))
		}
	case reflect.Bool:
		v.SetBool(set)
	case reflect.Int64:
		if set {
			v.SetInt(randInt(r))
		}
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		if set {
			bits := v.Type().Bits()
			n := randUint(r)
			if bits < 64 {
				n &= 1<<bits - 1
			}
			if n == 0 {
				n = 1
			}
			v.SetUint(n)
		}
	case reflect.Float64:
		if set {
			v.SetFloat(float64(randInt(r)) / 7)
		}
	case reflect.Slice:
		if !set {
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(randString(r) + "x"))
			return
		}
		n := 1 + r.intn(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			fillValue(r, s.Index(i), true)
		}
		v.Set(s)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fillValue(r, v.Field(i), all)
		}
	default:
		panic("fillValue: unhandled kind " + v.Kind().String())
	}
}

func randString(r *prng) string {
	switch r.intn(6) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("s", 31)
	case 2:
		return strings.Repeat("é", 100) // str8
	case 3:
		return strings.Repeat("x", 300) // str16
	case 4:
		if r.intn(20) == 0 {
			return strings.Repeat("y", 70000) // str32
		}
	}
	return "id-" + string(rune('a'+r.intn(26)))
}

// randInt covers every integer encoding class.
func randInt(r *prng) int64 {
	classes := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1 << 32, baseTime, 1<<63 - 1,
		-1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, -1 << 63}
	return classes[r.intn(len(classes))]
}

func randUint(r *prng) uint64 {
	classes := []uint64{1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1}
	return classes[r.intn(len(classes))]
}

// randMutation returns a mutation of kind k (the index of its field).
func randMutation(r *prng, k int, all bool) Mutation {
	var m Mutation
	f := reflect.ValueOf(&m).Elem().Field(k)
	p := reflect.New(f.Type().Elem())
	fillValue(r, p.Elem(), all)
	f.Set(p)
	return m
}

var numMutationKinds = reflect.TypeOf(Mutation{}).NumField()

// libraryEncode encodes v the way the reference library does with compact
// integers, which is what our encoder promises to match byte for byte.
func libraryEncode(t *testing.T, v any, compact bool) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compact)
	require.NoError(t, enc.Encode(v))
	return buf.Bytes()
}

func TestCodecMatchesLibrary(t *testing.T) {
	r := &prng{s: 1}
	for round := 0; round < 400; round++ {
		all := round%10 == 0
		b := &CommitBatch{Epoch: randUint(r), Time: randInt(r)}
		for i := 0; i < 1+r.intn(2*numMutationKinds); i++ {
			b.Mutations = append(b.Mutations, randMutation(r, r.intn(numMutationKinds), all))
		}
		ours, err := EncodeCommitBatch(b)
		require.NoError(t, err)
		require.Equal(t, byte(EntryCommitBatch), ours[0])
		require.Equal(t, libraryEncode(t, b, true), ours[1:], "round %d", round)

		// The library reads our bytes back to the same value.
		var lib CommitBatch
		require.NoError(t, msgpack.Unmarshal(ours[1:], &lib))
		require.Equal(t, b, &lib)

		// We read the library's bytes, compact or not, to the same value.
		for _, compact := range []bool{true, false} {
			data := append([]byte{byte(EntryCommitBatch)}, libraryEncode(t, b, compact)...)
			typ, v, err := DecodeEntry(data)
			require.NoError(t, err)
			require.Equal(t, EntryCommitBatch, typ)
			require.Equal(t, b, v)
		}
	}
}

func TestCodecSnapshotRecordsMatchLibrary(t *testing.T) {
	r := &prng{s: 2}
	for round := 0; round < 200; round++ {
		all := round%10 == 0
		var task Task
		fillValue(r, reflect.ValueOf(&task).Elem(), all)
		require.Equal(t, libraryEncode(t, &task, true), appendTask(nil, &task))
		var sc Schedule
		fillValue(r, reflect.ValueOf(&sc).Elem(), all)
		require.Equal(t, libraryEncode(t, &sc, true), appendSchedule(nil, &sc))
		var tb Tombstone
		fillValue(r, reflect.ValueOf(&tb).Elem(), all)
		require.Equal(t, libraryEncode(t, &tb, true), appendTombstone(nil, &tb))
	}
}

func TestEpochBumpRoundTrip(t *testing.T) {
	in := &EpochBump{Epoch: 7, Leader: "node-a", Time: baseTime}
	data, err := EncodeEpochBump(in)
	require.NoError(t, err)
	require.Equal(t, libraryEncode(t, in, true), data[1:])
	typ, v, err := DecodeEntry(data)
	require.NoError(t, err)
	require.Equal(t, EntryEpochBump, typ)
	require.Equal(t, in, v)
}

func TestDecodeSkipsUnknownFields(t *testing.T) {
	// A newer writer may add fields at the end of any struct.
	type newerStart struct {
		Start
		Extra map[string][]int `msgpack:"zz"`
	}
	type newerMutation struct {
		Start *newerStart `msgpack:"sr"`
	}
	nb := struct {
		Epoch     uint64          `msgpack:"e"`
		Time      int64           `msgpack:"t"`
		Mutations []newerMutation `msgpack:"m"`
		Note      string          `msgpack:"note"`
	}{Epoch: 3, Time: 9, Note: "hi", Mutations: []newerMutation{{Start: &newerStart{
		Start: Start{ID: "a", Attempt: 1, Lease: 5, At: 2},
		Extra: map[string][]int{"x": {1, 2, 3}},
	}}}}
	data := append([]byte{byte(EntryCommitBatch)}, libraryEncode(t, nb, false)...)
	_, v, err := DecodeEntry(data)
	require.NoError(t, err)
	require.Equal(t, &CommitBatch{Epoch: 3, Time: 9, Mutations: []Mutation{{Start: &Start{ID: "a", Attempt: 1, Lease: 5, At: 2}}}}, v)
}

func TestDecodeEntryErrors(t *testing.T) {
	valid := batchEntry(t, 1, insert("a", "p", "k"), start("a", 1, 9))
	twoFields := Mutation{Ready: &Ready{ID: "a"}, Purge: &Purge{ID: "a"}}
	rawBatch := func(ms []Mutation) []byte {
		return append([]byte{byte(EntryCommitBatch)}, libraryEncode(t, &CommitBatch{Epoch: 1, Mutations: ms}, true)...)
	}
	deep := []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'x'}
	deep = append(deep, bytes.Repeat([]byte{0x91}, 100_000)...)
	deep = append(deep, 0x00)

	tests := []struct {
		name string
		data []byte
		want error // nil: ignored without error
	}{
		{"empty", nil, ErrCorrupt},
		{"type only", []byte{byte(EntryCommitBatch)}, ErrCorrupt},
		{"not a map", []byte{byte(EntryCommitBatch), 0x93, 1, 2, 3}, ErrCorrupt},
		{"nil batch", []byte{byte(EntryCommitBatch), 0xc0}, ErrCorrupt},
		{"trailing bytes", append(append([]byte{}, valid...), 0x00), ErrCorrupt},
		{"wrong field type", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'e', 0xa1, 'x'}, ErrCorrupt},
		{"negative epoch", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'e', 0xff}, ErrCorrupt},
		{"status out of range", // 300 does not fit a Status
			[]byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0x91, 0x81, 0xa2, 'f', 'n', 0x81, 0xa1, 's', 0xcd, 0x01, 0x2c}, ErrCorrupt},
		{"huge array claim", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0xdd, 0xff, 0xff, 0xff, 0xff}, ErrCorrupt},
		{"huge map claim", []byte{byte(EntryCommitBatch), 0xdf, 0xff, 0xff, 0xff, 0xff}, ErrCorrupt},
		{"huge string claim", []byte{byte(EntryCommitBatch), 0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}, ErrCorrupt},
		{"deep nesting", deep, ErrCorrupt},
		{"mutation with no field", rawBatch([]Mutation{{}}), ErrCorrupt},
		{"mutation with two fields", rawBatch([]Mutation{twoFields}), ErrCorrupt},
		{"nil mutation field only", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0x91, 0x81, 0xa2, 'i', 'n', 0xc0}, ErrCorrupt},
		{"epoch bump garbage", []byte{byte(EntryEpochBump), 0xc1}, ErrCorrupt},
		{"unknown type", []byte{0x05, 1, 2}, ErrUnknownEntry},
		{"unknown type ignorable", []byte{0x05 | byte(IgnoreUnknownFlag), 1, 2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, v, err := DecodeEntry(tc.data)
			if tc.want == nil {
				require.NoError(t, err)
				require.Nil(t, v)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, v)
		})
	}
}

func TestDecodeEveryTruncation(t *testing.T) {
	r := &prng{s: 3}
	var ms []Mutation
	for k := 0; k < numMutationKinds; k++ {
		ms = append(ms, randMutation(r, k, true))
	}
	data := batchEntry(t, 4, ms...)
	for n := 0; n < len(data); n++ {
		_, _, err := DecodeEntry(data[:n])
		require.ErrorIs(t, err, ErrCorrupt, "prefix of %d bytes", n)
	}
}

func TestEncodeRejectsBadMutations(t *testing.T) {
	_, err := EncodeCommitBatch(&CommitBatch{Mutations: []Mutation{{}}})
	require.Error(t, err)
	_, err = EncodeCommitBatch(&CommitBatch{Mutations: []Mutation{{Ready: &Ready{}, Purge: &Purge{}}}})
	require.Error(t, err)
	_, err = EncodeCommitBatch(nil)
	require.Error(t, err)
	_, err = EncodeEpochBump(nil)
	require.Error(t, err)
}

func TestKnownTypeWithIgnoreFlagDecodes(t *testing.T) {
	data := batchEntry(t, 2, purge("x"))
	data[0] |= byte(IgnoreUnknownFlag)
	typ, v, err := DecodeEntry(data)
	require.NoError(t, err)
	require.Equal(t, EntryCommitBatch, typ)
	require.Equal(t, "x", v.(*CommitBatch).Mutations[0].Purge.ID)
}

func FuzzDecodeEntry(f *testing.F) {
	r := &prng{s: 4}
	for k := 0; k < numMutationKinds; k++ {
		data, err := EncodeCommitBatch(&CommitBatch{Epoch: 1, Time: baseTime, Mutations: []Mutation{randMutation(r, k, k%2 == 0)}})
		require.NoError(f, err)
		f.Add(data)
	}
	bump, err := EncodeEpochBump(&EpochBump{Epoch: 2, Leader: "l"})
	require.NoError(f, err)
	f.Add(bump)
	f.Add([]byte{0x85, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, v, err := DecodeEntry(data)
		if err != nil {
			require.Nil(t, v)
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownEntry), "unexpected error %v", err)
			return
		}
		// What decodes re-encodes to an entry that decodes to the same value.
		var again []byte
		switch x := v.(type) {
		case *CommitBatch:
			again, err = EncodeCommitBatch(x)
		case *EpochBump:
			again, err = EncodeEpochBump(x)
		case nil:
			require.NotZero(t, typ&IgnoreUnknownFlag)
			return
		}
		require.NoError(t, err)
		typ2, v2, err := DecodeEntry(again)
		require.NoError(t, err)
		require.Equal(t, typ, typ2)
		require.Equal(t, v, v2)
	})
}

func TestDecodeSkipsValuesOfEveryType(t *testing.T) {
	extra := []any{
		nil, true, false, int8(-5), int16(-300), int32(-70000), int64(-1 << 40),
		uint8(200), uint16(60000), uint32(1 << 31), uint64(1 << 60), -1, 100,
		float32(1.5), 2.25, strings.Repeat("a", 40), strings.Repeat("b", 300),
		strings.Repeat("c", 70000), []byte{1, 2, 3}, bytes.Repeat([]byte{9}, 300),
		make([]int, 20), map[string]int{"a": 1}, time.Unix(1, 2), time.Unix(1<<40, 0),
	}
	big := map[string]int{}
	for i := 0; i < 20; i++ {
		big[strings.Repeat("k", i+1)] = i
	}
	extra = append(extra, big)
	type jitter32 struct {
		Initial int64   `msgpack:"i"`
		Jitter  float32 `msgpack:"j"`
	}
	type intJitter struct {
		Jitter int64 `msgpack:"j"`
	}
	type newerTask struct {
		ID      string   `msgpack:"id"`
		Status  Status   `msgpack:"st"`
		Backoff jitter32 `msgpack:"bo"`
		Extra   []any    `msgpack:"zz"`
	}
	body := map[string]any{
		"e": 1,
		"m": []any{
			map[string]any{"in": newerTask{ID: "a", Status: StatusQueued, Backoff: jitter32{Initial: 7, Jitter: 0.5}, Extra: extra}},
			map[string]any{"in": map[string]any{"id": "b", "st": 2, "bo": intJitter{Jitter: -3}}},
		},
	}
	data := append([]byte{byte(EntryCommitBatch)}, libraryEncode(t, body, false)...)
	_, v, err := DecodeEntry(data)
	require.NoError(t, err)
	b := v.(*CommitBatch)
	require.Equal(t, &Task{ID: "a", Status: StatusQueued, Backoff: Backoff{Initial: 7, Jitter: 0.5}}, b.Mutations[0].Insert)
	require.Equal(t, &Task{ID: "b", Status: StatusQueued, Backoff: Backoff{Jitter: -3}}, b.Mutations[1].Insert)
}
