package core

import "encoding/binary"

// crockford is the Crockford base32 alphabet used by task ids.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IDLen is the length of a task id.
const IDLen = 26

const seqMask = 1<<48 - 1

// encodeID renders 16 bytes as 26 Crockford base32 characters, big-endian
// (the two leading bits are zero), so that byte order and string order agree.
func encodeID(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [IDLen]byte
	for i := IDLen - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// decodeID parses an id made by encodeID. It accepts only the canonical
// (upper-case) form.
func decodeID(s string) ([16]byte, bool) {
	var b [16]byte
	if len(s) != IDLen {
		return b, false
	}
	var hi, lo uint64
	for i := 0; i < IDLen; i++ {
		v := crockfordValue(s[i])
		if v < 0 || (i == 0 && v > 7) {
			return b, false
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return b, true
}

func crockfordValue(c byte) int {
	for i := 0; i < len(crockford); i++ {
		if crockford[i] == c {
			return i
		}
	}
	return -1
}

// makeID lays out [6 bytes unix ms][4 bytes epoch][6 bytes sequence].
func makeID(ms uint64, epoch uint32, seq uint64) string {
	var b [16]byte
	var tmp [8]byte
	binary.BigEndian.PutUint64(tmp[:], ms)
	copy(b[0:6], tmp[2:8])
	binary.BigEndian.PutUint32(b[6:10], epoch)
	binary.BigEndian.PutUint64(tmp[:], seq&seqMask)
	copy(b[10:16], tmp[2:8])
	return encodeID(b)
}

// idMillis returns the millisecond part of an id, if it is one of ours.
func idMillis(id string) (uint64, bool) {
	b, ok := decodeID(id)
	if !ok {
		return 0, false
	}
	var tmp [8]byte
	copy(tmp[2:8], b[0:6])
	return binary.BigEndian.Uint64(tmp[:]), true
}

// idGen makes strictly increasing task ids.
type idGen struct {
	epoch  uint32
	lastMs uint64
	seq    uint64
	last   string // highest id made or seen ("" = none)
}

// observe records an existing id so that new ids sort after it.
func (g *idGen) observe(id string) {
	if id <= g.last {
		return
	}
	g.last = id
	if ms, ok := idMillis(id); ok && ms > g.lastMs {
		g.lastMs = ms
	}
}

// next returns a new id, greater than every id made or observed before.
func (g *idGen) next(nowMs uint64) string {
	ms := max(nowMs, g.lastMs)
	g.seq = (g.seq + 1) & seqMask
	id := makeID(ms, g.epoch, g.seq)
	if id <= g.last {
		// Same millisecond as an id from a later epoch or a higher
		// sequence (possible only after a recovery): move to the next ms.
		ms = g.lastMs + 1
		id = makeID(ms, g.epoch, g.seq)
	}
	g.lastMs = ms
	g.last = id
	return id
}
