// Package checker decides whether a run's history is valid: queue safety
// (no loss, no phantom, one task per key, one recorded completion, fencing),
// per-task linearizability (porcupine), recurring schedule safety, workflow
// safety (dependencies, cancels, spawns, statuses), ordering lanes (one
// task of a key at a time, in submit order), durable subscriptions (every
// terminal event delivered and acknowledged, in log order), equal
// replicated state on every node, and whether the run did enough to mean
// anything (vacuity).
package checker

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Validity is a checker's verdict: true, false or unknown.
type Validity int

// Verdicts.
const (
	Unknown Validity = iota
	Valid
	Invalid
)

// MarshalJSON writes true, false or "unknown".
func (v Validity) MarshalJSON() ([]byte, error) {
	switch v {
	case Valid:
		return []byte("true"), nil
	case Invalid:
		return []byte("false"), nil
	}
	return []byte(`"unknown"`), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Validity) UnmarshalJSON(b []byte) error {
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	switch x {
	case true:
		*v = Valid
	case false:
		*v = Invalid
	default:
		*v = Unknown
	}
	return nil
}

func (v Validity) String() string {
	switch v {
	case Valid:
		return "valid"
	case Invalid:
		return "INVALID"
	}
	return "unknown"
}

// MaxAnomalies is how many anomalies a result keeps.
const MaxAnomalies = 20

// Anomaly is one violation.
type Anomaly struct {
	Invariant string  `json:"invariant"`
	Detail    string  `json:"detail"`
	Ops       []int64 `json:"ops,omitempty"` // history indexes
}

// Result is one checker's outcome.
type Result struct {
	Name      string           `json:"name"`
	Valid     Validity         `json:"valid"`
	Counts    map[string]int64 `json:"counts"`
	Anomalies []Anomaly        `json:"anomalies,omitempty"` // the first MaxAnomalies
	// AnomalyCount counts every anomaly, by invariant.
	AnomalyCount map[string]int64 `json:"anomaly_count,omitempty"`
	// Notes explain an unknown verdict or qualify a valid one.
	Notes []string `json:"notes,omitempty"`
}

func newResult(name string) *Result {
	return &Result{Name: name, Valid: Valid, Counts: map[string]int64{}, AnomalyCount: map[string]int64{}}
}

// fail records an anomaly and makes the result invalid.
func (r *Result) fail(inv string, ops []int64, format string, args ...any) {
	r.Valid = Invalid
	r.AnomalyCount[inv]++
	if len(r.Anomalies) < MaxAnomalies {
		r.Anomalies = append(r.Anomalies, Anomaly{Invariant: inv, Detail: fmt.Sprintf(format, args...), Ops: ops})
	}
}

// unknown makes a not-invalid result unknown, with a note.
func (r *Result) unknown(format string, args ...any) {
	if r.Valid != Invalid {
		r.Valid = Unknown
	}
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Combine is the overall verdict of several results: invalid if any is,
// else unknown if any is, else valid.
func Combine(rs []*Result) Validity {
	out := Valid
	for _, r := range rs {
		switch r.Valid {
		case Invalid:
			return Invalid
		case Unknown:
			out = Unknown
		}
	}
	return out
}

// ExitCode maps a verdict to the run's exit code.
func ExitCode(v Validity) int {
	switch v {
	case Valid:
		return 0
	case Invalid:
		return 1
	}
	return 2
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
