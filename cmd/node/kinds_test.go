package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/client/clienttest"
)

const (
	resizeSchema = `{
  "type": "object",
  "required": ["width"],
  "properties": {"width": {"type": "integer", "minimum": 1}}
}
`
	resultSchema = `{"type": "object", "required": ["url"]}`
)

// fullKind has every field set.
func fullKind() *client.KindSettings {
	return &client.KindSettings{
		Pool: "media", Kind: "resize",
		PayloadSchema: []byte(resizeSchema),
		OutputSchema:  []byte(resultSchema),
		Timeout:       90 * time.Second,
		MaxAttempts:   5,
		Backoff:       &client.Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.1},
	}
}

func TestKindGolden(t *testing.T) {
	t.Parallel()
	golden(t, "kind_full.json", renderJSON(t, newKindJSON(fullKind())))
	golden(t, "kind_default.json", renderJSON(t, newKindJSON(&client.KindSettings{Pool: "media", Kind: "thumb"})))
	var buf bytes.Buffer
	require.NoError(t, writeKindText(&buf, fullKind()))
	golden(t, "kind_full.txt", buf.Bytes())
}

// TestKindJSONShape checks the contract on the decoded objects,
// independently of the golden files.
func TestKindJSONShape(t *testing.T) {
	t.Parallel()
	decode := func(v any) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(renderJSON(t, v), &m))
		return m
	}
	full := decode(newKindJSON(fullKind()))
	require.Equal(t, map[string]any{
		"pool": "media", "kind": "resize",
		"payload_schema": map[string]any{"type": "object", "required": []any{"width"},
			"properties": map[string]any{"width": map[string]any{"type": "integer", "minimum": 1.0}}},
		"output_schema": map[string]any{"type": "object", "required": []any{"url"}},
		"timeout_s":     90.0,
		"max_attempts":  5.0,
		"backoff":       map[string]any{"initial_s": 1.0, "max_s": 60.0, "jitter": 0.1},
	}, full)
	def := decode(newKindJSON(&client.KindSettings{Pool: "media", Kind: "thumb"}))
	require.Equal(t, map[string]any{"pool": "media", "kind": "thumb", "payload_schema": nil, "output_schema": nil, "max_attempts": 0.0}, def)
}

func TestKindSetShow(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	dir := t.TempDir()
	payloadFile := filepath.Join(dir, "payload.json")
	require.NoError(t, os.WriteFile(payloadFile, []byte(resizeSchema), 0o644))

	// A kind nobody set.
	r := runCLI(t, "", "kind", "show", "media", "resize", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"pool": "media", "kind": "resize", "payload_schema": null, "output_schema": null, "max_attempts": 0}`, r.stdout)
	r = runCLI(t, "", "kind", "show", "media", "resize", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"pool:           media\n"+
		"kind:           resize\n"+
		"payload schema: none\n"+
		"output schema:  none\n"+
		"timeout:        none\n"+
		"max attempts:   the pool's default\n"+
		"backoff:        the pool's default\n", r.stdout)

	// The output schema from stdin.
	r = runCLI(t, resultSchema, "kind", "set", "media", "resize", "-addr", addr, "-o", "json",
		"-payload-schema", payloadFile, "-output-schema", "-", "-timeout", "90s", "-max-attempts", "5", "-backoff", "1s:1m:0.1")
	requireOK(t, r)
	require.JSONEq(t, `{
		"pool": "media", "kind": "resize",
		"payload_schema": {"type": "object", "required": ["width"], "properties": {"width": {"type": "integer", "minimum": 1}}},
		"output_schema": {"type": "object", "required": ["url"]},
		"timeout_s": 90, "max_attempts": 5,
		"backoff": {"initial_s": 1, "max_s": 60, "jitter": 0.1}
	}`, r.stdout)
	req := f.Requests(cronoqv1connect.PoolServiceSetKindProcedure)[0].(*cronoqv1.SetKindRequest)
	require.Equal(t, "media", req.GetPool())
	require.Equal(t, "resize", req.GetKind())
	require.Equal(t, resizeSchema, string(req.GetPayloadSchema()), "sent as read")

	r = runCLI(t, "", "kind", "show", "-addr", addr, "media", "resize")
	requireOK(t, r)
	require.Equal(t, ""+
		"pool:           media\n"+
		"kind:           resize\n"+
		`payload schema: {"type":"object","required":["width"],"properties":{"width":{"type":"integer","minimum":1}}}`+"\n"+
		`output schema:  {"type":"object","required":["url"]}`+"\n"+
		"timeout:        1m30s\n"+
		"max attempts:   5\n"+
		"backoff:        1s doubling up to 1m0s, +-10%\n", r.stdout)

	// The kind's settings apply to the pool's submits: a payload its
	// schema refuses exits 2 naming the failing JSON path.
	r = runCLI(t, "", "submit", "-pool", "media", "-kind", "resize", "-payload", `{"width": 0}`, "-addr", addr)
	requireFailure(t, r, exitUsage, `invalid -payload: does not match the schema of kind "resize": at '/width': minimum: got 0, want 1`)
	r = runCLI(t, `{"height": 3}`, "submit", "-pool", "media", "-kind", "resize", "-payload", "@-", "-addr", addr)
	requireFailure(t, r, exitUsage, "invalid -payload:", "missing property 'width'")
	require.Empty(t, f.Tasks(), "nothing submitted")
	r = runCLI(t, "", "submit", "-pool", "media", "-kind", "resize", "-payload", `{"width": 3}`, "-addr", addr, "-o", "json")
	requireOK(t, r)
	id := decodeObject(t, r.stdout)["id"].(string)
	require.Equal(t, uint32(5), f.Task(id).GetTemplate().GetMaxAttempts(), "the kind's default")
	require.Equal(t, 90*time.Second, f.Task(id).GetTemplate().GetTimeout().AsDuration(), "the kind's default")

	// Only the flags given are sent; "" removes a schema, 0 and default
	// the defaults.
	r = runCLI(t, "", "kind", "set", "media", "resize", "-addr", addr, "-output-schema", "", "-timeout", "0", "-backoff", "default")
	requireOK(t, r)
	require.Contains(t, r.stdout, "payload schema: {")
	require.Contains(t, r.stdout, "output schema:  none\n")
	require.Contains(t, r.stdout, "timeout:        none\n")
	require.Contains(t, r.stdout, "max attempts:   5\n")
	require.Contains(t, r.stdout, "backoff:        the pool's default\n")
	req = f.Requests(cronoqv1connect.PoolServiceSetKindProcedure)[1].(*cronoqv1.SetKindRequest)
	require.Nil(t, req.PayloadSchema)
	require.NotNil(t, req.OutputSchema)
	require.Empty(t, req.GetOutputSchema())
	require.NotNil(t, req.GetTimeout())
	require.Zero(t, req.GetTimeout().AsDuration())
	require.Nil(t, req.MaxAttempts)
	require.NotNil(t, req.GetBackoff())

	r = runCLI(t, "", "kind", "set", "media", "resize", "-addr", addr, "-o", "json", "-payload-schema", "", "-max-attempts", "0")
	requireOK(t, r)
	require.JSONEq(t, `{"pool": "media", "kind": "resize", "payload_schema": null, "output_schema": null, "max_attempts": 0}`, r.stdout)

	// Refusals by the cluster name the flag (or the argument).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-payload-schema", "-"}, "invalid -payload-schema: not a valid schema: "},
		{[]string{"-output-schema", "-"}, "invalid -output-schema: not a valid schema: "},
	} {
		r = runCLI(t, `{"type": 5}`, append([]string{"kind", "set", "media", "resize", "-addr", addr}, tc.args...)...)
		requireFailure(t, r, exitUsage, tc.want)
	}
	r = runCLI(t, `{"$ref": "https://example.com/s.json"}`, "kind", "set", "media", "resize", "-addr", addr, "-payload-schema", "-")
	requireFailure(t, r, exitUsage, "invalid -payload-schema: ", "may not refer to other documents")
	require.Len(t, f.Requests(cronoqv1connect.PoolServiceSetKindProcedure), 6)
}

func TestKindRefusedArgs(t *testing.T) {
	t.Parallel()
	_, addr := startFake(t, clienttest.WithPools("p"))
	for _, args := range [][]string{
		{"kind", "set", "nope", "k", "-max-attempts", "1"},
		{"kind", "show", "nope", "k"},
	} {
		r := runCLI(t, "", append(args, "-addr", addr)...)
		requireFailure(t, r, exitUsage, `invalid POOL: unknown pool "nope"`)
	}
	r := runCLI(t, "", "kind", "set", "p", strings.Repeat("k", 300), "-max-attempts", "1", "-addr", addr)
	requireFailure(t, r, exitUsage, "invalid KIND: 300 bytes exceeds the limit of 256 bytes")
}

func TestKindLocalValidation(t *testing.T) {
	// A command that wrongly passed validation must not reach a node.
	t.Setenv("CRONOQ_ADDR", closedAddr)
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(notJSON, []byte("{type: object}"), 0o644))
	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"kind nothing", []string{"kind"}, []string{"missing command after 'cronoq kind'"}},
		{"kind unknown", []string{"kind", "rm", "p", "k"}, []string{`unknown command "kind rm"`}},
		{"show without kind", []string{"kind", "show", "p"}, []string{"missing argument (usage: cronoq kind show POOL KIND)"}},
		{"show three", []string{"kind", "show", "p", "k", "x"}, []string{`unexpected argument "x"`}},
		{"show empty pool", []string{"kind", "show", "", "k"}, []string{"empty POOL"}},
		{"show empty kind", []string{"kind", "show", "p", ""}, []string{"empty KIND"}},
		{"set nothing", []string{"kind", "set", "p", "k"}, []string{"nothing to change: give at least one setting flag"}},
		{"set only output", []string{"kind", "set", "p", "k", "-o", "json"}, []string{"nothing to change"}},
		{"set without kind", []string{"kind", "set", "p", "-max-attempts", "1"}, []string{"missing argument"}},
		{"set empty kind", []string{"kind", "set", "p", "", "-max-attempts", "1"}, []string{"empty KIND"}},
		{"set timeout", []string{"kind", "set", "p", "k", "-timeout", "-1s"}, []string{"flag -timeout: must not be negative"}},
		{"set max attempts", []string{"kind", "set", "p", "k", "-max-attempts", "-1"}, []string{"flag -max-attempts: must be at least 0"}},
		{"set backoff", []string{"kind", "set", "p", "k", "-backoff", "1m:1s"}, []string{`flag -backoff: MAX "1s": want a duration of at least INITIAL 1m0s`}},
		{"set missing file", []string{"kind", "set", "p", "k", "-payload-schema", filepath.Join(dir, "nope.json")},
			[]string{"reading -payload-schema file:", "nope.json"}},
		{"set not JSON", []string{"kind", "set", "p", "k", "-output-schema", notJSON}, []string{"invalid -output-schema " + notJSON + ": not JSON:"}},
		{"set empty file", []string{"kind", "set", "p", "k", "-payload-schema", empty},
			[]string{"invalid -payload-schema " + empty + `: empty document (-payload-schema "" removes the schema)`}},
		{"set stdin twice", []string{"kind", "set", "p", "k", "-payload-schema", "-", "-output-schema", "-"},
			[]string{"-payload-schema and -output-schema cannot both read the standard input"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireFailure(t, runCLI(t, "", tc.args...), exitUsage, tc.want...)
		})
	}
}

func TestKindCommandsHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		usage string
		flags []string
		about []string
	}{
		{[]string{"kind", "-h"}, "cronoq kind <command>", []string{"show", "set"}, nil},
		{[]string{"kind", "show", "-h"}, "cronoq kind show POOL KIND", []string{"-addr", "-o"},
			[]string{"JSON output: the kind's settings object.", `"payload_schema": {...},  (the JSON Schema document; null when none)`}},
		{[]string{"help", "kind", "set"}, "cronoq kind set POOL KIND [flags]",
			[]string{"-payload-schema", "-output-schema", "-timeout", "-max-attempts", "-backoff"},
			[]string{"JSON output: the kind's settings object after the change.", `(-payload-schema "") removes the schema`,
				`"timeout_s": SECONDS,  (when set)`}},
		{[]string{"submit", "-h"}, "cronoq submit", nil, []string{"exits 2,\nnaming the failing JSON path"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", tc.args...)
			requireOK(t, r)
			require.True(t, strings.HasPrefix(r.stdout, "Usage: "+tc.usage), "got %q", r.stdout)
			for _, f := range tc.flags {
				require.Regexp(t, `(?m)^  `+f+`( |$)`, r.stdout)
			}
			for _, a := range tc.about {
				require.Contains(t, r.stdout, a)
			}
		})
	}
}
