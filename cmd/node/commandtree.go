package main

import (
	"bytes"
	"context"
	"regexp"
	"sort"
	"strings"
)

// cmdNode is one command of the binary as its help describes it: a group
// of subcommands, or a command with flags.
type cmdNode struct {
	path    []string // "operator", "raft", "list-peers"
	summary string
	subs    []*cmdNode
	flags   []cmdFlag
}

// cmdFlag is one flag of a command and the placeholder of its value ("" for
// a boolean flag).
type cmdFlag struct{ name, placeholder string }

var (
	helpCommandLine = regexp.MustCompile(`^  (\S+)\s{2,}(.*)$`)
	helpFlagLine    = regexp.MustCompile(`^  -(\S+)(?: (\S+))?$`)
)

// commandTree describes every command from the command table, reading
// each one's help (-h) for its subcommands and flags.
func commandTree() []*cmdNode {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*cmdNode
	for _, n := range names {
		out = append(out, describeCommand([]string{n}, commands[n].Summary))
	}
	return out
}

// describeCommand reads the help of the command at path.
func describeCommand(path []string, summary string) *cmdNode {
	var buf bytes.Buffer
	run(context.Background(), append(append([]string(nil), path...), "-h"),
		stdio{Stdin: strings.NewReader(""), Stdout: &buf, Stderr: &buf})
	node := &cmdNode{path: path, summary: summary}
	section := ""
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case line == "Commands:" || line == "Flags:":
			section = line
			continue
		case line == "" || !strings.HasPrefix(line, "  "):
			if line == "" && section == "Commands:" {
				section = ""
			}
			continue
		}
		switch section {
		case "Commands:":
			if m := helpCommandLine.FindStringSubmatch(line); m != nil {
				node.subs = append(node.subs, describeCommand(append(append([]string(nil), path...), m[1]), m[2]))
			}
		default:
			if m := helpFlagLine.FindStringSubmatch(line); m != nil {
				node.flags = append(node.flags, cmdFlag{name: m[1], placeholder: m[2]})
			}
		}
	}
	return node
}
