package main

import (
	"context"
	"fmt"
	"io"
	"strings"
)

func init() {
	register("completion", command{Summary: "Print a shell completion script (bash or zsh)", Run: runCompletion})
}

func runCompletion(_ context.Context, s stdio, args []string) error {
	c := newCmd("completion", "cronoq completion bash|zsh", `
Print a script that completes cronoq's commands, subcommands and flags in
bash or zsh, made from the commands of this binary. For instance:

  source <(cronoq completion bash)     # in ~/.bashrc
  source <(cronoq completion zsh)      # in ~/.zshrc (after compinit)

or save it where the shell looks for completions, such as
/etc/bash_completion.d/cronoq, or a file _cronoq in a directory of zsh's
$fpath.`)
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	var write func(io.Writer, []*cmdNode) error
	switch c.args[0] {
	case "bash":
		write = writeBashCompletion
	case "zsh":
		write = writeZshCompletion
	default:
		return c.usageErr("unknown shell %q: want bash or zsh", c.args[0])
	}
	return write(s.Stdout, commandTree())
}

// completionTables writes the two shell functions both scripts share:
// __cronoq_subs PATH prints the subcommands of the command at PATH ("" for
// the top level, "operator raft"), and __cronoq_flags PATH its flags.
func completionTables(w io.Writer, tree []*cmdNode) {
	var subs, flags strings.Builder
	var walk func(path string, nodes []*cmdNode)
	walk = func(path string, nodes []*cmdNode) {
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.path[len(n.path)-1]
		}
		fmt.Fprintf(&subs, "\t%q) echo %q ;;\n", path, strings.Join(names, " "))
		for _, n := range nodes {
			p := strings.Join(n.path, " ")
			if len(n.subs) > 0 {
				walk(p, n.subs)
				continue
			}
			fs := make([]string, 0, len(n.flags)+1)
			for _, f := range n.flags {
				fs = append(fs, "-"+f.name)
			}
			fs = append(fs, "-h")
			fmt.Fprintf(&flags, "\t%q) echo %q ;;\n", p, strings.Join(fs, " "))
		}
	}
	walk("", tree)
	fmt.Fprintf(w, "__cronoq_subs() {\n\tcase \"$1\" in\n%s\tesac\n}\n\n", subs.String())
	fmt.Fprintf(w, "__cronoq_flags() {\n\tcase \"$1\" in\n%s\tesac\n}\n\n", flags.String())
}

func writeBashCompletion(w io.Writer, tree []*cmdNode) error {
	fmt.Fprint(w, "# bash completion for cronoq (made by 'cronoq completion bash')\n\n")
	completionTables(w, tree)
	_, err := fmt.Fprint(w, `__cronoq_complete() {
	local cur="${COMP_WORDS[COMP_CWORD]}" cmdpath="" word subs i
	for ((i = 1; i < COMP_CWORD; i++)); do
		word="${COMP_WORDS[i]}"
		[[ $word == -* ]] && continue
		subs=" $(__cronoq_subs "$cmdpath") "
		if [[ $subs == *" $word "* ]]; then
			cmdpath="${cmdpath:+$cmdpath }$word"
		fi
	done
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(__cronoq_flags "$cmdpath")" -- "$cur"))
		return
	fi
	subs="$(__cronoq_subs "$cmdpath")"
	if [[ -n $subs ]]; then
		COMPREPLY=($(compgen -W "$subs" -- "$cur"))
	else
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}
complete -o default -F __cronoq_complete cronoq
`)
	return err
}

func writeZshCompletion(w io.Writer, tree []*cmdNode) error {
	fmt.Fprint(w, "#compdef cronoq\n# zsh completion for cronoq (made by 'cronoq completion zsh')\n\n")
	completionTables(w, tree)
	_, err := fmt.Fprint(w, `_cronoq() {
	local cmdpath="" word subs i
	for ((i = 2; i < CURRENT; i++)); do
		word="${words[i]}"
		[[ $word == -* ]] && continue
		subs=" $(__cronoq_subs "$cmdpath") "
		if [[ $subs == *" $word "* ]]; then
			cmdpath="${cmdpath:+$cmdpath }$word"
		fi
	done
	if [[ ${words[CURRENT]} == -* ]]; then
		compadd -- ${=$(__cronoq_flags "$cmdpath")}
		return
	fi
	subs="$(__cronoq_subs "$cmdpath")"
	if [[ -n $subs ]]; then
		compadd -- ${=subs}
	else
		_files
	fi
}

if [[ "${funcstack[1]}" == _cronoq ]]; then
	_cronoq "$@"
else
	compdef _cronoq cronoq
fi
`)
	return err
}
