package execworker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

// depsScript lists $CRONOQ_DEPS_DIR with each file's content, and the
// directory's mode.
const depsScript = `
cd "$CRONOQ_DEPS_DIR" || exit 1
printf 'mode=%s\n' "$(stat -c %a .)"
for f in * .[!.]*; do
	[ -e "$f" ] || continue
	printf '%s=%s\n' "$f" "$(cat "$f")"
done
`

func TestHandlerDependencies(t *testing.T) {
	t.Parallel()
	j := job("t1", "")
	j.Dependencies = []client.Dependency{
		{ID: "01AAAAAAAAAAAAAAAAAAAAAAA1", Step: "extract", Status: client.StatusSucceeded, Output: []byte("rows")},
		// Two dependencies with the same step name (of other workflows)
		// are named by their ids.
		{ID: "01AAAAAAAAAAAAAAAAAAAAAAA2", Step: "load", Status: client.StatusSucceeded, Output: []byte("l2")},
		{ID: "01AAAAAAAAAAAAAAAAAAAAAAA3", Step: "load", Status: client.StatusSucceeded, Output: []byte("l3")},
		// No step: its id.
		{ID: "01AAAAAAAAAAAAAAAAAAAAAAA4", Status: client.StatusFailed, Error: "boom"},
		// A step name that starts with a dot is still one file.
		{ID: "01AAAAAAAAAAAAAAAAAAAAAAA5", Step: ".hidden", Status: client.StatusSucceeded, Output: []byte("h")},
	}
	h, root := newHandler(t, depsScript)
	out, err := h.Work(context.Background(), j)
	require.NoError(t, err)
	require.Equal(t, ""+
		"mode=700\n"+
		"01AAAAAAAAAAAAAAAAAAAAAAA2=l2\n"+
		"01AAAAAAAAAAAAAAAAAAAAAAA3=l3\n"+
		"01AAAAAAAAAAAAAAAAAAAAAAA4=\n"+
		"extract=rows\n"+
		".hidden=h\n", string(out))
	requireEmptyDir(t, root)

	// Without dependencies, the directory exists and is empty.
	h, root = newHandler(t, depsScript)
	out, err = h.Work(context.Background(), job("t2", ""))
	require.NoError(t, err)
	require.Equal(t, "mode=700\n", string(out))
	requireEmptyDir(t, root)
}

func TestHandlerDependencyOutputOmitted(t *testing.T) {
	t.Parallel()
	// A job not built by a worker has no client to read an omitted output
	// with: the attempt fails, retryably, before the command runs.
	j := job("t1", "")
	j.Dependencies = []client.Dependency{{ID: "01AAAAAAAAAAAAAAAAAAAAAAA1", Step: "big", Status: client.StatusSucceeded, OutputOmitted: true}}
	h, root := newHandler(t, "touch ran; echo ran")
	out, err := h.Work(context.Background(), j)
	require.Nil(t, out)
	require.ErrorContains(t, err, `preparing CRONOQ_DEPS_DIR: reading the output of dependency "01AAAAAAAAAAAAAAAAAAAAAAA1"`)
	var perm *client.PermanentError
	require.NotErrorAs(t, err, &perm)
	requireEmptyDir(t, root)
}

func TestDepFileNames(t *testing.T) {
	t.Parallel()
	dep := func(id, step string) client.Dependency { return client.Dependency{ID: id, Step: step} }
	names, err := depFileNames([]client.Dependency{dep("A", "x"), dep("B", ""), dep("A", "x"), dep("C", "y")})
	require.NoError(t, err)
	require.Equal(t, []string{"A", "B", "", "y"}, names, "a step named twice (the same task) falls back to the id, once")

	for _, tc := range []struct {
		deps []client.Dependency
		want string
	}{
		{[]client.Dependency{dep("A", "a/b")}, `dependency A: its step name "a/b" is not a safe file name: contains a path separator`},
		{[]client.Dependency{dep("A", "..")}, `its step name ".." is not a safe file name`},
		{[]client.Dependency{dep("A", ".")}, `its step name "." is not a safe file name`},
		{[]client.Dependency{dep("A", "x\x00y")}, "contains NUL"},
		{[]client.Dependency{dep("../etc", "")}, `dependency ../etc: its id "../etc" is not a safe file name`},
		{[]client.Dependency{dep("", "")}, `its id "" is not a safe file name: empty`},
		{[]client.Dependency{dep("A", "B"), dep("B", "")}, `dependencies A and B both map to the file name "B"`},
	} {
		_, err := depFileNames(tc.deps)
		require.ErrorContains(t, err, tc.want)
	}

	// The handler refuses them permanently, before running anything.
	j := job("t1", "")
	j.Dependencies = []client.Dependency{dep("A", "../../etc")}
	h, root := newHandler(t, "touch ran")
	_, err = h.Work(context.Background(), j)
	var perm *client.PermanentError
	require.ErrorAs(t, err, &perm)
	require.ErrorContains(t, err, "not a safe file name")
	requireEmptyDir(t, root)
}

func TestHandlerSpawn(t *testing.T) {
	t.Parallel()
	h, root := newHandler(t, `
test -f "$CRONOQ_SPAWN" && test ! -s "$CRONOQ_SPAWN" || exit 1
cat >>"$CRONOQ_SPAWN" <<'EOF'
{"name": "part-1", "pool": "etl", "kind": "convert", "payload": "a.csv"}

{"name": "merge", "pool": "etl", "kind": "merge", "then": true, "depends_on": ["prepare"]}
{"pool": "etl", "kind": "convert", "payload": {"file": "b.csv"}, "delay": "1m"}
EOF
echo done`)
	res, err := h.work(context.Background(), job("t1", ""))
	require.NoError(t, err)
	require.Equal(t, "done\n", string(res.output))
	require.Len(t, res.children, 2)
	require.Equal(t, "part-1", res.children[0].Name)
	require.Equal(t, "a.csv", string(res.children[0].Task.Payload))
	require.Equal(t, "", res.children[1].Name)
	require.Equal(t, `{"file":"b.csv"}`, string(res.children[1].Task.Payload))
	require.Equal(t, "1m0s", res.children[1].Task.Delay.String())
	require.NotNil(t, res.then)
	require.Equal(t, "merge", res.then.Name)
	require.Equal(t, []string{"prepare"}, res.then.DependsOn)
	requireEmptyDir(t, root)

	// Work hands them to the job and succeeds.
	out, err := h.Work(context.Background(), job("t1", ""))
	require.NoError(t, err)
	require.Equal(t, "done\n", string(out))

	// Nothing written, or the file removed: nothing spawned.
	for _, command := range []string{"true", `rm "$CRONOQ_SPAWN"`, `printf '\n  \n' >"$CRONOQ_SPAWN"`} {
		h, root := newHandler(t, command)
		res, err := h.work(context.Background(), job("t1", ""))
		require.NoError(t, err, command)
		require.Empty(t, res.children, command)
		require.Nil(t, res.then, command)
		requireEmptyDir(t, root)
	}
}

func TestHandlerSpawnRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command string
		want    string
		perm    bool
	}{
		{
			name:    "malformed line",
			command: `printf '{"pool": "p", "kind": "k"}\n\n{"pool": "p", "kind":\n' >"$CRONOQ_SPAWN"`,
			want:    "spawn file line 3: not valid JSON", perm: true,
		},
		{
			name:    "unknown field",
			command: `echo '{"pool": "p", "kind": "k", "colour": "red"}' >"$CRONOQ_SPAWN"`,
			want:    `spawn file line 1: unknown field "colour"`, perm: true,
		},
		{
			name:    "bad value",
			command: `echo '{"pool": "p", "kind": "k", "timeout": "soon"}' >"$CRONOQ_SPAWN"`,
			want:    `spawn file line 1: timeout: "soon" is not a duration`, perm: true,
		},
		{
			name:    "missing kind",
			command: `echo '{"pool": "p"}' >"$CRONOQ_SPAWN"`,
			want:    "spawn file line 1: kind: required", perm: true,
		},
		{
			name:    "two continuations",
			command: `printf '{"pool": "p", "kind": "k", "then": true}\n{"pool": "p", "kind": "k"}\n{"pool": "p", "kind": "k", "then": true}\n' >"$CRONOQ_SPAWN"`,
			want:    `spawn file line 3: a second "then" step (the first is on line 1)`, perm: true,
		},
		{
			name:    "too large",
			command: `head -c 2000 /dev/zero >"$CRONOQ_SPAWN"`,
			want:    "spawn file exceeds 1024 bytes", perm: true,
		},
		{
			// A failed attempt spawns nothing: its spawn file is not read.
			name:    "failed command",
			command: `echo 'not json' >"$CRONOQ_SPAWN"; exit 75`,
			want:    "exit status 75",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, root := newHandler(t, tc.command, func(c *Config) { c.MaxSpawn = 1024 })
			out, err := h.Work(context.Background(), job("t1", ""))
			require.Nil(t, out)
			require.ErrorContains(t, err, tc.want)
			var perm *client.PermanentError
			if tc.perm {
				require.ErrorAs(t, err, &perm)
			} else {
				require.NotErrorAs(t, err, &perm)
			}
			requireEmptyDir(t, root)
		})
	}
}

func TestParseSpawn(t *testing.T) {
	t.Parallel()
	children, then, err := ParseSpawn([]byte("{\"pool\": \"p\", \"kind\": \"a\"}\r\n{\"pool\": \"p\", \"kind\": \"b\", \"then\": false}"))
	require.NoError(t, err)
	require.Len(t, children, 2)
	require.Nil(t, then)
	require.Equal(t, "b", children[1].Task.Kind)

	_, _, err = ParseSpawn([]byte(`{"pool": "p", "kind": "a", "Then": true}`))
	require.EqualError(t, err, `spawn file line 1: unknown field "Then"`)
}

func TestAttemptFilesAreRemoved(t *testing.T) {
	t.Parallel()
	// The command leaves files in both places; both go with the attempt.
	h, root := newHandler(t, `echo x >"$CRONOQ_DEPS_DIR/extra"; mkdir "$CRONOQ_DEPS_DIR/sub"; echo "$CRONOQ_DEPS_DIR $CRONOQ_SPAWN"`)
	out, err := h.Work(context.Background(), job("t1", ""))
	require.NoError(t, err)
	paths := strings.Fields(string(out))
	require.Len(t, paths, 2)
	for _, p := range paths {
		require.True(t, strings.HasPrefix(p, root+string(filepath.Separator)), "%s is under the root", p)
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	require.NotEqual(t, filepath.Join(root, "t1"), filepath.Dir(paths[0]), "not in the command's working directory")
	requireEmptyDir(t, root)
}
