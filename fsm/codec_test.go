package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"runtime"
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

// libraryEncode encodes v with a plain library encoder: with compact
// integers as the format does, or with fixed-width integers as another
// writer might.
func libraryEncode(t testing.TB, v any, compact bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compact)
	require.NoError(t, enc.Encode(v))
	return buf.Bytes()
}

// goldenBatch returns a batch with one mutation of every kind, every field
// set, and integers of every encoded width.
func goldenBatch() *CommitBatch {
	task := &Task{
		ID: "01J00000000000000000000001", Pool: "email", Kind: "send", Key: "order-1",
		Priority: PriorityLow, Payload: []byte{0, 1, 2}, Labels: []KV{{K: "gpu", V: "yes"}},
		Tags:  []KV{{K: "traceparent", V: "00-1-2-01"}, {K: "z", V: ""}},
		RunAt: baseTime + 1, Deadline: -1, Timeout: 70_000, MaxAttempts: 300,
		Backoff:  Backoff{Initial: 1e9, Max: 300e9, Jitter: 0.2},
		Schedule: "nightly", Slot: -200, Status: StatusRunning, Attempt: 200,
		Lease: 1<<32 | 7, LastLease: 1<<32 | 7, Worker: "w-1", Output: []byte("out"),
		Error: "boom", SubmittedAt: baseTime, StartedAt: -40_000, UpdatedAt: -1 << 40,
		FinishedAt: 127, CreateIndex: 128, ModifyIndex: 1<<64 - 1,
	}
	sched := &Schedule{
		Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Paris", Pool: "email", Kind: "send",
		Payload: []byte("p"), Priority: PriorityHigh, Labels: []KV{{K: "a", V: "b"}},
		Tags: []KV{{K: "c", V: "d"}}, Timeout: 60e9, MaxAttempts: 3, Overlap: OverlapAllow,
		CatchUp: CatchUpAll, CatchUpLimit: 10, Paused: true, CreatedAt: baseTime,
		LastFire: baseTime + 5, LastTask: "01J00000000000000000000001", Fires: 1 << 20,
		Skipped: 65_535, CreateIndex: 2, ModifyIndex: 65_536,
	}
	return &CommitBatch{Epoch: 1 << 33, Time: baseTime, Mutations: []Mutation{
		{Insert: task},
		{Ready: &Ready{ID: "r", At: 33}},
		{Start: &Start{ID: "s", Attempt: 1, Lease: 1<<32 | 1, Worker: "w", At: -33}},
		{Retry: &Retry{ID: "t", Lease: 255, Error: strings.Repeat("e", 40), RetryAt: 256, At: -129}},
		{Finish: &Finish{ID: "f", Lease: 256, Status: StatusFailed, Output: bytes.Repeat([]byte{7}, 300), Error: strings.Repeat("x", 300), At: -32_769}},
		{Purge: &Purge{ID: "p"}},
		{PutSchedule: sched},
		{DelSchedule: &DelSchedule{Name: "d"}},
		{PauseSchedule: &PauseSchedule{Name: "z", Paused: true, At: 1}},
		{Fire: &Fire{Name: "nightly", Slot: baseTime, Skipped: 4, TaskID: "01J00000000000000000000001"}},
		{Tombstone: &Tombstone{NodeID: "n3", At: baseTime, Remove: true}},
	}}
}

// TestFormatIsStable pins the bytes of log entries and snapshot records:
// nodes of different versions read each other's logs and snapshots, and all
// nodes must write identical snapshots.
func TestFormatIsStable(t *testing.T) {
	sum := func(b []byte) string {
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	data, err := EncodeCommitBatch(goldenBatch())
	require.NoError(t, err)
	require.Len(t, data, 1426)
	require.Equal(t, "f9d5d71f8fd24e904b5b5f51eaa217aa886e7b312f221969748789d2a09f74bc", sum(data))

	b := goldenBatch()
	require.Equal(t, "8e7035890620bd240433baa85bf949363fd23b50aae03d2792827937b4f45a05", sum(recordBody(b.Mutations[0].Insert)))
	require.Equal(t, "525ba5504e0a0d52ef210b7fcecdf795834e3b2cee027256473ee1239ce3cf01", sum(recordBody(b.Mutations[6].PutSchedule)))
	require.Equal(t, "82a16ea26e33a26174cf17979cfe362a0000", hex.EncodeToString(recordBody(&Tombstone{NodeID: "n3", At: baseTime})))

	small, err := EncodeCommitBatch(&CommitBatch{Epoch: 3, Time: baseTime, Mutations: []Mutation{
		insert("t1", "p", "k1"), start("t1", 1, lease(3, 1)), finish("t1", lease(3, 1), StatusSucceeded),
	}})
	require.NoError(t, err)
	require.Equal(t, "0283a16503a174cf17979cfe362a0000a16d9381a2696e8aa26964a27431a170a170a16ba16ba36b6579a26b31"+
		"a2706cc40a7061796c6f61642d7431a2737402a27361cf17979cfe362a0000a2756100a2636900a26d690081a2737285"+
		"a26964a27431a16101a16ccf0000000300000001a177a27731a26174cf17979cfe362a000281a2666e85a26964a27431"+
		"a16ccf0000000300000001a17305a16fc4036f7574a26174cf17979cfe362a0004", hex.EncodeToString(small))
	bump, err := EncodeEpochBump(&EpochBump{Epoch: 7, Leader: "node-a", Time: baseTime})
	require.NoError(t, err)
	require.Equal(t, "0183a16507a16ca66e6f64652d61a174cf17979cfe362a0000", hex.EncodeToString(bump))

	// The body is what the library writes with compact integers.
	require.Equal(t, libraryEncode(t, goldenBatch(), true), data[1:])
}

func TestCodecRoundTrip(t *testing.T) {
	r := &prng{s: 1}
	for round := 0; round < 300; round++ {
		all := round%10 == 0
		b := &CommitBatch{Epoch: randUint(r), Time: randInt(r)}
		for i := 0; i < 1+r.intn(2*numMutationKinds); i++ {
			b.Mutations = append(b.Mutations, randMutation(r, r.intn(numMutationKinds), all))
		}
		data, err := EncodeCommitBatch(b)
		require.NoError(t, err)
		require.Equal(t, byte(EntryCommitBatch), data[0])
		typ, v, err := DecodeEntry(data)
		require.NoError(t, err)
		require.Equal(t, EntryCommitBatch, typ)
		require.Equal(t, b, v, "round %d", round)

		// Integers written in other widths read the same.
		wide := append([]byte{byte(EntryCommitBatch)}, libraryEncode(t, b, false)...)
		_, v, err = DecodeEntry(wide)
		require.NoError(t, err)
		require.Equal(t, b, v, "round %d", round)
	}
}

func TestSnapshotRecordsRoundTrip(t *testing.T) {
	r := &prng{s: 2}
	d := newDecoder()
	for round := 0; round < 200; round++ {
		all := round%10 == 0
		for _, v := range []any{new(Task), new(Schedule), new(Tombstone)} {
			fillValue(r, reflect.ValueOf(v).Elem(), all)
			got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			require.NoError(t, d.decode(recordBody(v), got))
			require.Equal(t, v, got)
		}
	}
}

func TestEpochBumpRoundTrip(t *testing.T) {
	in := &EpochBump{Epoch: 7, Leader: "node-a", Time: baseTime}
	data, err := EncodeEpochBump(in)
	require.NoError(t, err)
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
		Later *Purge      `msgpack:"zz"` // a kind of mutation added later, unset here
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

	// A mutation of a kind this version does not know is no mutation at all.
	nb.Mutations[0] = newerMutation{Later: &Purge{ID: "x"}}
	data = append([]byte{byte(EntryCommitBatch)}, libraryEncode(t, nb, false)...)
	_, v, err = DecodeEntry(data)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Nil(t, v)

	// Snapshot records too.
	type newerTombstone struct {
		Tombstone
		Why []string `msgpack:"why"`
	}
	var tb Tombstone
	require.NoError(t, newDecoder().decode(libraryEncode(t, newerTombstone{Tombstone{NodeID: "n", At: 4}, []string{"gone"}}, true), &tb))
	require.Equal(t, Tombstone{NodeID: "n", At: 4}, tb)
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

// claim returns the header of a value of the given kind ("array", "map",
// "str", "bin", "ext") claiming n elements or bytes, in its 32-bit form.
func claim(kind string, n uint32) []byte {
	code := map[string]byte{"array": 0xdd, "map": 0xdf, "str": 0xdb, "bin": 0xc6, "ext": 0xc9}[kind]
	h := []byte{code, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	if kind == "ext" {
		h = append(h, 1) // the ext type
	}
	return h
}

func TestValidate(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	nest := func(n int) []byte { return append(bytes.Repeat([]byte{0x91}, n), 0x00) }
	tests := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"empty", nil, false},
		{"one int", []byte{0x05}, true},
		{"nil", []byte{0xc0}, true},
		{"unused code", []byte{0xc1}, false},
		{"unused code nested", []byte{0x92, 0x01, 0xc1}, false},
		{"trailing byte", []byte{0x05, 0x05}, false},
		{"empty map and array", []byte{0x82, 0xa1, 'a', 0x80, 0xa1, 'b', 0x90}, true},
		{"fixstr cut", []byte{0xa3, 'a', 'b'}, false},
		{"uint64 cut", []byte{0xcf, 0, 0, 0, 0, 0, 0, 0}, false},
		{"float64", []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, true},
		{"fixext16", append([]byte{0xd8, 0x01}, make([]byte, 16)...), true},
		{"fixext16 cut", append([]byte{0xd8, 0x01}, make([]byte, 15)...), false},
		{"ext8", []byte{0xc7, 0x02, 0x01, 0xaa, 0xbb}, true},
		{"ext8 without type", []byte{0xc7, 0x00}, false},
		{"str16 length cut", []byte{0xda, 0x00}, false},
		{"array16 of 3", []byte{0xdc, 0x00, 0x03, 1, 2, 3}, true},
		{"array16 short", []byte{0xdc, 0x00, 0x03, 1, 2}, false},
		{"map16 short", []byte{0xde, 0x00, 0x02, 1, 2, 3}, false},
		{"map16 of 2", []byte{0xde, 0x00, 0x02, 1, 2, 3, 4}, true},
		{"huge array", cat(claim("array", 1<<32-1), []byte{1, 2, 3}), false},
		{"huge map", cat(claim("map", 1<<32-1), []byte{1, 2, 3}), false},
		{"huge str", cat(claim("str", 1<<32-1), []byte("abc")), false},
		{"huge bin", cat(claim("bin", 1<<32-1), []byte("abc")), false},
		{"huge ext", cat(claim("ext", 1<<32-1), []byte("abc")), false},
		{"array claiming one more than present", cat(claim("array", 4), []byte{1, 2, 3}), false},
		{"map claiming its bytes as entries", cat(claim("map", 2), []byte{1, 2, 3}), false},
		{"nested as deep as allowed", nest(maxDepth), true},
		{"nested too deep", nest(maxDepth + 1), false},
		{"nested far too deep", nest(1_000_000), false},
		{"wide and shallow", cat([]byte{0xdc, 0xff, 0xff}, bytes.Repeat([]byte{0x90}, 0xffff)), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validate(tc.data)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			allocs := testing.AllocsPerRun(10, func() { _ = validate(tc.data) })
			if tc.ok {
				require.Zero(t, allocs)
			}
		})
	}
}

func TestValidateAcceptsLibraryOutput(t *testing.T) {
	values := []any{
		nil, true, false, int8(-5), int16(-300), int32(-70000), int64(-1 << 40),
		uint8(200), uint16(60000), uint32(1 << 31), uint64(1 << 60), -1, 100,
		float32(1.5), 2.25, strings.Repeat("a", 40), strings.Repeat("b", 300),
		strings.Repeat("c", 70000), []byte{}, bytes.Repeat([]byte{9}, 300),
		bytes.Repeat([]byte{9}, 70000), make([]int, 20), make([]int, 70000),
		map[string]int{"a": 1}, time.Unix(1, 2), time.Unix(1<<40, 0), time.Unix(1<<40, 5),
		goldenBatch(), []any{map[string]any{"x": []any{nil, 1.5, "s"}}},
	}
	for _, v := range values {
		for _, compact := range []bool{true, false} {
			data := libraryEncode(t, v, compact)
			require.NoError(t, validate(data), "%T %v", v, compact)
			// Every strict prefix is refused.
			for n := 0; n < len(data); n += 1 + n/16 {
				require.Error(t, validate(data[:n]), "%T, prefix of %d bytes", v, n)
			}
		}
	}
}

// TestHostileLengthsAreRefusedCheaply feeds entries whose length headers
// claim up to four billion elements or bytes, at every level of the schema:
// each is refused without allocating in proportion to the claim.
func TestHostileLengthsAreRefusedCheaply(t *testing.T) {
	prefix := func(parts ...string) []byte {
		// {"e": 1, "m": [{"in": {<field>: ...}}]} with the last key given.
		b := []byte{byte(EntryCommitBatch), 0x82, 0xa1, 'e', 0x01, 0xa1, 'm', 0x91, 0x81, 0xa2, 'i', 'n', 0x81}
		for _, p := range parts {
			b = append(b, 0xa0|byte(len(p)))
			b = append(b, p...)
		}
		return b
	}
	var entries [][]byte
	for _, kind := range []string{"array", "map", "str", "bin", "ext"} {
		for _, n := range []uint32{1<<32 - 1, 1 << 28, 1 << 20} {
			c := claim(kind, n)
			entries = append(entries,
				append([]byte{byte(EntryCommitBatch)}, c...),                  // the batch itself
				append([]byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm'}, c...), // the mutations
				append(prefix("lb"), c...),                                    // the labels of a task
				append(prefix("pl"), c...),                                    // a payload
				append(prefix("zz"), c...),                                    // an unknown field
				append(append(prefix("zz"), 0x92, 0x80), c...),                // inside an unknown field
			)
		}
	}
	for _, data := range entries {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, v, err := DecodeEntry(data)
		runtime.ReadMemStats(&after)
		require.ErrorIs(t, err, ErrCorrupt, "% x", data)
		require.Nil(t, v)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "% x", data)

		s := New()
		require.Equal(t, uint64(1), s.Apply(1, 1, bumpEntry(t, 1)))
		resp := s.Apply(2, 1, data)
		require.ErrorIs(t, resp.(error), ErrCorrupt)
		require.Equal(t, uint64(1), s.AppliedIndex())
	}
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
		{"struct as array", []byte{byte(EntryCommitBatch), 0x93, 0x01, 0x02, 0x90}, ErrCorrupt},
		{"nil batch", []byte{byte(EntryCommitBatch), 0xc0}, ErrCorrupt},
		{"trailing bytes", append(append([]byte{}, valid...), 0x00), ErrCorrupt},
		{"wrong field type", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'e', 0xa1, 'x'}, ErrCorrupt},
		{"mutations not an array", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0x05}, ErrCorrupt},
		{"time ext for an int", append([]byte{byte(EntryCommitBatch), 0x81, 0xa1, 't'}, libraryEncode(t, time.Unix(1, 0), true)...), ErrCorrupt},
		{"huge array claim", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0xdd, 0xff, 0xff, 0xff, 0xff}, ErrCorrupt},
		{"huge map claim", []byte{byte(EntryCommitBatch), 0xdf, 0xff, 0xff, 0xff, 0xff}, ErrCorrupt},
		{"huge string claim", []byte{byte(EntryCommitBatch), 0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}, ErrCorrupt},
		{"deep nesting", deep, ErrCorrupt},
		{"unused type code in an unknown field", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'x', 0xc1}, ErrCorrupt},
		{"mutation with no field", rawBatch([]Mutation{{}}), ErrCorrupt},
		{"mutation with two fields", rawBatch([]Mutation{twoFields}), ErrCorrupt},
		{"nil mutation field only", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0x91, 0x81, 0xa2, 'i', 'n', 0xc0}, ErrCorrupt},
		{"nil mutation", []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0x91, 0xc0}, ErrCorrupt},
		{"epoch bump garbage", []byte{byte(EntryEpochBump), 0xc1}, ErrCorrupt},
		{"epoch bump not a map", []byte{byte(EntryEpochBump), 0x07}, ErrCorrupt},
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

// TestOutOfRangeIntegersConvert documents that an integer too large for its
// field is converted as Go converts integers (the library's behaviour); the
// preconditions of Apply then judge the value.
func TestOutOfRangeIntegersConvert(t *testing.T) {
	negEpoch := []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'e', 0xff} // -1
	_, v, err := DecodeEntry(negEpoch)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<64-1), v.(*CommitBatch).Epoch)

	// Finish with status 300, which is 44 as a Status.
	status300 := []byte{byte(EntryCommitBatch), 0x82, 0xa1, 'e', 0x01, 0xa1, 'm', 0x91, 0x81, 0xa2, 'f', 'n',
		0x82, 0xa2, 'i', 'd', 0xa1, 'a', 0xa1, 's', 0xcd, 0x01, 0x2c}
	_, v, err = DecodeEntry(status300)
	require.NoError(t, err)
	require.Equal(t, Status(44), v.(*CommitBatch).Mutations[0].Finish.Status)

	h := newHarness(t)
	h.ok(insert("a", "p", "k"))
	before := snapshotBytes(t, h.s)
	require.ErrorIs(t, h.apply(negEpoch).(error), ErrStaleEpoch)
	var rej *RejectedError
	require.ErrorAs(t, h.apply(status300).(error), &rej)
	require.Equal(t, before, snapshotBytes(t, h.s))
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

func TestDecodeReusesScratchSafely(t *testing.T) {
	// Apply decodes into a reused slice of mutations. Whatever the slice
	// held before must neither leak into the new batch nor be written
	// through: its pointers may be records of the state.
	old := &Task{ID: "old", Pool: "p", Status: StatusQueued}
	scratch := make([]Mutation, 3, 8)
	scratch[0].Insert = old
	scratch[2].Purge = &Purge{ID: "x"}
	scratch[:4][3].Ready = &Ready{ID: "y"}
	b := CommitBatch{Epoch: 9, Time: 9, Mutations: scratch}
	data := batchEntry(t, 1, insert("new", "q", ""), purge("z"))
	require.NoError(t, decodeCommitBatch(data[1:], &b))
	require.Equal(t, &Task{ID: "old", Pool: "p", Status: StatusQueued}, old)
	want := []Mutation{insert("new", "q", ""), purge("z")}
	require.Equal(t, &CommitBatch{Epoch: 1, Time: baseTime, Mutations: want}, &b)
	require.Same(t, &scratch[0], &b.Mutations[0], "the capacity is reused")
	require.Nil(t, scratch[:4][3].Ready)
}

// panicky makes the library decoder panic.
type panicky struct{}

func (*panicky) DecodeMsgpack(*msgpack.Decoder) error { panic("boom") }

func TestDecoderPanicIsAnError(t *testing.T) {
	var v struct {
		P panicky `msgpack:"p"`
	}
	err := decodeBody([]byte{0x81, 0xa1, 'p', 0x01}, &v)
	require.ErrorIs(t, err, errDecoderPanic)
	require.ErrorContains(t, err, "boom")
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

func TestEncodeReturnsFreshSlices(t *testing.T) {
	a := batchEntry(t, 1, purge("a"))
	want := append([]byte{}, a...)
	b := batchEntry(t, 1, purge("b"))
	require.Equal(t, want, a)
	require.NotEqual(t, a, b)
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
	f.Add([]byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, v, err := DecodeEntry(data)
		if err != nil {
			require.Nil(t, v)
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownEntry), "unexpected error %v", err)
			return
		}
		// What decodes re-encodes to an entry that decodes to a value that
		// encodes the same (the input may be non-canonical: empty byte
		// strings, wide integers, unknown fields).
		var again []byte
		switch x := v.(type) {
		case *CommitBatch:
			again, err = EncodeCommitBatch(x)
		case *EpochBump:
			again, err = EncodeEpochBump(x)
		case nil:
			require.NotZero(t, typ&IgnoreUnknownFlag)
			return
		default:
			t.Fatalf("decoded a %T", v)
		}
		require.NoError(t, err)
		typ2, v2, err := DecodeEntry(again)
		require.NoError(t, err)
		require.Equal(t, typ, typ2)
		var third []byte
		switch x := v2.(type) {
		case *CommitBatch:
			third, err = EncodeCommitBatch(x)
		case *EpochBump:
			third, err = EncodeEpochBump(x)
		}
		require.NoError(t, err)
		require.Equal(t, again, third)
	})
}
