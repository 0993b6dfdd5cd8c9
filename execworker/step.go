package execworker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/cronoq/cronoq/client"
)

// StepSpec is one step of a workflow as files write it: the steps of a
// workflow file (`cronoq workflow submit -f`, `cronoq recurring add
// -workflow`) and the lines of a spawn file. It carries JSON tags for
// those and HCL tags for the HCL form of workflow files, where a step is a
// block labelled with its name.
//
// Durations (timeout, delay) are Go durations such as "30s" or "1h30m";
// instants (run_at, deadline) are RFC 3339. Fields left zero take the
// cluster's defaults.
type StepSpec struct {
	// Name is the step's name: letters, digits, '-', '_' and '.'.
	Name string `json:"name" hcl:"name,label"`
	Pool string `json:"pool" hcl:"pool,optional"`
	Kind string `json:"kind" hcl:"kind,optional"`
	// Payload is the task's payload as text. In JSON it may also be any
	// other JSON value, which is taken as its compact JSON text.
	Payload Text `json:"payload" hcl:"payload,optional"`
	// PayloadBase64 is the payload as base64, for bytes that are not text;
	// it excludes Payload.
	PayloadBase64    string            `json:"payload_base64" hcl:"payload_base64,optional"`
	Priority         string            `json:"priority" hcl:"priority,optional"`
	Labels           map[string]string `json:"labels" hcl:"labels,optional"`
	Tags             map[string]string `json:"tags" hcl:"tags,optional"`
	Timeout          string            `json:"timeout" hcl:"timeout,optional"`
	MaxAttempts      int               `json:"max_attempts" hcl:"max_attempts,optional"`
	DependsOn        []string          `json:"depends_on" hcl:"depends_on,optional"`
	DependencyPolicy string            `json:"dependency_policy" hcl:"dependency_policy,optional"`
	External         bool              `json:"external" hcl:"external,optional"`
	Delay            string            `json:"delay" hcl:"delay,optional"`
	RunAt            string            `json:"run_at" hcl:"run_at,optional"`
	Deadline         string            `json:"deadline" hcl:"deadline,optional"`
	// OrderingKey and ConcurrencyKey are the task's flow-control keys (see
	// docs/flow-control.md).
	OrderingKey    string `json:"ordering_key" hcl:"ordering_key,optional"`
	ConcurrencyKey string `json:"concurrency_key" hcl:"concurrency_key,optional"`
}

// Text is a payload written in a JSON file: a JSON string stands for its
// text, null for nothing, and any other JSON value for its compact JSON
// encoding.
type Text string

// UnmarshalJSON implements json.Unmarshaler.
func (t *Text) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*t = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = Text(s)
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	*t = Text(buf.String())
	return nil
}

// FieldError is a field of a StepSpec that does not hold a valid value.
type FieldError struct {
	// Field is the field's name as files write it ("timeout", "run_at").
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Step checks the spec and converts it. It refuses (with a *FieldError) a
// missing pool or kind, an unknown priority or dependency policy, a
// duration, instant or base64 text that does not parse, delay with
// run_at, and empty names in depends_on; what the values must be beyond
// that is the cluster's to check.
func (s *StepSpec) Step() (client.Step, error) {
	switch {
	case s.Pool == "":
		return client.Step{}, fieldErr("pool", "required")
	case s.Kind == "":
		return client.Step{}, fieldErr("kind", "required")
	}
	tpl := client.Template{
		Pool:        s.Pool,
		Kind:        s.Kind,
		Priority:    s.Priority,
		Labels:      nilIfEmpty(s.Labels),
		Tags:        nilIfEmpty(s.Tags),
		MaxAttempts: s.MaxAttempts,

		OrderingKey:    s.OrderingKey,
		ConcurrencyKey: s.ConcurrencyKey,
	}
	switch s.Priority {
	case "", client.PriorityHigh, client.PriorityNormal, client.PriorityLow:
	default:
		return client.Step{}, fieldErr("priority", "%q is not high, normal or low", s.Priority)
	}
	switch {
	case s.MaxAttempts < 0:
		return client.Step{}, fieldErr("max_attempts", "must not be negative")
	case int64(s.MaxAttempts) > int64(^uint32(0)):
		return client.Step{}, fieldErr("max_attempts", "%d is out of range", s.MaxAttempts)
	}
	switch {
	case s.Payload != "" && s.PayloadBase64 != "":
		return client.Step{}, fieldErr("payload_base64", "excludes payload")
	case s.PayloadBase64 != "":
		b, err := base64.StdEncoding.DecodeString(s.PayloadBase64)
		if err != nil {
			return client.Step{}, fieldErr("payload_base64", "not standard base64: %v", err)
		}
		tpl.Payload = b
	case s.Payload != "":
		tpl.Payload = []byte(s.Payload)
	}
	var err error
	if tpl.Timeout, err = parseDuration("timeout", s.Timeout); err != nil {
		return client.Step{}, err
	}
	spec := client.TaskSpec{Template: tpl, External: s.External}
	switch s.DependencyPolicy {
	case "", client.DependencyPolicySucceeded, client.DependencyPolicyDone:
		spec.DependencyPolicy = s.DependencyPolicy
	default:
		return client.Step{}, fieldErr("dependency_policy", "%q is not succeeded or done", s.DependencyPolicy)
	}
	if s.Delay != "" && s.RunAt != "" {
		return client.Step{}, fieldErr("delay", "excludes run_at")
	}
	if spec.Delay, err = parseDuration("delay", s.Delay); err != nil {
		return client.Step{}, err
	}
	if spec.RunAt, err = parseTime("run_at", s.RunAt); err != nil {
		return client.Step{}, err
	}
	if spec.Deadline, err = parseTime("deadline", s.Deadline); err != nil {
		return client.Step{}, err
	}
	for i, d := range s.DependsOn {
		if d == "" {
			return client.Step{}, fieldErr(fmt.Sprintf("depends_on[%d]", i), "empty step name")
		}
	}
	var deps []string
	if len(s.DependsOn) > 0 {
		deps = append(deps, s.DependsOn...)
	}
	return client.Step{Name: s.Name, Task: spec, DependsOn: deps}, nil
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fieldErr(field, "%q is not a duration (examples: 30s, 5m, 1h30m)", s)
	}
	if d < 0 {
		return 0, fieldErr(field, "must not be negative")
	}
	return d, nil
}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fieldErr(field, "%q is not an RFC 3339 time (example: 2030-01-02T15:04:05Z)", s)
	}
	return t, nil
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// DecodeJSON decodes one JSON value from data into v strictly: a field v
// does not have is an error naming it, and so is anything after the value.
// Errors name the field in the file's terms ("unknown field \"colour\"",
// "timeout: want string, got number").
func DecodeJSON(data []byte, v any) error {
	// encoding/json matches field names regardless of case; a file must
	// spell them exactly.
	if err := checkFieldNames(data, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return explainJSON(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// explainJSON rewrites the errors of encoding/json in the file's terms.
func explainJSON(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return fmt.Errorf("want %s, got %s", jsonType(te.Type.Kind().String()), te.Value)
		}
		return fmt.Errorf("%s: want %s, got %s", field, jsonType(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return fmt.Errorf("not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.Is(err, io.EOF):
		return errors.New("empty: want a JSON value")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not valid JSON: unexpected end")
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// jsonType names a Go kind as the JSON type that decodes into it.
func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "true or false"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "integer"
	case "float32", "float64":
		return "number"
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	}
	return kind
}

// checkFieldNames refuses, when v points to a struct and data is a JSON
// object, a key that is not exactly the JSON name of one of its fields.
// Anything else is left to the decoder.
func checkFieldNames(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return nil
	}
	known := map[string]bool{}
	jsonFields(t.Elem(), known)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !known[k] {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	return nil
}

// jsonFields adds the JSON names of the fields of struct type t (those of
// embedded structs included) to names.
func jsonFields(t reflect.Type, names map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonFields(f.Type, names)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
}
