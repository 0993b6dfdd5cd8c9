package execworker

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWorkDir(t *testing.T) {
	t.Parallel()
	root := filepath.Join(string(filepath.Separator), "var", "lib", "cronoq", "work")
	tests := []struct {
		name string
		root string
		id   string
		want string // "" = refused
	}{
		{name: "ulid", root: root, id: "01JD3ZQ8Y6A5B4C3D2E1F0G9H8", want: root + "/01JD3ZQ8Y6A5B4C3D2E1F0G9H8"},
		{name: "dots inside", root: root, id: "a..b", want: root + "/a..b"},
		{name: "leading dot", root: root, id: ".hidden", want: root + "/.hidden"},
		{name: "three dots", root: root, id: "...", want: root + "/..."},
		{name: "unicode", root: root, id: "tâche-é", want: root + "/tâche-é"},
		{name: "root not clean", root: root + "/./x/..", id: "t1", want: root + "/t1"},
		{name: "relative root", root: "work", id: "t1", want: "work/t1"},
		{name: "max length", root: root, id: strings.Repeat("a", 255), want: root + "/" + strings.Repeat("a", 255)},

		{name: "empty", root: root, id: ""},
		{name: "dot", root: root, id: "."},
		{name: "dotdot", root: root, id: ".."},
		{name: "slash", root: root, id: "a/b"},
		{name: "leading slash", root: root, id: "/etc"},
		{name: "trailing slash", root: root, id: "a/"},
		{name: "parent escape", root: root, id: "../etc"},
		{name: "deep escape", root: root, id: "../../../../etc/passwd"},
		{name: "backslash", root: root, id: `a\b`},
		{name: "backslash escape", root: root, id: `..\..\x`},
		{name: "nul", root: root, id: "a\x00b"},
		{name: "newline", root: root, id: "a\nb"},
		{name: "tab", root: root, id: "a\tb"},
		{name: "escape char", root: root, id: "a\x1bb"},
		{name: "delete", root: root, id: "a\x7fb"},
		{name: "c1 control", root: root, id: "a\u0085b"},
		{name: "invalid utf8", root: root, id: "a\xffb"},
		{name: "too long", root: root, id: strings.Repeat("a", 256)},
		{name: "empty root", root: "", id: "t1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WorkDir(tc.root, tc.id)
			if tc.want == "" {
				require.Error(t, err)
				require.Empty(t, got)
				if tc.root != "" {
					require.ErrorIs(t, err, ErrUnsafeID)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, filepath.Clean(tc.root), filepath.Dir(got))
		})
	}
}

func FuzzWorkDir(f *testing.F) {
	for _, s := range []string{"01JD3ZQ8Y6A5B4C3D2E1F0G9H8", "..", "a/b", "a\x00", `a\b`, "...", "\u2028"} {
		f.Add(s)
	}
	const root = "/srv/work"
	f.Fuzz(func(t *testing.T, id string) {
		dir, err := WorkDir(root, id)
		if err != nil {
			require.ErrorIs(t, err, ErrUnsafeID)
			return
		}
		require.Equal(t, root, filepath.Dir(dir))
		require.Equal(t, id, filepath.Base(dir))
		require.NotContains(t, id, "/")
		require.NotEqual(t, "..", id)
	})
}
