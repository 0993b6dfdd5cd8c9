package fsm

import (
	"bytes"
	"encoding/binary"
	"math"
	"sync"
)

// Hand-written codec of log entries. The library encodes and decodes through
// reflection, which costs far more than the bytes themselves; the appenders
// and the decoder below do the same work directly and are held byte for byte
// and value for value to the library by the differential tests of
// fastcodec_test.go.
//
// Encoding mirrors what the library writes with UseCompactInts:
//
//   - a struct is a map of its fields in declaration order, keyed by the tag
//     name; the header counts the fields written (fixmap below 16, then
//     map16, map32);
//   - an omitempty field is left out when it is empty as the library judges
//     it: 0 for numbers (so -0.0 too, but not NaN), false, a string, slice
//     or byte slice of length 0 (nil or not), a nil pointer, and a struct
//     whose own fields would all be left out (Backoff);
//   - integers take their shortest form (positive or negative fixint, then
//     the narrowest uint or int code); unsigned fields never use int codes,
//     signed fields use uint codes for values >= 0;
//   - floats are float64; strings are fixstr/str8/str16/str32; byte slices
//     are bin8/bin16/bin32 (never fixstr or str); a nil slice that is
//     written (not omitempty) is nil.
//
// Decoding takes the fast path only for what it can reproduce exactly; see
// fastDecoder.

// Type codes the codec writes that validate does not name.
const (
	mpFixArray = 0x90
	mpFixStr   = 0xa0
	mpBin16    = 0xc5
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpStr16    = 0xda
)

// ---------------------------------------------------------------------------
// Encoding.
// ---------------------------------------------------------------------------

// entryBuffers holds the scratch buffers entries are appended to before
// they are copied out at their final size.
var entryBuffers = sync.Pool{New: func() any { return new([]byte) }}

// appendEntry returns a fresh log entry: the type byte followed by what
// body appends.
func appendEntry(typ EntryType, body func([]byte) []byte) []byte {
	p := entryBuffers.Get().(*[]byte)
	buf := body(append((*p)[:0], byte(typ)))
	data := bytes.Clone(buf)
	if cap(buf) <= maxPooledSize {
		*p = buf
		entryBuffers.Put(p)
	}
	return data
}

func appendMapLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, mpFixMap|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, mpMap16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, mpMap32), uint32(n))
}

func appendArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, mpFixArray|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, mpArray16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, mpArray32), uint32(n))
}

// appendUint writes n in its shortest unsigned form.
func appendUint(dst []byte, n uint64) []byte {
	switch {
	case n <= mpPosFixMax:
		return append(dst, byte(n))
	case n <= math.MaxUint8:
		return append(dst, mpUint8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, mpUint16), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, mpUint32), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, mpUint64), n)
}

// appendInt writes n in its shortest form: unsigned when n >= 0.
func appendInt(dst []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(dst, uint64(n))
	case n >= -32:
		return append(dst, byte(n)) // negative fixint
	case n >= math.MinInt8:
		return append(dst, mpInt8, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, mpInt16), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, mpInt32), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, mpInt64), uint64(n))
}

func appendFloat(dst []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, mpFloat64), math.Float64bits(f))
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, mpTrue)
	}
	return append(dst, mpFalse)
}

func appendStr(dst []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		dst = append(dst, mpFixStr|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, mpStr8, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, mpStr16), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, mpStr32), uint32(n))
	}
	return append(dst, s...)
}

func appendBin(dst []byte, b []byte) []byte {
	if b == nil {
		return append(dst, mpNil)
	}
	switch n := len(b); {
	case n <= math.MaxUint8:
		dst = append(dst, mpBin8, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, mpBin16), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, mpBin32), uint32(n))
	}
	return append(dst, b...)
}

// appendKey writes a field name. Every name of the schema is a fixstr.
func appendKey(dst []byte, k string) []byte {
	return append(append(dst, mpFixStr|byte(len(k))), k...)
}

// Fields: the key then the value. The opt variants are omitempty fields,
// written only when not empty.

func appendStrField(dst []byte, k, v string) []byte { return appendStr(appendKey(dst, k), v) }
func appendIntField(dst []byte, k string, v int64) []byte {
	return appendInt(appendKey(dst, k), v)
}
func appendUintField(dst []byte, k string, v uint64) []byte {
	return appendUint(appendKey(dst, k), v)
}
func appendBoolField(dst []byte, k string, v bool) []byte {
	return appendBool(appendKey(dst, k), v)
}

func appendOptStr(dst []byte, k, v string) []byte {
	if v == "" {
		return dst
	}
	return appendStrField(dst, k, v)
}

func appendOptInt(dst []byte, k string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return appendIntField(dst, k, v)
}

func appendOptUint(dst []byte, k string, v uint64) []byte {
	if v == 0 {
		return dst
	}
	return appendUintField(dst, k, v)
}

func appendOptFloat(dst []byte, k string, v float64) []byte {
	if v == 0 {
		return dst
	}
	return appendFloat(appendKey(dst, k), v)
}

func appendOptBool(dst []byte, k string, v bool) []byte {
	if !v {
		return dst
	}
	return appendBoolField(dst, k, v)
}

func appendOptBin(dst []byte, k string, v []byte) []byte {
	if len(v) == 0 {
		return dst
	}
	return appendBin(appendKey(dst, k), v)
}

func appendOptKVs(dst []byte, k string, kvs []KV) []byte {
	if len(kvs) == 0 {
		return dst
	}
	dst = appendArrayLen(appendKey(dst, k), len(kvs))
	for _, kv := range kvs {
		dst = appendMapLen(dst, 2)
		dst = appendStrField(dst, "k", kv.K)
		dst = appendStrField(dst, "v", kv.V)
	}
	return dst
}

// count returns the number of true values: the omitempty fields a struct
// writes.
func count(set ...bool) int {
	n := 0
	for _, s := range set {
		if s {
			n++
		}
	}
	return n
}

func (b *Backoff) empty() bool { return b.Initial == 0 && b.Max == 0 && b.Jitter == 0 }

func appendOptBackoff(dst []byte, k string, b *Backoff) []byte {
	if b.empty() {
		return dst
	}
	dst = appendMapLen(appendKey(dst, k), count(b.Initial != 0, b.Max != 0, b.Jitter != 0))
	dst = appendOptInt(dst, "i", b.Initial)
	dst = appendOptInt(dst, "m", b.Max)
	return appendOptFloat(dst, "j", b.Jitter)
}

func appendTask(dst []byte, t *Task) []byte {
	n := 8 + count(t.Key != "", t.Priority != 0, len(t.Payload) > 0, len(t.Labels) > 0,
		len(t.Tags) > 0, t.RunAt != 0, t.Deadline != 0, t.Timeout != 0, t.MaxAttempts != 0,
		!t.Backoff.empty(), t.Schedule != "", t.Slot != 0, t.Attempt != 0, t.Lease != 0,
		t.LastLease != 0, t.Worker != "", len(t.Output) > 0, t.Error != "", t.StartedAt != 0,
		t.FinishedAt != 0)
	dst = appendMapLen(dst, n)
	dst = appendStrField(dst, "id", t.ID)
	dst = appendStrField(dst, "p", t.Pool)
	dst = appendStrField(dst, "k", t.Kind)
	dst = appendOptStr(dst, "key", t.Key)
	dst = appendOptUint(dst, "pr", uint64(t.Priority))
	dst = appendOptBin(dst, "pl", t.Payload)
	dst = appendOptKVs(dst, "lb", t.Labels)
	dst = appendOptKVs(dst, "tg", t.Tags)
	dst = appendOptInt(dst, "ra", t.RunAt)
	dst = appendOptInt(dst, "dl", t.Deadline)
	dst = appendOptInt(dst, "to", t.Timeout)
	dst = appendOptUint(dst, "ma", uint64(t.MaxAttempts))
	dst = appendOptBackoff(dst, "bo", &t.Backoff)
	dst = appendOptStr(dst, "sc", t.Schedule)
	dst = appendOptInt(dst, "sl", t.Slot)
	dst = appendUintField(dst, "st", uint64(t.Status))
	dst = appendOptUint(dst, "at", uint64(t.Attempt))
	dst = appendOptUint(dst, "ls", t.Lease)
	dst = appendOptUint(dst, "ll", t.LastLease)
	dst = appendOptStr(dst, "wk", t.Worker)
	dst = appendOptBin(dst, "out", t.Output)
	dst = appendOptStr(dst, "err", t.Error)
	dst = appendIntField(dst, "sa", t.SubmittedAt)
	dst = appendOptInt(dst, "sta", t.StartedAt)
	dst = appendIntField(dst, "ua", t.UpdatedAt)
	dst = appendOptInt(dst, "fa", t.FinishedAt)
	dst = appendUintField(dst, "ci", t.CreateIndex)
	return appendUintField(dst, "mi", t.ModifyIndex)
}

func appendSchedule(dst []byte, s *Schedule) []byte {
	n := 7 + count(s.TZ != "", len(s.Payload) > 0, s.Priority != 0, len(s.Labels) > 0,
		len(s.Tags) > 0, s.Timeout != 0, s.MaxAttempts != 0, s.Overlap != 0, s.CatchUp != 0,
		s.CatchUpLimit != 0, s.Paused, s.LastFire != 0, s.LastTask != "", s.Fires != 0,
		s.Skipped != 0)
	dst = appendMapLen(dst, n)
	dst = appendStrField(dst, "n", s.Name)
	dst = appendStrField(dst, "c", s.Cron)
	dst = appendOptStr(dst, "tz", s.TZ)
	dst = appendStrField(dst, "p", s.Pool)
	dst = appendStrField(dst, "k", s.Kind)
	dst = appendOptBin(dst, "pl", s.Payload)
	dst = appendOptUint(dst, "pr", uint64(s.Priority))
	dst = appendOptKVs(dst, "lb", s.Labels)
	dst = appendOptKVs(dst, "tg", s.Tags)
	dst = appendOptInt(dst, "to", s.Timeout)
	dst = appendOptUint(dst, "ma", uint64(s.MaxAttempts))
	dst = appendOptUint(dst, "ov", uint64(s.Overlap))
	dst = appendOptUint(dst, "cu", uint64(s.CatchUp))
	dst = appendOptUint(dst, "cl", uint64(s.CatchUpLimit))
	dst = appendOptBool(dst, "pa", s.Paused)
	dst = appendIntField(dst, "ca", s.CreatedAt)
	dst = appendOptInt(dst, "lf", s.LastFire)
	dst = appendOptStr(dst, "lt", s.LastTask)
	dst = appendOptUint(dst, "fi", s.Fires)
	dst = appendOptUint(dst, "sk", s.Skipped)
	dst = appendUintField(dst, "ci", s.CreateIndex)
	return appendUintField(dst, "mi", s.ModifyIndex)
}

func appendReady(dst []byte, r *Ready) []byte {
	dst = appendMapLen(dst, 2)
	dst = appendStrField(dst, "id", r.ID)
	return appendIntField(dst, "at", r.At)
}

func appendStart(dst []byte, s *Start) []byte {
	dst = appendMapLen(dst, 4+count(s.Worker != ""))
	dst = appendStrField(dst, "id", s.ID)
	dst = appendUintField(dst, "a", uint64(s.Attempt))
	dst = appendUintField(dst, "l", s.Lease)
	dst = appendOptStr(dst, "w", s.Worker)
	return appendIntField(dst, "at", s.At)
}

func appendRetry(dst []byte, r *Retry) []byte {
	dst = appendMapLen(dst, 4+count(r.Error != ""))
	dst = appendStrField(dst, "id", r.ID)
	dst = appendUintField(dst, "l", r.Lease)
	dst = appendOptStr(dst, "e", r.Error)
	dst = appendIntField(dst, "ra", r.RetryAt)
	return appendIntField(dst, "at", r.At)
}

func appendFinish(dst []byte, f *Finish) []byte {
	dst = appendMapLen(dst, 3+count(f.Lease != 0, len(f.Output) > 0, f.Error != ""))
	dst = appendStrField(dst, "id", f.ID)
	dst = appendOptUint(dst, "l", f.Lease)
	dst = appendUintField(dst, "s", uint64(f.Status))
	dst = appendOptBin(dst, "o", f.Output)
	dst = appendOptStr(dst, "e", f.Error)
	return appendIntField(dst, "at", f.At)
}

func appendPurge(dst []byte, p *Purge) []byte {
	return appendStrField(appendMapLen(dst, 1), "id", p.ID)
}

func appendDelSchedule(dst []byte, d *DelSchedule) []byte {
	return appendStrField(appendMapLen(dst, 1), "n", d.Name)
}

func appendPauseSchedule(dst []byte, p *PauseSchedule) []byte {
	dst = appendMapLen(dst, 3)
	dst = appendStrField(dst, "n", p.Name)
	dst = appendBoolField(dst, "p", p.Paused)
	return appendIntField(dst, "at", p.At)
}

func appendFire(dst []byte, f *Fire) []byte {
	dst = appendMapLen(dst, 2+count(f.Skipped != 0, f.TaskID != ""))
	dst = appendStrField(dst, "n", f.Name)
	dst = appendIntField(dst, "s", f.Slot)
	dst = appendOptUint(dst, "k", uint64(f.Skipped))
	return appendOptStr(dst, "t", f.TaskID)
}

func appendTombstone(dst []byte, t *Tombstone) []byte {
	dst = appendMapLen(dst, 2+count(t.Remove))
	dst = appendStrField(dst, "n", t.NodeID)
	dst = appendIntField(dst, "at", t.At)
	return appendOptBool(dst, "r", t.Remove)
}

// appendOptPtr writes the omitempty pointer field k when p is not nil.
func appendOptPtr[T any](dst []byte, k string, p *T, appendValue func([]byte, *T) []byte) []byte {
	if p == nil {
		return dst
	}
	return appendValue(appendKey(dst, k), p)
}

func appendMutation(dst []byte, m *Mutation) []byte {
	dst = appendMapLen(dst, m.fields())
	dst = appendOptPtr(dst, "in", m.Insert, appendTask)
	dst = appendOptPtr(dst, "rd", m.Ready, appendReady)
	dst = appendOptPtr(dst, "sr", m.Start, appendStart)
	dst = appendOptPtr(dst, "rt", m.Retry, appendRetry)
	dst = appendOptPtr(dst, "fn", m.Finish, appendFinish)
	dst = appendOptPtr(dst, "pg", m.Purge, appendPurge)
	dst = appendOptPtr(dst, "ps", m.PutSchedule, appendSchedule)
	dst = appendOptPtr(dst, "ds", m.DelSchedule, appendDelSchedule)
	dst = appendOptPtr(dst, "pz", m.PauseSchedule, appendPauseSchedule)
	dst = appendOptPtr(dst, "fr", m.Fire, appendFire)
	return appendOptPtr(dst, "tb", m.Tombstone, appendTombstone)
}

// appendCommitBatch appends the body of a commit batch entry.
func appendCommitBatch(dst []byte, b *CommitBatch) []byte {
	dst = appendMapLen(dst, 3)
	dst = appendUintField(dst, "e", b.Epoch)
	dst = appendIntField(dst, "t", b.Time)
	dst = appendKey(dst, "m")
	if b.Mutations == nil {
		return append(dst, mpNil) // the field is not omitempty
	}
	dst = appendArrayLen(dst, len(b.Mutations))
	for i := range b.Mutations {
		dst = appendMutation(dst, &b.Mutations[i])
	}
	return dst
}

// appendEpochBump appends the body of an epoch bump entry.
func appendEpochBump(dst []byte, b *EpochBump) []byte {
	dst = appendMapLen(dst, 3)
	dst = appendUintField(dst, "e", b.Epoch)
	dst = appendStrField(dst, "l", b.Leader)
	return appendIntField(dst, "t", b.Time)
}

// ---------------------------------------------------------------------------
// Decoding.
// ---------------------------------------------------------------------------

// fastDecoder reads a commit batch body that validate accepted. It takes
// what the library takes in the same way, for the forms a writer of this
// format produces: integers of any width converted as Go converts them
// (fixint, int and uint codes; nil is 0), nil for a zero value, str or bin
// for strings and byte slices (an empty one decodes to an empty, non-nil
// slice), maps in any key order, and unknown keys (str, bin or nil) with
// values of any type, skipped.
//
// On anything else it fails, and the caller decodes the whole body with the
// library instead, so that odd input gets exactly the library's semantics
// and errors. That covers: a type code a field's type does not take, a
// struct written as an array (the library reads those positionally), a key
// that is neither str, bin nor nil, and a key repeated in one map (the
// library decodes the second value into what the first one left, merging
// structs and slices).
//
// Strings and byte slices are copied: decoded values never alias the body.
type fastDecoder struct {
	b      []byte
	off    int
	failed bool

	// The last pool, kind and worker read: these repeat from one mutation
	// to the next, and an equal value shares the string already made.
	pool, kind, worker string
}

// fail gives up. Moving to the end makes every later read fail too, so
// loops over declared lengths end at once.
func (d *fastDecoder) fail() {
	d.failed = true
	d.off = len(d.b)
}

// code reads one type code.
func (d *fastDecoder) code() byte {
	if d.off >= len(d.b) {
		d.fail()
		return mpUnused
	}
	c := d.b[d.off]
	d.off++
	return c
}

// nilNext reads a nil if one comes next.
func (d *fastDecoder) nilNext() bool {
	if d.off < len(d.b) && d.b[d.off] == mpNil {
		d.off++
		return true
	}
	return false
}

// be reads a k-byte big-endian number, k being 1, 2, 4 or 8.
func (d *fastDecoder) be(k int) uint64 {
	if k > len(d.b)-d.off {
		d.fail()
		return 0
	}
	p := d.b[d.off : d.off+k]
	d.off += k
	switch k {
	case 1:
		return uint64(p[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(p))
	case 4:
		return uint64(binary.BigEndian.Uint32(p))
	}
	return binary.BigEndian.Uint64(p)
}

// next returns the following n bytes of the body.
func (d *fastDecoder) next(n uint64) []byte {
	if n > uint64(len(d.b)-d.off) {
		d.fail()
		return nil
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p
}

// uint reads an integer into a uint64 as the library does: nil is 0, and a
// value of any integer code converts as Go converts it. A narrower field
// takes the Go conversion of the result, as reflect's SetUint does.
func (d *fastDecoder) uint() uint64 {
	c := d.code()
	switch {
	case c <= mpPosFixMax || c >= mpNegFixMin:
		return uint64(int8(c))
	case c == mpNil:
		return 0
	case c == mpUint8, c == mpUint16, c == mpUint32, c == mpUint64:
		return d.be(1 << (c - mpUint8))
	case c == mpInt8:
		return uint64(int8(d.be(1)))
	case c == mpInt16:
		return uint64(int16(d.be(2)))
	case c == mpInt32:
		return uint64(int32(d.be(4)))
	case c == mpInt64:
		return d.be(8)
	}
	d.fail()
	return 0
}

// int reads an integer into an int64. The library's conversions to int64
// and to uint64 keep the same bits, so this is uint reinterpreted.
func (d *fastDecoder) int() int64 { return int64(d.uint()) }

// float reads a float64 field: a float32 or float64, or an integer
// converted as the library does (through int64).
func (d *fastDecoder) float() float64 {
	if d.off < len(d.b) {
		switch d.b[d.off] {
		case mpFloat32:
			d.off++
			return float64(math.Float32frombits(uint32(d.be(4))))
		case mpFloat64:
			d.off++
			return math.Float64frombits(d.be(8))
		}
	}
	return float64(d.int())
}

// bool reads a bool: nil is false.
func (d *fastDecoder) bool() bool {
	switch d.code() {
	case mpTrue:
		return true
	case mpNil, mpFalse:
		return false
	}
	d.fail()
	return false
}

// raw reads a str or bin value and returns its bytes, aliasing the body;
// isNil reports a nil instead.
func (d *fastDecoder) raw() (p []byte, isNil bool) {
	c := d.code()
	var n uint64
	switch {
	case c >= mpFixStr && c <= mpFixStrMax:
		n = uint64(c & 0x1f)
	case c == mpNil:
		return nil, true
	case c >= mpStr8 && c <= mpStr32:
		n = d.be(1 << (c - mpStr8))
	case c >= mpBin8 && c <= mpBin32:
		n = d.be(1 << (c - mpBin8))
	default:
		d.fail()
		return nil, false
	}
	return d.next(n), false
}

// key reads a map key. A nil key reads as "", which names no field.
func (d *fastDecoder) key() []byte {
	p, _ := d.raw()
	return p
}

// str reads a string: nil is "".
func (d *fastDecoder) str() string {
	p, _ := d.raw()
	return string(p)
}

// strReuse reads a string like str, but returns *last, instead of a new
// copy, when the value equals it; otherwise the value becomes *last.
func (d *fastDecoder) strReuse(last *string) string {
	p, _ := d.raw()
	if string(p) != *last {
		*last = string(p)
	}
	return *last
}

// bytes reads a byte slice: nil is nil, and empty is empty but not nil.
func (d *fastDecoder) bytes() []byte {
	p, isNil := d.raw()
	if isNil || d.failed {
		return nil
	}
	b := make([]byte, len(p))
	copy(b, p)
	return b
}

// mapLen reads the header of a map that holds a struct; -1 for nil, which
// the library reads as the zero value.
func (d *fastDecoder) mapLen() int {
	c := d.code()
	switch {
	case c >= mpFixMap && c <= mpFixMapMax:
		return int(c & 0x0f)
	case c == mpMap16, c == mpMap32:
		return int(d.be(2 << (c - mpMap16)))
	case c == mpNil:
		return -1
	}
	d.fail()
	return 0
}

// arrayLen reads the header of an array that holds a slice; -1 for nil.
func (d *fastDecoder) arrayLen() int {
	c := d.code()
	switch {
	case c >= mpFixArray && c <= mpFixArrMax:
		return int(c & 0x0f)
	case c == mpArray16, c == mpArray32:
		return int(d.be(2 << (c - mpArray16)))
	case c == mpNil:
		return -1
	}
	d.fail()
	return 0
}

// skip passes over one value of any type, the way validate walks the
// bytes (without recursion: pending counts the values still to pass).
func (d *fastDecoder) skip() {
	for pending := uint64(1); pending > 0 && !d.failed; pending-- {
		c := d.code()
		switch {
		case c <= mpPosFixMax, c >= mpNegFixMin, c == mpNil, c == mpFalse, c == mpTrue:
		case c <= mpFixMapMax:
			pending += 2 * uint64(c&0x0f)
		case c <= mpFixArrMax:
			pending += uint64(c & 0x0f)
		case c <= mpFixStrMax:
			d.next(uint64(c & 0x1f))
		case c == mpUnused:
			d.fail()
		case c <= mpBin32:
			d.next(d.be(1 << (c - mpBin8)))
		case c <= mpExt32:
			d.next(d.be(1<<(c-mpExt8)) + 1) // + the ext type byte
		case c == mpFloat32:
			d.next(4)
		case c == mpFloat64:
			d.next(8)
		case c <= mpUint64:
			d.next(1 << (c - mpUint8))
		case c <= mpInt64:
			d.next(1 << (c - mpInt8))
		case c <= mpFixExt16:
			d.next(1 + 1<<(c-mpFixExt1))
		case c <= mpStr32:
			d.next(d.be(1 << (c - mpStr8)))
		case c <= mpArray32:
			pending += d.be(2 << (c - mpArray16))
		default: // map16, map32
			pending += 2 * d.be(2<<(c-mpMap16))
		}
	}
}

// fieldSet records the fields of one map already read, by their position
// in the struct.
type fieldSet uint32

// once marks field i read, and fails if it was read before.
func (d *fastDecoder) once(seen *fieldSet, i uint) {
	if *seen&(1<<i) != 0 {
		d.fail()
	}
	*seen |= 1 << i
}

// decodePtr reads a pointer-to-struct field: nil leaves it nil, a map
// decodes into a new value.
func decodePtr[T any](d *fastDecoder, decodeValue func(*fastDecoder, *T)) *T {
	if d.nilNext() {
		return nil
	}
	v := new(T)
	decodeValue(d, v)
	return v
}

// A struct decoder reads a map (or nil, leaving the value zero) into a
// value that must be zero on entry.

func (d *fastDecoder) kv(kv *KV) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "k":
			d.once(&seen, 0)
			kv.K = d.str()
		case "v":
			d.once(&seen, 1)
			kv.V = d.str()
		default:
			d.skip()
		}
	}
}

// kvs reads a label or tag list: nil is nil, an empty array is empty but
// not nil.
func (d *fastDecoder) kvs() []KV {
	n := d.arrayLen()
	if n < 0 || d.failed {
		return nil
	}
	kvs := make([]KV, n)
	for i := range kvs {
		d.kv(&kvs[i])
	}
	return kvs
}

func (d *fastDecoder) backoff(b *Backoff) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "i":
			d.once(&seen, 0)
			b.Initial = d.int()
		case "m":
			d.once(&seen, 1)
			b.Max = d.int()
		case "j":
			d.once(&seen, 2)
			b.Jitter = d.float()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) task(t *Task) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "id":
			d.once(&seen, 0)
			t.ID = d.str()
		case "p":
			d.once(&seen, 1)
			t.Pool = d.strReuse(&d.pool)
		case "k":
			d.once(&seen, 2)
			t.Kind = d.strReuse(&d.kind)
		case "key":
			d.once(&seen, 3)
			t.Key = d.str()
		case "pr":
			d.once(&seen, 4)
			t.Priority = Priority(d.uint())
		case "pl":
			d.once(&seen, 5)
			t.Payload = d.bytes()
		case "lb":
			d.once(&seen, 6)
			t.Labels = d.kvs()
		case "tg":
			d.once(&seen, 7)
			t.Tags = d.kvs()
		case "ra":
			d.once(&seen, 8)
			t.RunAt = d.int()
		case "dl":
			d.once(&seen, 9)
			t.Deadline = d.int()
		case "to":
			d.once(&seen, 10)
			t.Timeout = d.int()
		case "ma":
			d.once(&seen, 11)
			t.MaxAttempts = uint32(d.uint())
		case "bo":
			d.once(&seen, 12)
			d.backoff(&t.Backoff)
		case "sc":
			d.once(&seen, 13)
			t.Schedule = d.str()
		case "sl":
			d.once(&seen, 14)
			t.Slot = d.int()
		case "st":
			d.once(&seen, 15)
			t.Status = Status(d.uint())
		case "at":
			d.once(&seen, 16)
			t.Attempt = uint32(d.uint())
		case "ls":
			d.once(&seen, 17)
			t.Lease = d.uint()
		case "ll":
			d.once(&seen, 18)
			t.LastLease = d.uint()
		case "wk":
			d.once(&seen, 19)
			t.Worker = d.strReuse(&d.worker)
		case "out":
			d.once(&seen, 20)
			t.Output = d.bytes()
		case "err":
			d.once(&seen, 21)
			t.Error = d.str()
		case "sa":
			d.once(&seen, 22)
			t.SubmittedAt = d.int()
		case "sta":
			d.once(&seen, 23)
			t.StartedAt = d.int()
		case "ua":
			d.once(&seen, 24)
			t.UpdatedAt = d.int()
		case "fa":
			d.once(&seen, 25)
			t.FinishedAt = d.int()
		case "ci":
			d.once(&seen, 26)
			t.CreateIndex = d.uint()
		case "mi":
			d.once(&seen, 27)
			t.ModifyIndex = d.uint()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) schedule(s *Schedule) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "n":
			d.once(&seen, 0)
			s.Name = d.str()
		case "c":
			d.once(&seen, 1)
			s.Cron = d.str()
		case "tz":
			d.once(&seen, 2)
			s.TZ = d.str()
		case "p":
			d.once(&seen, 3)
			s.Pool = d.str()
		case "k":
			d.once(&seen, 4)
			s.Kind = d.str()
		case "pl":
			d.once(&seen, 5)
			s.Payload = d.bytes()
		case "pr":
			d.once(&seen, 6)
			s.Priority = Priority(d.uint())
		case "lb":
			d.once(&seen, 7)
			s.Labels = d.kvs()
		case "tg":
			d.once(&seen, 8)
			s.Tags = d.kvs()
		case "to":
			d.once(&seen, 9)
			s.Timeout = d.int()
		case "ma":
			d.once(&seen, 10)
			s.MaxAttempts = uint32(d.uint())
		case "ov":
			d.once(&seen, 11)
			s.Overlap = Overlap(d.uint())
		case "cu":
			d.once(&seen, 12)
			s.CatchUp = CatchUp(d.uint())
		case "cl":
			d.once(&seen, 13)
			s.CatchUpLimit = uint32(d.uint())
		case "pa":
			d.once(&seen, 14)
			s.Paused = d.bool()
		case "ca":
			d.once(&seen, 15)
			s.CreatedAt = d.int()
		case "lf":
			d.once(&seen, 16)
			s.LastFire = d.int()
		case "lt":
			d.once(&seen, 17)
			s.LastTask = d.str()
		case "fi":
			d.once(&seen, 18)
			s.Fires = d.uint()
		case "sk":
			d.once(&seen, 19)
			s.Skipped = d.uint()
		case "ci":
			d.once(&seen, 20)
			s.CreateIndex = d.uint()
		case "mi":
			d.once(&seen, 21)
			s.ModifyIndex = d.uint()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) ready(r *Ready) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "id":
			d.once(&seen, 0)
			r.ID = d.str()
		case "at":
			d.once(&seen, 1)
			r.At = d.int()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) start(s *Start) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "id":
			d.once(&seen, 0)
			s.ID = d.str()
		case "a":
			d.once(&seen, 1)
			s.Attempt = uint32(d.uint())
		case "l":
			d.once(&seen, 2)
			s.Lease = d.uint()
		case "w":
			d.once(&seen, 3)
			s.Worker = d.strReuse(&d.worker)
		case "at":
			d.once(&seen, 4)
			s.At = d.int()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) retry(r *Retry) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "id":
			d.once(&seen, 0)
			r.ID = d.str()
		case "l":
			d.once(&seen, 1)
			r.Lease = d.uint()
		case "e":
			d.once(&seen, 2)
			r.Error = d.str()
		case "ra":
			d.once(&seen, 3)
			r.RetryAt = d.int()
		case "at":
			d.once(&seen, 4)
			r.At = d.int()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) finish(f *Finish) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "id":
			d.once(&seen, 0)
			f.ID = d.str()
		case "l":
			d.once(&seen, 1)
			f.Lease = d.uint()
		case "s":
			d.once(&seen, 2)
			f.Status = Status(d.uint())
		case "o":
			d.once(&seen, 3)
			f.Output = d.bytes()
		case "e":
			d.once(&seen, 4)
			f.Error = d.str()
		case "at":
			d.once(&seen, 5)
			f.At = d.int()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) purge(p *Purge) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "id":
			d.once(&seen, 0)
			p.ID = d.str()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) delSchedule(s *DelSchedule) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "n":
			d.once(&seen, 0)
			s.Name = d.str()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) pauseSchedule(p *PauseSchedule) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "n":
			d.once(&seen, 0)
			p.Name = d.str()
		case "p":
			d.once(&seen, 1)
			p.Paused = d.bool()
		case "at":
			d.once(&seen, 2)
			p.At = d.int()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) fire(f *Fire) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "n":
			d.once(&seen, 0)
			f.Name = d.str()
		case "s":
			d.once(&seen, 1)
			f.Slot = d.int()
		case "k":
			d.once(&seen, 2)
			f.Skipped = uint32(d.uint())
		case "t":
			d.once(&seen, 3)
			f.TaskID = d.str()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) tombstone(t *Tombstone) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "n":
			d.once(&seen, 0)
			t.NodeID = d.str()
		case "at":
			d.once(&seen, 1)
			t.At = d.int()
		case "r":
			d.once(&seen, 2)
			t.Remove = d.bool()
		default:
			d.skip()
		}
	}
}

func (d *fastDecoder) mutation(m *Mutation) {
	var seen fieldSet
	for n := d.mapLen(); n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "in":
			d.once(&seen, 0)
			m.Insert = decodePtr(d, (*fastDecoder).task)
		case "rd":
			d.once(&seen, 1)
			m.Ready = decodePtr(d, (*fastDecoder).ready)
		case "sr":
			d.once(&seen, 2)
			m.Start = decodePtr(d, (*fastDecoder).start)
		case "rt":
			d.once(&seen, 3)
			m.Retry = decodePtr(d, (*fastDecoder).retry)
		case "fn":
			d.once(&seen, 4)
			m.Finish = decodePtr(d, (*fastDecoder).finish)
		case "pg":
			d.once(&seen, 5)
			m.Purge = decodePtr(d, (*fastDecoder).purge)
		case "ps":
			d.once(&seen, 6)
			m.PutSchedule = decodePtr(d, (*fastDecoder).schedule)
		case "ds":
			d.once(&seen, 7)
			m.DelSchedule = decodePtr(d, (*fastDecoder).delSchedule)
		case "pz":
			d.once(&seen, 8)
			m.PauseSchedule = decodePtr(d, (*fastDecoder).pauseSchedule)
		case "fr":
			d.once(&seen, 9)
			m.Fire = decodePtr(d, (*fastDecoder).fire)
		case "tb":
			d.once(&seen, 10)
			m.Tombstone = decodePtr(d, (*fastDecoder).tombstone)
		default:
			d.skip()
		}
	}
}

// mutations reads the mutation list into the capacity of scratch, whose
// elements must be zero, as the library fills a slice it decodes into: nil
// is nil, and an empty array is scratch[:0], or an empty non-nil slice
// when scratch is nil.
func (d *fastDecoder) mutations(scratch []Mutation) []Mutation {
	n := d.arrayLen()
	if n < 0 || d.failed {
		return nil
	}
	var ms []Mutation
	switch {
	case n == 0 && scratch == nil:
		ms = []Mutation{}
	case n <= cap(scratch):
		ms = scratch[:n]
	default:
		ms = make([]Mutation, n)
	}
	for i := range ms {
		d.mutation(&ms[i])
	}
	return ms
}

// fastDecodeCommitBatch decodes body, which validate must have accepted,
// into b, whose Mutations must be zero up to their capacity; that capacity
// is reused. It reports false if the body needs the library (see
// fastDecoder), leaving b in an unspecified state.
func fastDecodeCommitBatch(body []byte, b *CommitBatch) bool {
	d := fastDecoder{b: body}
	n := d.mapLen()
	if n < 0 {
		return false // not a map: the library path reports it
	}
	var seen fieldSet
	for ; n > 0 && !d.failed; n-- {
		switch string(d.key()) {
		case "e":
			d.once(&seen, 0)
			b.Epoch = d.uint()
		case "t":
			d.once(&seen, 1)
			b.Time = d.int()
		case "m":
			d.once(&seen, 2)
			b.Mutations = d.mutations(b.Mutations)
		default:
			d.skip()
		}
	}
	return !d.failed && d.off == len(body)
}
