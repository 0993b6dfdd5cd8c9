package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cronoq/cronoq/jepsen/checker"
	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nodes"
	"github.com/cronoq/cronoq/jepsen/report"
)

func cmdCheck(args []string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: jepsen check DIR")
		return exitHarness
	}
	dir := fs.Arg(0)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		return exitHarness
	}
	var cfg runConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: config.json: %v\n", err)
		return exitHarness
	}
	code, sum, err := check(dir, cfg)
	if sum != nil {
		if old, err := readSummary(dir); err == nil {
			sum.Timings = old.Timings
			sum.Notes = old.Notes
		}
		if werr := report.Write(dir, sum); werr != nil {
			err = errors.Join(err, werr)
		}
		fmt.Print(report.Text(sum))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		return exitHarness
	}
	return code
}

func readSummary(dir string) (*report.Summary, error) {
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return nil, err
	}
	var s report.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// check runs every checker on the run saved in dir and writes
// register.html and timeline.html. The caller writes the summary.
func check(dir string, cfg runConfig) (int, *report.Summary, error) {
	ops, err := history.Read(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return exitHarness, nil, err
	}
	leaders, err := nodes.ReadLeaders(filepath.Join(dir, "leaders.jsonl"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return exitHarness, nil, err
	}
	results, cerr := checker.All(ops, leaders, cfg.Params, filepath.Join(dir, "register.html"))
	verdict := checker.Combine(results)
	sum := &report.Summary{
		Dir:       dir,
		Schedule:  cfg.Options.Schedule,
		Seed:      cfg.Options.Seed,
		Verdict:   report.VerdictName(verdict),
		ExitCode:  checker.ExitCode(verdict),
		Checkers:  results,
		Scenarios: report.ScenariosFrom(ops),
		Faults:    report.FaultCounts(ops),
		Ops:       len(ops),
	}
	terr := report.WriteTimeline(filepath.Join(dir, "timeline.html"), ops, leaders, results)
	if err := errors.Join(cerr, terr); err != nil {
		return exitHarness, sum, err
	}
	return sum.ExitCode, sum, nil
}

func cmdCleanup(args []string) int {
	root := "jepsen/results"
	if len(args) > 0 {
		root = args[0]
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		return exitHarness
	}
	for _, e := range entries {
		d := filepath.Join(root, e.Name(), "data")
		if _, err := os.Stat(d); err == nil {
			fmt.Println("removing", d)
			_ = os.RemoveAll(d)
		}
	}
	return exitValid
}
