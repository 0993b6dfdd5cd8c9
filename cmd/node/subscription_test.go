package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// jsonLines decodes one JSON object per line.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		out = append(out, decodeObject(t, line))
	}
	return out
}

// The subscription commands and `events` against a real node: create,
// list, read with acks as it prints, remove; plain event following; a
// stalled subscription in health; the usage errors.
func TestSubscriptionCommands(t *testing.T) {
	c := testcluster.New(t, 1)
	c.Leader()
	addr := "-addr=" + c.Live()[0].Addr()

	r := runCLI(t, "", "subscription", "create", "ends", "-pool", "sub", "-status", "cancelled,failed", "-ack-timeout", "5s",
		"-max-deliveries", "3", addr, "-o", "json")
	requireOK(t, r)
	created := decodeObject(t, r.stdout)
	require.Equal(t, "ends", created["name"])
	require.Equal(t, []any{"sub"}, created["pools"])
	require.Equal(t, []any{"failed", "cancelled"}, created["statuses"], "in status order")
	require.Equal(t, []any{}, created["kinds"])
	require.Equal(t, "5s", created["ack_timeout"])
	require.EqualValues(t, 3, created["max_deliveries"])
	require.Equal(t, false, created["has_secret"])
	require.Equal(t, false, created["stalled"])
	require.Nil(t, created["stalled_at"])
	require.NotNil(t, created["created_at"])
	for _, k := range []string{"webhook", "acked", "pending", "stall_reason"} {
		require.Contains(t, created, k)
	}
	// The same again shows it; other settings are refused as input.
	r = runCLI(t, "", "subscription", "create", "ends", "-pool", "sub", "-status", "failed", "-status", "cancelled", "-ack-timeout", "5s",
		"-max-deliveries", "3", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "Name:            ends")
	requireFailure(t, runCLI(t, "", "subscription", "create", "ends", addr), exitUsage, "exists with other settings")
	r = runCLI(t, "", "subscription", "create", "hooked", "-webhook", "https://hooks.example/in", "-secret", "k", addr, "-o", "json")
	requireOK(t, r)
	require.Equal(t, true, decodeObject(t, r.stdout)["has_secret"])
	require.NotContains(t, r.stdout, `"k"`, "the secret is never shown")

	// Three tasks of pool sub cancelled, one of another pool.
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ids []string
	for _, pool := range []string{"sub", "other", "sub", "sub"} {
		res, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: pool, Kind: "k"}})
		require.NoError(t, err)
		_, err = cl.Cancel(ctx, res.ID)
		require.NoError(t, err)
		if pool == "sub" {
			ids = append(ids, res.ID)
		}
	}

	r = runCLI(t, "", "subscription", "list", addr, "-o", "json")
	requireOK(t, r)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 2)
	require.Equal(t, "ends", list[0]["name"])
	require.EqualValues(t, 3, list[0]["pending"])
	r = runCLI(t, "", "subscription", "list", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "NAME")
	require.Contains(t, r.stdout, "failed,cancelled")

	// Two events, one JSON object per line, acked as printed.
	r = runCLI(t, "", "events", "-subscription", "ends", "-n", "2", addr, "-o", "json")
	requireOK(t, r)
	lines := jsonLines(t, r.stdout)
	require.Len(t, lines, 2)
	for i, ev := range lines {
		require.Equal(t, ids[i], ev["task_id"])
		require.Equal(t, "sub", ev["pool"])
		require.Equal(t, "k", ev["kind"])
		require.Equal(t, "cancelled", ev["status"])
		require.EqualValues(t, 0, ev["attempt"])
		require.NotNil(t, ev["at"])
		require.NotZero(t, ev["cursor"])
	}
	sub, err := cl.GetSubscription(ctx, "ends")
	require.NoError(t, err)
	require.EqualValues(t, lines[1]["cursor"], sub.Acked)
	require.Equal(t, 1, sub.Pending)

	// The third, in text.
	r = runCLI(t, "", "events", "-subscription", "ends", "-n", "1", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, ids[2]+"  sub/k  cancelled")
	require.Contains(t, r.stdout, "cursor=")
	require.Equal(t, 1, strings.Count(r.stdout, "\n"))
	sub, err = cl.GetSubscription(ctx, "ends")
	require.NoError(t, err)
	require.Zero(t, sub.Pending)

	// An interrupted read prints nothing more and exits 0.
	ictx, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	r = runCLIContext(ictx, "", "events", "-subscription", "ends", addr)
	stop()
	requireOK(t, r)
	require.Empty(t, r.stdout)

	// Plain following, from now on.
	done := make(chan cliResult, 1)
	go func() { done <- runCLIContext(ctx, "", "events", "-pool", "live", "-n", "1", addr, "-o", "json") }()
	var got cliResult
	require.Eventually(t, func() bool {
		_, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "live", Kind: "k"}})
		require.NoError(t, err)
		select {
		case got = <-done:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}, 30*time.Second, 10*time.Millisecond)
	requireOK(t, got)
	ev := jsonLines(t, got.stdout)
	require.Len(t, ev, 1)
	require.Equal(t, "live", ev[0]["pool"])
	require.Equal(t, "queued", ev[0]["status"])
	require.Contains(t, ev[0], "cursor")

	// A subscription whose reader never acks stalls; health names it.
	r = runCLI(t, "", "subscription", "create", "slow", "-ack-timeout", "100ms", "-max-deliveries", "1", addr)
	requireOK(t, r)
	_, err = cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "other", Kind: "k"}})
	require.NoError(t, err)
	rctx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	evs, err := cl.ReadSubscription(rctx, "slow", 0)
	require.NoError(t, err)
	first := <-evs
	require.NoError(t, first.Err)
	require.Eventually(t, func() bool {
		r = runCLI(t, "", "health", addr, "-o", "json")
		return r.code == exitOK && strings.Contains(r.stdout, `"degraded"`) && strings.Contains(r.stdout, "subscription slow stalled")
	}, 30*time.Second, 50*time.Millisecond, "%s", r.stdout)
	r = runCLI(t, "", "subscription", "list", addr)
	requireOK(t, r)
	require.Regexp(t, `slow +any +any +any +1 +0 +yes`, r.stdout)

	r = runCLI(t, "", "subscription", "rm", "ends", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"name": "ends", "removed": true}`, r.stdout)
	r = runCLI(t, "", "subscription", "rm", "ends", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"name": "ends", "removed": false}`, r.stdout)
	requireFailure(t, runCLI(t, "", "events", "-subscription", "ends", addr), exitError, "no such subscription")
}

func TestSubscriptionUsage(t *testing.T) {
	t.Setenv("CRONOQ_ADDR", closedAddr)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"subscription", "create"}, "missing argument"},
		{[]string{"subscription", "create", ""}, "empty subscription NAME"},
		{[]string{"subscription", "create", "s", "-secret", "k"}, "-secret needs -webhook"},
		{[]string{"subscription", "create", "s", "-status", "done"}, `unknown status "done"`},
		{[]string{"subscription", "create", "s", "-ack-timeout", "0s"}, "must be positive"},
		{[]string{"subscription", "create", "s", "-max-deliveries", "0"}, "must be at least 1"},
		{[]string{"subscription", "rm"}, "missing argument"},
		{[]string{"subscription", "list", "x"}, `unexpected argument "x"`},
		{[]string{"subscription", "edit"}, `unknown command "subscription edit"`},
		{[]string{"events", "-subscription", "s", "-pool", "p"}, "-subscription and -pool exclude each other"},
		{[]string{"events", "-after", "5"}, "-after needs -subscription"},
		{[]string{"events", "-subscription", "s", "-after", "x"}, "not a cursor"},
		{[]string{"events", "-n", "0"}, "must be at least 1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			requireFailure(t, runCLI(t, "", tc.args...), exitUsage, tc.want)
		})
	}
}
