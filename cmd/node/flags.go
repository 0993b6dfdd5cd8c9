package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cronoq/cronoq/client"
)

// errHelp is returned after a command printed its help on request (-h); it
// exits 0.
var errHelp = errors.New("help requested")

// usageError is a mistake in the command line or input refused as invalid.
// It exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// taskFailedError reports that an awaited task (or workflow) ended without
// succeeding. It exits with status 3.
type taskFailedError struct {
	noun                string // "task" when empty
	id, status, message string
}

func (e *taskFailedError) Error() string {
	noun := e.noun
	if noun == "" {
		noun = "task"
	}
	if e.message == "" {
		return fmt.Sprintf("%s %s %s", noun, e.id, e.status)
	}
	return fmt.Sprintf("%s %s %s: %s", noun, e.id, e.status, e.message)
}

// cmd is the command line of one subcommand: its flags, help text and, once
// parsed, its positional arguments.
type cmd struct {
	name  string // "submit", "recurring add"
	usage string // synopsis
	about string // description paragraph(s)
	fs    *flag.FlagSet
	args  []string
	// explain, when set, words the cluster's refusal of a request field
	// that no flag sets (such as the steps of a workflow file); "" leaves
	// it to the default wording.
	explain func(field, reason string) string
}

func newCmd(name, usage, about string) *cmd {
	fs := flag.NewFlagSet("cronoq "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cmd{name: name, usage: usage, about: about, fs: fs}
}

// parse parses args, with flags allowed before and after the positional
// arguments, and checks that there are exactly npos positional arguments
// (any number when npos < 0). On -h it prints the help on s.Stdout and
// returns errHelp.
func (c *cmd) parse(s stdio, args []string, npos int) error {
	pos, err := parseInterleaved(c.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp(s.Stdout)
		return errHelp
	}
	if err != nil {
		return c.usageErr("%v", err)
	}
	c.args = pos
	switch {
	case npos < 0 || len(pos) == npos:
		return nil
	case len(pos) > npos:
		return c.usageErr("unexpected argument %q", pos[npos])
	default:
		return c.usageErr("missing argument (usage: %s)", c.usage)
	}
}

// usageErr is a usage error pointing at the command's help.
func (c *cmd) usageErr(format string, args ...any) error {
	return usagef("%s (see 'cronoq %s -h')", fmt.Sprintf(format, args...), c.name)
}

// set reports whether flag name was given on the command line.
func (c *cmd) set(name string) bool {
	found := false
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

// nextPage is the command line that lists the page after cursor next: the
// command with those of the flags names that were given, in that order,
// then -after next. Values are quoted for a POSIX shell where needed.
func (c *cmd) nextPage(next string, names ...string) string {
	parts := append([]string{"cronoq"}, strings.Fields(c.name)...)
	for _, name := range names {
		f := c.fs.Lookup(name)
		if f == nil || !c.set(name) {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if f.Value.String() == "true" {
				parts = append(parts, "-"+name)
			}
			continue
		}
		parts = append(parts, "-"+name, shellQuote(f.Value.String()))
	}
	return strings.Join(append(parts, "-after", shellQuote(next)), " ")
}

// shellQuote quotes s for a POSIX shell, unless it needs no quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.,:/@%+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (c *cmd) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.usage, strings.TrimSpace(c.about))
	n := 0
	c.fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// parseInterleaved parses args with fs, collecting the positional arguments
// wherever they appear. "--" ends the flags: everything after it is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); endedWithTerminator(fs, args[:consumed]) {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// endedWithTerminator reports whether the flag parser stopped on a "--" at
// the end of parsed (rather than on "--" given as the value of a flag).
func endedWithTerminator(fs *flag.FlagSet, parsed []string) bool {
	n := len(parsed)
	if n == 0 || parsed[n-1] != "--" {
		return false
	}
	if n == 1 {
		return true
	}
	prev := parsed[n-2]
	if !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
		return true
	}
	f := fs.Lookup(strings.TrimLeft(prev, "-"))
	if f == nil {
		return true
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return true
	}
	return false // "--" was the value of the flag before it
}

// clientFlags are the flags every client command takes.
type clientFlags struct {
	addr       string
	token      string
	out        *outputFlag
	rpcTimeout time.Duration
	tls        tlsClientFlags
	// waits: the command waits (see waiting); stderr gets its notices.
	waits  bool
	stderr io.Writer
}

const (
	defaultAddr       = "127.0.0.1:8650"
	defaultRPCTimeout = 30 * time.Second
)

// clientFlags registers -addr, -o and -rpc-timeout.
func (c *cmd) clientFlags() *clientFlags {
	cf := c.addrFlags()
	c.fs.Var(durationValue{&cf.rpcTimeout, true}, "rpc-timeout",
		"give up on the cluster after `DUR`, retries included")
	return cf
}

// waitsHelp says in the help of -rpc-timeout that it does not bound the
// wait of a command that waits for a task or workflow to end.
func (c *cmd) waitsHelp() {
	if f := c.fs.Lookup("rpc-timeout"); f != nil {
		f.Usage += " (time spent waiting for the end excepted)"
	}
}

// addrFlags registers -addr and -o.
func (c *cmd) addrFlags() *clientFlags {
	cf := &clientFlags{rpcTimeout: defaultRPCTimeout}
	def := os.Getenv("CRONOQ_ADDR")
	if def == "" {
		def = defaultAddr
	}
	c.fs.StringVar(&cf.addr, "addr", def,
		"API addresses of one or more nodes, `ADDRS`: HOST:PORT, comma-separated; env CRONOQ_ADDR")
	c.fs.StringVar(&cf.token, "token", os.Getenv("CRONOQ_TOKEN"),
		"ACL token `SECRET` the calls carry (default: none, the anonymous policy applies); env CRONOQ_TOKEN")
	cf.out = c.outputFlag()
	c.tlsClientFlags(&cf.tls)
	return cf
}

// validate checks -addr and -rpc-timeout and returns the addresses.
func (cf *clientFlags) validate() ([]string, error) {
	var out []string
	for _, a := range strings.Split(cf.addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(strings.TrimPrefix(a, "http://"))
		if err != nil {
			return nil, usagef("invalid -addr %q: want HOST:PORT", a)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return nil, usagef("invalid -addr %q: bad port %q", a, port)
		}
		_ = host // empty means localhost, as for net.Dial
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, usagef("invalid -addr %q: no address", cf.addr)
	}
	return out, nil
}

// outputFlag is -o: text (default) or json.
type outputFlag struct{ format string }

func (c *cmd) outputFlag() *outputFlag {
	o := &outputFlag{format: "text"}
	c.fs.Var(o, "o", "output `FORMAT`: text or json")
	return o
}

func (o *outputFlag) String() string {
	if o == nil {
		return ""
	}
	return o.format
}

func (o *outputFlag) Set(s string) error {
	switch s {
	case "text", "json":
		o.format = s
		return nil
	}
	return errors.New("must be text or json")
}

func (o *outputFlag) json() bool { return o.format == "json" }

// durationValue is a time.Duration flag with a clear error. Negative values
// are refused; zero too when positive is set.
type durationValue struct {
	d        *time.Duration
	positive bool // refuse 0
}

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (examples: 30s, 5m, 1h30m)")
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	if d == 0 && v.positive {
		return errors.New("must be positive")
	}
	*v.d = d
	return nil
}

// timeValue is an RFC 3339 instant flag.
type timeValue struct{ t *time.Time }

func (v timeValue) String() string {
	if v.t == nil || v.t.IsZero() {
		return ""
	}
	return v.t.UTC().Format(time.RFC3339Nano)
}

func (v timeValue) Set(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return errors.New("not an RFC 3339 time (example: 2030-01-02T15:04:05Z)")
	}
	*v.t = t
	return nil
}

// intValue is an int flag with a lower bound.
type intValue struct {
	n   *int
	min int
}

func (v intValue) String() string {
	if v.n == nil || *v.n == 0 {
		return ""
	}
	return strconv.Itoa(*v.n)
}

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	if n < v.min {
		return fmt.Errorf("must be at least %d", v.min)
	}
	*v.n = n
	return nil
}

// enumValue is a string flag taking one of a fixed set of values.
type enumValue struct {
	s       *string
	allowed []string
}

func (v enumValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v enumValue) Set(s string) error {
	for _, a := range v.allowed {
		if s == a {
			*v.s = s
			return nil
		}
	}
	return fmt.Errorf("must be one of %s", strings.Join(v.allowed, ", "))
}

// kvValue is a repeatable key=value flag.
type kvValue struct{ m map[string]string }

func (v kvValue) String() string {
	if len(v.m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(v.m))
	for k := range v.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + v.m[k]
	}
	return strings.Join(keys, ",")
}

func (v kvValue) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return errors.New("want key=value")
	case strings.TrimSpace(k) == "":
		return errors.New("empty key")
	case k != strings.TrimSpace(k):
		return errors.New("key has leading or trailing spaces")
	}
	if _, dup := v.m[k]; dup {
		return fmt.Errorf("key %q given twice", k)
	}
	v.m[k] = val
	return nil
}

// listValue is a repeatable flag whose values may also be comma-separated.
type listValue struct{ list *[]string }

func (v listValue) String() string {
	if v.list == nil {
		return ""
	}
	return strings.Join(*v.list, ",")
}

func (v listValue) Set(s string) error {
	added := false
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*v.list = append(*v.list, item)
			added = true
		}
	}
	if !added {
		return errors.New("empty value")
	}
	return nil
}

// handlerValue is the repeatable -handler KIND=COMMAND flag.
type handlerValue struct{ m map[string]string }

func (v handlerValue) String() string {
	if len(v.m) == 0 {
		return ""
	}
	return kvValue(v).String()
}

func (v handlerValue) Set(s string) error {
	kind, command, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return errors.New("want KIND=COMMAND")
	case strings.TrimSpace(kind) == "" || kind != strings.TrimSpace(kind):
		return errors.New("bad KIND: empty or surrounded by spaces")
	case strings.TrimSpace(command) == "":
		return fmt.Errorf("empty COMMAND for kind %q", kind)
	}
	if _, dup := v.m[kind]; dup {
		return fmt.Errorf("kind %q given twice", kind)
	}
	v.m[kind] = command
	return nil
}

// readPayload resolves -payload: TEXT as is, @FILE the file's bytes, @- the
// standard input.
func readPayload(s stdio, arg string) ([]byte, error) { return readBytesFlag(s, "payload", arg) }

// readBytesFlag resolves a TEXT|@FILE flag (such as -payload or -output):
// TEXT as is, @FILE the file's bytes, @- the standard input.
func readBytesFlag(s stdio, flagName, arg string) ([]byte, error) {
	name, isFile := strings.CutPrefix(arg, "@")
	if !isFile {
		return []byte(arg), nil
	}
	if name == "" {
		return nil, usagef("invalid -%s %q: @ needs a file name (or @- for stdin)", flagName, arg)
	}
	if name == "-" {
		b, err := io.ReadAll(s.Stdin)
		if err != nil {
			return nil, fmt.Errorf("reading -%s from stdin: %w", flagName, err)
		}
		return b, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, usagef("reading -%s file: %v", flagName, err)
	}
	return b, nil
}

// taskRefList is the repeatable -depends-on flag: a task ID, or key:KEY
// for the task with that idempotency key.
type taskRefList struct{ refs *[]client.TaskRef }

func (v taskRefList) String() string {
	if v.refs == nil {
		return ""
	}
	out := make([]string, len(*v.refs))
	for i, r := range *v.refs {
		out[i] = r.ID
		if r.ID == "" {
			out[i] = "key:" + r.Key
		}
	}
	return strings.Join(out, ",")
}

func (v taskRefList) Set(s string) error {
	if key, ok := strings.CutPrefix(s, "key:"); ok {
		if key == "" {
			return errors.New("key: needs a KEY")
		}
		*v.refs = append(*v.refs, client.ByKey(key))
		return nil
	}
	if strings.TrimSpace(s) == "" {
		return errors.New("want a task ID or key:KEY")
	}
	*v.refs = append(*v.refs, client.ByID(s))
	return nil
}
