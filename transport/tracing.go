package transport

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/tracectx"
)

// Tracing. A task whose tags carry a W3C trace context (a traceparent tag,
// and optionally a tracestate tag) is traced: the leader's spans of its
// submit, of the commit of the entry that holds it, of each dispatch
// (lease grant) and commit, and of each completion and commit continue
// that trace, and the worker's span of the attempt sits between the
// dispatch and the completion:
//
//	caller's span
//	└─ cronoq.submit (server)        the submit on the leader
//	   ├─ cronoq.commit              the entry that made it durable
//	   └─ cronoq.dispatch (producer) a lease granted and sent to a worker
//	      ├─ cronoq.commit           the entry of the lease
//	      └─ cronoq.attempt          the worker's run of the handler
//	         └─ cronoq.complete (server)  the attempt's outcome on the leader
//	            └─ cronoq.commit
//
// The submit stores its own span's context in the task's traceparent tag
// (as every hop of W3C trace context passes its own span on), so that the
// dispatches of every attempt, on this leader or a later one, are its
// children. The grant carries the dispatch span's context to the worker,
// and the completion the attempt span's context back. Untraced tasks cost
// nothing, and without a tracer provider (the default) nothing is traced.

// tracerName names the tracer of the node's spans.
const tracerName = "github.com/cronoq/cronoq/transport"

// Span attributes.
const (
	attrTaskID    = attribute.Key("cronoq.task.id")
	attrPool      = attribute.Key("cronoq.pool")
	attrKind      = attribute.Key("cronoq.kind")
	attrAttempt   = attribute.Key("cronoq.attempt")
	attrLease     = attribute.Key("cronoq.lease")
	attrWorker    = attribute.Key("cronoq.worker")
	attrNode      = attribute.Key("cronoq.node")
	attrDuplicate = attribute.Key("cronoq.duplicate")
	attrMode      = attribute.Key("cronoq.submit.mode")
	attrOutcome   = attribute.Key("cronoq.outcome")
	attrEntry     = attribute.Key("cronoq.commit.entry")
	attrIndex     = attribute.Key("cronoq.raft.index")
	attrMutations = attribute.Key("cronoq.commit.mutations")
	attrBytes     = attribute.Key("cronoq.commit.bytes")
)

// tracing makes the node's spans; a nil *tracing traces nothing.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
	node   string
}

// newTracing returns the tracing of a node with tp; nil (no tracing)
// without tp.
func newTracing(tp trace.TracerProvider, node string) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{tracer: tp.Tracer(tracerName), node: node}
}

// tagCarrier lets the propagator read and write a task's tags.
type tagCarrier struct{ tags *[]fsm.KV }

func (c tagCarrier) Get(key string) string {
	for _, kv := range *c.tags {
		if kv.K == key {
			return kv.V
		}
	}
	return ""
}

func (c tagCarrier) Set(key, value string) {
	for i, kv := range *c.tags {
		if kv.K == key {
			(*c.tags)[i].V = value
			return
		}
	}
	*c.tags = append(*c.tags, fsm.KV{K: key, V: value})
}

func (c tagCarrier) Keys() []string {
	keys := make([]string, len(*c.tags))
	for i, kv := range *c.tags {
		keys[i] = kv.K
	}
	return keys
}

// remote returns a context holding the trace context carrier c carries,
// and whether it carries a valid one.
func (t *tracing) remote(c propagation.TextMapCarrier) (context.Context, bool) {
	if c.Get(tracectx.Traceparent) == "" {
		return nil, false
	}
	ctx := t.prop.Extract(context.Background(), c)
	return ctx, trace.SpanContextFromContext(ctx).IsValid()
}

// traced is the spans of one call to the leader whose items are traced:
// span i belongs to the call's answer slot[i] (several for CompleteMany).
// The engine tells it, through the call's context, the entries that made
// the answers durable.
type traced struct {
	t       *tracing
	spans   []trace.Span
	slots   []int
	entries []cluster.EntryTrace // by slot
	seen    []bool
}

// newTraced prepares for the spans of a call with n answers.
func (t *tracing) newTraced(n int) *traced {
	return &traced{t: t, entries: make([]cluster.EntryTrace, n), seen: make([]bool, n)}
}

// add records span as an item of answer slot.
func (tr *traced) add(span trace.Span, slot int) {
	tr.spans = append(tr.spans, span)
	tr.slots = append(tr.slots, slot)
}

// observe returns ctx with the observer of the call's entries. The
// observer runs on the engine's goroutine before the answers are sent,
// which the caller reads after them.
func (tr *traced) observe(ctx context.Context) context.Context {
	return cluster.WithCommitObserver(ctx, func(i int, ent cluster.EntryTrace) {
		if i >= 0 && i < len(tr.entries) {
			tr.entries[i], tr.seen[i] = ent, true
		}
	})
}

// commit adds to span i the span of the commit of its answer, when it had
// an entry of its own.
func (tr *traced) commit(i int) {
	span, slot := tr.spans[i], tr.slots[i]
	if !tr.seen[slot] || !span.IsRecording() {
		return
	}
	ent := tr.entries[slot]
	start := ent.Queued
	if start.IsZero() {
		start = ent.Appended
	}
	ctx := trace.ContextWithSpan(context.Background(), span)
	_, cs := tr.t.tracer.Start(ctx, "cronoq.commit", trace.WithTimestamp(start), trace.WithAttributes(
		attrEntry.Int64(int64(ent.Seq)), attrIndex.Int64(int64(ent.Index)),
		attrMutations.Int(ent.Mutations), attrBytes.Int(ent.Bytes), attrNode.String(tr.t.node)))
	cs.AddEvent("appended", trace.WithTimestamp(ent.Appended))
	cs.End(trace.WithTimestamp(ent.Applied))
}

// fail marks span as failed with err.
func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// startSubmits starts the span of each traced spec of a submit and stores
// its context in the spec's tags; nil when none is traced.
func (t *tracing) startSubmits(mode cluster.SubmitMode, specs []cluster.Spec) (*traced, []int) {
	if t == nil {
		return nil, nil
	}
	var tr *traced
	var items []int // the spec of each span
	for i := range specs {
		spec := &specs[i]
		carrier := tagCarrier{&spec.Tags}
		parent, ok := t.remote(carrier)
		if !ok {
			continue
		}
		if tr == nil {
			tr = t.newTraced(1)
		}
		ctx, span := t.tracer.Start(parent, "cronoq.submit", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attrPool.String(spec.Pool), attrKind.String(spec.Kind), attrMode.String(modeName(mode)), attrNode.String(t.node)))
		t.prop.Inject(ctx, carrier)
		tr.add(span, 0)
		items = append(items, i)
	}
	return tr, items
}

func modeName(m cluster.SubmitMode) string {
	switch m {
	case cluster.SubmitBatch:
		return "batch"
	case cluster.SubmitMany:
		return "many"
	}
	return "one"
}

// endSubmits ends the spans of a submit with its result.
func (tr *traced) endSubmits(items []int, res *cluster.SubmitResult, err error) {
	if tr == nil {
		return
	}
	for j, i := range items {
		span := tr.spans[j]
		switch {
		case err != nil:
			fail(span, err)
		case i < len(res.Errs) && res.Errs[i] != nil:
			fail(span, res.Errs[i])
		case i < len(res.Tasks):
			span.SetAttributes(attrTaskID.String(res.Tasks[i].ID), attrDuplicate.Bool(res.Tasks[i].Duplicate))
			if !res.Tasks[i].Duplicate {
				tr.commit(j)
			}
		}
		span.End()
	}
}

// endSpans ends every span.
func (tr *traced) endSpans() {
	for _, span := range tr.spans {
		span.End()
	}
}

// startDispatch starts the span of the dispatch of task t's attempt under
// grant g to worker, when t is traced, and writes its context into the
// grant. It starts when the leader granted it, and ends with endSpans.
func (tr *traced) startDispatch(t *fsm.Task, g *cronoqv1.Grant, worker string) {
	tags := t.Tags
	parent, ok := tr.t.remote(tagCarrier{&tags})
	if !ok {
		return
	}
	start := time.Now()
	if tr.seen[0] {
		start = tr.entries[0].Queued
	}
	ctx, span := tr.t.tracer.Start(parent, "cronoq.dispatch", trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(start),
		trace.WithAttributes(attrTaskID.String(t.ID), attrPool.String(t.Pool), attrKind.String(t.Kind),
			attrAttempt.Int64(int64(g.GetAttempt())), attrLease.Int64(int64(g.GetLease())), attrWorker.String(worker),
			attrNode.String(tr.t.node)))
	tr.t.prop.Inject(ctx, tracectx.Pair{Parent: &g.Traceparent, State: &g.Tracestate})
	tr.add(span, 0)
	tr.commit(len(tr.spans) - 1)
}

// startCompletion starts the span of completion c, answer slot of its
// call, when the worker's attempt was traced.
func (tr *traced) startCompletion(c *cronoqv1.Completion, out cluster.Outcome, slot int) {
	parent, ok := tr.t.remote(tracectx.Pair{Parent: &c.Traceparent, State: &c.Tracestate})
	if !ok {
		return
	}
	_, span := tr.t.tracer.Start(parent, "cronoq.complete", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attrLease.Int64(int64(c.GetLease())), attrOutcome.String(outcomeName(out.Kind)), attrNode.String(tr.t.node)))
	tr.add(span, slot)
}

func outcomeName(k cluster.OutcomeKind) string {
	switch k {
	case cluster.OutcomeSuccess:
		return "success"
	case cluster.OutcomeRetryable:
		return "retryable"
	case cluster.OutcomePermanent:
		return "permanent"
	case cluster.OutcomeCancelled:
		return "cancelled"
	}
	return "unknown"
}

// endCompletions ends the completion spans with the errors of their
// answers, by slot.
func (tr *traced) endCompletions(errs []error) {
	for i, span := range tr.spans {
		if slot := tr.slots[i]; slot < len(errs) && errs[slot] != nil {
			fail(span, errs[slot])
		} else {
			tr.commit(i)
		}
		span.End()
	}
}
