package transport_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// TestTracing follows one trace from the SDK's submit through a real
// three-node cluster to a worker and back. The caller's span is carried in
// the task's traceparent tag; the leader's submit span continues it (the
// submit goes through a follower, which forwards it), with the commit of
// its entry as a child, and stores its own context in the tag; each
// attempt is a dispatch span (with the commit of its lease) under the
// submit, the worker's attempt span under the dispatch (the handler's ctx
// carries it), and the leader's completion span (with its commit) under
// the attempt. The first attempt fails retryably, so the trace holds two
// of each. An untraced task makes no span.
func TestTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	c := testcluster.New(t, 3, testcluster.Tracing(tp), testcluster.Configure(func(_ int, cfg *cluster.Config) {
		cfg.Engine.Core = core.Config{HeartbeatWindow: testWindow}
	}))
	_, followers := c.Leader()

	var mu sync.Mutex
	handlerSpans := map[int]trace.SpanContext{} // by attempt
	w, err := c.Client(followers[1]).NewWorker(client.WorkerConfig{
		Pool: "traced", Concurrency: 2, TracerProvider: tp,
		Handlers: map[string]client.Handler{"k": client.HandlerFunc(func(ctx context.Context, job *client.Job) ([]byte, error) {
			if job.Task.Payload != nil && string(job.Task.Payload) == "quiet" {
				return nil, nil
			}
			mu.Lock()
			handlerSpans[job.Attempt] = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			if job.Attempt == 1 {
				return nil, client.Retryable(errors.New("not yet"), 10*time.Millisecond)
			}
			return []byte("ok"), nil
		})},
	})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() {
		stopWorker()
		require.NoError(t, <-workerDone)
	})

	cl := c.Client(followers[0])
	ctx, caller := tp.Tracer("test").Start(ctxT(t, 30*time.Second), "caller")
	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "traced", Kind: "k", Tags: map[string]string{"team": "a"}}})
	require.NoError(t, err)
	caller.End()
	task, err := cl.Wait(ctxT(t, 30*time.Second), sub.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, task.Status)
	require.Equal(t, 2, task.Attempt)

	// An untraced task, run by the same worker.
	quiet, err := cl.Submit(ctxT(t, 10*time.Second), client.TaskSpec{Template: client.Template{Pool: "traced", Kind: "k", Payload: []byte("quiet")}})
	require.NoError(t, err)
	_, err = cl.Wait(ctxT(t, 30*time.Second), quiet.ID)
	require.NoError(t, err)

	traceID := caller.SpanContext().TraceID()
	byName := func(spans tracetest.SpanStubs) map[string][]tracetest.SpanStub {
		m := map[string][]tracetest.SpanStub{}
		for _, s := range spans {
			m[s.Name] = append(m[s.Name], s)
		}
		return m
	}
	var spans map[string][]tracetest.SpanStub
	// The completion spans end once the leader has answered the worker.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		spans = byName(exp.GetSpans())
		assert.Len(ct, spans["cronoq.complete"], 2)
	}, 10*time.Second, 10*time.Millisecond)
	all := exp.GetSpans()
	for _, s := range all {
		require.Equal(t, traceID, s.SpanContext.TraceID(), "span %s is in the caller's trace", s.Name)
		require.NotEqual(t, quiet.ID, attr(s, "cronoq.task.id").AsString(), "the untraced task made span %s", s.Name)
	}
	require.Len(t, spans["caller"], 1)
	require.Len(t, spans["cronoq.submit"], 1)
	require.Len(t, spans["cronoq.dispatch"], 2)
	require.Len(t, spans["cronoq.attempt"], 2)
	require.Len(t, spans["cronoq.commit"], 5, "the submit's, two leases', two completions'")
	require.Len(t, all, 1+1+2+2+2+5)

	submit := spans["cronoq.submit"][0]
	require.Equal(t, caller.SpanContext().SpanID(), submit.Parent.SpanID())
	require.Equal(t, trace.SpanKindServer, submit.SpanKind)
	require.Equal(t, sub.ID, attr(submit, "cronoq.task.id").AsString())
	require.Equal(t, "traced", attr(submit, "cronoq.pool").AsString())
	require.Equal(t, "k", attr(submit, "cronoq.kind").AsString())
	// The task keeps the submit span's context: later attempts hang under
	// it, whichever node leads then.
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", traceID, submit.SpanContext.SpanID()), task.Tags[client.TagTraceparent])
	require.Equal(t, "a", task.Tags["team"])

	commitOf := func(parent tracetest.SpanStub) tracetest.SpanStub {
		t.Helper()
		var found []tracetest.SpanStub
		for _, s := range spans["cronoq.commit"] {
			if s.Parent.SpanID() == parent.SpanContext.SpanID() {
				found = append(found, s)
			}
		}
		require.Len(t, found, 1, "one commit under %s", parent.Name)
		cs := found[0]
		require.Positive(t, attr(cs, "cronoq.raft.index").AsInt64(), "raft index")
		require.Positive(t, attr(cs, "cronoq.commit.mutations").AsInt64(), "mutations")
		require.False(t, cs.EndTime.Before(cs.StartTime))
		require.Len(t, cs.Events, 1)
		require.Equal(t, "appended", cs.Events[0].Name)
		return cs
	}
	commitOf(submit)

	for _, d := range spans["cronoq.dispatch"] {
		require.Equal(t, submit.SpanContext.SpanID(), d.Parent.SpanID(), "dispatch under the submit")
		require.Equal(t, trace.SpanKindProducer, d.SpanKind)
		require.Equal(t, sub.ID, attr(d, "cronoq.task.id").AsString())
		require.Equal(t, w.ID(), attr(d, "cronoq.worker").AsString())
		commitOf(d)
	}
	attempts := map[int64]tracetest.SpanStub{}
	for _, a := range spans["cronoq.attempt"] {
		n := attr(a, "cronoq.attempt").AsInt64()
		attempts[n] = a
		require.Equal(t, trace.SpanKindConsumer, a.SpanKind)
		require.Equal(t, sub.ID, attr(a, "cronoq.task.id").AsString())
		require.Equal(t, "traced", attr(a, "cronoq.pool").AsString())
		require.Equal(t, "k", attr(a, "cronoq.kind").AsString())
		require.Equal(t, w.ID(), attr(a, "cronoq.worker").AsString())
		var dispatch *tracetest.SpanStub
		for _, d := range spans["cronoq.dispatch"] {
			if d.SpanContext.SpanID() == a.Parent.SpanID() {
				dispatch = &d
			}
		}
		require.NotNil(t, dispatch, "attempt %d under a dispatch", n)
		require.Equal(t, n, attr(*dispatch, "cronoq.attempt").AsInt64())
		require.Equal(t, attr(*dispatch, "cronoq.lease").AsInt64(), attr(a, "cronoq.lease").AsInt64())
		mu.Lock()
		require.Equal(t, a.SpanContext, handlerSpans[int(n)], "the handler's ctx carries the attempt span")
		mu.Unlock()
	}
	require.Len(t, attempts, 2)
	require.Equal(t, codes.Error, attempts[1].Status.Code)
	require.Equal(t, "retryable", attr(attempts[1], "cronoq.outcome").AsString())
	require.Equal(t, "success", attr(attempts[2], "cronoq.outcome").AsString())
	require.NotEqual(t, codes.Error, attempts[2].Status.Code)

	for _, cp := range spans["cronoq.complete"] {
		require.Equal(t, trace.SpanKindServer, cp.SpanKind)
		var attempt *tracetest.SpanStub
		for _, a := range attempts {
			if a.SpanContext.SpanID() == cp.Parent.SpanID() {
				attempt = &a
			}
		}
		require.NotNil(t, attempt, "completion under an attempt")
		require.Equal(t, attr(*attempt, "cronoq.lease").AsInt64(), attr(cp, "cronoq.lease").AsInt64())
		require.Equal(t, attr(*attempt, "cronoq.outcome").AsString(), attr(cp, "cronoq.outcome").AsString())
		require.NotEqual(t, codes.Error, cp.Status.Code)
		commitOf(cp)
		require.False(t, cp.StartTime.Before(attempt.EndTime), "the completion follows the attempt")
	}
}

// attr is the value of attribute key of s (an empty value when s has none).
func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}
