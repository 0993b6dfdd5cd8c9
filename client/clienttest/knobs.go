package clienttest

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

// This file holds what tests use to set the cluster up, script its faults
// and look inside it. Messages returned are copies.

// fail reports a misuse of the fake: it fails the test of a cluster made by
// NewCluster, and panics otherwise.
func (c *Cluster) fail(format string, args ...any) {
	msg := "clienttest: " + fmt.Sprintf(format, args...)
	if c.t == nil {
		panic(msg)
	}
	c.t.Helper()
	c.t.Fatal(msg)
}

// ---------------------------------------------------------------------------
// Tasks

// AddTask submits spec as the leader would take a Submit (validation,
// defaults, idempotency key) and returns the task's id; a spec the cluster
// refuses fails the test.
func (c *Cluster) AddTask(spec *cronoqv1.TaskSpec) string {
	if c.t != nil {
		c.t.Helper()
	}
	c.mu.Lock()
	c.advanceLocked()
	subs, _, err := c.admitLocked(submitOne, []*cronoqv1.TaskSpec{spec})
	c.settleLocked()
	c.mu.Unlock()
	if err != nil {
		c.fail("AddTask: %v", apiError(err))
		return ""
	}
	return subs[0].GetId()
}

// PutTask stores a task exactly as given (its id is required), replacing
// any task of that id: a way to set up tasks in any state. A queued task
// can be granted to workers; other states change only through calls and
// the clock (a running task put this way has no lease a worker holds). It
// takes the replaced task's place for the tasks that wait for it (a
// terminal task releases or cancels them at once), joins the workflow it
// names if that exists, and a blocked one waits for the live tasks of its
// depends_on.
func (c *Cluster) PutTask(t *cronoqv1.Task) {
	if c.t != nil {
		c.t.Helper()
	}
	if t.GetId() == "" {
		c.fail("PutTask: the task has no id")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(t)
	c.settleLocked()
}

// Task returns task id, nil when there is none.
func (c *Cluster) Task(id string) *cronoqv1.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tasks[id]; t != nil {
		return cloneTask(t.p)
	}
	return nil
}

// TaskByKey returns the task of an idempotency key, nil when there is none.
func (c *Cluster) TaskByKey(key string) *cronoqv1.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.byKey[key]; t != nil {
		return cloneTask(t.p)
	}
	return nil
}

// Tasks returns every task, by id.
func (c *Cluster) Tasks() []*cronoqv1.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*cronoqv1.Task, 0, len(c.tasks))
	for _, id := range slices.Sorted(maps.Keys(c.tasks)) {
		out = append(out, cloneTask(c.tasks[id].p))
	}
	return out
}

// Finish ends task id with a terminal status, output and message, as if
// the cluster had decided it: a running attempt's lease is revoked and its
// worker gets an Abort whose reason is message (or the status), waiters
// and event subscribers learn of the end, and its dependents and its
// workflow follow as on a real cluster.
func (c *Cluster) Finish(id string, status cronoqv1.Status, output []byte, message string) {
	if c.t != nil {
		c.t.Helper()
	}
	if !terminal(status) {
		c.fail("Finish: %s is not a terminal status", status)
		return
	}
	c.mu.Lock()
	t := c.tasks[id]
	if t == nil {
		c.mu.Unlock()
		c.fail("Finish: no task %s", id)
		return
	}
	c.finishLocked(t, status, slices.Clone(output), message, orDefault(message, "task "+statusName(status)))
	c.settleLocked()
	c.mu.Unlock()
}

// SetPendingLimit bounds the pending (scheduled, queued, retrying or
// blocked) tasks of pool: submits, workflows and spawned children beyond n
// are refused as overloaded. n < 0 removes the bound.
func (c *Cluster) SetPendingLimit(pool string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < 0 {
		delete(c.limits, pool)
		return
	}
	c.limits[pool] = n
}

// AppliedIndex returns the index of the last change, as reads report it.
func (c *Cluster) AppliedIndex() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

// ---------------------------------------------------------------------------
// Workflows

// AddWorkflow submits spec as the leader would take a WorkflowService
// Submit (validation, defaults, idempotency key) and returns the
// workflow's id; a spec the cluster refuses fails the test.
func (c *Cluster) AddWorkflow(spec *cronoqv1.WorkflowSpec) string {
	if c.t != nil {
		c.t.Helper()
	}
	c.mu.Lock()
	c.advanceLocked()
	res, err := c.submitWorkflowLocked(spec)
	c.settleLocked()
	c.mu.Unlock()
	if err != nil {
		c.fail("AddWorkflow: %v", apiError(err))
		return ""
	}
	return res.GetId()
}

// Workflow returns workflow id with its members (in id order), nil when
// there is none.
func (c *Cluster) Workflow(id string) *cronoqv1.Workflow {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.workflows[id]; w != nil {
		return w.protoLocked(true)
	}
	return nil
}

// WorkflowByKey returns the workflow of an idempotency key with its
// members, nil when there is none.
func (c *Cluster) WorkflowByKey(key string) *cronoqv1.Workflow {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.wfByKey[key]; w != nil {
		return w.protoLocked(true)
	}
	return nil
}

// Workflows returns every workflow with its members, by id: those
// submitted, fired by schedules and created by spawning children.
func (c *Cluster) Workflows() []*cronoqv1.Workflow {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*cronoqv1.Workflow, 0, len(c.workflows))
	for _, id := range slices.Sorted(maps.Keys(c.workflows)) {
		out = append(out, c.workflows[id].protoLocked(true))
	}
	return out
}

// ---------------------------------------------------------------------------
// Calls

// Calls returns how many calls of procedure the cluster served (refusals
// for not leading, scripted refusals and held calls not counted).
func (c *Cluster) Calls(procedure string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[procedure]
}

// Requests returns the request messages of the calls of procedure the
// cluster served, in order.
func (c *Cluster) Requests(procedure string) []proto.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]proto.Message, len(c.requests[procedure]))
	for i, m := range c.requests[procedure] {
		out[i] = proto.Clone(m)
	}
	return out
}

// Submits returns the specs of the Submit calls the cluster served, in
// order (retries included).
func (c *Cluster) Submits() []*cronoqv1.TaskSpec {
	var out []*cronoqv1.TaskSpec
	for _, m := range c.Requests(cronoqv1connect.TaskServiceSubmitProcedure) {
		out = append(out, m.(*cronoqv1.SubmitRequest).GetSpec())
	}
	return out
}

// SubmitKeys returns the idempotency keys of the Submit calls the cluster
// served, in order.
func (c *Cluster) SubmitKeys() []string {
	var out []string
	for _, s := range c.Submits() {
		out = append(out, s.GetKey())
	}
	return out
}

// RefuseCalls answers the next n calls of procedure, on any node, with err
// before doing anything (n < 0: every call, until RefuseCalls(procedure, 0,
// nil)).
func (c *Cluster) RefuseCalls(procedure string, n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse[procedure] = &fault{n: n, err: err}
}

// LoseAnswers makes the next n calls of procedure that succeed take effect
// and then answer err instead of their result (n < 0: every such call,
// until LoseAnswers(procedure, 0, nil)). With apierr.OutcomeUnknown this is
// a leader losing its leadership while committing.
func (c *Cluster) LoseAnswers(procedure string, n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lose[procedure] = &fault{n: n, err: err}
}

// Hold makes calls of procedure wait, once routed to the leader, until
// release is called (or their caller gives up, or the cluster closes).
// release is idempotent.
func (c *Cluster) Hold(procedure string) (release func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.holds[procedure] = ch
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if c.holds[procedure] == ch {
				delete(c.holds, procedure)
			}
			c.mu.Unlock()
			close(ch)
		})
	}
}

// ---------------------------------------------------------------------------
// Events

// ScriptEvents replaces the events of the Events streams: the n-th stream
// the leader serves (from 1) runs script with send, which sends one event.
// An error from script ends the stream with it; after a nil return the
// stream carries the cluster's own events. nil restores the default.
func (c *Cluster) ScriptEvents(script func(n int, send func(*cronoqv1.Event) error) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eventScript = script
}

// Publish sends ev to the subscribers of its pool (a workflow event, with
// no task id and a workflow status, to the subscribers of every pool), as
// if the cluster had made it.
func (c *Cluster) Publish(ev *cronoqv1.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publishLocked(proto.Clone(ev).(*cronoqv1.Event))
	c.notifyLocked()
}

// ---------------------------------------------------------------------------
// Schedules

// Schedule returns the schedule name as List shows it, nil when there is
// none.
func (c *Cluster) Schedule(name string) *cronoqv1.Schedule {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.schedules[name]; s != nil {
		return s.proto()
	}
	return nil
}

// Schedules returns every schedule, by name.
func (c *Cluster) Schedules() []*cronoqv1.Schedule {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*cronoqv1.Schedule
	for _, name := range slices.Sorted(maps.Keys(c.schedules)) {
		out = append(out, c.schedules[name].proto())
	}
	return out
}

// FireSchedule fires schedule name now, as at one of its fire times, and
// returns the id of the task it made, or of the workflow for a schedule
// with steps ("" when the fire was skipped: its overlap policy, or the
// pending limits). An unknown schedule fails the test.
func (c *Cluster) FireSchedule(name string) string {
	if c.t != nil {
		c.t.Helper()
	}
	c.mu.Lock()
	s := c.schedules[name]
	if s == nil {
		c.mu.Unlock()
		c.fail("FireSchedule: no schedule %s", name)
		return ""
	}
	id := c.fireLocked(s, c.now().Truncate(time.Second))
	c.settleLocked()
	c.mu.Unlock()
	return id
}

// ---------------------------------------------------------------------------
// Workers

// Workers returns what the cluster saw of the worker protocol so far.
func (c *Cluster) Workers() WorkerLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.wlog
	out := WorkerLog{Streams: w.Streams, Polls: slices.Clone(w.Polls), Violations: slices.Clone(w.Violations)}
	for _, h := range w.Hellos {
		out.Hellos = append(out.Hellos, proto.Clone(h).(*cronoqv1.Hello))
	}
	for _, hb := range w.Heartbeats {
		out.Heartbeats = append(out.Heartbeats, Heartbeat{Stream: hb.Stream, Leases: slices.Clone(hb.Leases)})
	}
	for _, g := range w.Grants {
		out.Grants = append(out.Grants, proto.Clone(g).(*cronoqv1.Grant))
	}
	clone := func(in []Completion) []Completion {
		var out []Completion
		for _, r := range in {
			out = append(out, Completion{Stream: r.Stream, TaskID: r.TaskID, Completion: proto.Clone(r.Completion).(*cronoqv1.Completion)})
		}
		return out
	}
	out.Received = clone(w.Received)
	out.Accepted = clone(w.Accepted)
	return out
}

// Accepted returns the last completion the cluster took for task id, nil
// when none.
func (c *Cluster) Accepted(id string) *cronoqv1.Completion {
	c.mu.Lock()
	defer c.mu.Unlock()
	if comp := c.accepted[id]; comp != nil {
		return proto.Clone(comp).(*cronoqv1.Completion)
	}
	return nil
}

// LeaseOf returns the last lease granted for task id, 0 when none.
func (c *Cluster) LeaseOf(id string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastLease[id]
}

// DropStreamOnCompletion ends the worker stream that brings a completion
// for task id, once, before anything of that message is taken: the
// completion is lost with the stream and the worker must send it again.
func (c *Cluster) DropStreamOnCompletion(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropOnCompletion[id] = true
}

// DropWorkerStreams ends every worker stream now (code unavailable), as a
// failing node would; workers reconnect.
func (c *Cluster) DropWorkerStreams() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.streams {
		s.endLocked(errDropped)
	}
	c.notifyLocked()
}

// RefuseHeartbeats answers the heartbeats of task id's leases with the
// error kind (for instance apierr.KindStaleLease); "" stops refusing.
func (c *Cluster) RefuseHeartbeats(id, kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if kind == "" {
		delete(c.refuseHB, id)
		return
	}
	c.refuseHB[id] = kind
}

// DelayHeartbeatAcks holds every heartbeat acknowledgement d (real time)
// before sending it; other messages are not held back.
func (c *Cluster) DelayHeartbeatAcks(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ackDelay = d
}
