package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/tinylib/msgp/msgp"
)

// fillValue sets v to random content. With all every field is set, else
// each field is set or left zero at random, so that every combination of
// omitted fields gets exercised. Slices are nil or non-empty (never empty
// and non-nil) so that decoded values compare equal. Instants and durations
// are int64s to it.
func fillValue(r *prng, v reflect.Value, all bool) {
	set := all || r.coin()
	switch v.Kind() {
	case reflect.String:
		if set {
			str := randString(r)
			if all && str == "" {
				str = "all" // every field set means a non-empty string too
			}
			v.SetString(str)
		}
	case reflect.Bool:
		v.SetBool(set)
	case reflect.Int64:
		if set {
			v.SetInt(randInt(r))
		}
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if set {
			bits := v.Type().Bits()
			n := randUint(r)
			if bits < 64 {
				n &= 1<<bits - 1
			}
			if n == 0 {
				n = 1
			}
			v.SetUint(n)
		}
	case reflect.Float64:
		if set {
			v.SetFloat(float64(randInt(r)) / 7)
		}
	case reflect.Slice:
		if !set {
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(randString(r) + "x"))
			return
		}
		n := 1 + r.intn(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			fillValue(r, s.Index(i), true)
		}
		v.Set(s)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fillValue(r, v.Field(i), all)
		}
	case reflect.Pointer:
		if set {
			p := reflect.New(v.Type().Elem())
			fillValue(r, p.Elem(), all)
			v.Set(p)
		}
	default:
		panic("fillValue: unhandled kind " + v.Kind().String())
	}
}

func randString(r *prng) string {
	switch r.intn(6) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("s", 31)
	case 2:
		return strings.Repeat("é", 100) // str8
	case 3:
		return strings.Repeat("x", 300) // str16
	case 4:
		if r.intn(20) == 0 {
			return strings.Repeat("y", 70000) // str32
		}
	}
	return "id-" + string(rune('a'+r.intn(26)))
}

// randInt covers every integer encoding class.
func randInt(r *prng) int64 {
	classes := []int64{0, 1, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 1<<31 - 1, 1 << 31, 1 << 32,
		int64(baseTime), 1<<63 - 1, -1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, -1 << 63}
	return classes[r.intn(len(classes))]
}

func randUint(r *prng) uint64 {
	classes := []uint64{1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, 1<<64 - 1}
	return classes[r.intn(len(classes))]
}

// randMutation returns a mutation of kind k (the index of its field).
func randMutation(r *prng, k int, all bool) Mutation {
	var m Mutation
	f := reflect.ValueOf(&m).Elem().Field(k)
	p := reflect.New(f.Type().Elem())
	fillValue(r, p.Elem(), all)
	f.Set(p)
	return m
}

var numMutationKinds = reflect.TypeOf(Mutation{}).NumField()

// randBatch returns a batch of random mutations of random kinds.
func randBatch(r *prng, all bool) *CommitBatch {
	b := &CommitBatch{Epoch: randUint(r), Time: Instant(randInt(r))}
	for i := 0; i < 1+r.intn(2*numMutationKinds); i++ {
		b.Mutations = append(b.Mutations, randMutation(r, r.intn(numMutationKinds), all))
	}
	return b
}

// The additions of log format 3 (see LogVersion), by Go name: the mutation
// kinds it added, and the fields it added to the records and mutations of
// the earlier formats. A task is of format 3 also when it is blocked.
var (
	format3Kinds          = []string{"Unblock", "PutWorkflow", "EndWorkflow", "PurgeWorkflow"}
	format3TaskFields     = []string{"Flow"}
	format3ScheduleFields = []string{"Workflow", "Steps"}
	format3FinishFields   = []string{"Workflow"}
	format3FireFields     = []string{"Workflow"}
)

// The additions of log format 4: its kinds, and the template field it
// added (to tasks, schedules and their steps). A task is of format 4 also
// when it is parked.
var (
	format4Kinds          = []string{"Admit", "PutPool"}
	format4TemplateFields = []string{"Keys"}
	format4TaskFields     = []string{"BlocksLane"}
	format4FinishFields   = []string{"BlocksLane"}
)

// The additions of log format 5: the ACL kinds, and the principal a
// template carries.
var (
	format5Kinds          = []string{"PutACLPolicy", "PutACLToken", "DelACL"}
	format5TemplateFields = []string{"Principal"}
)

// The additions of log format 6: the operator's retry, the attempt
// history of a task and its budget's base, and the outcome of the attempt
// a retry or a finish ends.
var (
	format6Kinds        = []string{"Requeue", "PutSubscription", "DelSubscription", "AckSubscription", "StallSubscription"}
	format6TaskFields   = []string{"AttemptBase", "Attempts"}
	format6RetryFields  = []string{"Outcome"}
	format6FinishFields = []string{"Outcome"}
)

// format5Schedule reports whether sc carries a principal, in its template
// or in one of its steps.
func format5Schedule(sc *Schedule) bool {
	if sc.Principal != "" {
		return true
	}
	for i := range sc.Steps {
		if sc.Steps[i].Principal != "" {
			return true
		}
	}
	return false
}

// hasKeys reports whether tpl carries a flow-control key (an empty Keys
// carries nothing, as an empty Flow).
func hasKeys(tpl *Template) bool {
	return tpl.Keys != nil && (tpl.Keys.Ordering != "" || tpl.Keys.Concurrency != "")
}

// format4Schedule reports whether sc sets a field format 4 added, in its
// template or in one of its steps.
func format4Schedule(sc *Schedule) bool {
	if hasKeys(&sc.Template) {
		return true
	}
	for i := range sc.Steps {
		if hasKeys(&sc.Steps[i].Template) {
			return true
		}
	}
	return false
}

// anySet reports whether any of the named fields of the struct v points to
// is set.
func anySet(v any, names []string) bool {
	e := reflect.ValueOf(v).Elem()
	for _, name := range names {
		f := e.FieldByName(name)
		if !f.IsValid() {
			panic("no field " + name)
		}
		if !f.IsZero() {
			return true
		}
	}
	return false
}

// clearFields zeroes the named fields of the struct v points to.
func clearFields(v any, names []string) {
	e := reflect.ValueOf(v).Elem()
	for _, name := range names {
		f := e.FieldByName(name)
		f.Set(reflect.Zero(f.Type()))
	}
}

// kindName returns the name of the kind of m (the field set).
func kindName(m *Mutation) string {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		if !v.Field(i).IsNil() {
			return v.Type().Field(i).Name
		}
	}
	return ""
}

// wantMutationVersion is the log format m needs, worked out from the
// definition of the log formats (see LogVersion): 3 for a kind or a field
// format 3 added (or a blocked task), 2 for a schedule with a backoff, else
// 1.
func wantMutationVersion(m *Mutation) uint16 {
	switch {
	case contains(format6Kinds, kindName(m)):
		return 6
	case m.Insert != nil && anySet(m.Insert, format6TaskFields):
		return 6
	case m.Retry != nil && anySet(m.Retry, format6RetryFields):
		return 6
	case m.Finish != nil && anySet(m.Finish, format6FinishFields):
		return 6
	case contains(format5Kinds, kindName(m)):
		return 5
	case m.Insert != nil && m.Insert.Principal != "":
		return 5
	case m.PutSchedule != nil && format5Schedule(m.PutSchedule):
		return 5
	case contains(format4Kinds, kindName(m)):
		return 4
	case m.Insert != nil && (m.Insert.Status == StatusParked || hasKeys(&m.Insert.Template) || anySet(m.Insert, format4TaskFields)):
		return 4
	case m.Finish != nil && anySet(m.Finish, format4FinishFields):
		return 4
	case m.PutSchedule != nil && format4Schedule(m.PutSchedule):
		return 4
	case contains(format3Kinds, kindName(m)):
		return 3
	case m.Insert != nil && (m.Insert.Status == StatusBlocked || anySet(m.Insert, format3TaskFields)):
		return 3
	case m.PutSchedule != nil && anySet(m.PutSchedule, format3ScheduleFields):
		return 3
	case m.Finish != nil && anySet(m.Finish, format3FinishFields):
		return 3
	case m.Fire != nil && anySet(m.Fire, format3FireFields):
		return 3
	case m.PutSchedule != nil && m.PutSchedule.Backoff != (Backoff{}):
		return 2
	}
	return 1
}

// wantVersion is the Version EncodeCommitBatch must write for b: the
// highest format its mutations need, or none (0) when that is 1.
func wantVersion(b *CommitBatch) uint16 {
	v := uint16(0)
	for i := range b.Mutations {
		if w := wantMutationVersion(&b.Mutations[i]); w > 1 {
			v = max(v, w)
		}
	}
	return v
}

// dropFormat6 makes b a batch of format 5 at most: it removes the
// requeues and clears the attempt histories and outcomes.
func dropFormat6(b *CommitBatch) {
	ms := b.Mutations[:0]
	for _, m := range b.Mutations {
		if contains(format6Kinds, kindName(&m)) {
			continue
		}
		switch {
		case m.Insert != nil:
			clearFields(m.Insert, format6TaskFields)
		case m.Retry != nil:
			clearFields(m.Retry, format6RetryFields)
		case m.Finish != nil:
			clearFields(m.Finish, format6FinishFields)
		}
		ms = append(ms, m)
	}
	b.Mutations = ms
}

// dropFormat5 makes b a batch of format 4 at most: it removes the ACL
// mutations and clears the principals.
func dropFormat5(b *CommitBatch) {
	dropFormat6(b)
	ms := b.Mutations[:0]
	for _, m := range b.Mutations {
		if contains(format5Kinds, kindName(&m)) {
			continue
		}
		switch {
		case m.Insert != nil:
			clearFields(&m.Insert.Template, format5TemplateFields)
		case m.PutSchedule != nil:
			clearFields(&m.PutSchedule.Template, format5TemplateFields)
			for i := range m.PutSchedule.Steps {
				clearFields(&m.PutSchedule.Steps[i].Template, format5TemplateFields)
			}
		}
		ms = append(ms, m)
	}
	b.Mutations = ms
}

// dropFormat4 makes b a batch of format 3 at most: it removes the
// mutations of the kinds format 4 added and clears the fields it added.
func dropFormat4(b *CommitBatch) {
	dropFormat5(b)
	ms := b.Mutations[:0]
	for _, m := range b.Mutations {
		if contains(format4Kinds, kindName(&m)) {
			continue
		}
		switch {
		case m.Insert != nil:
			clearFields(&m.Insert.Template, format4TemplateFields)
			clearFields(m.Insert, format4TaskFields)
			if m.Insert.Status == StatusParked {
				m.Insert.Status = StatusQueued
			}
		case m.PutSchedule != nil:
			clearFields(&m.PutSchedule.Template, format4TemplateFields)
			for i := range m.PutSchedule.Steps {
				clearFields(&m.PutSchedule.Steps[i].Template, format4TemplateFields)
			}
		case m.Finish != nil:
			clearFields(m.Finish, format4FinishFields)
		}
		ms = append(ms, m)
	}
	b.Mutations = ms
}

// dropFormat3 makes b a batch of the earlier formats: it removes the
// mutations of the kinds formats 3 and 4 added and clears the fields they
// added.
func dropFormat3(b *CommitBatch) {
	dropFormat4(b)
	ms := b.Mutations[:0]
	for _, m := range b.Mutations {
		if contains(format3Kinds, kindName(&m)) {
			continue
		}
		switch {
		case m.Insert != nil:
			clearFields(m.Insert, format3TaskFields)
			if m.Insert.Status == StatusBlocked {
				m.Insert.Status = StatusQueued
			}
		case m.PutSchedule != nil:
			clearFields(m.PutSchedule, format3ScheduleFields)
		case m.Finish != nil:
			clearFields(m.Finish, format3FinishFields)
		case m.Fire != nil:
			clearFields(m.Fire, format3FireFields)
		}
		ms = append(ms, m)
	}
	b.Mutations = ms
}

// goldenBatch returns a batch with one mutation of every kind, every field
// set, and integers of every encoded width. No schedule has a backoff: the
// batch is of log format 1.
func goldenBatch() *CommitBatch {
	task := &Task{
		ID: "01J00000000000000000000001",
		Template: Template{
			Pool: "email", Kind: "send", Priority: PriorityLow, Payload: []byte{0, 1, 2},
			Labels:  []KV{{K: "gpu", V: "yes"}},
			Tags:    []KV{{K: "traceparent", V: "00-1-2-01"}, {K: "z", V: ""}},
			Timeout: 70_000, MaxAttempts: 300,
			Backoff: Backoff{Initial: time.Second, Max: 300 * time.Second, Jitter: 0.2},
		},
		Key: "order-1", RunAt: baseTime + 1, Deadline: -1,
		Schedule: "nightly", Slot: -200, Status: StatusRunning, Attempt: 200,
		Lease: 1<<32 | 7, LastLease: 1<<32 | 7, Worker: "w-1", Output: []byte("out"),
		Error: "boom", SubmittedAt: baseTime, StartedAt: -40_000, UpdatedAt: -1 << 40,
		FinishedAt: 127, CreateIndex: 128, ModifyIndex: 1<<64 - 1,
	}
	sched := &Schedule{
		Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Paris",
		Template: Template{
			Pool: "email", Kind: "send", Payload: []byte("p"), Priority: PriorityHigh,
			Labels: []KV{{K: "a", V: "b"}}, Tags: []KV{{K: "c", V: "d"}},
			Timeout: 60 * time.Second, MaxAttempts: 3,
		},
		Overlap: OverlapAllow, CatchUp: CatchUpAll, CatchUpLimit: 10, Paused: true, CreatedAt: baseTime,
		LastFire: baseTime + 5, LastTask: "01J00000000000000000000001", Fires: 1 << 20,
		Skipped: 65_535, CreateIndex: 2, ModifyIndex: 65_536,
	}
	return &CommitBatch{Epoch: 1 << 33, Time: baseTime, Mutations: []Mutation{
		{Insert: task},
		{Ready: &Ready{ID: "r", At: 33}},
		{Start: &Start{ID: "s", Attempt: 1, Lease: 1<<32 | 1, Worker: "w", At: -33}},
		{Retry: &Retry{ID: "t", Lease: 255, Error: strings.Repeat("e", 40), RetryAt: 256, At: -129}},
		{Finish: &Finish{ID: "f", Lease: 256, Status: StatusFailed, Output: bytes.Repeat([]byte{7}, 300), Error: strings.Repeat("x", 300), At: -32_769}},
		{Purge: &Purge{ID: "p"}},
		{PutSchedule: sched},
		{DelSchedule: &DelSchedule{Name: "d"}},
		{PauseSchedule: &PauseSchedule{Name: "z", Paused: true, At: 1}},
		{Fire: &Fire{Name: "nightly", Slot: baseTime, Skipped: 4, TaskID: "01J00000000000000000000001"}},
		{Tombstone: &Tombstone{NodeID: "n3", At: baseTime, Remove: true}},
	}}
}

// backoffSchedule returns a schedule whose template carries a retry
// backoff: a record of log format 2.
func backoffSchedule(name string) *Schedule {
	return &Schedule{
		Name: name, Cron: "@hourly", CreatedAt: baseTime,
		Template: Template{Pool: "p", Kind: "k", Backoff: Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.5}},
	}
}

// goldenV2Batch returns a batch of log format 2.
func goldenV2Batch() *CommitBatch {
	return &CommitBatch{Epoch: 3, Time: baseTime, Mutations: []Mutation{
		{PutSchedule: backoffSchedule("s")},
		{Ready: &Ready{ID: "r", At: baseTime}},
	}}
}

// goldenWorkflow returns a workflow record with every field set.
func goldenWorkflow() *Workflow {
	return &Workflow{
		ID: "wf-1", Name: "nightly-etl", Key: "etl-2024-01-01", Status: WorkflowRunning,
		Schedule: "flow", Slot: baseTime, Parent: "01J00000000000000000000002",
		SubmittedAt: baseTime, UpdatedAt: baseTime + 1, FinishedAt: -1,
		CreateIndex: 255, ModifyIndex: 1 << 32,
	}
}

// goldenV3Task returns a task with every field of log format 3 set.
func goldenV3Task() *Task {
	return &Task{
		ID: "01J00000000000000000000003", Template: Template{Pool: "etl", Kind: "load"},
		RunAt: baseTime + 60e9,
		Flow: &Flow{
			DependsOn: []string{"01J00000000000000000000001", "01J00000000000000000000002"},
			DepPolicy: DepDone, External: true, Workflow: "wf-1", Step: "load", Parent: "01J00000000000000000000002",
		},
		Status: StatusBlocked, SubmittedAt: baseTime, UpdatedAt: baseTime, CreateIndex: 7, ModifyIndex: 8,
	}
}

// goldenV3Schedule returns a schedule that fires a workflow, whose steps
// set every field of a step between them.
func goldenV3Schedule() *Schedule {
	return &Schedule{
		Name: "flow", Cron: "0 2 * * *", TZ: "UTC", CreatedAt: baseTime,
		Workflow: "nightly-etl",
		Steps: []StepTemplate{
			{Name: "extract", Template: Template{Pool: "etl", Kind: "extract"}},
			{
				Name: "load",
				Template: Template{
					Pool: "etl", Kind: "load", Priority: PriorityHigh, Payload: []byte{9},
					Labels: []KV{{K: "region", V: "eu"}}, Tags: []KV{{K: "t", V: "1"}},
					Timeout: 30 * time.Second, MaxAttempts: 4,
					Backoff: Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.25},
				},
				DependsOn: []string{"extract"}, DepPolicy: DepDone, External: true,
			},
		},
		LastFire: baseTime, LastTask: "wf-1", Fires: 3, CreateIndex: 4, ModifyIndex: 300,
	}
}

// goldenV3Batch returns a batch of log format 3: one mutation of every kind
// format 3 added, and of every kind it extended with its new fields set,
// with integers of several encoded widths.
func goldenV3Batch() *CommitBatch {
	return &CommitBatch{Epoch: 1 << 16, Time: baseTime, Mutations: []Mutation{
		{PutWorkflow: goldenWorkflow()},
		{Insert: goldenV3Task()},
		{Unblock: &Unblock{ID: "01J00000000000000000000003", At: baseTime + 1}},
		{Finish: &Finish{ID: "01J00000000000000000000002", Status: StatusCancelled, At: -1, Workflow: "wf-1"}},
		{PutSchedule: goldenV3Schedule()},
		{Fire: &Fire{Name: "flow", Slot: baseTime + 86_400e9, Skipped: 1, Workflow: "wf-1"}},
		{EndWorkflow: &EndWorkflow{ID: "wf-1", Status: WorkflowFailed, At: 65_536}},
		{PurgeWorkflow: &PurgeWorkflow{ID: "wf-1"}},
	}}
}

// smallV3Batch returns a short batch of the kinds of log format 3 whose
// bodies are small, to pin as hex.
func smallV3Batch() *CommitBatch {
	return &CommitBatch{Epoch: 2, Time: baseTime, Mutations: []Mutation{
		{Unblock: &Unblock{ID: "t1", At: baseTime}},
		{EndWorkflow: &EndWorkflow{ID: "w", Status: WorkflowSucceeded, At: -1}},
		{PurgeWorkflow: &PurgeWorkflow{ID: "w"}},
	}}
}

// goldenPool returns pool settings with every field set.
func goldenPool() *Pool {
	return &Pool{
		Name: "etl", MaxRunning: 8, MaxPending: 100_000, MaxPendingPerClass: []int64{10, 0, 500},
		Overflow: OverflowPark, Rate: 12.5, Burst: 20,
		KindRates:        []KindRate{{Kind: "load", Rate: 0.5, Burst: 2}, {Kind: "send", Rate: 100}},
		ConcurrencyLimit: 3, Ordering: OrderingBlock, MaxAttempts: 7,
		Backoff:    Backoff{Initial: 2 * time.Second, Max: time.Hour, Jitter: 0.1},
		LeaseGrace: 30 * time.Second, Paused: true, UpdatedAt: baseTime, ModifyIndex: 70_000,
		Kinds: []KindSettings{
			{Kind: "load", PayloadSchema: []byte(`{"type":"object"}`), OutputSchema: []byte(`{"type":"string"}`),
				Timeout: time.Minute, MaxAttempts: 2, Backoff: Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.5}},
			{Kind: "send", MaxAttempts: 9},
		},
	}
}

// goldenV4Task returns a parked task with both flow-control keys.
func goldenV4Task() *Task {
	return &Task{
		ID:       "01J00000000000000000000009",
		Template: Template{Pool: "etl", Kind: "load", Keys: &Keys{Ordering: "customer-7", Concurrency: "tenant-2"}},
		RunAt:    baseTime, Status: StatusParked, SubmittedAt: baseTime, UpdatedAt: baseTime,
		CreateIndex: 9, ModifyIndex: 9,
	}
}

// goldenV4Schedule returns a schedule whose task and workflow step carry
// flow-control keys.
func goldenV4Schedule() *Schedule {
	return &Schedule{
		Name: "lanes", Cron: "*/5 * * * *", TZ: "UTC", CreatedAt: baseTime,
		Template:    Template{Pool: "etl", Kind: "sync", Keys: &Keys{Ordering: "a"}},
		CreateIndex: 5, ModifyIndex: 5,
	}
}

// goldenV4Batch returns a batch of log format 4: one mutation of every
// kind format 4 added, and of every kind it extended with its new fields
// set.
func goldenV4Batch() *CommitBatch {
	return &CommitBatch{Epoch: 3, Time: baseTime, Mutations: []Mutation{
		{PutPool: goldenPool()},
		{Insert: goldenV4Task()},
		{Admit: &Admit{ID: "01J00000000000000000000009", Status: StatusQueued, At: baseTime + 1}},
		{Finish: &Finish{ID: "01J00000000000000000000009", Status: StatusFailed, Error: "boom", At: baseTime + 2, BlocksLane: true}},
		{PutSchedule: goldenV4Schedule()},
	}}
}

// goldenACLToken returns a token with every field set.
func goldenACLToken() *ACLToken {
	h := sha256.Sum256([]byte("secret"))
	return &ACLToken{
		Accessor: "7d3c8c0a-7b40-4a0e-9d1c-5d8f3e0b9a11", SecretHash: h[:], Name: "root",
		Policies: []string{"etl", "ops"}, Management: true, Bootstrap: true, CreatedAt: baseTime, CreateIndex: 11,
	}
}

// goldenV5Batch returns a batch of log format 5: one mutation of every
// kind format 5 added, and a task and a schedule with a principal.
func goldenV5Batch() *CommitBatch {
	task := goldenV4Task()
	task.Principal = goldenACLToken().Accessor
	sc := goldenV4Schedule()
	sc.Principal = goldenACLToken().Accessor
	return &CommitBatch{Epoch: 4, Time: baseTime, Mutations: []Mutation{
		{PutACLPolicy: &ACLPolicy{Name: "etl", Description: "the etl team", Rules: `pool "etl" { policy = "submit" }`, CreateIndex: 10, ModifyIndex: 12}},
		{PutACLToken: goldenACLToken()},
		{Insert: task},
		{PutSchedule: sc},
		{DelACL: &DelACL{Policy: "etl"}},
		{DelACL: &DelACL{Token: "7d3c8c0a-7b40-4a0e-9d1c-5d8f3e0b9a11"}},
	}}
}

// goldenV6Task returns a task that was retried by an operator after two
// attempts, every field of an attempt set between them.
func goldenV6Task() *Task {
	return &Task{
		ID: "01J00000000000000000000006", Template: Template{Pool: "etl", Kind: "load"},
		Status: StatusQueued, Attempt: 2, AttemptBase: 2, LastLease: 5<<32 | 2, Worker: "w-2", Error: "permanent",
		Attempts: []Attempt{
			{Attempt: 1, Worker: "w-1", Lease: 5<<32 | 1, StartedAt: baseTime, FinishedAt: baseTime + 1e9, Outcome: AttemptTimeout, Error: "attempt timed out after 1s"},
			{Attempt: 2, Lease: 5<<32 | 2, StartedAt: -1, FinishedAt: 1 << 40, Outcome: AttemptFailed, Error: "permanent"},
		},
		RunAt: baseTime + 3e9, SubmittedAt: baseTime, UpdatedAt: baseTime + 3e9, CreateIndex: 9, ModifyIndex: 300,
	}
}

// goldenV6Batch returns a batch of log format 6: the requeue, and a retry
// and a finish that carry the outcome of the attempt they end.
func goldenV6Batch() *CommitBatch {
	return &CommitBatch{Epoch: 5, Time: baseTime, Mutations: []Mutation{
		{Retry: &Retry{ID: "01J00000000000000000000006", Lease: 5<<32 | 1, Error: "attempt timed out after 1s", RetryAt: baseTime + 2e9, At: baseTime + 1e9, Outcome: AttemptTimeout}},
		{Finish: &Finish{ID: "01J00000000000000000000006", Lease: 5<<32 | 2, Status: StatusFailed, Error: "permanent", At: 1 << 40, Outcome: AttemptFailed}},
		{Requeue: &Requeue{ID: "01J00000000000000000000006", At: baseTime + 3e9, Deadline: baseTime + 86_400e9}},
	}}
}

// goldenV6State returns a small state with a task of log format 6: two
// attempts recorded, then retried by an operator.
func goldenV6State(t testing.TB) *State {
	h := newHarness(t)
	id := "01J00000000000000000000006"
	h.ok(insert(id, "etl", "k6"), start(id, 1, lease(1, 1)), retryAs(id, lease(1, 1), AttemptLost, "lease lost"))
	h.ok(start(id, 2, lease(1, 2)), finishAs(id, lease(1, 2), StatusFailed, AttemptFailed, strings.Repeat("e", 2000)), requeue(id, 0))
	return h.s
}

// goldenV5State returns a small state with the records of log format 5:
// two policies, a bootstrap token and another, and a task with a
// principal.
func goldenV5State(t testing.TB) *State {
	h := newHarness(t)
	tk := goldenACLToken()
	other := &ACLToken{Accessor: "0a", SecretHash: make([]byte, 32), Policies: []string{"etl"}, CreatedAt: baseTime}
	task := insert("a", "p", "")
	task.Insert.Principal = tk.Accessor
	h.ok(Mutation{PutACLPolicy: &ACLPolicy{Name: "etl", Rules: `pool "etl" { policy = "submit" }`}},
		Mutation{PutACLPolicy: &ACLPolicy{Name: "anonymous", Rules: `pool "*" { policy = "read" }`}},
		Mutation{PutACLToken: tk}, Mutation{PutACLToken: other}, task)
	return h.s
}

// goldenSubscription returns a subscription with every field set.
func goldenSubscription() *Subscription {
	return &Subscription{
		Name: "billing", Pools: []string{"etl", "pay"}, Statuses: []Status{StatusSucceeded, StatusFailed},
		Kinds: []string{"charge"}, Webhook: "https://hooks.example/cronoq", Secret: "s3cret",
		AckTimeout: 30 * time.Second, MaxDeliveries: 5, Acked: MakeCursor(7, 1),
		Stalled: true, StallReason: "event 7.2 sent 5 times without an ack", StalledAt: baseTime + 9,
		CreatedAt: baseTime, CreateIndex: 3, ModifyIndex: 12,
	}
}

// goldenSubscriptionEvent returns a held event with every field set.
func goldenSubscriptionEvent() *SubscriptionEvent {
	return &SubscriptionEvent{
		Subscription: "billing", Cursor: MakeCursor(8, 2), TaskID: "01J00000000000000000000009", Pool: "pay",
		Kind: "charge", Status: StatusFailed, Attempt: 3, Message: "card declined", At: baseTime + 4,
		Workflow: "wf-1", Step: "charge",
	}
}

// goldenV6SubsBatch returns a batch of log format 6: one mutation of
// every subscription kind format 6 added, every field set.
func goldenV6SubsBatch() *CommitBatch {
	return &CommitBatch{Epoch: 5, Time: baseTime, Mutations: []Mutation{
		{PutSubscription: goldenSubscription()},
		{AckSubscription: &AckSubscription{Name: "billing", Cursor: MakeCursor(9, 0)}},
		{StallSubscription: &StallSubscription{Name: "billing", Reason: "sent 5 times", At: baseTime + 1}},
		{DelSubscription: &DelSubscription{Name: "billing"}},
	}}
}

// goldenV6SubsState returns a small state with the subscription records
// of log format 6:
// two subscriptions, and the events of a task's life that each holds
// (one takes every event, the other the failures of pool "pay"), one of
// them acked.
func goldenV6SubsState(t testing.TB) *State {
	h := newHarness(t)
	all := &Subscription{Name: "all", AckTimeout: 30 * time.Second, MaxDeliveries: 10, CreatedAt: baseTime}
	fails := &Subscription{Name: "fails", Pools: []string{"pay"}, Statuses: []Status{StatusFailed},
		Webhook: "https://hooks.example/x", Secret: "k", AckTimeout: time.Minute, MaxDeliveries: 3}
	h.ok(Mutation{PutSubscription: all}, Mutation{PutSubscription: fails}, insert("a", "pay", ""))
	failed := finish("a", lease(1, 1), StatusFailed)
	failed.Finish.Error = "declined"
	h.ok(start("a", 1, lease(1, 1)), failed)
	h.ok(Mutation{AckSubscription: &AckSubscription{Name: "all", Cursor: MakeCursor(2, 0)}})
	return h.s
}

// goldenV4State returns a small state with the records of log format 4: a
// pool's settings and a parked task with keys.
func goldenV4State(t testing.TB) *State {
	h := newHarness(t)
	parked := insert("a", "p", "")
	parked.Insert.Status = StatusParked
	parked.Insert.Keys = &Keys{Ordering: "o", Concurrency: "c"}
	blocker := insert("c", "p", "")
	blocker.Insert.Keys = &Keys{Ordering: "o"}
	h.ok(Mutation{PutPool: goldenPool()}, parked, insert("b", "p", "kb"), blocker,
		Mutation{Finish: &Finish{ID: "c", Status: StatusCancelled, BlocksLane: true}})
	return h.s
}

// goldenV3State returns a small state of every record type of log format
// 3: a workflow, a blocked member of it, a task spawned by a member, a
// schedule that fires workflows and a tombstone.
func goldenV3State(t testing.TB) *State {
	h := newHarness(t)
	member := insert("a", "p", "ka")
	member.Insert.MakeFlow().Workflow, member.Insert.MakeFlow().Step = "w", "first"
	blocked := insertBlocked("b", "p", "a")
	blocked.Insert.MakeFlow().Workflow, blocked.Insert.MakeFlow().Step, blocked.Insert.MakeFlow().DepPolicy = "w", "second", DepDone
	spawned := insert("c", "q", "")
	spawned.Insert.MakeFlow().Parent, spawned.Insert.MakeFlow().External = "a", true
	h.ok(Mutation{PutWorkflow: &Workflow{ID: "w", Name: "n", Key: "kw", Status: WorkflowRunning, SubmittedAt: baseTime}},
		member, blocked, spawned, Mutation{PutSchedule: goldenV3Schedule()}, tombstone("n1", false))
	return h.s
}

// goldenState returns a small state of every record type, with a schedule
// of log format 2.
func goldenState(t testing.TB) *State {
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"), start("a", 1, l1), insertScheduled("b", "q", baseTime+9))
	h.ok(Mutation{PutSchedule: backoffSchedule("s")}, tombstone("n1", false))
	return h.s
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestFormatIsStable pins the bytes of log entries and snapshot records.
// Nodes of different releases read each other's log entries and snapshots,
// and every node must write byte-identical snapshots of the same log: THE
// BYTES BELOW MUST NEVER CHANGE FOR EXISTING TYPES. Adding a field or a
// kind adds bytes to new values only (and a LogVersion when older nodes
// must not skip it); a change to an existing value's encoding is a format
// break, not a new golden value. Short values are pinned as hex, long ones
// by their SHA-256.
func TestFormatIsStable(t *testing.T) {
	// An epoch bump: type 1, {"e": 7, "l": "node-a", "t": baseTime}. msgp
	// writes a non-negative int64 as an int code (0xd3), uint64s as uint
	// codes.
	bump, err := EncodeEpochBump(&EpochBump{Epoch: 7, Leader: "node-a", Time: baseTime})
	require.NoError(t, err)
	require.Equal(t, "0183a16507a16ca66e6f64652d61a174d317979cfe362a0000", hex.EncodeToString(bump))

	// A small batch of format 1 (no "v" key): an insert, a start, a finish.
	small, err := EncodeCommitBatch(&CommitBatch{Epoch: 3, Time: baseTime, Mutations: []Mutation{
		insert("t1", "p", "k1"), start("t1", 1, lease(3, 1)), finish("t1", lease(3, 1), StatusSucceeded),
	}})
	require.NoError(t, err)
	require.Equal(t, smallBatchHex, hex.EncodeToString(small))

	// One mutation of every kind, every field set.
	data, err := EncodeCommitBatch(goldenBatch())
	require.NoError(t, err)
	require.Len(t, data, goldenBatchLen)
	require.Equal(t, goldenBatchSHA256, sha256Hex(data))

	// A batch of format 2: a schedule with a backoff, and "v": 2 at the end.
	v2, err := EncodeCommitBatch(goldenV2Batch())
	require.NoError(t, err)
	require.Equal(t, v2BatchHex, hex.EncodeToString(v2))
	require.True(t, bytes.HasSuffix(v2, []byte{0xa1, 'v', 0x02}))

	// Snapshot records.
	b := goldenBatch()
	require.Equal(t, goldenTaskSHA256, sha256Hex(recordBody(b.Mutations[0].Insert)))
	require.Equal(t, goldenScheduleSHA256, sha256Hex(recordBody(b.Mutations[6].PutSchedule)))
	require.Equal(t, v2ScheduleHex, hex.EncodeToString(recordBody(backoffSchedule("s"))))
	require.Equal(t, "82a16ea26e33a26174fe", hex.EncodeToString(recordBody(&Tombstone{NodeID: "n3", At: -2})))
	require.Equal(t, "82a16ea26e33a26174d317979cfe362a0000", hex.EncodeToString(recordBody(&Tombstone{NodeID: "n3", At: baseTime})))

	// A whole snapshot: header (magic, version 2 for the schedule's
	// backoff, epoch 1, epoch term 1, applied index 3), records, end.
	snap := snapshotBytes(t, goldenState(t))
	require.Equal(t, "43525153"+"0002"+"0000000000000001"+"0000000000000001"+"0000000000000003",
		hex.EncodeToString(snap[:30]))
	require.Len(t, snap, goldenSnapshotLen)
	require.Equal(t, goldenSnapshotSHA256, sha256Hex(snap))

	// And the pinned bytes read back as what was written.
	_, v, err := DecodeEntry(data)
	require.NoError(t, err)
	require.Equal(t, goldenBatch(), v)
	_, v, err = DecodeEntry(v2)
	require.NoError(t, err)
	want := goldenV2Batch()
	want.Version = 2
	require.Equal(t, want, v)
	restored := New()
	require.NoError(t, restored.Restore(bytes.NewReader(snap)))
	require.Equal(t, snap, snapshotBytes(t, restored))

	// Log format 3. The entries and records above, of the earlier formats,
	// keep their bytes; what format 3 added is pinned below, computed once
	// from the encoder of the release that introduced it and pasted in.
	//
	// A short batch of format 3 kinds, and "v": 3 at the end.
	small3, err := EncodeCommitBatch(smallV3Batch())
	require.NoError(t, err)
	require.Equal(t, smallV3BatchHex, hex.EncodeToString(small3))
	require.True(t, bytes.HasSuffix(small3, []byte{0xa1, 'v', 0x03}))

	// One mutation of every kind format 3 added or extended, every field
	// format 3 added set.
	v3, err := EncodeCommitBatch(goldenV3Batch())
	require.NoError(t, err)
	require.Len(t, v3, goldenV3BatchLen)
	require.Equal(t, goldenV3BatchSHA256, sha256Hex(v3))
	require.True(t, bytes.HasSuffix(v3, []byte{0xa1, 'v', 0x03}))

	// Snapshot records of format 3.
	require.Equal(t, goldenWorkflowHex, hex.EncodeToString(recordBody(goldenWorkflow())))
	require.Equal(t, goldenV3TaskHex, hex.EncodeToString(recordBody(goldenV3Task())))
	require.Equal(t, goldenV3ScheduleSHA256, sha256Hex(recordBody(goldenV3Schedule())))

	// A whole snapshot of format 3: header (version 3, epoch 1, epoch term
	// 1, applied index 2), records, and an end marker of four counts (3
	// tasks, 1 schedule, 1 tombstone, 1 workflow).
	snap3 := snapshotBytes(t, goldenV3State(t))
	require.Equal(t, "43525153"+"0003"+"0000000000000001"+"0000000000000001"+"0000000000000002",
		hex.EncodeToString(snap3[:30]))
	require.Equal(t, "ff"+"0000000000000003"+"0000000000000001"+"0000000000000001"+"0000000000000001",
		hex.EncodeToString(snap3[len(snap3)-33:]))
	require.Len(t, snap3, goldenV3SnapshotLen)
	require.Equal(t, goldenV3SnapshotSHA256, sha256Hex(snap3))

	// They read back as what was written.
	for _, tc := range []struct {
		data []byte
		want *CommitBatch
	}{{small3, smallV3Batch()}, {v3, goldenV3Batch()}} {
		_, v, err = DecodeEntry(tc.data)
		require.NoError(t, err)
		tc.want.Version = 3
		require.Equal(t, tc.want, v)
	}
	restored = New()
	require.NoError(t, restored.Restore(bytes.NewReader(snap3)))
	require.Equal(t, snap3, snapshotBytes(t, restored))

	// Log format 4, pinned the same way.
	v4, err := EncodeCommitBatch(goldenV4Batch())
	require.NoError(t, err)
	require.Len(t, v4, goldenV4BatchLen)
	require.Equal(t, goldenV4BatchSHA256, sha256Hex(v4))
	require.True(t, bytes.HasSuffix(v4, []byte{0xa1, 'v', 0x04}))
	require.Equal(t, goldenPoolSHA256, sha256Hex(recordBody(goldenPool())))
	require.Equal(t, goldenV4TaskHex, hex.EncodeToString(recordBody(goldenV4Task())))

	// A whole snapshot of format 4: header (version 4), records, and an end
	// marker of five counts (3 tasks, 0 schedules, 0 tombstones, 0
	// workflows, 1 pool).
	snap4 := snapshotBytes(t, goldenV4State(t))
	require.Equal(t, "43525153"+"0004"+"0000000000000001"+"0000000000000001"+"0000000000000002",
		hex.EncodeToString(snap4[:30]))
	require.Equal(t, "ff"+"0000000000000003"+"0000000000000000"+"0000000000000000"+"0000000000000000"+"0000000000000001",
		hex.EncodeToString(snap4[len(snap4)-41:]))
	require.Len(t, snap4, goldenV4SnapshotLen)
	require.Equal(t, goldenV4SnapshotSHA256, sha256Hex(snap4))

	_, v, err = DecodeEntry(v4)
	require.NoError(t, err)
	want4 := goldenV4Batch()
	want4.Version = 4
	require.Equal(t, want4, v)
	restored = New()
	require.NoError(t, restored.Restore(bytes.NewReader(snap4)))
	require.Equal(t, snap4, snapshotBytes(t, restored))

	// Log format 5, pinned the same way.
	v5, err := EncodeCommitBatch(goldenV5Batch())
	require.NoError(t, err)
	require.Len(t, v5, goldenV5BatchLen)
	require.Equal(t, goldenV5BatchSHA256, sha256Hex(v5))
	require.True(t, bytes.HasSuffix(v5, []byte{0xa1, 'v', 0x05}))
	require.Equal(t, goldenACLTokenHex, hex.EncodeToString(recordBody(goldenACLToken())))

	// A whole snapshot of format 5: header (version 5), records, and an end
	// marker of eight counts (1 task, 0 schedules, 0 tombstones, 0
	// workflows, 0 pools, 2 ACL policies, 2 ACL tokens, bootstrap at index
	// 1).
	snap5 := snapshotBytes(t, goldenV5State(t))
	require.Equal(t, "43525153"+"0005"+"0000000000000001"+"0000000000000001"+"0000000000000002",
		hex.EncodeToString(snap5[:30]))
	require.Equal(t, "ff"+"0000000000000001"+"0000000000000000"+"0000000000000000"+"0000000000000000"+"0000000000000000"+
		"0000000000000002"+"0000000000000002"+"0000000000000002",
		hex.EncodeToString(snap5[len(snap5)-65:]))
	require.Len(t, snap5, goldenV5SnapshotLen)
	require.Equal(t, goldenV5SnapshotSHA256, sha256Hex(snap5))

	_, v, err = DecodeEntry(v5)
	require.NoError(t, err)
	want5 := goldenV5Batch()
	want5.Version = 5
	require.Equal(t, want5, v)
	restored = New()
	require.NoError(t, restored.Restore(bytes.NewReader(snap5)))
	require.Equal(t, snap5, snapshotBytes(t, restored))
	require.Equal(t, uint64(2), restored.ACLBootstrapIndex())
	got, ok := restored.ACLTokenBySecret(sha256.Sum256([]byte("secret")))
	require.True(t, ok)
	require.Equal(t, goldenACLToken().Accessor, got.Accessor)

	// Log format 6, pinned the same way.
	v6, err := EncodeCommitBatch(goldenV6Batch())
	require.NoError(t, err)
	require.Equal(t, goldenV6BatchHex, hex.EncodeToString(v6))
	require.True(t, bytes.HasSuffix(v6, []byte{0xa1, 'v', 0x06}))
	require.Equal(t, goldenV6TaskHex, hex.EncodeToString(recordBody(goldenV6Task())))

	// A whole snapshot of format 6: header (version 6), records, and an end
	// marker of ten counts (1 task, nothing else).
	snap6 := snapshotBytes(t, goldenV6State(t))
	require.Equal(t, "43525153"+"0006"+"0000000000000001"+"0000000000000001"+"0000000000000003",
		hex.EncodeToString(snap6[:30]))
	require.Len(t, snap6, goldenV6SnapshotLen)
	require.Equal(t, goldenV6SnapshotSHA256, sha256Hex(snap6))

	_, v, err = DecodeEntry(v6)
	require.NoError(t, err)
	want6 := goldenV6Batch()
	want6.Version = 6
	require.Equal(t, want6, v)
	restored = New()
	require.NoError(t, restored.Restore(bytes.NewReader(snap6)))
	require.Equal(t, snap6, snapshotBytes(t, restored))

	// The subscriptions of log format 6, pinned the same way.
	v6s, err := EncodeCommitBatch(goldenV6SubsBatch())
	require.NoError(t, err)
	require.Len(t, v6s, goldenV6SubsBatchLen)
	require.Equal(t, goldenV6SubsBatchSHA256, sha256Hex(v6s))
	require.True(t, bytes.HasSuffix(v6s, []byte{0xa1, 'v', 0x06}))
	require.Equal(t, goldenSubscriptionHex, hex.EncodeToString(recordBody(goldenSubscription())))
	require.Equal(t, goldenSubscriptionEventHex, hex.EncodeToString(recordBody(goldenSubscriptionEvent())))

	// A whole snapshot of format 6: header (version 6, applied index 4),
	// records, and an end marker of ten counts (1 task, 0 schedules, 0
	// tombstones, 0 workflows, 0 pools, 0 ACL policies, 0 ACL tokens, no
	// bootstrap, 2 subscriptions, 3 events held: two of "all" after its
	// ack, the failure of "fails").
	snap6s := snapshotBytes(t, goldenV6SubsState(t))
	require.Equal(t, "43525153"+"0006"+"0000000000000001"+"0000000000000001"+"0000000000000004",
		hex.EncodeToString(snap6s[:30]))
	require.Equal(t, "ff"+"0000000000000001"+strings.Repeat("0000000000000000", 7)+"0000000000000002"+"0000000000000003",
		hex.EncodeToString(snap6s[len(snap6s)-81:]))
	require.Len(t, snap6s, goldenV6SubsSnapshotLen)
	require.Equal(t, goldenV6SubsSnapshotSHA256, sha256Hex(snap6s))

	_, v, err = DecodeEntry(v6s)
	require.NoError(t, err)
	want6s := goldenV6SubsBatch()
	want6s.Version = 6
	require.Equal(t, want6s, v)
	restored = New()
	require.NoError(t, restored.Restore(bytes.NewReader(snap6s)))
	require.Equal(t, snap6s, snapshotBytes(t, restored))
	require.Len(t, restored.SubscriptionEvents("all", 0, 0), 2)
	require.Equal(t, []string{"all", "fails"}, restored.SubscriptionsHolding("a"))
}

// The golden values of log format 6 in TestFormatIsStable, computed once
// from the encoder of the release that introduced format 6 (msgp v1.6.5)
// and pasted in. Never update them to make the test pass.
const (
	goldenV6BatchHex = "0284a16505a174d317979cfe362a0000a16d9381a2727486a26964ba30314a3030303030303030303030303030303030303030303036" +
		"a16ccf0000000500000001a165ba617474656d70742074696d6564206f7574206166746572203173a27261d317979cfead5f9400" +
		"a26174d317979cfe71c4ca00a26f630681a2666e86a26964ba30314a3030303030303030303030303030303030303030303036" +
		"a16ccf0000000500000002a17306a165a97065726d616e656e74a26174d30000010000000000a26f630281a2727183a26964" +
		"ba30314a3030303030303030303030303030303030303030303036a26174d317979cfee8fa5e00a2646cd31797eb92c7790000a17606"
	goldenV6TaskHex = "8fa26964ba30314a3030303030303030303030303030303030303030303036a170a365746ca16ba46c6f6164" +
		"a27261d317979cfee8fa5e00a2737402a2617402a26c6ccf0000000500000002a2776ba3772d32a3657272a97065726d616e656e74" +
		"a2616202a261689287a16e01a177a3772d31a16ccf0000000500000001a27361d317979cfe362a0000a26661d317979cfe71c4ca00" +
		"a16f06a165ba617474656d70742074696d6564206f757420616674657220317386a16e02a16ccf0000000500000002a27361ff" +
		"a26661d30000010000000000a16f02a165a97065726d616e656e74a27361d317979cfe362a0000a27561d317979cfee8fa5e00" +
		"a2636909a26d69cd012c"
	goldenV6SnapshotLen    = 3437
	goldenV6SnapshotSHA256 = "de7d3c28ab92f8f2c7475f5aca2bdca1c06fcfbab4f8b73144aabe54bc8fd92c"
)

// TestGoldenBatchesCoverEveryKind holds the golden batches of
// TestFormatIsStable to pin every mutation kind between them: the kinds
// of formats 1 and 2 in goldenBatch, those format 3 added in
// goldenV3Batch, which also sets every field format 3 added.
func TestGoldenBatchesCoverEveryKind(t *testing.T) {
	kinds := func(b *CommitBatch) []string {
		var out []string
		for i := range b.Mutations {
			out = append(out, kindName(&b.Mutations[i]))
		}
		return out
	}
	old, v3, v4, v5, v6 := kinds(goldenBatch()), kinds(goldenV3Batch()), kinds(goldenV4Batch()), kinds(goldenV5Batch()), append(kinds(goldenV6Batch()), kinds(goldenV6SubsBatch())...)
	for i := 0; i < numMutationKinds; i++ {
		name := reflect.TypeOf(Mutation{}).Field(i).Name
		switch {
		case contains(format6Kinds, name):
			require.Contains(t, v6, name)
			require.NotContains(t, old, name)
			require.NotContains(t, v5, name)
		case contains(format5Kinds, name):
			require.Contains(t, v5, name)
			require.NotContains(t, old, name)
			require.NotContains(t, v3, name)
			require.NotContains(t, v4, name)
		case contains(format4Kinds, name):
			require.Contains(t, v4, name)
			require.NotContains(t, old, name)
			require.NotContains(t, v3, name)
		case contains(format3Kinds, name):
			require.Contains(t, v3, name)
			require.NotContains(t, old, name)
		default:
			require.Contains(t, old, name)
		}
	}
	for _, m := range goldenV3Batch().Mutations {
		switch {
		case m.Insert != nil:
			requireFieldsSet(t, m.Insert, format3TaskFields...)
			requireFieldsSet(t, m.Insert.Flow)
			require.Equal(t, StatusBlocked, m.Insert.Status)
		case m.PutSchedule != nil:
			requireFieldsSet(t, m.PutSchedule, format3ScheduleFields...)
			// Every field of a step is set in some step.
			typ := reflect.TypeOf(StepTemplate{})
			for i := 0; i < typ.NumField(); i++ {
				set := false
				for _, st := range m.PutSchedule.Steps {
					set = set || !reflect.ValueOf(st).Field(i).IsZero()
				}
				require.True(t, set, "no step sets %s", typ.Field(i).Name)
			}
		case m.Finish != nil:
			requireFieldsSet(t, m.Finish, format3FinishFields...)
		case m.Fire != nil:
			requireFieldsSet(t, m.Fire, format3FireFields...)
		case m.PutWorkflow != nil:
			requireFieldsSet(t, m.PutWorkflow)
		case m.Unblock != nil:
			requireFieldsSet(t, m.Unblock)
		case m.EndWorkflow != nil:
			requireFieldsSet(t, m.EndWorkflow)
		case m.PurgeWorkflow != nil:
			requireFieldsSet(t, m.PurgeWorkflow)
		}
	}
	for _, m := range goldenV4Batch().Mutations {
		switch {
		case m.Insert != nil:
			requireFieldsSet(t, &m.Insert.Template, format4TemplateFields...)
			requireFieldsSet(t, m.Insert.Keys)
			require.Equal(t, StatusParked, m.Insert.Status)
		case m.PutSchedule != nil:
			requireFieldsSet(t, &m.PutSchedule.Template, format4TemplateFields...)
		case m.PutPool != nil:
			requireFieldsSet(t, m.PutPool)
			requireFieldsSet(t, &m.PutPool.KindRates[0])
			requireFieldsSet(t, &m.PutPool.Kinds[0])
		case m.Admit != nil:
			requireFieldsSet(t, m.Admit)
		case m.Finish != nil:
			requireFieldsSet(t, m.Finish, format4FinishFields...)
		}
	}
	for _, m := range goldenV5Batch().Mutations {
		switch {
		case m.Insert != nil:
			requireFieldsSet(t, &m.Insert.Template, format5TemplateFields...)
		case m.PutSchedule != nil:
			requireFieldsSet(t, &m.PutSchedule.Template, format5TemplateFields...)
		case m.PutACLPolicy != nil:
			requireFieldsSet(t, m.PutACLPolicy)
		case m.PutACLToken != nil:
			requireFieldsSet(t, m.PutACLToken)
		}
	}
	for _, m := range goldenV6Batch().Mutations {
		switch {
		case m.Retry != nil:
			requireFieldsSet(t, m.Retry)
		case m.Finish != nil:
			requireFieldsSet(t, m.Finish, format6FinishFields...)
		case m.Requeue != nil:
			requireFieldsSet(t, m.Requeue)
		}
	}
	task := goldenV6Task()
	requireFieldsSet(t, task, format6TaskFields...)
	for _, m := range goldenV6SubsBatch().Mutations {
		switch {
		case m.PutSubscription != nil:
			requireFieldsSet(t, m.PutSubscription)
		case m.DelSubscription != nil:
			requireFieldsSet(t, m.DelSubscription)
		case m.AckSubscription != nil:
			requireFieldsSet(t, m.AckSubscription)
		case m.StallSubscription != nil:
			requireFieldsSet(t, m.StallSubscription)
		}
	}
	requireFieldsSet(t, goldenSubscriptionEvent())
	for _, name := range []string{"Attempt", "Worker", "Lease", "StartedAt", "FinishedAt", "Outcome", "Error"} {
		set := false
		for _, a := range task.Attempts {
			set = set || !reflect.ValueOf(a).FieldByName(name).IsZero()
		}
		require.True(t, set, "no attempt sets %s", name)
	}
	var dels []string
	for _, m := range goldenV5Batch().Mutations {
		if m.DelACL != nil {
			dels = append(dels, m.DelACL.Policy+"|"+m.DelACL.Token)
		}
	}
	require.Len(t, dels, 2, "a policy delete and a token delete")
}

// requireFieldsSet requires the named fields (every field when none is
// named) of the struct v points to to be set.
func requireFieldsSet(t *testing.T, v any, names ...string) {
	t.Helper()
	e := reflect.ValueOf(v).Elem()
	if len(names) == 0 {
		for i := 0; i < e.NumField(); i++ {
			names = append(names, e.Type().Field(i).Name)
		}
	}
	for _, name := range names {
		require.False(t, e.FieldByName(name).IsZero(), "%T.%s is not set", v, name)
	}
}

// The golden values of TestFormatIsStable, computed from the encoder of
// the release that introduced them (msgp v1.6.5, log format 2). Never
// update them to make the test pass.
const (
	smallBatchHex = "0283a16503a174d317979cfe362a0000a16d9381a2696e8aa26964a27431a170a170a16ba16ba2706cc40a7061796c6f61642d7431" +
		"a36b6579a26b31a2737402a27361d317979cfe362a0000a2756100a2636900a26d690081a2737285a26964a27431a16101a16ccf0000000300000001" +
		"a177a27731a26174d317979cfe362a000281a2666e85a26964a27431a16ccf0000000300000001a17305a16fc4036f7574a26174d317979cfe362a0004"
	goldenBatchLen    = 1426
	goldenBatchSHA256 = "274a6c9ac56a3e2d19a4690da60d7f9246f1b80bee2fb6bdd5587162a640c155"
	v2BatchHex        = "0284a16503a174d317979cfe362a0000a16d9281a2707388a16ea173a163a740686f75726c79a170a170a16ba16b" +
		"a2626f83a169d23b9aca00a16dd30000000df8475800a16acb3fe0000000000000a26361d317979cfe362a0000a2636900a26d6900" +
		"81a2726482a26964a172a26174d317979cfe362a0000a17602"
	goldenTaskSHA256     = "03f59296445e19c3ce4f23ab75c2c95f3eb138cdfd455d1aa289fad4dc4930c2"
	goldenScheduleSHA256 = "0eded8a580639a5da36ce38ee0637a69ca5dde117e5a6ccedd2a73dfd0b27d5f"
	v2ScheduleHex        = "88a16ea173a163a740686f75726c79a170a170a16ba16ba2626f83a169d23b9aca00a16dd30000000df8475800" +
		"a16acb3fe0000000000000a26361d317979cfe362a0000a2636900a26d6900"
	goldenSnapshotLen    = 351
	goldenSnapshotSHA256 = "7f14264af1c26f3156c39ab2cccd6b7edfb88b2864ea74c41e5b2b34d7a0b833"
)

// The golden values of log format 3 in TestFormatIsStable, computed once
// from the encoder of the release that introduced format 3 (msgp v1.6.5)
// and pasted in. Never update them to make the test pass: a change is a
// format break.
const (
	smallV3BatchHex = "0284a16502a174d317979cfe362a0000a16d9381a2756282a26964a27431a26174d317979cfe362a0000" +
		"81a2657783a26964a177a2737402a26174ff81a370776681a26964a177a17603"
	goldenV3BatchLen    = 817
	goldenV3BatchSHA256 = "92bb155f617c50dee5936b46930f81911356f6c1c5f3e8677262fed14b080798"
	goldenWorkflowHex   = "8ca26964a477662d31a16eab6e696768746c792d65746ca36b6579ae65746c2d323032342d30312d3031" +
		"a2737401a27363a4666c6f77a2736cd317979cfe362a0000a3706172ba30314a3030303030303030303030303030303030303030303032" +
		"a27361d317979cfe362a0000a27561d317979cfe362a0001a26661ffa26369ccffa26d69cf0000000100000000"
	goldenV3TaskHex = "8aa26964ba30314a3030303030303030303030303030303030303030303033a170a365746ca16ba46c6f6164" +
		"a27261d317979d0c2e715800a2666c86a2647092ba30314a3030303030303030303030303030303030303030" +
		"303031ba30314a3030303030303030303030303030303030303030303032a364707001a3657874c3a27766a4" +
		"77662d31a3737470a46c6f6164a3706172ba30314a3030303030303030303030303030303030303030303032" +
		"a2737409a27361d317979cfe362a0000a27561d317979cfe362a0000a2636907a26d6908"
	goldenV3ScheduleSHA256 = "2febb022b697fad9b8b19bd6a486ca43c4b3d6a425ab4428c6bfca9372e194d3"
	goldenV3SnapshotLen    = 665
	goldenV4BatchLen       = 632
	goldenV4BatchSHA256    = "62147fb147624892867420c8fbfdb91950e20c881cac599d7c6dab29d450e030"
	goldenPoolSHA256       = "d900c75c6526a99531e4882221f43f692dada428b5e8b30977956c53aca092e1"
	goldenV4TaskHex        = "8aa26964ba30314a3030303030303030303030303030303030303030303039a170a365746ca16ba46c6f6164a26b7382a16faa637573746f6d65722d37a163a874656e616e742d32a27261d317979cfe362a0000a273740aa27361d317979cfe362a0000a27561d317979cfe362a0000a2636909a26d6909"
	goldenV4SnapshotLen    = 606
	goldenV4SnapshotSHA256 = "8395b31963b3c28fa922d05ef1b3fe432adf63c79aee4672e693f5a5005d01e9"
	goldenV3SnapshotSHA256 = "87321aad7da1feff068bd58913e54281a8c6459a4d3decc85fb0ac78aa685223"
)

// intRewrites are the ways of writing the same body that the decoder must
// all read alike: the integers of every writer, wide headers and narrow
// floats.
var intRewrites = []rewrite{
	{ints: intsV1}, {ints: intsUint}, {ints: intsInt}, {ints: intsUint64},
	{ints: intsInt64, wide: true, float32: true}, {wide: true},
}

// TestCodecRoundTrip holds random batches of every kind and every
// combination of omitted fields to decode to what was encoded, also when
// another writer wrote the same values with other integer codes, wider
// headers or float32s; and EncodeCommitBatch to set the batch's Version.
func TestCodecRoundTrip(t *testing.T) {
	r := &prng{s: 1}
	versions := map[uint16]int{}
	for round := 0; round < 300; round++ {
		b := randBatch(r, round%10 == 0)
		switch round % 5 {
		case 1:
			// Most random batches hold something of every format: every
			// fifth is kept to the formats before 3, every fifth to
			// format 3, every fifth to 4 and every fifth to 5.
			dropFormat3(b)
		case 2:
			dropFormat4(b)
		case 3:
			dropFormat5(b)
		case 4:
			dropFormat6(b)
		}
		data, err := EncodeCommitBatch(b)
		require.NoError(t, err)
		require.Equal(t, byte(EntryCommitBatch), data[0])
		require.Equal(t, wantVersion(b), b.Version, "round %d", round)
		versions[b.Version]++
		require.Equal(t, data[1:], rewrite{}.apply(t, data[1:]), "the rewriter keeps what it is not told to change")
		typ, v, err := DecodeEntry(data)
		require.NoError(t, err)
		require.Equal(t, EntryCommitBatch, typ)
		require.Equal(t, b, v, "round %d", round)

		for _, w := range intRewrites {
			other := append([]byte{byte(EntryCommitBatch)}, w.apply(t, data[1:])...)
			_, v, err = DecodeEntry(other)
			require.NoError(t, err, "round %d, %+v", round, w)
			require.Equal(t, b, v, "round %d, %+v", round, w)
		}
	}
	for _, v := range []uint16{0, 2, 3, 4, 5, 6} {
		require.Greater(t, versions[v], 10, "batches of format %d were drawn: %v", v, versions)
	}
}

// TestSnapshotRecordsRoundTrip holds every snapshot record type to decode to
// what was encoded, in every writer's encoding.
func TestSnapshotRecordsRoundTrip(t *testing.T) {
	r := &prng{s: 2}
	for round := 0; round < 200; round++ {
		all := round%10 == 0
		for _, v := range []interface {
			msgp.Marshaler
			msgp.Unmarshaler
		}{new(Task), new(Schedule), new(Tombstone), new(Workflow)} {
			fillValue(r, reflect.ValueOf(v).Elem(), all)
			body := recordBody(v)
			for _, w := range append([]rewrite{{}}, intRewrites...) {
				got := reflect.New(reflect.TypeOf(v).Elem()).Interface().(msgp.Unmarshaler)
				require.NoError(t, decodeBody(w.apply(t, body), got), "%T %+v", v, w)
				require.Equal(t, v, got, "%T %+v", v, w)
			}
		}
	}
}

func TestEpochBumpRoundTrip(t *testing.T) {
	r := &prng{s: 3}
	for round := 0; round < 50; round++ {
		in := &EpochBump{Epoch: randUint(r), Leader: randString(r), Time: Instant(randInt(r))}
		data, err := EncodeEpochBump(in)
		require.NoError(t, err)
		for _, w := range append([]rewrite{{}}, intRewrites...) {
			typ, v, err := DecodeEntry(append([]byte{byte(EntryEpochBump)}, w.apply(t, data[1:])...))
			require.NoError(t, err)
			require.Equal(t, EntryEpochBump, typ)
			require.Equal(t, in, v)
		}
	}
}

// mpMap returns a map of the given keys (strings) and encoded values.
func mpMap(kv ...any) []byte {
	b := msgp.AppendMapHeader(nil, uint32(len(kv)/2))
	for i := 0; i < len(kv); i += 2 {
		b = msgp.AppendString(b, kv[i].(string))
		b = append(b, kv[i+1].([]byte)...)
	}
	return b
}

// mpArray returns an array of encoded values.
func mpArray(vs ...[]byte) []byte {
	return append(msgp.AppendArrayHeader(nil, uint32(len(vs))), bytes.Join(vs, nil)...)
}

func mpUint(u uint64) []byte { return msgp.AppendUint64(nil, u) }
func mpInt(i int64) []byte   { return msgp.AppendInt64(nil, i) }
func mpStr(s string) []byte  { return msgp.AppendString(nil, s) }

// TestIntegersOfEveryWidth writes one unsigned field (the epoch) and one
// signed field (the time) of an epoch bump with every integer code that
// can hold each value: the previous release wrote uint codes for values
// >= 0 in signed fields, msgp writes int codes, both must read.
func TestIntegersOfEveryWidth(t *testing.T) {
	values := []int64{0, 1, 31, 127, 128, 200, 255, 256, 32767, 32768, 65535, 65536,
		1<<31 - 1, 1 << 31, 1<<32 - 1, 1 << 32, int64(baseTime), math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	seen := map[byte]bool{}
	for _, x := range values {
		for _, f := range intForms[1:] {
			neg := x < 0
			enc := appendIntAs(nil, f, neg, uint64(x))
			seen[enc[0]] = true
			want := &EpochBump{Time: Instant(x)}
			epoch := mpUint(0)
			if !neg {
				want.Epoch, epoch = uint64(x), enc
			}
			data := append([]byte{byte(EntryEpochBump)}, mpMap("e", epoch, "t", enc)...)
			_, v, err := DecodeEntry(data)
			require.NoError(t, err, "%d as %v: % x", x, f, enc)
			require.Equal(t, want, v, "%d as %v", x, f)
		}
	}
	// Above MaxInt64 only the unsigned field can hold it.
	_, v, err := DecodeEntry(append([]byte{byte(EntryEpochBump)}, mpMap("e", mpUint(math.MaxUint64))...))
	require.NoError(t, err)
	require.Equal(t, &EpochBump{Epoch: math.MaxUint64}, v)
	for _, code := range []byte{0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0x00, 0x7f, 0xe0, 0xff} {
		require.True(t, seen[code], "code 0x%02x written", code)
	}
}

// TestEveryTypeCoversEveryCode holds everyType to what it claims: a value
// of every MessagePack type code but the unused 0xc1.
func TestEveryTypeCoversEveryCode(t *testing.T) {
	class := func(c byte) byte {
		switch {
		case c <= 0x7f:
			return 0x00 // positive fixint
		case c <= 0x8f:
			return 0x80 // fixmap
		case c <= 0x9f:
			return 0x90 // fixarray
		case c <= 0xbf:
			return 0xa0 // fixstr
		case c >= 0xe0:
			return 0xe0 // negative fixint
		}
		return c
	}
	seen := map[byte]bool{}
	for _, v := range everyType() {
		seen[class(v.data[0])] = true
	}
	for c := 0; c < 256; c++ {
		if c != 0xc1 && class(byte(c)) == byte(c) {
			require.True(t, seen[byte(c)], "no value of type code 0x%02x", c)
		}
	}
}

// TestDecodeSkipsUnknownFieldsOfEveryType adds fields unknown to this
// release, holding values of every MessagePack type, to every struct of
// every entry and record type: a newer writer may add fields anywhere, and
// they are skipped whatever they hold.
func TestDecodeSkipsUnknownFieldsOfEveryType(t *testing.T) {
	bump, err := EncodeEpochBump(&EpochBump{Epoch: 7, Leader: "node-a", Time: baseTime})
	require.NoError(t, err)
	batch, err := EncodeCommitBatch(goldenBatch())
	require.NoError(t, err)
	v2, err := EncodeCommitBatch(goldenV2Batch())
	require.NoError(t, err)
	v3, err := EncodeCommitBatch(goldenV3Batch())
	require.NoError(t, err)
	entries := [][]byte{bump, batch, v2, v3}
	records := []msgp.Marshaler{goldenBatch().Mutations[0].Insert, goldenBatch().Mutations[6].PutSchedule,
		backoffSchedule("s"), &Tombstone{NodeID: "n", At: 4},
		goldenV3Task(), goldenV3Schedule(), goldenWorkflow()}

	var all [][]byte
	check := func(extra [][]byte, what string) {
		w := rewrite{extra: extra}
		for _, data := range entries {
			_, want, err := DecodeEntry(data)
			require.NoError(t, err)
			other := append([]byte{data[0]}, w.apply(t, data[1:])...)
			_, got, err := DecodeEntry(other)
			require.NoError(t, err, what)
			require.Equal(t, want, got, what)
		}
		for _, rec := range records {
			got := reflect.New(reflect.TypeOf(rec).Elem()).Interface().(msgp.Unmarshaler)
			require.NoError(t, decodeBody(w.apply(t, recordBody(rec)), got), "%T: %s", rec, what)
			require.Equal(t, rec, got, "%T: %s", rec, what)
		}
	}
	for _, v := range everyType() {
		check([][]byte{v.data, v.data}, v.name)
		all = append(all, v.data)
	}
	check(all, "every type at once")
}

// claim returns the header of a value of the given kind ("array", "map",
// "str", "bin", "ext") claiming n elements or bytes, in its 32-bit form.
func claim(kind string, n uint32) []byte {
	code := map[string]byte{"array": 0xdd, "map": 0xdf, "str": 0xdb, "bin": 0xc6, "ext": 0xc9}[kind]
	h := appendCode(nil, code, 4, uint64(n))
	if kind == "ext" {
		h = append(h, 1) // the ext type
	}
	return h
}

func TestValidate(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	nest := func(n int) []byte { return append(bytes.Repeat([]byte{0x91}, n), 0x00) }
	tests := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"empty", nil, false},
		{"one int", []byte{0x05}, true},
		{"nil", []byte{0xc0}, true},
		{"unused code", []byte{0xc1}, false},
		{"unused code nested", []byte{0x92, 0x01, 0xc1}, false},
		{"trailing byte", []byte{0x05, 0x05}, false},
		{"empty map and array", []byte{0x82, 0xa1, 'a', 0x80, 0xa1, 'b', 0x90}, true},
		{"fixstr cut", []byte{0xa3, 'a', 'b'}, false},
		{"uint64 cut", []byte{0xcf, 0, 0, 0, 0, 0, 0, 0}, false},
		{"float64", []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, true},
		{"fixext16", append([]byte{0xd8, 0x01}, make([]byte, 16)...), true},
		{"fixext16 cut", append([]byte{0xd8, 0x01}, make([]byte, 15)...), false},
		{"ext8", []byte{0xc7, 0x02, 0x01, 0xaa, 0xbb}, true},
		{"ext8 without type", []byte{0xc7, 0x00}, false},
		{"str16 length cut", []byte{0xda, 0x00}, false},
		{"array16 of 3", []byte{0xdc, 0x00, 0x03, 1, 2, 3}, true},
		{"array16 short", []byte{0xdc, 0x00, 0x03, 1, 2}, false},
		{"map16 short", []byte{0xde, 0x00, 0x02, 1, 2, 3}, false},
		{"map16 of 2", []byte{0xde, 0x00, 0x02, 1, 2, 3, 4}, true},
		{"huge array", cat(claim("array", 1<<32-1), []byte{1, 2, 3}), false},
		{"huge map", cat(claim("map", 1<<32-1), []byte{1, 2, 3}), false},
		{"huge map nested", cat([]byte{0x91}, claim("map", 1<<31), []byte{1, 2, 3}), false},
		{"huge str", cat(claim("str", 1<<32-1), []byte("abc")), false},
		{"huge bin", cat(claim("bin", 1<<32-1), []byte("abc")), false},
		{"huge ext", cat(claim("ext", 1<<32-1), []byte("abc")), false},
		{"array claiming one more than present", cat(claim("array", 4), []byte{1, 2, 3}), false},
		{"map claiming its bytes as entries", cat(claim("map", 2), []byte{1, 2, 3}), false},
		{"nested as deep as allowed", nest(maxDepth), true},
		{"nested too deep", nest(maxDepth + 1), false},
		{"nested far too deep", nest(1_000_000), false},
		{"wide and shallow", cat([]byte{0xdc, 0xff, 0xff}, bytes.Repeat([]byte{0x90}, 0xffff)), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validate(tc.data)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			if strings.HasPrefix(tc.name, "huge array") || strings.HasPrefix(tc.name, "huge map") || strings.Contains(tc.name, "claiming") {
				// Refused at the header, before walking what follows.
				require.ErrorContains(t, err, "container of")
			}
			allocs := testing.AllocsPerRun(10, func() { _ = validate(tc.data) })
			if tc.ok {
				require.Zero(t, allocs)
			}
		})
	}
}

// TestValidateAcceptsEveryType holds validate to accept a value of every
// type, and the bodies the encoder writes, and to refuse every strict
// prefix of them.
func TestValidateAcceptsEveryType(t *testing.T) {
	values := everyType()
	batch, err := EncodeCommitBatch(goldenBatch())
	require.NoError(t, err)
	v3, err := EncodeCommitBatch(goldenV3Batch())
	require.NoError(t, err)
	values = append(values,
		mpValue{"golden batch", batch[1:]},
		mpValue{"golden batch, wide", rewrite{ints: intsUint64, wide: true}.apply(t, batch[1:])},
		mpValue{"golden task", recordBody(goldenBatch().Mutations[0].Insert)},
		mpValue{"golden v3 batch", v3[1:]},
		mpValue{"golden v3 batch, wide", rewrite{ints: intsUint64, wide: true}.apply(t, v3[1:])},
		mpValue{"golden workflow", recordBody(goldenWorkflow())},
		mpValue{"golden v3 schedule", recordBody(goldenV3Schedule())})
	for _, v := range values {
		require.NoError(t, validate(v.data), v.name)
		for n := 0; n < len(v.data); n += 1 + n/16 {
			require.Error(t, validate(v.data[:n]), "%s, prefix of %d bytes", v.name, n)
		}
	}
}

// TestHostileLengthsAreRefusedCheaply feeds entries and snapshot records
// whose length headers claim up to four billion elements or bytes, at every
// level of the schema: each is refused without allocating in proportion to
// the claim, an entry halting the state that applies it.
func TestHostileLengthsAreRefusedCheaply(t *testing.T) {
	prefix := func(parts ...string) []byte {
		// {"e": 1, "m": [{"in": {<field>: ...}}]} with the last key given.
		b := []byte{byte(EntryCommitBatch), 0x82, 0xa1, 'e', 0x01, 0xa1, 'm', 0x91, 0x81, 0xa2, 'i', 'n', 0x81}
		for _, p := range parts {
			b = msgp.AppendString(b, p)
		}
		return b
	}
	var entries, records [][]byte
	for _, kind := range []string{"array", "map", "str", "bin", "ext"} {
		for _, n := range []uint32{1<<32 - 1, 1 << 28, 1 << 20} {
			c := claim(kind, n)
			entries = append(entries,
				append([]byte{byte(EntryCommitBatch)}, c...),                  // the batch itself
				append([]byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm'}, c...), // the mutations
				append(prefix("lb"), c...),                                    // the labels of a task
				append(prefix("pl"), c...),                                    // a payload
				append(prefix("bo"), c...),                                    // a backoff
				append(prefix("zz"), c...),                                    // an unknown field
				append(append(prefix("zz"), 0x92, 0x80), c...),                // inside an unknown field
				append([]byte{byte(EntryEpochBump), 0x81, 0xa1, 'l'}, c...),   // an epoch bump's leader
			)
			records = append(records,
				c, // the record itself
				append(msgp.AppendString(msgp.AppendMapHeader(nil, 2), "id"), append(mpStr("a"), append(mpStr("tg"), c...)...)...),
			)
		}
	}
	allocs := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	for _, data := range entries {
		var (
			v   any
			err error
		)
		require.Less(t, allocs(func() { _, v, err = DecodeEntry(data) }), uint64(64<<10), "% x", data)
		require.ErrorIs(t, err, ErrCorrupt, "% x", data)
		require.Nil(t, v)

		s := New()
		require.Equal(t, uint64(1), s.Apply(1, 1, bumpEntry(t, 1)))
		resp := s.Apply(2, 1, data)
		var halt *HaltError
		require.ErrorAs(t, resp.(error), &halt)
		require.ErrorIs(t, halt, ErrCorrupt)
		require.Equal(t, uint64(1), s.AppliedIndex())
	}
	for _, body := range records {
		snap := newSnapshotWriter(1).record(recTask, body).end(1, 0, 0)
		s := New()
		var err error
		// Restore's own buffers and tables take a few hundred KiB.
		require.Less(t, allocs(func() { err = s.Restore(bytes.NewReader(snap)) }), uint64(1<<20), "% x", body)
		require.ErrorIs(t, err, ErrBadSnapshot)
	}
}

// TestDecodeEntryErrors holds DecodeEntry to classify what it cannot decode:
// ErrCorrupt for bytes no release writes, ErrUnknownEntry for an entry type
// it does not know, ErrUnknownMutation for a mutation of no kind it knows
// (a kind added by a newer release), and nothing for an unknown type that
// may be ignored.
func TestDecodeEntryErrors(t *testing.T) {
	valid := batchEntry(t, 1, insert("a", "p", "k"), start("a", 1, 9))
	twoFields := mpMap("rd", mpMap("id", mpStr("a")), "pg", mpMap("id", mpStr("a")))
	purgeBody := mpMap("pg", mpMap("id", mpStr("a")))
	deep := []byte{byte(EntryCommitBatch), 0x81, 0xa1, 'x'}
	deep = append(deep, bytes.Repeat([]byte{0x91}, 100_000)...)
	deep = append(deep, 0x00)
	timeExt := msgp.AppendTime(nil, baseTime.Time())
	entry := func(typ EntryType, body []byte) []byte { return append([]byte{byte(typ)}, body...) }

	tests := []struct {
		name string
		data []byte
		want error // nil: ignored without error
	}{
		{"empty", nil, ErrCorrupt},
		{"type only", []byte{byte(EntryCommitBatch)}, ErrCorrupt},
		{"not a map", entry(EntryCommitBatch, mpArray(mpInt(1), mpInt(2), mpInt(3))), ErrCorrupt},
		{"nil batch", []byte{byte(EntryCommitBatch), 0xc0}, ErrCorrupt},
		{"trailing bytes", append(append([]byte{}, valid...), 0x00), ErrCorrupt},
		{"string for an integer", entry(EntryCommitBatch, mpMap("e", mpStr("x"))), ErrCorrupt},
		{"float for an integer", entry(EntryCommitBatch, mpMap("e", msgp.AppendFloat64(nil, 1))), ErrCorrupt},
		{"nil for an integer", entry(EntryCommitBatch, mpMap("e", msgp.AppendNil(nil))), ErrCorrupt},
		{"timestamp for an instant", entry(EntryCommitBatch, mpMap("t", timeExt)), ErrCorrupt},
		{"integer for a float", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("in", mpMap("bo", mpMap("j", mpInt(1))))))), ErrCorrupt},
		{"integer for a string", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("pg", mpMap("id", mpInt(1)))))), ErrCorrupt},
		{"string for bytes", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("in", mpMap("pl", mpStr("x")))))), ErrCorrupt},
		{"integer map key", entry(EntryCommitBatch, append(msgp.AppendMapHeader(nil, 1), append(mpInt(1), mpInt(1)...)...)), ErrCorrupt},
		{"mutations not an array", entry(EntryCommitBatch, mpMap("m", mpInt(5))), ErrCorrupt},
		{"huge array claim", entry(EntryCommitBatch, mpMap("m", claim("array", 1<<32-1))), ErrCorrupt},
		{"huge map claim", entry(EntryCommitBatch, claim("map", 1<<32-1)), ErrCorrupt},
		{"huge string claim", entry(EntryCommitBatch, append(msgp.AppendMapHeader(nil, 1), claim("str", 1<<32-1)...)), ErrCorrupt},
		{"deep nesting", deep, ErrCorrupt},
		{"unused type code in an unknown field", entry(EntryCommitBatch, mpMap("x", []byte{0xc1})), ErrCorrupt},
		{"mutation with two fields", entry(EntryCommitBatch, mpMap("m", mpArray(twoFields))), ErrCorrupt},
		{"nil mutation", entry(EntryCommitBatch, mpMap("m", mpArray(msgp.AppendNil(nil)))), ErrCorrupt},
		{"mutation not a map", entry(EntryCommitBatch, mpMap("m", mpArray(mpInt(1)))), ErrCorrupt},
		{"mutation with two format 3 fields", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("ub", mpMap("id", mpStr("a")), "pwf", mpMap("id", mpStr("w")))))), ErrCorrupt},
		{"mutation with an old and a format 3 field", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("pg", mpMap("id", mpStr("a")), "ew", mpMap("id", mpStr("w")))))), ErrCorrupt},
		{"integer for a bool", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("in", mpMap("fl", mpMap("ext", mpInt(1))))))), ErrCorrupt},
		{"string for a list of dependencies", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("in", mpMap("fl", mpMap("dp", mpStr("a"))))))), ErrCorrupt},
		{"integer in a list of dependencies", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("in", mpMap("fl", mpMap("dp", mpArray(mpInt(1)))))))), ErrCorrupt},
		{"steps not an array", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("ps", mpMap("wst", mpMap()))))), ErrCorrupt},
		{"workflow not a map", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("pw", mpStr("w"))))), ErrCorrupt},
		{"mutation field not a map", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("pg", mpArray())))), ErrCorrupt},
		{"epoch bump garbage", []byte{byte(EntryEpochBump), 0xc1}, ErrCorrupt},
		{"epoch bump not a map", []byte{byte(EntryEpochBump), 0x07}, ErrCorrupt},
		{"epoch bump with a string epoch", entry(EntryEpochBump, mpMap("e", mpStr("1"))), ErrCorrupt},
		{"known type with the ignore flag, corrupt", []byte{byte(EntryCommitBatch | IgnoreUnknownFlag), 0xc1}, ErrCorrupt},
		// A mutation whose keys are all unknown is of a kind a newer release
		// added. Decoding cannot tell an empty mutation or one whose only
		// known key is nil (which no release writes) from it: no known kind.
		{"mutation of an unknown kind", entry(EntryCommitBatch, mpMap("m", mpArray(purgeBody, mpMap("zz", mpMap("id", mpStr("a")))))), ErrUnknownMutation},
		{"empty mutation", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap()))), ErrUnknownMutation},
		{"nil mutation field only", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("in", msgp.AppendNil(nil))))), ErrUnknownMutation},
		{"nil format 3 field only", entry(EntryCommitBatch, mpMap("m", mpArray(mpMap("pw", msgp.AppendNil(nil))))), ErrUnknownMutation},
		{"unknown type", []byte{0x05, 1, 2}, ErrUnknownEntry},
		{"type zero", []byte{0x00, 0x80}, ErrUnknownEntry},
		{"unknown type ignorable", []byte{0x05 | byte(IgnoreUnknownFlag), 1, 2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ, v, err := DecodeEntry(tc.data)
			require.Nil(t, v)
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, EntryType(tc.data[0]), typ, "the raw type")
				return
			}
			require.ErrorIs(t, err, tc.want)
			for _, other := range []error{ErrCorrupt, ErrUnknownEntry, ErrUnknownMutation} {
				if other != tc.want {
					require.NotErrorIs(t, err, other)
				}
			}
			if len(tc.data) > 0 && tc.want != ErrUnknownEntry {
				require.Equal(t, EntryType(tc.data[0])&^IgnoreUnknownFlag, typ, "the known type")
			}
		})
	}
}

// TestOutOfRangeIntegersAreCorrupt holds the decoder to refuse an integer
// its field cannot hold (the previous release's decoder truncated it): the
// entry is corrupt and halts the state. An integer in range that names no
// valid value is the preconditions' business: a rejection, not a halt.
func TestOutOfRangeIntegersAreCorrupt(t *testing.T) {
	batch := func(muts ...[]byte) []byte {
		return append([]byte{byte(EntryCommitBatch)}, mpMap("e", mpUint(1), "m", mpArray(muts...))...)
	}
	finish := func(kv ...any) []byte {
		return mpMap("fn", mpMap(append([]any{"id", mpStr("a"), "s", mpUint(uint64(StatusCancelled))}, kv...)...))
	}
	task := func(kv ...any) []byte {
		return mpMap("in", mpMap(append([]any{"id", mpStr("new"), "st", mpUint(uint64(StatusQueued))}, kv...)...))
	}
	corrupt := []struct {
		name string
		data []byte
	}{
		{"negative epoch", append([]byte{byte(EntryCommitBatch)}, mpMap("e", mpInt(-1))...)},
		{"negative epoch of a bump", append([]byte{byte(EntryEpochBump)}, mpMap("e", mpInt(-2))...)},
		{"time above MaxInt64", append([]byte{byte(EntryCommitBatch)}, mpMap("e", mpUint(1), "t", mpUint(1<<63))...)},
		{"version 65536", append([]byte{byte(EntryCommitBatch)}, mpMap("e", mpUint(1), "v", mpUint(1<<16))...)},
		{"status 300", batch(finish("s", mpUint(300)))},
		{"status -1", batch(finish("s", mpInt(-1)))},
		{"negative lease", batch(finish("l", mpInt(-5)))},
		{"instant above MaxInt64", batch(finish("at", mpUint(math.MaxUint64)))},
		{"attempt 2^32", batch(mpMap("sr", mpMap("id", mpStr("a"), "a", mpUint(1<<32))))},
		{"priority 256", batch(task("pr", mpUint(256)))},
		{"max attempts -1", batch(task("ma", mpInt(-1)))},
		{"timeout above MaxInt64", batch(task("to", mpUint(1<<63)))},
		{"backoff above MaxInt64", batch(task("bo", mpMap("i", mpUint(1<<63))))},
		{"skipped 2^32", batch(mpMap("fr", mpMap("n", mpStr("s"), "s", mpInt(1), "k", mpUint(1<<32))))},
		{"overlap 256", batch(mpMap("ps", mpMap("n", mpStr("s"), "ov", mpUint(256))))},
		// Log format 3.
		{"dependency policy 256", batch(task("fl", mpMap("dp", mpArray(mpStr("a")), "dpp", mpUint(256))))},
		{"dependency policy -1", batch(task("fl", mpMap("dpp", mpInt(-1))))},
		{"step dependency policy 256", batch(mpMap("ps", mpMap("n", mpStr("s"), "wst", mpArray(mpMap("n", mpStr("x"), "dpp", mpUint(256))))))},
		{"step max attempts -1", batch(mpMap("ps", mpMap("n", mpStr("s"), "wst", mpArray(mpMap("n", mpStr("x"), "ma", mpInt(-1))))))},
		{"workflow status 256 on end", batch(mpMap("ew", mpMap("id", mpStr("w"), "st", mpUint(256))))},
		{"workflow status -1 on put", batch(mpMap("pw", mpMap("id", mpStr("w"), "st", mpInt(-1))))},
		{"workflow create index -1", batch(mpMap("pw", mpMap("id", mpStr("w"), "st", mpUint(1), "ci", mpInt(-1))))},
		{"workflow slot above MaxInt64", batch(mpMap("pw", mpMap("id", mpStr("w"), "st", mpUint(1), "sl", mpUint(1<<63))))},
		{"unblock instant above MaxInt64", batch(mpMap("ub", mpMap("id", mpStr("a"), "at", mpUint(1<<63))))},
		{"end instant above MaxInt64", batch(mpMap("ew", mpMap("id", mpStr("w"), "st", mpUint(2), "at", mpUint(math.MaxUint64))))},
	}
	for _, tc := range corrupt {
		t.Run(tc.name, func(t *testing.T) {
			_, v, err := DecodeEntry(tc.data)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Nil(t, v)

			h := newHarness(t)
			h.ok(insert("a", "p", "k"))
			before, applied := snapshotBytes(t, h.s), h.s.AppliedIndex()
			resp := h.apply(tc.data)
			var halt *HaltError
			require.ErrorAs(t, resp.(error), &halt)
			require.ErrorIs(t, halt, ErrCorrupt)
			require.Equal(t, before, snapshotBytes(t, h.s))
			require.Equal(t, applied, h.s.AppliedIndex())
		})
	}

	rejected := []struct {
		name string
		data []byte
	}{
		{"status 200", batch(finish("s", mpUint(200)))},
		{"status 9 on insert", batch(task("st", mpUint(9)))}, // blocked without dependencies
		{"status 9 on finish", batch(finish("s", mpUint(9)))},
		{"workflow status 200 on put", batch(mpMap("pw", mpMap("id", mpStr("w"), "st", mpUint(200))))},
		{"workflow status 0 on put", batch(mpMap("pw", mpMap("id", mpStr("w"), "st", mpUint(0))))},
		{"workflow status 5 on end", batch(mpMap("pw", mpMap("id", mpStr("w"), "st", mpUint(1))),
			mpMap("ew", mpMap("id", mpStr("w"), "st", mpUint(5))))},
	}
	for _, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DecodeEntry(tc.data)
			require.NoError(t, err)
			h := newHarness(t)
			h.ok(insert("a", "p", "k"))
			var rej *RejectedError
			require.ErrorAs(t, h.apply(tc.data).(error), &rej)
			require.Nil(t, h.s.Halted())
		})
	}
}

// TestDecodeEveryTruncation holds every strict prefix of an entry of each
// type to be corrupt, not a shorter value.
func TestDecodeEveryTruncation(t *testing.T) {
	r := &prng{s: 3}
	var ms []Mutation
	for k := 0; k < numMutationKinds; k++ {
		ms = append(ms, randMutation(r, k, true))
	}
	v2, err := EncodeCommitBatch(goldenV2Batch())
	require.NoError(t, err)
	v3, err := EncodeCommitBatch(goldenV3Batch())
	require.NoError(t, err)
	for _, data := range [][]byte{batchEntry(t, 4, ms...), v2, v3, bumpEntry(t, 3)} {
		for n := 0; n < len(data); n++ {
			_, v, err := DecodeEntry(data[:n])
			require.ErrorIs(t, err, ErrCorrupt, "prefix of %d bytes", n)
			require.Nil(t, v)
		}
	}
}

func TestDecodeReusesScratchSafely(t *testing.T) {
	// Apply decodes into a reused slice of mutations. Whatever the slice
	// held before must neither leak into the new batch nor be written
	// through: its pointers may be records of the state.
	old := &Task{ID: "old", Template: Template{Pool: "p"}, Status: StatusQueued}
	scratch := make([]Mutation, 3, 8)
	scratch[0].Insert = old
	scratch[2].Purge = &Purge{ID: "x"}
	scratch[:4][3].Ready = &Ready{ID: "y"}
	b := CommitBatch{Epoch: 9, Time: 9, Mutations: scratch, Version: 7}
	data := batchEntry(t, 1, insert("new", "q", ""), purge("z"))
	require.NoError(t, decodeCommitBatch(data[1:], &b))
	require.Equal(t, &Task{ID: "old", Template: Template{Pool: "p"}, Status: StatusQueued}, old)
	want := []Mutation{insert("new", "q", ""), purge("z")}
	require.Equal(t, &CommitBatch{Epoch: 1, Time: baseTime, Mutations: want}, &b)
	require.Same(t, &scratch[0], &b.Mutations[0], "the capacity is reused")
	require.Nil(t, scratch[:4][3].Ready)
}

// TestApplyDoesNotWriteThroughScratch applies batches one after the other:
// the records the state took from one batch keep their content while the
// next batches are decoded into the same buffer.
func TestApplyDoesNotWriteThroughScratch(t *testing.T) {
	h := newHarness(t)
	h.ok(insert("a", "p", "ka"), putSchedule("s"))
	a, s := *h.task("a"), h.s.Schedules()[0]
	sCopy := *s
	h.ok(insert("b", "q", "kb"), Mutation{PutSchedule: backoffSchedule("t")})
	h.apply([]byte{byte(EntryCommitBatch), 0xc1}) // halts, after decoding nothing
	require.Equal(t, a, *h.task("a"))
	require.Equal(t, sCopy, *s)
	require.Equal(t, "q", h.task("b").Pool)
}

// TestEncodeCommitBatchSetsVersion holds EncodeCommitBatch to write the log
// format the batch needs, whatever Version held before, and to leave the
// field out (as format 1 did) when that is 1.
func TestEncodeCommitBatchSetsVersion(t *testing.T) {
	plain := putSchedule("plain")
	tests := []struct {
		name   string
		preset uint16
		ms     []Mutation
		want   uint16
	}{
		{"no mutations", 0, nil, 0},
		{"format 1 mutations", 0, []Mutation{insert("a", "p", ""), plain, purge("a")}, 0},
		{"a task with a backoff is format 1", 0, []Mutation{{Insert: goldenBatch().Mutations[0].Insert}}, 0},
		{"a stale preset version is cleared", 5, []Mutation{plain}, 0},
		{"a schedule with a backoff", 0, []Mutation{{PutSchedule: backoffSchedule("s")}}, 2},
		{"a schedule with only a jitter", 0, []Mutation{{PutSchedule: &Schedule{Name: "j", Template: Template{Backoff: Backoff{Jitter: 0.1}}}}}, 2},
		{"mixed", 9, []Mutation{plain, {PutSchedule: backoffSchedule("s")}, purge("x")}, 2},
		{"a format 3 kind", 0, []Mutation{unblock("a", baseTime)}, 3},
		{"every format 3 kind", 2, []Mutation{putWorkflow("w", "k"), unblock("a", 0), endWorkflow("w", WorkflowFailed), purgeWorkflow("w")}, 3},
		{"a blocked insert", 0, []Mutation{insertBlocked("b", "p", "a")}, 3},
		{"an insert into a workflow", 0, []Mutation{insertInto("b", "", "w")}, 3},
		{"a finish into a workflow", 0, []Mutation{finishInto("a", 0, StatusCancelled, "w")}, 3},
		{"a finish outside workflows", 0, []Mutation{finish("a", 0, StatusCancelled)}, 0},
		{"a fire of a workflow", 0, []Mutation{fireWorkflow("s", baseTime, "w")}, 3},
		{"a schedule of a workflow", 0, []Mutation{{PutSchedule: goldenV3Schedule()}}, 3},
		{"format 2 and format 3", 0, []Mutation{{PutSchedule: backoffSchedule("s")}, purgeWorkflow("w"), plain}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &CommitBatch{Epoch: 1, Time: baseTime, Mutations: tc.ms, Version: tc.preset}
			data, err := EncodeCommitBatch(b)
			require.NoError(t, err)
			require.Equal(t, tc.want, b.Version)
			_, v, err := DecodeEntry(data)
			require.NoError(t, err)
			require.Equal(t, tc.want, v.(*CommitBatch).Version)
			hasV := bytes.HasSuffix(data, []byte{0xa1, 'v', byte(tc.want)})
			require.Equal(t, tc.want != 0, hasV, "a \"v\" key at the end")
			if tc.want == 0 {
				require.Equal(t, byte(0x83), data[1], "three keys: e, t, m")
			}
		})
	}
}

// TestVersions holds the Version methods to the definition of the log
// formats: a schedule with a backoff needs format 2; the kinds format 3
// added, a blocked task, and a task, schedule, finish or fire with a field
// format 3 added need format 3; everything else format 1.
func TestVersions(t *testing.T) {
	r := &prng{s: 9}
	for k := 0; k < numMutationKinds; k++ {
		m := randMutation(r, k, true) // every field set, format 3's too
		name := kindName(&m)
		var want uint16
		switch name {
		case "Requeue", "PutSubscription", "DelSubscription", "AckSubscription", "StallSubscription":
			want = 6
		case "Retry":
			want = 6
			rt := *m.Retry
			clearFields(&rt, format6RetryFields)
			require.Equal(t, uint16(1), (&Mutation{Retry: &rt}).Version(), "retry without an outcome")
		case "PutACLPolicy", "PutACLToken", "DelACL":
			want = 5
		case "Admit", "PutPool":
			want = 4
		case "Unblock", "PutWorkflow", "EndWorkflow", "PurgeWorkflow":
			want = 3
		case "Insert":
			want = 6
			task := *m.Insert
			for _, f := range format6TaskFields {
				one := task
				clearFields(&one, format6TaskFields)
				setField(t, &one, f)
				require.Equal(t, uint16(6), one.Version(), "task with %s set", f)
			}
			clearFields(&task, format6TaskFields)
			require.Equal(t, uint16(5), (&Mutation{Insert: &task}).Version(), "insert without a history")
			require.NotEmpty(t, task.Principal)
			clearFields(&task.Template, format5TemplateFields)
			require.Equal(t, uint16(4), (&Mutation{Insert: &task}).Version(), "insert without a principal")
			clearFields(&task, format3TaskFields)
			clearFields(&task, format4TaskFields)
			clearFields(&task.Template, format4TemplateFields)
			for _, st := range AllStatuses {
				task.Status = st
				wantSt := uint16(1)
				switch st {
				case StatusBlocked:
					wantSt = 3
				case StatusParked:
					wantSt = 4
				}
				require.Equal(t, wantSt, (&Mutation{Insert: &task}).Version(), "insert of a %s task without the fields of format 3", st)
			}
			task.Status = StatusQueued
			for _, keys := range []*Keys{{Ordering: "o"}, {Concurrency: "c"}} {
				one := task
				one.Keys = keys
				require.Equal(t, uint16(4), (&Mutation{Insert: &one}).Version(), "insert with keys %+v", *keys)
			}
			empty4 := task
			empty4.Keys = &Keys{}
			require.Equal(t, uint16(1), empty4.Version(), "task with empty keys")
			require.NotZero(t, task.Backoff, "a task's backoff is format 1")
			empty := task
			empty.Flow = &Flow{}
			require.Equal(t, uint16(1), empty.Version(), "task with an empty flow")
			for _, f := range []string{"DependsOn", "DepPolicy", "External", "Workflow", "Step", "Parent"} {
				one := task
				one.Flow = &Flow{}
				setField(t, one.Flow, f)
				require.Equal(t, uint16(3), (&Mutation{Insert: &one}).Version(), "insert with %s set", f)
				require.Equal(t, uint16(3), one.Version(), "task with %s set", f)
			}
		case "PutSchedule":
			want = 5
			sc := *m.PutSchedule
			clearFields(&sc.Template, format5TemplateFields)
			for i := range sc.Steps {
				clearFields(&sc.Steps[i].Template, format5TemplateFields)
			}
			require.Equal(t, uint16(4), (&Mutation{PutSchedule: &sc}).Version(), "schedule without a principal")
			clearFields(&sc, format3ScheduleFields)
			clearFields(&sc.Template, format4TemplateFields)
			keyed := sc
			keyed.Keys = &Keys{Ordering: "o"}
			require.Equal(t, uint16(4), (&Mutation{PutSchedule: &keyed}).Version(), "schedule with keys")
			keyed = sc
			keyed.Steps = []StepTemplate{{Name: "a", Template: Template{Keys: &Keys{Concurrency: "c"}}}}
			require.Equal(t, uint16(4), (&Mutation{PutSchedule: &keyed}).Version(), "schedule with a keyed step")
			require.Equal(t, uint16(2), (&Mutation{PutSchedule: &sc}).Version(), "the backoff")
			sc.Backoff = Backoff{}
			require.Equal(t, uint16(1), (&Mutation{PutSchedule: &sc}).Version())
			for _, f := range format3ScheduleFields {
				one := sc
				setField(t, &one, f)
				require.Equal(t, uint16(3), (&Mutation{PutSchedule: &one}).Version(), "schedule with %s set", f)
				one.Backoff = Backoff{Max: 1}
				require.Equal(t, uint16(3), one.Version(), "schedule with %s set and a backoff", f)
			}
		case "Finish":
			want = 6
			f := *m.Finish
			clearFields(&f, format6FinishFields)
			require.Equal(t, uint16(4), (&Mutation{Finish: &f}).Version(), "finish without an outcome")
			clearFields(&f, format4FinishFields)
			require.Equal(t, uint16(3), (&Mutation{Finish: &f}).Version(), "finish into a workflow")
			clearFields(&f, format3FinishFields)
			require.Equal(t, uint16(1), (&Mutation{Finish: &f}).Version(), "finish without a workflow")
		case "Fire":
			want = 3
			f := *m.Fire
			clearFields(&f, format3FireFields)
			require.Equal(t, uint16(1), (&Mutation{Fire: &f}).Version(), "fire without a workflow")
			f.TaskID = ""
			f.Workflow = "w"
			require.Equal(t, uint16(3), (&Mutation{Fire: &f}).Version(), "fire of a workflow")
		default:
			want = 1
		}
		require.Equal(t, want, m.Version(), "kind %d (%s)", k, name)
		require.Equal(t, want, wantMutationVersion(&m), "kind %d (%s): the test's own rule", k, name)
		require.LessOrEqual(t, m.Version(), uint16(LogVersion))
	}
	// The format 3 kinds need it even empty.
	for _, m := range []Mutation{{Unblock: &Unblock{}}, {PutWorkflow: &Workflow{}}, {EndWorkflow: &EndWorkflow{}}, {PurgeWorkflow: &PurgeWorkflow{}}} {
		require.Equal(t, uint16(3), m.Version(), kindName(&m))
	}
	require.Equal(t, uint16(1), (&Schedule{}).Version())
	require.Equal(t, uint16(2), backoffSchedule("s").Version())
	require.LessOrEqual(t, backoffSchedule("s").Version(), uint16(LogVersion))
	require.Equal(t, uint16(3), (&Schedule{Steps: []StepTemplate{{Name: "a"}}}).Version())
	require.Equal(t, uint16(3), (&Schedule{Workflow: "w"}).Version())
	require.Equal(t, uint16(1), (&Task{}).Version())
	require.Equal(t, uint16(1), (&Task{Flow: &Flow{DepPolicy: DepSucceeded, DependsOn: []string{}}}).Version(), "the defaults")
	require.Equal(t, uint16(3), (&Task{Status: StatusBlocked}).Version())
	require.Equal(t, uint16(3), (&Task{Flow: &Flow{DepPolicy: DepDone}}).Version())
	require.Equal(t, uint16(3), goldenV3Schedule().Version())
	require.Equal(t, uint16(4), (&Mutation{Admit: &Admit{}}).Version())
	require.Equal(t, uint16(4), (&Mutation{PutPool: &Pool{}}).Version())
	require.Equal(t, uint16(4), (&Task{Status: StatusParked}).Version())
	require.Equal(t, uint16(4), goldenV4Schedule().Version())
	require.Equal(t, uint16(5), (&Mutation{DelACL: &DelACL{}}).Version())
	require.Equal(t, uint16(5), (&Task{Template: Template{Principal: "a"}}).Version())
	require.Equal(t, uint16(5), (&Schedule{Steps: []StepTemplate{{Name: "a", Template: Template{Principal: "a"}}}}).Version())
	require.Equal(t, uint16(6), (&Mutation{Requeue: &Requeue{}}).Version())
	require.Equal(t, uint16(6), (&Mutation{Retry: &Retry{Outcome: AttemptLost}}).Version())
	require.Equal(t, uint16(6), (&Mutation{Finish: &Finish{Outcome: AttemptSucceeded}}).Version())
	require.Equal(t, uint16(6), (&Task{AttemptBase: 1}).Version())
	require.Equal(t, uint16(6), (&Task{Attempts: []Attempt{{Attempt: 1}}}).Version())
	require.Equal(t, uint16(6), uint16(LogVersion))
	require.Equal(t, uint16(LogVersion), New().Version())
	require.Equal(t, uint16(1), NewVersion(1).Version())
	require.Equal(t, uint16(2), NewVersion(2).Version())
	require.Equal(t, uint16(3), NewVersion(3).Version())
}

// setField sets the named field of the struct v points to to a non-zero
// value of its type.
func setField(t *testing.T, v any, name string) {
	t.Helper()
	f := reflect.ValueOf(v).Elem().FieldByName(name)
	require.True(t, f.IsValid(), name)
	switch f.Kind() {
	case reflect.String:
		f.SetString("x")
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Uint8, reflect.Uint32:
		f.SetUint(1)
	case reflect.Slice:
		s := reflect.MakeSlice(f.Type(), 1, 1)
		if s.Index(0).Kind() == reflect.String {
			s.Index(0).SetString("x")
		}
		f.Set(s)
	default:
		t.Fatalf("setField: %s is a %s", name, f.Kind())
	}
	require.False(t, f.IsZero(), name)
}

func TestEncodeRejectsBadMutations(t *testing.T) {
	_, err := EncodeCommitBatch(&CommitBatch{Mutations: []Mutation{{}}})
	require.Error(t, err)
	_, err = EncodeCommitBatch(&CommitBatch{Mutations: []Mutation{{Ready: &Ready{}, Purge: &Purge{}}}})
	require.Error(t, err)
	_, err = EncodeCommitBatch(nil)
	require.Error(t, err)
	_, err = EncodeEpochBump(nil)
	require.Error(t, err)
}

func TestEncodeReturnsFreshSlices(t *testing.T) {
	a := batchEntry(t, 1, purge("a"))
	want := append([]byte{}, a...)
	b := batchEntry(t, 1, purge("b"))
	require.Equal(t, want, a)
	require.NotEqual(t, a, b)
}

func TestKnownTypeWithIgnoreFlagDecodes(t *testing.T) {
	data := batchEntry(t, 2, purge("x"))
	data[0] |= byte(IgnoreUnknownFlag)
	typ, v, err := DecodeEntry(data)
	require.NoError(t, err)
	require.Equal(t, EntryCommitBatch, typ)
	require.Equal(t, "x", v.(*CommitBatch).Mutations[0].Purge.ID)
}

// fixtureSeeds returns the entries of the v1 fixture log, as fuzz seeds.
func fixtureSeeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, e := range readFixtureEntries(f, filepath.Join("testdata", "v1", "entries.bin")) {
		out = append(out, e.data)
	}
	return out
}

func FuzzDecodeEntry(f *testing.F) {
	r := &prng{s: 4}
	for k := 0; k < numMutationKinds; k++ {
		data, err := EncodeCommitBatch(&CommitBatch{Epoch: 1, Time: baseTime, Mutations: []Mutation{randMutation(r, k, k%2 == 0)}})
		require.NoError(f, err)
		f.Add(data)
	}
	v2, err := EncodeCommitBatch(goldenV2Batch())
	require.NoError(f, err)
	f.Add(v2)
	for _, b := range []*CommitBatch{goldenV3Batch(), smallV3Batch()} {
		v3, err := EncodeCommitBatch(b)
		require.NoError(f, err)
		f.Add(v3)
	}
	bump, err := EncodeEpochBump(&EpochBump{Epoch: 2, Leader: "l"})
	require.NoError(f, err)
	f.Add(bump)
	for _, data := range fixtureSeeds(f) {
		f.Add(data)
	}
	f.Add([]byte{0x85, 0x00})
	f.Add([]byte{byte(EntryCommitBatch), 0x81, 0xa1, 'm', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, v, err := DecodeEntry(data)
		if err != nil {
			require.Nil(t, v)
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownEntry) || errors.Is(err, ErrUnknownMutation),
				"unexpected error %v", err)
			return
		}
		// What decodes re-encodes to an entry that decodes to a value that
		// encodes the same (the input may be non-canonical: wide integers,
		// unknown fields, a Version its mutations do not need).
		var again []byte
		switch x := v.(type) {
		case *CommitBatch:
			again, err = EncodeCommitBatch(x)
		case *EpochBump:
			again, err = EncodeEpochBump(x)
		case nil:
			require.NotZero(t, typ&IgnoreUnknownFlag)
			return
		default:
			t.Fatalf("decoded a %T", v)
		}
		require.NoError(t, err)
		typ2, v2, err := DecodeEntry(again)
		require.NoError(t, err)
		require.Equal(t, typ&^IgnoreUnknownFlag, typ2)
		var third []byte
		switch x := v2.(type) {
		case *CommitBatch:
			third, err = EncodeCommitBatch(x)
		case *EpochBump:
			third, err = EncodeEpochBump(x)
		}
		require.NoError(t, err)
		require.Equal(t, again, third)
	})
}

// TestDecodeSharesRepeatedStrings: the tasks of a batch share one copy of
// the pool, kind and worker they repeat.
func TestDecodeSharesRepeatedStrings(t *testing.T) {
	data, err := EncodeCommitBatch(&CommitBatch{Epoch: 1, Time: baseTime, Mutations: []Mutation{
		insert("t1", "p", ""), insert("t2", "p", ""), insert("t3", "q", ""),
		start("t1", 1, lease(1, 1)), start("t2", 1, lease(1, 2)),
	}})
	require.NoError(t, err)
	_, v, err := DecodeEntry(data)
	require.NoError(t, err)
	ms := v.(*CommitBatch).Mutations
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	require.True(t, same(ms[0].Insert.Pool, ms[1].Insert.Pool))
	require.True(t, same(ms[0].Insert.Kind, ms[2].Insert.Kind))
	require.Equal(t, "q", ms[2].Insert.Pool)
	require.True(t, same(ms[3].Start.Worker, ms[4].Start.Worker))
}

// Pins of log format 5.
const (
	goldenV5BatchLen       = 558
	goldenV5BatchSHA256    = "4a6c2efc2bfdc50f775b066ea29dabf4e33b5405254371bc68a1665018c3eeb3"
	goldenACLTokenHex      = "88a161d92437643363386330612d376234302d346130652d396431632d356438663365306239613131a168c4202bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25ba16ea4726f6f74a17092a365746ca36f7073a16dc3a162c3a26361d317979cfe362a0000a263690b"
	goldenV5SnapshotLen    = 496
	goldenV5SnapshotSHA256 = "1dec8326295e38bd3da22695322ea06268a94bfc3acb0bb92a910ec083fb50c0"
)

// Pins of the subscriptions of log format 6.
const (
	goldenV6SubsBatchLen    = 294
	goldenV6SubsBatchSHA256 = "f54d8dce160c6de12a81f805c6e9316a3543188f37b0378a3a528457dd83d6d2"
	goldenSubscriptionHex   = "8fa16ea762696c6c696e67a17092a365746ca3706179a27374920506a16b91a6636861726765a27768bc68747470733a2f2f686f6f6b732e6578616d706c652f63726f6e6f71" +
		"a3736563a6733363726574a361746fd300000006fc23ac00a26d6405a361636bce07000001a2736cc3a27372d9256576656e7420372e322073656e7420352074696d657320776974686f757420616e2061636b" +
		"a27361d317979cfe362a0009a26361d317979cfe362a0000a2636903a26d690c"
	goldenSubscriptionEventHex = "8ba3737562a762696c6c696e67a163ce08000002a26964ba30314a3030303030303030303030303030303030303030303039a170a3706179a16ba6636861726765" +
		"a2737406a16103a16dad63617264206465636c696e6564a26174d317979cfe362a0004a27766a477662d31a27370a6636861726765"
	goldenV6SubsSnapshotLen    = 579
	goldenV6SubsSnapshotSHA256 = "d566e00989a0601c3bd6c173c6a018390b840c3efcb63cd140888a17d0a3b390"
)
