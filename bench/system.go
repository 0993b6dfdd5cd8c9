package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The systems, in the order they are alternated.
var allSystems = []string{"cronoq", "cronoq-secure", "cronoq-sub", "river", "river-tuned", "asynq-always", "asynq-always-tuned", "asynq-everysec", "asynq-everysec-tuned", "raft"}

// defaultSystems are those run without -systems: cronoq-secure is cronoq
// with TLS and ACLs, cronoq-sub cronoq with a durable subscription read
// all along, for measuring their cost against cronoq. Every peer runs
// twice: with its library's defaults and tuned (the *-tuned systems, see
// riverTuning and asynqTuning).
var defaultSystems = []string{"cronoq", "river", "river-tuned", "asynq-always", "asynq-always-tuned", "asynq-everysec", "asynq-everysec-tuned", "raft"}

// isCronoq reports whether the system is a cronoq cluster.
func isCronoq(name string) bool {
	return name == "cronoq" || name == "cronoq-secure" || name == "cronoq-sub"
}

// PayloadSize is the size of every task's payload.
const PayloadSize = 256

// errNoBatch is returned by EnqueueBatch of a system without a batch API.
var errNoBatch = errors.New("no batch enqueue API")

// System is one task queue under test, started fresh for every cell.
type System interface {
	// Name is the short name used in tables.
	Name() string
	// Copies is the number of durable copies an acknowledged write has.
	Copies() int
	// Durability describes what an acknowledgement guarantees.
	Durability() string
	// Start starts the servers with their data under dir and connects.
	Start(ctx context.Context, dir string) error
	// Stop disconnects and stops the servers.
	Stop() error
	// ServerPIDs are the roots of the server process trees.
	ServerPIDs() []int
	// Enqueue enqueues task seq and returns once it is acknowledged.
	Enqueue(ctx context.Context, seq int) error
	// Batches reports whether the system has a batch enqueue API.
	Batches() bool
	// EnqueueBatch enqueues the tasks in one call, or returns errNoBatch.
	EnqueueBatch(ctx context.Context, seqs []int) error
	// StartWorkers starts no-op workers that report to h.
	StartWorkers(ctx context.Context, h Hooks) error
	// StopWorkers stops the workers.
	StopWorkers() error
	// Completed is the number of completed tasks as the store reports it.
	Completed(ctx context.Context) (int64, error)
	// Config describes the settings used, for the report.
	Config() string
}

func newSystem(env *Env, name string) (System, error) {
	switch name {
	case "cronoq":
		return &cronoqSys{env: env}, nil
	case "cronoq-secure":
		return &cronoqSys{env: env, secureTLS: true}, nil
	case "cronoq-sub":
		return &cronoqSys{env: env, subscribe: true}, nil
	case "river":
		return &riverSys{env: env}, nil
	case "river-tuned":
		return &riverSys{env: env, tuned: true}, nil
	case "asynq-always":
		return &asynqSys{env: env, fsync: "always"}, nil
	case "asynq-always-tuned":
		return &asynqSys{env: env, fsync: "always", tuned: true}, nil
	case "asynq-everysec":
		return &asynqSys{env: env, fsync: "everysec"}, nil
	case "asynq-everysec-tuned":
		return &asynqSys{env: env, fsync: "everysec", tuned: true}, nil
	}
	return nil, fmt.Errorf("unknown system %q", name)
}

// Setting is one setting of a system under test, with its value and where
// it comes from ("default", a flag, a minimum the library enforces).
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// settingsString joins settings into one line for Config.
func settingsString(ss []Setting) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.Name + ": " + s.Value
	}
	return strings.Join(parts, "; ")
}

// settinger is a system that lists its settings one by one (the peers),
// so that the report can set default and tuned side by side.
type settinger interface {
	Settings() []Setting
}

// payload returns the 256-byte payload of task seq: its number in 16 hex
// digits, then filler.
func payload(seq int) []byte {
	b := make([]byte, PayloadSize)
	hex.Encode(b[:16], []byte{
		byte(seq >> 56), byte(seq >> 48), byte(seq >> 40), byte(seq >> 32),
		byte(seq >> 24), byte(seq >> 16), byte(seq >> 8), byte(seq),
	})
	for i := 16; i < PayloadSize; i++ {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

// fanOutPayload is the payload of W4's root task seq: payload(seq) with the
// number of children to spawn in the 16 hex digits that follow the
// sequence.
func fanOutPayload(seq, children int) []byte {
	b := payload(seq)
	copy(b[16:32], fmt.Sprintf("%016x", uint64(children)))
	return b
}

// fanOutOf reads the task number and the number of children back from a
// root's payload.
func fanOutOf(p []byte) (seq, children int, err error) {
	if seq, err = seqOf(p); err != nil {
		return 0, 0, err
	}
	if len(p) < 32 {
		return 0, 0, fmt.Errorf("fan-out payload of %d bytes", len(p))
	}
	n, err := strconv.ParseUint(string(p[16:32]), 16, 31)
	if err != nil {
		return 0, 0, fmt.Errorf("fan-out payload children: %w", err)
	}
	return seq, int(n), nil
}

// seqOf reads the task number back from a payload.
func seqOf(p []byte) (int, error) {
	if len(p) < 16 {
		return 0, fmt.Errorf("payload of %d bytes", len(p))
	}
	v, err := strconv.ParseUint(string(p[:16]), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("payload prefix: %w", err)
	}
	return int(v), nil
}

// Hooks are what workers report about a task: Start when a handler begins
// an attempt of it, Done once its completion is durable (as far as the
// worker can know). Child and Then are W4's: Child when a handler begins
// an attempt of a spawned child, Then when one begins the continuation,
// with its task id and the number of dependencies its grant carried. Nil
// hooks are not called.
type Hooks struct {
	Start func(seq int)
	Done  func(seq int)
	Child func()
	Then  func(id string, deps int)
}

// FanOuter is a system whose handlers can spawn children, and a
// continuation that depends on all of them, with a task's completion (W4).
type FanOuter interface {
	// SubmitFanOut submits task seq of the root kind, whose handler spawns
	// children no-op children and the continuation, and returns its id once
	// the submit is acknowledged.
	SubmitFanOut(ctx context.Context, seq, children int) (string, error)
	// WaitSucceeded waits until task id ends and returns an error unless it
	// succeeded.
	WaitSucceeded(ctx context.Context, id string) error
}

// fanOutSkip says why a system does not run W4, "" for one that does.
func fanOutSkip(name string) string {
	if isCronoq(name) {
		return ""
	}
	return "no equivalent: the library has no task dependencies, so nothing can wait for spawned children"
}

// tracker records, per task, when it was (to be) submitted and when its
// completion became durable.
type tracker struct {
	base    time.Time
	n       int
	sched   []int64 // ns since base: the scheduled (W3) or actual submit time
	acked   []int64 // ns since base: submit acknowledged; 0 = not
	started []int64 // ns since base: a handler first began it; 0 = not
	done    []int64 // ns since base: completion durable; 0 = not
	count   atomic.Int64
	dups    atomic.Int64
	strays  atomic.Int64
	lastNs  atomic.Int64
	target  int64
	reached chan struct{}
}

func newTracker(n int) *tracker {
	return &tracker{
		base:    time.Now(),
		n:       n,
		sched:   make([]int64, n),
		acked:   make([]int64, n),
		started: make([]int64, n),
		done:    make([]int64, n),
		target:  int64(n),
		reached: make(chan struct{}),
	}
}

func (t *tracker) now() int64 { return max(int64(time.Since(t.base)), 1) }

// hooks are the tracker's worker hooks.
func (t *tracker) hooks() Hooks { return Hooks{Start: t.start, Done: t.complete} }

// start records when a handler first began task seq.
func (t *tracker) start(seq int) {
	if seq >= 0 && seq < t.n {
		atomic.CompareAndSwapInt64(&t.started[seq], 0, t.now())
	}
}

// complete records the durable completion of task seq (once).
func (t *tracker) complete(seq int) {
	if seq < 0 || seq >= t.n {
		t.strays.Add(1)
		return
	}
	now := t.now()
	if !atomic.CompareAndSwapInt64(&t.done[seq], 0, now) {
		t.dups.Add(1)
		return
	}
	for {
		last := t.lastNs.Load()
		if now <= last || t.lastNs.CompareAndSwap(last, now) {
			break
		}
	}
	if t.count.Add(1) == t.target {
		close(t.reached)
	}
}

// firstError keeps the first error set.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
