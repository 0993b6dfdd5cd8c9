package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/client/clienttest"
)

// cliResult is what one run of the CLI printed and returned.
type cliResult struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	return runCLIContext(context.Background(), stdin, args...)
}

func runCLIContext(ctx context.Context, stdin string, args ...string) cliResult {
	var out, errOut bytes.Buffer
	code := run(ctx, args, stdio{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut})
	return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

// requireFailure checks a failed run: the exit status, nothing on stdout,
// and exactly one line on stderr containing each of want.
func requireFailure(t *testing.T, r cliResult, code int, want ...string) {
	t.Helper()
	require.Equal(t, code, r.code, "stderr: %s", r.stderr)
	require.Empty(t, r.stdout)
	require.True(t, strings.HasPrefix(r.stderr, "cronoq: "), "stderr: %q", r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
	require.True(t, strings.HasSuffix(r.stderr, "\n"))
	for _, w := range want {
		require.Contains(t, r.stderr, w)
	}
}

// fakeNow is when the fake clusters of the tests start their clock.
var fakeNow = time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)

// startFake starts a fake cluster whose clock starts at fakeNow and
// returns it with the address of its first node.
func startFake(t *testing.T, opts ...clienttest.Option) (*clienttest.Cluster, string) {
	t.Helper()
	f := clienttest.NewCluster(t, append([]clienttest.Option{clienttest.WithStartTime(fakeNow)}, opts...)...)
	return f, f.Node(0).Addr()
}

var (
	submittedAt = time.Date(2030, 1, 2, 14, 4, 5, 0, time.UTC)
	finishedAt  = submittedAt.Add(3 * time.Second)
)

// doneTask is a task of pool p that ended with status.
func doneTask(id string, status cronoqv1.Status, output, errMsg string) *cronoqv1.Task {
	return &cronoqv1.Task{
		Id: id, Key: "key-" + id, Status: status, Attempt: 1,
		Template: &cronoqv1.TaskTemplate{
			Pool: "p", Kind: "echo", MaxAttempts: 5, Payload: []byte("in"),
			Labels: []*cronoqv1.KV{{Key: "zone", Value: "eu"}},
		},
		Output: []byte(output), Error: errMsg,
		SubmittedAt: timestamppb.New(submittedAt), RunAt: timestamppb.New(submittedAt), FinishedAt: timestamppb.New(finishedAt),
	}
}

func decodeObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m), "stdout: %s", s)
	return m
}

func requireOK(t *testing.T, r cliResult) {
	t.Helper()
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	require.Empty(t, r.stderr)
}

// kvs copies KV messages into fresh values comparable with require.Equal.
func kvs(in []*cronoqv1.KV) []*cronoqv1.KV {
	out := make([]*cronoqv1.KV, 0, len(in))
	for _, kv := range in {
		out = append(out, &cronoqv1.KV{Key: kv.GetKey(), Value: kv.GetValue()})
	}
	return out
}

// closedAddr is an address nothing listens on.
const closedAddr = "127.0.0.1:1"

func TestLocalValidation(t *testing.T) {
	// A command that wrongly passed validation must not reach a node.
	t.Setenv("CRONOQ_ADDR", closedAddr)
	missingFile := filepath.Join(t.TempDir(), "missing.json")
	tests := []struct {
		name string
		cmd  []string
		args []string
		want []string // substrings of the one stderr line, naming the flag
	}{
		{"submit without pool", []string{"submit"}, []string{"-kind", "k"}, []string{"-pool is required"}},
		{"submit without kind", []string{"submit"}, []string{"-pool", "p"}, []string{"-kind is required"}},
		{"submit empty kind", []string{"submit"}, []string{"-pool", "p", "-kind", ""}, []string{"-kind is required"}},
		{"submit delay and run-at", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-delay", "5s", "-run-at", "2030-01-01T00:00:00Z"}, []string{"-delay and -run-at exclude each other"}},
		{"submit run-at and delay after", []string{"submit"}, []string{"-pool", "p", "-run-at", "2030-01-01T00:00:00Z", "-kind", "k", "-delay", "0s"}, []string{"-delay and -run-at exclude each other"}},
		{"submit bad delay", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-delay", "soon"}, []string{`invalid value "soon" for flag -delay`, "not a duration"}},
		{"submit negative delay", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-delay", "-5s"}, []string{"flag -delay: must not be negative"}},
		{"submit bad run-at", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-run-at", "tomorrow"}, []string{"flag -run-at: not an RFC 3339 time"}},
		{"submit bad deadline", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-deadline", "2030-01-01"}, []string{"flag -deadline: not an RFC 3339 time"}},
		{"submit bad timeout", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-timeout", "-1s"}, []string{"flag -timeout: must not be negative"}},
		{"submit zero max-attempts", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-max-attempts", "0"}, []string{"flag -max-attempts: must be at least 1"}},
		{"submit bad priority", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-priority", "urgent"}, []string{"flag -priority: must be one of high, normal, low"}},
		{"submit bad label", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-label", "gpu"}, []string{`invalid value "gpu" for flag -label: want key=value`}},
		{"submit duplicate label", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-label", "a=1", "-label", "a=2"}, []string{`flag -label: key "a" given twice`}},
		{"submit bad tag", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-tag", "=x"}, []string{"flag -tag: empty key"}},
		{"submit missing payload file", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-payload", "@" + missingFile}, []string{"reading -payload file", "missing.json"}},
		{"submit wait-timeout without wait", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-wait-timeout", "5s"}, []string{"-wait-timeout needs -wait"}},
		{"submit positional", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "extra"}, []string{`unexpected argument "extra"`}},
		{"submit bad addr", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-addr", "nohost"}, []string{`invalid -addr "nohost"`}},
		{"submit zero rpc-timeout", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-rpc-timeout", "0s"}, []string{"flag -rpc-timeout: must be positive"}},
		{"submit bad output", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-o", "yaml"}, []string{"flag -o: must be text or json"}},
		{"submit unknown flag", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-colour"}, []string{"flag provided but not defined: -colour", "cronoq submit -h"}},

		{"status without id", []string{"status"}, nil, []string{"missing task ID (or -key KEY)"}},
		{"status id and key", []string{"status"}, []string{"ID", "-key", "k"}, []string{"give a task ID or -key, not both"}},
		{"status two ids", []string{"status"}, []string{"A", "B"}, []string{`unexpected argument "B"`}},
		{"status empty id", []string{"status"}, []string{""}, []string{"empty task ID"}},
		{"status flag missing value", []string{"status"}, []string{"ID", "-key"}, []string{"flag needs an argument: -key"}},
		{"wait bad timeout", []string{"wait"}, []string{"ID", "-timeout", "10"}, []string{`invalid value "10" for flag -timeout`}},
		{"wait without id", []string{"wait"}, []string{"-timeout", "1s"}, []string{"missing task ID"}},
		{"cancel without id", []string{"cancel"}, nil, []string{"missing task ID (or -key KEY)"}},
		{"cancel two ids", []string{"cancel"}, []string{"A", "B"}, []string{`unexpected argument "B"`}},
		{"cancel id and key", []string{"cancel"}, []string{"A", "-key", "k"}, []string{"give a task ID or -key, not both"}},
		{"cancel pool without status", []string{"cancel"}, []string{"-pool", "p"}, []string{"-pool needs -status"}},
		{"cancel status without pool", []string{"cancel"}, []string{"-status", "queued"}, []string{"-status and -kind need -pool"}},
		{"cancel kind without pool", []string{"cancel"}, []string{"-kind", "k"}, []string{"-status and -kind need -pool"}},
		{"cancel pool and id", []string{"cancel"}, []string{"A", "-pool", "p", "-status", "queued"}, []string{"give a task ID, -key, or -pool with -status, not several"}},
		{"cancel pool and key", []string{"cancel"}, []string{"-key", "k", "-pool", "p", "-status", "queued"}, []string{"not several"}},
		{"cancel ended status", []string{"cancel"}, []string{"-pool", "p", "-status", "failed"}, []string{`unknown status "failed"`}},
		{"cancel unknown status", []string{"cancel"}, []string{"-pool", "p", "-status", "queued,stuck"}, []string{`unknown status "stuck"`}},
		{"retry without id", []string{"retry"}, nil, []string{"missing task ID (or -key KEY)"}},
		{"retry id and key", []string{"retry"}, []string{"A", "-key", "k"}, []string{"give a task ID or -key, not both"}},
		{"retry two ids", []string{"retry"}, []string{"A", "B"}, []string{`unexpected argument "B"`}},

		{"list zero limit", []string{"list"}, []string{"-limit", "0"}, []string{`invalid value "0" for flag -limit: must be at least 1`}},
		{"list negative limit", []string{"list"}, []string{"-limit", "-5"}, []string{"flag -limit: must be at least 1"}},
		{"list bad limit", []string{"list"}, []string{"-limit", "many"}, []string{"flag -limit: not an integer"}},
		{"list bad status", []string{"list"}, []string{"-status", "done"}, []string{`flag -status: unknown status "done"`}},
		{"list empty pool", []string{"list"}, []string{"-pool", ","}, []string{"flag -pool: empty value"}},
		{"list positional", []string{"list"}, []string{"queued"}, []string{`unexpected argument "queued"`}},
		{"list bad order", []string{"list"}, []string{"-order", "latest"}, []string{"flag -order: must be one of desc, asc, newest, oldest"}},
		{"list empty kind", []string{"list"}, []string{"-kind", ","}, []string{"flag -kind: empty value"}},

		{"recurring add without name", []string{"recurring", "add"}, []string{"-cron", "@hourly", "-pool", "p", "-kind", "k"}, []string{"missing argument"}},
		{"recurring add without cron", []string{"recurring", "add"}, []string{"n", "-pool", "p", "-kind", "k"}, []string{"-cron is required"}},
		{"recurring add bad overlap", []string{"recurring", "add"}, []string{"n", "-cron", "@daily", "-overlap", "queue", "-pool", "p", "-kind", "k"}, []string{"flag -overlap: must be one of skip, allow"}},
		{"recurring add bad catch-up", []string{"recurring", "add"}, []string{"n", "-cron", "@daily", "-catch-up", "some", "-pool", "p", "-kind", "k"}, []string{"flag -catch-up: must be one of once, skip, all"}},
		{"recurring add limit without all", []string{"recurring", "add"}, []string{"n", "-cron", "@daily", "-catch-up-limit", "3", "-pool", "p", "-kind", "k"}, []string{"-catch-up-limit needs -catch-up all"}},
		{"recurring add without pool", []string{"recurring", "add"}, []string{"n", "-cron", "@daily", "-kind", "k"}, []string{"-pool is required"}},
		{"recurring add without kind", []string{"recurring", "add"}, []string{"n", "-cron", "@daily", "-pool", "p"}, []string{"-kind is required"}},
		{"recurring rm without name", []string{"recurring", "rm"}, nil, []string{"missing argument"}},
		{"recurring pause two names", []string{"recurring", "pause"}, []string{"a", "b"}, []string{`unexpected argument "b"`}},
		{"recurring unknown", []string{"recurring", "edit"}, nil, []string{`unknown command "recurring edit"`}},
		{"recurring nothing", []string{"recurring"}, nil, []string{"missing command after 'cronoq recurring'"}},

		{"worker without pool", []string{"worker"}, []string{"-handler", "k=cat"}, []string{"-pool is required"}},
		{"worker without handler", []string{"worker"}, []string{"-pool", "p"}, []string{"at least one -handler KIND=COMMAND is required"}},
		{"worker bad handler", []string{"worker"}, []string{"-pool", "p", "-handler", "cat"}, []string{"flag -handler: want KIND=COMMAND"}},
		{"worker zero concurrency", []string{"worker"}, []string{"-pool", "p", "-handler", "k=cat", "-concurrency", "0"}, []string{"flag -concurrency: must be at least 1"}},
		{"worker zero max-output", []string{"worker"}, []string{"-pool", "p", "-handler", "k=cat", "-max-output", "0"}, []string{"flag -max-output: must be positive"}},
		{"worker zero kill-grace", []string{"worker"}, []string{"-pool", "p", "-handler", "k=cat", "-kill-grace", "0s"}, []string{"flag -kill-grace: must be positive"}},
		{"worker bad log level", []string{"worker"}, []string{"-pool", "p", "-handler", "k=cat", "-log-level", "loud"}, []string{"flag -log-level: must be one of"}},
		{"worker bad addr", []string{"worker"}, []string{"-pool", "p", "-handler", "k=cat", "-addr", ":x"}, []string{`invalid -addr ":x"`}},

		{"remove-peer without id", []string{"operator", "raft", "remove-peer"}, nil, []string{"-id is required"}},
		{"remove-peer two ids", []string{"operator", "raft", "remove-peer"}, []string{"-id", "a", "b"}, []string{"give the server ID once"}},
		{"transfer positional", []string{"operator", "raft", "transfer-leadership"}, []string{"n2"}, []string{`unexpected argument "n2"`}},
		{"operator unknown", []string{"operator", "autopilot"}, nil, []string{`unknown command "operator autopilot"`}},
		{"members positional", []string{"members"}, []string{"x"}, []string{`unexpected argument "x"`}},
		{"health bad output", []string{"health"}, []string{"-o", "xml"}, []string{"flag -o: must be text or json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, tc.cmd...), tc.args...)
			requireFailure(t, runCLI(t, "", args...), exitUsage, tc.want...)
		})
	}
}

// TestClusterValidation covers what the CLI leaves to the cluster to check:
// its refusals are usage errors naming the command's flag for the field.
func TestClusterValidation(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	tests := []struct {
		name string
		cmd  []string
		args []string
		want []string // substrings of the one stderr line, naming the flag
	}{
		{"submit deadline before run-at", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-run-at", "2030-01-04T00:00:00Z", "-deadline", "2030-01-03T00:00:00Z"}, []string{"invalid -deadline: must be after the run-at time"}},
		{"submit deadline passed", []string{"submit"}, []string{"-pool", "p", "-kind", "k", "-deadline", "2030-01-01T00:00:00Z"}, []string{"invalid -deadline: already passed"}},
		{"recurring add bad cron", []string{"recurring", "add"}, []string{"n", "-cron", "61 * * * *", "-pool", "p", "-kind", "k"}, []string{"invalid -cron:", "minute field"}},
		{"recurring add bad every", []string{"recurring", "add"}, []string{"n", "-cron", "@every 1.5s", "-pool", "p", "-kind", "k"}, []string{"invalid -cron:", "whole number of seconds"}},
		{"recurring add bad tz", []string{"recurring", "add"}, []string{"n", "-cron", "@daily", "-tz", "Mars/Base", "-pool", "p", "-kind", "k"}, []string{"invalid -tz:", "Mars/Base"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{}, tc.cmd...), tc.args...), "-addr", addr)
			requireFailure(t, runCLI(t, "", args...), exitUsage, tc.want...)
		})
	}
	require.Empty(t, f.Tasks(), "nothing was submitted")
	require.Empty(t, f.Schedules(), "nothing was scheduled")
}

func TestTopLevel(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "")
	requireFailure(t, r, exitUsage, "missing command (see 'cronoq help')")

	r = runCLI(t, "", "frobnicate")
	requireFailure(t, r, exitUsage, `unknown command "frobnicate"`)

	for _, h := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		r = runCLI(t, "", h...)
		require.Equal(t, exitOK, r.code)
		require.Empty(t, r.stderr)
		require.True(t, strings.HasPrefix(r.stdout, "Usage: cronoq <command>"))
		for name := range commands {
			require.Contains(t, r.stdout, "\n  "+name+" ", "help lists %s", name)
		}
	}
}

func TestCommandHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args  []string
		usage string
		flags []string
	}{
		{[]string{"submit", "-h"}, "cronoq submit -pool P -kind K", []string{"-pool", "-kind", "-key", "-priority", "-delay", "-run-at", "-timeout", "-deadline", "-max-attempts", "-label", "-tag", "-payload", "-wait", "-wait-timeout", "-addr", "-o", "-rpc-timeout", "-depends-on", "-dependency-policy", "-external"}},
		{[]string{"help", "submit"}, "cronoq submit -pool P -kind K", []string{"-pool"}},
		{[]string{"status", "ID", "-h"}, "cronoq status ID", []string{"-key", "-addr", "-o"}},
		{[]string{"wait", "--help"}, "cronoq wait ID", []string{"-timeout", "-key"}},
		{[]string{"cancel", "-help"}, "cronoq cancel ID", []string{"-addr", "-key", "-pool", "-status", "-kind"}},
		{[]string{"retry", "-h"}, "cronoq retry ID", []string{"-key", "-addr", "-o"}},
		{[]string{"delete", "-h"}, "cronoq delete ID", []string{"-key", "-addr", "-o"}},
		{[]string{"list", "-h"}, "cronoq list", []string{"-pool", "-status", "-kind", "-order", "-limit", "-after", "-stale"}},
		{[]string{"recurring", "add", "-h"}, "cronoq recurring add NAME -cron EXPR", []string{"-cron", "-tz", "-pool", "-kind", "-payload", "-overlap", "-catch-up", "-catch-up-limit", "-paused", "-workflow"}},
		{[]string{"complete", "-h"}, "cronoq complete ID", []string{"-key", "-output", "-fail", "-addr", "-o"}},
		{[]string{"workflow", "submit", "-h"}, "cronoq workflow submit -f FILE", []string{"-f", "-key", "-wait", "-wait-timeout", "-addr", "-o"}},
		{[]string{"help", "workflow", "status"}, "cronoq workflow status ID", []string{"-key", "-o"}},
		{[]string{"workflow", "wait", "-h"}, "cronoq workflow wait ID", []string{"-timeout", "-key"}},
		{[]string{"workflow", "cancel", "-h"}, "cronoq workflow cancel ID", []string{"-addr"}},
		{[]string{"workflow", "list", "-h"}, "cronoq workflow list", []string{"-status", "-limit", "-after", "-stale"}},
		{[]string{"help", "recurring", "list"}, "cronoq recurring list", []string{"-o"}},
		{[]string{"recurring", "rm", "-h"}, "cronoq recurring rm NAME", nil},
		{[]string{"recurring", "pause", "-h"}, "cronoq recurring pause NAME", nil},
		{[]string{"recurring", "resume", "-h"}, "cronoq recurring resume NAME", nil},
		{[]string{"recurring", "-h"}, "cronoq recurring <command>", []string{"add", "list", "rm", "pause", "resume"}},
		{[]string{"worker", "-h"}, "cronoq worker -pool P -handler KIND=COMMAND", []string{"-pool", "-concurrency", "-label", "-handler", "-workdir", "-max-output", "-max-spawn", "-kill-grace", "-id"}},
		{[]string{"members", "-h"}, "cronoq members", []string{"-addr"}},
		{[]string{"operator", "-h"}, "cronoq operator <command>", []string{"raft"}},
		{[]string{"operator", "raft", "help"}, "cronoq operator raft <command>", []string{"list-peers", "remove-peer", "transfer-leadership"}},
		{[]string{"operator", "raft", "list-peers", "-h"}, "cronoq operator raft list-peers", nil},
		{[]string{"operator", "raft", "remove-peer", "-h"}, "cronoq operator raft remove-peer -id ID", []string{"-id"}},
		{[]string{"operator", "raft", "transfer-leadership", "-h"}, "cronoq operator raft transfer-leadership [-id ID]", []string{"-id"}},
		{[]string{"health", "-h"}, "cronoq health", nil},
		{[]string{"version", "-h"}, "cronoq version", []string{"-o"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", tc.args...)
			require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
			require.Empty(t, r.stderr)
			require.True(t, strings.HasPrefix(r.stdout, "Usage: "+tc.usage), "got %q", r.stdout)
			for _, f := range tc.flags {
				require.Regexp(t, `(?m)^  `+regexp.QuoteMeta(f)+`( |$)`, r.stdout)
			}
		})
	}
}

func TestListHelpOrder(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "list", "-h")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "List tasks newest first")
	require.Contains(t, r.stdout, "desc (newest first, also: newest) or asc (oldest first, also: oldest) (default desc)")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "version", "-o", "json")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, `"version": `)
	require.Contains(t, r.stdout, `"go": "go1.`)
	r = runCLI(t, "", "--version")
	require.Equal(t, exitOK, r.code)
	require.True(t, strings.HasPrefix(r.stdout, "cronoq "))
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { register("submit", command{}) })
}
