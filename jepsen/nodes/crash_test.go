package nodes

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An exit the harness did not cause is reported; a kill is not.
func TestOnCrash(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{ID: "n1", DataDir: filepath.Join(dir, "data"), LogPath: filepath.Join(dir, "n1.log")}
	crashes := make(chan string, 2)
	onCrash := func(id string, err error) { crashes <- id + ": " + err.Error() }

	n := New(spec, "/bin/sh", []string{"-c", "exit 3"})
	n.OnCrash = onCrash
	require.NoError(t, n.Start())
	select {
	case c := <-crashes:
		require.Equal(t, "n1: exit status 3", c)
	case <-time.After(10 * time.Second):
		t.Fatal("no crash reported")
	}

	n = New(spec, "/bin/sh", []string{"-c", "sleep 60"})
	n.OnCrash = onCrash
	require.NoError(t, n.Start())
	require.NoError(t, n.Kill())
	require.False(t, n.Running())
	select {
	case c := <-crashes:
		t.Fatalf("a kill was reported as a crash: %s", c)
	default:
	}
}
