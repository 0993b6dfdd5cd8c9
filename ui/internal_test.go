package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

func task(id, step string, deps ...string) *client.Task {
	return &client.Task{ID: id, Step: step, Status: client.StatusQueued, DependsOn: deps}
}

func TestLayoutLayers(t *testing.T) {
	g := layout([]*client.Task{
		task("a", "extract"),
		task("b", "clean", "a"),
		task("c", "validate", "a"),
		task("d", "load", "b", "c"),
		task("e", "report", "d", "a"),
		task("f", "other", "outside"), // a dependency outside the workflow is not drawn
	})
	layers := map[string]int{}
	rows := map[string]int{}
	for _, n := range g.Nodes {
		layers[n.Step] = n.Layer
		rows[n.Step] = (n.Y - padding) / (boxH + gapY)
		require.Equal(t, padding+n.Layer*(boxW+gapX), n.X)
	}
	require.Equal(t, map[string]int{"extract": 0, "other": 0, "clean": 1, "validate": 1, "load": 2, "report": 3}, layers)
	// Within a layer: by the mean row of the dependencies, then by step.
	require.Equal(t, 0, rows["extract"])
	require.Equal(t, 1, rows["other"])
	require.Equal(t, 0, rows["clean"])
	require.Equal(t, 1, rows["validate"])
	require.Len(t, g.Edges, 6)
	require.Equal(t, 2*padding+4*(boxW+gapX)-gapX, g.Width)
	require.Equal(t, 2*padding+2*(boxH+gapY)-gapY, g.Height)
	for _, e := range g.Edges {
		require.NotEqual(t, "f", e.To)
	}
	// The same input gives the same drawing.
	require.Equal(t, g, layout([]*client.Task{
		task("a", "extract"), task("b", "clean", "a"), task("c", "validate", "a"),
		task("d", "load", "b", "c"), task("e", "report", "d", "a"), task("f", "other", "outside"),
	}))
}

func TestLayoutCycleEnds(t *testing.T) {
	g := layout([]*client.Task{task("a", "x", "b"), task("b", "y", "a"), task("c", "z", "c")})
	require.Len(t, g.Nodes, 3)
}

func TestLayoutEmpty(t *testing.T) {
	g := layout(nil)
	require.Empty(t, g.Nodes)
	require.Positive(t, g.Width)
}

func TestViewBytes(t *testing.T) {
	v := viewBytes([]byte("héllo"))
	require.Equal(t, bytesView{Text: "héllo", Size: 6}, v)
	v = viewBytes([]byte{0xff, 0x00})
	require.True(t, v.Base64)
	require.Equal(t, "/wA=", v.Text)
	big := make([]byte, maxShownBytes+10)
	for i := range big {
		big[i] = 'a'
	}
	v = viewBytes(big)
	require.True(t, v.Cut)
	require.Len(t, v.Text, maxShownBytes)
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                          {},
		"15m":                       now.Add(-15 * time.Minute),
		"-2h":                       now.Add(-2 * time.Hour),
		"2026-12-03T09:30:00+01:00": time.Date(2026, 12, 3, 8, 30, 0, 0, time.UTC),
		"2026-12-03T09:30":          time.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC),
		"2026-12-03 09:30:05":       time.Date(2026, 12, 3, 9, 30, 5, 0, time.UTC),
		"2026-12-03":                time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC),
	} {
		got, err := parseWhen(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %s", in, got)
	}
	_, err := parseWhen("yesterday", now)
	require.ErrorContains(t, err, "not a time")
}

func TestClientsBounded(t *testing.T) {
	var made []string
	c, err := New(Config{NewClient: func(token string) (*client.Client, error) {
		made = append(made, token)
		return client.New([]string{"127.0.0.1:1"})
	}})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	req := func(tok string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/ui/", nil)
		if tok != "" {
			r.AddCookie(&http.Cookie{Name: TokenCookie, Value: tok})
		}
		return r
	}
	first, err := c.clientFor(req(""))
	require.NoError(t, err)
	again, err := c.clientFor(req(""))
	require.NoError(t, err)
	require.Same(t, first, again, "one client per token")
	for i := range maxClients {
		_, err := c.clientFor(req(fmt.Sprintf("t%d", i)))
		require.NoError(t, err)
	}
	require.Len(t, c.clients, maxClients)
	require.NotContains(t, c.clients, "", "the least recently used went")
	_, err = first.Health(context.Background())
	require.ErrorIs(t, err, client.ErrClosed)
	require.Len(t, made, maxClients+1)
}
