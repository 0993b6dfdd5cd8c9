package clienttest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/internal/units"
)

// Messages recorded with the task ends the cluster decides on its own, as
// a real cluster words them.
const (
	msgCancelled      = "cancelled by request"
	msgWorkerCancel   = "attempt cancelled by the worker"
	msgDeadline       = "deadline exceeded"
	msgRetryable      = "retryable failure"
	msgPermanent      = "permanent failure"
	reasonCancelAbort = "task cancelled"
	msgExternalFailed = "failed by request"
)

// task is a stored task and what the cluster keeps about it besides.
type task struct {
	p          *cronoqv1.Task
	readySeq   uint64        // order among the ready tasks of its priority
	inQueue    bool          // in its pool's ready queue
	hbDeadline time.Time     // the current lease is lost after this
	timeoutAt  time.Time     // the current attempt times out at this (zero: never)
	stream     *workerStream // the stream of the worker holding the lease

	// dependents are the blocked tasks waiting for this one to end;
	// waitingOn counts the dependencies of a blocked task not ended yet.
	dependents []*task
	waitingOn  int
	wf         *workflow // its workflow, nil when none

	// attemptLease and attemptWorker are the lease and the worker of its
	// last attempt, for its attempt history.
	attemptLease  uint64
	attemptWorker string
}

func (t *task) pool() string { return t.p.GetTemplate().GetPool() }

// readyQueue holds a pool's queued tasks by priority (high, normal, low),
// each in the order they became ready.
type readyQueue struct{ q [3][]*task }

func rank(p cronoqv1.Priority) int {
	switch p {
	case cronoqv1.Priority_PRIORITY_HIGH:
		return 0
	case cronoqv1.Priority_PRIORITY_LOW:
		return 2
	default:
		return 1
	}
}

func terminal(s cronoqv1.Status) bool {
	switch s {
	case cronoqv1.Status_STATUS_SUCCEEDED, cronoqv1.Status_STATUS_FAILED,
		cronoqv1.Status_STATUS_CANCELLED, cronoqv1.Status_STATUS_EXPIRED:
		return true
	}
	return false
}

// pending reports whether a task of status s counts against its pool's
// pending limit.
func pending(s cronoqv1.Status) bool {
	switch s {
	case cronoqv1.Status_STATUS_SCHEDULED, cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_RETRYING,
		cronoqv1.Status_STATUS_BLOCKED:
		return true
	}
	return false
}

// statusNames are the status names Counts uses, as a real node's.
var statusNames = []struct {
	s    cronoqv1.Status
	name string
}{
	{cronoqv1.Status_STATUS_SCHEDULED, "scheduled"},
	{cronoqv1.Status_STATUS_QUEUED, "queued"},
	{cronoqv1.Status_STATUS_RUNNING, "running"},
	{cronoqv1.Status_STATUS_RETRYING, "retrying"},
	{cronoqv1.Status_STATUS_SUCCEEDED, "succeeded"},
	{cronoqv1.Status_STATUS_FAILED, "failed"},
	{cronoqv1.Status_STATUS_CANCELLED, "cancelled"},
	{cronoqv1.Status_STATUS_EXPIRED, "expired"},
	{cronoqv1.Status_STATUS_BLOCKED, "blocked"},
	{cronoqv1.Status_STATUS_PARKED, "parked"},
}

func cloneTask(p *cronoqv1.Task) *cronoqv1.Task { return proto.Clone(p).(*cronoqv1.Task) }

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func tsTime(p *timestamppb.Timestamp) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.AsTime()
}

func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// ---------------------------------------------------------------------------
// Validation

// invalidError is a refused field, before it becomes an apierr.Invalid
// answer (a batch prefixes the field with the item's index first).
type invalidError struct{ field, reason string }

func (e *invalidError) Error() string { return apierr.InvalidMessage(e.field, e.reason) }

func invalid(field, format string, args ...any) error {
	return &invalidError{field: field, reason: fmt.Sprintf(format, args...)}
}

// prefixed names the field of an invalidError inside a part of a request.
func prefixed(prefix string, err error) error {
	var ie *invalidError
	if errors.As(err, &ie) {
		return &invalidError{field: prefix + ie.field, reason: ie.reason}
	}
	return err
}

// apiError turns an error of the fake into the answer a client sees.
func apiError(err error) error {
	var ie *invalidError
	if errors.As(err, &ie) {
		return apierr.Invalid(ie.field, ie.reason)
	}
	return err
}

// itemError is the code and message of a per-item error.
func itemError(err error) (code, msg string) {
	if err == nil {
		return "", ""
	}
	var ce *connect.Error
	if errors.As(apiError(err), &ce) {
		kind := apierr.Kind(ce)
		if kind == "" {
			kind = ce.Code().String()
		}
		return kind, ce.Message()
	}
	return "", err.Error()
}

func durationOf(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid(field, "%v", err)
	}
	return d.AsDuration(), nil
}

func instantOf(field string, p *timestamppb.Timestamp) (time.Time, error) {
	if p == nil {
		return time.Time{}, nil
	}
	if err := p.CheckValid(); err != nil {
		return time.Time{}, invalid(field, "%v", err)
	}
	return p.AsTime(), nil
}

func (c *Cluster) checkPool(pool string) error {
	if pool == "" {
		return invalid("pool", "must not be empty")
	}
	if len(c.cfg.pools) > 0 && !slices.Contains(c.cfg.pools, pool) {
		return invalid("pool", "unknown pool %q", pool)
	}
	return nil
}

// checkKVs checks labels or tags and returns them sorted by key.
func checkKVs(field string, kvs []*cronoqv1.KV) ([]*cronoqv1.KV, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make([]*cronoqv1.KV, len(kvs))
	for i, kv := range kvs {
		out[i] = &cronoqv1.KV{Key: kv.GetKey(), Value: kv.GetValue()}
	}
	slices.SortStableFunc(out, func(a, b *cronoqv1.KV) int { return strings.Compare(a.Key, b.Key) })
	for i, kv := range out {
		if kv.Key == "" {
			return nil, invalid(field, "empty key")
		}
		if i > 0 && out[i-1].Key == kv.Key {
			return nil, invalid(field, "duplicate key %q", kv.Key)
		}
	}
	return out, nil
}

// checkTemplate validates a template as a real cluster does and returns it
// normalised (labels and tags sorted, payload copied); zero fields stay
// zero.
func (c *Cluster) checkTemplate(tpl *cronoqv1.TaskTemplate) (*cronoqv1.TaskTemplate, error) {
	if tpl == nil {
		tpl = &cronoqv1.TaskTemplate{}
	}
	out := proto.Clone(tpl).(*cronoqv1.TaskTemplate)
	if err := c.checkPool(tpl.GetPool()); err != nil {
		return nil, err
	}
	timeout, err := durationOf("timeout", tpl.GetTimeout())
	if err != nil {
		return nil, err
	}
	switch p := tpl.GetPriority(); {
	case tpl.GetKind() == "":
		return nil, invalid("kind", "must not be empty")
	case len(tpl.GetKind()) > maxKindLen:
		return nil, invalid("kind", "%s", units.TooBig(len(tpl.GetKind()), maxKindLen))
	case p != cronoqv1.Priority_PRIORITY_NORMAL && p != cronoqv1.Priority_PRIORITY_HIGH && p != cronoqv1.Priority_PRIORITY_LOW:
		return nil, invalid("priority", "unknown priority %d", int32(p))
	case len(tpl.GetPayload()) > c.cfg.maxPayload:
		return nil, invalid("payload", "%s", units.TooBig(len(tpl.GetPayload()), c.cfg.maxPayload))
	case timeout < 0:
		return nil, invalid("timeout", "must not be negative")
	}
	if b := tpl.GetBackoff(); b != nil {
		initial, err := durationOf("backoff.initial", b.GetInitial())
		if err != nil {
			return nil, err
		}
		maxDelay, err := durationOf("backoff.max", b.GetMax())
		if err != nil {
			return nil, err
		}
		if initial != 0 || maxDelay != 0 || b.GetJitter() != 0 {
			switch {
			case initial <= 0:
				return nil, invalid("backoff", "initial delay must be positive")
			case maxDelay != 0 && maxDelay < initial:
				return nil, invalid("backoff", "max delay must be at least the initial delay")
			case b.GetJitter() < 0 || b.GetJitter() >= 1:
				return nil, invalid("backoff", "jitter must be in [0, 1)")
			}
		}
	}
	if out.Labels, err = checkKVs("labels", tpl.GetLabels()); err != nil {
		return nil, err
	}
	if out.Tags, err = checkKVs("tags", tpl.GetTags()); err != nil {
		return nil, err
	}
	if len(out.Payload) == 0 {
		out.Payload = nil
	}
	if err := c.checkPayloadLocked(out); err != nil {
		return nil, err
	}
	return out, nil
}

// resolve fills the zero fields of a checked template that have a default
// (timeout, max attempts, backoff), as a stored task holds them: the
// kind's default, else the pool's, else the cluster's.
func (c *Cluster) resolve(tpl *cronoqv1.TaskTemplate) *cronoqv1.TaskTemplate {
	out := proto.Clone(tpl).(*cronoqv1.TaskTemplate)
	d := c.cfg.backoff
	maxAttempts, backoff := uint32(c.cfg.maxAttempts), &cronoqv1.Backoff{Initial: dur(d.initial), Max: dur(d.max), Jitter: d.jitter}
	ks := &cronoqv1.KindSettings{}
	if st := c.pools[out.GetPool()]; st != nil {
		if k := st.kinds[out.GetKind()]; k != nil {
			ks = k.settings
		}
		for _, def := range []struct {
			attempts uint32
			bo       *cronoqv1.Backoff
		}{{st.limits.GetMaxAttempts(), st.limits.GetBackoff()}, {ks.GetMaxAttempts(), ks.GetBackoff()}} {
			if def.attempts > 0 {
				maxAttempts = def.attempts
			}
			if def.bo != nil {
				backoff = proto.Clone(def.bo).(*cronoqv1.Backoff)
				if backoff.GetMax().AsDuration() == 0 {
					backoff.Max = dur(max(d.max, backoff.GetInitial().AsDuration()))
				}
			}
		}
	}
	if out.GetTimeout().AsDuration() == 0 {
		out.Timeout = ks.GetTimeout()
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = maxAttempts
	}
	b := out.GetBackoff()
	switch {
	case b.GetInitial().AsDuration() == 0:
		out.Backoff = backoff
	case b.GetMax().AsDuration() == 0:
		out.Backoff.Max = dur(max(backoff.GetMax().AsDuration(), b.GetInitial().AsDuration()))
	}
	return out
}

// prepare validates a spec and builds the task it asks for (without an id).
func (c *Cluster) prepare(s *cronoqv1.TaskSpec, now time.Time) (*cronoqv1.Task, error) {
	tpl, err := c.checkTemplate(s.GetTemplate())
	if err != nil {
		return nil, err
	}
	switch p := s.GetDependencyPolicy(); p {
	case cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED, cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE:
	default:
		return nil, invalid("dependency_policy", "unknown dependency policy %d", int32(p))
	}
	for i, ref := range s.GetDependsOn() {
		if err := checkRef(ref); err != nil {
			return nil, prefixed(fmt.Sprintf("depends_on[%d].", i), err)
		}
	}
	runAt, err := instantOf("run_at", s.GetRunAt())
	if err != nil {
		return nil, err
	}
	delay, err := durationOf("delay", s.GetDelay())
	if err != nil {
		return nil, err
	}
	deadline, err := instantOf("deadline", s.GetDeadline())
	if err != nil {
		return nil, err
	}
	switch {
	case s.GetRunAt() != nil && delay != 0:
		return nil, invalid("run_at", "run_at and delay are exclusive")
	case delay < 0:
		return nil, invalid("delay", "must not be negative")
	case s.GetRunAt() != nil && runAt.UnixNano() <= 0:
		return nil, invalid("run_at", "must be after 1970-01-01")
	case s.GetRunAt() == nil:
		runAt = now.Add(delay)
	}
	if !deadline.IsZero() {
		switch {
		case !deadline.After(now):
			return nil, invalid("deadline", "already passed")
		case !deadline.After(runAt):
			return nil, invalid("deadline", "must be after the run-at time")
		}
	}
	return &cronoqv1.Task{
		Template:         c.resolve(tpl),
		Key:              s.GetKey(),
		SubmittedAt:      ts(now),
		RunAt:            ts(runAt),
		UpdatedAt:        ts(now),
		Deadline:         ts(deadline),
		DependencyPolicy: s.GetDependencyPolicy(),
		External:         s.GetExternal(),
	}, nil
}

// checkRef refuses a reference that names no task or two ways.
func checkRef(ref *cronoqv1.TaskRef) error {
	switch id, key := ref.GetId(), ref.GetKey(); {
	case id != "" && key != "":
		return invalid("ref", "give an id or a key, not both")
	case id == "" && key == "":
		return invalid("ref", "an id or a key is required")
	}
	return nil
}

// refString names a reference in messages, as a node does.
func refString(ref *cronoqv1.TaskRef) string {
	if ref.GetId() != "" {
		return ref.GetId()
	}
	return "key " + ref.GetKey()
}

// existingLocked finds the existing task a well-formed dependency names.
func (c *Cluster) existingLocked(ref *cronoqv1.TaskRef) (*task, error) {
	if id := ref.GetId(); id != "" {
		if t := c.tasks[id]; t != nil {
			return t, nil
		}
		return nil, invalid("id", "task %s does not exist (unknown, or purged)", id)
	}
	if t := c.byKey[ref.GetKey()]; t != nil {
		return t, nil
	}
	return nil, invalid("key", "no task has the key %q (unknown, or purged)", ref.GetKey())
}

// depLocked finds the task dependency ref of spec i of an admission names:
// by key an earlier spec of an atomic batch (j >= 0, admitted as subs[j]
// once the batch is in), or an existing task.
func (c *Cluster) depLocked(recs []*cronoqv1.Task, batch bool, i int, ref *cronoqv1.TaskRef) (j int, t *task, err error) {
	if key := ref.GetKey(); key != "" && batch {
		for j := i - 1; j >= 0; j-- {
			if recs[j] != nil && recs[j].GetKey() == key {
				return j, nil, nil
			}
		}
	}
	t, err = c.existingLocked(ref)
	return -1, t, err
}

// checkDepsLocked refuses spec i of an admission when a dependency names
// no task.
func (c *Cluster) checkDepsLocked(specs []*cronoqv1.TaskSpec, recs []*cronoqv1.Task, batch bool, i int) error {
	for j, ref := range specs[i].GetDependsOn() {
		if _, _, err := c.depLocked(recs, batch, i, ref); err != nil {
			return prefixed(fmt.Sprintf("depends_on[%d].", j), err)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Admission

type submitMode int

const (
	submitOne submitMode = iota
	submitBatch
	submitMany
)

// admitLocked validates and admits specs: one spec (submitOne), all or
// none (submitBatch), or each on its own (submitMany, errs per item). A
// spec whose key names an existing task (or an earlier spec of the
// request) is answered with that task's id, as a duplicate. Dependencies
// name existing tasks, by id or key, or by key earlier specs of a batch.
func (c *Cluster) admitLocked(mode submitMode, specs []*cronoqv1.TaskSpec) (subs []*cronoqv1.Submitted, errs []error, err error) {
	now := c.now()
	subs = make([]*cronoqv1.Submitted, len(specs))
	errs = make([]error, len(specs))
	recs := make([]*cronoqv1.Task, len(specs))
	for i, s := range specs {
		recs[i], errs[i] = c.prepare(s, now)
		if errs[i] == nil {
			continue
		}
		switch mode {
		case submitOne:
			return nil, nil, errs[i]
		case submitBatch:
			return nil, nil, prefixed(fmt.Sprintf("specs[%d].", i), errs[i])
		}
	}
	batch := mode == submitBatch
	if batch {
		for i := range specs {
			if err := c.checkDepsLocked(specs, recs, true, i); err != nil {
				return nil, nil, prefixed(fmt.Sprintf("specs[%d].", i), err)
			}
		}
		// All or none: count what the batch adds to each pool first.
		adds := map[string]int{}
		seen := map[string]bool{}
		for _, rec := range recs {
			k := rec.GetKey()
			if k != "" && (c.byKey[k] != nil || seen[k]) {
				continue
			}
			seen[k] = k != ""
			adds[rec.GetTemplate().GetPool()]++
		}
		if err := c.fitAllLocked(adds); err != nil {
			return nil, nil, err
		}
	}
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		if !batch {
			if err := c.checkDepsLocked(specs, recs, false, i); err != nil {
				if mode == submitMany {
					errs[i] = err
					continue
				}
				return nil, nil, err
			}
		}
		if k := rec.GetKey(); k != "" && c.byKey[k] != nil {
			subs[i] = &cronoqv1.Submitted{Id: c.byKey[k].p.GetId(), Duplicate: true}
			continue
		}
		if err := c.fitsLocked(rec.GetTemplate().GetPool(), 1); err != nil {
			if mode == submitMany {
				errs[i] = err
				continue
			}
			return nil, nil, err
		}
		var deps []*task
		for _, ref := range specs[i].GetDependsOn() {
			j, t, _ := c.depLocked(recs, batch, i, ref) // checked above
			if j >= 0 {
				t = c.tasks[subs[j].GetId()]
			}
			deps = append(deps, t)
		}
		subs[i] = &cronoqv1.Submitted{Id: c.insertLocked(rec, deps, nil, "").p.GetId()}
	}
	return subs, errs, nil
}

// fitAllLocked refuses adds (new pending tasks per pool) when a pool's
// limit cannot take them.
func (c *Cluster) fitAllLocked(adds map[string]int) error {
	for _, pool := range slices.Sorted(maps.Keys(adds)) {
		if err := c.fitsLocked(pool, adds[pool]); err != nil {
			return err
		}
	}
	return nil
}

// fitsLocked refuses n more pending tasks in pool when its limit is
// reached.
func (c *Cluster) fitsLocked(pool string, n int) error {
	limit, ok := c.limits[pool]
	if !ok {
		return nil
	}
	if c.pendingLocked(pool)+n > limit {
		return apierr.Overloaded(fmt.Sprintf("overloaded: pool %s is at its pending bound of %d", pool, limit))
	}
	return nil
}

func (c *Cluster) pendingLocked(pool string) int {
	n := 0
	for _, t := range c.tasks {
		if t.pool() == pool && pending(t.p.GetStatus()) {
			n++
		}
	}
	return n
}

// newIDLocked returns an unused task id. Ids sort in the order tasks were
// made.
func (c *Cluster) newIDLocked() string {
	for {
		c.seq++
		id := fmt.Sprintf("T%08d", c.seq)
		if c.tasks[id] == nil {
			return id
		}
	}
}

// insertLocked stores a new task (rec has no id yet) that waits for deps,
// as a member of workflow w (nil: none), spawned by parent ("": none):
// blocked while a dependency lives, else scheduled until its run-at time
// and queued from then. One that can never run (a dependency ended without
// success, under policy succeeded) ends cancelled at once.
func (c *Cluster) insertLocked(rec *cronoqv1.Task, deps []*task, w *workflow, parent string) *task {
	rec.Id = c.newIDLocked()
	rec.Parent = parent
	if w != nil {
		rec.Workflow = w.p.GetId()
	}
	rec.DependsOn = nil
	var live []*task
	var doomed *task // a dependency that ended without success
	for _, d := range deps {
		if slices.Contains(rec.DependsOn, d.p.GetId()) {
			continue
		}
		rec.DependsOn = append(rec.DependsOn, d.p.GetId())
		switch st := d.p.GetStatus(); {
		case !terminal(st):
			live = append(live, d)
		case st != cronoqv1.Status_STATUS_SUCCEEDED && doomed == nil &&
			rec.GetDependencyPolicy() == cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED:
			doomed = d
		}
	}
	t := &task{p: rec}
	c.tasks[rec.Id] = t
	if rec.Key != "" {
		c.byKey[rec.Key] = t
	}
	if w != nil {
		w.joinLocked(t)
	}
	switch {
	case len(live) > 0 || doomed != nil:
		c.setStatusLocked(t, cronoqv1.Status_STATUS_BLOCKED)
		for _, d := range live {
			d.dependents = append(d.dependents, t)
			t.waitingOn++
		}
	case tsTime(rec.RunAt).After(c.now()):
		c.setStatusLocked(t, cronoqv1.Status_STATUS_SCHEDULED)
	default:
		c.setStatusLocked(t, cronoqv1.Status_STATUS_QUEUED)
	}
	c.eventLocked(t, "")
	if doomed != nil {
		c.finishLocked(t, cronoqv1.Status_STATUS_CANCELLED, nil, depMessage(doomed), "")
	}
	return t
}

// depMessage is the error of a task ended because its dependency d ended
// without success.
func depMessage(d *task) string {
	name := d.p.GetStep()
	if name == "" {
		name = d.p.GetId()
	}
	return fmt.Sprintf("dependency %s %s", name, statusName(d.p.GetStatus()))
}

// putLocked stores p as given, replacing a task of the same id: the new
// task takes the old one's place among the dependents of others, and
// joins the workflow p names, if it exists.
func (c *Cluster) putLocked(p *cronoqv1.Task) {
	t := &task{p: cloneTask(p)}
	if old := c.tasks[p.GetId()]; old != nil {
		c.revokeLocked(old, "")
		c.dequeueLocked(old)
		delete(c.timed, old)
		if c.byKey[old.p.GetKey()] == old {
			delete(c.byKey, old.p.GetKey())
		}
		t.dependents, old.dependents = old.dependents, nil
		if w := old.wf; w != nil {
			w.leaveLocked(c, old)
		}
	}
	c.tasks[p.GetId()] = t
	if k := p.GetKey(); k != "" {
		c.byKey[k] = t
	}
	if w := c.workflows[p.GetWorkflow()]; w != nil {
		w.joinLocked(t)
		if w.live == 0 {
			c.settleLaterLocked(w)
		}
	}
	if p.GetStatus() == cronoqv1.Status_STATUS_BLOCKED {
		for _, id := range p.GetDependsOn() {
			if d := c.tasks[id]; d != nil && !terminal(d.p.GetStatus()) {
				d.dependents = append(d.dependents, t)
				t.waitingOn++
			}
		}
	}
	if p.GetStatus() == cronoqv1.Status_STATUS_QUEUED {
		c.enqueueLocked(t)
	}
	c.trackLocked(t)
	c.applied++
	if terminal(p.GetStatus()) {
		c.endedLocked(t)
	}
}

// ---------------------------------------------------------------------------
// Transitions

// setStatusLocked moves t to status s, keeping the ready queues in step.
func (c *Cluster) setStatusLocked(t *task, s cronoqv1.Status) {
	old := t.p.Status
	t.p.Status = s
	t.p.UpdatedAt = ts(c.now())
	c.applied++
	if old == cronoqv1.Status_STATUS_QUEUED && s != old {
		c.dequeueLocked(t)
	}
	if s == cronoqv1.Status_STATUS_QUEUED && (old != s || !t.inQueue) {
		c.enqueueLocked(t)
	}
	c.trackLocked(t)
}

// trackLocked keeps t in the set of tasks the clock may change.
func (c *Cluster) trackLocked(t *task) {
	if t.dueAt(c).IsZero() {
		delete(c.timed, t)
	} else {
		c.timed[t] = struct{}{}
	}
}

// enqueueLocked makes a queued task dispatchable; an external task waits
// for its completion instead.
func (c *Cluster) enqueueLocked(t *task) {
	if t.p.GetExternal() {
		return
	}
	rq := c.ready[t.pool()]
	if rq == nil {
		rq = &readyQueue{}
		c.ready[t.pool()] = rq
	}
	c.readySeq++
	t.readySeq = c.readySeq
	r := rank(t.p.GetTemplate().GetPriority())
	rq.q[r] = append(rq.q[r], t)
	t.inQueue = true
}

func (c *Cluster) dequeueLocked(t *task) {
	if !t.inQueue {
		return
	}
	t.inQueue = false
	rq := c.ready[t.pool()]
	r := rank(t.p.GetTemplate().GetPriority())
	if i := slices.Index(rq.q[r], t); i >= 0 {
		rq.q[r] = slices.Delete(rq.q[r], i, i+1)
	}
}

// startLocked leases t to the worker of stream s and returns the grant.
func (c *Cluster) startLocked(t *task, s *workerStream) *cronoqv1.Grant {
	now := c.now()
	c.leaseCtr++
	lease := c.epoch<<32 | c.leaseCtr
	t.p.Attempt++
	t.p.Lease = lease
	t.p.StartedAt = ts(now)
	t.hbDeadline = now.Add(c.cfg.window)
	t.timeoutAt = time.Time{}
	if d := t.p.GetTemplate().GetTimeout().AsDuration(); d > 0 {
		t.timeoutAt = now.Add(d)
	}
	t.stream = s
	t.attemptLease = lease
	t.attemptWorker = ""
	if s != nil {
		t.attemptWorker = s.worker
	}
	c.leases[lease] = t
	c.setStatusLocked(t, cronoqv1.Status_STATUS_RUNNING)
	c.lastLease[t.p.GetId()] = lease
	c.eventLocked(t, "")
	g := &cronoqv1.Grant{Task: cloneTask(t.p), Lease: lease, Attempt: t.p.GetAttempt(), Dependencies: c.dependencyResultsLocked(t)}
	c.wlog.Grants = append(c.wlog.Grants, proto.Clone(g).(*cronoqv1.Grant))
	return g
}

// dependencyResultsLocked is what t's dependencies ended with, in its
// depends_on order, for its grant: outputs inlined while they fit the
// grant's output budget, left out (output_omitted) past it.
func (c *Cluster) dependencyResultsLocked(t *task) []*cronoqv1.DependencyResult {
	var out []*cronoqv1.DependencyResult
	budget := c.cfg.grantBudget
	for _, id := range t.p.GetDependsOn() {
		r := &cronoqv1.DependencyResult{Id: id}
		if d := c.tasks[id]; d == nil {
			r.Error = fmt.Sprintf("dependency %s no longer exists (purged)", id)
		} else {
			r.Step, r.Status, r.Error = d.p.GetStep(), d.p.GetStatus(), d.p.GetError()
			switch o := d.p.GetOutput(); {
			case len(o) == 0:
			case budget < 0:
				r.Output = slices.Clone(o)
			case len(o) <= budget:
				r.Output = slices.Clone(o)
				budget -= len(o)
			default:
				r.OutputOmitted = true
			}
		}
		out = append(out, r)
	}
	return out
}

// revokeLocked ends t's current lease; with a reason, its worker is told to
// stop the attempt (an Abort).
func (c *Cluster) revokeLocked(t *task, reason string) {
	lease := t.p.GetLease()
	if lease == 0 {
		return
	}
	if c.leases[lease] == t {
		delete(c.leases, lease)
		if reason != "" && t.stream != nil {
			t.stream.pushLocked(&cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Abort{
				Abort: &cronoqv1.Abort{Lease: lease, Reason: reason}}}, 0, nil)
		}
	}
	t.p.Lease = 0
	t.stream = nil
	c.trackLocked(t)
}

// finishLocked ends t with a terminal status; a running attempt is
// aborted with abortReason. Its dependents follow (see endedLocked).
func (c *Cluster) finishLocked(t *task, s cronoqv1.Status, output []byte, msg, abortReason string) {
	c.finishJoinLocked(t, s, output, msg, abortReason, nil, 0)
}

// finishJoinLocked is finishLocked, making t a member of workflow join
// (when not nil) as it ends; a running attempt goes into its history with
// outcome (0: the outcome of s).
func (c *Cluster) finishJoinLocked(t *task, s cronoqv1.Status, output []byte, msg, abortReason string, join *workflow, outcome cronoqv1.AttemptOutcome) {
	wasLive := !terminal(t.p.GetStatus()) // Finish may end a task again
	if t.p.GetStatus() == cronoqv1.Status_STATUS_RUNNING {
		if outcome == 0 {
			outcome = outcomeOf(s)
		}
		c.recordAttemptLocked(t, outcome, msg)
	}
	c.revokeLocked(t, abortReason)
	c.setStatusLocked(t, s)
	t.p.Output = output
	t.p.Error = msg
	t.p.FinishedAt = ts(c.now())
	switch w := t.wf; {
	case w != nil:
		if wasLive {
			w.note(s)
			w.live--
			if w.live == 0 {
				c.settleLaterLocked(w)
			}
		}
	case join != nil:
		t.p.Workflow = join.p.GetId()
		join.joinLocked(t)
	}
	c.eventLocked(t, msg)
	c.endedLocked(t)
}

// endedLocked does what follows from t's end for the tasks waiting for it:
// each is released once its last dependency ended; under policy succeeded,
// one whose dependency ended without success ends cancelled, and so on
// down the graph.
func (c *Cluster) endedLocked(t *task) {
	deps := t.dependents
	t.dependents = nil
	for _, dt := range deps {
		if c.tasks[dt.p.GetId()] != dt || dt.p.GetStatus() != cronoqv1.Status_STATUS_BLOCKED {
			continue // ended on its own meanwhile, or replaced by PutTask
		}
		dt.waitingOn--
		switch {
		case t.p.GetStatus() != cronoqv1.Status_STATUS_SUCCEEDED &&
			dt.p.GetDependencyPolicy() == cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_SUCCEEDED:
			c.finishLocked(dt, cronoqv1.Status_STATUS_CANCELLED, nil, depMessage(t), "")
		case dt.waitingOn <= 0:
			c.unblockLocked(dt)
		}
	}
}

// unblockLocked releases a blocked task whose dependencies all ended.
func (c *Cluster) unblockLocked(t *task) {
	if tsTime(t.p.GetRunAt()).After(c.now()) {
		c.setStatusLocked(t, cronoqv1.Status_STATUS_SCHEDULED)
	} else {
		c.setStatusLocked(t, cronoqv1.Status_STATUS_QUEUED)
	}
	c.eventLocked(t, "")
}

// failAttemptLocked ends t's attempt with a retryable failure: the task is
// retried after retryAfter (when positive) or its backoff, or fails when
// its attempts are used up.
func (c *Cluster) failAttemptLocked(t *task, msg string, retryAfter time.Duration, outcome cronoqv1.AttemptOutcome) {
	c.revokeLocked(t, "")
	n := t.p.GetAttempt() - t.p.GetAttemptBase() // attempts of its current budget
	if n >= t.p.GetTemplate().GetMaxAttempts() {
		if outcome == cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_RETRY {
			outcome = cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED
		}
		c.finishJoinLocked(t, cronoqv1.Status_STATUS_FAILED, nil, msg, "", nil, outcome)
		return
	}
	c.recordAttemptLocked(t, outcome, msg)
	delay := retryAfter
	if delay <= 0 {
		delay = c.backoffDelay(t.p.GetTemplate().GetBackoff(), n)
	}
	now := c.now()
	retryAt := now.Add(delay)
	t.p.RunAt = ts(retryAt)
	t.p.Error = msg
	if retryAt.After(now) {
		c.setStatusLocked(t, cronoqv1.Status_STATUS_RETRYING)
	} else {
		c.setStatusLocked(t, cronoqv1.Status_STATUS_QUEUED)
	}
	c.eventLocked(t, msg)
}

// backoffDelay is the delay after failed attempt n: initial doubled n-1
// times, capped, spread by ±jitter.
func (c *Cluster) backoffDelay(b *cronoqv1.Backoff, attempt uint32) time.Duration {
	d, limit := b.GetInitial().AsDuration(), b.GetMax().AsDuration()
	for i := uint32(1); i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	if j := b.GetJitter(); j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*c.rng.Float64()-1)))
	}
	return max(d, 1)
}

// completeLocked takes the completion of an attempt, with the children it
// spawns; the answer is the per-lease result (empty when taken). A refused
// completion changes nothing.
func (c *Cluster) completeLocked(comp *cronoqv1.Completion) error {
	t := c.leases[comp.GetLease()]
	if t == nil {
		return apierr.StaleLease(fmt.Sprintf("lease %d is not current", comp.GetLease()))
	}
	retryAfter, err := durationOf("retry_after", comp.GetRetryAfter())
	if err != nil {
		return err
	}
	spawns := len(comp.GetChildren()) > 0 || comp.GetThen() != nil
	if spawns && comp.GetOutcome() != cronoqv1.OutcomeKind_OUTCOME_SUCCESS {
		return invalid("children", "only a successful attempt spawns children")
	}
	switch comp.GetOutcome() {
	case cronoqv1.OutcomeKind_OUTCOME_SUCCESS:
		out := comp.GetOutput()
		schemaErr := c.outputErrorLocked(t, out)
		switch {
		case len(out) > c.cfg.maxOutput:
			c.finishLocked(t, cronoqv1.Status_STATUS_FAILED, nil,
				"output of "+units.TooBig(len(out), c.cfg.maxOutput), "")
		case schemaErr != "":
			// Like an oversized output: the attempt fails for good.
			c.finishLocked(t, cronoqv1.Status_STATUS_FAILED, nil, schemaErr, "")
		case spawns:
			return c.spawnLocked(t, comp)
		default:
			c.finishLocked(t, cronoqv1.Status_STATUS_SUCCEEDED, slices.Clone(out), "", "")
		}
	case cronoqv1.OutcomeKind_OUTCOME_RETRYABLE:
		c.failAttemptLocked(t, orDefault(comp.GetMessage(), msgRetryable), retryAfter, cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_RETRY)
	case cronoqv1.OutcomeKind_OUTCOME_PERMANENT:
		c.finishLocked(t, cronoqv1.Status_STATUS_FAILED, nil, orDefault(comp.GetMessage(), msgPermanent), "")
	case cronoqv1.OutcomeKind_OUTCOME_CANCELLED:
		c.finishLocked(t, cronoqv1.Status_STATUS_CANCELLED, nil, orDefault(comp.GetMessage(), msgWorkerCancel), "")
	default:
		return invalid("outcome", "unknown kind %d", int32(comp.GetOutcome()))
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// cancelLocked cancels a live task; false when it had already ended.
func (c *Cluster) cancelLocked(t *task, reason string) bool {
	if terminal(t.p.GetStatus()) {
		return false
	}
	c.finishLocked(t, cronoqv1.Status_STATUS_CANCELLED, nil, msgCancelled, reason)
	return true
}

// settleLocked ends the workflows whose members have all ended, hands
// ready tasks to the workers that asked for them and tells everyone
// waiting that the state changed. Every change ends with it, so that a
// member ending in the same change as new members join (a spawn) does not
// end its workflow.
func (c *Cluster) settleLocked() {
	c.settleWorkflowsLocked()
	c.dispatchLocked()
	c.notifyLocked()
}

// ---------------------------------------------------------------------------
// Time

// advanceLocked applies the time-driven changes that are due; it reports
// whether anything changed.
func (c *Cluster) advanceLocked() bool {
	now := c.now()
	var due []*task
	for t := range c.timed {
		if at := t.dueAt(c); !at.IsZero() && !at.After(now) {
			due = append(due, t)
		}
	}
	slices.SortFunc(due, func(a, b *task) int { return strings.Compare(a.p.GetId(), b.p.GetId()) })
	for _, t := range due {
		c.applyDueLocked(t, now)
	}
	fired := c.fireDueLocked(now)
	return len(due) > 0 || fired
}

// dueAt is the next instant something happens to t on its own (zero:
// nothing will).
func (t *task) dueAt(c *Cluster) time.Time {
	var at time.Time
	earliest := func(x time.Time) {
		if !x.IsZero() && (at.IsZero() || x.Before(at)) {
			at = x
		}
	}
	switch t.p.GetStatus() {
	case cronoqv1.Status_STATUS_SCHEDULED, cronoqv1.Status_STATUS_RETRYING:
		earliest(tsTime(t.p.GetRunAt()))
	case cronoqv1.Status_STATUS_RUNNING:
		if c.leases[t.p.GetLease()] == t {
			earliest(t.hbDeadline)
			earliest(t.timeoutAt)
		}
	}
	if !terminal(t.p.GetStatus()) {
		earliest(tsTime(t.p.GetDeadline()))
	}
	return at
}

func (c *Cluster) applyDueLocked(t *task, now time.Time) {
	if dl := tsTime(t.p.GetDeadline()); !dl.IsZero() && !dl.After(now) && !terminal(t.p.GetStatus()) {
		c.finishLocked(t, cronoqv1.Status_STATUS_EXPIRED, nil, msgDeadline, msgDeadline)
		return
	}
	switch t.p.GetStatus() {
	case cronoqv1.Status_STATUS_SCHEDULED, cronoqv1.Status_STATUS_RETRYING:
		c.setStatusLocked(t, cronoqv1.Status_STATUS_QUEUED)
		c.eventLocked(t, "")
	case cronoqv1.Status_STATUS_RUNNING:
		if !t.timeoutAt.IsZero() && !t.timeoutAt.After(now) {
			msg := fmt.Sprintf("attempt timed out after %s", t.p.GetTemplate().GetTimeout().AsDuration())
			c.revokeLocked(t, msg)
			c.failAttemptLocked(t, msg, 0, cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_TIMEOUT)
			return
		}
		msg := fmt.Sprintf("lease lost: no heartbeat within %s", c.cfg.window)
		c.revokeLocked(t, msg)
		c.failAttemptLocked(t, msg, 0, cronoqv1.AttemptOutcome_ATTEMPT_OUTCOME_LOST)
	}
}

// nextDueLocked is the next instant a time-driven change comes due (zero:
// none).
func (c *Cluster) nextDueLocked() time.Time {
	var at time.Time
	earliest := func(x time.Time) {
		if !x.IsZero() && (at.IsZero() || x.Before(at)) {
			at = x
		}
	}
	for t := range c.timed {
		earliest(t.dueAt(c))
	}
	for _, s := range c.schedules {
		earliest(s.next)
	}
	return at
}

// ---------------------------------------------------------------------------
// Events

// subscriber is one Events stream.
type subscriber struct {
	pools  map[string]bool
	ch     chan *cronoqv1.Event
	lagged bool // events were dropped since the last one taken
	end    chan struct{}
	err    error
	ended  bool
}

func (s *subscriber) endLocked(err error) {
	if !s.ended {
		s.ended, s.err = true, err
		close(s.end)
	}
}

func (c *Cluster) eventLocked(t *task, msg string) {
	c.publishLocked(&cronoqv1.Event{
		TaskId:   t.p.GetId(),
		Pool:     t.pool(),
		Kind:     t.p.GetTemplate().GetKind(),
		Status:   t.p.GetStatus(),
		Attempt:  t.p.GetAttempt(),
		Message:  msg,
		At:       ts(c.now()),
		Workflow: t.p.GetWorkflow(),
		Step:     t.p.GetStep(),
	})
}

// publishLocked hands ev to every subscriber of its pool (a workflow
// event: to the subscribers of every pool); a subscriber that fell behind
// loses it and gets a lagged marker before its next event.
func (c *Cluster) publishLocked(ev *cronoqv1.Event) {
	wfEvent := ev.GetTaskId() == "" && ev.GetWorkflowStatus() != cronoqv1.WorkflowStatus_WORKFLOW_STATUS_UNSPECIFIED
	for sub := range c.subs {
		if len(sub.pools) > 0 && !ev.GetLagged() && (wfEvent || !sub.pools[ev.GetPool()]) {
			continue
		}
		select {
		case sub.ch <- ev:
		default:
			sub.lagged = true
		}
	}
}
