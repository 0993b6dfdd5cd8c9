package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		pos     []string
		output  string
		key     string
		wait    bool
		wantErr string
	}{
		{name: "flags first", args: []string{"-o", "json", "ID"}, pos: []string{"ID"}, output: "json"},
		{name: "flags after", args: []string{"ID", "-o", "json"}, pos: []string{"ID"}, output: "json"},
		{name: "flags around", args: []string{"-key", "k", "A", "-wait", "B", "-o=json", "C"}, pos: []string{"A", "B", "C"}, output: "json", key: "k", wait: true},
		{name: "double dash flags", args: []string{"A", "--o", "json", "--wait"}, pos: []string{"A"}, output: "json", wait: true},
		{name: "terminator", args: []string{"A", "--", "-o", "json"}, pos: []string{"A", "-o", "json"}},
		{name: "terminator first", args: []string{"--", "-x"}, pos: []string{"-x"}},
		{name: "dash dash as value", args: []string{"-key", "--", "A", "-wait"}, pos: []string{"A"}, key: "--", wait: true},
		{name: "terminator after bool", args: []string{"-wait", "--", "-key"}, pos: []string{"-key"}, wait: true},
		{name: "lone dash is positional", args: []string{"-", "-wait"}, pos: []string{"-"}, wait: true},
		{name: "none", args: nil},
		{name: "unknown flag after positional", args: []string{"A", "-nope"}, wantErr: "flag provided but not defined: -nope"},
		{name: "missing value after positional", args: []string{"A", "-key"}, wantErr: "flag needs an argument: -key"},
		{name: "help after positional", args: []string{"A", "-h"}, wantErr: "flag: help requested"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var key string
			var wait bool
			out := &outputFlag{format: "text"}
			fs.StringVar(&key, "key", "", "")
			fs.BoolVar(&wait, "wait", false, "")
			fs.Var(out, "o", "")
			pos, err := parseInterleaved(fs, tc.args)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.pos, pos)
			require.Equal(t, orDefault(tc.output, "text"), out.format)
			require.Equal(t, tc.key, key)
			require.Equal(t, tc.wait, wait)
		})
	}
}

func TestFlagValues(t *testing.T) {
	t.Parallel()
	var d time.Duration
	var tm time.Time
	var n int
	var e string
	kv := map[string]string{}
	var list []string
	handlers := map[string]string{}
	var st, wst []string
	var refs []client.TaskRef
	tests := []struct {
		name    string
		v       flag.Value
		in      string
		wantErr string
	}{
		{name: "duration", v: durationValue{&d, false}, in: "1m30s"},
		{name: "duration zero", v: durationValue{&d, false}, in: "0"},
		{name: "duration zero refused", v: durationValue{&d, true}, in: "0s", wantErr: "must be positive"},
		{name: "duration negative", v: durationValue{&d, false}, in: "-1s", wantErr: "must not be negative"},
		{name: "duration garbage", v: durationValue{&d, false}, in: "5", wantErr: "not a duration (examples: 30s, 5m, 1h30m)"},
		{name: "time", v: timeValue{&tm}, in: "2030-01-02T15:04:05+02:00"},
		{name: "time nanos", v: timeValue{&tm}, in: "2030-01-02T15:04:05.123Z"},
		{name: "time date only", v: timeValue{&tm}, in: "2030-01-02", wantErr: "not an RFC 3339 time (example: 2030-01-02T15:04:05Z)"},
		{name: "time no zone", v: timeValue{&tm}, in: "2030-01-02T15:04:05", wantErr: "not an RFC 3339 time (example: 2030-01-02T15:04:05Z)"},
		{name: "int", v: intValue{&n, 1}, in: "7"},
		{name: "int below", v: intValue{&n, 1}, in: "0", wantErr: "must be at least 1"},
		{name: "int garbage", v: intValue{&n, 1}, in: "x", wantErr: "not an integer"},
		{name: "enum", v: enumValue{&e, []string{"a", "b"}}, in: "b"},
		{name: "enum bad", v: enumValue{&e, []string{"a", "b"}}, in: "c", wantErr: "must be one of a, b"},
		{name: "kv", v: kvValue{kv}, in: "zone=eu-1"},
		{name: "kv empty value", v: kvValue{kv}, in: "gpu="},
		{name: "kv value with equals", v: kvValue{kv}, in: "expr=a=b"},
		{name: "kv dup", v: kvValue{kv}, in: "zone=eu-2", wantErr: `key "zone" given twice`},
		{name: "kv no equals", v: kvValue{kv}, in: "zone", wantErr: "want key=value"},
		{name: "kv empty key", v: kvValue{kv}, in: "=x", wantErr: "empty key"},
		{name: "kv spaced key", v: kvValue{kv}, in: " k=x", wantErr: "key has leading or trailing spaces"},
		{name: "list", v: listValue{&list}, in: "a, b,,c"},
		{name: "list empty", v: listValue{&list}, in: " , ", wantErr: "empty value"},
		{name: "handler", v: handlerValue{handlers}, in: "resize=convert - -resize 50% -"},
		{name: "handler dup", v: handlerValue{handlers}, in: "resize=cat", wantErr: `kind "resize" given twice`},
		{name: "handler no command", v: handlerValue{handlers}, in: "x= ", wantErr: `empty COMMAND for kind "x"`},
		{name: "handler no kind", v: handlerValue{handlers}, in: "=cat", wantErr: "bad KIND: empty or surrounded by spaces"},
		{name: "handler no equals", v: handlerValue{handlers}, in: "cat", wantErr: "want KIND=COMMAND"},
		{name: "status", v: statusList{list: &st}, in: "queued,failed"},
		{name: "status blocked", v: statusList{list: &st}, in: "blocked"},
		{name: "status unknown", v: statusList{list: &st}, in: "queued,done", wantErr: `unknown status "done": must be one of blocked, scheduled, queued, parked, running, retrying, succeeded, failed, cancelled, expired`},
		{name: "workflow status", v: statusList{list: &wst, allowed: workflowStatuses}, in: "running,failed"},
		{name: "workflow status unknown", v: statusList{list: &wst, allowed: workflowStatuses}, in: "queued", wantErr: `unknown status "queued": must be one of running, succeeded, failed, cancelled`},
		{name: "depends-on id", v: taskRefList{&refs}, in: "01JD3ZQ8Y6A5B4C3D2E1F0G9H8"},
		{name: "depends-on key", v: taskRefList{&refs}, in: "key:nightly:2030-01-02"},
		{name: "depends-on empty key", v: taskRefList{&refs}, in: "key:", wantErr: "key: needs a KEY"},
		{name: "depends-on empty", v: taskRefList{&refs}, in: " ", wantErr: "want a task ID or key:KEY"},
	}
	for _, tc := range tests {
		// Sequential: some cases depend on earlier ones (duplicates).
		err := tc.v.Set(tc.in)
		if tc.wantErr != "" {
			require.EqualError(t, err, tc.wantErr, tc.name)
		} else {
			require.NoError(t, err, tc.name)
		}
	}
	require.Equal(t, time.Duration(0), d)
	require.True(t, tm.Equal(time.Date(2030, 1, 2, 15, 4, 5, 123e6, time.UTC)))
	require.Equal(t, 7, n)
	require.Equal(t, "b", e)
	require.Equal(t, map[string]string{"zone": "eu-1", "gpu": "", "expr": "a=b"}, kv)
	require.Equal(t, []string{"a", "b", "c"}, list)
	require.Equal(t, map[string]string{"resize": "convert - -resize 50% -"}, handlers)
	require.Equal(t, []string{"queued", "failed", "blocked"}, st)
	require.Equal(t, []string{"running", "failed"}, wst)
	require.Equal(t, []client.TaskRef{client.ByID("01JD3ZQ8Y6A5B4C3D2E1F0G9H8"), client.ByKey("nightly:2030-01-02")}, refs)
	require.Equal(t, "01JD3ZQ8Y6A5B4C3D2E1F0G9H8,key:nightly:2030-01-02", taskRefList{&refs}.String())
}

func TestReadPayload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "p.bin")
	require.NoError(t, os.WriteFile(file, []byte{0, 1, 2, 0xff}, 0o600))
	s := stdio{Stdin: strings.NewReader("from stdin")}

	got, err := readPayload(s, "plain text")
	require.NoError(t, err)
	require.Equal(t, "plain text", string(got))

	got, err = readPayload(s, "@"+file)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 1, 2, 0xff}, got)

	got, err = readPayload(s, "@-")
	require.NoError(t, err)
	require.Equal(t, "from stdin", string(got))

	_, err = readPayload(s, "@")
	require.EqualError(t, err, `invalid -payload "@": @ needs a file name (or @- for stdin)`)

	_, err = readPayload(s, "@"+filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "reading -payload file: open "+filepath.Join(dir, "missing"))
	var ue *usageError
	require.ErrorAs(t, err, &ue)
}

func TestClientFlagsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr    string
		want    []string
		wantErr string
	}{
		{addr: "127.0.0.1:8650", want: []string{"127.0.0.1:8650"}},
		{addr: "a:1, b:2 ,,c:3", want: []string{"a:1", "b:2", "c:3"}},
		{addr: "http://a:1", want: []string{"http://a:1"}},
		{addr: "[::1]:8650", want: []string{"[::1]:8650"}},
		{addr: "", wantErr: `invalid -addr "": no address`},
		{addr: " , ", wantErr: `invalid -addr " , ": no address`},
		{addr: "localhost", wantErr: `invalid -addr "localhost": want HOST:PORT`},
		{addr: "a:1,b", wantErr: `invalid -addr "b": want HOST:PORT`},
		{addr: "a:http", wantErr: `invalid -addr "a:http": bad port "http"`},
		{addr: "a:70000", wantErr: `invalid -addr "a:70000": bad port "70000"`},
	}
	for _, tc := range tests {
		cf := &clientFlags{addr: tc.addr, rpcTimeout: time.Second}
		got, err := cf.validate()
		if tc.wantErr != "" {
			require.EqualError(t, err, tc.wantErr)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "plain", oneLine("plain"))
	require.Equal(t, "exit status 1: a | b", oneLine("exit status 1: a\r\n\n  b  \n"))
}

func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	c := newCmd("x", "cronoq x", "About x.")
	c.clientFlags()
	var out bytes.Buffer
	c.printHelp(&out)
	for _, f := range []string{"-addr", "-o", "-rpc-timeout"} {
		require.Contains(t, out.String(), "\n  "+f+" ")
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"T1":                         "T1",
		"01JD3ZQ8Y6A5B4C3D2E1F0G9HA": "01JD3ZQ8Y6A5B4C3D2E1F0G9HA",
		"a,b-c_d.e:f/g@h%i+j=k":      "a,b-c_d.e:f/g@h%i+j=k",
		"":                           "''",
		"a b":                        "'a b'",
		"it's":                       `'it'\''s'`,
		"$HOME":                      "'$HOME'",
		"x;y":                        "'x;y'",
		"été":                        "'été'",
	} {
		require.Equal(t, want, shellQuote(in), "shellQuote(%q)", in)
	}
}
