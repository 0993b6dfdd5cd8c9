package client

import "time"

// Priority classes.
const (
	PriorityHigh   = "high"
	PriorityNormal = "normal"
	PriorityLow    = "low"
)

// Task statuses.
const (
	StatusScheduled = "scheduled"
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusRetrying  = "retrying"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	StatusExpired   = "expired"
	// StatusBlocked is a task waiting for its dependencies to end.
	StatusBlocked = "blocked"
	// StatusParked is a task accepted beyond its pool's pending bound
	// (overflow policy park), waiting for room.
	StatusParked = "parked"
)

// Dependency policies: when a task with dependencies may run.
const (
	// DependencyPolicySucceeded (also "") runs it once every dependency
	// succeeded; a dependency that ends otherwise ends it cancelled.
	DependencyPolicySucceeded = "succeeded"
	// DependencyPolicyDone runs it once every dependency ended.
	DependencyPolicyDone = "done"
)

// Workflow statuses.
const (
	WorkflowRunning   = "running"
	WorkflowSucceeded = "succeeded" // every member succeeded
	WorkflowFailed    = "failed"    // a member failed or expired, and nothing more can run
	WorkflowCancelled = "cancelled" // cancelled as a whole, or a member cancelled and none failed
)

// Schedule overlap and catch-up policies.
const (
	OverlapSkip  = "skip"
	OverlapAllow = "allow"

	CatchUpOnce = "once"
	CatchUpSkip = "skip"
	CatchUpAll  = "all"
)

// TaskSpec describes a task to submit: its template, plus what only a
// submit carries.
type TaskSpec struct {
	Template
	// Key is the idempotency key. Submit fills it with a random key when it
	// is empty, so that its own retries are safe.
	Key string
	// RunAt, when set, is when the task becomes ready.
	RunAt time.Time
	// Delay, when RunAt is zero, delays the task from its submission.
	Delay time.Duration
	// Deadline, when set, expires the task if it has not succeeded by then.
	Deadline time.Time

	// DependsOn names the tasks it waits for: existing tasks, or, by key,
	// specs earlier in the same SubmitBatch. It is blocked until they end.
	DependsOn []TaskRef
	// DependencyPolicy is DependencyPolicySucceeded (also "") or
	// DependencyPolicyDone.
	DependencyPolicy string
	// External tasks are never dispatched to a worker: they wait until
	// Complete or Fail ends them (an approval, a callback), or their
	// deadline passes.
	External bool
}

// TaskRef names a task by id or by idempotency key.
type TaskRef struct {
	ID  string
	Key string
}

// ByID names the task with the given id.
func ByID(id string) TaskRef { return TaskRef{ID: id} }

// ByKey names the task with the given idempotency key.
func ByKey(key string) TaskRef { return TaskRef{Key: key} }

func (r TaskRef) String() string {
	if r.ID != "" {
		return r.ID
	}
	return "key " + r.Key
}

// Task is a task as the cluster stores it. Its template holds the defaults
// the cluster resolved (max attempts, backoff).
type Task struct {
	ID string
	Template
	Key    string
	Status string
	// Attempt counts the attempts started.
	Attempt int
	// Lease is the current attempt's fencing token (0 when none runs).
	Lease  uint64
	Output []byte
	Error  string

	SubmittedAt time.Time
	RunAt       time.Time
	StartedAt   time.Time
	FinishedAt  time.Time
	UpdatedAt   time.Time
	Deadline    time.Time

	// Schedule and Slot name the recurring schedule and the fire instant
	// that created the task, if one did.
	Schedule string
	Slot     time.Time

	// DependsOn holds the ids of the tasks it waits (or waited) for.
	DependsOn        []string
	DependencyPolicy string
	External         bool
	// Workflow and Step name its workflow and its step in it, if any.
	Workflow string
	Step     string
	// Parent is the task whose successful completion spawned it, if any.
	Parent string
	// BlocksLane says it ended without succeeding under its pool's
	// ordering policy block: its lane waits until it is retried or deleted.
	BlocksLane bool
	// Principal is the accessor of the ACL token that submitted it (empty
	// without ACLs).
	Principal string
	// Attempts is the history of its last attempts that ended (at most
	// 10), oldest first. Clusters of an older log format keep none.
	Attempts []Attempt
	// AttemptBase is the attempts started before an operator last retried
	// it (RetryTask): its attempt budget counts from there.
	AttemptBase int
}

// Attempt is one ended attempt of a task.
type Attempt struct {
	Attempt int
	// Worker is the id of the worker that held its lease.
	Worker string
	// Lease is its fencing token; Epoch the leader epoch that granted it.
	Lease      uint64
	Epoch      uint64
	StartedAt  time.Time
	FinishedAt time.Time
	// Outcome is how it ended: one of the AttemptSucceeded... values.
	Outcome string
	// Error is its error, at most 1 KiB: a longer one is cut and ends with
	// "… (truncated)".
	Error string
}

// The outcomes of an attempt (Attempt.Outcome).
const (
	AttemptSucceeded = "succeeded" // the worker reported success
	AttemptFailed    = "failed"    // a permanent failure, or a retryable one with no attempt left
	AttemptRetry     = "retry"     // a retryable failure: the task ran again
	AttemptCancelled = "cancelled" // the task was cancelled, by a request or by its worker
	AttemptExpired   = "expired"   // the task's deadline passed while it ran
	AttemptTimeout   = "timeout"   // the attempt ran past the task's timeout
	AttemptLost      = "lost"      // its lease lapsed without a heartbeat
)

// CancelFilter selects the live tasks CancelMany cancels: those of Pool
// with one of Statuses (live statuses, at least one) and, when Kinds is
// not empty, one of Kinds.
type CancelFilter struct {
	Pool     string
	Statuses []string
	Kinds    []string
}

// Terminal reports whether the task has ended (succeeded, failed, cancelled
// or expired).
func (t *Task) Terminal() bool {
	switch t.Status {
	case StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired:
		return true
	}
	return false
}

// Submitted is the answer to a submit.
type Submitted struct {
	ID string
	// Duplicate reports that the key already named a task before this call.
	// With a key the SDK generated, a duplicate answer can only come from
	// this call's own earlier attempt, so it is reported as false.
	Duplicate bool
	// Key is the idempotency key the task was submitted with (generated by
	// the SDK when the spec had none).
	Key string
}

// ReadMeta tells how fresh a read served by a node's own replica is.
type ReadMeta struct {
	Stale       bool
	Node        string
	KnownLeader bool
	// LastContact is the time since the node last heard from the leader: 0
	// on the leader, negative when it never has.
	LastContact  time.Duration
	AppliedIndex uint64
}

// ListOptions filter and page List.
type ListOptions struct {
	Pools    []string
	Statuses []string
	// Kinds, when set, lists the tasks of these kinds only.
	Kinds []string
	// NewestFirst lists in decreasing id (submission) order; else oldest
	// first.
	NewestFirst bool
	// After is the cursor: list tasks whose id is greater, or smaller with
	// NewestFirst (the next page in either order).
	After string
	Limit int
	// Stale serves the list from the answering node's replica.
	Stale bool
}

// Schedule is a recurring schedule.
type Schedule struct {
	Name string
	// Cron is the expression: five fields, an optional leading seconds field,
	// or a descriptor such as "@hourly" or "@every 30s".
	Cron string
	// TZ is an IANA zone name; "" means UTC.
	TZ string
	// Task is what each fire submits, unless Steps is set.
	Task Template
	// Workflow and Steps, when Steps is set, are the workflow each fire
	// submits instead (Task must then be zero). A step's Task carries its
	// template, dependency policy and external flag only.
	Workflow string
	Steps    []Step
	// Overlap is OverlapSkip (also "") or OverlapAllow.
	Overlap string
	// CatchUp is CatchUpOnce (also ""), CatchUpSkip or CatchUpAll.
	CatchUp      string
	CatchUpLimit int
	Paused       bool

	// Read-only state.
	NextFire time.Time
	LastFire time.Time
	Fires    uint64
	Skipped  uint64
	LastTask string
}

// Event is a status transition of a task, or a marker.
type Event struct {
	TaskID  string
	Pool    string
	Kind    string
	Status  string
	Attempt int
	Message string
	At      time.Time
	// Workflow and Step name the task's workflow and step. An event of a
	// workflow itself (its start and its end) has no TaskID, names the
	// workflow in Kind, and sets WorkflowStatus.
	Workflow       string
	Step           string
	WorkflowStatus string
	// Cursor orders the events: every node gives an event the same
	// cursor, growing with the log. 0 on a Lagged marker. Ack takes one.
	Cursor uint64
	// Lagged marks a gap: events were dropped before this point (the
	// subscriber fell behind, or the stream was re-established on a node
	// that did not hold the events since the last one received).
	Lagged bool
	// Err is set on the last value before the channel closes when the
	// subscription ended on an error that retrying cannot fix.
	Err error
}

// Step is one step of a workflow: a task under a name, which the other
// steps use to depend on it.
type Step struct {
	// Name is unique in the workflow: letters, digits, '-', '_' and '.'.
	// It may be empty for a spawned child that nothing depends on.
	Name string
	// Task is the step's task. It takes no key (the workflow's key makes
	// the submit idempotent); its DependsOn may name tasks outside the
	// workflow.
	Task TaskSpec
	// DependsOn names the steps it depends on: earlier steps of the same
	// submit (or spawn), or existing steps of the workflow.
	DependsOn []string
}

// WorkflowSpec is a workflow to submit: its steps, inserted atomically.
type WorkflowSpec struct {
	Name string
	// Key is the idempotency key. SubmitWorkflow fills it with a random key
	// when it is empty, so that its own retries are safe.
	Key   string
	Steps []Step
}

// WorkflowSubmitted is the answer to SubmitWorkflow.
type WorkflowSubmitted struct {
	ID string
	// Duplicate reports that the key already named a workflow before this
	// call (never for a key the SDK generated).
	Duplicate bool
	// Key is the key the workflow was submitted with.
	Key string
	// Tasks maps each step name to its task id.
	Tasks map[string]string
}

// Workflow is a workflow as the cluster stores it.
type Workflow struct {
	ID     string
	Name   string
	Key    string
	Status string

	SubmittedAt time.Time
	UpdatedAt   time.Time
	FinishedAt  time.Time

	// Schedule and Slot name the recurring schedule and fire instant that
	// created it, if one did; Parent the task whose spawn created it.
	Schedule string
	Slot     time.Time
	Parent   string

	// Tasks are its members in id order (filled by GetWorkflow and
	// WaitWorkflow, not by ListWorkflows).
	Tasks []*Task
}

// Terminal reports whether the workflow has ended.
func (w *Workflow) Terminal() bool {
	switch w.Status {
	case WorkflowSucceeded, WorkflowFailed, WorkflowCancelled:
		return true
	}
	return false
}

// WorkflowListOptions filter and page ListWorkflows.
type WorkflowListOptions struct {
	Statuses []string
	// After is the cursor: list workflows whose id is greater.
	After string
	Limit int
	// Stale serves the list from the answering node's replica.
	Stale bool
}

// Member is a node as gossip sees it.
type Member struct {
	Name     string
	Addr     string
	Status   string
	RaftAddr string
	HTTPAddr string
	Version  string
}

// Peer is a server of the Raft configuration.
type Peer struct {
	ID      string
	Address string
	Voter   bool
	Leader  bool
}

// Health is a node's view of the cluster.
type Health struct {
	Node    string
	Leader  string
	Epoch   uint64
	Status  string
	Reasons []string
}
