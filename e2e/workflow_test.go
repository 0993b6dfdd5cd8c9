package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// workflowJSON is the workflow object of `cronoq workflow status -o json`.
type workflowJSON struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Key         string     `json:"key"`
	Status      string     `json:"status"`
	SubmittedAt string     `json:"submitted_at"`
	FinishedAt  *string    `json:"finished_at"`
	Tasks       []taskJSON `json:"tasks"`
}

type workflowSubmitJSON struct {
	ID        string            `json:"id"`
	Duplicate bool              `json:"duplicate"`
	Tasks     map[string]string `json:"tasks"`
}

// stepTaskJSON is what the workflow tests read of a member besides the
// contract's task object.
type stepTaskJSON struct {
	ID        string   `json:"id"`
	Step      string   `json:"step"`
	Workflow  string   `json:"workflow"`
	DependsOn []string `json:"depends_on"`
	Status    string   `json:"status"`
	Output    string   `json:"output"`
}

// TestWorkflowDiamondAcrossFailover submits a diamond workflow from a
// file through three real nodes and the exec worker, kills the leader
// while the middle of the diamond runs, and checks from the outside that
// every step ran after the steps it depends on, exactly once to success,
// and saw their outputs.
func TestWorkflowDiamondAcrossFailover(t *testing.T) {
	c := newCluster(t)
	leader := c.waitStable(30 * time.Second)

	dir := t.TempDir()
	runLog := filepath.Join(dir, "runs.log")
	gate := filepath.Join(dir, "gate")
	// Each step logs its start and end (step, event, attempt, lease) and
	// prints its dependencies' outputs after its own name. The middle steps
	// wait for the gate file, so that the leader dies while they run.
	handler := func(wait bool) string {
		var b strings.Builder
		fmt.Fprintf(&b, `echo "$CRONOQ_KIND start $CRONOQ_ATTEMPT $CRONOQ_LEASE" >> %s; `, shellQuote(runLog))
		if wait {
			fmt.Fprintf(&b, `while [ ! -e %s ]; do sleep 0.05; done; `, shellQuote(gate))
		}
		b.WriteString(`printf '%s' "$CRONOQ_KIND"; for f in $(ls "$CRONOQ_DEPS_DIR" | sort); do printf '(%s=%s)' "$f" "$(cat "$CRONOQ_DEPS_DIR/$f")"; done; `)
		fmt.Fprintf(&b, `echo "$CRONOQ_KIND end $CRONOQ_ATTEMPT $CRONOQ_LEASE" >> %s`, shellQuote(runLog))
		return b.String()
	}
	c.startWorker(t, "worker-wf", c.addrs(), "-pool", "wf", "-concurrency", "4",
		"-handler", "extract="+handler(false),
		"-handler", "left="+handler(true),
		"-handler", "right="+handler(true),
		"-handler", "join="+handler(false))

	file := filepath.Join(dir, "diamond.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"name": "diamond", "steps": [
  {"name": "extract", "pool": "wf", "kind": "extract"},
  {"name": "left",    "pool": "wf", "kind": "left",  "depends_on": ["extract"]},
  {"name": "right",   "pool": "wf", "kind": "right", "depends_on": ["extract"]},
  {"name": "join",    "pool": "wf", "kind": "join",  "depends_on": ["left", "right"]}]}
`), 0o644))
	sub := decodeStrict[workflowSubmitJSON](t, c.cli(t, "workflow", "submit", "-f", file, "-key", "diamond-1", "-o", "json").ok(t))
	require.False(t, sub.Duplicate)
	require.Len(t, sub.Tasks, 4)

	// The middle steps run (extract ended, and both were granted): now the
	// leader dies.
	eventually(t, 30*time.Second, func() (bool, string) {
		runs := readRuns(t, runLog)
		return runs["left start"] > 0 && runs["right start"] > 0, fmt.Sprintf("runs so far: %v", runs)
	})
	c.kill9(leader)
	newLeader := c.waitStable(30 * time.Second)
	require.NotEqual(t, leader.id, newLeader.id)
	require.NoError(t, os.WriteFile(gate, nil, 0o644))

	// The workflow ends succeeded, on the new leader.
	var wf workflowJSON
	eventually(t, 60*time.Second, func() (bool, string) {
		r := c.cli(t, "workflow", "status", sub.ID, "-o", "json")
		if r.code != 0 {
			return false, r.String()
		}
		wf = decodeStrict[workflowJSON](t, r.stdout)
		return wf.Status == "succeeded", "workflow " + wf.Status
	})
	require.Equal(t, "diamond", wf.Name)
	require.Equal(t, "diamond-1", wf.Key)
	require.NotNil(t, wf.FinishedAt)

	// Each member: its step, its dependencies, its output.
	r := c.cli(t, "workflow", "status", sub.ID, "-o", "json")
	var raw struct {
		Tasks []stepTaskJSON `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.ok(t)), &raw))
	steps := map[string]stepTaskJSON{}
	for _, m := range raw.Tasks {
		require.Equal(t, sub.ID, m.Workflow)
		require.Equal(t, sub.Tasks[m.Step], m.ID, "step %s", m.Step)
		require.Equal(t, "succeeded", m.Status, "step %s", m.Step)
		steps[m.Step] = m
	}
	require.Len(t, steps, 4)
	require.Equal(t, []string{sub.Tasks["extract"]}, steps["left"].DependsOn)
	require.Equal(t, []string{sub.Tasks["left"], sub.Tasks["right"]}, steps["join"].DependsOn)
	require.Equal(t, "extract", steps["extract"].Output)
	require.Equal(t, "left(extract=extract)", steps["left"].Output)
	require.Equal(t, "right(extract=extract)", steps["right"].Output)
	require.Equal(t, "join(left=left(extract=extract))(right=right(extract=extract))", steps["join"].Output)

	// The runs, as the handlers logged them: a step started only after the
	// steps it depends on ended with the attempt that succeeded.
	order := readRunOrder(t, runLog)
	first := func(event string) int {
		for i, e := range order {
			if e == event {
				return i
			}
		}
		t.Fatalf("no %q in the run log: %v", event, order)
		return -1
	}
	last := func(event string) int {
		at := -1
		for i, e := range order {
			if e == event {
				at = i
			}
		}
		require.GreaterOrEqual(t, at, 0, "no %q in the run log: %v", event, order)
		return at
	}
	require.Less(t, last("extract end"), first("left start"), "%v", order)
	require.Less(t, last("extract end"), first("right start"), "%v", order)
	require.Less(t, last("left end"), first("join start"), "%v", order)
	require.Less(t, last("right end"), first("join start"), "%v", order)
	// Attempts that lost their lease with the leader may have run again;
	// nothing before them, and join ran once.
	runs := readRuns(t, runLog)
	require.Equal(t, 1, runs["join start"], "%v", order)
	require.Equal(t, 1, runs["extract start"], "%v", order)

	// The key still names the workflow: submitting again is a duplicate.
	again := decodeStrict[workflowSubmitJSON](t, c.cli(t, "workflow", "submit", "-f", file, "-key", "diamond-1", "-o", "json").ok(t))
	require.True(t, again.Duplicate)
	require.Equal(t, sub.ID, again.ID)
}

// readRunOrder reads the run log as "STEP start|end" events in order.
func readRunOrder(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 {
			out = append(out, f[0]+" "+f[1])
		}
	}
	return out
}

// readRuns counts the run log's events.
func readRuns(t testing.TB, path string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range readRunOrder(t, path) {
		out[e]++
	}
	return out
}
