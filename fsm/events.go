package fsm

// Status events are derived from applied entries: every change of a task's
// status, and the start and end of a workflow, as the state applies it.
// Since they come from the log, every replica derives the same events in
// the same order, with the same cursors, and any node can serve them.

// Event is one status transition, of a task or (TaskID empty,
// WorkflowStatus set) of a workflow.
type Event struct {
	// Cursor orders events: the log index of the entry that made the
	// transition and the event's place in that entry (see MakeCursor).
	Cursor  uint64
	TaskID  string
	Pool    string
	Kind    string // the task's kind, or the workflow's name
	Status  Status
	Attempt uint32
	Message string // the error of a failed or retried attempt
	At      Instant

	Workflow       string         // the task's workflow, or the workflow of a workflow event
	Step           string         // the task's step in its workflow
	WorkflowStatus WorkflowStatus // set for a workflow event only
}

// cursorSeqBits is the room for the events of one entry in a cursor: an
// entry is bounded by raft's entry size long before it holds 2^24 changes.
const cursorSeqBits = 24

// MaxCursorSeq is the number of events one entry can carry.
const MaxCursorSeq = 1<<cursorSeqBits - 1

// MakeCursor returns the cursor of the seq-th event (from 0) of the entry
// at index. Cursors grow with the log.
func MakeCursor(index uint64, seq int) uint64 {
	return index<<cursorSeqBits | uint64(seq)&MaxCursorSeq
}

// CursorIndex returns the log index of the entry an event of cursor c came
// from: every event of that entry and before it has a cursor <= the
// cursor of its last event.
func CursorIndex(c uint64) uint64 { return c >> cursorSeqBits }

// EndCursor returns the highest cursor an event of the entry at index can
// have: resuming after it skips that entry's events and no later one.
func EndCursor(index uint64) uint64 { return MakeCursor(index, MaxCursorSeq) }

// EventSink receives the events of each applied entry, in log order, while
// the state applies it (so it must not block or call back into the state).
// evs is only valid during the call.
type EventSink func(index uint64, evs []Event)

// SetEventSink sets the sink the events of each applied entry are handed
// to (nil: none). Entries applied before are not replayed.
func (s *State) SetEventSink(sink EventSink) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.sink = sink
}

// wantEvents reports whether anyone takes the events of the entry being
// applied, the sink or a subscription: otherwise they are not derived at
// all (their cursors are counted all the same, so that every replica hands
// out the same ones).
func (s *State) wantEvents() bool { return s.sink != nil || s.t.subs.Len() > 0 }

// maxScratchEvents bounds the event buffer kept between entries.
const maxScratchEvents = 4096

// taskEvent notes the change of task old into new if its status changed.
func (s *State) taskEvent(index uint64, old, new *Task) {
	if new == nil || (old != nil && old.Status == new.Status) {
		return
	}
	seq := s.seq
	s.seq++
	if !s.wantEvents() {
		return
	}
	ev := Event{
		Cursor:   MakeCursor(index, seq),
		TaskID:   new.ID,
		Pool:     new.Pool,
		Kind:     new.Kind,
		Status:   new.Status,
		Attempt:  new.Attempt,
		Message:  new.Error,
		At:       new.UpdatedAt,
		Workflow: new.Workflow(),
		Step:     new.Step(),
	}
	if s.t.subs.Len() > 0 {
		s.holdEvent(&ev)
	}
	if s.sink != nil {
		s.events = append(s.events, ev)
	}
}

// workflowEvent notes the change of workflow old into new if its status
// changed.
func (s *State) workflowEvent(index uint64, old, new *Workflow) {
	if new == nil || (old != nil && old.Status == new.Status) {
		return
	}
	seq := s.seq
	s.seq++
	if s.sink == nil {
		return // subscriptions take task events only
	}
	s.events = append(s.events, Event{
		Cursor:         MakeCursor(index, seq),
		Kind:           new.Name,
		At:             new.UpdatedAt,
		Workflow:       new.ID,
		WorkflowStatus: new.Status,
	})
}

// flushEvents hands the events of the entry just applied to the sink.
func (s *State) flushEvents(index uint64) {
	if len(s.events) == 0 {
		return
	}
	if s.sink != nil {
		s.sink(index, s.events)
	}
	if cap(s.events) > maxScratchEvents {
		s.events = nil
		return
	}
	clear(s.events)
	s.events = s.events[:0]
}
