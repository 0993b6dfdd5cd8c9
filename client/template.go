package client

import (
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// Template is what a task is made of, the same whoever asks for it: a
// submit (TaskSpec), a recurring schedule at each fire (Schedule.Task), and
// every stored Task. Fields left zero take the cluster's defaults.
type Template struct {
	Pool string
	Kind string
	// Priority is PriorityHigh, PriorityNormal (also "") or PriorityLow.
	Priority string
	Payload  []byte
	// Labels are the capacity labels a worker must offer to run the task.
	Labels map[string]string
	// Tags are free key/values carried to the worker.
	Tags map[string]string
	// Timeout bounds each attempt; 0 means none.
	Timeout     time.Duration
	MaxAttempts int
	// Backoff overrides the cluster's retry backoff when non-nil.
	Backoff *Backoff
	// OrderingKey puts the task in a lane of its pool: tasks with the same
	// key run one at a time, in submit order.
	OrderingKey string
	// ConcurrencyKey puts the task in a group whose running tasks the
	// pool's concurrency limit caps.
	ConcurrencyKey string
}

// Backoff is a retry backoff policy: exponential from Initial, capped at Max,
// with ±Jitter (a fraction, 0.2 = 20 %).
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  float64
}

// templateToProto converts t, refusing only what the wire cannot carry (the
// cluster checks the rest).
func templateToProto(t *Template) (*cronoqv1.TaskTemplate, error) {
	prio, err := priorityToProto(t.Priority)
	if err != nil {
		return nil, err
	}
	if t.MaxAttempts < 0 || int64(t.MaxAttempts) > int64(^uint32(0)) {
		return nil, &InvalidError{Field: "max_attempts", Reason: "out of range"}
	}
	out := &cronoqv1.TaskTemplate{
		Pool:        t.Pool,
		Kind:        t.Kind,
		Priority:    prio,
		Payload:     t.Payload,
		Labels:      kvsToProto(t.Labels),
		Tags:        kvsToProto(t.Tags),
		Timeout:     durationToProto(t.Timeout),
		MaxAttempts: uint32(t.MaxAttempts),

		OrderingKey:    t.OrderingKey,
		ConcurrencyKey: t.ConcurrencyKey,
	}
	if b := t.Backoff; b != nil {
		out.Backoff = &cronoqv1.Backoff{Initial: durationToProto(b.Initial), Max: durationToProto(b.Max), Jitter: b.Jitter}
	}
	return out, nil
}

func templateFromProto(p *cronoqv1.TaskTemplate) Template {
	t := Template{
		Pool:        p.GetPool(),
		Kind:        p.GetKind(),
		Priority:    priorityFromProto(p.GetPriority()),
		Payload:     p.GetPayload(),
		Labels:      kvsFromProto(p.GetLabels()),
		Tags:        kvsFromProto(p.GetTags()),
		Timeout:     p.GetTimeout().AsDuration(),
		MaxAttempts: int(p.GetMaxAttempts()),

		OrderingKey:    p.GetOrderingKey(),
		ConcurrencyKey: p.GetConcurrencyKey(),
	}
	if b := p.GetBackoff(); b != nil {
		t.Backoff = &Backoff{Initial: b.GetInitial().AsDuration(), Max: b.GetMax().AsDuration(), Jitter: b.GetJitter()}
	}
	return t
}

func priorityToProto(p string) (cronoqv1.Priority, error) {
	switch p {
	case "", PriorityNormal:
		return cronoqv1.Priority_PRIORITY_NORMAL, nil
	case PriorityHigh:
		return cronoqv1.Priority_PRIORITY_HIGH, nil
	case PriorityLow:
		return cronoqv1.Priority_PRIORITY_LOW, nil
	}
	return 0, &InvalidError{Field: "priority", Reason: fmt.Sprintf("%q is not high, normal or low", p)}
}

func priorityFromProto(p cronoqv1.Priority) string {
	switch p {
	case cronoqv1.Priority_PRIORITY_HIGH:
		return PriorityHigh
	case cronoqv1.Priority_PRIORITY_LOW:
		return PriorityLow
	default:
		return PriorityNormal
	}
}

// kvsToProto turns a map into KV pairs sorted by key, so the same map always
// encodes the same way.
func kvsToProto(m map[string]string) []*cronoqv1.KV {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*cronoqv1.KV, len(keys))
	for i, k := range keys {
		out[i] = &cronoqv1.KV{Key: k, Value: m[k]}
	}
	return out
}

func kvsFromProto(kvs []*cronoqv1.KV) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// durationToProto writes a duration; 0 is unset.
func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// isZeroTemplate reports whether t sets nothing.
func isZeroTemplate(t *Template) bool {
	return t.Pool == "" && t.Kind == "" && t.Priority == "" && len(t.Payload) == 0 &&
		len(t.Labels) == 0 && len(t.Tags) == 0 && t.Timeout == 0 && t.MaxAttempts == 0 &&
		t.Backoff == nil && t.OrderingKey == "" && t.ConcurrencyKey == ""
}
