package transport_test

// Fuzzing the API through a real node: every input goes, as it is, to every
// procedure of the API (as a Connect unary body in both codecs, and as
// messages of the streams), and each answer must be a success the client
// can decode or a well-formed Connect error with a code that says the
// request was refused (never internal or unknown), the node must keep
// serving, and a refused request must leave the replicated state as it was.
//
// The node runs on a stopped clock: nothing the engine schedules ever comes
// due, so every change of the state comes from the request that made it.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// fuzzEpoch is the stopped clock of the fuzzed node's engine.
var fuzzEpoch = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

const (
	fuzzPool   = "fuzz"
	fuzzWorker = "fuzz-worker"
	// fuzzMaxPending bounds the tasks the fuzzer can leave pending.
	fuzzMaxPending = 2000
	// minFuzzDelay: a request with a positive duration below it is not
	// sent. On a stopped clock a timer due a hair after now would wake the
	// engine in a loop (it never comes due), burning a core for nothing.
	minFuzzDelay = 100 * time.Millisecond
	// Server-side deadlines of the calls: long polls are cut short (and
	// may answer deadline_exceeded); nothing else may take that long.
	waitCallTimeout   = 250 * time.Millisecond
	callTimeout       = 10 * time.Second
	eventsCallTimeout = 50 * time.Millisecond
	// maxFuzzFrame bounds a frame of a stream answer the harness reads.
	maxFuzzFrame = 64 << 20
)

// Codecs of the Connect protocol, by the suffix of their content types.
var fuzzCodecs = []string{"proto", "json"}

// fuzzProc is one procedure of the API.
type fuzzProc struct {
	path    string // "/cronoq.v1.TaskService/Submit"
	in, out protoreflect.MessageType
	// wait: a long poll, cut short by the call's deadline.
	wait bool
}

// apiProcedures lists every procedure of the API's services, unary and
// streaming, from the schema.
func apiProcedures(tb testing.TB) (unary, streams []fuzzProc) {
	tb.Helper()
	svcs := cronoqv1.File_cronoq_v1_cronoq_proto.Services()
	for i := range svcs.Len() {
		sd := svcs.Get(i)
		ms := sd.Methods()
		for j := range ms.Len() {
			md := ms.Get(j)
			in, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
			if err != nil {
				tb.Fatalf("input type of %s: %v", md.FullName(), err)
			}
			out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
			if err != nil {
				tb.Fatalf("output type of %s: %v", md.FullName(), err)
			}
			p := fuzzProc{
				path: "/" + string(sd.FullName()) + "/" + string(md.Name()),
				in:   in, out: out,
				wait: md.Name() == "Wait",
			}
			if md.IsStreamingClient() || md.IsStreamingServer() {
				streams = append(streams, p)
			} else {
				unary = append(unary, p)
			}
		}
	}
	if len(unary) == 0 || len(streams) == 0 {
		tb.Fatalf("the schema lists %d unary and %d streaming procedures", len(unary), len(streams))
	}
	return unary, streams
}

// fuzzEnv is a single-node cluster serving the API, and clients for it.
type fuzzEnv struct {
	node   *testcluster.Node
	base   string
	h1, h2 *http.Client // HTTP/1.1 and h2c (bidirectional streams)
	unary  []fuzzProc
	stream map[string]fuzzProc

	// The state hash at an applied index (cached: hashing is O(state)).
	hashIndex uint64
	hash      [32]byte
}

// newFuzzEnv starts the node. Its id is random: no input can name it to
// remove it or hand its leadership away.
func newFuzzEnv(f *testing.F) *fuzzEnv {
	f.Helper()
	c := testcluster.New(f, 0, testcluster.Hold(time.Second))
	var id [6]byte
	_, _ = rand.Read(id[:])
	cfg := c.Config("fuzz-" + hex.EncodeToString(id[:]))
	cfg.BootstrapExpect = 1
	// Background loops at their production pace: what they run is noise
	// in the coverage that guides the fuzzer.
	cfg.ReconcileInterval = time.Minute
	cfg.MetaRefreshInterval = 10 * time.Second
	cfg.GossipProbeInterval, cfg.GossipProbeTimeout = 10*time.Second, time.Second
	cfg.GossipInterval, cfg.GossipPushPullInterval = 10*time.Second, time.Minute
	cfg.Engine.Now = func() time.Time { return fuzzEpoch }
	cfg.Engine.Core = core.Config{
		HeartbeatWindow: testWindow,
		MaxPayload:      testMaxPayload,
		MaxOutput:       testMaxOutput,
		Global:          core.Bounds{MaxPending: fuzzMaxPending},
		Pools:           map[string]core.PoolConfig{tinyPool: {Bounds: core.Bounds{MaxPending: 1}}},
	}
	n := c.Start(cfg)
	c.Leader()

	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	t1 := &http.Transport{MaxIdleConnsPerHost: 4}
	t2 := &http.Transport{Protocols: &h2}
	f.Cleanup(func() {
		t1.CloseIdleConnections()
		t2.CloseIdleConnections()
	})
	e := &fuzzEnv{
		node:   n,
		base:   "http://" + n.Addr(),
		h1:     &http.Client{Transport: t1},
		h2:     &http.Client{Transport: t2},
		stream: map[string]fuzzProc{},
	}
	var streams []fuzzProc
	e.unary, streams = apiProcedures(f)
	for _, p := range streams {
		e.stream[p.path] = p
	}
	for _, p := range []string{"/cronoq.v1.TaskService/Events", "/cronoq.v1.WorkerService/Connect"} {
		if _, ok := e.stream[p]; !ok {
			f.Fatalf("%s is not among the streams of the schema", p)
		}
	}
	return e
}

// appliedIndex is the index of the last entry applied to the node's state.
func (e *fuzzEnv) appliedIndex() uint64 {
	r, _ := e.node.Node.StaleRead()
	return r.AppliedIndex()
}

// stateHash returns the hash of the state at the current applied index.
func (e *fuzzEnv) stateHash(t testing.TB) [32]byte {
	t.Helper()
	if idx := e.appliedIndex(); idx != e.hashIndex || idx == 0 {
		i, h, err := e.node.Node.Hash()
		if err != nil {
			t.Fatalf("hashing the state: %v", err)
		}
		e.hashIndex, e.hash = i, h
	}
	return e.hash
}

// checkServing fails t unless the node still leads and answers its health
// check.
func (e *fuzzEnv) checkServing(t *testing.T) {
	t.Helper()
	if _, err := e.node.Node.Leading(); err != nil {
		t.Fatalf("the node no longer leads: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/v1/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.h1.Do(req)
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health check answered %d: %s", resp.StatusCode, body)
	}
}

// ---------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------

// refusalCodes are the codes that may answer a request the API refuses:
// its fault (invalid, not found, conflicts, bounds), never the server's.
var refusalCodes = map[connect.Code]bool{
	connect.CodeInvalidArgument:    true,
	connect.CodeNotFound:           true,
	connect.CodeAlreadyExists:      true,
	connect.CodeFailedPrecondition: true,
	connect.CodeResourceExhausted:  true,
	connect.CodeOutOfRange:         true,
}

// httpStatusOf is the HTTP status of a Connect unary error (the protocol's
// table).
func httpStatusOf(c connect.Code) int {
	switch c {
	case connect.CodeCanceled:
		return 499
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		return 400
	case connect.CodeDeadlineExceeded:
		return 504
	case connect.CodeNotFound:
		return 404
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return 409
	case connect.CodePermissionDenied:
		return 403
	case connect.CodeResourceExhausted:
		return 429
	case connect.CodeUnimplemented:
		return 501
	case connect.CodeUnavailable:
		return 503
	case connect.CodeUnauthenticated:
		return 401
	default:
		return 500
	}
}

// wireError is a Connect error as JSON (a unary answer's body, or the
// error of a stream's end).
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// check returns the error's code, or why it is not a well-formed refusal
// (a refusal code, or one of also).
func (w *wireError) check(also ...connect.Code) (connect.Code, error) {
	var code connect.Code
	if err := code.UnmarshalText([]byte(w.Code)); err != nil {
		return 0, fmt.Errorf("error code %q: %w", w.Code, err)
	}
	if w.Message == "" {
		return code, fmt.Errorf("error %s without a message", code)
	}
	if !refusalCodes[code] && !slices.Contains(also, code) {
		return code, fmt.Errorf("answered %s: %s", code, w.Message)
	}
	return code, nil
}

func unmarshal(codec string, data []byte, m proto.Message) error {
	if codec == "json" {
		return protojson.Unmarshal(data, m)
	}
	return proto.Unmarshal(data, m)
}

func marshal(tb testing.TB, codec string, m proto.Message) []byte {
	tb.Helper()
	var (
		b   []byte
		err error
	)
	if codec == "json" {
		b, err = protojson.Marshal(m)
	} else {
		b, err = proto.Marshal(m)
	}
	if err != nil {
		tb.Fatalf("encoding %T: %v", m, err)
	}
	return b
}

// ---------------------------------------------------------------------------
// Unary calls
// ---------------------------------------------------------------------------

// unaryCall posts body to p as a Connect unary request in codec (with the
// content encoding given, if any), and checks the answer. It returns the
// error code (0 on success).
func (e *fuzzEnv) unaryCall(t *testing.T, p fuzzProc, codec, encoding string, body []byte) connect.Code {
	t.Helper()
	timeout := callTimeout
	if p.wait {
		timeout = waitCallTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+p.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/"+codec)
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := e.h1.Do(req)
	if err != nil {
		t.Fatalf("%s (%s): %v", p.path, codec, err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s (%s): reading the answer: %v", p.path, codec, err)
	}
	if resp.StatusCode == http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != "application/"+codec {
			t.Fatalf("%s (%s): answered content type %q", p.path, codec, ct)
		}
		if err := unmarshal(codec, data, p.out.New().Interface()); err != nil {
			t.Fatalf("%s (%s): the answer does not decode: %v", p.path, codec, err)
		}
		return 0
	}
	var we wireError
	if err := json.Unmarshal(data, &we); err != nil {
		t.Fatalf("%s (%s): answered %d with a body that is not a Connect error: %q", p.path, codec, resp.StatusCode, data)
	}
	var also []connect.Code
	if p.wait {
		also = append(also, connect.CodeDeadlineExceeded)
	}
	code, err := we.check(also...)
	if err != nil {
		t.Fatalf("%s (%s): %v\nrequest body: %q", p.path, codec, err, body)
	}
	if want := httpStatusOf(code); resp.StatusCode != want {
		t.Fatalf("%s (%s): %s answered with HTTP %d, not %d", p.path, codec, code, resp.StatusCode, want)
	}
	return code
}

// tinyDuration reports whether m holds a positive duration below
// minFuzzDelay anywhere.
func tinyDuration(m protoreflect.Message) bool {
	if m.Descriptor().FullName() == "google.protobuf.Duration" {
		fs := m.Descriptor().Fields()
		secs := m.Get(fs.ByName("seconds")).Int()
		nanos := m.Get(fs.ByName("nanos")).Int()
		return secs == 0 && nanos > 0 && nanos < int64(minFuzzDelay)
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				found = found || tinyDuration(v.List().Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					found = tinyDuration(mv.Message())
					return !found
				})
			}
		case fd.Message() != nil:
			found = tinyDuration(v.Message())
		}
		return !found
	})
	return found
}

// schedulesTimer reports whether body, decoded for p as the server would,
// holds a duration that would set a timer on the stopped clock.
func schedulesTimer(p fuzzProc, codec string, body []byte) bool {
	m := p.in.New()
	var err error
	if codec == "json" {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, m.Interface())
	} else {
		err = proto.Unmarshal(body, m.Interface())
	}
	return err == nil && tinyDuration(m)
}

// fuzzUnary sends data to every unary procedure in both codecs.
func (e *fuzzEnv) fuzzUnary(t *testing.T, data []byte) {
	for _, codec := range fuzzCodecs {
		for _, p := range e.unary {
			if schedulesTimer(p, codec, data) {
				continue
			}
			before := e.stateHash(t)
			idx := e.appliedIndex()
			code := e.unaryCall(t, p, codec, "", data)
			if code == 0 {
				continue
			}
			if e.appliedIndex() != idx && e.stateHash(t) != before {
				t.Fatalf("%s (%s) answered %s but changed the state\nrequest body: %q", p.path, codec, code, data)
			}
		}
	}
	// The input as a compressed body: decompression comes before any
	// procedure's own code, so one procedure covers it.
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		if code := e.unaryCall(t, e.unary[0], "proto", "gzip", data); code == 0 {
			t.Fatalf("%s accepted a body that is not gzip as gzip", e.unary[0].path)
		}
	}
	e.checkServing(t)
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

// envelope frames msg as a Connect stream message.
func envelope(msg []byte) []byte { return envelopeFlags(0, msg) }

// envelopeFlags frames msg with the given flags (1: compressed).
func envelopeFlags(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// streamCall posts body (framed messages, or not) to p as a Connect
// stream in codec, reads the answer to its end and checks it: messages
// that decode, then an end of stream that is a success or a refusal. It
// returns the end's error code (0 on success). The codes of also are
// accepted as well. A non-empty encoding is announced as the stream's
// message encoding.
func (e *fuzzEnv) streamCall(t *testing.T, p fuzzProc, codec, encoding string, body []byte, timeout time.Duration, also ...connect.Code) connect.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+p.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+"+codec)
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	if encoding != "" {
		req.Header.Set("Connect-Content-Encoding", encoding)
	}
	resp, err := e.h2.Do(req)
	if err != nil {
		t.Fatalf("%s (%s): %v", p.path, codec, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s (%s): stream answered HTTP %d: %q", p.path, codec, resp.StatusCode, data)
	}
	var head [5]byte
	for {
		if _, err := io.ReadFull(resp.Body, head[:]); err != nil {
			t.Fatalf("%s (%s): the stream ended without its end message: %v", p.path, codec, err)
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n > maxFuzzFrame {
			t.Fatalf("%s (%s): frame of %d bytes", p.path, codec, n)
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			t.Fatalf("%s (%s): reading a frame: %v", p.path, codec, err)
		}
		switch flags := head[0]; flags {
		case 0:
			if err := unmarshal(codec, msg, p.out.New().Interface()); err != nil {
				t.Fatalf("%s (%s): a message does not decode: %v", p.path, codec, err)
			}
		case 2:
			var end struct {
				Error *wireError `json:"error"`
			}
			if err := json.Unmarshal(msg, &end); err != nil {
				t.Fatalf("%s (%s): end of stream is not JSON: %q", p.path, codec, msg)
			}
			if rest, _ := io.ReadAll(resp.Body); len(rest) > 0 {
				t.Fatalf("%s (%s): %d bytes after the end of stream", p.path, codec, len(rest))
			}
			if end.Error == nil {
				return 0
			}
			code, err := end.Error.check(also...)
			if err != nil {
				t.Fatalf("%s (%s): %v\nrequest body: %q", p.path, codec, err, body)
			}
			return code
		default:
			t.Fatalf("%s (%s): frame flags %#x", p.path, codec, flags)
		}
	}
}

// fuzzStreams sends data as the request of the event stream and as
// messages of a worker stream (first, and after a Hello), framed in both
// codecs, and unframed as the body of both.
func (e *fuzzEnv) fuzzStreams(t *testing.T, data []byte) {
	events := e.stream["/cronoq.v1.TaskService/Events"]
	worker := e.stream["/cronoq.v1.WorkerService/Connect"]
	hello := &cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: fuzzWorker, Pool: fuzzPool}}}
	// A valid request opens the event stream until the deadline. A body
	// that is not exactly one message answers unimplemented: the gRPC
	// convention for a cardinality violation, which connect follows.
	eventsCodes := []connect.Code{connect.CodeDeadlineExceeded, connect.CodeUnimplemented}
	for _, codec := range fuzzCodecs {
		e.streamCall(t, events, codec, "", envelope(data), eventsCallTimeout, eventsCodes...)
		e.streamCall(t, worker, codec, "", envelope(data), callTimeout)
		e.streamCall(t, worker, codec, "", append(envelope(marshal(t, codec, hello)), envelope(data)...), callTimeout)
	}
	e.streamCall(t, events, "proto", "", data, eventsCallTimeout, eventsCodes...)
	e.streamCall(t, worker, "proto", "", data, callTimeout)
	// The input as a compressed message.
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		hello := envelope(marshal(t, "proto", hello))
		if e.streamCall(t, worker, "proto", "gzip", append(hello, envelopeFlags(1, data)...), callTimeout) == 0 {
			t.Fatalf("the worker stream accepted a message that is not gzip as gzip")
		}
	}
	e.checkServing(t)
}

// ---------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// fuzzTemplate is a task template with every field set.
func fuzzTemplate() *cronoqv1.TaskTemplate {
	return &cronoqv1.TaskTemplate{
		Pool: fuzzPool, Kind: "email", Priority: cronoqv1.Priority_PRIORITY_HIGH,
		Payload:        []byte(`{"to":"a@example.com"}`),
		Labels:         []*cronoqv1.KV{{Key: "region", Value: "eu"}},
		Tags:           []*cronoqv1.KV{{Key: "tenant", Value: "t1"}},
		Timeout:        dur(30 * time.Second),
		MaxAttempts:    3,
		Backoff:        &cronoqv1.Backoff{Initial: dur(time.Second), Max: dur(time.Minute), Jitter: 0.2},
		OrderingKey:    "order-1",
		ConcurrencyKey: "conc-1",
	}
}

// fuzzSeeds are valid requests of every procedure (and worker messages).
func fuzzSeeds() []proto.Message {
	spec := &cronoqv1.TaskSpec{
		Template: fuzzTemplate(), Key: "k1", Delay: dur(time.Hour),
		Deadline: timestamppb.New(fuzzEpoch.Add(48 * time.Hour)),
	}
	dependent := &cronoqv1.TaskSpec{
		Template:         &cronoqv1.TaskTemplate{Pool: fuzzPool, Kind: "report"},
		Key:              "k2",
		RunAt:            timestamppb.New(fuzzEpoch.Add(2 * time.Hour)),
		DependsOn:        []*cronoqv1.TaskRef{{Key: "k1"}},
		DependencyPolicy: cronoqv1.DependencyPolicy_DEPENDENCY_POLICY_DONE,
	}
	external := &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: fuzzPool, Kind: "approval"}, Key: "ext", External: true}
	ref := &cronoqv1.TaskRef{Key: "k1"}
	steps := []*cronoqv1.WorkflowStep{
		{Name: "fetch", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: fuzzPool, Kind: "fetch"}}},
		{Name: "parse", Spec: &cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: fuzzPool, Kind: "parse"}}, DependsOn: []string{"fetch"}},
	}
	wref := &cronoqv1.WorkflowRef{Key: "wf1"}
	return []proto.Message{
		&cronoqv1.SubmitRequest{Spec: spec},
		&cronoqv1.SubmitRequest{Spec: external},
		&cronoqv1.SubmitBatchRequest{Specs: []*cronoqv1.TaskSpec{spec, dependent}},
		&cronoqv1.EnqueueManyRequest{Specs: []*cronoqv1.TaskSpec{spec, {Template: &cronoqv1.TaskTemplate{Pool: tinyPool, Kind: "x"}}}},
		&cronoqv1.GetRequest{Ref: ref, Stale: true},
		&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "0000000000000000-1-1"}},
		&cronoqv1.WaitRequest{Ref: ref, Timeout: dur(200 * time.Millisecond)},
		&cronoqv1.CancelRequest{Ref: &cronoqv1.TaskRef{Key: "k2"}},
		&cronoqv1.CompleteRequest{Ref: &cronoqv1.TaskRef{Key: "ext"}, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte("ok")},
		&cronoqv1.CompleteRequest{Ref: &cronoqv1.TaskRef{Key: "ext"}, Outcome: cronoqv1.OutcomeKind_OUTCOME_PERMANENT, Message: "no"},
		&cronoqv1.ListRequest{Pools: []string{fuzzPool}, Statuses: []cronoqv1.Status{cronoqv1.Status_STATUS_QUEUED, cronoqv1.Status_STATUS_SCHEDULED}, Limit: 10, Kinds: []string{"email"}, NewestFirst: true},
		&cronoqv1.ListRequest{After: "0000000000000000-1-1", Stale: true},
		&cronoqv1.CountsRequest{Stale: true},
		&cronoqv1.EventsRequest{Pools: []string{fuzzPool}},
		&cronoqv1.DeleteRequest{Ref: &cronoqv1.TaskRef{Key: "k2"}},
		&cronoqv1.ListPoolsRequest{},
		&cronoqv1.GetPoolRequest{Pool: fuzzPool},
		&cronoqv1.SetPoolRequest{
			Pool: fuzzPool, MaxRunning: proto.Int64(10), MaxPending: proto.Int64(500),
			MaxPendingPerClass: map[string]int64{"high": 100},
			Overflow:           proto.String("park"), Rate: proto.Float64(5), Burst: proto.Int64(10),
			KindRates:        []*cronoqv1.KindRate{{Kind: "email", Rate: 1, Burst: 2}},
			ConcurrencyLimit: proto.Int64(2), Ordering: proto.String("block"), MaxAttempts: proto.Uint32(4),
			Backoff: &cronoqv1.Backoff{Initial: dur(2 * time.Second)}, LeaseGrace: dur(5 * time.Second),
			Paused: proto.Bool(true),
		},
		&cronoqv1.ListWorkersRequest{Pool: fuzzPool},
		&cronoqv1.SetKindRequest{
			Pool: fuzzPool, Kind: "email", PayloadSchema: []byte(`{"type":"object","required":["to"]}`),
			OutputSchema: []byte(`{"type":"string"}`), Timeout: dur(time.Minute), MaxAttempts: proto.Uint32(2),
			Backoff: &cronoqv1.Backoff{Initial: dur(time.Second), Max: dur(10 * time.Second)},
		},
		&cronoqv1.GetKindRequest{Pool: fuzzPool, Kind: "email"},
		&cronoqv1.SubmitWorkflowRequest{Spec: &cronoqv1.WorkflowSpec{Name: "etl", Key: "wf1", Steps: steps}},
		&cronoqv1.GetWorkflowRequest{Ref: wref, TasksLimit: 1, TasksAfter: "0000000000000000-1-1"},
		&cronoqv1.WaitWorkflowRequest{Ref: wref, Timeout: dur(200 * time.Millisecond)},
		&cronoqv1.CancelWorkflowRequest{Ref: wref},
		&cronoqv1.ListWorkflowsRequest{Statuses: []cronoqv1.WorkflowStatus{cronoqv1.WorkflowStatus_WORKFLOW_STATUS_RUNNING}, Limit: 5, Stale: true},
		&cronoqv1.AddScheduleRequest{Schedule: &cronoqv1.Schedule{
			Name: "nightly", Cron: "0 3 * * *", Tz: "Europe/Paris", Task: fuzzTemplate(),
			Overlap: cronoqv1.Overlap_OVERLAP_ALLOW, CatchUp: cronoqv1.CatchUp_CATCH_UP_ALL, CatchUpLimit: 3,
		}},
		&cronoqv1.AddScheduleRequest{Schedule: &cronoqv1.Schedule{
			Name: "hourly-etl", Cron: "@hourly", Workflow: "etl", Steps: steps, Paused: true,
		}},
		&cronoqv1.ListSchedulesRequest{Stale: true},
		&cronoqv1.PauseScheduleRequest{Name: "nightly", Paused: true},
		&cronoqv1.RemoveScheduleRequest{Name: "nightly"},
		&cronoqv1.MembersRequest{},
		&cronoqv1.PeersRequest{},
		&cronoqv1.RemovePeerRequest{Id: "nobody"},
		&cronoqv1.TransferLeadershipRequest{Id: "nobody"},
		&cronoqv1.HealthRequest{},
		&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{
			Worker: "w1", Pool: fuzzPool, Labels: []*cronoqv1.KV{{Key: "region", Value: "eu"}},
		}}},
		&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 4}}},
		&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: []uint64{1, 2}}}},
		&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{Completions: []*cronoqv1.Completion{
			{Lease: 7, Outcome: cronoqv1.OutcomeKind_OUTCOME_RETRYABLE, Message: "later", RetryAfter: dur(time.Minute)},
			{Lease: 8, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte("done"), Children: steps[:1], Then: steps[1]},
		}}}},
	}
}

// addSeeds adds every seed request in both codecs, and a few bodies that
// are neither.
func addSeeds(f *testing.F) {
	for _, m := range fuzzSeeds() {
		for _, codec := range fuzzCodecs {
			f.Add(marshal(f, codec, m))
		}
	}
	for _, s := range []string{"", "{}", "null", "[]", `{"spec":null}`, `{"spec":{"template":{"pool":7}}}`, "\x0a\xff\xff\xff\xff\x0f"} {
		f.Add([]byte(s))
	}
}

// ---------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------

// FuzzUnary posts each input to every unary procedure, as a protobuf and as
// a JSON body.
func FuzzUnary(f *testing.F) {
	addSeeds(f)
	e := newFuzzEnv(f)
	var mu sync.Mutex // inputs run one at a time; the env is not shared
	f.Fuzz(func(t *testing.T, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		e.fuzzUnary(t, data)
	})
}

// FuzzStreams sends each input as the messages of the streams. Nothing a
// stream carries without a task to run changes the state.
func FuzzStreams(f *testing.F) {
	addSeeds(f)
	e := newFuzzEnv(f)
	var mu sync.Mutex
	f.Fuzz(func(t *testing.T, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		before := e.stateHash(t)
		e.fuzzStreams(t, data)
		if after := e.stateHash(t); after != before {
			t.Fatalf("the streams changed the state\ninput: %q", data)
		}
	})
}
