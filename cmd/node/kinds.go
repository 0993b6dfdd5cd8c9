package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronoq/cronoq/client"
)

// The kind command: the settings of one kind of a pool, its payload and
// output schemas and the defaults of its tasks.

func init() {
	register("kind", command{Summary: "Show and change the settings of a kind of a pool (schemas, defaults): show, set", Run: runKind})
}

// kindCommands are the subcommands of `cronoq kind`.
var kindCommands = map[string]command{
	"show": {Summary: "Show the settings of a kind of a pool", Run: runKindShow},
	"set":  {Summary: "Change the settings of a kind of a pool", Run: runKindSet},
}

func runKind(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq kind", kindCommands, args)
}

// kindObjectHelp describes the kind's settings object, for the help of the
// commands that print it.
const kindObjectHelp = `The kind's settings object:

  {"pool": "NAME", "kind": "KIND",
   "payload_schema": {...},  (the JSON Schema document; null when none)
   "output_schema": {...},  (null when none)
   "timeout_s": SECONDS,  (when set)
   "max_attempts": N,
   "backoff": {"initial_s", "max_s", "jitter"}}  (when set)

max_attempts 0 and no backoff mean the pool's defaults (else the cluster's);
no timeout means the kind's tasks have none unless they set one.`

func runKindShow(ctx context.Context, s stdio, args []string) error {
	c := newCmd("kind show", "cronoq kind show POOL KIND", `
Show the settings of a kind of a pool: the JSON Schemas its tasks' payloads
and outputs must match, and the defaults of its tasks. A kind nobody set is
shown with empty settings.

JSON output: the kind's settings object.

`+kindObjectHelp)
	cf := c.clientFlags()
	if err := c.parse(s, args, 2); err != nil {
		return err
	}
	pool, kind, err := kindArgs(c)
	if err != nil {
		return err
	}
	k, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.KindSettings, error) {
		return cl.GetKind(ctx, pool, kind)
	})
	if err != nil {
		return err
	}
	return showKind(s, cf, k)
}

// kindArgs reads the POOL and KIND arguments and words the cluster's
// refusal of them.
func kindArgs(c *cmd) (pool, kind string, err error) {
	pool, kind = c.args[0], c.args[1]
	switch {
	case pool == "":
		return "", "", c.usageErr("empty POOL")
	case kind == "":
		return "", "", c.usageErr("empty KIND")
	}
	c.explain = explainKindField
	return pool, kind, nil
}

// explainKindField words the refusal of a field of a kind change that no
// flag of `kind set` shares the name of.
func explainKindField(field, reason string) string {
	switch {
	case field == "pool":
		return "invalid POOL: " + reason
	case field == "kind":
		return "invalid KIND: " + reason
	case strings.HasPrefix(field, "backoff"):
		return "invalid -backoff: " + reason
	}
	return ""
}

func showKind(s stdio, cf *clientFlags, k *client.KindSettings) error {
	if cf.out.json() {
		return writeJSON(s.Stdout, newKindJSON(k))
	}
	return writeKindText(s.Stdout, k)
}

func runKindSet(ctx context.Context, s stdio, args []string) error {
	c := newCmd("kind set", "cronoq kind set POOL KIND [flags]", `
Change the settings of a kind of a pool: only the flags given change, the
others keep their values. The change is replicated with the pool's settings:
every node keeps it and every later leader applies it. A bad value is refused
and nothing changes.

-payload-schema and -output-schema read a JSON Schema document (draft
2020-12 unless it says otherwise) from FILE, - for the standard input; an
empty FILE (-payload-schema "") removes the schema. A schema must be
self-contained: one that refers to another document is refused. A submit of
the kind whose payload does not match the payload schema is refused, naming
the failing JSON path ('cronoq submit' exits 2). An attempt that succeeds
with an output that does not match the output schema fails the task for good
(it is not retried), with a message naming the path.

-timeout, -max-attempts and -backoff are the defaults of the kind's tasks
that set none, ahead of the pool's (see 'cronoq pool set -h'). -timeout 0,
-max-attempts 0 and -backoff default remove the kind's: the pool's apply
again (and no timeout).

-backoff INITIAL[:MAX[:JITTER]] is the retry backoff: INITIAL doubled at each
failed attempt, capped at MAX, spread by +-JITTER (a fraction in [0, 1)); for
example 1s:5m:0.2.

JSON output: the kind's settings object after the change.

`+kindObjectHelp)
	cf := c.clientFlags()
	var ch client.KindChange
	var (
		payloadFile, outputFile string
		timeout                 time.Duration
		maxAttempts             int
		backoff                 client.Backoff
	)
	c.fs.StringVar(&payloadFile, "payload-schema", "", "the JSON Schema of the kind's payloads: `FILE` (- for stdin, \"\" removes it)")
	c.fs.StringVar(&outputFile, "output-schema", "", "the JSON Schema of the kind's outputs: `FILE` (- for stdin, \"\" removes it)")
	c.fs.Var(durationValue{&timeout, false}, "timeout", "default per-attempt timeout of the kind's tasks (`DUR`, 0 = none)")
	c.fs.Var(intValue{&maxAttempts, 0}, "max-attempts", "default attempts of the kind's tasks (`N`, 0 = the pool's)")
	c.fs.Var(backoffValue{&backoff}, "backoff", "default retry backoff of the kind's tasks: `INITIAL[:MAX[:JITTER]]`, or default")
	if err := c.parse(s, args, 2); err != nil {
		return err
	}
	pool, kind, err := kindArgs(c)
	if err != nil {
		return err
	}
	if c.set("payload-schema") && c.set("output-schema") && payloadFile == "-" && outputFile == "-" {
		return c.usageErr("-payload-schema and -output-schema cannot both read the standard input")
	}
	n := 0
	c.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "addr", "o", "rpc-timeout":
			return
		}
		n++
		switch f.Name {
		case "timeout":
			ch.Timeout = &timeout
		case "max-attempts":
			ch.MaxAttempts = &maxAttempts
		case "backoff":
			ch.Backoff = &backoff
		}
	})
	if n == 0 {
		return c.usageErr("nothing to change: give at least one setting flag")
	}
	for _, f := range []struct {
		name, file string
		dst        **[]byte
	}{{"payload-schema", payloadFile, &ch.PayloadSchema}, {"output-schema", outputFile, &ch.OutputSchema}} {
		if !c.set(f.name) {
			continue
		}
		doc, err := readSchemaFile(s, f.name, f.file)
		if err != nil {
			return err
		}
		*f.dst = &doc
	}
	k, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.KindSettings, error) {
		return cl.SetKind(ctx, pool, kind, ch)
	})
	if err != nil {
		return err
	}
	return showKind(s, cf, k)
}

// readSchemaFile reads the schema document of flag -flagName from path
// ("-" is the standard input; "" is the empty document, which removes the
// schema). A document that is not JSON is a usage error naming the flag
// and the file; whether it is a schema is the cluster's to check.
func readSchemaFile(s stdio, flagName, path string) ([]byte, error) {
	var data []byte
	var err error
	switch path {
	case "":
		return []byte{}, nil
	case "-":
		if data, err = io.ReadAll(s.Stdin); err != nil {
			return nil, fmt.Errorf("reading -%s from stdin: %w", flagName, err)
		}
	default:
		if data, err = os.ReadFile(path); err != nil {
			return nil, usagef("reading -%s file: %v", flagName, err)
		}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, usagef("invalid -%s %s: empty document (-%s \"\" removes the schema)", flagName, fileName(path), flagName)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, usagef("invalid -%s %s: not JSON: %v", flagName, fileName(path), err)
	}
	return data, nil
}

// fileName names path in messages: "stdin" for "-".
func fileName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// ---------------------------------------------------------------------------
// JSON

// kindJSON is the kind's settings object (see kindObjectHelp).
type kindJSON struct {
	Pool          string          `json:"pool"`
	Kind          string          `json:"kind"`
	PayloadSchema json.RawMessage `json:"payload_schema"`
	OutputSchema  json.RawMessage `json:"output_schema"`
	TimeoutS      float64         `json:"timeout_s,omitempty"`
	MaxAttempts   int             `json:"max_attempts"`
	Backoff       *backoffJSON    `json:"backoff,omitempty"`
}

func newKindJSON(k *client.KindSettings) kindJSON {
	j := kindJSON{
		Pool:          k.Pool,
		Kind:          k.Kind,
		PayloadSchema: schemaJSON(k.PayloadSchema),
		OutputSchema:  schemaJSON(k.OutputSchema),
		TimeoutS:      seconds(k.Timeout),
		MaxAttempts:   k.MaxAttempts,
	}
	if b := k.Backoff; b != nil && *b != (client.Backoff{}) {
		j.Backoff = &backoffJSON{InitialS: seconds(b.Initial), MaxS: seconds(b.Max), Jitter: b.Jitter}
	}
	return j
}

// schemaJSON is a schema document as a JSON value: null when there is
// none, a string in the unlikely case that it is not JSON.
func schemaJSON(doc []byte) json.RawMessage {
	if len(doc) == 0 {
		return json.RawMessage("null")
	}
	if !json.Valid(doc) {
		s, _ := json.Marshal(string(doc))
		return s
	}
	return doc
}

// ---------------------------------------------------------------------------
// Text

// writeKindText writes a kind's settings as "field: value" lines, the
// schemas on one line each.
func writeKindText(w io.Writer, k *client.KindSettings) error {
	timeout := "none"
	if k.Timeout > 0 {
		timeout = k.Timeout.String()
	}
	maxAttempts := "the pool's default"
	if k.MaxAttempts > 0 {
		maxAttempts = strconv.Itoa(k.MaxAttempts)
	}
	backoff := "the pool's default"
	if b := k.Backoff; b != nil && *b != (client.Backoff{}) {
		backoff = backoffText(b)
	}
	fields := []struct{ name, value string }{
		{"pool", k.Pool},
		{"kind", k.Kind},
		{"payload schema", schemaText(k.PayloadSchema)},
		{"output schema", schemaText(k.OutputSchema)},
		{"timeout", timeout},
		{"max attempts", maxAttempts},
		{"backoff", backoff},
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s:\t%s\n", f.name, oneLine(f.value))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// schemaText is a schema document on one line ("none" when there is none).
func schemaText(doc []byte) string {
	if len(doc) == 0 {
		return "none"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, doc); err != nil {
		return string(doc)
	}
	return buf.String()
}
