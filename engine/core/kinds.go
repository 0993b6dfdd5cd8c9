package core

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/internal/units"
)

// Kind settings: per (pool, kind), JSON Schemas for payloads and outputs,
// and defaults for the kind's tasks. They live in the pool's replicated
// settings (fsm.Pool.Kinds); the compiled schemas are kept here, built
// when first needed.

// maxSchema bounds a schema document.
const maxSchema = 256 << 10

// schemaURL names the one document a kind's schema compiles from.
const schemaURL = "file:///cronoq/kind-schema.json"

// noLoader refuses every reference to another document: a schema is
// self-contained, and the leader never reads files or the network for it.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: schemas may not refer to other documents", url)
}

// compileSchema compiles a JSON Schema document (draft 2020-12 unless it
// says otherwise).
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

// kindSchemas are the compiled schemas of one kind.
type kindSchemas struct {
	payload, output *jsonschema.Schema
}

// schemas returns the compiled schemas of kind in p (nil when it has
// none). Schemas were compiled when they were set, so compiling again
// cannot fail unless the library changed; a schema that no longer compiles
// is treated as absent rather than refuse every task.
func (p *pool) schemas(kind string) *kindSchemas {
	ks, ok := p.cfg.Kinds[kind]
	if !ok || (len(ks.PayloadSchema) == 0 && len(ks.OutputSchema) == 0) {
		return nil
	}
	if s, ok := p.compiled[kind]; ok {
		return s
	}
	s := &kindSchemas{}
	if len(ks.PayloadSchema) > 0 {
		s.payload, _ = compileSchema(ks.PayloadSchema)
	}
	if len(ks.OutputSchema) > 0 {
		s.output, _ = compileSchema(ks.OutputSchema)
	}
	if p.compiled == nil {
		p.compiled = make(map[string]*kindSchemas)
	}
	p.compiled[kind] = s
	return s
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

// checkPayload refuses a payload that fails its kind's schema.
func (c *Core) checkPayload(tpl *fsm.Template) error {
	p, ok := c.pools[tpl.Pool]
	if !ok {
		if c.poolRecs[tpl.Pool] == nil {
			return nil // only replicated settings have kinds
		}
		p = c.getPool(tpl.Pool)
	}
	s := p.schemas(tpl.Kind)
	if s == nil || s.payload == nil {
		return nil
	}
	if err := validateJSON(s.payload, tpl.Payload); err != nil {
		return Invalid("payload", "does not match the schema of kind %q: %v", tpl.Kind, err)
	}
	return nil
}

// checkOutput returns why an output fails its kind's schema, or "".
func (c *Core) checkOutput(t *task, output []byte) string {
	s := t.pool.schemas(t.kind)
	if s == nil || s.output == nil {
		return ""
	}
	if err := validateJSON(s.output, output); err != nil {
		return fmt.Sprintf("output does not match the schema of kind %q: %v", t.kind, err)
	}
	return ""
}

// KindChange is an operator's change of a kind's settings: the fields set
// replace the current ones (an empty schema removes one).
type KindChange struct {
	Pool, Kind    string
	PayloadSchema *[]byte
	OutputSchema  *[]byte
	Timeout       *time.Duration
	MaxAttempts   *uint32
	Backoff       *fsm.Backoff
}

// SetKind changes the settings of a kind of a pool through the log, as
// part of the pool's settings. The reply (held) is the kind's
// fsm.KindSettings after the change. Refused: a schema that does not
// compile (naming it), a bad default, an unknown pool of a fixed list, or
// a cluster that does not understand pool settings yet.
func (c *Core) SetKind(now time.Time, req ReqID, ch KindChange) {
	c.begin(now)
	defer c.serve()
	if err := c.checkPool(ch.Pool); err != nil {
		c.fail(req, err)
		return
	}
	switch {
	case ch.Kind == "":
		c.fail(req, Invalid("kind", "must not be empty"))
		return
	case len(ch.Kind) > c.cfg.MaxKindLen:
		c.fail(req, Invalid("kind", "%s", units.TooBig(len(ch.Kind), c.cfg.MaxKindLen)))
		return
	}
	if err := c.requireVersion("kind settings", 4); err != nil {
		c.fail(req, err)
		return
	}
	p := c.getPool(ch.Pool)
	ks := p.cfg.Kinds[ch.Kind]
	ks.Kind = ch.Kind
	for _, s := range []struct {
		field string
		doc   *[]byte
		dst   *[]byte
	}{{"payload_schema", ch.PayloadSchema, &ks.PayloadSchema}, {"output_schema", ch.OutputSchema, &ks.OutputSchema}} {
		if s.doc == nil {
			continue
		}
		if len(*s.doc) == 0 {
			*s.dst = nil
			continue
		}
		if _, err := compileSchema(*s.doc); err != nil {
			c.fail(req, Invalid(s.field, "%v", err))
			return
		}
		*s.dst = slices.Clone(*s.doc)
	}
	if ch.Timeout != nil {
		if *ch.Timeout < 0 {
			c.fail(req, Invalid("timeout", "must not be negative"))
			return
		}
		ks.Timeout = *ch.Timeout
	}
	if ch.MaxAttempts != nil {
		ks.MaxAttempts = *ch.MaxAttempts
	}
	if ch.Backoff != nil {
		if err := checkBackoff(*ch.Backoff); err != nil {
			c.fail(req, err)
			return
		}
		ks.Backoff = *ch.Backoff
	}
	cfg := p.cfg
	cfg.Kinds = make(map[string]fsm.KindSettings, len(p.cfg.Kinds)+1)
	for k, v := range p.cfg.Kinds {
		cfg.Kinds[k] = v
	}
	cfg.Kinds[ch.Kind] = ks
	rec := poolRecord(ch.Pool, cfg)
	rec.UpdatedAt = c.now
	c.mutate(fsm.Mutation{PutPool: rec})
	p.rec = rec
	delete(p.compiled, ch.Kind)
	c.configure(p, poolConfigOf(rec))
	c.reply(req, ks)
}

// Kind returns the settings of a kind of a pool (zero ones, with the
// kind's name, when none were set).
func (c *Core) Kind(pool, kind string) (fsm.KindSettings, error) {
	if err := c.checkPool(pool); err != nil {
		return fsm.KindSettings{}, err
	}
	ks, ok := c.poolConfig(pool).Kinds[kind]
	if !ok {
		ks.Kind = kind
	}
	return ks, nil
}

// checkBackoff refuses a backoff no task could use.
func checkBackoff(bo fsm.Backoff) error {
	if bo == (fsm.Backoff{}) {
		return nil
	}
	switch {
	case bo.Initial <= 0:
		return Invalid("backoff", "initial delay must be positive")
	case bo.Max != 0 && bo.Max < bo.Initial:
		return Invalid("backoff", "max delay must be at least the initial delay")
	case bo.Jitter < 0 || bo.Jitter >= 1:
		return Invalid("backoff", "jitter must be in [0, 1)")
	}
	return nil
}
