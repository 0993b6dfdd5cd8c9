package nemesis

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGrudge(t *testing.T) {
	g := Grudge{}
	g.Cut("127.0.0.11", "127.0.0.12")
	g.Add("127.0.0.21", "127.0.0.13")
	g.Add("127.0.0.21", "127.0.0.13") // once
	require.Equal(t, [][2]string{
		{"127.0.0.11", "127.0.0.12"},
		{"127.0.0.12", "127.0.0.11"},
		{"127.0.0.21", "127.0.0.13"},
	}, g.Pairs())
	require.True(t, g.Dropped("127.0.0.21", "127.0.0.13"))
	require.False(t, g.Dropped("127.0.0.13", "127.0.0.21"), "cuts are one-way unless made both ways")
}
