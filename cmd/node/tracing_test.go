package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/client"
)

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf), as a collector
// serves it, that keeps what it is sent.
type otlpReceiver struct {
	srv *httptest.Server

	mu    sync.Mutex
	paths []string
	reqs  []*coltracepb.ExportTraceServiceRequest
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.paths = append(r.paths, req.URL.Path)
		r.reqs = append(r.reqs, &msg)
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// hostPort is the receiver's HOST:PORT.
func (r *otlpReceiver) hostPort() string { return strings.TrimPrefix(r.srv.URL, "http://") }

// exported is a span received, with the resource it came with.
type exported struct {
	span     *tracepb.Span
	resource map[string]string
}

// spans returns the spans received so far and the paths they were sent to.
func (r *otlpReceiver) spans() ([]exported, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []exported
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			res := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, exported{span: s, resource: res})
				}
			}
		}
	}
	return out, append([]string(nil), r.paths...)
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			v := kv.GetValue()
			if v.GetStringValue() != "" {
				return v.GetStringValue()
			}
			return fmt.Sprint(v.GetIntValue())
		}
	}
	return ""
}

// remoteParent is a context whose span is a sampled remote parent.
func remoteParent(t *testing.T) (context.Context, trace.SpanContext) {
	tid, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex("b7ad6b7169203331")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc), sc
}

// TestTraceExport sends spans through the providers the flags make: to
// /v1/traces of HOST:PORT (plain HTTP with -otlp-insecure) or of a URL
// without a path, to a URL's own path, with the resource attributes given;
// a ratio of 0 records nothing, and no endpoint makes no provider.
func TestTraceExport(t *testing.T) {
	t.Parallel()
	log := hclog.NewNullLogger()
	ctx, parent := remoteParent(t)
	for _, tc := range []struct {
		name     string
		cfg      func(r *otlpReceiver) traceConfig
		path     string
		recorded bool
	}{
		{"host and port", func(r *otlpReceiver) traceConfig {
			return traceConfig{endpoint: r.hostPort(), insecure: true, ratio: 1}
		}, "/v1/traces", true},
		{"url", func(r *otlpReceiver) traceConfig { return traceConfig{endpoint: r.srv.URL, ratio: 1} }, "/v1/traces", true},
		{"url with path", func(r *otlpReceiver) traceConfig { return traceConfig{endpoint: r.srv.URL + "/otlp/traces", ratio: 1} }, "/otlp/traces", true},
		{"ratio 0", func(r *otlpReceiver) traceConfig { return traceConfig{endpoint: r.srv.URL, ratio: 0} }, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newOTLPReceiver(t)
			tp, err := tc.cfg(r).tracerProvider(context.Background(), log, attribute.String("service.name", "cronoq-test"))
			require.NoError(t, err)
			_, span := tp.Tracer("test").Start(ctx, "work")
			span.End()
			shutdownTracing(tp, log)
			spans, paths := r.spans()
			if !tc.recorded {
				require.Empty(t, spans)
				return
			}
			require.Len(t, spans, 1)
			require.Equal(t, []string{tc.path}, paths)
			s := spans[0]
			require.Equal(t, "work", s.span.GetName())
			require.Equal(t, parent.TraceID().String(), fmt.Sprintf("%x", s.span.GetTraceId()))
			require.Equal(t, parent.SpanID().String(), fmt.Sprintf("%x", s.span.GetParentSpanId()))
			require.Equal(t, "cronoq-test", s.resource["service.name"])
		})
	}
	tp, err := traceConfig{ratio: 1}.tracerProvider(context.Background(), log)
	require.NoError(t, err)
	require.Nil(t, tp, "no endpoint, no tracing")
}

// TestWorkerExportsAttemptSpans runs `cronoq worker -otlp-endpoint`: the
// attempt of a task with a traceparent tag is a span under it, exported
// once the worker stops at the latest, and the command gets TRACEPARENT
// naming that span; an untraced task makes no span.
func TestWorkerExportsAttemptSpans(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	r := newOTLPReceiver(t)
	_, parent := remoteParent(t)
	tag := fmt.Sprintf("00-%s-%s-01", parent.TraceID(), parent.SpanID())
	traced := f.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "env",
		Tags: []*cronoqv1.KV{{Key: "traceparent", Value: tag}}}})
	plain := f.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "env"}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan cliResult, 1)
	go func() {
		done <- runCLIContext(ctx, "", "worker", "-pool", "p", "-addr", addr, "-id", "w1",
			"-otlp-endpoint", r.srv.URL, "-trace-sample-ratio", "1",
			"-handler", `env=printf '%s' "${TRACEPARENT-none}"`)
	}()
	f.WaitUntil("both tasks completed", func() bool { return f.Accepted(traced) != nil && f.Accepted(plain) != nil })
	cancel()
	var res cliResult
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop")
	}
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	require.Contains(t, res.stderr, "exporting spans over OTLP/HTTP")

	spans, paths := r.spans()
	require.Len(t, spans, 1, "the traced task's attempt only")
	require.Equal(t, []string{"/v1/traces"}, paths)
	s := spans[0]
	require.Equal(t, "cronoq.attempt", s.span.GetName())
	require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, s.span.GetKind())
	require.Equal(t, parent.SpanID().String(), fmt.Sprintf("%x", s.span.GetParentSpanId()))
	require.Equal(t, traced, spanAttr(s.span, "cronoq.task.id"))
	require.Equal(t, "w1", spanAttr(s.span, "cronoq.worker"))
	require.Equal(t, "cronoq-worker", s.resource["service.name"])
	require.Equal(t, "p", s.resource["cronoq.pool"])

	attempt := fmt.Sprintf("00-%x-%x-01", s.span.GetTraceId(), s.span.GetSpanId())
	require.Equal(t, attempt, string(f.Accepted(traced).GetOutput()), "the command continues the attempt's span")
	require.Equal(t, attempt, f.Accepted(traced).GetTraceparent(), "and so does the completion")
	require.Equal(t, "none", string(f.Accepted(plain).GetOutput()))
}

func TestWorkerTraceFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-otlp-endpoint", "collector"}, "invalid -otlp-endpoint"},
		{[]string{"-otlp-endpoint", "https://c:4318", "-otlp-insecure"}, "contradicts"},
		{[]string{"-trace-sample-ratio", "1.5"}, "from 0 to 1"},
	} {
		r := runCLI(t, "", append([]string{"worker", "-pool", "p", "-handler", "k=true", "-addr", "127.0.0.1:1"}, tc.args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
}

// TestAgentExportsSpans runs `cronoq agent -dev -otlp-endpoint`: a task
// submitted with a traceparent is traced by the node, whose spans reach the
// collector by the time the agent has stopped, named after the node.
func TestAgentExportsSpans(t *testing.T) {
	r := newOTLPReceiver(t)
	flags, addr := agentPorts(t)
	out := &syncWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		code <- run(ctx, append([]string{"agent", "-dev", "-otlp-endpoint", r.srv.URL}, flags...),
			stdio{Stdin: strings.NewReader(""), Stdout: out, Stderr: out})
	}()
	h := healthOK(t, addr, 10*time.Second, exited)

	cl, err := client.New([]string{addr})
	require.NoError(t, err)
	defer cl.Close()
	sctx, parent := remoteParent(t)
	sctx, scancel := context.WithTimeout(sctx, 10*time.Second)
	defer scancel()
	sub, err := cl.Submit(sctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)

	cancel()
	select {
	case c := <-code:
		require.Equal(t, exitOK, c, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	require.Contains(t, out.String(), "tracing: exporting spans over OTLP/HTTP")
	spans, _ := r.spans()
	names := map[string]exported{}
	for _, s := range spans {
		names[s.span.GetName()] = s
	}
	submit, ok := names["cronoq.submit"]
	require.True(t, ok, "spans: %v", spans)
	require.Equal(t, parent.SpanID().String(), fmt.Sprintf("%x", submit.span.GetParentSpanId()))
	require.Equal(t, sub.ID, spanAttr(submit.span, "cronoq.task.id"))
	require.Equal(t, "cronoq", submit.resource["service.name"])
	require.Equal(t, h["node"], submit.resource["service.instance.id"])
	commit, ok := names["cronoq.commit"]
	require.True(t, ok, "spans: %v", spans)
	require.Equal(t, submit.span.GetSpanId(), commit.span.GetParentSpanId())
}
