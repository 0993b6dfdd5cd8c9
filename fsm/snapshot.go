package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Snapshot format (all integers big-endian):
//
//	magic      "CRQS"
//	version    uint16: the log format its records need (1 unless a record
//	           needs more, see LogVersion)
//	epoch      uint64
//	epochTerm  uint64
//	applied    uint64
//	records    [type byte][uvarint length][msgpack body], in order:
//	           tasks by id, then schedules by name, then tombstones by node
//	           id, then (version 3 on) workflows by id, then (version 4
//	           on) pool settings by name, then (version 5 on) ACL
//	           policies by name and ACL tokens by accessor, then (version
//	           6 on) subscriptions by name and the events they hold by
//	           (subscription, cursor)
//	end        [0xff][uint64 tasks][uint64 schedules][uint64 tombstones],
//	           from version 3 on [uint64 workflows], from version 4 on
//	           [uint64 pools], from version 5 on [uint64 ACL
//	           policies][uint64 ACL tokens][uint64 ACL bootstrap index],
//	           and from version 6 on [uint64 subscriptions][uint64
//	           subscription events]
//
// The encoding is a pure function of the state, so every node that applied
// the same log writes the same bytes.

const (
	snapshotMagic = "CRQS"

	recTask      byte = 1
	recSchedule  byte = 2
	recTombstone byte = 3
	recWorkflow  byte = 4 // log format 3
	recPool      byte = 5 // log format 4
	recACLPolicy byte = 6 // log format 5
	recACLToken  byte = 7 // log format 5
	recSub       byte = 8 // log format 6
	recSubEvent  byte = 9 // log format 6
	recEnd       byte = 0xff

	// maxRecordSize bounds one record of a snapshot being restored.
	maxRecordSize = 64 << 20
)

// ErrBadSnapshot is returned by Restore for a snapshot it cannot read: a
// wrong magic or version, a corrupt or out-of-order record, or a truncated
// stream.
var ErrBadSnapshot = errors.New("fsm: bad snapshot")

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteTo writes the view as a snapshot to w, streaming: memory use does not
// grow with the size of the state. It returns the number of bytes written.
func (v *View) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	t := v.t

	hdr := make([]byte, 0, 64)
	hdr = append(hdr, snapshotMagic...)
	version := t.version()
	hdr = binary.BigEndian.AppendUint16(hdr, version)
	hdr = binary.BigEndian.AppendUint64(hdr, t.epoch)
	hdr = binary.BigEndian.AppendUint64(hdr, t.epochTerm)
	hdr = binary.BigEndian.AppendUint64(hdr, t.applied)
	if _, err := bw.Write(hdr); err != nil {
		return cw.n, fmt.Errorf("writing snapshot header: %w", err)
	}

	var (
		body []byte // the record being written, reused
		err  error
	)
	record := func(typ byte) bool {
		var pre [1 + binary.MaxVarintLen64]byte
		pre[0] = typ
		n := binary.PutUvarint(pre[1:], uint64(len(body)))
		if _, err = bw.Write(pre[:1+n]); err == nil {
			_, err = bw.Write(body)
		}
		return err == nil
	}
	t.tasks.Ascend(func(r *Task) bool {
		body, err = r.MarshalMsg(body[:0])
		return err == nil && record(recTask)
	})
	if err == nil {
		t.scheds.Ascend(func(it schedItem) bool {
			body, err = it.s.MarshalMsg(body[:0])
			return err == nil && record(recSchedule)
		})
	}
	if err == nil {
		t.tombs.Ascend(func(tb Tombstone) bool {
			body, err = tb.MarshalMsg(body[:0])
			return err == nil && record(recTombstone)
		})
	}
	if err == nil {
		t.wfs.Ascend(func(it wfItem) bool {
			body, err = it.w.MarshalMsg(body[:0])
			return err == nil && record(recWorkflow)
		})
	}
	if err == nil {
		t.settings.Ascend(func(it poolItem) bool {
			body, err = it.p.MarshalMsg(body[:0])
			return err == nil && record(recPool)
		})
	}
	for _, p := range t.aclPolicies() {
		if err != nil {
			break
		}
		if body, err = p.MarshalMsg(body[:0]); err == nil {
			record(recACLPolicy)
		}
	}
	for _, tk := range t.aclTokens() {
		if err != nil {
			break
		}
		if body, err = tk.MarshalMsg(body[:0]); err == nil {
			record(recACLToken)
		}
	}
	if err == nil {
		t.subs.Ascend(func(it subItem) bool {
			body, err = it.s.MarshalMsg(body[:0])
			return err == nil && record(recSub)
		})
	}
	if err == nil {
		t.subEvs.Ascend(func(it subEvItem) bool {
			rec := subEventRecord(it)
			body, err = rec.MarshalMsg(body[:0])
			return err == nil && record(recSubEvent)
		})
	}
	if err != nil {
		return cw.n, fmt.Errorf("writing snapshot records: %w", err)
	}

	end := append(hdr[:0], recEnd)
	end = binary.BigEndian.AppendUint64(end, uint64(t.tasks.Len()))
	end = binary.BigEndian.AppendUint64(end, uint64(t.scheds.Len()))
	end = binary.BigEndian.AppendUint64(end, uint64(t.tombs.Len()))
	if version >= 3 {
		end = binary.BigEndian.AppendUint64(end, uint64(t.wfs.Len()))
	}
	if version >= 4 {
		end = binary.BigEndian.AppendUint64(end, uint64(t.settings.Len()))
	}
	if version >= 5 {
		end = binary.BigEndian.AppendUint64(end, uint64(len(t.acl.policies)))
		end = binary.BigEndian.AppendUint64(end, uint64(len(t.acl.tokens)))
		end = binary.BigEndian.AppendUint64(end, t.acl.bootstrapIndex)
	}
	if version >= 6 {
		end = binary.BigEndian.AppendUint64(end, uint64(t.subs.Len()))
		end = binary.BigEndian.AppendUint64(end, uint64(t.subEvs.Len()))
	}
	if _, err := bw.Write(end); err != nil {
		return cw.n, fmt.Errorf("writing snapshot end: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("writing snapshot: %w", err)
	}
	return cw.n, nil
}

// version is the log format the records of t need: the highest Version of
// its tasks and schedules, 3 when it holds a workflow, 4 when it holds
// pool settings, 5 when it holds ACL objects and 6 when it holds a
// subscription.
func (t *tables) version() uint16 {
	v := uint16(1)
	if t.wfs.Len() > 0 {
		v = 3
	}
	if t.settings.Len() > 0 {
		v = 4
	}
	if !t.acl.empty() {
		v = 5
	}
	if t.subs.Len() > 0 {
		v = 6
	}
	t.tasks.Ascend(func(r *Task) bool {
		v = max(v, r.Version())
		return v < LogVersion
	})
	t.scheds.Ascend(func(it schedItem) bool {
		v = max(v, it.s.Version())
		return v < LogVersion
	})
	return v
}

// Hash returns the SHA-256 of the snapshot encoding of the current state.
// Nodes that applied the same log have the same hash.
func (s *State) Hash() [32]byte {
	h := sha256.New()
	if _, err := s.View().WriteTo(h); err != nil {
		panic(fmt.Sprintf("fsm: hashing snapshot: %v", err)) // a hash never fails to write
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// Restore replaces the whole state with the snapshot read from r. The new
// state is built completely before it is swapped in; if the snapshot cannot
// be read the state is left as it was and the error wraps ErrBadSnapshot (or
// is the reader's error). Views taken before keep showing the old state.
func (s *State) Restore(r io.Reader) error { return s.restore(r, nil) }

// restore is Restore, asking accept (when not nil) before replacing the
// state, with the snapshot's applied index and the state's.
func (s *State) restore(r io.Reader, accept func(snapshot, applied uint64) error) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	t, err := readSnapshot(r, s.version)
	if err != nil {
		return fmt.Errorf("restoring snapshot: %w", err)
	}
	if accept != nil {
		s.mu.RLock()
		applied := s.t.applied
		s.mu.RUnlock()
		if err := accept(t.applied, applied); err != nil {
			return fmt.Errorf("restoring snapshot at index %d over applied index %d: %w", t.applied, applied, err)
		}
	}
	s.mu.Lock()
	s.t = t
	close(s.subWatch) // the subscriptions may have changed
	s.subWatch = make(chan struct{})
	s.mu.Unlock()
	// The snapshot is a whole state this release can hold: applying
	// resumes from it.
	s.halted = nil
	return nil
}

func badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
}

// eofError turns an unexpected end of the stream into a snapshot error and
// passes other read errors through.
func eofError(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return badSnapshot("truncated in %s", what)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}

// readSnapshot reads a snapshot whose records need at most log format
// version.
func readSnapshot(r io.Reader, version uint16) (*tables, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [len(snapshotMagic) + 2 + 3*8]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, eofError("header", err)
	}
	if string(hdr[:4]) != snapshotMagic {
		return nil, badSnapshot("magic %q, want %q", hdr[:4], snapshotMagic)
	}
	hdrVersion := binary.BigEndian.Uint16(hdr[4:])
	switch v := hdrVersion; {
	case v == 0:
		return nil, badSnapshot("version 0")
	case v > version:
		return nil, fmt.Errorf("%w: snapshot needs log format version %d, this node understands %d", ErrNewerVersion, v, version)
	}
	t := newTables()
	t.epoch = binary.BigEndian.Uint64(hdr[6:])
	t.epochTerm = binary.BigEndian.Uint64(hdr[14:])
	t.applied = binary.BigEndian.Uint64(hdr[22:])

	var (
		body []byte
		last byte // type of the previous record
		prev string
	)
	for n := 0; ; n++ {
		typ, err := br.ReadByte()
		if err != nil {
			return nil, eofError("record type", err)
		}
		if typ == recEnd {
			break
		}
		maxType := recTombstone
		switch {
		case hdrVersion >= 6:
			maxType = recSubEvent
		case hdrVersion >= 5:
			maxType = recACLToken
		case hdrVersion >= 4:
			maxType = recPool
		case hdrVersion >= 3:
			maxType = recWorkflow
		}
		if typ < last || typ < recTask || typ > maxType {
			return nil, badSnapshot("record %d: type %d after type %d", n, typ, last)
		}
		if typ != last {
			last, prev = typ, ""
		}
		size, err := readLength(br)
		if err != nil {
			return nil, err
		}
		if size > maxRecordSize {
			return nil, badSnapshot("record %d: %d bytes", n, size)
		}
		if uint64(cap(body)) < size {
			body = make([]byte, size)
		}
		body = body[:size]
		if _, err := io.ReadFull(br, body); err != nil {
			return nil, eofError("record", err)
		}
		if prev, err = t.restoreRecord(typ, body, prev); err != nil {
			return nil, badSnapshot("record %d: %v", n, err)
		}
	}

	var endBuf [10 * 8]byte
	end := endBuf[:3*8]
	switch {
	case hdrVersion >= 6:
		end = endBuf[:10*8]
	case hdrVersion >= 5:
		end = endBuf[:8*8]
	case hdrVersion >= 4:
		end = endBuf[:5*8]
	case hdrVersion >= 3:
		end = endBuf[:4*8]
	}
	if _, err := io.ReadFull(br, end); err != nil {
		return nil, eofError("end marker", err)
	}
	nt, ns, nb := binary.BigEndian.Uint64(end[:]), binary.BigEndian.Uint64(end[8:]), binary.BigEndian.Uint64(end[16:])
	if nt != uint64(t.tasks.Len()) || ns != uint64(t.scheds.Len()) || nb != uint64(t.tombs.Len()) {
		return nil, badSnapshot("end marker counts %d tasks, %d schedules, %d tombstones; read %d, %d, %d",
			nt, ns, nb, t.tasks.Len(), t.scheds.Len(), t.tombs.Len())
	}
	if hdrVersion >= 3 {
		if nw := binary.BigEndian.Uint64(end[24:]); nw != uint64(t.wfs.Len()) {
			return nil, badSnapshot("end marker counts %d workflows; read %d", nw, t.wfs.Len())
		}
	}
	if hdrVersion >= 4 {
		if np := binary.BigEndian.Uint64(end[32:]); np != uint64(t.settings.Len()) {
			return nil, badSnapshot("end marker counts %d pools; read %d", np, t.settings.Len())
		}
	}
	if hdrVersion >= 5 {
		np, nt := binary.BigEndian.Uint64(end[40:]), binary.BigEndian.Uint64(end[48:])
		if np != uint64(len(t.acl.policies)) || nt != uint64(len(t.acl.tokens)) {
			return nil, badSnapshot("end marker counts %d ACL policies and %d ACL tokens; read %d and %d",
				np, nt, len(t.acl.policies), len(t.acl.tokens))
		}
		if bi := binary.BigEndian.Uint64(end[56:]); bi != 0 {
			t.aclWritable().bootstrapIndex = bi
		}
	}
	if hdrVersion >= 6 {
		ns, ne := binary.BigEndian.Uint64(end[64:]), binary.BigEndian.Uint64(end[72:])
		if ns != uint64(t.subs.Len()) || ne != uint64(t.subEvs.Len()) {
			return nil, badSnapshot("end marker counts %d subscriptions and %d subscription events; read %d and %d",
				ns, ne, t.subs.Len(), t.subEvs.Len())
		}
	}
	if err := t.checkReferences(); err != nil {
		return nil, badSnapshot("%v", err)
	}
	if v := t.version(); v > hdrVersion {
		return nil, badSnapshot("records need log format version %d, the header says %d", v, hdrVersion)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		if err != nil {
			return nil, fmt.Errorf("reading past the end marker: %w", err)
		}
		return nil, badSnapshot("data after the end marker")
	}
	return t, nil
}

// readLength reads the uvarint length of a record.
func readLength(br io.ByteReader) (uint64, error) {
	var v uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := br.ReadByte()
		if err != nil {
			return 0, eofError("record length", err)
		}
		if i == binary.MaxVarintLen64-1 && b > 1 {
			break
		}
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, badSnapshot("record length overflows 64 bits")
}

// restoreRecord decodes one record into t. prev is the key of the
// previous record of the same type (keys must strictly increase); it returns
// the record's key.
func (t *tables) restoreRecord(typ byte, body []byte, prev string) (string, error) {
	var (
		key string
		put func()
	)
	switch typ {
	case recTask:
		task := new(Task)
		if err := decodeBody(body, task); err != nil {
			return "", fmt.Errorf("task: %w", err)
		}
		if !task.Status.Valid() {
			return "", fmt.Errorf("task %s: invalid status %d", task.ID, task.Status)
		}
		if task.Key != "" && t.keys.Has(keyItem{key: task.Key}) {
			return "", fmt.Errorf("task %s: duplicate key %q", task.ID, task.Key)
		}
		key, put = task.ID, func() { t.putTask(nil, task) }
	case recSchedule:
		sc := new(Schedule)
		if err := decodeBody(body, sc); err != nil {
			return "", fmt.Errorf("schedule: %w", err)
		}
		key, put = sc.Name, func() { t.putSchedule(nil, sc) }
	case recWorkflow:
		w := new(Workflow)
		if err := decodeBody(body, w); err != nil {
			return "", fmt.Errorf("workflow: %w", err)
		}
		if !w.Status.Valid() {
			return "", fmt.Errorf("workflow %s: invalid status %d", w.ID, w.Status)
		}
		if w.Key != "" && t.wfKeys.Has(keyItem{key: w.Key}) {
			return "", fmt.Errorf("workflow %s: duplicate key %q", w.ID, w.Key)
		}
		key, put = w.ID, func() { t.putWorkflow(nil, w) }
	case recPool:
		p := new(Pool)
		if err := decodeBody(body, p); err != nil {
			return "", fmt.Errorf("pool: %w", err)
		}
		if err := p.Check(); err != nil {
			return "", fmt.Errorf("pool %q: %w", p.Name, err)
		}
		key, put = p.Name, func() { t.putPool(nil, p) }
	case recACLPolicy:
		p := new(ACLPolicy)
		if err := decodeBody(body, p); err != nil {
			return "", fmt.Errorf("acl policy: %w", err)
		}
		if err := p.Check(); err != nil {
			return "", fmt.Errorf("acl policy: %w", err)
		}
		key, put = p.Name, func() { t.aclWritable().policies[p.Name] = p }
	case recACLToken:
		tk := new(ACLToken)
		if err := decodeBody(body, tk); err != nil {
			return "", fmt.Errorf("acl token: %w", err)
		}
		if err := tk.Check(); err != nil {
			return "", fmt.Errorf("acl token: %w", err)
		}
		if _, dup := t.acl.bySecret[[32]byte(tk.SecretHash)]; dup {
			return "", fmt.Errorf("acl token %s: duplicate secret", tk.Accessor)
		}
		key, put = tk.Accessor, func() { t.aclWritable().putToken(tk) }
	case recSub:
		sub := new(Subscription)
		if err := decodeBody(body, sub); err != nil {
			return "", fmt.Errorf("subscription: %w", err)
		}
		if err := sub.Check(); err != nil {
			return "", fmt.Errorf("subscription: %w", err)
		}
		key, put = sub.Name, func() { t.putSub(nil, sub) }
	case recSubEvent:
		rec := new(SubscriptionEvent)
		if err := decodeBody(body, rec); err != nil {
			return "", fmt.Errorf("subscription event: %w", err)
		}
		sub, ok := t.subscription(rec.Subscription)
		switch {
		case !ok:
			return "", fmt.Errorf("event %d of subscription %q: no such subscription", rec.Cursor, rec.Subscription)
		case rec.Cursor <= sub.Acked:
			return "", fmt.Errorf("event %d of subscription %q: acked (up to %d)", rec.Cursor, rec.Subscription, sub.Acked)
		case rec.TaskID == "" || !rec.Status.Valid():
			return "", fmt.Errorf("event %d of subscription %q: no task or an invalid status", rec.Cursor, rec.Subscription)
		}
		// Names have no NUL and cursors are fixed-width: the keys sort as
		// (subscription, cursor).
		key = fmt.Sprintf("%s\x00%016x", rec.Subscription, rec.Cursor)
		put = func() { t.holdSubEvent(subEventItem(rec)) }
	case recTombstone:
		tb := new(Tombstone)
		if err := decodeBody(body, tb); err != nil {
			return "", fmt.Errorf("tombstone: %w", err)
		}
		if tb.Remove {
			return "", fmt.Errorf("tombstone %q: remove flag set", tb.NodeID)
		}
		key, put = tb.NodeID, func() { t.putTombstone(nil, tb) }
	default:
		return "", fmt.Errorf("unknown record type %d", typ)
	}
	if key == "" || key <= prev {
		return "", fmt.Errorf("key %q does not follow %q", key, prev)
	}
	put()
	return key, nil
}

// checkReferences checks what records of a restored state say of each
// other: every task's workflow exists, and an ended workflow has no live
// member.
func (t *tables) checkReferences() error {
	var err error
	t.members.Ascend(func(mi memberItem) bool {
		w, ok := t.workflow(mi.wf)
		switch {
		case !ok:
			err = fmt.Errorf("task %s: workflow %s does not exist", mi.id, mi.wf)
		case w.Status.Terminal():
			if task, _ := t.get(mi.id); !task.Status.Terminal() {
				err = fmt.Errorf("task %s is %s in workflow %s, which is %s", mi.id, task.Status, mi.wf, w.Status)
			}
		}
		return err == nil
	})
	return err
}

// subEventRecord is the snapshot record of an event a subscription holds.
func subEventRecord(it subEvItem) SubscriptionEvent {
	ev := it.ev
	return SubscriptionEvent{
		Subscription: it.sub, Cursor: it.cursor, TaskID: ev.TaskID, Pool: ev.Pool, Kind: ev.Kind,
		Status: ev.Status, Attempt: ev.Attempt, Message: ev.Message, At: ev.At, Workflow: ev.Workflow, Step: ev.Step,
	}
}

// subEventItem is the held event of a snapshot record.
func subEventItem(rec *SubscriptionEvent) subEvItem {
	return subEvItem{sub: rec.Subscription, cursor: rec.Cursor, ev: &Event{
		Cursor: rec.Cursor, TaskID: rec.TaskID, Pool: rec.Pool, Kind: rec.Kind, Status: rec.Status,
		Attempt: rec.Attempt, Message: rec.Message, At: rec.At, Workflow: rec.Workflow, Step: rec.Step,
	}}
}
