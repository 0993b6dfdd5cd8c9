package lint

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// deterministic lists the trees that must stay free of clocks, randomness and
// goroutines.
var deterministic = []string{"../../fsm", "../../engine/core"}

func TestDeterministicPackages(t *testing.T) {
	for _, dir := range deterministic {
		findings, err := Check(dir)
		require.NoError(t, err)
		for _, f := range findings {
			t.Errorf("%s", f)
		}
	}
}

// TestCheckFindsViolations proves the checker has teeth on a fixture that
// does everything forbidden.
func TestCheckFindsViolations(t *testing.T) {
	findings, err := Check(filepath.Join("testdata", "bad"))
	require.NoError(t, err)
	var msgs []string
	for _, f := range findings {
		msgs = append(msgs, f.Message)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"uses time.Now", "uses time.Since", "uses time.Sleep", "uses time.NewTimer",
		"imports math/rand", "imports math/rand/v2", "imports crypto/rand", "starts a goroutine",
	} {
		require.Contains(t, all, want)
	}
	// The aliased import is caught too.
	require.Contains(t, all, "uses time.Until")
}
