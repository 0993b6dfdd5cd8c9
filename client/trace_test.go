package client

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// traceparent is the W3C traceparent of sc.
func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// TestSubmitInjectsTraceContext: every submit form adds the span of its
// ctx to the tags of the specs without a traceparent, leaves the caller's
// maps alone, keeps a traceparent the caller gave, and adds nothing when
// ctx has no span.
func TestSubmitInjectsTraceContext(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(testCtx(t), "caller")
	defer span.End()
	want := traceparent(span.SpanContext())
	tagsOf := func(id string) map[string]string {
		t.Helper()
		task, err := c.Get(testCtx(t), id)
		require.NoError(t, err)
		return task.Tags
	}

	tags := map[string]string{"a": "1", "z": "2"}
	sub, err := c.Submit(ctx, TaskSpec{Template: Template{Pool: "p", Kind: "k", Tags: tags}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "1", "z": "2", TagTraceparent: want}, tagsOf(sub.ID))
	require.Equal(t, map[string]string{"a": "1", "z": "2"}, tags, "the caller's map is not changed")

	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	batch, err := c.SubmitBatch(ctx, []TaskSpec{
		{Template: Template{Pool: "p", Kind: "k", Tags: map[string]string{TagTraceparent: own, TagTracestate: "v=1"}}},
		{Template: Template{Pool: "p", Kind: "k"}},
	})
	require.NoError(t, err)
	require.Equal(t, map[string]string{TagTraceparent: own, TagTracestate: "v=1"}, tagsOf(batch[0].ID), "the caller's traceparent is kept")
	require.Equal(t, map[string]string{TagTraceparent: want}, tagsOf(batch[1].ID))

	many, errs, err := c.EnqueueMany(ctx, []TaskSpec{{Template: Template{Pool: "p", Kind: "k"}}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Equal(t, map[string]string{TagTraceparent: want}, tagsOf(many[0].ID))

	wf, err := c.SubmitWorkflow(ctx, WorkflowSpec{Steps: []Step{{Name: "s", Task: TaskSpec{Template: Template{Pool: "p", Kind: "k"}}}}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{TagTraceparent: want}, tagsOf(wf.Tasks["s"]))

	plain, err := c.Submit(testCtx(t), TaskSpec{Template: Template{Pool: "p", Kind: "k"}})
	require.NoError(t, err)
	require.Empty(t, tagsOf(plain.ID), "no span, no tag")
}

// TestWorkerAttemptSpans: the attempt of a traced task is a span under the
// task's traceparent (the fake grants carry no dispatch span), with the
// task's id, pool, kind, attempt and lease; the handler's ctx carries it;
// the completion carries its context back, and so do the children it
// spawns. An untraced task makes no span, and nothing goes on its
// completion.
func TestWorkerAttemptSpans(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 1, 0)
	c := newTestClient(t, addrs(fc, 0))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	handlerSpan, plainSpan := make(chan trace.SpanContext, 1), make(chan trace.SpanContext, 1)
	w, err := c.NewWorker(WorkerConfig{Pool: "p", TracerProvider: tp, Handlers: map[string]Handler{
		"spawn": HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
			handlerSpan <- trace.SpanContextFromContext(ctx)
			job.Spawn(Step{Name: "child", Task: TaskSpec{Template: Template{Pool: "p", Kind: "leaf"}}})
			return []byte("ok"), nil
		}),
		"leaf": HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil }),
		"fail": HandlerFunc(func(ctx context.Context, job *Job) ([]byte, error) {
			plainSpan <- trace.SpanContextFromContext(ctx)
			return nil, Permanent(fmt.Errorf("bad input"))
		}),
	}})
	require.NoError(t, err)
	stop := runWorker(t, w)

	parent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	traced := fc.AddTask(&cronoqv1.TaskSpec{Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "spawn",
		Tags: []*cronoqv1.KV{{Key: TagTraceparent, Value: parent}}}})
	plain := addTask(fc, "p", "fail", "", nil)
	fc.WaitUntil("both completed", func() bool { return fc.Accepted(traced) != nil && fc.Accepted(plain) != nil })
	require.NoError(t, stop())

	// Only the traced task's attempt (and perhaps its child's) made spans.
	var attempts []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		require.Equal(t, "cronoq.attempt", s.Name)
		require.NotEqual(t, plain, attrOf(s, attrTaskID))
		if attrOf(s, attrTaskID) == traced {
			attempts = append(attempts, s)
		}
	}
	require.Len(t, attempts, 1)
	a := attempts[0]
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", a.SpanContext.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", a.Parent.SpanID().String())
	require.True(t, a.Parent.IsRemote())
	require.Equal(t, trace.SpanKindConsumer, a.SpanKind)
	require.Equal(t, "p", attrOf(a, attrPool))
	require.Equal(t, "spawn", attrOf(a, attrKind))
	require.Equal(t, "1", attrOf(a, attrAttempt))
	require.Equal(t, w.ID(), attrOf(a, attrWorker))
	require.Equal(t, "success", attrOf(a, attrOutcome))
	require.Equal(t, a.SpanContext, <-handlerSpan)
	require.Equal(t, fmt.Sprint(fc.Accepted(traced).GetLease()), attrOf(a, attrLease))

	comp := fc.Accepted(traced)
	require.Equal(t, traceparent(a.SpanContext), comp.GetTraceparent())
	require.Len(t, comp.GetChildren(), 1)
	require.Equal(t, []*cronoqv1.KV{{Key: TagTraceparent, Value: traceparent(a.SpanContext)}},
		comp.GetChildren()[0].GetSpec().GetTemplate().GetTags(), "a spawned child continues the attempt's trace")

	require.False(t, (<-plainSpan).IsValid(), "an untraced task's handler has no span")
	require.Empty(t, fc.Accepted(plain).GetTraceparent())
}

// attrOf is the value of attribute key of s, as text ("" when unset).
func attrOf(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}
