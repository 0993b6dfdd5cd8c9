// Package fsm is cronoq's replicated state machine: the durable task table
// that every node of the cluster holds, and the schema of the Raft log
// entries that change it.
//
// Apply is a pure function of the prior state and the entry bytes: it reads no
// clock (times travel inside the entry, stamped by the leader's engine), uses
// no randomness, never depends on map iteration order and does no I/O. The
// same log therefore yields byte-identical snapshots on every node.
//
// The types below are the log and snapshot schema. Their MessagePack codec
// is generated from the struct tags (types_gen.go, `make generate`): structs
// are maps keyed by their tags, empty fields are left out, and decoding skips
// keys it does not know. Tags and numeric values are part of the format:
// never change one, append new ones (see "Upgrades" in docs/architecture.md).
package fsm

//go:generate go run github.com/tinylib/msgp@v1.6.5 -file types.go -o types_gen.go -tests=false -io=false

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// LogVersion is the newest log format this release writes and understands.
// Every entry and snapshot needs some version to be applied (Version methods
// below): a node never applies one that needs more than it understands, and
// a leader writes one only when every server of the cluster understands it.
//
//	1  the first format
//	2  a schedule's task template may carry a retry backoff
//	3  workflows: task dependencies and the blocked status, workflow
//	   records, external tasks, tasks spawned by a completion, schedules
//	   that fire a workflow
//	4  flow control: ordering and concurrency keys, the parked status and
//	   its admission, replicated pool settings
//	5  access control: ACL policies and tokens, the principal that
//	   submitted a task
//	6  attempt history (a task's last attempts, recorded as they end) and
//	   an operator's retry of an ended task (Requeue); durable
//	   subscriptions: subscription records, their acks and stalls, and
//	   the events they hold (a snapshot record)
const LogVersion = 6

// Status is the lifecycle state of a task. The numeric values are part of the
// log and snapshot format: append new values only.
type Status uint8

const (
	StatusUnknown   Status = 0
	StatusScheduled Status = 1 // run time in the future
	StatusQueued    Status = 2 // ready, waiting for a worker
	StatusRunning   Status = 3 // an attempt holds a lease
	StatusRetrying  Status = 4 // waiting out a backoff before the next attempt
	StatusSucceeded Status = 5
	StatusFailed    Status = 6
	StatusCancelled Status = 7
	StatusExpired   Status = 8  // its deadline passed before it succeeded
	StatusBlocked   Status = 9  // waiting for its dependencies to end (log format 3)
	StatusParked    Status = 10 // accepted beyond its pool's pending bound, waiting for room (log format 4)

	numStatuses = 11
)

// AllStatuses lists every valid status in numeric order.
var AllStatuses = []Status{
	StatusScheduled, StatusQueued, StatusRunning, StatusRetrying,
	StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired,
	StatusBlocked, StatusParked,
}

var statusNames = [numStatuses]string{
	"unknown", "scheduled", "queued", "running", "retrying",
	"succeeded", "failed", "cancelled", "expired", "blocked", "parked",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// Terminal reports whether s is a final state.
func (s Status) Terminal() bool { return s >= StatusSucceeded && s <= StatusExpired }

// Pending reports whether s counts against the pending bounds (waiting to
// run: blocked, scheduled, queued or retrying).
func (s Status) Pending() bool {
	return s == StatusScheduled || s == StatusQueued || s == StatusRetrying || s == StatusBlocked
}

// Valid reports whether s is one of AllStatuses.
func (s Status) Valid() bool { return s > StatusUnknown && s < numStatuses }

// ParseStatus parses the name of a status.
func ParseStatus(name string) (Status, bool) {
	for i, n := range statusNames {
		if i != 0 && n == name {
			return Status(i), true
		}
	}
	return StatusUnknown, false
}

// Priority is a task's priority class. Lower values are dispatched first.
type Priority uint8

const (
	PriorityHigh   Priority = 0
	PriorityNormal Priority = 1
	PriorityLow    Priority = 2

	NumPriorities = 3
)

func (p Priority) String() string {
	switch p {
	case PriorityHigh:
		return "high"
	case PriorityNormal:
		return "normal"
	case PriorityLow:
		return "low"
	}
	return "unknown"
}

// ParsePriority parses "high", "normal" or "low".
func ParsePriority(s string) (Priority, bool) {
	switch s {
	case "high":
		return PriorityHigh, true
	case "normal", "":
		return PriorityNormal, true
	case "low":
		return PriorityLow, true
	}
	return PriorityNormal, false
}

// Instant is a point in time: Unix nanoseconds of the leader's clock, 0 when
// unset. It is the one unit of time of the server's records, commands and
// events; durations are time.Duration (nanoseconds too).
type Instant int64

// InstantOf converts t (0 for the zero time).
func InstantOf(t time.Time) Instant {
	if t.IsZero() {
		return 0
	}
	return Instant(t.UnixNano())
}

// Time converts i to a UTC time (the zero time for 0).
func (i Instant) Time() time.Time {
	if i == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(i)).UTC()
}

// IsZero reports whether i is unset.
func (i Instant) IsZero() bool { return i == 0 }

// Add returns i+d, saturating instead of overflowing.
func (i Instant) Add(d time.Duration) Instant {
	switch {
	case d > 0 && i > math.MaxInt64-Instant(d):
		return math.MaxInt64
	case d < 0 && i < math.MinInt64-Instant(d):
		return math.MinInt64
	}
	return i + Instant(d)
}

// Sub returns the duration i-j.
func (i Instant) Sub(j Instant) time.Duration { return time.Duration(i - j) }

// KV is one label or tag. Lists of KV are kept sorted by key with unique keys
// so that their encoding is deterministic.
type KV struct {
	K string `msgpack:"k"`
	V string `msgpack:"v"`
}

// Backoff is a retry policy: the delay after failed attempt n is Initial
// doubled n-1 times, capped at Max, spread by ±Jitter (a fraction).
type Backoff struct {
	Initial time.Duration `msgpack:"i,omitempty"`
	Max     time.Duration `msgpack:"m,omitempty"`
	Jitter  float64       `msgpack:"j,omitempty"`
}

// Template is what a task is made of, whoever asks for it: a submit, or a
// recurring schedule at each fire. It is defined once, here, and embedded in
// the durable Task, the Schedule and the engine's submit spec; its fields
// are flattened into the records that embed it.
type Template struct {
	Pool        string        `msgpack:"p"`
	Kind        string        `msgpack:"k"`
	Priority    Priority      `msgpack:"pr,omitempty"`
	Payload     []byte        `msgpack:"pl,omitempty"`
	Labels      []KV          `msgpack:"lb,omitempty"` // capacity labels the worker must offer
	Tags        []KV          `msgpack:"tg,omitempty"` // carried to the worker
	Timeout     time.Duration `msgpack:"to,omitempty"` // per attempt (0 = none)
	MaxAttempts uint32        `msgpack:"ma,omitempty"` // 0 = the engine's default
	Backoff     Backoff       `msgpack:"bo,omitempty"` // zero = the engine's default
	// Keys are its ordering and concurrency keys (log format 4); nil when
	// it has neither, which keeps a plain task's record small.
	Keys *Keys `msgpack:"ks,omitempty"`
	// Principal is the accessor of the ACL token that submitted it (log
	// format 5); empty without ACLs.
	Principal string `msgpack:"who,omitempty"`
}

// Keys are the flow-control keys of a task.
type Keys struct {
	// Ordering names a lane of the task's pool: tasks with the same
	// ordering key run one at a time, in submit order.
	Ordering string `msgpack:"o,omitempty"`
	// Concurrency names a group of the pool whose running tasks the pool's
	// concurrency limit caps.
	Concurrency string `msgpack:"c,omitempty"`
}

// IsZero reports whether k carries nothing.
func (k *Keys) IsZero() bool { return k == nil || (k.Ordering == "" && k.Concurrency == "") }

// OrderingKey is the task's ordering key, or "".
func (t *Template) OrderingKey() string {
	if t.Keys == nil {
		return ""
	}
	return t.Keys.Ordering
}

// ConcurrencyKey is the task's concurrency key, or "".
func (t *Template) ConcurrencyKey() string {
	if t.Keys == nil {
		return ""
	}
	return t.Keys.Concurrency
}

// Version is the log format a node needs to hold t faithfully. Every field
// of the first format needs 1; a field added later needs the format that
// introduced it when it is set, and gets its case here, so that tasks and
// schedules carrying it are refused until every server understands it.
func (t *Template) Version() uint16 {
	if t.Principal != "" {
		return 5
	}
	if !t.Keys.IsZero() {
		return 4
	}
	return 1
}

// Task is one durable task record. Records stored in the state are immutable:
// a change replaces the pointer with a modified copy, which is what makes
// O(1) copy-on-write snapshots safe.
type Task struct {
	ID       string `msgpack:"id"`
	Template `msgpack:",flatten"`
	Key      string `msgpack:"key,omitempty"` // idempotency key

	RunAt    Instant `msgpack:"ra,omitempty"` // earliest start (also the retry instant while retrying)
	Deadline Instant `msgpack:"dl,omitempty"` // past it the task ends expired

	Schedule string  `msgpack:"sc,omitempty"` // recurring schedule that fired it
	Slot     Instant `msgpack:"sl,omitempty"` // the scheduled instant of that fire

	// Flow is what a task with dependencies or in a workflow carries (log
	// format 3); nil for a plain task. Behind a pointer, it leaves the
	// record of a plain task, copied at every change of its status, as
	// small as before workflows.
	Flow *Flow `msgpack:"fl,omitempty"`

	Status Status `msgpack:"st"`
	// BlocksLane marks an ended task that stops its ordering lane: it
	// ended without succeeding under the pool's ordering policy block, and
	// the lane waits until an operator deletes or retries it (format 4).
	BlocksLane bool   `msgpack:"blk,omitempty"`
	Attempt    uint32 `msgpack:"at,omitempty"` // attempts started
	Lease      uint64 `msgpack:"ls,omitempty"` // current lease token (0 = none)
	LastLease  uint64 `msgpack:"ll,omitempty"` // highest lease token ever granted
	Worker     string `msgpack:"wk,omitempty"` // worker holding the current lease
	Output     []byte `msgpack:"out,omitempty"`
	Error      string `msgpack:"err,omitempty"`
	// AttemptBase is the attempts started before the last operator retry
	// (Requeue): the attempt budget counts from it (log format 6).
	AttemptBase uint32 `msgpack:"ab,omitempty"`
	// Attempts is the history of its last attempts that ended, oldest
	// first, at most MaxAttemptHistory of them (log format 6; see
	// attempts.go). Replaced, never written into.
	Attempts []Attempt `msgpack:"ah,omitempty"`

	SubmittedAt Instant `msgpack:"sa"`
	StartedAt   Instant `msgpack:"sta,omitempty"` // start of the current or last attempt
	UpdatedAt   Instant `msgpack:"ua"`
	FinishedAt  Instant `msgpack:"fa,omitempty"`

	CreateIndex uint64 `msgpack:"ci"` // log index of the entry that inserted it
	ModifyIndex uint64 `msgpack:"mi"` // log index of the last entry that changed it
}

// Clone returns a shallow copy of t, safe to modify field by field (slices are
// shared and must be replaced, not written into).
func (t *Task) Clone() *Task {
	c := *t
	return &c
}

// Version is the log format a node needs to hold t faithfully: its
// template's, and 3 when it takes part in a workflow or dependency (a field
// added to Task itself gets its case here).
func (t *Task) Version() uint16 {
	v := t.Template.Version()
	if t.Status == StatusBlocked || !t.Flow.IsZero() {
		v = max(v, 3)
	}
	if t.Status == StatusParked || t.BlocksLane {
		v = max(v, 4)
	}
	if len(t.Attempts) > 0 || t.AttemptBase != 0 {
		v = max(v, 6)
	}
	return v
}

// AttemptOutcome is how an attempt ended (attempts.go). The numeric values
// are part of the log and snapshot format: append new values only.
type AttemptOutcome uint8

// Attempt is one ended attempt of a task, as its history keeps it (log
// format 6). The state records it from the task and the mutation that
// ends the attempt, so every node keeps the same one.
type Attempt struct {
	Attempt    uint32         `msgpack:"n"`           // its number (Task.Attempt when it started)
	Worker     string         `msgpack:"w,omitempty"` // the worker that held its lease
	Lease      uint64         `msgpack:"l"`           // its lease token (its epoch in the high 32 bits)
	StartedAt  Instant        `msgpack:"sa"`
	FinishedAt Instant        `msgpack:"fa"`
	Outcome    AttemptOutcome `msgpack:"o"`
	// Error is the attempt's error, cut to MaxAttemptError bytes.
	Error string `msgpack:"e,omitempty"`
}

// Flow holds a task's place in a dependency graph or workflow.
type Flow struct {
	DependsOn []string  `msgpack:"dp,omitempty"`  // ids of the tasks it waits for, in the order given
	DepPolicy DepPolicy `msgpack:"dpp,omitempty"` // when it may run once they end
	External  bool      `msgpack:"ext,omitempty"` // completed by an API call, never dispatched
	Workflow  string    `msgpack:"wf,omitempty"`  // id of the workflow it belongs to
	Step      string    `msgpack:"stp,omitempty"` // its name in the workflow
	Parent    string    `msgpack:"par,omitempty"` // the task whose completion spawned it
}

// IsZero reports whether f carries nothing (a task with a zero Flow is
// stored without one).
func (f *Flow) IsZero() bool {
	return f == nil || (len(f.DependsOn) == 0 && f.DepPolicy == DepSucceeded && !f.External &&
		f.Workflow == "" && f.Step == "" && f.Parent == "")
}

// MakeFlow returns t's Flow, giving t an empty one first: for building a
// record, never for one stored in the state (records there are immutable).
func (t *Task) MakeFlow() *Flow {
	if t.Flow == nil {
		t.Flow = &Flow{}
	}
	return t.Flow
}

// DependsOn is the ids of the tasks t waits for, in the order given.
func (t *Task) DependsOn() []string {
	if t.Flow == nil {
		return nil
	}
	return t.Flow.DependsOn
}

// DepPolicy is when t may run once its dependencies end.
func (t *Task) DepPolicy() DepPolicy {
	if t.Flow == nil {
		return DepSucceeded
	}
	return t.Flow.DepPolicy
}

// External reports whether t is completed by an API call, never dispatched.
func (t *Task) External() bool { return t.Flow != nil && t.Flow.External }

// Workflow is the id of the workflow t belongs to, or "".
func (t *Task) Workflow() string {
	if t.Flow == nil {
		return ""
	}
	return t.Flow.Workflow
}

// Step is t's name in its workflow, or "".
func (t *Task) Step() string {
	if t.Flow == nil {
		return ""
	}
	return t.Flow.Step
}

// Parent is the id of the task whose completion spawned t, or "".
func (t *Task) Parent() string {
	if t.Flow == nil {
		return ""
	}
	return t.Flow.Parent
}

// DepPolicy says when a task with dependencies may run.
type DepPolicy uint8

const (
	DepSucceeded DepPolicy = 0 // once every dependency succeeded; a dependency that did not succeed ends it cancelled (default)
	DepDone      DepPolicy = 1 // once every dependency is terminal, whatever its status
)

func (p DepPolicy) String() string {
	switch p {
	case DepSucceeded:
		return "succeeded"
	case DepDone:
		return "done"
	}
	return "unknown"
}

// ParseDepPolicy parses "succeeded" (also "") or "done".
func ParseDepPolicy(s string) (DepPolicy, bool) {
	switch s {
	case "succeeded", "":
		return DepSucceeded, true
	case "done":
		return DepDone, true
	}
	return DepSucceeded, false
}

// WorkflowStatus is the state of a workflow, derived from its members: it
// runs while any member is live, and ends when the last one ends. The
// numeric values are part of the log and snapshot format.
type WorkflowStatus uint8

const (
	WorkflowRunning   WorkflowStatus = 1
	WorkflowSucceeded WorkflowStatus = 2 // every member succeeded
	WorkflowFailed    WorkflowStatus = 3 // some member failed or expired
	WorkflowCancelled WorkflowStatus = 4 // cancelled as a whole, or some member cancelled and none failed
)

var workflowStatusNames = [...]string{"unknown", "running", "succeeded", "failed", "cancelled"}

func (s WorkflowStatus) String() string {
	if int(s) < len(workflowStatusNames) {
		return workflowStatusNames[s]
	}
	return "unknown"
}

// Terminal reports whether s is a final state.
func (s WorkflowStatus) Terminal() bool { return s >= WorkflowSucceeded && s <= WorkflowCancelled }

// Valid reports whether s is a known status.
func (s WorkflowStatus) Valid() bool { return s >= WorkflowRunning && s <= WorkflowCancelled }

// ParseWorkflowStatus parses the name of a workflow status.
func ParseWorkflowStatus(name string) (WorkflowStatus, bool) {
	for i, n := range workflowStatusNames {
		if i != 0 && n == name {
			return WorkflowStatus(i), true
		}
	}
	return 0, false
}

// Workflow is a named set of tasks submitted together (log format 3). Its
// members carry its id; their records are the workflow's content.
type Workflow struct {
	ID       string         `msgpack:"id"`
	Name     string         `msgpack:"n,omitempty"`
	Key      string         `msgpack:"key,omitempty"` // idempotency key
	Status   WorkflowStatus `msgpack:"st"`
	Schedule string         `msgpack:"sc,omitempty"`  // recurring schedule that fired it
	Slot     Instant        `msgpack:"sl,omitempty"`  // the scheduled instant of that fire
	Parent   string         `msgpack:"par,omitempty"` // the task whose spawn created it

	SubmittedAt Instant `msgpack:"sa"`
	UpdatedAt   Instant `msgpack:"ua"`
	FinishedAt  Instant `msgpack:"fa,omitempty"`

	CreateIndex uint64 `msgpack:"ci"`
	ModifyIndex uint64 `msgpack:"mi"`
}

// Clone returns a shallow copy of w.
func (w *Workflow) Clone() *Workflow {
	c := *w
	return &c
}

// StepTemplate is one step of a workflow that a recurring schedule fires:
// the task to insert, under its step name, and its dependencies by step
// name.
type StepTemplate struct {
	Name      string `msgpack:"n"`
	Template  `msgpack:",flatten"`
	DependsOn []string  `msgpack:"dp,omitempty"` // names of other steps of the workflow
	DepPolicy DepPolicy `msgpack:"dpp,omitempty"`
	External  bool      `msgpack:"ext,omitempty"`
}

// Overlap policy of a recurring schedule.
type Overlap uint8

const (
	OverlapSkip  Overlap = 0 // skip a fire while the previous task is still live (default)
	OverlapAllow Overlap = 1
)

// CatchUp is what a schedule does about fires missed while the cluster had no
// leader (more than one slot due at once).
type CatchUp uint8

const (
	CatchUpOnce CatchUp = 0 // fire once for the latest missed slot, record the rest skipped (default)
	CatchUpSkip CatchUp = 1 // fire none of the missed slots, record them skipped
	CatchUpAll  CatchUp = 2 // fire every missed slot, up to CatchUpLimit; record the rest skipped
)

// Schedule is a named recurring schedule. Fire instants are a pure function of
// Cron, TZ and LastFire (the committed cursor), never of when a leader looked.
type Schedule struct {
	Name string `msgpack:"n"`
	Cron string `msgpack:"c"`
	TZ   string `msgpack:"tz,omitempty"` // IANA zone name; "" = UTC

	// Template is the task each fire submits, unless Steps is set.
	Template `msgpack:",flatten"`
	// Workflow and Steps, when Steps is set, are the workflow each fire
	// submits instead of one task (log format 3).
	Workflow string         `msgpack:"wn,omitempty"`
	Steps    []StepTemplate `msgpack:"wst,omitempty"`

	Overlap      Overlap `msgpack:"ov,omitempty"`
	CatchUp      CatchUp `msgpack:"cu,omitempty"`
	CatchUpLimit uint32  `msgpack:"cl,omitempty"`

	Paused    bool    `msgpack:"pa,omitempty"`
	CreatedAt Instant `msgpack:"ca"`           // fires are strictly after this instant
	LastFire  Instant `msgpack:"lf,omitempty"` // cursor: last slot fired or skipped (0 = none yet)
	LastTask  string  `msgpack:"lt,omitempty"` // task (or workflow, with Steps) created by the last fire
	Fires     uint64  `msgpack:"fi,omitempty"` // slots that created a task
	Skipped   uint64  `msgpack:"sk,omitempty"` // slots recorded as skipped

	CreateIndex uint64 `msgpack:"ci"`
	ModifyIndex uint64 `msgpack:"mi"`
}

// Clone returns a shallow copy of s.
func (s *Schedule) Clone() *Schedule {
	c := *s
	return &c
}

// Version is the log format a node needs to hold s faithfully: its
// template's, and 2 when its template carries a retry backoff (a task's
// could from the first format, a schedule's not).
func (s *Schedule) Version() uint16 {
	v := s.Template.Version()
	if s.Backoff != (Backoff{}) {
		v = max(v, 2)
	}
	if len(s.Steps) > 0 || s.Workflow != "" {
		v = max(v, 3)
	}
	for i := range s.Steps {
		v = max(v, s.Steps[i].Template.Version())
	}
	return v
}

// Tombstone records that a node was removed from the cluster on purpose, so
// that membership reconciliation does not add it back.
type Tombstone struct {
	NodeID string  `msgpack:"n"`
	At     Instant `msgpack:"at"`
	Remove bool    `msgpack:"r,omitempty"` // clear the tombstone instead
}

// ---------------------------------------------------------------------------
// Mutations: the contents of a commit batch.
// ---------------------------------------------------------------------------

// Mutation is one change to the state. Exactly one field is set: its kind.
// Kinds are append-only: a new kind gets a new field at the end, a new
// LogVersion, and a case in Version.
type Mutation struct {
	Insert        *Task          `msgpack:"in,omitempty"`
	Ready         *Ready         `msgpack:"rd,omitempty"`
	Start         *Start         `msgpack:"sr,omitempty"`
	Retry         *Retry         `msgpack:"rt,omitempty"`
	Finish        *Finish        `msgpack:"fn,omitempty"`
	Purge         *Purge         `msgpack:"pg,omitempty"`
	PutSchedule   *Schedule      `msgpack:"ps,omitempty"`
	DelSchedule   *DelSchedule   `msgpack:"ds,omitempty"`
	PauseSchedule *PauseSchedule `msgpack:"pz,omitempty"`
	Fire          *Fire          `msgpack:"fr,omitempty"`
	Tombstone     *Tombstone     `msgpack:"tb,omitempty"`
	// Log format 3.
	Unblock       *Unblock       `msgpack:"ub,omitempty"`
	PutWorkflow   *Workflow      `msgpack:"pw,omitempty"`
	EndWorkflow   *EndWorkflow   `msgpack:"ew,omitempty"`
	PurgeWorkflow *PurgeWorkflow `msgpack:"pwf,omitempty"`
	// Log format 4.
	Admit   *Admit `msgpack:"adm,omitempty"`
	PutPool *Pool  `msgpack:"pp,omitempty"`
	// Log format 5.
	PutACLPolicy *ACLPolicy `msgpack:"apl,omitempty"`
	PutACLToken  *ACLToken  `msgpack:"atk,omitempty"`
	DelACL       *DelACL    `msgpack:"dacl,omitempty"`
	// Log format 6.
	Requeue           *Requeue           `msgpack:"rq,omitempty"`
	PutSubscription   *Subscription      `msgpack:"psb,omitempty"`
	DelSubscription   *DelSubscription   `msgpack:"dsb,omitempty"`
	AckSubscription   *AckSubscription   `msgpack:"asb,omitempty"`
	StallSubscription *StallSubscription `msgpack:"ssb,omitempty"`
}

// fields reports how many fields of m are set.
func (m *Mutation) fields() int {
	n := 0
	for _, set := range [...]bool{
		m.Insert != nil, m.Ready != nil, m.Start != nil, m.Retry != nil,
		m.Finish != nil, m.Purge != nil, m.PutSchedule != nil,
		m.DelSchedule != nil, m.PauseSchedule != nil, m.Fire != nil,
		m.Tombstone != nil, m.Unblock != nil, m.PutWorkflow != nil,
		m.EndWorkflow != nil, m.PurgeWorkflow != nil, m.Admit != nil,
		m.PutPool != nil, m.PutACLPolicy != nil, m.PutACLToken != nil,
		m.DelACL != nil, m.Requeue != nil, m.PutSubscription != nil, m.DelSubscription != nil,
		m.AckSubscription != nil, m.StallSubscription != nil,
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

// Version is the log format a node needs to apply m.
func (m *Mutation) Version() uint16 {
	switch {
	case m.Requeue != nil, m.Retry != nil && m.Retry.Outcome != 0, m.Finish != nil && m.Finish.Outcome != 0,
		m.PutSubscription != nil, m.DelSubscription != nil, m.AckSubscription != nil, m.StallSubscription != nil:
		return 6
	case m.PutACLPolicy != nil, m.PutACLToken != nil, m.DelACL != nil:
		return 5
	case m.Insert != nil:
		return m.Insert.Version()
	case m.PutSchedule != nil:
		return m.PutSchedule.Version()
	case m.Admit != nil, m.PutPool != nil, m.Finish != nil && m.Finish.BlocksLane:
		return 4
	case m.Finish != nil && m.Finish.Workflow != "",
		m.Fire != nil && m.Fire.Workflow != "",
		m.Unblock != nil, m.PutWorkflow != nil, m.EndWorkflow != nil, m.PurgeWorkflow != nil:
		return 3
	}
	return 1
}

// Ready moves a scheduled or retrying task to queued once its run time came.
type Ready struct {
	ID string  `msgpack:"id"`
	At Instant `msgpack:"at"`
}

// Start grants a lease: the task must be queued; Attempt must be the task's
// attempt count plus one and Lease must exceed every token granted before.
type Start struct {
	ID      string  `msgpack:"id"`
	Attempt uint32  `msgpack:"a"`
	Lease   uint64  `msgpack:"l"`
	Worker  string  `msgpack:"w,omitempty"`
	At      Instant `msgpack:"at"`
}

// Retry ends the current attempt with a retryable failure (reported by the
// worker, or a lost heartbeat, or a timeout): the task must be running under
// Lease. It goes to retrying until RetryAt (or straight to queued when
// RetryAt <= At).
type Retry struct {
	ID      string  `msgpack:"id"`
	Lease   uint64  `msgpack:"l"`
	Error   string  `msgpack:"e,omitempty"`
	RetryAt Instant `msgpack:"ra"`
	At      Instant `msgpack:"at"`
	// Outcome, when set, is how the attempt ended (retry, timeout or
	// lost), and the state records the attempt in the task's history (log
	// format 6).
	Outcome AttemptOutcome `msgpack:"oc,omitempty"`
}

// Finish moves a task to a terminal status. With Lease != 0 the task must be
// running under that lease (a completion, or a cancel or expiry that revokes
// the lease); with Lease == 0 it must be live and not running.
type Finish struct {
	ID     string  `msgpack:"id"`
	Lease  uint64  `msgpack:"l,omitempty"`
	Status Status  `msgpack:"s"`
	Output []byte  `msgpack:"o,omitempty"`
	Error  string  `msgpack:"e,omitempty"`
	At     Instant `msgpack:"at"`
	// Workflow, when set, makes the task a member of that workflow as it
	// ends: a task outside any workflow whose completion spawns children
	// joins the workflow created for them (log format 3).
	Workflow string `msgpack:"wf,omitempty"`
	// BlocksLane, when set, makes the ended task stop its ordering lane
	// (Task.BlocksLane; log format 4).
	BlocksLane bool `msgpack:"bl,omitempty"`
	// Outcome, when set, is how the running attempt ended, and the state
	// records it in the task's history (log format 6; only with Lease).
	Outcome AttemptOutcome `msgpack:"oc,omitempty"`
}

// Requeue is an operator's retry of a task that ended failed, expired or
// cancelled (log format 6): the task becomes queued again under the same
// id, with a new attempt budget (its attempts so far become its
// AttemptBase), its history kept, and no longer blocking its lane. A
// member of a workflow is refused: its workflow has ended with it.
type Requeue struct {
	ID string  `msgpack:"id"`
	At Instant `msgpack:"at"`
	// Deadline is the task's deadline from now on (0: none). The engine
	// keeps a deadline still ahead and drops one that has passed.
	Deadline Instant `msgpack:"dl,omitempty"`
}

// Unblock releases a blocked task whose dependencies allow it to run: it
// becomes queued, or scheduled when its run time is after At.
type Unblock struct {
	ID string  `msgpack:"id"`
	At Instant `msgpack:"at"`
}

// EndWorkflow ends a running workflow whose members have all ended.
type EndWorkflow struct {
	ID     string         `msgpack:"id"`
	Status WorkflowStatus `msgpack:"st"`
	At     Instant        `msgpack:"at"`
}

// PurgeWorkflow removes an ended workflow and all its members, whose
// retention ended.
type PurgeWorkflow struct {
	ID string `msgpack:"id"`
}

// Purge removes a terminal task whose retention ended.
type Purge struct {
	ID string `msgpack:"id"`
}

// DelSchedule removes a recurring schedule.
type DelSchedule struct {
	Name string `msgpack:"n"`
}

// PauseSchedule pauses or resumes a recurring schedule.
type PauseSchedule struct {
	Name   string  `msgpack:"n"`
	Paused bool    `msgpack:"p"`
	At     Instant `msgpack:"at"`
}

// Fire advances a schedule's cursor to Slot (which must be after the current
// cursor). Skipped counts the slots before Slot (after the old cursor) that
// were passed over. TaskID names the task inserted in the same batch by this
// fire, or is empty when Slot itself is skipped (overlap or catch-up policy).
type Fire struct {
	Name    string  `msgpack:"n"`
	Slot    Instant `msgpack:"s"`
	Skipped uint32  `msgpack:"k,omitempty"`
	TaskID  string  `msgpack:"t,omitempty"`
	// Workflow names the workflow inserted by this fire, for a schedule
	// that fires workflows (log format 3; TaskID is then empty).
	Workflow string `msgpack:"w,omitempty"`
}

// ---------------------------------------------------------------------------
// Log entries.
// ---------------------------------------------------------------------------

// EntryType is the first byte of every log entry written by cronoq. The high
// bit (IgnoreUnknownFlag) marks an entry that older versions may skip.
type EntryType uint8

const (
	EntryEpochBump   EntryType = 1
	EntryCommitBatch EntryType = 2

	// IgnoreUnknownFlag set on a type byte tells a node that does not know
	// the type to skip the entry instead of failing.
	IgnoreUnknownFlag EntryType = 128
)

// EpochBump starts a new leader epoch. It is committed by a new leader after
// its barrier and before its engine runs; every commit batch from then on must
// carry the new epoch.
type EpochBump struct {
	Epoch  uint64  `msgpack:"e"` // the new epoch: must be the current one + 1
	Leader string  `msgpack:"l"`
	Time   Instant `msgpack:"t"`
}

// CommitBatch is one engine commit: the mutations of one or more engine
// steps, applied atomically (all or none) if Epoch is the current epoch.
type CommitBatch struct {
	Epoch     uint64     `msgpack:"e"`
	Time      Instant    `msgpack:"t"`          // leader wall clock when the batch was cut
	Mutations []Mutation `msgpack:"m,allownil"` // nil as the first release wrote an empty batch
	// Version is the log format the batch needs (the highest Version of its
	// mutations), written when above 1: a node that understands less stops
	// applying rather than skip what it cannot read.
	Version uint16 `msgpack:"v,omitempty"`
}

// ---------------------------------------------------------------------------
// Flow control (log format 4)
// ---------------------------------------------------------------------------

// Admit takes a parked task in once its pool has room: it must be parked,
// and becomes Status (queued, scheduled or, with dependencies, blocked).
type Admit struct {
	ID     string  `msgpack:"id"`
	Status Status  `msgpack:"st"`
	At     Instant `msgpack:"at"`
}

// Overflow is what a submit that does not fit its pool's pending bounds
// does.
type Overflow uint8

const (
	OverflowReject Overflow = 0 // refused as overloaded
	OverflowWait   Overflow = 1 // the submitter waits, FIFO per (pool, class), until room frees
	OverflowPark   Overflow = 2 // accepted as parked, and admitted FIFO per (pool, class) as room frees
	numOverflows            = 3
)

var overflowNames = [numOverflows]string{"reject", "wait", "park"}

func (o Overflow) String() string {
	if int(o) < len(overflowNames) {
		return overflowNames[o]
	}
	return fmt.Sprintf("overflow(%d)", uint8(o))
}

// Valid reports whether o is a known policy.
func (o Overflow) Valid() bool { return o < numOverflows }

// ParseOverflow parses the name of an overflow policy.
func ParseOverflow(name string) (Overflow, bool) {
	for i, n := range overflowNames {
		if n == name {
			return Overflow(i), true
		}
	}
	return 0, false
}

// OrderingPolicy is what a lane does when its head ends without
// succeeding.
type OrderingPolicy uint8

const (
	OrderingContinue OrderingPolicy = 0 // the next task of the lane runs
	OrderingBlock    OrderingPolicy = 1 // the lane waits until its failed head is retried or deleted
	numOrderings                    = 2
)

var orderingNames = [numOrderings]string{"continue", "block"}

func (o OrderingPolicy) String() string {
	if int(o) < len(orderingNames) {
		return orderingNames[o]
	}
	return fmt.Sprintf("ordering(%d)", uint8(o))
}

// Valid reports whether o is a known policy.
func (o OrderingPolicy) Valid() bool { return o < numOrderings }

// ParseOrderingPolicy parses the name of an ordering policy.
func ParseOrderingPolicy(name string) (OrderingPolicy, bool) {
	for i, n := range orderingNames {
		if n == name {
			return OrderingPolicy(i), true
		}
	}
	return 0, false
}

// Pool is the replicated settings of one pool, as an operator set them.
// The record holds every setting (the agent's defaults filled in when it
// was first written), so every leader applies the same ones. Zero limits
// mean none.
type Pool struct {
	Name               string         `msgpack:"n"`
	MaxRunning         int64          `msgpack:"mr,omitempty"`  // running attempts across all workers
	MaxPending         int64          `msgpack:"mp,omitempty"`  // pending tasks
	MaxPendingPerClass []int64        `msgpack:"mpc,omitempty"` // pending tasks per priority class, by class
	Overflow           Overflow       `msgpack:"of,omitempty"`
	Rate               float64        `msgpack:"rt,omitempty"` // dispatches per second
	Burst              int64          `msgpack:"bu,omitempty"` // dispatches at once after a pause (with Rate)
	KindRates          []KindRate     `msgpack:"kr,omitempty"` // by kind
	ConcurrencyLimit   int64          `msgpack:"cl,omitempty"` // running tasks per concurrency key (0 = 1)
	Ordering           OrderingPolicy `msgpack:"op,omitempty"`
	MaxAttempts        uint32         `msgpack:"ma,omitempty"` // default for its tasks
	Backoff            Backoff        `msgpack:"bo,omitempty"` // default for its tasks
	LeaseGrace         time.Duration  `msgpack:"lg,omitempty"` // for its running attempts at a leader change
	Paused             bool           `msgpack:"pa,omitempty"`
	Kinds              []KindSettings `msgpack:"kd,omitempty"` // by kind

	UpdatedAt   Instant `msgpack:"ua"`
	ModifyIndex uint64  `msgpack:"mi"`
}

// KindRate limits the dispatches of one kind of a pool.
type KindRate struct {
	Kind  string  `msgpack:"k"`
	Rate  float64 `msgpack:"r"`
	Burst int64   `msgpack:"b,omitempty"`
}

// KindSettings are the settings of one kind of a pool: JSON Schemas its
// payloads and outputs must match (none when empty), and defaults for its
// tasks, which take precedence over the pool's.
type KindSettings struct {
	Kind          string        `msgpack:"k"`
	PayloadSchema []byte        `msgpack:"ps,omitempty"`
	OutputSchema  []byte        `msgpack:"os,omitempty"`
	Timeout       time.Duration `msgpack:"to,omitempty"`
	MaxAttempts   uint32        `msgpack:"ma,omitempty"`
	Backoff       Backoff       `msgpack:"bo,omitempty"`
}

// Clone returns a copy of p that shares nothing with it.
func (p *Pool) Clone() *Pool {
	c := *p
	c.MaxPendingPerClass = slices.Clone(p.MaxPendingPerClass)
	c.KindRates = slices.Clone(p.KindRates)
	c.Kinds = slices.Clone(p.Kinds)
	return &c
}

// KindSettings returns the settings of kind, if the pool has any.
func (p *Pool) KindSettings(kind string) (*KindSettings, bool) {
	i, ok := slices.BinarySearchFunc(p.Kinds, kind, func(k KindSettings, name string) int { return strings.Compare(k.Kind, name) })
	if !ok {
		return nil, false
	}
	return &p.Kinds[i], true
}

// Version is the log format a node needs to hold p: 4.
func (p *Pool) Version() uint16 { return 4 }

// Check refuses settings no engine could apply, naming the field.
func (p *Pool) Check() error {
	switch {
	case p.Name == "":
		return errors.New("name: must not be empty")
	case p.MaxRunning < 0:
		return errors.New("max_running: must not be negative")
	case p.MaxPending < 0:
		return errors.New("max_pending: must not be negative")
	case len(p.MaxPendingPerClass) > int(NumPriorities):
		return fmt.Errorf("max_pending_per_class: %d classes, want at most %d", len(p.MaxPendingPerClass), NumPriorities)
	case !p.Overflow.Valid():
		return fmt.Errorf("overflow: unknown policy %d", p.Overflow)
	case p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0):
		return errors.New("rate: must be a non-negative number")
	case p.Burst < 0:
		return errors.New("burst: must not be negative")
	case p.ConcurrencyLimit < 0:
		return errors.New("concurrency_limit: must not be negative")
	case !p.Ordering.Valid():
		return fmt.Errorf("ordering: unknown policy %d", p.Ordering)
	case p.LeaseGrace < 0:
		return errors.New("lease_grace: must not be negative")
	}
	for i, n := range p.MaxPendingPerClass {
		if n < 0 {
			return fmt.Errorf("max_pending_per_class[%d]: must not be negative", i)
		}
	}
	for i, k := range p.Kinds {
		switch {
		case k.Kind == "":
			return fmt.Errorf("kinds[%d].kind: must not be empty", i)
		case i > 0 && p.Kinds[i-1].Kind >= k.Kind:
			return fmt.Errorf("kinds[%d].kind: %q out of order or repeated", i, k.Kind)
		case k.Timeout < 0:
			return fmt.Errorf("kinds[%d].timeout: must not be negative", i)
		}
	}
	for i, kr := range p.KindRates {
		switch {
		case kr.Kind == "":
			return fmt.Errorf("kind_rates[%d].kind: must not be empty", i)
		case kr.Rate <= 0 || math.IsNaN(kr.Rate) || math.IsInf(kr.Rate, 0):
			return fmt.Errorf("kind_rates[%d].rate: must be a positive number", i)
		case kr.Burst < 0:
			return fmt.Errorf("kind_rates[%d].burst: must not be negative", i)
		case i > 0 && p.KindRates[i-1].Kind >= kr.Kind:
			return fmt.Errorf("kind_rates[%d].kind: %q out of order or repeated", i, kr.Kind)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Access control (log format 5)
// ---------------------------------------------------------------------------

// ACLPolicy is a named set of rules (HCL source, parsed at the edge by the
// nodes that check calls).
type ACLPolicy struct {
	Name        string `msgpack:"n"`
	Description string `msgpack:"d,omitempty"`
	Rules       string `msgpack:"r"`

	CreateIndex uint64 `msgpack:"ci"`
	ModifyIndex uint64 `msgpack:"mi"`
}

// ACLToken is a token: its public accessor, the SHA-256 of its secret (the
// secret itself is never stored), and what it may do. A management token may
// do everything.
type ACLToken struct {
	Accessor   string   `msgpack:"a"`
	SecretHash []byte   `msgpack:"h"`
	Name       string   `msgpack:"n,omitempty"`
	Policies   []string `msgpack:"p,omitempty"`
	Management bool     `msgpack:"m,omitempty"`
	// Bootstrap marks the token made by the one bootstrap of the cluster.
	Bootstrap bool    `msgpack:"b,omitempty"`
	CreatedAt Instant `msgpack:"ca"`

	CreateIndex uint64 `msgpack:"ci"`
}

// DelACL deletes one ACL object: the policy named Policy or the token whose
// accessor is Token (exactly one is set).
type DelACL struct {
	Policy string `msgpack:"p,omitempty"`
	Token  string `msgpack:"t,omitempty"`
}

// ---------------------------------------------------------------------------
// Durable subscriptions (log format 6)
// ---------------------------------------------------------------------------

// Subscription is a named, durable subscription to task status events:
// from the entry that creates it on, every task event its filter matches
// is kept in the replicated state (SubscriptionEvent) until a consumer
// acks it (Acked) or the subscription is removed. The record holds every
// setting, the defaults filled in when it was created.
type Subscription struct {
	Name string `msgpack:"n"`
	// The filter: a task event matches when its pool, status and kind are
	// each among these (an empty list matches any).
	Pools    []string `msgpack:"p,omitempty"`
	Statuses []Status `msgpack:"st,omitempty"`
	Kinds    []string `msgpack:"k,omitempty"`
	// Webhook is the URL the leader posts the events to (none when empty),
	// signed with Secret.
	Webhook string `msgpack:"wh,omitempty"`
	Secret  string `msgpack:"sec,omitempty"`
	// AckTimeout is how long events sent to a consumer wait for its ack
	// before they are sent again; MaxDeliveries how many times the first
	// unacked event is sent before the subscription stalls.
	AckTimeout    time.Duration `msgpack:"ato,omitempty"`
	MaxDeliveries uint32        `msgpack:"md,omitempty"`

	// Acked is the cursor up to which (inclusive) the events were acked.
	Acked uint64 `msgpack:"ack,omitempty"`
	// Stalled: its first unacked event was sent MaxDeliveries times without
	// an ack; its events are kept. The next ack clears it.
	Stalled     bool    `msgpack:"sl,omitempty"`
	StallReason string  `msgpack:"sr,omitempty"`
	StalledAt   Instant `msgpack:"sa,omitempty"`

	CreatedAt   Instant `msgpack:"ca"`
	CreateIndex uint64  `msgpack:"ci"`
	ModifyIndex uint64  `msgpack:"mi"`
}

// Version is the log format a node needs to hold s: 6.
func (s *Subscription) Version() uint16 { return 6 }

// Clone returns a copy of s that shares nothing with it.
func (s *Subscription) Clone() *Subscription {
	c := *s
	c.Pools = slices.Clone(s.Pools)
	c.Statuses = slices.Clone(s.Statuses)
	c.Kinds = slices.Clone(s.Kinds)
	return &c
}

// maxSubscriptionName bounds the name of a subscription.
const maxSubscriptionName = 128

// CheckSubscriptionName reports what is wrong with name as the name of a
// subscription: 1 to 128 letters, digits, '-', '_' and '.'.
func CheckSubscriptionName(name string) error {
	if name == "" || len(name) > maxSubscriptionName {
		return fmt.Errorf("name %q: must be 1 to %d characters", name, maxSubscriptionName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("name %q: only letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// Check reports what is wrong with s as a record: its name, a filter list
// that is not sorted, unique and free of empty names, an unknown status, a
// negative ack timeout, or a secret without a webhook.
func (s *Subscription) Check() error {
	if err := CheckSubscriptionName(s.Name); err != nil {
		return err
	}
	for _, l := range []struct {
		name string
		vals []string
	}{{"pools", s.Pools}, {"kinds", s.Kinds}} {
		for i, v := range l.vals {
			if v == "" || i > 0 && l.vals[i-1] >= v {
				return fmt.Errorf("%s: must be sorted, unique and not empty", l.name)
			}
		}
	}
	for i, st := range s.Statuses {
		if !st.Valid() {
			return fmt.Errorf("statuses: unknown status %d", st)
		}
		if i > 0 && s.Statuses[i-1] >= st {
			return errors.New("statuses: must be sorted and unique")
		}
	}
	switch {
	case s.AckTimeout < 0:
		return errors.New("ack_timeout: must not be negative")
	case s.Secret != "" && s.Webhook == "":
		return errors.New("secret: only with a webhook")
	}
	return nil
}

// Matches reports whether the filter of s takes task event ev. Workflow
// events (no task) are never taken.
func (s *Subscription) Matches(ev *Event) bool {
	if ev.TaskID == "" {
		return false
	}
	return (len(s.Pools) == 0 || slices.Contains(s.Pools, ev.Pool)) &&
		(len(s.Statuses) == 0 || slices.Contains(s.Statuses, ev.Status)) &&
		(len(s.Kinds) == 0 || slices.Contains(s.Kinds, ev.Kind))
}

// DelSubscription removes a subscription and every event it holds.
type DelSubscription struct {
	Name string `msgpack:"n"`
}

// AckSubscription acks the events of a subscription up to Cursor
// (inclusive): they are dropped, and a stall is cleared. A cursor at or
// before the subscription's Acked changes nothing; one past the last event
// of the log acks up to that event.
type AckSubscription struct {
	Name   string `msgpack:"n"`
	Cursor uint64 `msgpack:"c"`
}

// StallSubscription marks a subscription stalled: its first unacked event
// was delivered as many times as it allows without an ack.
type StallSubscription struct {
	Name   string  `msgpack:"n"`
	Reason string  `msgpack:"r,omitempty"`
	At     Instant `msgpack:"at"`
}

// SubscriptionEvent is an event a subscription holds, as a snapshot
// stores it (log format 6).
type SubscriptionEvent struct {
	Subscription string  `msgpack:"sub"`
	Cursor       uint64  `msgpack:"c"`
	TaskID       string  `msgpack:"id"`
	Pool         string  `msgpack:"p"`
	Kind         string  `msgpack:"k"`
	Status       Status  `msgpack:"st"`
	Attempt      uint32  `msgpack:"a,omitempty"`
	Message      string  `msgpack:"m,omitempty"`
	At           Instant `msgpack:"at"`
	Workflow     string  `msgpack:"wf,omitempty"`
	Step         string  `msgpack:"sp,omitempty"`
}
