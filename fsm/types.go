// Package fsm is cronoq's replicated state machine: the durable task table
// that every node of the cluster holds, and the schema of the Raft log
// entries that change it.
//
// Apply is a pure function of the prior state and the entry bytes: it reads no
// clock (times travel inside the entry, stamped by the leader's engine), uses
// no randomness, never depends on map iteration order and does no I/O. The
// same log therefore yields byte-identical snapshots on every node.
package fsm

import "time"

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
	StatusExpired   Status = 8 // its deadline passed before it succeeded

	numStatuses = 9
)

// AllStatuses lists every valid status in numeric order.
var AllStatuses = []Status{
	StatusScheduled, StatusQueued, StatusRunning, StatusRetrying,
	StatusSucceeded, StatusFailed, StatusCancelled, StatusExpired,
}

var statusNames = [numStatuses]string{
	"unknown", "scheduled", "queued", "running", "retrying",
	"succeeded", "failed", "cancelled", "expired",
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
// run: scheduled, queued or retrying).
func (s Status) Pending() bool {
	return s == StatusScheduled || s == StatusQueued || s == StatusRetrying
}

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

// KV is one label or tag. Lists of KV are kept sorted by key with unique keys
// so that their encoding is deterministic.
type KV struct {
	K string `msgpack:"k"`
	V string `msgpack:"v"`
}

// Backoff is the retry policy of a task. Durations are nanoseconds.
type Backoff struct {
	Initial int64   `msgpack:"i,omitempty"` // first retry delay
	Max     int64   `msgpack:"m,omitempty"` // cap on the delay
	Jitter  float64 `msgpack:"j,omitempty"` // ± fraction, e.g. 0.2
}

// Task is one durable task record. Records stored in the state are immutable:
// a change replaces the pointer with a modified copy, which is what makes
// O(1) copy-on-write snapshots safe.
//
// All instants are Unix nanoseconds of the leader's clock (0 = unset).
type Task struct {
	ID       string   `msgpack:"id"`
	Pool     string   `msgpack:"p"`
	Kind     string   `msgpack:"k"`
	Key      string   `msgpack:"key,omitempty"`
	Priority Priority `msgpack:"pr,omitempty"`
	Payload  []byte   `msgpack:"pl,omitempty"`
	Labels   []KV     `msgpack:"lb,omitempty"`
	Tags     []KV     `msgpack:"tg,omitempty"`

	RunAt       int64   `msgpack:"ra,omitempty"` // earliest start (also the retry instant while retrying)
	Deadline    int64   `msgpack:"dl,omitempty"` // absolute: past it the task ends expired
	Timeout     int64   `msgpack:"to,omitempty"` // per-attempt timeout, ns (0 = none)
	MaxAttempts uint32  `msgpack:"ma,omitempty"`
	Backoff     Backoff `msgpack:"bo,omitempty"`

	Schedule string `msgpack:"sc,omitempty"` // recurring schedule that fired it
	Slot     int64  `msgpack:"sl,omitempty"` // the scheduled instant of that fire

	Status    Status `msgpack:"st"`
	Attempt   uint32 `msgpack:"at,omitempty"` // attempts started
	Lease     uint64 `msgpack:"ls,omitempty"` // current lease token (0 = none)
	LastLease uint64 `msgpack:"ll,omitempty"` // highest lease token ever granted
	Worker    string `msgpack:"wk,omitempty"` // worker holding the current lease
	Output    []byte `msgpack:"out,omitempty"`
	Error     string `msgpack:"err,omitempty"`

	SubmittedAt int64 `msgpack:"sa"`
	StartedAt   int64 `msgpack:"sta,omitempty"` // start of the current or last attempt
	UpdatedAt   int64 `msgpack:"ua"`
	FinishedAt  int64 `msgpack:"fa,omitempty"`

	CreateIndex uint64 `msgpack:"ci"` // log index of the entry that inserted it
	ModifyIndex uint64 `msgpack:"mi"` // log index of the last entry that changed it
}

// Clone returns a shallow copy of t, safe to modify field by field (slices are
// shared and must be replaced, not written into).
func (t *Task) Clone() *Task {
	c := *t
	return &c
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

	// The template of the task each fire submits.
	Pool        string   `msgpack:"p"`
	Kind        string   `msgpack:"k"`
	Payload     []byte   `msgpack:"pl,omitempty"`
	Priority    Priority `msgpack:"pr,omitempty"`
	Labels      []KV     `msgpack:"lb,omitempty"`
	Tags        []KV     `msgpack:"tg,omitempty"`
	Timeout     int64    `msgpack:"to,omitempty"`
	MaxAttempts uint32   `msgpack:"ma,omitempty"`

	Overlap      Overlap `msgpack:"ov,omitempty"`
	CatchUp      CatchUp `msgpack:"cu,omitempty"`
	CatchUpLimit uint32  `msgpack:"cl,omitempty"`

	Paused    bool   `msgpack:"pa,omitempty"`
	CreatedAt int64  `msgpack:"ca"`           // fires are strictly after this instant
	LastFire  int64  `msgpack:"lf,omitempty"` // cursor: last slot fired or skipped (0 = none yet)
	LastTask  string `msgpack:"lt,omitempty"` // task created by the last fire
	Fires     uint64 `msgpack:"fi,omitempty"` // slots that created a task
	Skipped   uint64 `msgpack:"sk,omitempty"` // slots recorded as skipped

	CreateIndex uint64 `msgpack:"ci"`
	ModifyIndex uint64 `msgpack:"mi"`
}

// Clone returns a shallow copy of s.
func (s *Schedule) Clone() *Schedule {
	c := *s
	return &c
}

// ---------------------------------------------------------------------------
// Mutations: the contents of a commit batch.
// ---------------------------------------------------------------------------

// Mutation is one change to the state. Exactly one field is set. Fields are
// append-only: a new kind of mutation gets a new field at the end.
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
}

// Ready moves a scheduled or retrying task to queued once its run time came.
type Ready struct {
	ID string `msgpack:"id"`
	At int64  `msgpack:"at"`
}

// Start grants a lease: the task must be queued; Attempt must be the task's
// attempt count plus one and Lease must exceed every token granted before.
type Start struct {
	ID      string `msgpack:"id"`
	Attempt uint32 `msgpack:"a"`
	Lease   uint64 `msgpack:"l"`
	Worker  string `msgpack:"w,omitempty"`
	At      int64  `msgpack:"at"`
}

// Retry ends the current attempt with a retryable failure (reported by the
// worker, or a lost heartbeat, or a timeout): the task must be running under
// Lease. It goes to retrying until RetryAt (or straight to queued when
// RetryAt <= At).
type Retry struct {
	ID      string `msgpack:"id"`
	Lease   uint64 `msgpack:"l"`
	Error   string `msgpack:"e,omitempty"`
	RetryAt int64  `msgpack:"ra"`
	At      int64  `msgpack:"at"`
}

// Finish moves a task to a terminal status. With Lease != 0 the task must be
// running under that lease (a completion, or a cancel or expiry that revokes
// the lease); with Lease == 0 it must be live and not running.
type Finish struct {
	ID     string `msgpack:"id"`
	Lease  uint64 `msgpack:"l,omitempty"`
	Status Status `msgpack:"s"`
	Output []byte `msgpack:"o,omitempty"`
	Error  string `msgpack:"e,omitempty"`
	At     int64  `msgpack:"at"`
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
	Name   string `msgpack:"n"`
	Paused bool   `msgpack:"p"`
	At     int64  `msgpack:"at"`
}

// Fire advances a schedule's cursor to Slot (which must be after the current
// cursor). Skipped counts the slots before Slot (after the old cursor) that
// were passed over. TaskID names the task inserted in the same batch by this
// fire, or is empty when Slot itself is skipped (overlap or catch-up policy).
type Fire struct {
	Name    string `msgpack:"n"`
	Slot    int64  `msgpack:"s"`
	Skipped uint32 `msgpack:"k,omitempty"`
	TaskID  string `msgpack:"t,omitempty"`
}

// Tombstone records that a node was removed from the cluster on purpose, so
// that membership reconciliation does not add it back.
type Tombstone struct {
	NodeID string `msgpack:"n"`
	At     int64  `msgpack:"at"`
	Remove bool   `msgpack:"r,omitempty"` // clear the tombstone instead
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
	Epoch  uint64 `msgpack:"e"` // the new epoch: must be the current one + 1
	Leader string `msgpack:"l"`
	Time   int64  `msgpack:"t"`
}

// CommitBatch is one engine commit: the mutations of one or more engine
// steps, applied atomically (all or none) if Epoch is the current epoch.
type CommitBatch struct {
	Epoch     uint64     `msgpack:"e"`
	Time      int64      `msgpack:"t"` // leader wall clock when the batch was cut
	Mutations []Mutation `msgpack:"m"`
}

// Nanos converts a time to the Unix nanoseconds used in records (0 for the
// zero time).
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Time converts Unix nanoseconds back to a UTC time (zero for 0).
func Time(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
