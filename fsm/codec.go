package fsm

import (
	"errors"
	"fmt"
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

// EncodeEpochBump encodes an epoch bump as a log entry.
func EncodeEpochBump(b *EpochBump) ([]byte, error) {
	if b == nil {
		return nil, errors.New("encoding epoch bump: nil")
	}
	buf := make([]byte, 0, 32+len(b.Leader))
	buf = append(buf, byte(EntryEpochBump))
	return appendEpochBump(buf, b), nil
}

// EncodeCommitBatch encodes a commit batch as a log entry. Every mutation
// must have exactly one field set.
func EncodeCommitBatch(b *CommitBatch) ([]byte, error) {
	if b == nil {
		return nil, errors.New("encoding commit batch: nil")
	}
	size := 32
	for i := range b.Mutations {
		m := &b.Mutations[i]
		if err := m.check(); err != nil {
			return nil, fmt.Errorf("encoding commit batch: mutation %d: %w", i, err)
		}
		size += m.sizeHint()
	}
	buf := make([]byte, 0, size)
	buf = append(buf, byte(EntryCommitBatch))
	return appendCommitBatch(buf, b), nil
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

func decodeEpochBump(body []byte, b *EpochBump) error {
	r := reader{b: body}
	if err := r.epochBump(b); err != nil {
		return fmt.Errorf("%w: epoch bump: %v", ErrCorrupt, err)
	}
	if r.remaining() != 0 {
		return fmt.Errorf("%w: epoch bump: %d trailing bytes", ErrCorrupt, r.remaining())
	}
	return nil
}

// decodeCommitBatch decodes into b, reusing the capacity of b.Mutations.
func decodeCommitBatch(body []byte, b *CommitBatch) error {
	r := reader{b: body}
	if err := r.commitBatch(b); err != nil {
		return fmt.Errorf("%w: commit batch: %v", ErrCorrupt, err)
	}
	if r.remaining() != 0 {
		return fmt.Errorf("%w: commit batch: %d trailing bytes", ErrCorrupt, r.remaining())
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

// sizeHint estimates the encoded size of m (to size buffers, not exact).
func (m *Mutation) sizeHint() int {
	switch {
	case m.Insert != nil:
		t := m.Insert
		return 160 + len(t.ID) + len(t.Pool) + len(t.Kind) + len(t.Key) +
			len(t.Payload) + 16*(len(t.Labels)+len(t.Tags)) + len(t.Output) + len(t.Error)
	case m.Finish != nil:
		return 64 + len(m.Finish.ID) + len(m.Finish.Output) + len(m.Finish.Error)
	case m.PutSchedule != nil:
		return 160 + len(m.PutSchedule.Payload)
	}
	return 64
}

// ---------------------------------------------------------------------------
// Encoding of the schema types. Each appender writes the fields in
// declaration order, leaving out empty omitempty fields, and counts them
// first for the map header.
// ---------------------------------------------------------------------------

// cnt returns 1 if set, else 0: a field that is present.
func cnt(set bool) int {
	if set {
		return 1
	}
	return 0
}

func appendEpochBump(b []byte, e *EpochBump) []byte {
	b = appendMapLen(b, 3)
	b = appendUint(appendStr(b, "e"), e.Epoch)
	b = appendStr(appendStr(b, "l"), e.Leader)
	return appendInt(appendStr(b, "t"), e.Time)
}

func appendCommitBatch(b []byte, c *CommitBatch) []byte {
	b = appendMapLen(b, 3)
	b = appendUint(appendStr(b, "e"), c.Epoch)
	b = appendInt(appendStr(b, "t"), c.Time)
	b = appendStr(b, "m")
	if c.Mutations == nil {
		return append(b, mpNil)
	}
	b = appendArrayLen(b, len(c.Mutations))
	for i := range c.Mutations {
		b = appendMutation(b, &c.Mutations[i])
	}
	return b
}

func appendMutation(b []byte, m *Mutation) []byte {
	b = appendMapLen(b, m.fields())
	if m.Insert != nil {
		b = appendTask(appendStr(b, "in"), m.Insert)
	}
	if m.Ready != nil {
		b = appendMapLen(appendStr(b, "rd"), 2)
		b = appendStr(appendStr(b, "id"), m.Ready.ID)
		b = appendInt(appendStr(b, "at"), m.Ready.At)
	}
	if m.Start != nil {
		s := m.Start
		b = appendMapLen(appendStr(b, "sr"), 4+cnt(s.Worker != ""))
		b = appendStr(appendStr(b, "id"), s.ID)
		b = appendUint(appendStr(b, "a"), uint64(s.Attempt))
		b = appendUint(appendStr(b, "l"), s.Lease)
		if s.Worker != "" {
			b = appendStr(appendStr(b, "w"), s.Worker)
		}
		b = appendInt(appendStr(b, "at"), s.At)
	}
	if m.Retry != nil {
		x := m.Retry
		b = appendMapLen(appendStr(b, "rt"), 4+cnt(x.Error != ""))
		b = appendStr(appendStr(b, "id"), x.ID)
		b = appendUint(appendStr(b, "l"), x.Lease)
		if x.Error != "" {
			b = appendStr(appendStr(b, "e"), x.Error)
		}
		b = appendInt(appendStr(b, "ra"), x.RetryAt)
		b = appendInt(appendStr(b, "at"), x.At)
	}
	if m.Finish != nil {
		f := m.Finish
		b = appendMapLen(appendStr(b, "fn"), 3+cnt(f.Lease != 0)+cnt(len(f.Output) > 0)+cnt(f.Error != ""))
		b = appendStr(appendStr(b, "id"), f.ID)
		if f.Lease != 0 {
			b = appendUint(appendStr(b, "l"), f.Lease)
		}
		b = appendUint(appendStr(b, "s"), uint64(f.Status))
		if len(f.Output) > 0 {
			b = appendBin(appendStr(b, "o"), f.Output)
		}
		if f.Error != "" {
			b = appendStr(appendStr(b, "e"), f.Error)
		}
		b = appendInt(appendStr(b, "at"), f.At)
	}
	if m.Purge != nil {
		b = appendMapLen(appendStr(b, "pg"), 1)
		b = appendStr(appendStr(b, "id"), m.Purge.ID)
	}
	if m.PutSchedule != nil {
		b = appendSchedule(appendStr(b, "ps"), m.PutSchedule)
	}
	if m.DelSchedule != nil {
		b = appendMapLen(appendStr(b, "ds"), 1)
		b = appendStr(appendStr(b, "n"), m.DelSchedule.Name)
	}
	if m.PauseSchedule != nil {
		p := m.PauseSchedule
		b = appendMapLen(appendStr(b, "pz"), 3)
		b = appendStr(appendStr(b, "n"), p.Name)
		b = appendBool(appendStr(b, "p"), p.Paused)
		b = appendInt(appendStr(b, "at"), p.At)
	}
	if m.Fire != nil {
		f := m.Fire
		b = appendMapLen(appendStr(b, "fr"), 2+cnt(f.Skipped != 0)+cnt(f.TaskID != ""))
		b = appendStr(appendStr(b, "n"), f.Name)
		b = appendInt(appendStr(b, "s"), f.Slot)
		if f.Skipped != 0 {
			b = appendUint(appendStr(b, "k"), uint64(f.Skipped))
		}
		if f.TaskID != "" {
			b = appendStr(appendStr(b, "t"), f.TaskID)
		}
	}
	if m.Tombstone != nil {
		b = appendTombstone(appendStr(b, "tb"), m.Tombstone)
	}
	return b
}

func appendTombstone(b []byte, t *Tombstone) []byte {
	b = appendMapLen(b, 2+cnt(t.Remove))
	b = appendStr(appendStr(b, "n"), t.NodeID)
	b = appendInt(appendStr(b, "at"), t.At)
	if t.Remove {
		b = appendBool(appendStr(b, "r"), true)
	}
	return b
}

func appendKVs(b []byte, kvs []KV) []byte {
	b = appendArrayLen(b, len(kvs))
	for _, kv := range kvs {
		b = appendMapLen(b, 2)
		b = appendStr(appendStr(b, "k"), kv.K)
		b = appendStr(appendStr(b, "v"), kv.V)
	}
	return b
}

func (bo *Backoff) empty() bool { return bo.Initial == 0 && bo.Max == 0 && bo.Jitter == 0 }

func appendBackoff(b []byte, bo *Backoff) []byte {
	b = appendMapLen(b, cnt(bo.Initial != 0)+cnt(bo.Max != 0)+cnt(bo.Jitter != 0))
	if bo.Initial != 0 {
		b = appendInt(appendStr(b, "i"), bo.Initial)
	}
	if bo.Max != 0 {
		b = appendInt(appendStr(b, "m"), bo.Max)
	}
	if bo.Jitter != 0 {
		b = appendFloat64(appendStr(b, "j"), bo.Jitter)
	}
	return b
}

func appendTask(b []byte, t *Task) []byte {
	n := 8 + // id p k st sa ua ci mi
		cnt(t.Key != "") + cnt(t.Priority != 0) + cnt(len(t.Payload) > 0) +
		cnt(len(t.Labels) > 0) + cnt(len(t.Tags) > 0) + cnt(t.RunAt != 0) +
		cnt(t.Deadline != 0) + cnt(t.Timeout != 0) + cnt(t.MaxAttempts != 0) +
		cnt(!t.Backoff.empty()) + cnt(t.Schedule != "") + cnt(t.Slot != 0) +
		cnt(t.Attempt != 0) + cnt(t.Lease != 0) + cnt(t.LastLease != 0) +
		cnt(t.Worker != "") + cnt(len(t.Output) > 0) + cnt(t.Error != "") +
		cnt(t.StartedAt != 0) + cnt(t.FinishedAt != 0)
	b = appendMapLen(b, n)
	b = appendStr(appendStr(b, "id"), t.ID)
	b = appendStr(appendStr(b, "p"), t.Pool)
	b = appendStr(appendStr(b, "k"), t.Kind)
	if t.Key != "" {
		b = appendStr(appendStr(b, "key"), t.Key)
	}
	if t.Priority != 0 {
		b = appendUint(appendStr(b, "pr"), uint64(t.Priority))
	}
	if len(t.Payload) > 0 {
		b = appendBin(appendStr(b, "pl"), t.Payload)
	}
	if len(t.Labels) > 0 {
		b = appendKVs(appendStr(b, "lb"), t.Labels)
	}
	if len(t.Tags) > 0 {
		b = appendKVs(appendStr(b, "tg"), t.Tags)
	}
	if t.RunAt != 0 {
		b = appendInt(appendStr(b, "ra"), t.RunAt)
	}
	if t.Deadline != 0 {
		b = appendInt(appendStr(b, "dl"), t.Deadline)
	}
	if t.Timeout != 0 {
		b = appendInt(appendStr(b, "to"), t.Timeout)
	}
	if t.MaxAttempts != 0 {
		b = appendUint(appendStr(b, "ma"), uint64(t.MaxAttempts))
	}
	if !t.Backoff.empty() {
		b = appendBackoff(appendStr(b, "bo"), &t.Backoff)
	}
	if t.Schedule != "" {
		b = appendStr(appendStr(b, "sc"), t.Schedule)
	}
	if t.Slot != 0 {
		b = appendInt(appendStr(b, "sl"), t.Slot)
	}
	b = appendUint(appendStr(b, "st"), uint64(t.Status))
	if t.Attempt != 0 {
		b = appendUint(appendStr(b, "at"), uint64(t.Attempt))
	}
	if t.Lease != 0 {
		b = appendUint(appendStr(b, "ls"), t.Lease)
	}
	if t.LastLease != 0 {
		b = appendUint(appendStr(b, "ll"), t.LastLease)
	}
	if t.Worker != "" {
		b = appendStr(appendStr(b, "wk"), t.Worker)
	}
	if len(t.Output) > 0 {
		b = appendBin(appendStr(b, "out"), t.Output)
	}
	if t.Error != "" {
		b = appendStr(appendStr(b, "err"), t.Error)
	}
	b = appendInt(appendStr(b, "sa"), t.SubmittedAt)
	if t.StartedAt != 0 {
		b = appendInt(appendStr(b, "sta"), t.StartedAt)
	}
	b = appendInt(appendStr(b, "ua"), t.UpdatedAt)
	if t.FinishedAt != 0 {
		b = appendInt(appendStr(b, "fa"), t.FinishedAt)
	}
	b = appendUint(appendStr(b, "ci"), t.CreateIndex)
	return appendUint(appendStr(b, "mi"), t.ModifyIndex)
}

func appendSchedule(b []byte, s *Schedule) []byte {
	n := 7 + // n c p k ca ci mi
		cnt(s.TZ != "") + cnt(len(s.Payload) > 0) + cnt(s.Priority != 0) +
		cnt(len(s.Labels) > 0) + cnt(len(s.Tags) > 0) + cnt(s.Timeout != 0) +
		cnt(s.MaxAttempts != 0) + cnt(s.Overlap != 0) + cnt(s.CatchUp != 0) +
		cnt(s.CatchUpLimit != 0) + cnt(s.Paused) + cnt(s.LastFire != 0) +
		cnt(s.LastTask != "") + cnt(s.Fires != 0) + cnt(s.Skipped != 0)
	b = appendMapLen(b, n)
	b = appendStr(appendStr(b, "n"), s.Name)
	b = appendStr(appendStr(b, "c"), s.Cron)
	if s.TZ != "" {
		b = appendStr(appendStr(b, "tz"), s.TZ)
	}
	b = appendStr(appendStr(b, "p"), s.Pool)
	b = appendStr(appendStr(b, "k"), s.Kind)
	if len(s.Payload) > 0 {
		b = appendBin(appendStr(b, "pl"), s.Payload)
	}
	if s.Priority != 0 {
		b = appendUint(appendStr(b, "pr"), uint64(s.Priority))
	}
	if len(s.Labels) > 0 {
		b = appendKVs(appendStr(b, "lb"), s.Labels)
	}
	if len(s.Tags) > 0 {
		b = appendKVs(appendStr(b, "tg"), s.Tags)
	}
	if s.Timeout != 0 {
		b = appendInt(appendStr(b, "to"), s.Timeout)
	}
	if s.MaxAttempts != 0 {
		b = appendUint(appendStr(b, "ma"), uint64(s.MaxAttempts))
	}
	if s.Overlap != 0 {
		b = appendUint(appendStr(b, "ov"), uint64(s.Overlap))
	}
	if s.CatchUp != 0 {
		b = appendUint(appendStr(b, "cu"), uint64(s.CatchUp))
	}
	if s.CatchUpLimit != 0 {
		b = appendUint(appendStr(b, "cl"), uint64(s.CatchUpLimit))
	}
	if s.Paused {
		b = appendBool(appendStr(b, "pa"), true)
	}
	b = appendInt(appendStr(b, "ca"), s.CreatedAt)
	if s.LastFire != 0 {
		b = appendInt(appendStr(b, "lf"), s.LastFire)
	}
	if s.LastTask != "" {
		b = appendStr(appendStr(b, "lt"), s.LastTask)
	}
	if s.Fires != 0 {
		b = appendUint(appendStr(b, "fi"), s.Fires)
	}
	if s.Skipped != 0 {
		b = appendUint(appendStr(b, "sk"), s.Skipped)
	}
	b = appendUint(appendStr(b, "ci"), s.CreateIndex)
	return appendUint(appendStr(b, "mi"), s.ModifyIndex)
}

// ---------------------------------------------------------------------------
// Decoding of the schema types. Unknown keys are skipped (fields are
// append-only, so a newer writer may add some); nil reads as the zero value.
// Errors name the field and are wrapped with ErrCorrupt by the caller.
// ---------------------------------------------------------------------------

func fieldError(k []byte, err error) error {
	return fmt.Errorf("field %q: %w", k, err)
}

func (r *reader) epochBump(e *EpochBump) error {
	if r.nil() {
		return errors.New("nil epoch bump")
	}
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "e":
			e.Epoch, err = r.u64()
		case "l":
			e.Leader, err = r.str()
		case "t":
			e.Time, err = r.i64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

// commitBatch decodes into c, reusing the capacity of c.Mutations.
func (r *reader) commitBatch(c *CommitBatch) error {
	if r.nil() {
		return errors.New("nil batch")
	}
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "e":
			c.Epoch, err = r.u64()
		case "t":
			c.Time, err = r.i64()
		case "m":
			err = r.mutations(c)
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) mutations(c *CommitBatch) error {
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n < 0 {
		c.Mutations = nil
		return nil
	}
	if cap(c.Mutations) >= n {
		c.Mutations = c.Mutations[:n]
		clear(c.Mutations)
	} else {
		c.Mutations = make([]Mutation, n)
	}
	for i := range c.Mutations {
		if err := r.mutation(&c.Mutations[i]); err != nil {
			return fmt.Errorf("mutation %d: %w", i, err)
		}
	}
	return nil
}

func (r *reader) mutation(m *Mutation) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		if r.nil() {
			continue // an unset field written explicitly
		}
		switch string(k) {
		case "in":
			m.Insert = new(Task)
			err = r.task(m.Insert)
		case "rd":
			m.Ready = new(Ready)
			err = r.ready(m.Ready)
		case "sr":
			m.Start = new(Start)
			err = r.start(m.Start)
		case "rt":
			m.Retry = new(Retry)
			err = r.retry(m.Retry)
		case "fn":
			m.Finish = new(Finish)
			err = r.finish(m.Finish)
		case "pg":
			m.Purge = new(Purge)
			err = r.purge(m.Purge)
		case "ps":
			m.PutSchedule = new(Schedule)
			err = r.schedule(m.PutSchedule)
		case "ds":
			m.DelSchedule = new(DelSchedule)
			err = r.delSchedule(m.DelSchedule)
		case "pz":
			m.PauseSchedule = new(PauseSchedule)
			err = r.pauseSchedule(m.PauseSchedule)
		case "fr":
			m.Fire = new(Fire)
			err = r.fire(m.Fire)
		case "tb":
			m.Tombstone = new(Tombstone)
			err = r.tombstone(m.Tombstone)
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) ready(x *Ready) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "id":
			x.ID, err = r.str()
		case "at":
			x.At, err = r.i64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) start(x *Start) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "id":
			x.ID, err = r.str()
		case "a":
			x.Attempt, err = r.u32()
		case "l":
			x.Lease, err = r.u64()
		case "w":
			x.Worker, err = r.str()
		case "at":
			x.At, err = r.i64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) retry(x *Retry) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "id":
			x.ID, err = r.str()
		case "l":
			x.Lease, err = r.u64()
		case "e":
			x.Error, err = r.str()
		case "ra":
			x.RetryAt, err = r.i64()
		case "at":
			x.At, err = r.i64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) finish(x *Finish) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "id":
			x.ID, err = r.str()
		case "l":
			x.Lease, err = r.u64()
		case "s":
			var s uint8
			s, err = r.u8()
			x.Status = Status(s)
		case "o":
			x.Output, err = r.bin()
		case "e":
			x.Error, err = r.str()
		case "at":
			x.At, err = r.i64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) purge(x *Purge) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "id":
			x.ID, err = r.str()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) delSchedule(x *DelSchedule) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "n":
			x.Name, err = r.str()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) pauseSchedule(x *PauseSchedule) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "n":
			x.Name, err = r.str()
		case "p":
			x.Paused, err = r.bool()
		case "at":
			x.At, err = r.i64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) fire(x *Fire) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "n":
			x.Name, err = r.str()
		case "s":
			x.Slot, err = r.i64()
		case "k":
			x.Skipped, err = r.u32()
		case "t":
			x.TaskID, err = r.str()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) tombstone(x *Tombstone) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "n":
			x.NodeID, err = r.str()
		case "at":
			x.At, err = r.i64()
		case "r":
			x.Remove, err = r.bool()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) kvs() ([]KV, error) {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	kvs := make([]KV, n)
	for i := range kvs {
		m, err := r.mapLen()
		if err != nil {
			return nil, err
		}
		for j := 0; j < m; j++ {
			k, err := r.key()
			if err != nil {
				return nil, err
			}
			switch string(k) {
			case "k":
				kvs[i].K, err = r.str()
			case "v":
				kvs[i].V, err = r.str()
			default:
				err = r.skip()
			}
			if err != nil {
				return nil, fieldError(k, err)
			}
		}
	}
	return kvs, nil
}

func (r *reader) backoff(bo *Backoff) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		switch string(k) {
		case "i":
			bo.Initial, err = r.i64()
		case "m":
			bo.Max, err = r.i64()
		case "j":
			bo.Jitter, err = r.f64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) task(t *Task) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		var u8 uint8
		switch string(k) {
		case "id":
			t.ID, err = r.str()
		case "p":
			t.Pool, err = r.str()
		case "k":
			t.Kind, err = r.str()
		case "key":
			t.Key, err = r.str()
		case "pr":
			u8, err = r.u8()
			t.Priority = Priority(u8)
		case "pl":
			t.Payload, err = r.bin()
		case "lb":
			t.Labels, err = r.kvs()
		case "tg":
			t.Tags, err = r.kvs()
		case "ra":
			t.RunAt, err = r.i64()
		case "dl":
			t.Deadline, err = r.i64()
		case "to":
			t.Timeout, err = r.i64()
		case "ma":
			t.MaxAttempts, err = r.u32()
		case "bo":
			err = r.backoff(&t.Backoff)
		case "sc":
			t.Schedule, err = r.str()
		case "sl":
			t.Slot, err = r.i64()
		case "st":
			u8, err = r.u8()
			t.Status = Status(u8)
		case "at":
			t.Attempt, err = r.u32()
		case "ls":
			t.Lease, err = r.u64()
		case "ll":
			t.LastLease, err = r.u64()
		case "wk":
			t.Worker, err = r.str()
		case "out":
			t.Output, err = r.bin()
		case "err":
			t.Error, err = r.str()
		case "sa":
			t.SubmittedAt, err = r.i64()
		case "sta":
			t.StartedAt, err = r.i64()
		case "ua":
			t.UpdatedAt, err = r.i64()
		case "fa":
			t.FinishedAt, err = r.i64()
		case "ci":
			t.CreateIndex, err = r.u64()
		case "mi":
			t.ModifyIndex, err = r.u64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}

func (r *reader) schedule(s *Schedule) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		var u8 uint8
		switch string(k) {
		case "n":
			s.Name, err = r.str()
		case "c":
			s.Cron, err = r.str()
		case "tz":
			s.TZ, err = r.str()
		case "p":
			s.Pool, err = r.str()
		case "k":
			s.Kind, err = r.str()
		case "pl":
			s.Payload, err = r.bin()
		case "pr":
			u8, err = r.u8()
			s.Priority = Priority(u8)
		case "lb":
			s.Labels, err = r.kvs()
		case "tg":
			s.Tags, err = r.kvs()
		case "to":
			s.Timeout, err = r.i64()
		case "ma":
			s.MaxAttempts, err = r.u32()
		case "ov":
			u8, err = r.u8()
			s.Overlap = Overlap(u8)
		case "cu":
			u8, err = r.u8()
			s.CatchUp = CatchUp(u8)
		case "cl":
			s.CatchUpLimit, err = r.u32()
		case "pa":
			s.Paused, err = r.bool()
		case "ca":
			s.CreatedAt, err = r.i64()
		case "lf":
			s.LastFire, err = r.i64()
		case "lt":
			s.LastTask, err = r.str()
		case "fi":
			s.Fires, err = r.u64()
		case "sk":
			s.Skipped, err = r.u64()
		case "ci":
			s.CreateIndex, err = r.u64()
		case "mi":
			s.ModifyIndex, err = r.u64()
		default:
			err = r.skip()
		}
		if err != nil {
			return fieldError(k, err)
		}
	}
	return nil
}
