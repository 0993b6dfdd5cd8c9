package nodes

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHasFlag(t *testing.T) {
	help := "Flags:\n  -bootstrap-expect N\n    \tform the cluster\n  -dev\n    \tone node\n"
	require.True(t, HasFlag(help, "bootstrap-expect"))
	require.True(t, HasFlag(help, "dev"))
	require.False(t, HasFlag(help, "bootstrap"))
	require.False(t, HasFlag(help, "snapshot-threshold"))
}

func TestLeaderOf(t *testing.T) {
	s := LeaderSample{Nodes: map[string]NodeSample{
		"n1": {State: "leader", Term: 3, Leader: "n1"},
		"n2": {State: "leader", Term: 5, Leader: "n2"},
		"n3": {State: "follower", Term: 5, Leader: "n2"},
	}}
	s.Leader, s.Term = LeaderOf(s.Nodes)
	require.Equal(t, "n2", s.Leader)
	require.EqualValues(t, 5, s.Term)
	require.Equal(t, "n2", StableLeader(s))

	// A deposed leader nobody else follows is not a stable leader.
	lone := LeaderSample{Nodes: map[string]NodeSample{
		"n1": {State: "leader", Term: 3, Leader: "n1"},
		"n2": {State: "candidate", Term: 4},
		"n3": {State: "down"},
	}}
	lone.Leader, lone.Term = LeaderOf(lone.Nodes)
	require.Equal(t, "n1", lone.Leader)
	require.Empty(t, StableLeader(lone))
}
