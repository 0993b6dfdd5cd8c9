package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/execworker"
)

// workflowFileHelp documents the workflow file for the commands that read
// one.
const workflowFileHelp = `
The workflow file is JSON or HCL, told apart by its extension (.json, .hcl),
else by its content (JSON starts with '{'); "-" reads it from the standard
input. In JSON:

  {"name": "nightly",
   "steps": [
     {"name": "extract", "pool": "etl", "kind": "extract", "payload": "s3://x"},
     {"name": "clean",   "pool": "etl", "kind": "clean", "depends_on": ["extract"]},
     {"name": "load",    "pool": "etl", "kind": "load",  "depends_on": ["clean"],
      "dependency_policy": "succeeded"}]}

The same in HCL, a step being a block labelled with its name:

  name = "nightly"

  step "extract" {
    pool    = "etl"
    kind    = "extract"
    payload = "s3://x"
  }

  step "clean" {
    pool       = "etl"
    kind       = "clean"
    depends_on = ["extract"]
  }

  step "load" {
    pool              = "etl"
    kind              = "load"
    depends_on        = ["clean"]
    dependency_policy = "succeeded"
  }

Step names are unique letters, digits, '-', '_' and '.'; depends_on names
earlier steps. A step takes pool and kind (required), payload (text; in JSON
any other value stands for its JSON text; in HCL a heredoc <<EOF ... EOF
suits multi-line text), payload_base64, priority (high, normal, low), labels
and tags (objects of strings), timeout ("30s"), max_attempts, depends_on,
dependency_policy (succeeded, the default, or done), external (true: 'cronoq
complete' ends it), delay ("5m") or run_at, and deadline (RFC 3339). Any
other field is an error.`

// workflowFile is a workflow as a file writes it.
type workflowFile struct {
	Name  string                `json:"name" hcl:"name,optional"`
	Steps []execworker.StepSpec `json:"steps" hcl:"step,block"`
}

// readWorkflowFile reads the workflow file named by flag -flagName (path;
// "-" is the standard input) and returns its name and steps. Errors are
// usage errors naming the flag, the file and the step.
func readWorkflowFile(s stdio, flagName, path string) (string, []client.Step, error) {
	if path == "" {
		return "", nil, usagef("-%s is required", flagName)
	}
	var data []byte
	var err error
	if path == "-" {
		if data, err = io.ReadAll(s.Stdin); err != nil {
			return "", nil, fmt.Errorf("reading -%s from stdin: %w", flagName, err)
		}
	} else if data, err = os.ReadFile(path); err != nil {
		return "", nil, usagef("reading -%s file: %v", flagName, err)
	}
	name, steps, err := parseWorkflowFile(path, data)
	if err != nil {
		return "", nil, usagef("invalid -%s %s: %v", flagName, path, err)
	}
	return name, steps, nil
}

// parseWorkflowFile parses a workflow file named path (used to pick the
// format and in messages) holding data.
func parseWorkflowFile(path string, data []byte) (string, []client.Step, error) {
	var wf workflowFile
	var err error
	if isJSONFile(path, data) {
		err = decodeWorkflowJSON(data, &wf)
	} else {
		err = decodeWorkflowHCL(path, data, &wf)
	}
	if err != nil {
		return "", nil, err
	}
	if len(wf.Steps) == 0 {
		return "", nil, errors.New("no steps: a workflow needs at least one")
	}
	steps := make([]client.Step, len(wf.Steps))
	for i := range wf.Steps {
		sp := &wf.Steps[i]
		if sp.Name == "" {
			return "", nil, fmt.Errorf("steps[%d]: name: required", i)
		}
		if steps[i], err = sp.Step(); err != nil {
			return "", nil, fmt.Errorf("step %q: %w", sp.Name, err)
		}
	}
	return wf.Name, steps, nil
}

// isJSONFile tells the format of a workflow file: by its extension, else
// by its first character.
func isJSONFile(path string, data []byte) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return true
	case ".hcl":
		return false
	}
	return bytes.HasPrefix(bytes.TrimSpace(data), []byte("{"))
}

// decodeWorkflowJSON decodes a JSON workflow file strictly, naming the
// step (by its name when it has one) of an error.
func decodeWorkflowJSON(data []byte, wf *workflowFile) error {
	var top struct {
		Name  string            `json:"name"`
		Steps []json.RawMessage `json:"steps"`
	}
	if err := execworker.DecodeJSON(data, &top); err != nil {
		return err
	}
	wf.Name = top.Name
	wf.Steps = make([]execworker.StepSpec, len(top.Steps))
	for i, raw := range top.Steps {
		if err := execworker.DecodeJSON(raw, &wf.Steps[i]); err != nil {
			var named struct {
				Name any `json:"name"`
			}
			if json.Unmarshal(raw, &named) == nil {
				if n, ok := named.Name.(string); ok && n != "" {
					return fmt.Errorf("step %q: %w", n, err)
				}
			}
			return fmt.Errorf("steps[%d]: %w", i, err)
		}
	}
	return nil
}

// decodeWorkflowHCL decodes an HCL workflow file, naming the step of an
// error by the label of the block it is in.
func decodeWorkflowHCL(path string, data []byte, wf *workflowFile) error {
	filename := path
	if filename == "-" {
		filename = "stdin"
	}
	f, diags := hclparse.NewParser().ParseHCL(data, filename)
	if diags.HasErrors() {
		return hclError(nil, diags)
	}
	diags = gohcl.DecodeBody(f.Body, nil, wf)
	if diags.HasErrors() {
		return hclError(f, diags)
	}
	return nil
}

// hclError is the first error of diags, prefixed with the step whose block
// holds it and the attribute it is about.
func hclError(f *hcl.File, diags hcl.Diagnostics) error {
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := hclDiagText(d)
		step, attr := hclLocate(f, d.Subject)
		if attr != "" && !strings.Contains(msg, strconv.Quote(attr)) {
			msg = attr + ": " + msg
		}
		if step != "" {
			msg = fmt.Sprintf("step %q: %s", step, msg)
		}
		return errors.New(msg)
	}
	return diags
}

// hclDiagText words a diagnostic on one line: "line N: summary; detail"
// (the file is named by the caller).
func hclDiagText(d *hcl.Diagnostic) string {
	msg := d.Summary
	if d.Detail != "" {
		msg += "; " + d.Detail
	}
	if d.Subject != nil {
		msg = fmt.Sprintf("line %d: %s", d.Subject.Start.Line, msg)
	}
	return msg
}

// hclLocate finds what rng is in: the label of the step block holding it
// (or ""), and the name of the attribute holding it (or "").
func hclLocate(f *hcl.File, rng *hcl.Range) (step, attr string) {
	if f == nil || rng == nil {
		return "", ""
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return "", ""
	}
	for _, b := range body.Blocks {
		if b.Type == "step" && len(b.Labels) == 1 && b.Range().Overlaps(*rng) {
			step, body = b.Labels[0], b.Body
			break
		}
	}
	for name, a := range body.Attributes {
		if a.SrcRange.Overlaps(*rng) {
			return step, name
		}
	}
	return step, ""
}

// stepField matches a field of the cluster naming a step: "steps[2].pool".
var stepField = regexp.MustCompile(`^steps\[(\d+)\]\.?(.*)$`)

// explainWorkflowField words the cluster's refusal of a field of a workflow
// read from the file of flag -flagName: a step is named by its name in the
// file. It returns "" for fields that are not the file's.
func explainWorkflowField(flagName, path string, steps []client.Step) func(field, reason string) string {
	return func(field, reason string) string {
		switch field {
		case "name", "workflow":
			return fmt.Sprintf("invalid -%s %s: name: %s", flagName, path, reason)
		case "steps":
			return fmt.Sprintf("invalid -%s %s: steps: %s", flagName, path, reason)
		}
		m := stepField.FindStringSubmatch(field)
		if m == nil {
			return ""
		}
		i, err := strconv.Atoi(m[1])
		step := "steps[" + m[1] + "]"
		if err == nil && i < len(steps) && steps[i].Name != "" {
			step = strconv.Quote(steps[i].Name)
			step = "step " + step
		}
		rest := m[2]
		for _, p := range []string{"spec.", "template.", "task."} {
			rest = strings.TrimPrefix(rest, p)
		}
		if rest == "" {
			return fmt.Sprintf("invalid -%s %s: %s: %s", flagName, path, step, reason)
		}
		return fmt.Sprintf("invalid -%s %s: %s: %s: %s", flagName, path, step, rest, reason)
	}
}
