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

// TestLayers holds the module to the import rules of Layers (the picture of
// docs/architecture.md).
func TestLayers(t *testing.T) {
	findings, err := CheckImports("../..", "github.com/cronoq/cronoq", Layers)
	require.NoError(t, err)
	for _, f := range findings {
		t.Errorf("%s", f)
	}
}

// TestCheckImportsFindsViolations proves the import rules have teeth on a
// fixture module whose every layer breaks its rule once.
func TestCheckImportsFindsViolations(t *testing.T) {
	findings, err := CheckImports(filepath.Join("testdata", "layers"), "example.com/m", Layers)
	require.NoError(t, err)
	var msgs []string
	for _, f := range findings {
		msgs = append(msgs, f.Message)
	}
	require.ElementsMatch(t, []string{
		"fsm imports metrics (the layer fsm/... may not)",
		"engine/core imports engine (the layer engine/core/... may not)",
		"engine imports cluster (the layer engine/... may not)",
		"cluster imports transport (the layer cluster/... may not)",
		"transport imports engine/core (the layer transport/... may not)",
		"transport uses fsm.Mutation (the layer transport/... may use only " +
			strings.Join(readNames(t), ", ") + " of it)",
		"client imports transport (the layer client/... may not)",
		"jepsen/w imports cluster (the layer jepsen/... may not)",
		"metrics imports engine (the layer metrics/... may not)",
	}, msgs)
}

// readNames are the names of fsm the API server may use.
func readNames(t *testing.T) []string {
	for _, l := range Layers {
		if l.Pkg == "transport/..." {
			return l.Names["fsm"]
		}
	}
	t.Fatal("no transport layer")
	return nil
}
