package fsm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/google/btree"
)

// btreeDegree is the degree of every B-tree of the state.
const btreeDegree = 32

// maxScratchMutations bounds the capacity of the decode buffer that Apply
// keeps between entries, so one huge batch does not pin its memory forever.
const maxScratchMutations = 4096

// Items of the B-trees. They are small values so that lookups build their
// probe on the stack; the records they point to are immutable.
type (
	keyItem struct {
		key, id string
	}
	schedItem struct {
		name string
		s    *Schedule
	}
	wfItem struct {
		id string
		w  *Workflow
	}
	// memberItem indexes the members of a workflow, in task id order.
	memberItem struct {
		wf, id string
	}
	poolItem struct {
		name string
		p    *Pool
	}
)

func lessRecord(a, b *Task) bool    { return a.ID < b.ID }
func lessKey(a, b keyItem) bool     { return a.key < b.key }
func lessSched(a, b schedItem) bool { return a.name < b.name }
func lessTomb(a, b Tombstone) bool  { return a.NodeID < b.NodeID }
func lessWf(a, b wfItem) bool       { return a.id < b.id }
func lessPool(a, b poolItem) bool   { return a.name < b.name }
func lessSub(a, b subItem) bool     { return a.name < b.name }
func lessMember(a, b memberItem) bool {
	if a.wf != b.wf {
		return a.wf < b.wf
	}
	return a.id < b.id
}

// The task trees (the table by id, and the pool index by status) hold the
// records themselves, ordered by their ids (which never change): 8 bytes
// an item rather than 24 for an id and a pointer, in nodes that, filled in
// id order, stay half empty. A lookup by id takes a probe record from
// probes; the state has the old record wherever it changes a task.
var probes = sync.Pool{New: func() any { return new(Task) }}

// probe returns a record with ID id and nothing else set, for a lookup in
// a task tree; hand it back with unprobe once the lookup is done.
func probe(id string) *Task {
	p := probes.Get().(*Task)
	p.ID = id
	return p
}

func unprobe(p *Task) {
	p.ID = ""
	probes.Put(p)
}

// poolIndex indexes the tasks of one pool: by status, each in id order, with
// their counts. A tree is created on first use.
type poolIndex struct {
	counts   [numStatuses]int64
	byStatus [numStatuses]*btree.BTreeG[*Task]
}

// clone returns a copy-on-write copy of p.
func (p *poolIndex) clone() *poolIndex {
	c := *p
	for i, tr := range p.byStatus {
		if tr != nil {
			c.byStatus[i] = tr.Clone()
		}
	}
	return &c
}

func (p *poolIndex) empty() bool { return p.counts == [numStatuses]int64{} }

// tables is the whole replicated state: the primary records, their derived
// indexes and counters, and the epoch. A View holds a copy-on-write clone.
type tables struct {
	epoch     uint64 // current engine epoch
	epochTerm uint64 // log term of the entry that set epoch
	applied   uint64 // log index of the last entry applied

	tasks  *btree.BTreeG[*Task]     // by id: the primary task table
	keys   *btree.BTreeG[keyItem]   // idempotency key -> id
	scheds *btree.BTreeG[schedItem] // by name
	tombs  *btree.BTreeG[Tombstone] // by node id
	wfs    *btree.BTreeG[wfItem]    // workflows by id
	wfKeys *btree.BTreeG[keyItem]   // workflow idempotency key -> id
	// members indexes the tasks of each workflow (derived from
	// Task.Workflow).
	members *btree.BTreeG[memberItem]
	// settings holds the pools' replicated settings, by name (log format
	// 4); a pool without a record runs with the agent's defaults.
	settings *btree.BTreeG[poolItem]
	// pools indexes the tasks by (pool, status), for List and the counts;
	// pools with no task are absent. A map rather than one tree keyed by
	// (pool, status, id): there are few pools, and a status change then
	// costs two lookups by id instead of two by the composite key (which
	// dominated Apply's CPU). Never iterated where order matters unsorted.
	pools map[string]*poolIndex
	// acl holds the ACL policies and tokens (log format 5); immutable.
	acl *aclTables
	// Durable subscriptions (log format 6): the records by name, the
	// events they hold by (subscription, cursor), which subscriptions
	// hold an event of each task (for retention), and how many events
	// each holds.
	subs     *btree.BTreeG[subItem]
	subEvs   *btree.BTreeG[subEvItem]
	subHeld  *btree.BTreeG[heldItem]
	subCount map[string]int
}

func newTables() *tables {
	return &tables{
		tasks:    btree.NewG(btreeDegree, lessRecord),
		keys:     btree.NewG(btreeDegree, lessKey),
		scheds:   btree.NewG(btreeDegree, lessSched),
		tombs:    btree.NewG(btreeDegree, lessTomb),
		wfs:      btree.NewG(btreeDegree, lessWf),
		wfKeys:   btree.NewG(btreeDegree, lessKey),
		members:  btree.NewG(btreeDegree, lessMember),
		settings: btree.NewG(btreeDegree, lessPool),
		pools:    make(map[string]*poolIndex),
		acl:      emptyACL,
		subs:     btree.NewG(btreeDegree, lessSub),
		subEvs:   btree.NewG(btreeDegree, lessSubEv),
		subHeld:  btree.NewG(btreeDegree, lessHeld),
		subCount: make(map[string]int),
	}
}

// clone returns a copy-on-write copy in O(pools). It writes to t (B-tree
// clones reset the copy-on-write context of both trees), so the caller must
// hold the write lock.
func (t *tables) clone() *tables {
	c := *t
	c.tasks = t.tasks.Clone()
	c.keys = t.keys.Clone()
	c.scheds = t.scheds.Clone()
	c.tombs = t.tombs.Clone()
	c.wfs = t.wfs.Clone()
	c.wfKeys = t.wfKeys.Clone()
	c.members = t.members.Clone()
	c.settings = t.settings.Clone()
	c.pools = make(map[string]*poolIndex, len(t.pools))
	for name, p := range t.pools {
		c.pools[name] = p.clone()
	}
	c.subs = t.subs.Clone()
	c.subEvs = t.subEvs.Clone()
	c.subHeld = t.subHeld.Clone()
	c.subCount = make(map[string]int, len(t.subCount))
	for name, n := range t.subCount {
		c.subCount[name] = n
	}
	return &c
}

// putTask replaces task record old with new, keeping every index and counter
// in step. old == nil inserts, new == nil deletes; otherwise both have the
// same ID. It is the only function that writes tasks.
func (t *tables) putTask(old, new *Task) {
	moved := old == nil || new == nil || old.Pool != new.Pool || old.Status != new.Status
	if old != nil {
		if new == nil {
			t.tasks.Delete(old)
		}
		if old.Key != "" && (new == nil || new.Key != old.Key) {
			t.keys.Delete(keyItem{key: old.Key})
		}
		if old.Workflow() != "" && (new == nil || new.Workflow() != old.Workflow()) {
			t.members.Delete(memberItem{wf: old.Workflow(), id: old.ID})
		}
		if moved {
			p := t.pools[old.Pool]
			p.byStatus[old.Status].Delete(old)
			p.counts[old.Status]--
			if p.empty() {
				delete(t.pools, old.Pool)
			}
		}
	}
	if new != nil {
		t.tasks.ReplaceOrInsert(new)
		if new.Key != "" && (old == nil || old.Key != new.Key) {
			t.keys.ReplaceOrInsert(keyItem{key: new.Key, id: new.ID})
		}
		if new.Workflow() != "" && (old == nil || old.Workflow() != new.Workflow()) {
			t.members.ReplaceOrInsert(memberItem{wf: new.Workflow(), id: new.ID})
		}
		p := t.pools[new.Pool]
		if p == nil {
			p = &poolIndex{}
			t.pools[new.Pool] = p
		}
		tr := p.byStatus[new.Status]
		if tr == nil {
			tr = btree.NewG(btreeDegree, lessRecord)
			p.byStatus[new.Status] = tr
		}
		tr.ReplaceOrInsert(new)
		if moved {
			p.counts[new.Status]++
		}
	}
}

// putSchedule replaces schedule old with new (nil for absent).
func (t *tables) putSchedule(old, new *Schedule) {
	if new == nil {
		if old != nil {
			t.scheds.Delete(schedItem{name: old.Name})
		}
		return
	}
	t.scheds.ReplaceOrInsert(schedItem{name: new.Name, s: new})
}

// putWorkflow replaces workflow old with new (nil for absent), keeping the
// key index in step.
func (t *tables) putWorkflow(old, new *Workflow) {
	if old != nil {
		if new == nil {
			t.wfs.Delete(wfItem{id: old.ID})
		}
		if old.Key != "" && (new == nil || new.Key != old.Key) {
			t.wfKeys.Delete(keyItem{key: old.Key})
		}
	}
	if new != nil {
		t.wfs.ReplaceOrInsert(wfItem{id: new.ID, w: new})
		if new.Key != "" && (old == nil || old.Key != new.Key) {
			t.wfKeys.ReplaceOrInsert(keyItem{key: new.Key, id: new.ID})
		}
	}
}

// putPool replaces the settings of pool old with new (nil for absent).
func (t *tables) putPool(old, new *Pool) {
	if new == nil {
		if old != nil {
			t.settings.Delete(poolItem{name: old.Name})
		}
		return
	}
	t.settings.ReplaceOrInsert(poolItem{name: new.Name, p: new})
}

// putTombstone replaces tombstone old with new (nil for absent).
func (t *tables) putTombstone(old, new *Tombstone) {
	if new == nil {
		if old != nil {
			t.tombs.Delete(*old)
		}
		return
	}
	t.tombs.ReplaceOrInsert(*new)
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

// State is the replicated state machine. One goroutine applies entries while
// any number read; every read sees the state between two entries. Records
// returned by reads are shared and must not be modified.
type State struct {
	// applyMu serializes Apply and Restore and guards the fields below it.
	applyMu sync.Mutex
	version uint16      // the newest log format this state applies
	halted  *HaltError  // the entry it could not apply, once it met one
	batch   CommitBatch // decode buffer, reused between entries
	undo    []undo      // changes of the batch being applied, for rollback
	index   uint64      // log index of the batch being applied
	seq     int         // status changes of the batch being applied so far
	events  []Event     // status events of the batch being applied
	sink    EventSink   // where the events of each applied batch go
	// subChanged: the batch being applied changed a subscription or the
	// events held; subWatch is closed (and replaced) when one that did is
	// applied, or a snapshot restored.
	subChanged bool
	subWatch   chan struct{}

	// mu guards t: held for writing while an entry is applied or a View is
	// taken, for reading by reads.
	mu sync.RWMutex
	t  *tables
}

// New returns an empty state at epoch 0 that applies entries of every log
// format up to LogVersion.
func New() *State { return NewVersion(LogVersion) }

// NewVersion returns an empty state that applies entries of log formats up
// to version only, as a release of that version would: an entry that needs
// more halts it. Tests use it to play an older node.
func NewVersion(version uint16) *State {
	return &State{t: newTables(), version: version, subWatch: make(chan struct{})}
}

// Version returns the newest log format the state applies.
func (s *State) Version() uint16 { return s.version }

// HaltError is the answer of Apply for an entry the state cannot apply (an
// unknown entry type or mutation kind, a newer log format, bytes that do not
// decode) and for every entry after it. A node that meets one stops applying
// rather than skip it, which would leave it out of step with the nodes that
// applied it: its state stays as it was before Index until it restarts with
// a release that understands the entry.
type HaltError struct {
	Index   uint64 // log index of the entry
	Need    uint16 // log format the entry needs; 0 when it does not say
	Version uint16 // log format this state understands
	Err     error  // why it cannot be applied
}

func (e *HaltError) Error() string {
	if e.Need != 0 {
		return fmt.Sprintf("fsm: halted at log index %d, which needs log format version %d (this node understands %d): %v",
			e.Index, e.Need, e.Version, e.Err)
	}
	return fmt.Sprintf("fsm: halted at log index %d, which this node cannot apply: %v", e.Index, e.Err)
}

func (e *HaltError) Unwrap() error { return e.Err }

// Halted returns the entry the state stopped at, or nil while it applies.
func (s *State) Halted() *HaltError {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.halted
}

// halt stops applying at index and returns the error for it.
func (s *State) halt(index uint64, need uint16, err error) *HaltError {
	s.halted = &HaltError{Index: index, Need: need, Version: s.version, Err: err}
	return s.halted
}

// undo records one change of the batch being applied.
type undo struct {
	oldT, newT *Task
	oldS, newS *Schedule
	oldB, newB *Tombstone
	oldW, newW *Workflow
	oldP, newP *Pool
	oldA       *aclTables
	oldU, newU *Subscription
	ev         subEvItem // an event a subscription took (kind undoSubEvent) or dropped (undoSubEventDrop)
	kind       undoKind
}

type undoKind uint8

const (
	undoTask undoKind = iota
	undoSchedule
	undoTombstone
	undoWorkflow
	undoPool
	undoACL
	undoSub
	undoSubEvent
	undoSubEventDrop
)

// Apply applies the log entry data committed at index in term. It returns,
// for an epoch bump, the new epoch (uint64) or an error; for a commit batch,
// nil or an error (wrapping ErrStaleEpoch, or a *RejectedError). Those
// refusals are decided by the entry and the state alone, so every node
// refuses alike. For an entry of an unknown type that carries
// IgnoreUnknownFlag it returns nil.
//
// An entry this state cannot apply (see HaltError) halts it: Apply returns
// the *HaltError for that entry and every later one. When it returns an
// error nothing changed, not even AppliedIndex.
func (s *State) Apply(index, term uint64, data []byte) any {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.halted != nil {
		return s.halted
	}
	if len(data) == 0 {
		return s.halt(index, 0, fmt.Errorf("%w: empty entry", ErrCorrupt))
	}
	typ := EntryType(data[0])
	switch typ &^ IgnoreUnknownFlag {
	case EntryEpochBump:
		var b EpochBump
		if err := decodeEpochBump(data[1:], &b); err != nil {
			return s.halt(index, 0, err)
		}
		return s.applyEpochBump(index, term, &b)
	case EntryCommitBatch:
		s.batch = CommitBatch{Mutations: s.batch.Mutations[:0]}
		defer s.releaseBatch()
		err := decodeCommitBatch(data[1:], &s.batch)
		if err != nil && !errors.Is(err, ErrUnknownMutation) {
			return s.halt(index, 0, err)
		}
		if need := s.batch.Version; need > s.version {
			return s.halt(index, need, fmt.Errorf("commit batch: %w", ErrNewerVersion))
		}
		if err != nil {
			return s.halt(index, 0, err)
		}
		for i := range s.batch.Mutations {
			if need := s.batch.Mutations[i].Version(); need > s.version {
				return s.halt(index, need, fmt.Errorf("commit batch: mutation %d: %w", i, ErrNewerVersion))
			}
		}
		if err := s.applyBatch(index, &s.batch); err != nil {
			return err
		}
		s.flushEvents(index)
		s.notifySubscriptions()
		return nil
	}
	if typ&IgnoreUnknownFlag == 0 {
		return s.halt(index, 0, fmt.Errorf("entry type %d: %w", typ, ErrUnknownEntry))
	}
	s.mu.Lock()
	s.t.applied = index
	s.mu.Unlock()
	return nil
}

// releaseBatch drops the references the decode buffer holds.
func (s *State) releaseBatch() {
	if cap(s.batch.Mutations) > maxScratchMutations {
		s.batch.Mutations = nil
	}
	clear(s.batch.Mutations[:cap(s.batch.Mutations)])
}

func (s *State) applyEpochBump(index, term uint64, b *EpochBump) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.t
	if b.Epoch <= t.epoch || b.Epoch-t.epoch != 1 {
		return fmt.Errorf("epoch bump to %d at epoch %d: %w", b.Epoch, t.epoch, ErrStaleEpoch)
	}
	t.epoch = b.Epoch
	t.epochTerm = term
	t.applied = index
	return b.Epoch
}

// applyBatch applies every mutation of b or, if one is rejected, none.
func (s *State) applyBatch(index uint64, b *CommitBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Epoch != s.t.epoch && !bugNoEpoch {
		return fmt.Errorf("commit batch of epoch %d at epoch %d: %w", b.Epoch, s.t.epoch, ErrStaleEpoch)
	}
	defer s.clearUndo()
	s.index, s.seq, s.subChanged = index, 0, false
	for i := range b.Mutations {
		if err := s.mutate(index, b.Time, &b.Mutations[i]); err != nil {
			s.rollback()
			return &RejectedError{Index: i, Reason: err.Error()}
		}
	}
	s.t.applied = index
	return nil
}

func (s *State) clearUndo() {
	clear(s.undo)
	s.undo = s.undo[:0]
}

// rollback undoes the changes of the current batch, last first, and
// drops its events.
func (s *State) rollback() {
	clear(s.events)
	s.events = s.events[:0]
	for i := len(s.undo) - 1; i >= 0; i-- {
		u := &s.undo[i]
		switch u.kind {
		case undoTask:
			s.t.putTask(u.newT, u.oldT)
		case undoSchedule:
			s.t.putSchedule(u.newS, u.oldS)
		case undoTombstone:
			s.t.putTombstone(u.newB, u.oldB)
		case undoWorkflow:
			s.t.putWorkflow(u.newW, u.oldW)
		case undoPool:
			s.t.putPool(u.newP, u.oldP)
		case undoACL:
			s.t.acl = u.oldA
		case undoSub:
			s.t.putSub(u.newU, u.oldU)
		case undoSubEvent:
			s.t.dropSubEvent(u.ev)
		case undoSubEventDrop:
			s.t.holdSubEvent(u.ev)
		}
	}
	s.subChanged = false
}

// The setters below are the only writers used while applying a batch: each
// change goes to the tables and to the undo log.

func (s *State) setTask(old, new *Task) {
	s.t.putTask(old, new)
	s.taskEvent(s.index, old, new)
	s.undo = append(s.undo, undo{kind: undoTask, oldT: old, newT: new})
}

func (s *State) setSchedule(old, new *Schedule) {
	s.t.putSchedule(old, new)
	s.undo = append(s.undo, undo{kind: undoSchedule, oldS: old, newS: new})
}

func (s *State) setTombstone(old, new *Tombstone) {
	s.t.putTombstone(old, new)
	s.undo = append(s.undo, undo{kind: undoTombstone, oldB: old, newB: new})
}

func (s *State) setWorkflow(old, new *Workflow) {
	s.t.putWorkflow(old, new)
	s.workflowEvent(s.index, old, new)
	s.undo = append(s.undo, undo{kind: undoWorkflow, oldW: old, newW: new})
}

func (s *State) setPool(old, new *Pool) {
	s.t.putPool(old, new)
	s.undo = append(s.undo, undo{kind: undoPool, oldP: old, newP: new})
}

// instant returns at, or the batch time when at is unset.
func instant(at, batchTime Instant) Instant {
	if at != 0 {
		return at
	}
	return batchTime
}

// mutate checks the precondition of m and applies it. An error is the
// reason m is rejected; the state is then unchanged by m.
func (s *State) mutate(index uint64, batchTime Instant, m *Mutation) error {
	switch {
	case m.Insert != nil:
		return s.insert(index, m.Insert)
	case m.Ready != nil:
		return s.ready(index, instant(m.Ready.At, batchTime), m.Ready)
	case m.Start != nil:
		return s.start(index, instant(m.Start.At, batchTime), m.Start)
	case m.Retry != nil:
		return s.retry(index, instant(m.Retry.At, batchTime), m.Retry)
	case m.Finish != nil:
		return s.finish(index, instant(m.Finish.At, batchTime), m.Finish)
	case m.Purge != nil:
		return s.purge(m.Purge)
	case m.PutSchedule != nil:
		return s.putSchedule(index, m.PutSchedule)
	case m.DelSchedule != nil:
		return s.delSchedule(m.DelSchedule)
	case m.PauseSchedule != nil:
		return s.pauseSchedule(index, m.PauseSchedule)
	case m.Fire != nil:
		return s.fire(index, m.Fire)
	case m.Tombstone != nil:
		return s.tombstone(instant(m.Tombstone.At, batchTime), m.Tombstone)
	case m.Unblock != nil:
		return s.unblock(index, instant(m.Unblock.At, batchTime), m.Unblock)
	case m.PutWorkflow != nil:
		return s.putWorkflow(index, m.PutWorkflow)
	case m.EndWorkflow != nil:
		return s.endWorkflow(index, instant(m.EndWorkflow.At, batchTime), m.EndWorkflow)
	case m.PurgeWorkflow != nil:
		return s.purgeWorkflow(m.PurgeWorkflow)
	case m.Admit != nil:
		return s.admit(index, instant(m.Admit.At, batchTime), m.Admit)
	case m.PutPool != nil:
		return s.putPool(index, m.PutPool)
	case m.PutACLPolicy != nil:
		return s.putACLPolicy(index, m.PutACLPolicy)
	case m.PutACLToken != nil:
		return s.putACLToken(index, m.PutACLToken)
	case m.DelACL != nil:
		return s.delACL(m.DelACL)
	case m.Requeue != nil:
		return s.requeue(index, instant(m.Requeue.At, batchTime), m.Requeue)
	case m.PutSubscription != nil:
		return s.putSubscription(index, batchTime, m.PutSubscription)
	case m.DelSubscription != nil:
		return s.delSubscription(m.DelSubscription)
	case m.AckSubscription != nil:
		return s.ackSubscription(index, m.AckSubscription)
	case m.StallSubscription != nil:
		return s.stallSubscription(index, instant(m.StallSubscription.At, batchTime), m.StallSubscription)
	}
	return errors.New("empty mutation") // unreachable: decoding checks this
}

func (s *State) task(op, id string) (*Task, error) {
	t, ok := s.t.get(id)
	if !ok {
		return nil, fmt.Errorf("%s %s: no such task", op, id)
	}
	return t, nil
}

// insert adds a new task; t is owned by the state from here on.
func (s *State) insert(index uint64, t *Task) error {
	if t.ID == "" {
		return errors.New("insert: empty task id")
	}
	if s.t.has(t.ID) {
		return fmt.Errorf("insert %s: task exists", t.ID)
	}
	if t.Key != "" {
		if k, ok := s.t.keys.Get(keyItem{key: t.Key}); ok {
			return fmt.Errorf("insert %s: key %q is in use by task %s", t.ID, t.Key, k.id)
		}
	}
	switch t.Status {
	case StatusScheduled, StatusQueued, StatusParked:
	case StatusBlocked:
		if len(t.DependsOn()) == 0 {
			return fmt.Errorf("insert %s: blocked without dependencies", t.ID)
		}
	default:
		return fmt.Errorf("insert %s: status %s, want scheduled, queued, blocked or parked", t.ID, t.Status)
	}
	if t.Attempt != 0 || t.Lease != 0 {
		return fmt.Errorf("insert %s: attempt %d and lease %d, want 0", t.ID, t.Attempt, t.Lease)
	}
	if t.BlocksLane {
		return fmt.Errorf("insert %s: a new task does not block its lane", t.ID)
	}
	if len(t.Attempts) > 0 || t.AttemptBase != 0 {
		return fmt.Errorf("insert %s: a new task has no attempt history", t.ID)
	}
	for _, dep := range t.DependsOn() {
		if dep == t.ID || !s.t.has(dep) {
			return fmt.Errorf("insert %s: dependency %s does not exist", t.ID, dep)
		}
	}
	if t.Workflow() != "" {
		if err := s.runningWorkflow("insert "+t.ID+" into", t.Workflow()); err != nil {
			return err
		}
	}
	if t.Parent() != "" && !s.t.has(t.Parent()) {
		return fmt.Errorf("insert %s: parent %s does not exist", t.ID, t.Parent())
	}
	t.CreateIndex = index
	t.ModifyIndex = index
	if t.UpdatedAt == 0 {
		t.UpdatedAt = t.SubmittedAt
	}
	s.setTask(nil, t)
	return nil
}

func (s *State) ready(index uint64, at Instant, m *Ready) error {
	cur, err := s.task("ready", m.ID)
	if err != nil {
		return err
	}
	if cur.Status != StatusScheduled && cur.Status != StatusRetrying {
		return fmt.Errorf("ready %s: task is %s, want scheduled or retrying", m.ID, cur.Status)
	}
	t := cur.Clone()
	t.Status = StatusQueued
	t.ModifyIndex = index
	t.UpdatedAt = at
	s.setTask(cur, t)
	return nil
}

func (s *State) start(index uint64, at Instant, m *Start) error {
	cur, err := s.task("start", m.ID)
	if err != nil {
		return err
	}
	switch {
	case cur.Status != StatusQueued:
		return fmt.Errorf("start %s: task is %s, want queued", m.ID, cur.Status)
	case uint64(m.Attempt) != uint64(cur.Attempt)+1:
		return fmt.Errorf("start %s: attempt %d, want %d", m.ID, m.Attempt, uint64(cur.Attempt)+1)
	case m.Lease <= cur.LastLease:
		return fmt.Errorf("start %s: lease %#x does not exceed last lease %#x", m.ID, m.Lease, cur.LastLease)
	}
	t := cur.Clone()
	t.Status = StatusRunning
	t.Attempt = m.Attempt
	t.Lease = m.Lease
	t.LastLease = m.Lease
	t.Worker = m.Worker
	t.StartedAt = at
	t.Error = ""
	t.ModifyIndex = index
	t.UpdatedAt = at
	s.setTask(cur, t)
	return nil
}

func (s *State) retry(index uint64, at Instant, m *Retry) error {
	cur, err := s.task("retry", m.ID)
	if err != nil {
		return err
	}
	if cur.Status != StatusRunning || (cur.Lease != m.Lease && !bugStaleLease) {
		return fmt.Errorf("retry %s: task is %s under lease %#x, want running under %#x", m.ID, cur.Status, cur.Lease, m.Lease)
	}
	t := cur.Clone()
	if m.Outcome != 0 {
		if err := checkOutcome("retry", m.ID, m.Outcome, AttemptRetry, AttemptTimeout, AttemptLost); err != nil {
			return err
		}
		endAttempt(t, cur, at, m.Outcome, m.Error)
	}
	t.Status = StatusRetrying
	if m.RetryAt <= at {
		t.Status = StatusQueued
	}
	t.RunAt = m.RetryAt
	t.Lease = 0
	t.Worker = ""
	t.Error = m.Error
	t.ModifyIndex = index
	t.UpdatedAt = at
	s.setTask(cur, t)
	return nil
}

// finish ends a task. The worker of the last attempt stays on record.
func (s *State) finish(index uint64, at Instant, m *Finish) error {
	if !m.Status.Terminal() {
		return fmt.Errorf("finish %s: status %s is not terminal", m.ID, m.Status)
	}
	cur, err := s.task("finish", m.ID)
	if err != nil {
		return err
	}
	if m.Lease != 0 {
		if cur.Status != StatusRunning || (cur.Lease != m.Lease && !bugStaleLease) {
			return fmt.Errorf("finish %s: task is %s under lease %#x, want running under %#x", m.ID, cur.Status, cur.Lease, m.Lease)
		}
	} else if cur.Status.Terminal() || cur.Status == StatusRunning {
		return fmt.Errorf("finish %s without a lease: task is %s, want live and not running", m.ID, cur.Status)
	}
	if m.BlocksLane && (m.Status == StatusSucceeded || cur.OrderingKey() == "") {
		return fmt.Errorf("finish %s as %s: only a task with an ordering key that did not succeed blocks its lane", m.ID, m.Status)
	}
	t := cur.Clone()
	if m.Outcome != 0 {
		if m.Lease == 0 {
			return fmt.Errorf("finish %s: an attempt outcome without a lease (no attempt runs)", m.ID)
		}
		if err := checkOutcome("finish", m.ID, m.Outcome, finishOutcomes(m.Status)...); err != nil {
			return err
		}
		endAttempt(t, cur, at, m.Outcome, m.Error)
	}
	t.BlocksLane = m.BlocksLane
	if m.Workflow != "" {
		if cur.Workflow() != "" {
			return fmt.Errorf("finish %s into workflow %s: task is in workflow %s", m.ID, m.Workflow, cur.Workflow())
		}
		if err := s.runningWorkflow("finish "+m.ID+" into", m.Workflow); err != nil {
			return err
		}
		f := Flow{}
		if t.Flow != nil {
			f = *t.Flow
		}
		f.Workflow = m.Workflow
		t.Flow = &f
	}
	t.Status = m.Status
	t.Output = m.Output
	t.Error = m.Error
	t.FinishedAt = at
	t.Lease = 0
	t.ModifyIndex = index
	t.UpdatedAt = at
	s.setTask(cur, t)
	return nil
}

func (s *State) purge(m *Purge) error {
	cur, err := s.task("purge", m.ID)
	if err != nil {
		return err
	}
	if !cur.Status.Terminal() {
		return fmt.Errorf("purge %s: task is %s, want terminal", m.ID, cur.Status)
	}
	s.setTask(cur, nil)
	return nil
}

func (s *State) schedule(op, name string) (*Schedule, error) {
	it, ok := s.t.scheds.Get(schedItem{name: name})
	if !ok {
		return nil, fmt.Errorf("%s %q: no such schedule", op, name)
	}
	return it.s, nil
}

// putSchedule creates or replaces a schedule; sc is owned by the state from
// here on. A replacement keeps the CreateIndex of the schedule it replaces.
func (s *State) putSchedule(index uint64, sc *Schedule) error {
	if sc.Name == "" {
		return errors.New("put schedule: empty name")
	}
	sc.CreateIndex = index
	old, ok := s.t.scheds.Get(schedItem{name: sc.Name})
	if ok {
		sc.CreateIndex = old.s.CreateIndex
	}
	sc.ModifyIndex = index
	s.setSchedule(old.s, sc)
	return nil
}

func (s *State) delSchedule(m *DelSchedule) error {
	cur, err := s.schedule("delete schedule", m.Name)
	if err != nil {
		return err
	}
	s.setSchedule(cur, nil)
	return nil
}

func (s *State) pauseSchedule(index uint64, m *PauseSchedule) error {
	cur, err := s.schedule("pause schedule", m.Name)
	if err != nil {
		return err
	}
	sc := cur.Clone()
	sc.Paused = m.Paused
	sc.ModifyIndex = index
	s.setSchedule(cur, sc)
	return nil
}

func (s *State) fire(index uint64, m *Fire) error {
	cur, err := s.schedule("fire", m.Name)
	if err != nil {
		return err
	}
	if m.Slot <= cur.LastFire && !bugCronRefire {
		return fmt.Errorf("fire %q: slot %d is not after the last fire %d", m.Name, m.Slot, cur.LastFire)
	}
	if m.TaskID != "" && !s.t.has(m.TaskID) {
		return fmt.Errorf("fire %q: task %s does not exist", m.Name, m.TaskID)
	}
	if m.Workflow != "" && !s.t.wfs.Has(wfItem{id: m.Workflow}) {
		return fmt.Errorf("fire %q: workflow %s does not exist", m.Name, m.Workflow)
	}
	if m.TaskID != "" && m.Workflow != "" {
		return fmt.Errorf("fire %q: both a task and a workflow", m.Name)
	}
	sc := cur.Clone()
	sc.LastFire = m.Slot
	sc.Skipped += uint64(m.Skipped)
	switch {
	case m.TaskID != "":
		sc.Fires++
		sc.LastTask = m.TaskID
	case m.Workflow != "":
		sc.Fires++
		sc.LastTask = m.Workflow
	default:
		sc.Skipped++ // the slot itself was skipped
	}
	sc.ModifyIndex = index
	s.setSchedule(cur, sc)
	return nil
}

func (s *State) tombstone(at Instant, m *Tombstone) error {
	if m.NodeID == "" {
		return errors.New("tombstone: empty node id")
	}
	var old *Tombstone
	if cur, ok := s.t.tombs.Get(Tombstone{NodeID: m.NodeID}); ok {
		old = &cur
	}
	if m.Remove {
		if old != nil {
			s.setTombstone(old, nil)
		}
		return nil
	}
	s.setTombstone(old, &Tombstone{NodeID: m.NodeID, At: at})
	return nil
}

// ---------------------------------------------------------------------------
// Dependencies and workflows (log format 3)
// ---------------------------------------------------------------------------

func (s *State) unblock(index uint64, at Instant, m *Unblock) error {
	cur, err := s.task("unblock", m.ID)
	if err != nil {
		return err
	}
	if cur.Status != StatusBlocked {
		return fmt.Errorf("unblock %s: task is %s, want blocked", m.ID, cur.Status)
	}
	t := cur.Clone()
	t.Status = StatusQueued
	if t.RunAt > at {
		t.Status = StatusScheduled
	}
	t.ModifyIndex = index
	t.UpdatedAt = at
	s.setTask(cur, t)
	return nil
}

// runningWorkflow checks that workflow id exists and runs.
func (s *State) runningWorkflow(op, id string) error {
	it, ok := s.t.wfs.Get(wfItem{id: id})
	switch {
	case !ok:
		return fmt.Errorf("%s workflow %s: no such workflow", op, id)
	case it.w.Status != WorkflowRunning:
		return fmt.Errorf("%s workflow %s: workflow is %s, want running", op, id, it.w.Status)
	}
	return nil
}

// putWorkflow creates a workflow; w is owned by the state from here on.
func (s *State) putWorkflow(index uint64, w *Workflow) error {
	switch {
	case w.ID == "":
		return errors.New("put workflow: empty id")
	case s.t.wfs.Has(wfItem{id: w.ID}):
		return fmt.Errorf("put workflow %s: workflow exists", w.ID)
	case w.Status != WorkflowRunning:
		return fmt.Errorf("put workflow %s: status %s, want running", w.ID, w.Status)
	}
	if w.Key != "" {
		if k, ok := s.t.wfKeys.Get(keyItem{key: w.Key}); ok {
			return fmt.Errorf("put workflow %s: key %q is in use by workflow %s", w.ID, w.Key, k.id)
		}
	}
	w.CreateIndex = index
	w.ModifyIndex = index
	if w.UpdatedAt == 0 {
		w.UpdatedAt = w.SubmittedAt
	}
	s.setWorkflow(nil, w)
	return nil
}

// liveMember returns a member of workflow id that has not ended, if any.
func (t *tables) liveMember(id string) (string, bool) {
	var live string
	t.members.AscendGreaterOrEqual(memberItem{wf: id}, func(mi memberItem) bool {
		if mi.wf != id {
			return false
		}
		if task, _ := t.get(mi.id); !task.Status.Terminal() {
			live = mi.id
			return false
		}
		return true
	})
	return live, live != ""
}

func (s *State) endWorkflow(index uint64, at Instant, m *EndWorkflow) error {
	it, ok := s.t.wfs.Get(wfItem{id: m.ID})
	switch {
	case !ok:
		return fmt.Errorf("end workflow %s: no such workflow", m.ID)
	case it.w.Status != WorkflowRunning:
		return fmt.Errorf("end workflow %s: workflow is %s, want running", m.ID, it.w.Status)
	case !m.Status.Terminal():
		return fmt.Errorf("end workflow %s: status %s is not terminal", m.ID, m.Status)
	}
	if id, live := s.t.liveMember(m.ID); live {
		return fmt.Errorf("end workflow %s: member %s has not ended", m.ID, id)
	}
	w := it.w.Clone()
	w.Status = m.Status
	w.FinishedAt = at
	w.UpdatedAt = at
	w.ModifyIndex = index
	s.setWorkflow(it.w, w)
	return nil
}

func (s *State) purgeWorkflow(m *PurgeWorkflow) error {
	it, ok := s.t.wfs.Get(wfItem{id: m.ID})
	switch {
	case !ok:
		return fmt.Errorf("purge workflow %s: no such workflow", m.ID)
	case !it.w.Status.Terminal():
		return fmt.Errorf("purge workflow %s: workflow is %s, want ended", m.ID, it.w.Status)
	}
	var members []*Task
	s.t.members.AscendGreaterOrEqual(memberItem{wf: m.ID}, func(mi memberItem) bool {
		if mi.wf != m.ID {
			return false
		}
		t, _ := s.t.get(mi.id)
		members = append(members, t)
		return true
	})
	for _, t := range members {
		if !t.Status.Terminal() {
			return fmt.Errorf("purge workflow %s: member %s is %s, want terminal", m.ID, t.ID, t.Status)
		}
		s.setTask(t, nil)
	}
	s.setWorkflow(it.w, nil)
	return nil
}

// ---------------------------------------------------------------------------
// Flow control (log format 4)
// ---------------------------------------------------------------------------

func (s *State) admit(index uint64, at Instant, m *Admit) error {
	cur, err := s.task("admit", m.ID)
	if err != nil {
		return err
	}
	if cur.Status != StatusParked {
		return fmt.Errorf("admit %s: task is %s, want parked", m.ID, cur.Status)
	}
	switch m.Status {
	case StatusQueued, StatusScheduled:
	case StatusBlocked:
		if len(cur.DependsOn()) == 0 {
			return fmt.Errorf("admit %s: blocked without dependencies", m.ID)
		}
	default:
		return fmt.Errorf("admit %s: status %s, want queued, scheduled or blocked", m.ID, m.Status)
	}
	t := cur.Clone()
	t.Status = m.Status
	t.ModifyIndex = index
	t.UpdatedAt = at
	s.setTask(cur, t)
	return nil
}

// putPool creates or replaces a pool's settings; p is owned by the state
// from here on.
func (s *State) putPool(index uint64, p *Pool) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("put pool %q: %w", p.Name, err)
	}
	old, _ := s.t.settings.Get(poolItem{name: p.Name})
	p.ModifyIndex = index
	s.setPool(old.p, p)
	return nil
}
