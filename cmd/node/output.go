package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/cronoq/cronoq/client"
)

// writeJSON writes v as one indented JSON value.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// jsonTime is an instant in RFC 3339 (UTC), or null when unset.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// taskJSON is the task object of the CLI's JSON output. Every field is
// always present except that bytes which are not valid UTF-8 appear as
// payload_base64 / output_base64 instead of payload / output, and that
// ordering_key, concurrency_key and blocks_lane appear only when set (true).
// Unset instants are null.
type taskJSON struct {
	ID      string `json:"id"`
	Key     string `json:"key"`
	Status  string `json:"status"`
	Attempt int    `json:"attempt"`
	templateJSON
	Output       *string `json:"output,omitempty"`
	OutputBase64 *string `json:"output_base64,omitempty"`
	Error        string  `json:"error"`
	SubmittedAt  *string `json:"submitted_at"`
	RunAt        *string `json:"run_at"`
	StartedAt    *string `json:"started_at"`
	FinishedAt   *string `json:"finished_at"`
	UpdatedAt    *string `json:"updated_at"`
	Deadline     *string `json:"deadline"`
	Lease        uint64  `json:"lease"`
	Schedule     string  `json:"schedule"`
	Slot         *string `json:"slot"`
	// DependsOn holds the ids of the tasks it waits (or waited) for.
	DependsOn        []string `json:"depends_on"`
	DependencyPolicy string   `json:"dependency_policy"`
	External         bool     `json:"external"`
	Workflow         string   `json:"workflow"`
	Step             string   `json:"step"`
	Parent           string   `json:"parent"`
	// BlocksLane: it ended without succeeding under its pool's ordering
	// policy block, and its lane waits until it is retried or deleted.
	BlocksLane bool `json:"blocks_lane,omitempty"`
	// Principal: the accessor of the ACL token that submitted it.
	Principal string `json:"principal,omitempty"`
	// Attempts: its last attempts that ended (at most 10), oldest first.
	Attempts []attemptJSON `json:"attempts"`
	// AttemptBase: the attempts started before it was last retried
	// ('cronoq retry'); present only when it was.
	AttemptBase int `json:"attempt_base,omitempty"`
}

// attemptJSON is one ended attempt in the task object. Unset instants are
// null.
type attemptJSON struct {
	Attempt    int     `json:"attempt"`
	Worker     string  `json:"worker"`
	Lease      uint64  `json:"lease"`
	Epoch      uint64  `json:"epoch"`
	StartedAt  *string `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
	Outcome    string  `json:"outcome"`
	Error      string  `json:"error"`
}

func newAttemptsJSON(as []client.Attempt) []attemptJSON {
	out := make([]attemptJSON, 0, len(as))
	for _, a := range as {
		out = append(out, attemptJSON{
			Attempt:    a.Attempt,
			Worker:     a.Worker,
			Lease:      a.Lease,
			Epoch:      a.Epoch,
			StartedAt:  jsonTime(a.StartedAt),
			FinishedAt: jsonTime(a.FinishedAt),
			Outcome:    a.Outcome,
			Error:      a.Error,
		})
	}
	return out
}

func newTaskJSON(t *client.Task) taskJSON {
	j := taskJSON{
		ID:           t.ID,
		templateJSON: newTemplateJSON(&t.Template),
		Key:          t.Key,
		Status:       t.Status,
		Attempt:      t.Attempt,
		Error:        t.Error,
		SubmittedAt:  jsonTime(t.SubmittedAt),
		RunAt:        jsonTime(t.RunAt),
		StartedAt:    jsonTime(t.StartedAt),
		FinishedAt:   jsonTime(t.FinishedAt),
		UpdatedAt:    jsonTime(t.UpdatedAt),
		Deadline:     jsonTime(t.Deadline),
		Lease:        t.Lease,
		Schedule:     t.Schedule,
		Slot:         jsonTime(t.Slot),

		DependsOn:        nonNilSlice(t.DependsOn),
		DependencyPolicy: orDefault(t.DependencyPolicy, client.DependencyPolicySucceeded),
		External:         t.External,
		Workflow:         t.Workflow,
		Step:             t.Step,
		Parent:           t.Parent,
		BlocksLane:       t.BlocksLane,
		Principal:        t.Principal,
		Attempts:         newAttemptsJSON(t.Attempts),
		AttemptBase:      t.AttemptBase,
	}
	j.Output, j.OutputBase64 = textOrBase64(t.Output)
	return j
}

func nonNilSlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// workflowJSON is a workflow in the CLI's JSON output, without its members
// (as `workflow list` shows it). Unset instants are null.
type workflowJSON struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	Key         string  `json:"key"`
	Status      string  `json:"status"`
	SubmittedAt *string `json:"submitted_at"`
	UpdatedAt   *string `json:"updated_at"`
	FinishedAt  *string `json:"finished_at"`
	Schedule    string  `json:"schedule"`
	Slot        *string `json:"slot"`
	Parent      string  `json:"parent"`
}

func newWorkflowJSON(w *client.Workflow) workflowJSON {
	return workflowJSON{
		ID:          w.ID,
		Name:        w.Name,
		Key:         w.Key,
		Status:      w.Status,
		SubmittedAt: jsonTime(w.SubmittedAt),
		UpdatedAt:   jsonTime(w.UpdatedAt),
		FinishedAt:  jsonTime(w.FinishedAt),
		Schedule:    w.Schedule,
		Slot:        jsonTime(w.Slot),
		Parent:      w.Parent,
	}
}

// workflowObjectJSON is the workflow object: the workflow and its members.
type workflowObjectJSON struct {
	workflowJSON
	Tasks []taskJSON `json:"tasks"`
}

func newWorkflowObjectJSON(w *client.Workflow) workflowObjectJSON {
	out := workflowObjectJSON{workflowJSON: newWorkflowJSON(w), Tasks: make([]taskJSON, 0, len(w.Tasks))}
	for _, t := range w.Tasks {
		if t != nil {
			out.Tasks = append(out.Tasks, newTaskJSON(t))
		}
	}
	return out
}

// workflowListJSON is the output of `workflow list -o json`.
type workflowListJSON struct {
	Workflows []workflowJSON `json:"workflows"`
	Next      string         `json:"next"`
}

func newWorkflowListJSON(ws []*client.Workflow, next string) workflowListJSON {
	out := workflowListJSON{Workflows: make([]workflowJSON, 0, len(ws)), Next: next}
	for _, w := range ws {
		if w != nil {
			out.Workflows = append(out.Workflows, newWorkflowJSON(w))
		}
	}
	return out
}

// listJSON is the output of `list -o json`.
type listJSON struct {
	Tasks []taskJSON `json:"tasks"`
	Next  string     `json:"next"`
}

func newListJSON(tasks []*client.Task, next string) listJSON {
	out := listJSON{Tasks: make([]taskJSON, 0, len(tasks)), Next: next}
	for _, t := range tasks {
		if t != nil {
			out.Tasks = append(out.Tasks, newTaskJSON(t))
		}
	}
	return out
}

// scheduleJSON is one schedule of `recurring list -o json`: its settings
// and the template of the tasks it fires.
type scheduleJSON struct {
	Name string `json:"name"`
	Cron string `json:"cron"`
	TZ   string `json:"tz"`
	templateJSON
	NextFire     *string `json:"next_fire"`
	LastFire     *string `json:"last_fire"`
	Paused       bool    `json:"paused"`
	Overlap      string  `json:"overlap"`
	CatchUp      string  `json:"catch_up"`
	CatchUpLimit int     `json:"catch_up_limit"`
	Fires        uint64  `json:"fires"`
	Skipped      uint64  `json:"skipped"`
	// LastTask is the task, or the workflow, of the last fire.
	LastTask string `json:"last_task"`
	// Workflow and Steps are the name and the number of steps of the
	// workflow each fire submits ("" and 0 when it submits a task).
	Workflow string `json:"workflow"`
	Steps    int    `json:"steps"`
}

func newScheduleJSON(s client.Schedule) scheduleJSON {
	return scheduleJSON{
		Name:         s.Name,
		Cron:         s.Cron,
		TZ:           zoneName(s.TZ),
		templateJSON: newTemplateJSON(&s.Task),
		NextFire:     jsonTime(s.NextFire),
		LastFire:     jsonTime(s.LastFire),
		Paused:       s.Paused,
		Overlap:      orDefault(s.Overlap, client.OverlapSkip),
		CatchUp:      orDefault(s.CatchUp, client.CatchUpOnce),
		CatchUpLimit: s.CatchUpLimit,
		Fires:        s.Fires,
		Skipped:      s.Skipped,
		LastTask:     s.LastTask,
		Workflow:     s.Workflow,
		Steps:        len(s.Steps),
	}
}

// zoneName is the name of a schedule's zone; "" means UTC.
func zoneName(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// memberJSON is one node of `members -o json`.
type memberJSON struct {
	Name     string `json:"name"`
	Addr     string `json:"addr"`
	Status   string `json:"status"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Version  string `json:"version"`
}

// peerJSON is one server of `operator raft list-peers -o json`.
type peerJSON struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
}

// healthJSON is the output of `health -o json`.
type healthJSON struct {
	Node    string   `json:"node"`
	Leader  string   `json:"leader"`
	Epoch   uint64   `json:"epoch"`
	Status  string   `json:"status"`
	Reasons []string `json:"reasons"`
}

// textTime formats an instant for people: RFC 3339 in UTC, whole seconds.
func textTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// textKVs formats a label map as "a=1, b=2" in key order.
func textKVs(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ", ")
}

// writeTaskText writes a task as "field: value" lines; unset fields are
// left out, and a multi-line payload or output follows, indented, on the
// lines after its field name.
func writeTaskText(w io.Writer, t *client.Task) error {
	type field struct{ name, value string }
	attempt := strconv.Itoa(t.Attempt)
	switch {
	case t.MaxAttempts > 0 && t.AttemptBase > 0:
		attempt += fmt.Sprintf(" (%d of %d since it was retried)", t.Attempt-t.AttemptBase, t.MaxAttempts)
	case t.MaxAttempts > 0:
		attempt += " of " + strconv.Itoa(t.MaxAttempts)
	}
	fields := []field{
		{"id", t.ID},
		{"status", t.Status},
		{"pool", t.Pool},
		{"kind", t.Kind},
		{"key", t.Key},
		{"priority", orDefault(t.Priority, client.PriorityNormal)},
		{"attempt", attempt},
		{"labels", textKVs(t.Labels)},
		{"tags", textKVs(t.Tags)},
		{"submitted at", timeOrEmpty(t.SubmittedAt)},
		{"run at", timeOrEmpty(t.RunAt)},
		{"started at", timeOrEmpty(t.StartedAt)},
		{"finished at", timeOrEmpty(t.FinishedAt)},
		{"deadline", timeOrEmpty(t.Deadline)},
		{"timeout", durationOrEmpty(t.Timeout)},
		{"lease", uintOrEmpty(t.Lease)},
		{"schedule", t.Schedule},
		{"slot", timeOrEmpty(t.Slot)},
		{"workflow", t.Workflow},
		{"step", t.Step},
		{"parent", t.Parent},
		{"depends on", dependsOnText(t)},
		{"external", yesOrEmpty(t.External)},
		{"ordering key", t.OrderingKey},
		{"concurrency key", t.ConcurrencyKey},
		{"blocks lane", blocksLaneText(t.BlocksLane)},
	}
	var blocks []field
	for _, b := range []struct {
		name string
		data []byte
	}{{"error", []byte(t.Error)}, {"payload", t.Payload}, {"output", t.Output}} {
		switch {
		case len(b.data) == 0:
		case !utf8.Valid(b.data):
			fields = append(fields, field{b.name, fmt.Sprintf("(%d bytes, not UTF-8: see -o json)", len(b.data))})
		case strings.ContainsAny(strings.TrimRight(string(b.data), "\n"), "\n\r"):
			blocks = append(blocks, field{b.name, string(b.data)})
		default:
			fields = append(fields, field{b.name, strings.TrimRight(string(b.data), "\n")})
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, f := range fields {
		if f.value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", f.name, oneLine(f.value))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	for _, b := range blocks {
		fmt.Fprintf(w, "%s:\n", b.name)
		for _, line := range strings.Split(strings.TrimRight(b.value, "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	return writeAttemptsText(w, t.Attempts)
}

// writeAttemptsText writes a task's attempt history as an indented table,
// oldest first, errors cut to one short line (-o json has them whole).
func writeAttemptsText(w io.Writer, as []client.Attempt) error {
	if len(as) == 0 {
		return nil
	}
	fmt.Fprintln(w, "attempts:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tOUTCOME\tWORKER\tLEASE\tSTARTED\tTOOK\tERROR")
	for _, a := range as {
		took := "-"
		if !a.StartedAt.IsZero() && !a.FinishedAt.IsZero() {
			took = a.FinishedAt.Sub(a.StartedAt).String()
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d.%d\t%s\t%s\t%s\n", a.Attempt, a.Outcome, dash(oneLine(a.Worker)),
			a.Epoch, a.Lease&(1<<32-1), textTime(a.StartedAt), took, dash(truncate(a.Error, 60)))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// dependsOnText lists the dependencies of a task and its policy, for
// people.
func dependsOnText(t *client.Task) string {
	if len(t.DependsOn) == 0 {
		return ""
	}
	return strings.Join(t.DependsOn, ", ") + " (policy " + orDefault(t.DependencyPolicy, client.DependencyPolicySucceeded) + ")"
}

// blocksLaneText says, for a task that blocks its ordering lane, how to
// unblock it.
func blocksLaneText(b bool) string {
	if b {
		return "yes (its lane waits until it is retried or deleted: cronoq retry, cronoq delete)"
	}
	return ""
}

func yesOrEmpty(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

func timeOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return textTime(t)
}

func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func uintOrEmpty(n uint64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(n, 10)
}

// table writes aligned columns with a header row.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = dash(oneLine(c))
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// truncate shortens s to at most n runes for a table cell.
func truncate(s string, n int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
