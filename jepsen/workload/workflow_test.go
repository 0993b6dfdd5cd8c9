package workload

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

// Every generated graph names its steps once and depends only on earlier
// steps, as a workflow submit requires.
func TestRandomShapesAreValidWorkflows(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]int{}
	modes := map[string]int{}
	for range 2000 {
		name, steps := randomShape(r)
		shapes[name]++
		require.GreaterOrEqual(t, len(steps), 3)
		seen := map[string]bool{}
		for _, st := range steps {
			require.False(t, seen[st.name], "step %s named twice", st.name)
			for _, d := range st.deps {
				require.True(t, seen[d], "%s depends on %s, not an earlier step", st.name, d)
			}
			if st.policy != "" {
				require.Equal(t, client.DependencyPolicyDone, st.policy)
				require.NotEmpty(t, st.deps)
			}
			seen[st.name] = true
			modes[st.mode]++
		}
	}
	require.Len(t, shapes, 4)
	require.Len(t, modes, 3)
	for _, st := range doomedShape() {
		if st.name == "s0" {
			require.Equal(t, ModeFail, st.mode)
		}
	}
}

func TestStepPayload(t *testing.T) {
	p := StepPayload("wf-c9-3", "s1", ModeSpawn)
	require.Equal(t, ModeSpawn, StepMode(p))
	require.Equal(t, "wf-c9-3", stepKey(p))
	require.Equal(t, ModeOK, StepMode("no-mode"))
}

// A spawning step spawns two children named after its lease and a
// continuation; the others spawn nothing; a failing step fails for good.
func TestWorkflowBehavior(t *testing.T) {
	choose := WorkflowBehavior(3 * time.Second)
	r := rand.New(rand.NewPCG(3, 4))
	g := Grant{Step: "s2", Token: 77, Payload: StepPayload("k", "s2", ModeSpawn)}
	b := choose(r, g)
	require.Equal(t, "success", b.Outcome)
	require.Len(t, b.Children, 2)
	require.Equal(t, "s2.77.a", b.Children[0].Name)
	require.Equal(t, "s2.77.b", b.Children[1].Name)
	require.NotNil(t, b.Then)
	require.Equal(t, "s2.77.then", b.Then.Name)
	require.Equal(t, ModeOK, StepMode(b.Then.Payload))
	for _, c := range b.Children {
		require.NotEqual(t, ModeSpawn, StepMode(c.Payload), "children spawn nothing")
	}

	b = choose(r, Grant{Step: "s0", Token: 78, Payload: StepPayload("k", "s0", ModeFail)})
	require.Equal(t, "permanent", b.Outcome)
	require.Empty(t, b.Children)
	require.Nil(t, b.Then)
}

func TestParallel(t *testing.T) {
	var calls atomic.Int64
	seen := make([]int, 100)
	require.NoError(t, parallel(100, 8, func(i int) error {
		calls.Add(1)
		seen[i]++
		return nil
	}))
	require.EqualValues(t, 100, calls.Load())
	for i, n := range seen {
		require.Equal(t, 1, n, "index %d", i)
	}
	boom := errors.New("boom")
	require.ErrorIs(t, parallel(10, 3, func(i int) error {
		if i == 4 {
			return boom
		}
		return nil
	}), boom)
	require.NoError(t, parallel(0, 8, func(int) error { return boom }))
}
