package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronoq/cronoq/jepsen/checker"
)

// selfCase is one self-test run: a build with one deliberate bug, the
// schedule that makes it observable, and the checkers that must catch it
// (none: the run must be valid).
type selfCase struct {
	bug      string
	bin      string
	schedule string
	expect   []string
}

func selfCases(binDir string) []selfCase {
	b := func(name string) string { return filepath.Join(binDir, name) }
	return []selfCase{
		{"ackearly", b("cronoq-jepsen-ackearly"), "bug-ackearly", []string{"queue"}},
		{"noepoch", b("cronoq-jepsen-noepoch"), "bug-noepoch", []string{"fsm", "queue", "register", "cron"}},
		{"stalelease", b("cronoq-jepsen-stalelease"), "bug-stalelease", []string{"queue"}},
		{"cronrefire", b("cronoq-jepsen-cronrefire"), "bug-cronrefire", []string{"cron"}},
		{"followerread", b("cronoq-jepsen-followerread"), "bug-followerread", []string{"register"}},
		{"depdone", b("cronoq-jepsen-depdone"), "bug-depdone", []string{"workflow"}},
		{"laneoverlap", b("cronoq-jepsen-laneoverlap"), "bug-laneoverlap", []string{"ordering"}},
		{"ackonsend", b("cronoq-jepsen-ackonsend"), "bug-ackonsend", []string{"delivery"}},
		{"none", b("cronoq-jepsen"), "smoke", nil},
	}
}

func cmdSelftest(args []string) int {
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	binDir := fs.String("bin-dir", "bin", "folder of cronoq-jepsen and cronoq-jepsen-BUG binaries")
	results := fs.String("results", "jepsen/results", "results folder")
	script := fs.String("script", "jepsen/run-in-netns.sh", "namespace wrapper")
	only := fs.String("only", "", "comma-separated bugs to run (default: all, and the normal build)")
	if err := fs.Parse(args); err != nil {
		return exitHarness
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		return exitHarness
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	type row struct {
		c       selfCase
		verdict string
		invalid []string
		pass    bool
		dir     string
		took    time.Duration
	}
	var rows []row
	for _, c := range selfCases(*binDir) {
		if len(want) > 0 && !want[c.bug] {
			continue
		}
		dir := filepath.Join(*results, fmt.Sprintf("%s-selftest-%s", stamp, c.bug))
		limit, budget := "150s", "140s"
		if c.schedule == "smoke" {
			limit, budget = "225s", "215s"
		}
		cmdArgs := []string{limit, self, "run", "-bin", c.bin, "-schedule", c.schedule, "-out", dir, "-budget", budget}
		if c.schedule != "smoke" {
			cmdArgs = append(cmdArgs, "-recovery", "10s", "-drain", "20s")
		}
		fmt.Fprintf(os.Stderr, "selftest: bug %s, schedule %s -> %s\n", c.bug, c.schedule, dir)
		t0 := time.Now()
		cmd := exec.Command(*script, cmdArgs...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		_ = cmd.Run()
		r := row{c: c, dir: dir, took: time.Since(t0), verdict: "harness error"}
		if sum, err := readSummary(dir); err == nil {
			r.verdict = sum.Verdict
			for _, res := range sum.Checkers {
				if res.Valid == checker.Invalid {
					r.invalid = append(r.invalid, res.Name)
				}
			}
		}
		if c.expect == nil {
			r.pass = r.verdict == "valid"
		} else if r.verdict == "invalid" {
			for _, e := range c.expect {
				for _, got := range r.invalid {
					if e == got {
						r.pass = true
					}
				}
			}
		}
		rows = append(rows, r)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BUG\tSCHEDULE\tEXPECTED CHECKER\tVERDICT\tINVALID CHECKERS\tRESULT\tTIME\tDIR")
	allPass := true
	for _, r := range rows {
		exp := strings.Join(r.c.expect, "|")
		if exp == "" {
			exp = "(all valid)"
		}
		res := "PASS"
		if !r.pass {
			res, allPass = "FAIL", false
		}
		inv := strings.Join(r.invalid, ",")
		if inv == "" {
			inv = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.c.bug, r.c.schedule, exp, r.verdict, inv, res, r.took.Round(time.Second), r.dir)
	}
	_ = tw.Flush()
	if !allPass {
		return exitInvalid
	}
	return exitValid
}
