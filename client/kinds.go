package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// KindSettings are the settings of one kind of a pool: JSON Schemas its
// tasks' payloads and outputs must match, and defaults for its tasks ahead
// of the pool's.
//
// A submit (or a schedule, or a workflow step) whose payload does not match
// PayloadSchema is refused with an *InvalidError on field "payload" naming
// the failing JSON path. A successful attempt whose output does not match
// OutputSchema fails the task for good, with a message naming the path.
type KindSettings struct {
	Pool string
	Kind string
	// PayloadSchema and OutputSchema are JSON Schema documents (draft
	// 2020-12 unless they say otherwise); empty: none.
	PayloadSchema []byte
	OutputSchema  []byte
	// Timeout, MaxAttempts and Backoff are the defaults of the kind's tasks
	// that set none (0 and nil: the pool's, else the cluster's; a timeout
	// of 0 is no timeout).
	Timeout     time.Duration
	MaxAttempts int
	Backoff     *Backoff
}

// KindChange is a change of a kind's settings: the fields set (non-nil
// pointers) replace the current ones, the others are kept. See
// KindSettings for their meaning.
type KindChange struct {
	// PayloadSchema and OutputSchema set a schema; a pointer to an empty
	// document removes it. A schema is self-contained: one that does not
	// compile, or refers to another document, is refused.
	PayloadSchema *[]byte
	OutputSchema  *[]byte
	// Timeout sets the kind's default timeout; 0 removes it.
	Timeout     *time.Duration
	MaxAttempts *int
	// Backoff sets the kind's default backoff; &Backoff{} removes it.
	Backoff *Backoff
}

// SetKind changes the settings of kind in pool (see KindChange) and returns
// them after the change. The change is replicated with the pool's settings:
// every later leader applies it. A bad value (a schema that does not
// compile, a negative timeout, a bad backoff) is refused with an
// *InvalidError naming the field (payload_schema, output_schema, timeout,
// backoff, ...), and nothing changes. SetKind is idempotent and retried
// like a schedule change.
func (c *Client) SetKind(ctx context.Context, pool, kind string, change KindChange) (*KindSettings, error) {
	what := fmt.Sprintf("setting kind %s of pool %s", kind, pool)
	req, err := kindChangeToProto(pool, kind, change)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := unary(ctx, c, what, idempotent, req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SetKindRequest]) (*connect.Response[cronoqv1.SetKindResponse], error) {
			return ep.pools.SetKind
		})
	if err != nil {
		return nil, err
	}
	return kindAnswer(what, resp.GetKind())
}

// GetKind returns the settings of kind in pool: empty ones (with its
// names) when none were set. A pool outside the agent's fixed list of
// pools is refused (ErrInvalid).
func (c *Client) GetKind(ctx context.Context, pool, kind string) (*KindSettings, error) {
	what := fmt.Sprintf("getting kind %s of pool %s", kind, pool)
	resp, err := unary(ctx, c, what, read, &cronoqv1.GetKindRequest{Pool: pool, Kind: kind},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetKindRequest]) (*connect.Response[cronoqv1.GetKindResponse], error) {
			return ep.pools.GetKind
		})
	if err != nil {
		return nil, err
	}
	return kindAnswer(what, resp.GetKind())
}

// kindAnswer converts the kind settings a node answered with.
func kindAnswer(what string, k *cronoqv1.KindSettings) (*KindSettings, error) {
	if k == nil {
		return nil, fmt.Errorf("%s: node answered without the kind's settings", what)
	}
	out := kindFromProto(k)
	return &out, nil
}

func kindFromProto(k *cronoqv1.KindSettings) KindSettings {
	out := KindSettings{
		Pool:        k.GetPool(),
		Kind:        k.GetKind(),
		Timeout:     k.GetTimeout().AsDuration(),
		MaxAttempts: int(k.GetMaxAttempts()),
	}
	if doc := k.GetPayloadSchema(); len(doc) > 0 {
		out.PayloadSchema = slices.Clone(doc)
	}
	if doc := k.GetOutputSchema(); len(doc) > 0 {
		out.OutputSchema = slices.Clone(doc)
	}
	if b := k.GetBackoff(); b != nil {
		out.Backoff = &Backoff{Initial: b.GetInitial().AsDuration(), Max: b.GetMax().AsDuration(), Jitter: b.GetJitter()}
	}
	return out
}

// kindChangeToProto converts a change, refusing only what the wire cannot
// carry (the cluster checks the rest).
func kindChangeToProto(pool, kind string, ch KindChange) (*cronoqv1.SetKindRequest, error) {
	req := &cronoqv1.SetKindRequest{Pool: pool, Kind: kind}
	// Present, even when empty: that removes the schema. A nil slice would
	// be absent on the wire.
	if doc := ch.PayloadSchema; doc != nil {
		req.PayloadSchema = append([]byte{}, *doc...)
	}
	if doc := ch.OutputSchema; doc != nil {
		req.OutputSchema = append([]byte{}, *doc...)
	}
	if t := ch.Timeout; t != nil {
		// Present, even when 0: that removes the kind's timeout.
		req.Timeout = durationpb.New(*t)
	}
	if n := ch.MaxAttempts; n != nil {
		if *n < 0 || int64(*n) > int64(^uint32(0)) {
			return nil, &InvalidError{Field: "max_attempts", Reason: "out of range"}
		}
		req.MaxAttempts = new(uint32(*n))
	}
	if b := ch.Backoff; b != nil {
		req.Backoff = &cronoqv1.Backoff{Initial: durationToProto(b.Initial), Max: durationToProto(b.Max), Jitter: b.Jitter}
	}
	return req, nil
}
