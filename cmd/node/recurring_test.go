package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

func TestRecurring(t *testing.T) {
	t.Parallel()
	// The fake's clock starts at 2030-01-02T12:00:00Z.
	f, addr := startFake(t)

	r := runCLI(t, "", "recurring", "add", "nightly", "-cron", "0 3 * * *", "-tz", "Europe/Paris", "-pool", "ops",
		"-kind", "backup", "-payload", "full", "-overlap", "allow", "-catch-up", "all", "-catch-up-limit", "3",
		"-o", "json", "-addr", addr)
	requireOK(t, r)
	// 03:00 in Paris is 02:00 UTC in winter.
	require.JSONEq(t, `{"name": "nightly", "next_fire": "2030-01-03T02:00:00Z"}`, r.stdout)
	sc := f.Schedule("nightly")
	require.Equal(t, "0 3 * * *", sc.GetCron())
	require.Equal(t, "Europe/Paris", sc.GetTz())
	require.Equal(t, "ops", sc.GetTask().GetPool())
	require.Equal(t, "backup", sc.GetTask().GetKind())
	require.Equal(t, "full", string(sc.GetTask().GetPayload()))
	require.Equal(t, cronoqv1.Overlap_OVERLAP_ALLOW, sc.GetOverlap())
	require.Equal(t, cronoqv1.CatchUp_CATCH_UP_ALL, sc.GetCatchUp())
	require.Equal(t, uint32(3), sc.GetCatchUpLimit())

	r = runCLI(t, "", "recurring", "add", "-addr", addr, "a", "-cron", "@every 1h", "-pool", "p", "-kind", "tick")
	requireOK(t, r)
	require.Equal(t, "schedule a saved; next fire at 2030-01-02T13:00:00Z\n", r.stdout)

	r = runCLI(t, "", "recurring", "list", "-addr", addr, "-o", "json")
	requireOK(t, r)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 2)
	require.Equal(t, map[string]any{
		"name": "a", "cron": "@every 1h", "tz": "UTC", "pool": "p", "kind": "tick",
		"priority": "normal", "labels": map[string]any{}, "tags": map[string]any{}, "payload": "",
		"timeout_ms": float64(0), "max_attempts": float64(0),
		"next_fire": "2030-01-02T13:00:00Z", "last_fire": nil, "paused": false, "overlap": "skip",
		"catch_up": "once", "catch_up_limit": float64(0), "fires": float64(0), "skipped": float64(0), "last_task": "",
		"workflow": "", "steps": float64(0),
	}, list[0])
	require.Equal(t, "nightly", list[1]["name"])

	r = runCLI(t, "", "recurring", "pause", "nightly", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "paused": true}`, r.stdout)
	r = runCLI(t, "", "recurring", "list", "-addr", addr)
	requireOK(t, r)
	// A paused schedule has no next fire.
	require.Equal(t, ""+
		"NAME     CRON       TZ            POOL  KIND    WORKFLOW  NEXT FIRE             LAST FIRE  FIRES  PAUSED\n"+
		"a        @every 1h  UTC           p     tick    -         2030-01-02T13:00:00Z  -          0      no\n"+
		"nightly  0 3 * * *  Europe/Paris  ops   backup  -         -                     -          0      yes\n", r.stdout)
	r = runCLI(t, "", "recurring", "resume", "-o", "json", "nightly", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "paused": false}`, r.stdout)
	require.Equal(t, time.Date(2030, 1, 3, 2, 0, 0, 0, time.UTC), f.Schedule("nightly").GetNextFire().AsTime())
	r = runCLI(t, "", "recurring", "resume", "nope", "-addr", addr)
	requireFailure(t, r, exitError, "no schedule nope")

	r = runCLI(t, "", "recurring", "rm", "nightly", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "removed": true}`, r.stdout)
	r = runCLI(t, "", "recurring", "rm", "nightly", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"name": "nightly", "removed": false}`, r.stdout)
	require.Nil(t, f.Schedule("nightly"))
}
