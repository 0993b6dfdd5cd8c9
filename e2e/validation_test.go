package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client"
)

// TestBadInput checks that bad input gives a one-line error naming the
// field, a non-zero exit status, and changes nothing, on a cluster whose
// agents fix the list of pools and allow 64-byte payloads.
func TestBadInput(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withAgentFlags("-pools", "alpha,beta", "-max-payload", "64"))

	// Something to compare with, and to prove the limits let good input in.
	existing := c.submit(t, "-pool", "alpha", "-kind", "k", "-delay", "1h", "-payload", strings.Repeat("x", 64))
	decodeStrict[scheduleAddJSON](t, c.cli(t, "recurring", "add", "keep", "-cron", "@daily", "-pool", "beta", "-kind", "k", "-o", "json").ok(t))

	// state is everything a bad command could have changed.
	state := func(t *testing.T) string {
		t.Helper()
		tasks := c.cli(t, "list", "-limit", "1000", "-o", "json").ok(t)
		scheds := c.cli(t, "recurring", "list", "-o", "json").ok(t)
		return tasks + scheds
	}
	before := state(t)
	require.Contains(t, before, existing)

	big := filepath.Join(t.TempDir(), "big")
	require.NoError(t, os.WriteFile(big, []byte(strings.Repeat("y", 1024)), 0o600))
	unknownID := "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)

	cases := []struct {
		name  string
		args  []string
		words []string // the message must contain each
	}{
		{"submit_unknown_pool", []string{"submit", "-pool", "gamma", "-kind", "k"}, []string{"pool", "gamma"}},
		{"submit_empty_kind", []string{"submit", "-pool", "alpha", "-kind", ""}, []string{"kind"}},
		{"submit_missing_pool", []string{"submit", "-kind", "k"}, []string{"pool"}},
		{"submit_payload_over_limit", []string{"submit", "-pool", "alpha", "-kind", "k", "-payload", strings.Repeat("x", 65)}, []string{"payload"}},
		{"submit_payload_file_over_limit", []string{"submit", "-pool", "alpha", "-kind", "k", "-payload", "@" + big}, []string{"payload"}},
		{"submit_malformed_delay", []string{"submit", "-pool", "alpha", "-kind", "k", "-delay", "5x"}, []string{"delay"}},
		{"submit_negative_delay", []string{"submit", "-pool", "alpha", "-kind", "k", "-delay", "-5s"}, []string{"delay"}},
		{"submit_malformed_timeout", []string{"submit", "-pool", "alpha", "-kind", "k", "-timeout", "soon"}, []string{"timeout"}},
		{"submit_malformed_run_at", []string{"submit", "-pool", "alpha", "-kind", "k", "-run-at", "tomorrow"}, []string{"run-at"}},
		{"submit_run_at_without_zone", []string{"submit", "-pool", "alpha", "-kind", "k", "-run-at", "2030-01-02 15:04:05"}, []string{"run-at"}},
		{"submit_malformed_deadline", []string{"submit", "-pool", "alpha", "-kind", "k", "-deadline", "2030-13-01T00:00:00Z"}, []string{"deadline"}},
		{"submit_delay_and_run_at", []string{"submit", "-pool", "alpha", "-kind", "k", "-delay", "1m", "-run-at", future}, []string{"delay", "run-at"}},
		{"submit_bad_priority", []string{"submit", "-pool", "alpha", "-kind", "k", "-priority", "urgent"}, []string{"priority"}},
		{"submit_zero_max_attempts", []string{"submit", "-pool", "alpha", "-kind", "k", "-max-attempts", "0"}, []string{"max-attempts"}},
		{"submit_bad_label", []string{"submit", "-pool", "alpha", "-kind", "k", "-label", "novalue"}, []string{"label"}},
		{"recurring_bad_cron", []string{"recurring", "add", "bad", "-cron", "61 * * * *", "-pool", "alpha", "-kind", "k"}, []string{"cron"}},
		{"recurring_cron_too_few_fields", []string{"recurring", "add", "bad", "-cron", "* * *", "-pool", "alpha", "-kind", "k"}, []string{"cron"}},
		{"recurring_bad_every", []string{"recurring", "add", "bad", "-cron", "@every banana", "-pool", "alpha", "-kind", "k"}, []string{"cron"}},
		{"recurring_bad_tz", []string{"recurring", "add", "bad", "-cron", "0 3 * * *", "-tz", "Mars/Olympus_Mons", "-pool", "alpha", "-kind", "k"}, []string{"tz"}},
		{"recurring_unknown_pool", []string{"recurring", "add", "bad", "-cron", "@daily", "-pool", "gamma", "-kind", "k"}, []string{"pool"}},
		{"recurring_empty_kind", []string{"recurring", "add", "bad", "-cron", "@daily", "-pool", "alpha", "-kind", ""}, []string{"kind"}},
		{"recurring_missing_cron", []string{"recurring", "add", "bad", "-pool", "alpha", "-kind", "k"}, []string{"cron"}},
		{"status_unknown_id", []string{"status", unknownID}, []string{unknownID, "not found"}},
		{"status_malformed_id", []string{"status", "not-a-task-id"}, []string{"not-a-task-id"}},
		{"status_unknown_key", []string{"status", "-key", "no-such-key"}, []string{"no-such-key"}},
		{"cancel_unknown_id", []string{"cancel", unknownID}, []string{unknownID, "not found"}},
		{"wait_unknown_id", []string{"wait", unknownID}, []string{unknownID, "not found"}},
		{"wait_unknown_key", []string{"wait", "-key", "no-such-key"}, []string{"no-such-key"}},
		{"wait_malformed_timeout", []string{"wait", unknownID, "-timeout", "forever"}, []string{"timeout"}},
		{"list_zero_limit", []string{"list", "-limit", "0"}, []string{"limit"}},
		{"list_negative_limit", []string{"list", "-limit", "-1"}, []string{"limit"}},
		{"list_unknown_status", []string{"list", "-status", "done"}, []string{"status", "done"}},
		{"recurring_rm_missing_name", []string{"recurring", "rm"}, []string{"rm"}},
		{"unknown_command", []string{"frobnicate"}, []string{"frobnicate"}},
		{"unknown_flag", []string{"submit", "-pool", "alpha", "-kind", "k", "-colour", "red"}, []string{"colour"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A command that would wait forever fails here rather than
			// hanging the test.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := runCLI(ctx, nil, append(tc.args, "-o", "json", "-addr", c.addrs())...)
			require.NoError(t, err, "%s", r)
			requireOneLineError(t, r, tc.words...)
			require.Equal(t, before, state(t), "%s changed the cluster's state", tc.name)
		})
	}

	// The SDK sends what the CLI checks itself: the nodes refuse it too,
	// naming the field.
	cl, err := client.New(strings.Split(c.addrs(), ","), sdkOptions()...)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	sdkCases := []struct {
		name  string
		call  func(ctx context.Context) error
		field string
	}{
		{"sdk_unknown_pool", func(ctx context.Context) error {
			_, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "gamma", Kind: "k"}})
			return err
		}, "pool"},
		{"sdk_empty_pool", func(ctx context.Context) error {
			_, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "", Kind: "k"}})
			return err
		}, "pool"},
		{"sdk_empty_kind", func(ctx context.Context) error {
			_, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "alpha", Kind: ""}})
			return err
		}, "kind"},
		{"sdk_payload_over_limit", func(ctx context.Context) error {
			_, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "alpha", Kind: "k", Payload: make([]byte, 65)}})
			return err
		}, "payload"},
		{"sdk_bad_cron", func(ctx context.Context) error {
			_, err := cl.AddSchedule(ctx, client.Schedule{Name: "bad", Cron: "61 * * * *", Task: client.Template{Pool: "alpha", Kind: "k"}})
			return err
		}, "cron"},
		{"sdk_bad_tz", func(ctx context.Context) error {
			_, err := cl.AddSchedule(ctx, client.Schedule{Name: "bad", Cron: "@daily", TZ: "Mars/Olympus_Mons", Task: client.Template{Pool: "alpha", Kind: "k"}})
			return err
		}, "tz"},
		{"sdk_schedule_empty_kind", func(ctx context.Context) error {
			_, err := cl.AddSchedule(ctx, client.Schedule{Name: "bad", Cron: "@daily", Task: client.Template{Pool: "alpha"}})
			return err
		}, "kind"},
	}
	for _, tc := range sdkCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := tc.call(ctx)
			require.Error(t, err)
			var inv *client.InvalidError
			require.True(t, errors.As(err, &inv), "not an *InvalidError: %v", err)
			require.Contains(t, inv.Field, tc.field, "%v", err)
			require.NotContains(t, err.Error(), "\n")
			require.Equal(t, before, state(t), "%s changed the cluster's state", tc.name)
		})
	}
}
