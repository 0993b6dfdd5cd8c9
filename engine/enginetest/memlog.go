// Package enginetest provides an in-memory engine.Log for tests: entries
// are applied to an fsm.State in order, on a goroutine of the log's own, with
// hooks to delay, pause, and fail appends and commits.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/fsm"
)

var (
	// ErrLeadershipLost is an injected commit error that leaves the outcome
	// unknown, like raft's ErrLeadershipLost.
	ErrLeadershipLost = errors.New("leadership lost while committing")
	// ErrNotLeader is an injected append error: the entry was not appended.
	ErrNotLeader = errors.New("node is not the leader")
	// ErrClosed is returned by Append after Close, and by Wait for entries
	// that were not applied before Close.
	ErrClosed = errors.New("log closed")
)

// Log is an in-memory engine.Log that applies its entries to an fsm.State
// with increasing indexes, asynchronously but in Append order.
type Log struct {
	state *fsm.State
	term  uint64

	kick chan struct{}
	quit chan struct{}
	done chan struct{}

	mu         sync.Mutex
	queue      []*Entry
	budget     int // entries that may still be applied; < 0 = no limit
	delay      time.Duration
	closed     bool
	calls      int // Append calls so far
	next       uint64
	entries    [][]byte
	failAppend map[int]error
	failWait   map[int]waitFault
	discard    bool // keep no copy of appended entries (see Discard)
}

type waitFault struct {
	err   error
	apply bool
}

var _ engine.Log = (*Log)(nil)

// New returns a log applying to state, starting after its applied index,
// with raft term 1. Close it when done.
func New(state *fsm.State) *Log {
	l := &Log{
		state:      state,
		term:       1,
		kick:       make(chan struct{}, 1),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
		budget:     -1,
		next:       state.AppliedIndex() + 1,
		failAppend: make(map[int]error),
		failWait:   make(map[int]waitFault),
	}
	go l.run()
	return l
}

// State returns the state the log applies to.
func (l *Log) State() *fsm.State { return l.state }

// SetDelay makes the log wait d before applying each entry.
func (l *Log) SetDelay(d time.Duration) {
	l.mu.Lock()
	l.delay = d
	l.mu.Unlock()
}

// Pause stops applying entries (appends still succeed) until Resume or
// Allow.
func (l *Log) Pause() {
	l.mu.Lock()
	l.budget = 0
	l.mu.Unlock()
}

// Resume applies entries again without limit.
func (l *Log) Resume() {
	l.mu.Lock()
	l.budget = -1
	l.mu.Unlock()
	l.wake()
}

// Allow lets n more entries apply while paused.
func (l *Log) Allow(n int) {
	l.mu.Lock()
	if l.budget >= 0 {
		l.budget += n
	}
	l.mu.Unlock()
	l.wake()
}

// FailAppend makes the n-th Append call (counting from 1 over the life of
// the log) fail with err: the entry is not appended.
func (l *Log) FailAppend(n int, err error) {
	l.mu.Lock()
	l.failAppend[n] = err
	l.mu.Unlock()
}

// FailWait makes the entry of the n-th Append call resolve with err. With
// apply it is applied all the same (committed, but its proposer lost
// track), otherwise it is dropped.
func (l *Log) FailWait(n int, err error, apply bool) {
	l.mu.Lock()
	l.failWait[n] = waitFault{err: err, apply: apply}
	l.mu.Unlock()
}

// Discard stops keeping a copy of every appended entry for Entries, as a
// raft log keeps its entries on disk rather than in memory: benchmarks that
// measure the engine's memory or throughput over millions of tasks call it
// before the first append. Entries and Appended then leave out what is
// appended after the call.
func (l *Log) Discard() {
	l.mu.Lock()
	l.discard = true
	l.mu.Unlock()
}

// Calls returns the number of Append calls so far.
func (l *Log) Calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// Appended returns the number of entries appended so far.
func (l *Log) Appended() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Entries returns the appended entries, in order.
func (l *Log) Entries() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.entries...)
}

// Append implements engine.Log.
func (l *Log) Append(data []byte) (engine.Pending, error) {
	ent, err := l.AppendEntry(data)
	if err != nil {
		return nil, err
	}
	return ent, nil
}

// AppendEntry appends data and returns the entry itself.
func (l *Log) AppendEntry(data []byte) (*Entry, error) {
	l.mu.Lock()
	l.calls++
	call := l.calls
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if err, ok := l.failAppend[call]; ok {
		l.mu.Unlock()
		return nil, err
	}
	data = append([]byte(nil), data...)
	ent := &Entry{data: data, done: make(chan struct{})}
	if f, ok := l.failWait[call]; ok {
		ent.fault = &f
	}
	if !l.discard {
		l.entries = append(l.entries, data)
	}
	l.queue = append(l.queue, ent)
	l.mu.Unlock()
	l.wake()
	return ent, nil
}

// Apply appends data and waits until it is applied, returning the FSM's
// response (for an epoch bump, the new epoch).
func (l *Log) Apply(ctx context.Context, data []byte) (any, error) {
	ent, err := l.AppendEntry(data)
	if err != nil {
		return nil, err
	}
	if err := ent.Wait(ctx); err != nil {
		return nil, err
	}
	return ent.Response(), nil
}

// BumpEpoch commits an epoch bump to epoch and waits for it.
func (l *Log) BumpEpoch(ctx context.Context, epoch uint64, leader string) error {
	data, err := fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: epoch, Leader: leader, Time: fsm.InstantOf(time.Now())})
	if err != nil {
		return fmt.Errorf("encoding epoch bump: %w", err)
	}
	resp, err := l.Apply(ctx, data)
	if err != nil {
		return fmt.Errorf("bumping epoch to %d: %w", epoch, err)
	}
	if got, ok := resp.(uint64); !ok || got != epoch {
		return fmt.Errorf("bumping epoch to %d: response %v", epoch, resp)
	}
	return nil
}

// Close stops applying: entries not applied yet resolve with ErrClosed, and
// later appends fail. It waits for the log's goroutine and is idempotent.
func (l *Log) Close() {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.quit)
	}
	l.mu.Unlock()
	<-l.done
}

func (l *Log) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *Log) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		if len(l.queue) == 0 || l.budget == 0 {
			l.mu.Unlock()
			select {
			case <-l.kick:
				continue
			case <-l.quit:
				l.failRest()
				return
			}
		}
		ent := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if l.budget > 0 {
			l.budget--
		}
		delay := l.delay
		l.mu.Unlock()

		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-l.quit:
				t.Stop()
				ent.resolve(nil, ErrClosed)
				l.failRest()
				return
			}
		}
		l.apply(ent)
	}
}

func (l *Log) apply(ent *Entry) {
	if ent.fault != nil && !ent.fault.apply {
		ent.resolve(nil, ent.fault.err)
		return
	}
	index := l.next
	l.next++
	resp := l.state.Apply(index, l.term, ent.data)
	ent.index = index
	var err error
	if e, ok := resp.(error); ok {
		err = e
	}
	if ent.fault != nil {
		err = ent.fault.err
	}
	ent.resolve(resp, err)
}

func (l *Log) failRest() {
	l.mu.Lock()
	rest := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, ent := range rest {
		ent.resolve(nil, ErrClosed)
	}
}

// Entry is one appended entry; it implements engine.Pending.
type Entry struct {
	data  []byte
	fault *waitFault

	done  chan struct{}
	index uint64
	resp  any
	err   error
}

func (e *Entry) resolve(resp any, err error) {
	e.resp, e.err = resp, err
	close(e.done)
}

// Wait implements engine.Pending: the FSM's error response, an injected
// error, ErrClosed, or ctx's error.
func (e *Entry) Wait(ctx context.Context) error {
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed once the entry is resolved.
func (e *Entry) Done() <-chan struct{} { return e.done }

// Index returns the log index the entry was applied at (0 when it was not
// applied). Valid once Done is closed.
func (e *Entry) Index() uint64 {
	<-e.done
	return e.index
}

// Response returns the FSM's response. Valid once Done is closed.
func (e *Entry) Response() any {
	<-e.done
	return e.resp
}
