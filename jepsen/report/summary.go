// Package report writes a run's summary (summary.json, summary.txt) and its
// timeline (timeline.html).
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cronoq/cronoq/jepsen/checker"
	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nemesis"
)

// Scenario says whether a scenario of JEPSEN.md section C ran, and in which
// steps.
type Scenario struct {
	ID    int      `json:"id"`
	Name  string   `json:"name"`
	Ran   bool     `json:"ran"`
	Steps []string `json:"steps,omitempty"`
}

// Summary is summary.json.
type Summary struct {
	Dir       string             `json:"dir"`
	Schedule  string             `json:"schedule"`
	Seed      uint64             `json:"seed"`
	Verdict   string             `json:"verdict"` // valid, invalid, inconclusive
	ExitCode  int                `json:"exit_code"`
	Checkers  []*checker.Result  `json:"checkers"`
	Scenarios []Scenario         `json:"scenarios"`
	Faults    map[string]int     `json:"faults"`
	Ops       int                `json:"ops"`
	Timings   map[string]float64 `json:"timings_s,omitempty"`
	Notes     []string           `json:"notes,omitempty"`
}

// VerdictName names a verdict for people.
func VerdictName(v checker.Validity) string {
	switch v {
	case checker.Valid:
		return "valid"
	case checker.Invalid:
		return "invalid"
	}
	return "inconclusive"
}

// ScenariosFrom rebuilds which scenarios ran from the nemesis steps of a
// history: a step that completed ok ran its scenarios; a snapshot install
// seen after a partition ran scenario 11.
func ScenariosFrom(ops []history.Op) []Scenario {
	ran := map[int][]string{}
	for _, p := range history.Pairs(ops) {
		if p.Process() != nemesis.Process {
			continue
		}
		switch {
		case p.F() == "step" && p.Type() == history.OK:
			v := p.InvokeValue()
			for _, s := range v.Scenarios {
				if s == 11 {
					continue
				}
				ran[s] = append(ran[s], v.Nemesis)
			}
		case p.F() == "snapshot-installed" && p.Type() == history.OK:
			ran[11] = append(ran[11], "snapshot installed on "+strings.Join(p.InvokeValue().Targets, ","))
		}
	}
	ids := make([]int, 0, len(nemesis.Scenarios))
	for id := range nemesis.Scenarios {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	out := make([]Scenario, 0, len(ids))
	for _, id := range ids {
		out = append(out, Scenario{ID: id, Name: nemesis.Scenarios[id], Ran: len(ran[id]) > 0, Steps: dedup(ran[id])})
	}
	return out
}

func dedup(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// FaultCounts counts the nemesis operations that took effect, by kind.
func FaultCounts(ops []history.Op) map[string]int {
	out := map[string]int{}
	for _, op := range ops {
		if op.Process == nemesis.Process && op.Type == history.OK {
			switch op.F {
			case "step", "probe":
			default:
				out[op.F]++
			}
		}
	}
	return out
}

// Write writes summary.json and summary.txt into dir.
func Write(dir string, s *Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing summary.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(Text(s)), 0o644); err != nil {
		return fmt.Errorf("writing summary.txt: %w", err)
	}
	return nil
}

// Text is summary.txt.
func Text(s *Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cronoq jepsen run %s\n", filepath.Base(s.Dir))
	fmt.Fprintf(&b, "schedule %s, seed %d, %d history ops\n", s.Schedule, s.Seed, s.Ops)
	fmt.Fprintf(&b, "VERDICT: %s (exit %d)\n\n", strings.ToUpper(s.Verdict), s.ExitCode)
	fmt.Fprintf(&b, "%-10s %-8s %s\n", "checker", "valid", "counts")
	for _, r := range s.Checkers {
		fmt.Fprintf(&b, "%-10s %-8s %s\n", r.Name, r.Valid.String(), fmtCounts(r.Counts))
	}
	for _, r := range s.Checkers {
		if len(r.Anomalies) == 0 && len(r.Notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n[%s]\n", r.Name)
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
		if len(r.AnomalyCount) > 0 {
			fmt.Fprintf(&b, "  anomalies: %s\n", fmtCounts(r.AnomalyCount))
		}
		for _, a := range r.Anomalies {
			fmt.Fprintf(&b, "  %-12s %s", a.Invariant, a.Detail)
			if len(a.Ops) > 0 {
				fmt.Fprintf(&b, " (ops %v)", a.Ops)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nscenarios (JEPSEN.md section C):\n")
	for _, sc := range s.Scenarios {
		mark := "  -"
		if sc.Ran {
			mark = "ran"
		}
		fmt.Fprintf(&b, "  %2d %-3s %s", sc.ID, mark, sc.Name)
		if len(sc.Steps) > 0 {
			fmt.Fprintf(&b, "  [%s]", strings.Join(sc.Steps, "; "))
		}
		b.WriteString("\n")
	}
	b.WriteString("\nfaults injected: " + fmtCountsInt(s.Faults) + "\n")
	if len(s.Timings) > 0 {
		keys := make([]string, 0, len(s.Timings))
		for k := range s.Timings {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("timings:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%.1fs", k, s.Timings[k])
		}
		b.WriteString("\n")
	}
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

func fmtCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func fmtCountsInt(m map[string]int) string {
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = int64(v)
	}
	return fmtCounts(c)
}

// Seconds converts a duration for the timings map.
func Seconds(d time.Duration) float64 { return d.Seconds() }
