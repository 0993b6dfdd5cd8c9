// Package history records what the fault-injection harness did and saw: one
// JSON object per line, in the order things happened. Every operation of a
// process is an invoke followed by its completion (ok, fail or info);
// observations that have no invocation (a worker receiving a grant) are
// written as a lone ok.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Type is the kind of a history entry.
type Type string

// Entry types, as in Jepsen: an invocation and its three possible ends.
const (
	Invoke Type = "invoke"
	// OK: the operation took effect (a read returned this value).
	OK Type = "ok"
	// Fail: the operation definitely did not take effect.
	Fail Type = "fail"
	// Info: the outcome is unknown (timeout, lost connection, outcome_unknown).
	Info Type = "info"
)

// Op is one line of history.jsonl.
type Op struct {
	Index int64 `json:"i"`
	Time  int64 `json:"t"` // monotonic nanoseconds since the start of the run
	// Wall is the harness's wall clock (Unix nanoseconds) when the op was
	// recorded. It is what compares with instants the nodes read from
	// their own wall clocks (cron slots): over a long run the wall clock
	// may drift or be stepped away from start + Time.
	Wall    int64  `json:"w,omitempty"`
	Process string `json:"p"`
	Type    Type   `json:"type"`
	F       string `json:"f"`
	Value   *Value `json:"v,omitempty"`
	Node    string `json:"node,omitempty"`
	Err     string `json:"err,omitempty"`
}

// Value is the payload of an operation. Each function uses the fields it
// needs; the rest stay empty.
type Value struct {
	// Tasks.
	Pool      string `json:"pool,omitempty"`
	Key       string `json:"key,omitempty"`
	ID        string `json:"id,omitempty"`
	Payload   string `json:"payload,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Token     uint64 `json:"token,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
	// Outcome of a completion: success, retryable or permanent.
	Outcome   string `json:"outcome,omitempty"`
	Output    string `json:"output,omitempty"`
	Status    string `json:"status,omitempty"`
	Found     *bool  `json:"found,omitempty"`
	Cancelled *bool  `json:"cancelled,omitempty"`
	// LastLease is what a cancel answered: the task's highest lease when
	// the cancel took effect (0: it never ran).
	LastLease *uint64 `json:"last_lease,omitempty"`
	Worker    string  `json:"worker,omitempty"`
	// Code is the error kind a node answered with (stale_lease, ...).
	Code string `json:"code,omitempty"`

	// Ordering lanes. OrderingKey is a task's ordering key; Keys and IDs
	// are the idempotency keys of a submitted batch (in spec order) and
	// the task ids it was answered with.
	OrderingKey string   `json:"okey,omitempty"`
	Keys        []string `json:"keys,omitempty"`
	IDs         []string `json:"ids,omitempty"`

	// Workflows. Workflow is a workflow id, Step a step name; Policy the
	// dependency policy of a granted task; Deps the dependencies as a grant
	// reported them; Steps the step -> task id answer of a workflow
	// submit; Children and Then the step names a completion spawned; Count
	// the members a workflow cancel ended; Shape describes a submitted
	// workflow's graph.
	Workflow string            `json:"workflow,omitempty"`
	Step     string            `json:"step,omitempty"`
	Policy   string            `json:"policy,omitempty"`
	Deps     []DepState        `json:"deps,omitempty"`
	Steps    map[string]string `json:"steps,omitempty"`
	Children []string          `json:"children,omitempty"`
	Then     string            `json:"then,omitempty"`
	Count    int               `json:"count,omitempty"`
	Shape    string            `json:"shape,omitempty"`

	// Durable subscriptions. Subscription names one, Statuses its status
	// filter (with Pool); Session numbers a consumer's read streams; Events
	// are what a read delivered, what a consumer discarded, or what an ack
	// acknowledges; Cursor is an ack's cursor or a subscription's durable
	// one.
	Subscription string       `json:"sub,omitempty"`
	Statuses     []string     `json:"statuses,omitempty"`
	Session      int          `json:"session,omitempty"`
	Cursor       uint64       `json:"cursor,omitempty"`
	Events       []EventState `json:"events,omitempty"`

	// Schedules.
	Schedule string `json:"schedule,omitempty"`
	Cron     string `json:"cron,omitempty"`
	Slot     int64  `json:"slot,omitempty"` // unix ns
	Paused   *bool  `json:"paused,omitempty"`
	Removed  *bool  `json:"removed,omitempty"`

	// Nemesis.
	Nemesis   string              `json:"nemesis,omitempty"`
	Targets   []string            `json:"targets,omitempty"`
	Grudge    map[string][]string `json:"grudge,omitempty"` // dst -> srcs dropped
	Scenarios []int               `json:"scenarios,omitempty"`
	OffsetMS  int64               `json:"offset_ms,omitempty"`
	Rate      float64             `json:"rate,omitempty"`
	Detail    string              `json:"detail,omitempty"`

	// Final reads.
	Tasks     []TaskState     `json:"tasks,omitempty"`
	Schedules []ScheduleState `json:"schedules,omitempty"`
	Workflows []WorkflowState `json:"workflows,omitempty"`
	// WorkflowKeys maps each key a final read looked up to the workflow it
	// names ("" when none).
	WorkflowKeys map[string]string   `json:"workflow_keys,omitempty"`
	Hashes       map[string]NodeHash `json:"hashes,omitempty"`
	Counts       map[string]int64    `json:"counts,omitempty"`
	Extra        map[string]string   `json:"extra,omitempty"`
}

// TaskState is a task as a final read saw it.
type TaskState struct {
	ID          string `json:"id"`
	Pool        string `json:"pool"`
	Key         string `json:"key"`
	Status      string `json:"status"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	Lease       uint64 `json:"lease,omitempty"`
	Payload     string `json:"payload,omitempty"`
	Output      string `json:"output,omitempty"`
	Error       string `json:"error,omitempty"`
	Schedule    string `json:"schedule,omitempty"`
	Slot        int64  `json:"slot,omitempty"`
	OrderingKey string `json:"okey,omitempty"`
	// Workflows: its workflow and step, the task whose spawn created it,
	// its dependencies (ids) and their policy.
	Workflow  string   `json:"workflow,omitempty"`
	Step      string   `json:"step,omitempty"`
	Parent    string   `json:"parent,omitempty"`
	DependsOn []string `json:"depends_on,omitempty"`
	Policy    string   `json:"policy,omitempty"`
}

// EventState is a status event as a subscription delivered it.
type EventState struct {
	Cursor  uint64 `json:"c"`
	ID      string `json:"id"`
	Pool    string `json:"pool"`
	Status  string `json:"st"`
	Attempt int    `json:"a,omitempty"`
}

// DepState is a dependency of a granted task as the grant reported it.
type DepState struct {
	ID     string `json:"id"`
	Step   string `json:"step,omitempty"`
	Status string `json:"status"`
}

// WorkflowState is a workflow and its members as a final read saw them.
type WorkflowState struct {
	ID      string      `json:"id"`
	Name    string      `json:"name"`
	Key     string      `json:"key"`
	Status  string      `json:"status"`
	Parent  string      `json:"parent,omitempty"`
	Members []TaskState `json:"members"`
}

// ScheduleState is a recurring schedule as a final read saw it.
type ScheduleState struct {
	Name     string `json:"name"`
	Cron     string `json:"cron"`
	Paused   bool   `json:"paused"`
	LastFire int64  `json:"last_fire"` // unix ns, 0 = none
	NextFire int64  `json:"next_fire"`
	Fires    uint64 `json:"fires"`
	Skipped  uint64 `json:"skipped"`
	LastTask string `json:"last_task,omitempty"`
}

// NodeHash is one node's FSM fingerprint.
type NodeHash struct {
	AppliedIndex uint64 `json:"applied_index"`
	Hash         string `json:"hash"`
	Err          string `json:"err,omitempty"`
}

// Recorder appends operations to a history file and keeps them in memory.
// It is safe for concurrent use.
type Recorder struct {
	start time.Time

	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	ops  []Op
	err  error
	stop chan struct{}
	done chan struct{}
}

// syncEvery is how often buffered history is written and fsynced.
const syncEvery = 200 * time.Millisecond

// NewRecorder creates path and records into it; start is time zero.
func NewRecorder(path string, start time.Time) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating history: %w", err)
	}
	r := &Recorder{start: start, f: f, w: bufio.NewWriterSize(f, 1<<20), stop: make(chan struct{}), done: make(chan struct{})}
	go r.syncLoop()
	return r, nil
}

func (r *Recorder) syncLoop() {
	defer close(r.done)
	t := time.NewTicker(syncEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			r.flushLocked()
			r.mu.Unlock()
		}
	}
}

func (r *Recorder) flushLocked() {
	if r.err != nil || r.f == nil {
		return
	}
	if err := r.w.Flush(); err != nil {
		r.err = fmt.Errorf("writing history: %w", err)
		return
	}
	if err := r.f.Sync(); err != nil {
		r.err = fmt.Errorf("syncing history: %w", err)
	}
}

// Now is the time since the start, in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Start is time zero of the history.
func (r *Recorder) Start() time.Time { return r.start }

// Add records op, setting its index and (when zero) its time, and returns
// the recorded op.
func (r *Recorder) Add(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op.Time == 0 {
		op.Time = int64(time.Since(r.start))
	}
	if op.Wall == 0 {
		op.Wall = time.Now().UnixNano()
	}
	if n := len(r.ops); n > 0 && op.Time < r.ops[n-1].Time {
		// Keep the file ordered by time: a caller that took its timestamp
		// before another's write gets the later one's.
		op.Time = r.ops[n-1].Time
	}
	op.Index = int64(len(r.ops))
	r.ops = append(r.ops, op)
	if r.err == nil && r.w != nil {
		b, err := json.Marshal(op)
		if err == nil {
			b = append(b, '\n')
			_, err = r.w.Write(b)
		}
		if err != nil {
			r.err = fmt.Errorf("writing history: %w", err)
		}
	}
	return op
}

// Invoke records the invocation of f by process p and returns a function
// that records its completion.
func (r *Recorder) Invoke(p, f, node string, v *Value) func(t Type, v *Value, err error) Op {
	r.Add(Op{Process: p, Type: Invoke, F: f, Value: v, Node: node})
	return func(t Type, rv *Value, err error) Op {
		op := Op{Process: p, Type: t, F: f, Value: rv, Node: node}
		if err != nil {
			op.Err = err.Error()
		}
		return r.Add(op)
	}
}

// Ops returns a copy of everything recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Err returns the first write error, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close flushes, syncs and closes the file.
func (r *Recorder) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.err
	}
	r.flushLocked()
	cerr := r.f.Close()
	r.f = nil
	return errors.Join(r.err, cerr)
}

// Read parses a history file.
func Read(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading history: %w", err)
	}
	defer f.Close()
	return Decode(f)
}

// Decode parses history lines from rd.
func Decode(rd io.Reader) ([]Op, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	var ops []Op
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history line %d: %w", line, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading history: %w", err)
	}
	return ops, nil
}

// Pair is an invocation and its completion (nil when the history ended
// first, or for a lone completion: then Invoke is nil).
type Pair struct {
	Invoke     *Op
	Completion *Op
}

// Type is the completion's type, or Info when the operation never completed.
func (p Pair) Type() Type {
	if p.Completion == nil {
		return Info
	}
	return p.Completion.Type
}

// Value returns the invocation's value merged with the completion's
// (completion fields win when both are set is up to the caller: this returns
// the completion's value when present, else the invocation's).
func (p Pair) Value() *Value {
	if p.Completion != nil && p.Completion.Value != nil {
		return p.Completion.Value
	}
	if p.Invoke != nil && p.Invoke.Value != nil {
		return p.Invoke.Value
	}
	return &Value{}
}

// InvokeValue returns the invocation's value (or the completion's for a lone
// completion).
func (p Pair) InvokeValue() *Value {
	if p.Invoke != nil && p.Invoke.Value != nil {
		return p.Invoke.Value
	}
	if p.Completion != nil && p.Completion.Value != nil {
		return p.Completion.Value
	}
	return &Value{}
}

// F is the operation's function.
func (p Pair) F() string {
	if p.Invoke != nil {
		return p.Invoke.F
	}
	return p.Completion.F
}

// Process is the operation's process.
func (p Pair) Process() string {
	if p.Invoke != nil {
		return p.Invoke.Process
	}
	return p.Completion.Process
}

// Start is when the operation was invoked (the completion's time for a lone
// completion).
func (p Pair) Start() int64 {
	if p.Invoke != nil {
		return p.Invoke.Time
	}
	return p.Completion.Time
}

// StartWall is the wall-clock time of Start: the recorded one, or base +
// Start for histories without it (base: the wall time of time zero).
func (p Pair) StartWall(base int64) int64 {
	op := p.Invoke
	if op == nil {
		op = p.Completion
	}
	if op.Wall != 0 {
		return op.Wall
	}
	return base + op.Time
}

// EndWall is the wall-clock time of End (-1 when it never completed), as
// StartWall.
func (p Pair) EndWall(base int64) int64 {
	if p.Completion == nil {
		return -1
	}
	if p.Completion.Wall != 0 {
		return p.Completion.Wall
	}
	return base + p.Completion.Time
}

// End is when the operation completed, or -1 when it never did.
func (p Pair) End() int64 {
	if p.Completion == nil {
		return -1
	}
	return p.Completion.Time
}

// Node is the node the operation was sent to.
func (p Pair) Node() string {
	if p.Invoke != nil && p.Invoke.Node != "" {
		return p.Invoke.Node
	}
	if p.Completion != nil {
		return p.Completion.Node
	}
	return ""
}

// Pairs matches every invocation with the next entry of the same process
// and function, in history order. Entries that complete nothing become lone
// pairs.
func Pairs(ops []Op) []Pair {
	var out []Pair
	open := make(map[string]int) // process -> index into out
	for i := range ops {
		op := &ops[i]
		switch op.Type {
		case Invoke:
			// A previous invocation still open never completed.
			out = append(out, Pair{Invoke: op})
			open[op.Process] = len(out) - 1
		default:
			if j, ok := open[op.Process]; ok && out[j].Invoke.F == op.F {
				out[j].Completion = op
				delete(open, op.Process)
				continue
			}
			out = append(out, Pair{Completion: op})
		}
	}
	return out
}
