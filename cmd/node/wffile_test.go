package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// TestWorkflowFileFormats reads CONTRACT's example in JSON and in HCL (by
// extension and by content) into the same steps.
func TestWorkflowFileFormats(t *testing.T) {
	t.Parallel()
	want := []client.Step{
		{Name: "extract", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "extract", Payload: []byte("s3://x")}}},
		{Name: "clean", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "clean"}}, DependsOn: []string{"extract"}},
		{
			Name:      "load",
			Task:      client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "load"}, DependencyPolicy: client.DependencyPolicySucceeded},
			DependsOn: []string{"clean"},
		},
	}
	for _, tc := range []struct{ path, file string }{
		{"nightly.json", "nightly.json"},
		{"nightly.hcl", "nightly.hcl"},
		{"-", "nightly.json"},
		{"-", "nightly.hcl"},
		{"workflow.txt", "nightly.hcl"},
		{"workflow", "nightly.json"},
	} {
		name, steps, err := parseWorkflowFile(tc.path, readTestdata(t, tc.file))
		require.NoError(t, err, "%s as %s", tc.file, tc.path)
		require.Equal(t, "nightly", name)
		require.Equal(t, want, steps, "%s as %s", tc.file, tc.path)
	}

	// Every field, in both formats.
	_, fromJSON, err := parseWorkflowFile("full.json", readTestdata(t, "full.json"))
	require.NoError(t, err)
	name, fromHCL, err := parseWorkflowFile("full.hcl", readTestdata(t, "full.hcl"))
	require.NoError(t, err)
	require.Equal(t, "report", name)
	require.Equal(t, fromJSON, fromHCL)
	fetch := fromHCL[0].Task
	require.Equal(t, `{"url":"https://example.com"}`, string(fetch.Payload))
	require.Equal(t, client.PriorityHigh, fetch.Priority)
	require.Equal(t, map[string]string{"zone": "eu"}, fetch.Labels)
	require.Equal(t, map[string]string{"traceparent": "00-1"}, fetch.Tags)
	require.Equal(t, 30*time.Second, fetch.Timeout)
	require.Equal(t, 3, fetch.MaxAttempts)
	require.Equal(t, time.Minute, fetch.Delay)
	require.True(t, fetch.Deadline.Equal(time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC)))
	require.True(t, fromHCL[1].Task.External)
	publish := fromHCL[2]
	require.Equal(t, []byte{0, 0xff}, publish.Task.Payload)
	require.True(t, publish.Task.RunAt.Equal(time.Date(2030, 1, 2, 15, 0, 0, 0, time.UTC)))
	require.Equal(t, client.DependencyPolicyDone, publish.Task.DependencyPolicy)
	require.Equal(t, []string{"fetch", "approve"}, publish.DependsOn)

	// An HCL heredoc payload keeps its text, final newline included.
	_, steps, err := parseWorkflowFile("h.hcl", []byte("step \"a\" {\n  pool = \"p\"\n  kind = \"k\"\n  payload = <<EOT\nline 1\nline 2\nEOT\n}\n"))
	require.NoError(t, err)
	require.Equal(t, "line 1\nline 2\n", string(steps[0].Task.Payload))
}

func TestWorkflowFileErrors(t *testing.T) {
	t.Parallel()
	const ok = `"pool": "p", "kind": "k"`
	tests := []struct {
		name, path, data string
		want             []string
	}{
		{"json unknown step field", "w.json", `{"steps": [{"name": "a", ` + ok + `}, {"name": "b", ` + ok + `, "colour": "red"}]}`,
			[]string{`step "b": unknown field "colour"`}},
		{"json unknown field of an unnamed step", "w.json", `{"steps": [{` + ok + `, "colour": "red"}]}`,
			[]string{`steps[0]: unknown field "colour"`}},
		{"json misspelt field", "w.json", `{"steps": [{"name": "a", ` + ok + `, "depends": ["x"]}]}`,
			[]string{`step "a": unknown field "depends"`}},
		{"json unknown top-level field", "w.json", `{"name": "n", "key": "k", "steps": [{"name": "a", ` + ok + `}]}`,
			[]string{`unknown field "key"`}},
		{"json field case", "w.json", `{"steps": [{"Name": "a", ` + ok + `}]}`, []string{`unknown field "Name"`}},
		{"json depends_on not a list", "w.json", `{"steps": [{"name": "a", ` + ok + `, "depends_on": "x"}]}`,
			[]string{`step "a": depends_on: want array, got string`}},
		{"json depends_on of numbers", "w.json", `{"steps": [{"name": "a", ` + ok + `, "depends_on": [1]}]}`,
			[]string{`step "a": depends_on`, "want string, got number"}},
		{"json empty depends_on name", "w.json", `{"steps": [{"name": "a", ` + ok + `, "depends_on": ["x", ""]}]}`,
			[]string{`step "a": depends_on[1]: empty step name`}},
		{"json bad timeout", "w.json", `{"steps": [{"name": "a", ` + ok + `, "timeout": "soon"}]}`,
			[]string{`step "a": timeout: "soon" is not a duration`}},
		{"json bad policy", "w.json", `{"steps": [{"name": "a", ` + ok + `, "dependency_policy": "any"}]}`,
			[]string{`step "a": dependency_policy: "any" is not succeeded or done`}},
		{"json missing kind", "w.json", `{"steps": [{"name": "a", "pool": "p"}]}`, []string{`step "a": kind: required`}},
		{"json missing name", "w.json", `{"steps": [{` + ok + `}]}`, []string{"steps[0]: name: required"}},
		{"json no steps", "w.json", `{"name": "n", "steps": []}`, []string{"no steps"}},
		{"json steps not a list", "w.json", `{"steps": {}}`, []string{"steps: want array, got object"}},
		{"json syntax", "w.json", `{"steps": [`, []string{"not valid JSON"}},
		{"json trailing data", "w.json", `{"steps": [{"name": "a", ` + ok + `}]} {}`, []string{"unexpected data after the JSON value"}},
		{"json empty", "w.json", ``, []string{"empty"}},

		{"hcl unknown step field", "w.hcl", "step \"a\" {\n  pool = \"p\"\n  kind = \"k\"\n  colour = \"red\"\n}\n",
			[]string{`step "a": line 4:`, `An argument named "colour" is not expected here`}},
		{"hcl unknown top-level field", "w.hcl", "nme = \"x\"\n", []string{"line 1:", `An argument named "nme" is not expected here`}},
		{"hcl unknown block", "w.hcl", "task \"a\" {\n}\n", []string{"line 1:", `Blocks of type "task" are not expected here`}},
		{"hcl step without name", "w.hcl", "step {\n  pool = \"p\"\n}\n", []string{"line 1:", "Missing name for step"}},
		{"hcl depends_on not a list", "w.hcl", "step \"a\" {\n  pool = \"p\"\n  kind = \"k\"\n  depends_on = \"x\"\n}\n",
			[]string{`step "a": depends_on: line 4:`, "Unsuitable value type"}},
		{"hcl bad max_attempts", "w.hcl", "step \"a\" {\n  pool = \"p\"\n  kind = \"k\"\n  max_attempts = \"x\"\n}\n",
			[]string{`step "a": max_attempts: line 4:`, "a number is required"}},
		{"hcl bad run_at", "w.hcl", "step \"a\" {\n  pool = \"p\"\n  kind = \"k\"\n  run_at = \"tomorrow\"\n}\n",
			[]string{`step "a": run_at: "tomorrow" is not an RFC 3339 time`}},
		{"hcl syntax", "w.hcl", "step \"a\" {\n  pool = \n}\n", []string{"line 2:"}},
		{"hcl no steps", "w.hcl", "name = \"n\"\n", []string{"no steps"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := parseWorkflowFile(tc.path, []byte(tc.data))
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "\n")
			require.NotContains(t, err.Error(), "json:")
		})
	}
}

func TestReadWorkflowFile(t *testing.T) {
	t.Parallel()
	_, _, err := readWorkflowFile(stdio{}, "f", filepath.Join(t.TempDir(), "missing.json"))
	require.ErrorContains(t, err, "reading -f file: open ")
	require.Equal(t, exitUsage, exitCode(err))

	path := filepath.Join(t.TempDir(), "w.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"steps": [{"name": "a", "pool": "p"}]}`), 0o600))
	_, _, err = readWorkflowFile(stdio{}, "workflow", path)
	require.EqualError(t, err, "invalid -workflow "+path+`: step "a": kind: required`)
	require.Equal(t, exitUsage, exitCode(err))

	name, steps, err := readWorkflowFile(stdio{Stdin: strings.NewReader(string(readTestdata(t, "nightly.hcl")))}, "f", "-")
	require.NoError(t, err)
	require.Equal(t, "nightly", name)
	require.Len(t, steps, 3)
}

func TestExplainWorkflowField(t *testing.T) {
	t.Parallel()
	steps := []client.Step{{Name: "extract"}, {Name: "clean"}}
	explain := explainWorkflowField("f", "w.hcl", steps)
	for _, tc := range []struct{ field, want string }{
		{"steps[1].depends_on", `invalid -f w.hcl: step "clean": depends_on: "x" is wrong`},
		{"steps[0].pool", `invalid -f w.hcl: step "extract": pool: "x" is wrong`},
		{"steps[1].spec.template.kind", `invalid -f w.hcl: step "clean": kind: "x" is wrong`},
		{"steps[1].name", `invalid -f w.hcl: step "clean": name: "x" is wrong`},
		{"steps[1].depends_on[0].id", `invalid -f w.hcl: step "clean": depends_on[0].id: "x" is wrong`},
		{"steps[7].pool", `invalid -f w.hcl: steps[7]: pool: "x" is wrong`},
		{"steps[1]", `invalid -f w.hcl: step "clean": "x" is wrong`},
		{"name", `invalid -f w.hcl: name: "x" is wrong`},
		{"steps", `invalid -f w.hcl: steps: "x" is wrong`},
		{"key", ""},
	} {
		require.Equal(t, tc.want, explain(tc.field, `"x" is wrong`), tc.field)
	}
}

func TestFlagFor(t *testing.T) {
	t.Parallel()
	c := newCmd("submit", "", "")
	c.clientFlags()
	c.templateFlags()
	var refs []client.TaskRef
	var key string
	c.fs.Var(taskRefList{&refs}, "depends-on", "")
	c.fs.StringVar(&key, "key", "", "")
	c.fs.StringVar(&key, "dependency-policy", "", "")
	for _, tc := range []struct{ field, want string }{
		{"pool", "pool"},
		{"task.kind", "kind"},
		{"specs[0].max_attempts", "max-attempts"},
		{"depends_on[0].key", "depends-on"},
		{"depends_on[3].id", "depends-on"},
		{"specs[0].depends_on[1].key", "depends-on"},
		{"dependency_policy", "dependency-policy"},
		{"key", "key"},
		{"steps[0]", ""},
		{"nothing", ""},
	} {
		require.Equal(t, tc.want, flagFor(c, tc.field), tc.field)
	}
}
