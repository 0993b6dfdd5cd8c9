package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
)

// fakeNode is an in-process stand-in for a node's API: it records the
// requests it gets and answers from canned state.
type fakeNode struct {
	mu        sync.Mutex
	tasks     map[string]*cronoqv1.Task
	keys      map[string]string
	submits   []*cronoqv1.TaskSpec
	lists     []*cronoqv1.ListRequest
	schedules map[string]*cronoqv1.Schedule
	peers     []*cronoqv1.Peer
	// submitErr, when set, answers every submit.
	submitErr error
	nextID    int
	// grants are handed to the first worker that polls; completions are
	// what workers reported, by lease.
	grants      []*cronoqv1.Grant
	hellos      []*cronoqv1.Hello
	completions map[uint64]*cronoqv1.Completion
}

func (f *fakeNode) task(id string) *cronoqv1.Task {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tasks[id]
}

func (f *fakeNode) put(t *cronoqv1.Task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tasks[t.Id] = t
	if t.Key != "" {
		f.keys[t.Key] = t.Id
	}
}

func (f *fakeNode) lookup(ref *cronoqv1.TaskRef) (*cronoqv1.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := ref.GetId()
	if id == "" {
		id = f.keys[ref.GetKey()]
	}
	t, ok := f.tasks[id]
	if !ok {
		return nil, apierr.NotFound("task not found")
	}
	return t, nil
}

type fakeTasks struct {
	cronoqv1connect.UnimplementedTaskServiceHandler
	f *fakeNode
}

func (s fakeTasks) Submit(_ context.Context, req *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.submitErr != nil {
		return nil, f.submitErr
	}
	spec := req.Msg.GetSpec()
	f.submits = append(f.submits, spec)
	if id, ok := f.keys[spec.GetKey()]; ok {
		return connect.NewResponse(&cronoqv1.SubmitResponse{Result: &cronoqv1.Submitted{Id: id, Duplicate: true}}), nil
	}
	f.nextID++
	id := "T" + string(rune('0'+f.nextID))
	f.tasks[id] = &cronoqv1.Task{Id: id, Pool: spec.GetPool(), Kind: spec.GetKind(), Key: spec.GetKey(),
		Payload: spec.GetPayload(), Status: cronoqv1.Status_STATUS_QUEUED}
	f.keys[spec.GetKey()] = id
	return connect.NewResponse(&cronoqv1.SubmitResponse{Result: &cronoqv1.Submitted{Id: id}}), nil
}

func (s fakeTasks) Get(_ context.Context, req *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
	t, err := s.f.lookup(req.Msg.GetRef())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&cronoqv1.GetResponse{Task: t}), nil
}

// Wait answers at once for a terminal task, and otherwise holds the call
// for its timeout (as a node does) and answers with the task as it is.
func (s fakeTasks) Wait(ctx context.Context, req *connect.Request[cronoqv1.WaitRequest]) (*connect.Response[cronoqv1.WaitResponse], error) {
	t, err := s.f.lookup(req.Msg.GetRef())
	if err != nil {
		return nil, err
	}
	if t.Status < cronoqv1.Status_STATUS_SUCCEEDED {
		hold := time.NewTimer(time.Duration(req.Msg.GetTimeoutMs()) * time.Millisecond)
		defer hold.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-hold.C:
		}
	}
	return connect.NewResponse(&cronoqv1.WaitResponse{Task: t}), nil
}

func (s fakeTasks) Cancel(_ context.Context, req *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
	t, err := s.f.lookup(req.Msg.GetRef())
	if err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	cancelled := t.Status < cronoqv1.Status_STATUS_SUCCEEDED
	if cancelled {
		t.Status = cronoqv1.Status_STATUS_CANCELLED
	}
	return connect.NewResponse(&cronoqv1.CancelResponse{Id: t.Id, Cancelled: cancelled}), nil
}

func (s fakeTasks) List(_ context.Context, req *connect.Request[cronoqv1.ListRequest]) (*connect.Response[cronoqv1.ListResponse], error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.lists = append(s.f.lists, req.Msg)
	return connect.NewResponse(&cronoqv1.ListResponse{
		Tasks: []*cronoqv1.Task{s.f.tasks["T1"], s.f.tasks["T2"]},
		Next:  "T2",
	}), nil
}

type fakeSchedules struct {
	cronoqv1connect.UnimplementedScheduleServiceHandler
	f *fakeNode
}

var nextFire = time.Date(2030, 1, 3, 2, 0, 0, 0, time.UTC)

func (s fakeSchedules) Add(_ context.Context, req *connect.Request[cronoqv1.AddScheduleRequest]) (*connect.Response[cronoqv1.AddScheduleResponse], error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	sc := req.Msg.GetSchedule()
	sc.NextFire = nextFire.UnixNano()
	s.f.schedules[sc.GetName()] = sc
	return connect.NewResponse(&cronoqv1.AddScheduleResponse{Name: sc.GetName(), NextFire: sc.NextFire}), nil
}

func (s fakeSchedules) List(context.Context, *connect.Request[cronoqv1.ListSchedulesRequest]) (*connect.Response[cronoqv1.ListSchedulesResponse], error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	out := &cronoqv1.ListSchedulesResponse{}
	for _, name := range []string{"a", "b", "nightly"} {
		if sc, ok := s.f.schedules[name]; ok {
			out.Schedules = append(out.Schedules, sc)
		}
	}
	return connect.NewResponse(out), nil
}

func (s fakeSchedules) Remove(_ context.Context, req *connect.Request[cronoqv1.RemoveScheduleRequest]) (*connect.Response[cronoqv1.RemoveScheduleResponse], error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	_, ok := s.f.schedules[req.Msg.GetName()]
	delete(s.f.schedules, req.Msg.GetName())
	return connect.NewResponse(&cronoqv1.RemoveScheduleResponse{Name: req.Msg.GetName(), Removed: ok}), nil
}

func (s fakeSchedules) Pause(_ context.Context, req *connect.Request[cronoqv1.PauseScheduleRequest]) (*connect.Response[cronoqv1.PauseScheduleResponse], error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	sc, ok := s.f.schedules[req.Msg.GetName()]
	if !ok {
		return nil, apierr.NotFound("schedule not found")
	}
	sc.Paused = req.Msg.GetPaused()
	return connect.NewResponse(&cronoqv1.PauseScheduleResponse{Name: sc.Name, Paused: sc.Paused}), nil
}

type fakeOperator struct {
	cronoqv1connect.UnimplementedOperatorServiceHandler
	f *fakeNode
}

func (s fakeOperator) Members(context.Context, *connect.Request[cronoqv1.MembersRequest]) (*connect.Response[cronoqv1.MembersResponse], error) {
	return connect.NewResponse(&cronoqv1.MembersResponse{Members: []*cronoqv1.Member{
		{Name: "n1", Addr: "127.0.0.1:8652", Status: "alive", RaftAddr: "127.0.0.1:8651", HttpAddr: "127.0.0.1:8650", Version: "v1"},
		{Name: "n2", Addr: "127.0.0.2:8652", Status: "failed", RaftAddr: "127.0.0.2:8651", HttpAddr: "127.0.0.2:8650"},
	}}), nil
}

func (s fakeOperator) Peers(context.Context, *connect.Request[cronoqv1.PeersRequest]) (*connect.Response[cronoqv1.PeersResponse], error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return connect.NewResponse(&cronoqv1.PeersResponse{Peers: s.f.peers}), nil
}

func (s fakeOperator) RemovePeer(_ context.Context, req *connect.Request[cronoqv1.RemovePeerRequest]) (*connect.Response[cronoqv1.RemovePeerResponse], error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	for i, p := range s.f.peers {
		if p.Id == req.Msg.GetId() {
			s.f.peers = append(s.f.peers[:i], s.f.peers[i+1:]...)
			return connect.NewResponse(&cronoqv1.RemovePeerResponse{Removed: p.Id}), nil
		}
	}
	return nil, apierr.NotFound("no such peer")
}

func (s fakeOperator) TransferLeadership(_ context.Context, req *connect.Request[cronoqv1.TransferLeadershipRequest]) (*connect.Response[cronoqv1.TransferLeadershipResponse], error) {
	id := req.Msg.GetId()
	if id == "" {
		id = "n3"
	}
	return connect.NewResponse(&cronoqv1.TransferLeadershipResponse{Leader: id}), nil
}

func (s fakeOperator) Health(context.Context, *connect.Request[cronoqv1.HealthRequest]) (*connect.Response[cronoqv1.HealthResponse], error) {
	return connect.NewResponse(&cronoqv1.HealthResponse{Node: "n1", Leader: "n2", Epoch: 7, Status: "degraded",
		Reasons: []string{"retention sweep failing"}}), nil
}

type fakeWorkers struct {
	cronoqv1connect.UnimplementedWorkerServiceHandler
	f *fakeNode
}

// Connect plays the leader's side of a worker stream: a Welcome for the
// Hello, the pending grants for a poll, an ack for every heartbeat and
// completion.
func (s fakeWorkers) Connect(_ context.Context, stream *connect.BidiStream[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]) error {
	f := s.f
	for {
		msg, err := stream.Receive()
		if err != nil {
			return nil
		}
		var reply *cronoqv1.ServerMessage
		f.mu.Lock()
		switch m := msg.GetMsg().(type) {
		case *cronoqv1.WorkerMessage_Hello:
			f.hellos = append(f.hellos, m.Hello)
			reply = &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Welcome{Welcome: &cronoqv1.Welcome{
				Node: "n1", Epoch: 1, HeartbeatWindowMs: 10000}}}
		case *cronoqv1.WorkerMessage_Poll:
			n := min(int(m.Poll.GetSlots()), len(f.grants))
			if n > 0 {
				reply = &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_Grants{Grants: &cronoqv1.Grants{Grants: f.grants[:n]}}}
				f.grants = f.grants[n:]
			}
		case *cronoqv1.WorkerMessage_Heartbeat:
			ack := &cronoqv1.HeartbeatAck{}
			for _, l := range m.Heartbeat.GetLeases() {
				ack.Results = append(ack.Results, &cronoqv1.LeaseResult{Lease: l})
			}
			reply = &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_HeartbeatAck{HeartbeatAck: ack}}
		case *cronoqv1.WorkerMessage_Complete:
			ack := &cronoqv1.CompleteAck{}
			for _, c := range m.Complete.GetCompletions() {
				f.completions[c.GetLease()] = c
				ack.Results = append(ack.Results, &cronoqv1.LeaseResult{Lease: c.GetLease()})
			}
			reply = &cronoqv1.ServerMessage{Msg: &cronoqv1.ServerMessage_CompleteAck{CompleteAck: ack}}
		}
		f.mu.Unlock()
		if reply != nil {
			if err := stream.Send(reply); err != nil {
				return nil
			}
		}
	}
}

// startFake serves a fakeNode over h2c and returns it with its address.
func startFake(t *testing.T) (*fakeNode, string) {
	t.Helper()
	f := &fakeNode{
		tasks:       map[string]*cronoqv1.Task{},
		keys:        map[string]string{},
		schedules:   map[string]*cronoqv1.Schedule{},
		completions: map[uint64]*cronoqv1.Completion{},
		peers: []*cronoqv1.Peer{
			{Id: "n1", Address: "127.0.0.1:8651", Voter: true},
			{Id: "n2", Address: "127.0.0.2:8651", Voter: true, Leader: true},
		},
	}
	mux := http.NewServeMux()
	mux.Handle(cronoqv1connect.NewTaskServiceHandler(fakeTasks{f: f}))
	mux.Handle(cronoqv1connect.NewScheduleServiceHandler(fakeSchedules{f: f}))
	mux.Handle(cronoqv1connect.NewOperatorServiceHandler(fakeOperator{f: f}))
	mux.Handle(cronoqv1connect.NewWorkerServiceHandler(fakeWorkers{f: f}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return f, srv.Listener.Addr().String()
}

var (
	submittedAt = time.Date(2030, 1, 2, 14, 4, 5, 0, time.UTC)
	finishedAt  = submittedAt.Add(3 * time.Second)
)

func doneTask(id string, status cronoqv1.Status, output, errMsg string) *cronoqv1.Task {
	return &cronoqv1.Task{
		Id: id, Pool: "p", Kind: "echo", Key: "key-" + id, Status: status, Attempt: 1, MaxAttempts: 5,
		Payload: []byte("in"), Output: []byte(output), Error: errMsg,
		Labels:      []*cronoqv1.KV{{Key: "zone", Value: "eu"}},
		SubmittedAt: submittedAt.UnixNano(), RunAt: submittedAt.UnixNano(), FinishedAt: finishedAt.UnixNano(),
	}
}

func decodeObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m), "stdout: %s", s)
	return m
}

func requireOK(t *testing.T, r cliResult) {
	t.Helper()
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	require.Empty(t, r.stderr)
}

func TestSubmitSendsSpec(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	payloadFile := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(payloadFile, []byte(`{"n":1}`), 0o600))

	r := runCLI(t, "", "submit", "-pool", "p", "-kind", "k", "-o", "json", "-addr", addr,
		"-payload", "@"+payloadFile, "-label", "zone=eu", "-label", "gpu=", "-tag", "traceparent=00-1",
		"-priority", "high", "-run-at", "2030-01-02T15:04:05+01:00", "-deadline", "2030-01-03T00:00:00Z",
		"-timeout", "30s", "-max-attempts", "3", "-key", "K1")
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "duplicate": false}`, r.stdout)

	f.mu.Lock()
	spec := f.submits[0]
	f.mu.Unlock()
	require.Equal(t, "p", spec.GetPool())
	require.Equal(t, "k", spec.GetKind())
	require.Equal(t, "K1", spec.GetKey())
	require.Equal(t, cronoqv1.Priority_PRIORITY_HIGH, spec.GetPriority())
	require.Equal(t, `{"n":1}`, string(spec.GetPayload()))
	require.ElementsMatch(t, []*cronoqv1.KV{{Key: "zone", Value: "eu"}, {Key: "gpu", Value: ""}}, kvs(spec.GetLabels()))
	require.Equal(t, []*cronoqv1.KV{{Key: "traceparent", Value: "00-1"}}, kvs(spec.GetTags()))
	require.Equal(t, time.Date(2030, 1, 2, 14, 4, 5, 0, time.UTC).UnixMilli(), spec.GetRunAtMs())
	require.Zero(t, spec.GetDelayMs())
	require.Equal(t, time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC).UnixMilli(), spec.GetDeadlineMs())
	require.Equal(t, int64(30000), spec.GetTimeoutMs())
	require.Equal(t, uint32(3), spec.GetMaxAttempts())

	// Same key again: the existing task, reported as a duplicate.
	r = runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "k", "-key", "K1", "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "duplicate": true}`, r.stdout)

	// Text output: the id alone, from stdin payload and a delay.
	r = runCLI(t, "from stdin", "submit", "-addr", addr, "-pool", "p", "-kind", "k", "-payload", "@-", "-delay", "1m30s")
	requireOK(t, r)
	require.Equal(t, "T2\n", r.stdout)
	f.mu.Lock()
	spec = f.submits[2]
	f.mu.Unlock()
	require.Equal(t, "from stdin", string(spec.GetPayload()))
	require.Equal(t, int64(90000), spec.GetDelayMs())
	require.NotEmpty(t, spec.GetKey(), "the SDK makes every submit idempotent")
	require.Equal(t, cronoqv1.Priority_PRIORITY_NORMAL, spec.GetPriority())
}

// kvs copies KV messages into fresh values comparable with require.Equal.
func kvs(in []*cronoqv1.KV) []*cronoqv1.KV {
	out := make([]*cronoqv1.KV, 0, len(in))
	for _, kv := range in {
		out = append(out, &cronoqv1.KV{Key: kv.GetKey(), Value: kv.GetValue()})
	}
	return out
}

func TestSubmitRefusedByNode(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.mu.Lock()
	f.submitErr = apierr.Invalid("pool", `unknown pool "nope"`)
	f.mu.Unlock()
	r := runCLI(t, "", "submit", "-addr", addr, "-pool", "nope", "-kind", "k")
	requireFailure(t, r, exitUsage, `invalid pool: unknown pool "nope"`)

	f.mu.Lock()
	f.submitErr = apierr.Overloaded("pool p is full")
	f.mu.Unlock()
	r = runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "k")
	requireFailure(t, r, exitError, "pool p is full")
}

func TestSubmitWait(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.put(doneTask("T1", cronoqv1.Status_STATUS_SUCCEEDED, "result", ""))
	f.put(doneTask("T2", cronoqv1.Status_STATUS_FAILED, "", "exit status 1: boom\nmore"))

	// The key names an existing, finished task: submit is a duplicate and
	// -wait shows that task.
	r := runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "echo", "-key", "key-T1", "-wait", "-o", "json")
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, "T1", m["id"])
	require.Equal(t, "succeeded", m["status"])
	require.Equal(t, "result", m["output"])

	r = runCLI(t, "", "submit", "-addr", addr, "-pool", "p", "-kind", "echo", "-key", "key-T2", "-wait", "-o", "json")
	require.Equal(t, exitTaskFailed, r.code)
	m = decodeObject(t, r.stdout)
	require.Equal(t, "failed", m["status"])
	require.Equal(t, "cronoq: task T2 failed: exit status 1: boom | more\n", r.stderr)
}

func TestStatus(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.put(doneTask("T1", cronoqv1.Status_STATUS_SUCCEEDED, "result\n", ""))

	for _, args := range [][]string{
		{"status", "T1", "-o", "json", "-addr", addr},
		{"status", "-o", "json", "T1", "-addr", addr},
		{"status", "-addr", addr, "-o", "json", "-key", "key-T1"},
	} {
		r := runCLI(t, "", args...)
		requireOK(t, r)
		require.JSONEq(t, `{
			"id": "T1", "pool": "p", "kind": "echo", "key": "key-T1", "status": "succeeded",
			"attempt": 1, "max_attempts": 5, "priority": "normal",
			"labels": {"zone": "eu"}, "tags": {}, "payload": "in", "output": "result\n", "error": "",
			"submitted_at": "2030-01-02T14:04:05Z", "run_at": "2030-01-02T14:04:05Z", "started_at": null,
			"finished_at": "2030-01-02T14:04:08Z", "updated_at": null, "deadline": null, "timeout_ms": 0,
			"lease": 0, "schedule": "", "slot": null
		}`, r.stdout, "args %v", args)
	}

	r := runCLI(t, "", "status", "T1", "-addr", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "id:           T1\nstatus:       succeeded\n")
	require.Contains(t, r.stdout, "output:       result\n")

	r = runCLI(t, "", "status", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
	r = runCLI(t, "", "status", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no task with key "nokey"`)
}

func TestWait(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.put(doneTask("T1", cronoqv1.Status_STATUS_SUCCEEDED, "ok", ""))
	f.put(doneTask("T2", cronoqv1.Status_STATUS_CANCELLED, "", ""))
	f.put(doneTask("T3", cronoqv1.Status_STATUS_EXPIRED, "", "deadline passed"))
	f.put(&cronoqv1.Task{Id: "T4", Pool: "p", Kind: "k", Status: cronoqv1.Status_STATUS_RUNNING})

	r := runCLI(t, "", "wait", "T1", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.Equal(t, "succeeded", decodeObject(t, r.stdout)["status"])

	r = runCLI(t, "", "wait", "-addr", addr, "T2", "-o", "json")
	require.Equal(t, exitTaskFailed, r.code)
	require.Equal(t, "cancelled", decodeObject(t, r.stdout)["status"])
	require.Equal(t, "cronoq: task T2 cancelled\n", r.stderr)

	r = runCLI(t, "", "wait", "-key", "key-T3", "-addr", addr)
	require.Equal(t, exitTaskFailed, r.code)
	require.Contains(t, r.stdout, "status:       expired\n")
	require.Equal(t, "cronoq: task T3 expired: deadline passed\n", r.stderr)

	r = runCLI(t, "", "wait", "T4", "-timeout", "300ms", "-addr", addr)
	requireFailure(t, r, exitError, "task T4 did not end within -timeout 300ms")

	r = runCLI(t, "", "wait", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.put(&cronoqv1.Task{Id: "T1", Pool: "p", Kind: "k", Status: cronoqv1.Status_STATUS_QUEUED})

	r := runCLI(t, "", "cancel", "T1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "cancelled": true}`, r.stdout)
	require.Equal(t, cronoqv1.Status_STATUS_CANCELLED, f.task("T1").GetStatus())

	r = runCLI(t, "", "cancel", "-o", "json", "-addr", addr, "T1")
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "cancelled": false}`, r.stdout)

	r = runCLI(t, "", "cancel", "T1", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "task T1 had already ended; nothing cancelled\n", r.stdout)

	r = runCLI(t, "", "cancel", "NOPE", "-addr", addr)
	requireFailure(t, r, exitError, "task NOPE not found")
}

func TestList(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.put(doneTask("T1", cronoqv1.Status_STATUS_SUCCEEDED, "ok", ""))
	f.put(doneTask("T2", cronoqv1.Status_STATUS_FAILED, "", "exit status 2: it broke"))

	r := runCLI(t, "", "list", "-pool", "a", "-pool", "b,c", "-status", "queued,failed", "-status", "running",
		"-limit", "2", "-after", "T0", "-o", "json", "-addr", addr)
	requireOK(t, r)
	var out struct {
		Tasks []map[string]any `json:"tasks"`
		Next  string           `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Tasks, 2)
	require.Equal(t, "T1", out.Tasks[0]["id"])
	require.Equal(t, "failed", out.Tasks[1]["status"])
	require.Equal(t, "T2", out.Next)
	f.mu.Lock()
	req := f.lists[0]
	f.mu.Unlock()
	require.Equal(t, []string{"a", "b", "c"}, req.GetPools())
	require.Equal(t, []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_FAILED, cronoqv1.Status_STATUS_RUNNING}, req.GetStatuses())
	require.Equal(t, int32(2), req.GetLimit())
	require.Equal(t, "T0", req.GetAfter())
	require.False(t, req.GetStale())

	r = runCLI(t, "", "list", "-addr", addr, "-stale")
	requireOK(t, r)
	require.Equal(t, ""+
		"ID  POOL  KIND  STATUS     ATTEMPT  PRIORITY  SUBMITTED             ERROR\n"+
		"T1  p     echo  succeeded  1        normal    2030-01-02T14:04:05Z  -\n"+
		"T2  p     echo  failed     1        normal    2030-01-02T14:04:05Z  exit status 2: it broke\n"+
		"more: cronoq list -after T2\n", r.stdout)
	f.mu.Lock()
	req = f.lists[1]
	f.mu.Unlock()
	require.Equal(t, int32(defaultListLimit), req.GetLimit())
	require.True(t, req.GetStale())
}

func TestRecurring(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)

	r := runCLI(t, "", "recurring", "add", "nightly", "-cron", "0 3 * * *", "-tz", "Europe/Paris", "-pool", "ops",
		"-kind", "backup", "-payload", "full", "-overlap", "allow", "-catch-up", "all", "-catch-up-limit", "3",
		"-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "next_fire": "2030-01-03T02:00:00Z"}`, r.stdout)
	f.mu.Lock()
	sc := f.schedules["nightly"]
	f.mu.Unlock()
	require.Equal(t, "0 3 * * *", sc.GetCron())
	require.Equal(t, "Europe/Paris", sc.GetTz())
	require.Equal(t, "ops", sc.GetTask().GetPool())
	require.Equal(t, "backup", sc.GetTask().GetKind())
	require.Equal(t, "full", string(sc.GetTask().GetPayload()))
	require.Equal(t, cronoqv1.Overlap_OVERLAP_ALLOW, sc.GetOverlap())
	require.Equal(t, cronoqv1.CatchUp_CATCH_UP_ALL, sc.GetCatchUp())
	require.Equal(t, uint32(3), sc.GetCatchUpLimit())

	r = runCLI(t, "", "recurring", "add", "-addr", addr, "a", "-cron", "@every 30s", "-pool", "p", "-kind", "tick")
	requireOK(t, r)
	require.Equal(t, "schedule a saved; next fire at 2030-01-03T02:00:00Z\n", r.stdout)

	r = runCLI(t, "", "recurring", "list", "-addr", addr, "-o", "json")
	requireOK(t, r)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 2)
	require.Equal(t, map[string]any{
		"name": "a", "cron": "@every 30s", "tz": "UTC", "pool": "p", "kind": "tick",
		"next_fire": "2030-01-03T02:00:00Z", "last_fire": nil, "paused": false, "overlap": "skip",
		"catch_up": "once", "catch_up_limit": float64(0), "fires": float64(0), "skipped": float64(0), "last_task": "",
	}, list[0])
	require.Equal(t, "nightly", list[1]["name"])

	r = runCLI(t, "", "recurring", "pause", "nightly", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "paused": true}`, r.stdout)
	r = runCLI(t, "", "recurring", "list", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"NAME     CRON        TZ            POOL  KIND    NEXT FIRE             LAST FIRE  FIRES  PAUSED\n"+
		"a        @every 30s  UTC           p     tick    2030-01-03T02:00:00Z  -          0      no\n"+
		"nightly  0 3 * * *   Europe/Paris  ops   backup  2030-01-03T02:00:00Z  -          0      yes\n", r.stdout)
	r = runCLI(t, "", "recurring", "resume", "-o", "json", "nightly", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "paused": false}`, r.stdout)
	r = runCLI(t, "", "recurring", "resume", "nope", "-addr", addr)
	requireFailure(t, r, exitError, "no schedule nope")

	r = runCLI(t, "", "recurring", "rm", "nightly", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "removed": true}`, r.stdout)
	r = runCLI(t, "", "recurring", "rm", "nightly", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "removed": false}`, r.stdout)
}

func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	_, addr := startFake(t)

	r := runCLI(t, "", "members", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `[
		{"name": "n1", "addr": "127.0.0.1:8652", "status": "alive", "raft_addr": "127.0.0.1:8651", "http_addr": "127.0.0.1:8650", "version": "v1"},
		{"name": "n2", "addr": "127.0.0.2:8652", "status": "failed", "raft_addr": "127.0.0.2:8651", "http_addr": "127.0.0.2:8650", "version": ""}
	]`, r.stdout)
	r = runCLI(t, "", "members", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"NAME  ADDR            STATUS  RAFT ADDR       HTTP ADDR       VERSION\n"+
		"n1    127.0.0.1:8652  alive   127.0.0.1:8651  127.0.0.1:8650  v1\n"+
		"n2    127.0.0.2:8652  failed  127.0.0.2:8651  127.0.0.2:8650  -\n", r.stdout)

	r = runCLI(t, "", "operator", "raft", "list-peers", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `[
		{"id": "n1", "address": "127.0.0.1:8651", "voter": true, "leader": false},
		{"id": "n2", "address": "127.0.0.2:8651", "voter": true, "leader": true}
	]`, r.stdout)
	r = runCLI(t, "", "operator", "raft", "list-peers", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"ID  ADDRESS         VOTER  LEADER\n"+
		"n1  127.0.0.1:8651  true   false\n"+
		"n2  127.0.0.2:8651  true   true\n", r.stdout)

	r = runCLI(t, "", "operator", "raft", "remove-peer", "-id", "n1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"removed": "n1"}`, r.stdout)
	r = runCLI(t, "", "operator", "raft", "remove-peer", "n1", "-addr", addr)
	requireFailure(t, r, exitError, "no server n1 in the Raft configuration")

	r = runCLI(t, "", "operator", "raft", "transfer-leadership", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"leader": "n3"}`, r.stdout)
	r = runCLI(t, "", "operator", "raft", "transfer-leadership", "-id", "n1", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "leader is now n1\n", r.stdout)

	r = runCLI(t, "", "health", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"node": "n1", "leader": "n2", "epoch": 7, "status": "degraded", "reasons": ["retention sweep failing"]}`, r.stdout)
	r = runCLI(t, "", "health", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "node:   n1\nleader: n2\nepoch:  7\nstatus: degraded\nreason: retention sweep failing\n", r.stdout)
}

func TestUnreachableCluster(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "status", "T1", "-addr", closedAddr, "-rpc-timeout", "200ms")
	requireFailure(t, r, exitError, "no answer within -rpc-timeout 200ms", "connection refused")
	r = runCLI(t, "", "health", "-addr", closedAddr+",127.0.0.1:2")
	requireFailure(t, r, exitError, "checking health", "127.0.0.1:1", "127.0.0.1:2")
	require.False(t, strings.Contains(r.stderr, "\n\n"))
}
