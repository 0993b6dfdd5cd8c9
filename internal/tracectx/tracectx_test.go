package tracectx

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A span context injected into a Pair is extracted from it unchanged, and
// keys other than the two it carries are ignored.
func TestPairRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3},
		SpanID:     trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled,
		TraceState: func() trace.TraceState { ts, _ := trace.ParseTraceState("k=v"); return ts }(),
	})
	var parent, state string
	var prop propagation.TraceContext
	prop.Inject(trace.ContextWithSpanContext(context.Background(), sc), Pair{&parent, &state})
	if parent == "" || state != "k=v" {
		t.Fatalf("injected traceparent %q, tracestate %q", parent, state)
	}
	got := trace.SpanContextFromContext(prop.Extract(context.Background(), Pair{&parent, &state}))
	if !got.Equal(sc.WithRemote(true)) {
		t.Fatalf("extracted %v, want %v", got, sc)
	}
	c := Pair{&parent, &state}
	c.Set("other", "x")
	if c.Get("other") != "" || parent == "x" || state == "x" {
		t.Fatal("a key Pair does not carry was stored")
	}
}
