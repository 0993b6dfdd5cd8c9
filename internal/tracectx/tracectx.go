// Package tracectx holds what the SDK and the API server share about a
// task's W3C trace context: the names of the tags that carry it and a
// propagation carrier over a message's traceparent and tracestate fields.
package tracectx

// The tags (and message fields) that carry a trace context.
const (
	Traceparent = "traceparent"
	Tracestate  = "tracestate"
)

// Pair carries a trace context in a traceparent and a tracestate field of
// a message (a grant's or a completion's). It implements
// go.opentelemetry.io/otel/propagation.TextMapCarrier.
type Pair struct{ Parent, State *string }

// Get returns the value of key, "" for a key Pair does not carry.
func (c Pair) Get(key string) string {
	switch key {
	case Traceparent:
		return *c.Parent
	case Tracestate:
		return *c.State
	}
	return ""
}

// Set sets the value of key; other keys are dropped.
func (c Pair) Set(key, value string) {
	switch key {
	case Traceparent:
		*c.Parent = value
	case Tracestate:
		*c.State = value
	}
}

// Keys lists the keys Pair carries.
func (c Pair) Keys() []string { return []string{Traceparent, Tracestate} }
