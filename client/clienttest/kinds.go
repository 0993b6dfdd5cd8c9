package clienttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/internal/units"
)

// Kind settings, per (pool, kind): JSON Schemas for payloads and outputs,
// and defaults for the kind's tasks ahead of the pool's. As on a node they
// are part of the pool's settings: setting a kind's makes the pool's
// settings an operator's (replicated).

// maxSchema bounds a schema document, as on a node.
const maxSchema = 256 << 10

// schemaURL names the one document a kind's schema compiles from.
const schemaURL = "file:///cronoq/kind-schema.json"

// noLoader refuses every reference to another document, as a node does: a
// schema is self-contained.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: schemas may not refer to other documents", url)
}

// kindState is what PoolService.SetKind made of a kind: its settings (as
// answered, pool included) and its compiled schemas (nil when none).
type kindState struct {
	settings        *cronoqv1.KindSettings
	payload, output *jsonschema.Schema
}

// compileSchema compiles a JSON Schema document as a node does (draft
// 2020-12 unless it says otherwise).
func compileSchema(doc []byte) (*jsonschema.Schema, error) {
	if len(doc) > maxSchema {
		return nil, errors.New(units.TooBig(len(doc), maxSchema))
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, err
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("not a valid schema: %s", schemaError(err))
	}
	return sch, nil
}

// schemaError says where and why a JSON document fails its schema: the
// JSON pointer of the first failing value and the rule it breaks.
func schemaError(err error) string {
	var se *jsonschema.SchemaValidationError
	if errors.As(err, &se) {
		err = se.Err // the schema against the metaschema
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve.Error()
}

// validateJSON checks doc against sch: nil when it matches, else the
// reason naming the failing JSON path.
func validateJSON(sch *jsonschema.Schema, doc []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if err := sch.Validate(v); err != nil {
		return errors.New(schemaError(err))
	}
	return nil
}

// kindLocked returns the settings of kind in pool, nil when none were set.
func (c *Cluster) kindLocked(pool, kind string) *kindState {
	if st := c.pools[pool]; st != nil {
		return st.kinds[kind]
	}
	return nil
}

// checkPayloadLocked refuses a payload that fails its kind's schema, as a
// node does: on field payload, naming the failing JSON path.
func (c *Cluster) checkPayloadLocked(tpl *cronoqv1.TaskTemplate) error {
	ks := c.kindLocked(tpl.GetPool(), tpl.GetKind())
	if ks == nil || ks.payload == nil {
		return nil
	}
	if err := validateJSON(ks.payload, tpl.GetPayload()); err != nil {
		return invalid("payload", "does not match the schema of kind %q: %v", tpl.GetKind(), err)
	}
	return nil
}

// outputErrorLocked returns why the output of task t fails its kind's
// schema, or "".
func (c *Cluster) outputErrorLocked(t *task, output []byte) string {
	kind := t.p.GetTemplate().GetKind()
	ks := c.kindLocked(t.pool(), kind)
	if ks == nil || ks.output == nil {
		return ""
	}
	if err := validateJSON(ks.output, output); err != nil {
		return fmt.Sprintf("output does not match the schema of kind %q: %v", kind, err)
	}
	return ""
}

// SetKind changes the settings of a kind of a pool (the fields present),
// checked as a real node checks them, and answers with the kind's settings
// after the change.
func (p *poolService) SetKind(ctx context.Context, req *connect.Request[cronoqv1.SetKindRequest]) (*connect.Response[cronoqv1.SetKindResponse], error) {
	return unary(ctx, p.n, req, leaderCall, func(*served) (*cronoqv1.SetKindResponse, error) {
		c := p.n.c
		ks, err := c.kindChangeLocked(req.Msg)
		if err != nil {
			return nil, err
		}
		pool := req.Msg.GetPool()
		st := c.pools[pool]
		if st == nil {
			st = &poolState{limits: defaultLimits()}
			c.pools[pool] = st
		}
		if st.kinds == nil {
			st.kinds = map[string]*kindState{}
		}
		st.kinds[req.Msg.GetKind()] = ks
		c.applied++
		return &cronoqv1.SetKindResponse{Kind: proto.Clone(ks.settings).(*cronoqv1.KindSettings)}, nil
	})
}

// GetKind answers with the settings of a kind of a pool: empty ones, with
// the kind's name, when none were set.
func (p *poolService) GetKind(ctx context.Context, req *connect.Request[cronoqv1.GetKindRequest]) (*connect.Response[cronoqv1.GetKindResponse], error) {
	return unary(ctx, p.n, req, leaderCall, func(*served) (*cronoqv1.GetKindResponse, error) {
		c := p.n.c
		pool, kind := req.Msg.GetPool(), req.Msg.GetKind()
		if err := c.checkPool(pool); err != nil {
			return nil, err
		}
		out := &cronoqv1.KindSettings{Pool: pool, Kind: kind}
		if ks := c.kindLocked(pool, kind); ks != nil {
			out = proto.Clone(ks.settings).(*cronoqv1.KindSettings)
		}
		return &cronoqv1.GetKindResponse{Kind: out}, nil
	})
}

// kindChangeLocked checks a change of a kind's settings as a real node
// does (a refusal names the field) and returns the kind's settings with it
// applied. Nothing changes until the whole change is checked.
func (c *Cluster) kindChangeLocked(req *cronoqv1.SetKindRequest) (*kindState, error) {
	pool, kind := req.GetPool(), req.GetKind()
	if err := c.checkPool(pool); err != nil {
		return nil, err
	}
	switch {
	case kind == "":
		return nil, invalid("kind", "must not be empty")
	case len(kind) > maxKindLen:
		return nil, invalid("kind", "%s", units.TooBig(len(kind), maxKindLen))
	}
	ks := &kindState{settings: &cronoqv1.KindSettings{Pool: pool, Kind: kind}}
	if cur := c.kindLocked(pool, kind); cur != nil {
		ks = &kindState{settings: proto.Clone(cur.settings).(*cronoqv1.KindSettings), payload: cur.payload, output: cur.output}
	}
	s := ks.settings
	for _, f := range []struct {
		field string
		doc   []byte // nil: absent
		dst   *[]byte
		sch   **jsonschema.Schema
	}{
		{"payload_schema", req.PayloadSchema, &s.PayloadSchema, &ks.payload},
		{"output_schema", req.OutputSchema, &s.OutputSchema, &ks.output},
	} {
		switch {
		case f.doc == nil:
			continue
		case len(f.doc) == 0:
			*f.dst, *f.sch = nil, nil
			continue
		}
		sch, err := compileSchema(f.doc)
		if err != nil {
			return nil, invalid(f.field, "%v", err)
		}
		*f.dst, *f.sch = slices.Clone(f.doc), sch
	}
	if req.GetTimeout() != nil {
		d, err := durationOf("timeout", req.GetTimeout())
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, invalid("timeout", "must not be negative")
		}
		s.Timeout = dur(d)
	}
	if req.MaxAttempts != nil {
		s.MaxAttempts = req.GetMaxAttempts()
	}
	if b := req.GetBackoff(); b != nil {
		bo, err := checkBackoff(b)
		if err != nil {
			return nil, err
		}
		s.Backoff = bo
	}
	return ks, nil
}
