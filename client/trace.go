package client

import (
	"context"
	"errors"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/internal/tracectx"
)

// Tags that carry a task's W3C trace context. A task whose tags hold a
// valid traceparent is traced: the nodes (when they trace) and the
// workers continue the trace it names. Submit, SubmitBatch, EnqueueMany
// and SubmitWorkflow set them from the span of their ctx when the spec
// has no traceparent of its own; a handler's Spawn does the same with the
// attempt's span.
const (
	TagTraceparent = tracectx.Traceparent
	TagTracestate  = tracectx.Tracestate
)

// tracerName names the tracer of the worker's spans.
const tracerName = "github.com/cronoq/cronoq/client"

// Attributes of the worker's attempt span.
const (
	attrTaskID  = attribute.Key("cronoq.task.id")
	attrPool    = attribute.Key("cronoq.pool")
	attrKind    = attribute.Key("cronoq.kind")
	attrAttempt = attribute.Key("cronoq.attempt")
	attrLease   = attribute.Key("cronoq.lease")
	attrWorker  = attribute.Key("cronoq.worker")
	attrOutcome = attribute.Key("cronoq.outcome")
)

var traceContext propagation.TraceContext

// protoTags lets the propagator read and write the tags of a template on
// the wire.
type protoTags struct{ tpl *cronoqv1.TaskTemplate }

func (c protoTags) Get(key string) string {
	for _, kv := range c.tpl.GetTags() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return ""
}

// Set adds key in key order (the tags of a spec are sorted); a key already
// there keeps its value (the caller's tags win).
func (c protoTags) Set(key, value string) {
	if c.Get(key) != "" {
		return
	}
	i := slices.IndexFunc(c.tpl.Tags, func(kv *cronoqv1.KV) bool { return kv.GetKey() > key })
	if i < 0 {
		i = len(c.tpl.Tags)
	}
	c.tpl.Tags = slices.Insert(c.tpl.Tags, i, &cronoqv1.KV{Key: key, Value: value})
}

func (c protoTags) Keys() []string {
	keys := make([]string, 0, len(c.tpl.GetTags()))
	for _, kv := range c.tpl.GetTags() {
		keys = append(keys, kv.GetKey())
	}
	return keys
}

// injectTrace writes the trace context of ctx's span into the tags of
// spec, unless ctx has no span or the spec has a traceparent already.
func injectTrace(ctx context.Context, spec *cronoqv1.TaskSpec) {
	if spec == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if spec.Template == nil {
		spec.Template = &cronoqv1.TaskTemplate{}
	}
	c := protoTags{spec.Template}
	if c.Get(TagTraceparent) != "" {
		return
	}
	traceContext.Inject(ctx, c)
}

// mapCarrier reads a trace context from a task's tags.
type mapCarrier map[string]string

func (m mapCarrier) Get(key string) string { return m[key] }
func (m mapCarrier) Set(string, string)    {}
func (m mapCarrier) Keys() []string        { return []string{TagTraceparent, TagTracestate} }

// attemptParent is the trace context an attempt continues: the dispatch
// span the grant names, else the task's tags; ok is false for an untraced
// task.
func attemptParent(g *cronoqv1.Grant, tags map[string]string) (context.Context, bool) {
	var carrier propagation.TextMapCarrier = mapCarrier(tags)
	if g.GetTraceparent() != "" {
		parent, state := g.GetTraceparent(), g.GetTracestate()
		carrier = tracectx.Pair{Parent: &parent, State: &state}
	}
	if carrier.Get(TagTraceparent) == "" {
		return nil, false
	}
	ctx := traceContext.Extract(context.Background(), carrier)
	return ctx, trace.SpanContextFromContext(ctx).IsValid()
}

// startAttempt starts the span of an attempt of a traced task, as a child
// of the trace context the grant carries (else the task's tags), and
// returns ctx with it; the span is nil for an untraced task.
func (r *workerRun) startAttempt(ctx context.Context, g *cronoqv1.Grant, job *Job) (context.Context, trace.Span) {
	parent, ok := attemptParent(g, job.Task.Tags)
	if !ok {
		return ctx, nil
	}
	_, span := r.tracer.Start(parent, "cronoq.attempt", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attrTaskID.String(job.Task.ID), attrPool.String(job.Task.Pool), attrKind.String(job.Task.Kind),
		attrAttempt.Int(job.Attempt), attrLease.Int64(int64(job.Lease)), attrWorker.String(r.cfg.ID)))
	return trace.ContextWithSpan(ctx, span), span
}

// endAttempt ends the span of an attempt with what its handler returned.
func endAttempt(span trace.Span, err error) {
	if span == nil {
		return
	}
	outcome := outcomeOf(err)
	span.SetAttributes(attrOutcome.String(outcome))
	if err != nil {
		var pe *PanicError
		if errors.As(err, &pe) {
			span.RecordError(err, trace.WithAttributes(attribute.String("exception.stacktrace", string(pe.Stack))))
		} else {
			span.RecordError(err)
		}
		if outcome != "cancelled" {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// outcomeOf names the outcome a handler's error reports (see
// completionToProto).
func outcomeOf(err error) string {
	var perm *PermanentError
	switch {
	case err == nil:
		return "success"
	case errors.Is(err, ErrCancelAttempt):
		return "cancelled"
	case errors.As(err, &perm):
		return "permanent"
	}
	return "retryable"
}

// traceCompletion writes the trace context of an attempt's span into its
// completion, and into the children it spawns that have none.
func traceCompletion(span trace.Span, c *cronoqv1.Completion) {
	if span == nil || !span.SpanContext().IsValid() {
		return
	}
	ctx := trace.ContextWithSpan(context.Background(), span)
	traceContext.Inject(ctx, tracectx.Pair{Parent: &c.Traceparent, State: &c.Tracestate})
	for _, st := range append(slices.Clone(c.GetChildren()), c.GetThen()) {
		if st != nil {
			injectTrace(ctx, st.GetSpec())
		}
	}
}
