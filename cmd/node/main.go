// Command cronoq is both a cronoq node (`cronoq agent`) and the command-line
// client of a cronoq cluster: submit, inspect, wait for, complete and cancel
// tasks, submit and follow workflows, manage recurring schedules, run an
// exec worker, and operate the cluster.
//
// Usage:
//
//	cronoq <command> [flags] [args]
//
// Flags may come before or after positional arguments. Run `cronoq help` for
// the list of commands and `cronoq <command> -h` for the flags of one.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	// Time zones for -tz and schedules must not depend on the host's tzdata.
	_ "time/tzdata"
)

// Exit statuses.
const (
	exitOK = 0
	// exitError: the command failed (unreachable cluster, refused request,
	// task not found, ...).
	exitError = 1
	// exitUsage: bad flags or arguments, or input refused before (or by) the
	// cluster as invalid.
	exitUsage = 2
	// exitTaskFailed: the awaited task (or workflow) ended but did not
	// succeed (failed, cancelled or expired).
	exitTaskFailed = 3
)

// stdio are the standard streams a command uses.
type stdio struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// A command is one subcommand of the binary.
type command struct {
	// Summary is the one-line description `cronoq help` shows.
	Summary string
	// Run executes the command with the arguments after its name. ctx is
	// cancelled by the first SIGINT or SIGTERM (a second one kills the
	// process). A nil error exits 0; otherwise the error is printed on
	// stderr as one line "cronoq: <message>" and the exit status is chosen
	// by exitCode (a *usageError exits 2, errHelp exits 0).
	Run func(ctx context.Context, s stdio, args []string) error
}

// commands is the table of top-level commands. Commands defined in other
// files of this package (such as `agent`) add themselves with register from
// an init function.
var commands = map[string]command{
	"submit":    {Summary: "Submit a task", Run: runSubmit},
	"status":    {Summary: "Show a task, by id or by key", Run: runStatus},
	"wait":      {Summary: "Wait until a task ends and show it", Run: runWait},
	"cancel":    {Summary: "Cancel a task by id or key, or the tasks of a pool by status", Run: runCancel},
	"complete":  {Summary: "Complete (or fail) an external task waiting for it", Run: runComplete},
	"workflow":  {Summary: "Manage workflows (steps depending on each other): submit, status, wait, cancel, list", Run: runWorkflow},
	"list":      {Summary: "List tasks newest first, filtered by pool, status and kind, page by page", Run: runList},
	"recurring": {Summary: "Manage recurring (cron) schedules: add, list, rm, pause, resume", Run: runRecurring},
	"worker":    {Summary: "Run tasks of a pool with shell commands", Run: runWorker},
	"members":   {Summary: "List the nodes of the cluster as gossip sees them", Run: runMembers},
	"operator":  {Summary: "Operate the cluster: Raft configuration, snapshots (backups), gossip encryption keyring", Run: runOperator},
	"health":    {Summary: "Show a node's view of the cluster's health", Run: runHealth},
	"version":   {Summary: "Show the version of this binary", Run: runVersion},
}

// register adds a top-level command. It panics when name is taken, which can
// only be a programming error.
func register(name string, c command) {
	if _, dup := commands[name]; dup {
		panic("cronoq: command " + name + " registered twice")
	}
	commands[name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, the next one gets its default action.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// run executes the command line args (without the program name) and returns
// the exit status.
func run(ctx context.Context, args []string, s stdio) int {
	if len(args) == 0 {
		return report(s.Stderr, usagef("missing command (see 'cronoq help')"))
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		printUsage(s.Stdout)
		return exitOK
	case "help":
		if len(rest) > 0 {
			// "help recurring add" is "recurring add -h".
			return run(ctx, append(slices.Clone(rest), "-h"), s)
		}
		printUsage(s.Stdout)
		return exitOK
	case "-version", "--version":
		name = "version"
	}
	cmd, ok := commands[name]
	if !ok {
		return report(s.Stderr, usagef("unknown command %q (see 'cronoq help')", name))
	}
	return report(s.Stderr, cmd.Run(ctx, s, rest))
}

// report prints err (if any) as one line on w and returns the exit status
// for it.
func report(w io.Writer, err error) int {
	code := exitCode(err)
	if code != exitOK {
		fmt.Fprintln(w, "cronoq: "+oneLine(err.Error()))
	}
	return code
}

// exitCode maps a command's error to the process exit status.
func exitCode(err error) int {
	var ue *usageError
	var tf *taskFailedError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &tf):
		return exitTaskFailed
	default:
		return exitError
	}
}

// oneLine folds a message onto a single line.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" })
	return strings.Join(lines, " | ")
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: cronoq <command> [flags] [args]

cronoq is a durable task scheduler replicated with Raft. This one binary runs
a node (agent) and is the command-line client of a cluster.

Commands:
`)
	printTable(w, "  ", commands)
	fmt.Fprint(w, `
Client commands talk to the nodes named by -addr HOST:PORT[,HOST:PORT...]
(default $CRONOQ_ADDR, else 127.0.0.1:8650) and print JSON with -o json.
With TLS, -ca-cert, -client-cert and -client-key (or $CRONOQ_CACERT,
$CRONOQ_CLIENT_CERT, $CRONOQ_CLIENT_KEY) make them dial HTTPS; 'cronoq tls'
makes the certificates (see docs/security.md).
Flags may come before or after arguments. Run 'cronoq <command> -h' (or
'cronoq help <command>') for the flags of a command.

Exit status: 0 success; 1 error; 2 bad usage or invalid input; 3 the awaited
task or workflow ended without succeeding (wait, submit -wait, workflow wait,
workflow submit -wait).
`)
}

// printTable lists commands sorted by name.
func printTable(w io.Writer, indent string, table map[string]command) {
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "%s%s\t%s\n", indent, n, table[n].Summary)
	}
	_ = tw.Flush()
}

// dispatch runs the subcommand of a command group (such as `recurring`).
func dispatch(ctx context.Context, s stdio, group string, table map[string]command, args []string) error {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s <command> [flags] [args]\n\nCommands:\n", group)
		printTable(w, "  ", table)
		fmt.Fprintf(w, "\nRun '%s <command> -h' for the flags of a command.\n", group)
	}
	if len(args) == 0 {
		return usagef("missing command after '%s' (see '%s -h')", group, group)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(s.Stdout)
		return errHelp
	}
	cmd, ok := table[args[0]]
	if !ok {
		return usagef("unknown command %q (see '%s -h')", strings.TrimPrefix(group, "cronoq ")+" "+args[0], group)
	}
	return cmd.Run(ctx, s, args[1:])
}

func runVersion(_ context.Context, s stdio, args []string) error {
	c := newCmd("version", "cronoq version [-o json]", "Show the version of this binary and the Go release it was built with.")
	out := c.outputFlag()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	version := binaryVersion()
	if out.json() {
		return writeJSON(s.Stdout, struct {
			Version string `json:"version"`
			Go      string `json:"go"`
		}{version, runtime.Version()})
	}
	_, err := fmt.Fprintf(s.Stdout, "cronoq %s (%s)\n", version, runtime.Version())
	return err
}

// version is the release of this binary, stamped by the build:
//
//	go build -ldflags "-X main.version=$(git describe --tags --always --dirty)"
//
// (make build does so). Empty in a build that did not stamp it; see
// binaryVersion.
var version string

// binaryVersion is the stamped version, else the module version of a
// `go install module@version`, else the Git commit the build recorded
// ("devel+abc1234", "-dirty" when the tree had changes), else "dev".
func binaryVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return "devel+" + rev[:min(len(rev), 7)] + dirty
}
