// Package core is the deterministic heart of cronoq's scheduler: a step
// function that turns commands (submit, poll, heartbeat, complete, cancel,
// timer ticks) into durable mutations plus actions.
//
// The core reads no clock (every call takes now), uses no global randomness
// (jitter comes from a PRNG seeded through Config), never iterates a map in a
// way that reaches its outputs, and starts no goroutines. One goroutine, the
// driver in package engine, owns a Core and performs its outputs: it commits
// the mutations as one log entry and releases the held actions, in order,
// once that entry is durable.
package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// ReqID identifies one caller request inside the driver. The core echoes it
// in the Reply or Dispatch that answers the request.
type ReqID uint64

// Spec is a task to submit: its template, plus what only a submit carries.
// Zero fields of the template take the defaults of Config.
type Spec struct {
	fsm.Template
	Key      string        // idempotency key; "" = none
	RunAt    fsm.Instant   // 0 = now (unless Delay)
	Delay    time.Duration // relative to now; exclusive with RunAt
	Deadline fsm.Instant   // 0 = none

	// DependsOn names the tasks it waits for: existing tasks, by id or key,
	// or, by key, specs earlier in the same atomic batch. While any has not
	// ended the task is blocked. Log format 3, like DepPolicy and External.
	DependsOn []TaskRef
	DepPolicy fsm.DepPolicy // when it may run once they end
	// External tasks are never dispatched: they wait until CompleteExternal
	// ends them (an approval, a callback), or their deadline passes.
	External bool
}

// StepSpec is one step of a workflow: a task under a name, which the
// workflow's other steps use to depend on it.
type StepSpec struct {
	Spec
	Name string // unique in the workflow; may be empty for spawned children
	// DependsOnSteps names the steps it depends on: earlier steps of the
	// same submit (or spawn), or existing steps of the workflow.
	DependsOnSteps []string
}

// WorkflowSpec is a workflow to submit: its steps, inserted atomically.
type WorkflowSpec struct {
	Name  string
	Key   string // idempotency key of the workflow; "" = none
	Steps []StepSpec
}

// WorkflowSubmitted answers a workflow submit: the workflow and its tasks,
// one per step in step order (a duplicate answers with the existing
// workflow's named members, in id order).
type WorkflowSubmitted struct {
	ID        string
	Duplicate bool // the key already named this workflow
	Tasks     []StepTask
}

// StepTask is the task of one step of a workflow.
type StepTask struct {
	Step string
	ID   string
}

// WorkflowRef names a workflow by id or by idempotency key (exactly one is
// set).
type WorkflowRef struct {
	ID  string
	Key string
}

func (r WorkflowRef) String() string {
	if r.ID != "" {
		return r.ID
	}
	return "key " + r.Key
}

// CancelledWorkflow answers a workflow cancel: the workflow, and how many
// of its members this call ended.
type CancelledWorkflow struct {
	ID        string
	Cancelled int
}

// SubmitMode selects one of the three submit forms.
type SubmitMode uint8

const (
	SubmitOne   SubmitMode = iota // one spec
	SubmitBatch                   // atomic: all admitted or none, one error for the whole
	SubmitMany                    // enqueue-many: each item admitted or refused on its own
)

// Submitted is the answer for one admitted spec.
type Submitted struct {
	ID        string
	Duplicate bool // the idempotency key already named this task
}

// SubmitResult answers a submit: one Submitted per spec, in order; with
// SubmitMany, Errs holds the error of each refused item (nil where
// admitted, where Tasks[i] is zero).
type SubmitResult struct {
	Tasks []Submitted
	Errs  []error
}

// Outcome is what a worker reports for an attempt.
type Outcome struct {
	Kind       OutcomeKind
	Output     []byte        // with OutcomeSuccess
	Message    string        // with failures
	RetryAfter time.Duration // with OutcomeRetryable: overrides the backoff when > 0

	// Children are tasks a successful attempt spawns, inserted in the same
	// commit as its completion, in the task's workflow (one is created for
	// them when the task had none). Then, when set, is a continuation that
	// depends on every child. Log format 3.
	Children []StepSpec
	Then     *StepSpec
}

// OutcomeKind classifies an attempt's end.
type OutcomeKind uint8

const (
	OutcomeSuccess   OutcomeKind = iota
	OutcomeRetryable             // retried with backoff while attempts remain
	OutcomePermanent             // the task fails now
	OutcomeCancelled             // the attempt was cancelled by the worker: the task ends cancelled
)

// TaskRef names a task by id or by idempotency key (exactly one is set).
type TaskRef struct {
	ID  string
	Key string
}

func (r TaskRef) String() string {
	if r.ID != "" {
		return r.ID
	}
	return "key " + r.Key
}

// Check refuses a reference that names no task or names it twice.
func (r TaskRef) Check() error {
	switch {
	case r.ID != "" && r.Key != "":
		return Invalid("ref", "give an id or a key, not both")
	case r.ID == "" && r.Key == "":
		return Invalid("ref", "an id or a key is required")
	}
	return nil
}

// Offer is a worker's poll: it can run up to Slots more attempts of Pool on
// capacity with Labels.
type Offer struct {
	Worker string
	Pool   string
	Labels []fsm.KV
	Slots  int
}

// Grant is one dispatched attempt: the worker runs task ID under Lease.
type Grant struct {
	ID      string
	Lease   uint64
	Attempt uint32
}

// Cancelled answers a cancel: the task, and whether this call ended it
// (false when it had ended already).
type Cancelled struct {
	ID        string
	Cancelled bool
	// LastLease is the highest lease ever granted to the task when the
	// cancel was applied (0: it never ran): no later lease exists.
	LastLease uint64
}

// ScheduleSpec creates or replaces a recurring schedule.
type ScheduleSpec struct {
	Name string
	Cron string
	TZ   string
	Task fsm.Template // what each fire submits; zero fields take the defaults at each fire
	// Workflow and Steps, when Steps is set, are the workflow each fire
	// submits instead of one task (Task is then zero). Log format 3.
	Workflow     string
	Steps        []fsm.StepTemplate
	Overlap      fsm.Overlap
	CatchUp      fsm.CatchUp
	CatchUpLimit uint32
	Paused       bool
}

// ---------------------------------------------------------------------------
// Outputs
// ---------------------------------------------------------------------------

// Output is what the core produced since the last call to Ready, by kind.
//
// Mutations are committed, in order, as part of the next batch. Replies,
// Dispatches and Events are held: released only once Mutations and
// everything produced before them are durable, each list in order (if the
// commit fails, replies and dispatches get the commit error and events are
// dropped). Aborts take effect at once.
type Output struct {
	Mutations  []fsm.Mutation
	Replies    []Reply
	Dispatches []Dispatch
	Events     []Event
	Aborts     []Abort
	// Redeliveries and Notices take effect at once, like Aborts.
	Redeliveries []Redelivery
	Notices      []Notice
}

// Empty reports whether o carries nothing.
func (o *Output) Empty() bool {
	return len(o.Mutations) == 0 && !o.Holds() && len(o.Aborts) == 0 && len(o.Redeliveries) == 0 && len(o.Notices) == 0
}

// Holds reports whether o has actions to hold until its mutations commit.
func (o *Output) Holds() bool {
	return len(o.Replies) > 0 || len(o.Dispatches) > 0 || len(o.Events) > 0
}

// Reply answers request Req: Err, or the value the request's method
// documents (a *SubmitResult, a Cancelled, a task id...).
type Reply struct {
	Req   ReqID
	Value any
	Err   error
}

// Dispatch answers poll Req: the attempts granted, or Err (the poll was
// refused).
type Dispatch struct {
	Req    ReqID
	Grants []Grant
	Err    error
}

// Abort tells Worker to stop the attempt under Lease, which is no longer
// the task's (cancelled, timed out, lost, expired).
type Abort struct {
	Worker string
	Lease  uint64
	Reason string
}

// Event is a durable status transition of a task, or of a workflow: a
// workflow event has no TaskID and sets WorkflowStatus (its start and its
// end).
type Event struct {
	TaskID  string
	Pool    string
	Kind    string
	Status  fsm.Status
	Attempt uint32
	Message string
	At      fsm.Instant

	Workflow       string             // the workflow of the task, or the workflow of a workflow event
	Step           string             // the task's step in its workflow
	WorkflowStatus fsm.WorkflowStatus // set for a workflow event only
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

var (
	// ErrOverloaded: the submit does not fit the bounds and the overflow
	// policy is reject (or it could never fit, even into empty queues).
	ErrOverloaded = errors.New("overloaded: pending bound reached")
	// ErrNotFound: no task (or schedule) with that id, key or name.
	ErrNotFound = errors.New("not found")
	// ErrStaleLease: the lease is not the task's current lease.
	ErrStaleLease = errors.New("stale lease: not the task's current lease")
	// ErrShuttingDown: the engine stops admitting work.
	ErrShuttingDown = errors.New("shutting down")
	// ErrNotWaiting: CompleteExternal on a task that is not an external
	// task waiting for its completion.
	ErrNotWaiting = errors.New("not waiting for an external completion")
)

// VersionError refuses an operation that needs a log format newer than
// every server of the cluster understands (Config.LogVersion): its entry
// would stop the servers that cannot apply it. Upgrading them lifts it.
type VersionError struct {
	What string // the operation, or what in it needs the version
	Need uint16 // the log format it needs
	Have uint16 // the newest log format every server understands
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("%s needs log format version %d, but some server of the cluster understands only %d: upgrade every server first", e.What, e.Need, e.Have)
}

// InvalidError is a request refused for a bad field. It names the field.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

// Invalid returns an *InvalidError.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// prefixed names the field of an *InvalidError inside a part of the
// request ("specs[2]." + "kind"); other errors are returned unchanged.
func prefixed(prefix string, err error) error {
	if ie, ok := err.(*InvalidError); ok {
		return &InvalidError{Field: prefix + ie.Field, Reason: ie.Reason}
	}
	return err
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

// OverflowPolicy decides what a submit that does not fit the bounds does.
type OverflowPolicy = fsm.Overflow

const (
	OverflowReject = fsm.OverflowReject // answer ErrOverloaded at once
	OverflowWait   = fsm.OverflowWait   // hold the submitter FIFO per (pool, class) until space frees
	OverflowPark   = fsm.OverflowPark   // accept the tasks as parked, admitted FIFO per (pool, class) as space frees
)

// Bounds limit pending tasks (scheduled, queued or retrying). Zero = no limit.
type Bounds struct {
	MaxPending         int
	MaxPendingPerClass [fsm.NumPriorities]int
}

// PoolConfig is the configuration of one pool. Zero fields mean no limit
// or, for the task defaults, the engine's.
type PoolConfig struct {
	Bounds     Bounds
	MaxRunning int            // hard cap on running attempts across all workers; 0 = none
	Overflow   OverflowPolicy // what a submit that does not fit does

	// Rate limits dispatches to Rate per second, with bursts of Burst
	// (at least 1); per kind, KindRates too. 0 = no limit.
	Rate      float64
	Burst     int
	KindRates map[string]Rate

	// ConcurrencyLimit caps the running tasks of one concurrency key
	// (0 = 1).
	ConcurrencyLimit int
	// Ordering is what a lane does when its head ends without succeeding.
	Ordering fsm.OrderingPolicy

	MaxAttempts uint32        // default for its tasks (0 = Config.MaxAttempts)
	Backoff     fsm.Backoff   // default for its tasks (zero = Config.Backoff)
	LeaseGrace  time.Duration // for its running attempts at recovery (0 = Config.LeaseGrace)
	Paused      bool          // accepts tasks, dispatches none

	// Kinds holds the settings of its kinds that have any: schemas and
	// defaults that take precedence over the pool's.
	Kinds map[string]fsm.KindSettings
}

// Rate is a dispatch rate limit: Per second, in bursts of up to Burst.
type Rate struct {
	Per   float64
	Burst int
}

// Config is the engine's configuration. Zero fields take the defaults of
// DefaultConfig through WithDefaults.
type Config struct {
	HeartbeatWindow time.Duration // lease lost after this without a heartbeat (10s)
	LeaseGrace      time.Duration // window given to running attempts at recovery (= HeartbeatWindow)
	MaxAttempts     uint32        // default per task (5)
	Backoff         fsm.Backoff   // default per task (1s doubling, cap 5m, ±20%)
	Retention       time.Duration // how long terminal tasks are kept (24h)
	// RetentionCap bounds how long past its end a task is kept while a
	// subscription has not acked an event of it (10 x Retention);
	// HoldRecheck is how often such a task is looked at again (1m, at
	// most Retention).
	RetentionCap time.Duration
	HoldRecheck  time.Duration
	MaxPayload   int // bytes (1 MiB)
	MaxOutput    int // bytes (1 MiB)
	MaxKindLen   int // bytes (256)

	Global      Bounds     // across all pools (none)
	DefaultPool PoolConfig // pools not listed in Pools (1,000,000 pending)
	Pools       map[string]PoolConfig
	FixedPools  bool // refuse pools not listed in Pools

	// LogVersion is the newest log format every server of the cluster
	// understands (fsm.LogVersion by default): operations that need a newer
	// one are refused with a *VersionError. SetLogVersion changes it.
	LogVersion uint16

	// Seed seeds the PRNG used for backoff jitter. The driver passes a fresh
	// random value; tests pass a fixed one.
	Seed uint64
}

// DefaultConfig returns the defaults of SEMANTICS.md.
func DefaultConfig() Config {
	return Config{
		HeartbeatWindow: 10 * time.Second,
		LeaseGrace:      10 * time.Second,
		MaxAttempts:     5,
		Backoff: fsm.Backoff{
			Initial: time.Second,
			Max:     5 * time.Minute,
			Jitter:  0.2,
		},
		Retention:   24 * time.Hour,
		MaxPayload:  1 << 20,
		MaxOutput:   1 << 20,
		MaxKindLen:  256,
		DefaultPool: PoolConfig{Bounds: Bounds{MaxPending: 1_000_000}},
	}
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.HeartbeatWindow <= 0 {
		c.HeartbeatWindow = d.HeartbeatWindow
	}
	if c.LeaseGrace <= 0 {
		c.LeaseGrace = c.HeartbeatWindow
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	// A zero Backoff takes the default as a whole; a partly set one keeps
	// its Jitter (0 = no jitter) and gets the default Initial and Max.
	if c.Backoff == (fsm.Backoff{}) {
		c.Backoff = d.Backoff
	}
	if c.Backoff.Initial <= 0 {
		c.Backoff.Initial = d.Backoff.Initial
	}
	if c.Backoff.Max <= 0 {
		c.Backoff.Max = max(d.Backoff.Max, c.Backoff.Initial)
	}
	if c.Retention <= 0 {
		c.Retention = d.Retention
	}
	if c.RetentionCap <= 0 {
		c.RetentionCap = 10 * c.Retention
	}
	if c.HoldRecheck <= 0 {
		c.HoldRecheck = min(time.Minute, c.Retention)
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = d.MaxPayload
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = d.MaxOutput
	}
	if c.MaxKindLen <= 0 {
		c.MaxKindLen = d.MaxKindLen
	}
	if c.DefaultPool.Bounds == (Bounds{}) && c.DefaultPool.MaxRunning == 0 {
		c.DefaultPool.Bounds = d.DefaultPool.Bounds
	}
	if c.LogVersion == 0 {
		c.LogVersion = fsm.LogVersion
	}
	return c
}

// Validate checks the configuration and names the offending field.
func (c Config) Validate() error {
	switch {
	case c.HeartbeatWindow <= 0:
		return Invalid("HeartbeatWindow", "must be positive")
	case c.Backoff.Max < c.Backoff.Initial:
		return Invalid("Backoff.Max", "must be at least Backoff.Initial")
	case c.Backoff.Jitter < 0 || c.Backoff.Jitter >= 1:
		return Invalid("Backoff.Jitter", "must be in [0, 1)")
	case c.RetentionCap < c.Retention:
		return Invalid("RetentionCap", "must be at least Retention")
	case c.FixedPools && len(c.Pools) == 0:
		return Invalid("Pools", "a fixed pool list must name at least one pool")
	case c.LogVersion > fsm.LogVersion:
		return Invalid("LogVersion", "%d is newer than this release's %d", c.LogVersion, fsm.LogVersion)
	}
	return nil
}
