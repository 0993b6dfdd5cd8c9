package e2e

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestContract pins every client command of CONTRACT.md and its JSON shape
// (-o json), on one three-node cluster with one worker on pool "cw".
func TestContract(t *testing.T) {
	c := newCluster(t)
	c.startWorker(t, "worker-cw", c.addrs(), "-pool", "cw", "-concurrency", "4",
		"-handler", "echo=cat",
		"-handler", "fail=echo some output; echo 'first line' >&2; echo 'it went wrong' >&2; exit 1",
		"-handler", `bin=printf '\377\376\000\001'`,
	)

	t.Run("submit_returns_id_and_duplicate", func(t *testing.T) {
		args := []string{"submit", "-pool", "dup", "-kind", "k", "-key", "dup-key", "-payload", "x", "-o", "json"}
		first := decodeStrict[submitJSON](t, c.cli(t, args...).ok(t))
		require.NotEmpty(t, first.ID)
		require.False(t, first.Duplicate)
		again := decodeStrict[submitJSON](t, c.cli(t, args...).ok(t))
		require.Equal(t, submitJSON{ID: first.ID, Duplicate: true}, again)
		tasks := c.listAll(t, "-pool", "dup")
		require.Len(t, tasks, 1)
		require.Equal(t, first.ID, tasks[0].ID)

		// Without -key the SDK makes one up: two submits are two tasks.
		a := c.submit(t, "-pool", "dup", "-kind", "k")
		b := c.submit(t, "-pool", "dup", "-kind", "k")
		require.NotEqual(t, a, b)
		require.Len(t, c.listAll(t, "-pool", "dup"), 3)
	})

	t.Run("submit_wait_prints_the_terminal_task", func(t *testing.T) {
		r := c.cli(t, "submit", "-pool", "cw", "-kind", "echo", "-payload", "hello", "-wait", "-o", "json")
		task := decodeStrict[taskJSON](t, r.ok(t))
		checkTask(t, task)
		require.Equal(t, "succeeded", task.Status)
		require.NotNil(t, task.Output)
		require.Equal(t, "hello", *task.Output)
		require.Equal(t, 1, task.Attempt)

		r = c.cli(t, "submit", "-pool", "cw", "-kind", "fail", "-wait", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task = decodeStrict[taskJSON](t, r.stdout)
		checkTask(t, task)
		require.Equal(t, "failed", task.Status)
		require.Contains(t, task.Error, "it went wrong")
	})

	t.Run("status_by_id_and_by_key", func(t *testing.T) {
		runAt := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
		before := time.Now()
		id := c.submit(t, "-pool", "st", "-kind", "report", "-key", "status-key", "-priority", "high",
			"-label", "zone=eu", "-label", "gpu=1", "-payload", "the payload", "-run-at", runAt.Format(time.RFC3339))
		byID := decodeStrict[taskJSON](t, c.cli(t, "status", id, "-o", "json").ok(t))
		checkTask(t, byID)
		require.Equal(t, id, byID.ID)
		require.Equal(t, "st", byID.Pool)
		require.Equal(t, "report", byID.Kind)
		require.Equal(t, "status-key", byID.Key)
		require.Equal(t, "scheduled", byID.Status)
		require.Equal(t, 0, byID.Attempt)
		require.Equal(t, "high", byID.Priority)
		require.Equal(t, map[string]string{"zone": "eu", "gpu": "1"}, byID.Labels)
		require.NotNil(t, byID.Payload)
		require.Equal(t, "the payload", *byID.Payload)
		require.NotNil(t, byID.Output)
		require.Empty(t, *byID.Output)
		require.Empty(t, byID.Error)
		require.True(t, parseTime(t, "run_at", byID.RunAt).Equal(runAt), "run_at %s, want %s", byID.RunAt, runAt)
		submitted := parseTime(t, "submitted_at", byID.SubmittedAt)
		require.WithinRange(t, submitted, before.Add(-5*time.Second), time.Now().Add(5*time.Second))
		require.Nil(t, byID.FinishedAt)

		byKey := decodeStrict[taskJSON](t, c.cli(t, "status", "-key", "status-key", "-o", "json").ok(t))
		require.Equal(t, byID, byKey)

		// -delay: run_at is submitted_at plus the delay.
		id = c.submit(t, "-pool", "st", "-kind", "report", "-delay", "1h")
		task := c.status(t, id)
		require.Equal(t, "scheduled", task.Status)
		delta := parseTime(t, "run_at", task.RunAt).Sub(parseTime(t, "submitted_at", task.SubmittedAt))
		require.InDelta(t, time.Hour.Seconds(), delta.Seconds(), 1, "run_at - submitted_at = %s", delta)
	})

	t.Run("wait_exits_0_only_if_succeeded", func(t *testing.T) {
		ok := c.submit(t, "-pool", "cw", "-kind", "echo", "-payload", "waited")
		task := decodeStrict[taskJSON](t, c.cli(t, "wait", ok, "-timeout", "30s", "-o", "json").ok(t))
		checkTask(t, task)
		require.Equal(t, "succeeded", task.Status)
		require.Equal(t, "waited", *task.Output)

		failed := c.submit(t, "-pool", "cw", "-kind", "fail")
		r := c.cli(t, "wait", failed, "-timeout", "30s", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task = decodeStrict[taskJSON](t, r.stdout)
		require.Equal(t, "failed", task.Status)

		cancelled := c.submit(t, "-pool", "nowork", "-kind", "k")
		c.cli(t, "cancel", cancelled).ok(t)
		r = c.cli(t, "wait", cancelled, "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		require.Equal(t, "cancelled", decodeStrict[taskJSON](t, r.stdout).Status)

		// A task that does not end within -timeout.
		pending := c.submit(t, "-pool", "nowork", "-kind", "k", "-delay", "1h")
		start := time.Now()
		r = c.cli(t, "wait", pending, "-timeout", "500ms", "-o", "json")
		requireOneLineError(t, r, "timeout")
		require.Less(t, time.Since(start), 15*time.Second)
	})

	t.Run("deadline_expires_the_task", func(t *testing.T) {
		// Instants travel with millisecond precision.
		deadline := time.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)
		// Queued on a pool no worker serves: the deadline passes first.
		id := c.submit(t, "-pool", "nowork", "-kind", "k", "-deadline", deadline)
		r := c.cli(t, "wait", id, "-timeout", "30s", "-o", "json")
		require.NotEqual(t, 0, r.code, "%s", r)
		task := decodeStrict[taskJSON](t, r.stdout)
		checkTask(t, task)
		require.Equal(t, "expired", task.Status)
		require.Equal(t, 0, task.Attempt)
		require.False(t, parseTime(t, "finished_at", *task.FinishedAt).Before(parseTime(t, "deadline", deadline)),
			"expired at %s, before its deadline %s", *task.FinishedAt, deadline)
	})

	t.Run("cancel_reports_whether_it_cancelled", func(t *testing.T) {
		id := c.submit(t, "-pool", "nowork", "-kind", "k")
		got := decodeStrict[cancelJSON](t, c.cli(t, "cancel", id, "-o", "json").ok(t))
		require.Equal(t, cancelJSON{ID: id, Cancelled: true}, got)
		task := c.status(t, id)
		require.Equal(t, "cancelled", task.Status)
		require.NotNil(t, task.FinishedAt)
		got = decodeStrict[cancelJSON](t, c.cli(t, "cancel", id, "-o", "json").ok(t))
		require.Equal(t, cancelJSON{ID: id, Cancelled: false}, got)

		done := decodeStrict[taskJSON](t, c.cli(t, "submit", "-pool", "cw", "-kind", "echo", "-wait", "-o", "json").ok(t)).ID
		got = decodeStrict[cancelJSON](t, c.cli(t, "cancel", done, "-o", "json").ok(t))
		require.Equal(t, cancelJSON{ID: done, Cancelled: false}, got)
		require.Equal(t, "succeeded", c.status(t, done).Status)
	})

	t.Run("list_filters_and_pages", func(t *testing.T) {
		var ids []string
		for i := range 5 {
			ids = append(ids, c.submit(t, "-pool", "pages", "-kind", "k", "-delay", "1h", "-payload", fmt.Sprint(i)))
		}
		require.True(t, slices.IsSorted(ids), "ids are not increasing: %v", ids)
		c.submit(t, "-pool", "pages-other", "-kind", "k", "-delay", "1h")

		page := func(args ...string) listJSON {
			l := decodeStrict[listJSON](t, c.cli(t, append([]string{"list", "-o", "json"}, args...)...).ok(t))
			for _, task := range l.Tasks {
				checkTask(t, task)
			}
			return l
		}
		idsOf := func(l listJSON) []string {
			var out []string
			for _, task := range l.Tasks {
				out = append(out, task.ID)
			}
			return out
		}
		// Oldest first with -order asc, pages following the cursor.
		p1 := page("-pool", "pages", "-limit", "2", "-order", "asc")
		require.Equal(t, ids[0:2], idsOf(p1))
		require.Equal(t, ids[1], p1.Next)
		p2 := page("-pool", "pages", "-limit", "2", "-order", "asc", "-after", p1.Next)
		require.Equal(t, ids[2:4], idsOf(p2))
		require.Equal(t, ids[3], p2.Next)
		p3 := page("-pool", "pages", "-limit", "2", "-order", "asc", "-after", p2.Next)
		require.Equal(t, ids[4:5], idsOf(p3))
		require.Empty(t, p3.Next)
		// Newest first by default.
		n1 := page("-pool", "pages", "-limit", "2")
		require.Equal(t, []string{ids[4], ids[3]}, idsOf(n1))
		n2 := page("-pool", "pages", "-limit", "2", "-after", n1.Next)
		require.Equal(t, []string{ids[2], ids[1]}, idsOf(n2))

		c.cli(t, "cancel", ids[0]).ok(t)
		require.Equal(t, ids[:1], idsOf(page("-pool", "pages", "-status", "cancelled")))
		require.Equal(t, ids[1:], idsOf(page("-pool", "pages", "-status", "scheduled", "-order", "asc")))
		require.Equal(t, ids, idsOf(page("-pool", "pages", "-status", "scheduled,cancelled", "-order", "asc")))
		require.Empty(t, page("-pool", "pages", "-status", "running").Tasks)
		both := page("-pool", "pages", "-pool", "pages-other")
		require.Len(t, both.Tasks, 6)

		empty := page("-pool", "no-such-pool-yet")
		require.NotNil(t, empty.Tasks)
		require.Empty(t, empty.Tasks)
		require.Empty(t, empty.Next)
	})

	t.Run("recurring_add_list_pause_resume_rm", func(t *testing.T) {
		paris, err := time.LoadLocation("Europe/Paris")
		require.NoError(t, err)
		before := time.Now()
		added := decodeStrict[scheduleAddJSON](t, c.cli(t, "recurring", "add", "nightly", "-cron", "0 3 * * *",
			"-tz", "Europe/Paris", "-pool", "reports", "-kind", "nightly-report", "-payload", "p", "-o", "json").ok(t))
		after := time.Now()
		require.Equal(t, "nightly", added.Name)
		next := parseTime(t, "next_fire", added.NextFire)
		if want, alt := nextDaily(before, paris, 3), nextDaily(after, paris, 3); !next.Equal(want) {
			require.True(t, next.Equal(alt), "next_fire %s, want %s (03:00 Europe/Paris)", next, want)
		}

		list := decodeStrict[[]scheduleJSON](t, c.cli(t, "recurring", "list", "-o", "json").ok(t))
		require.Len(t, list, 1)
		s := list[0]
		require.Equal(t, "nightly", s.Name)
		require.Equal(t, "0 3 * * *", s.Cron)
		require.Equal(t, "Europe/Paris", s.TZ)
		require.Equal(t, "reports", s.Pool)
		require.Equal(t, "nightly-report", s.Kind)
		require.NotNil(t, s.NextFire)
		require.True(t, parseTime(t, "next_fire", *s.NextFire).Equal(next))
		require.Nil(t, s.LastFire)

		paused := decodeStrict[schedulePauseJSON](t, c.cli(t, "recurring", "pause", "nightly", "-o", "json").ok(t))
		require.Equal(t, schedulePauseJSON{Name: "nightly", Paused: true}, paused)
		if p := decodeStrict[[]scheduleJSON](t, c.cli(t, "recurring", "list", "-o", "json").ok(t))[0].Paused; p != nil {
			require.True(t, *p)
		}
		resumed := decodeStrict[schedulePauseJSON](t, c.cli(t, "recurring", "resume", "nightly", "-o", "json").ok(t))
		require.Equal(t, schedulePauseJSON{Name: "nightly", Paused: false}, resumed)
		if p := decodeStrict[[]scheduleJSON](t, c.cli(t, "recurring", "list", "-o", "json").ok(t))[0].Paused; p != nil {
			require.False(t, *p)
		}

		rm := decodeStrict[scheduleRmJSON](t, c.cli(t, "recurring", "rm", "nightly", "-o", "json").ok(t))
		require.Equal(t, scheduleRmJSON{Name: "nightly", Removed: true}, rm)
		rm = decodeStrict[scheduleRmJSON](t, c.cli(t, "recurring", "rm", "nightly", "-o", "json").ok(t))
		require.Equal(t, scheduleRmJSON{Name: "nightly", Removed: false}, rm)
		list = decodeStrict[[]scheduleJSON](t, c.cli(t, "recurring", "list", "-o", "json").ok(t))
		require.NotNil(t, list)
		require.Empty(t, list)
		requireOneLineError(t, c.cli(t, "recurring", "pause", "nightly", "-o", "json"), "nightly")
	})

	t.Run("recurring_every_fires_tasks", func(t *testing.T) {
		before := time.Now()
		added := decodeStrict[scheduleAddJSON](t, c.cli(t, "recurring", "add", "fast", "-cron", "@every 1s",
			"-pool", "fired", "-kind", "tick", "-o", "json").ok(t))
		next := parseTime(t, "next_fire", added.NextFire)
		require.Equal(t, next.Truncate(time.Second), next, "@every 1s is aligned to whole seconds")
		require.WithinRange(t, next, before.Add(-time.Second), time.Now().Add(2*time.Second))

		var fired taskJSON
		eventually(t, 15*time.Second, func() (bool, string) {
			tasks := c.listAll(t, "-pool", "fired")
			if len(tasks) == 0 {
				return false, "no task fired yet"
			}
			fired = tasks[0]
			return true, ""
		})
		require.Equal(t, "tick", fired.Kind)
		if fired.Schedule != nil {
			require.Equal(t, "fast", *fired.Schedule)
		}
		list := decodeStrict[[]scheduleJSON](t, c.cli(t, "recurring", "list", "-o", "json").ok(t))
		require.Len(t, list, 1)
		require.NotNil(t, list[0].LastFire, "last_fire after a fire")
		parseTime(t, "last_fire", *list[0].LastFire)
		require.True(t, decodeStrict[scheduleRmJSON](t, c.cli(t, "recurring", "rm", "fast", "-o", "json").ok(t)).Removed)
	})

	t.Run("members", func(t *testing.T) {
		var members []memberJSON
		eventually(t, 15*time.Second, func() (bool, string) {
			members = decodeStrict[[]memberJSON](t, c.cli(t, "members", "-o", "json").ok(t))
			for _, m := range members {
				if m.Status != "alive" {
					return false, fmt.Sprintf("%s is %s", m.Name, m.Status)
				}
			}
			return len(members) == 3, fmt.Sprintf("%d members", len(members))
		})
		slices.SortFunc(members, func(a, b memberJSON) int { return strings.Compare(a.Name, b.Name) })
		for i, n := range c.nodes {
			require.Equal(t, memberJSON{Name: n.id, Addr: n.gossipAddr, Status: "alive", RaftAddr: n.raftAddr, HTTPAddr: n.httpAddr}, members[i])
		}
	})

	t.Run("operator_raft_list_peers", func(t *testing.T) {
		leader := c.leader()
		for _, n := range c.nodes {
			peers := decodeStrict[[]peerJSON](t, cliAt(t, n.httpAddr, "operator", "raft", "list-peers", "-o", "json").ok(t))
			slices.SortFunc(peers, func(a, b peerJSON) int { return strings.Compare(a.ID, b.ID) })
			require.Len(t, peers, 3)
			for i, m := range c.nodes {
				require.Equal(t, peerJSON{ID: m.id, Address: m.raftAddr, Voter: true, Leader: m == leader}, peers[i], "asked %s", n.id)
			}
		}
	})

	t.Run("health_cli_and_http", func(t *testing.T) {
		leader := c.leader()
		for _, n := range c.nodes {
			h := decodeStrict[healthJSON](t, cliAt(t, n.httpAddr, "health", "-o", "json").ok(t))
			require.Equal(t, n.id, h.Node)
			require.Equal(t, leader.id, h.Leader)
			require.GreaterOrEqual(t, h.Epoch, uint64(1))
			require.Equal(t, "ok", h.Status)

			resp, err := httpc.Get(scheme + n.httpAddr + "/v1/health")
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
			hh := decodeStrict[healthJSON](t, string(body))
			require.Equal(t, healthJSON{Node: n.id, Leader: leader.id, Epoch: h.Epoch, Status: "ok"}, hh)
		}
	})

	t.Run("metrics_prometheus_text", func(t *testing.T) {
		leader := c.leader()
		for _, n := range c.nodes {
			resp, err := httpc.Get(scheme + n.httpAddr + "/metrics")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), "Content-Type %q", resp.Header.Get("Content-Type"))
			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(resp.Body)
			resp.Body.Close()
			require.NoError(t, err, "GET /metrics of %s is not Prometheus text", n.id)
			var ours []string
			for name := range families {
				if strings.HasPrefix(name, "cronoq_") {
					ours = append(ours, name)
				}
			}
			require.NotEmpty(t, ours, "no cronoq_ series on %s", n.id)
			if f, ok := families["cronoq_is_leader"]; ok {
				want := 0.0
				if n == leader {
					want = 1
				}
				require.Equal(t, want, f.GetMetric()[0].GetGauge().GetValue(), "cronoq_is_leader of %s", n.id)
			}
			if n != leader {
				continue
			}
			f, ok := families["cronoq_tasks_submitted_total"]
			if !ok {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "pool" && l.GetValue() == "cw" {
						require.GreaterOrEqual(t, m.GetCounter().GetValue(), 1.0)
					}
				}
			}
		}
	})

	t.Run("flags_before_and_after_positional_arguments", func(t *testing.T) {
		id := c.submit(t, "-pool", "nowork", "-kind", "k", "-delay", "1h", "-key", "flag-order")
		a := c.addrs()
		forms := [][]string{
			{"status", id, "-o", "json", "-addr", a},
			{"status", "-o", "json", id, "-addr", a},
			{"status", "-addr", a, "-o", "json", id},
			{"status", "-o=json", "-addr=" + a, id},
		}
		var first string
		for _, args := range forms {
			out := cliRaw(t, nil, args...).ok(t)
			require.Equal(t, id, decodeStrict[taskJSON](t, out).ID, "%v", args)
			if first == "" {
				first = out
			}
			require.JSONEq(t, first, out, "%v", args)
		}
		// Submit with flags on both sides of nothing but flags, wait with the
		// id in the middle, cancel with the id first.
		r := cliRaw(t, nil, "wait", "-timeout", "200ms", id, "-addr", a)
		requireOneLineError(t, r, "timeout")
		got := decodeStrict[cancelJSON](t, cliRaw(t, nil, "cancel", id, "-addr", a, "-o", "json").ok(t))
		require.True(t, got.Cancelled)
		got = decodeStrict[cancelJSON](t, cliRaw(t, nil, "cancel", "-o", "json", "-addr", a, id).ok(t))
		require.False(t, got.Cancelled)
		added := decodeStrict[scheduleAddJSON](t, cliRaw(t, nil, "recurring", "add", "-cron", "@daily", "order", "-pool", "p", "-kind", "k", "-addr", a, "-o", "json").ok(t))
		require.Equal(t, "order", added.Name)
		rm := decodeStrict[scheduleRmJSON](t, cliRaw(t, nil, "recurring", "rm", "-o", "json", "order", "-addr", a).ok(t))
		require.True(t, rm.Removed)
	})

	t.Run("binary_payload_and_output_as_base64", func(t *testing.T) {
		raw := []byte{0xff, 0xfe, 'a', 0x00, 0x80}
		file := filepath.Join(t.TempDir(), "payload.bin")
		require.NoError(t, os.WriteFile(file, raw, 0o600))
		id := c.submit(t, "-pool", "nowork", "-kind", "k", "-delay", "1h", "-payload", "@"+file)
		out := c.cli(t, "status", id, "-o", "json").ok(t)
		task := decodeStrict[taskJSON](t, out)
		checkTask(t, task)
		require.Nil(t, task.Payload, "non-UTF-8 payload given as text: %s", out)
		require.NotNil(t, task.PayloadBase64)
		got, err := base64.StdEncoding.DecodeString(*task.PayloadBase64)
		require.NoError(t, err)
		require.Equal(t, raw, got)

		// The same bytes from stdin (@-) name the same payload.
		r := cliRaw(t, raw, "submit", "-pool", "nowork", "-kind", "k", "-delay", "1h", "-payload", "@-", "-o", "json", "-addr", c.addrs())
		task = c.status(t, decodeStrict[submitJSON](t, r.ok(t)).ID)
		require.Equal(t, base64.StdEncoding.EncodeToString(raw), *task.PayloadBase64)

		r = c.cli(t, "submit", "-pool", "cw", "-kind", "bin", "-wait", "-o", "json")
		task = decodeStrict[taskJSON](t, r.ok(t))
		checkTask(t, task)
		require.Equal(t, "succeeded", task.Status)
		require.Nil(t, task.Output, "non-UTF-8 output given as text: %s", r.stdout)
		require.NotNil(t, task.OutputBase64)
		got, err = base64.StdEncoding.DecodeString(*task.OutputBase64)
		require.NoError(t, err)
		require.Equal(t, []byte{0xff, 0xfe, 0x00, 0x01}, got)
	})
}

// nextDaily is the first instant strictly after t at hour:00 in loc.
func nextDaily(t time.Time, loc *time.Location, hour int) time.Time {
	l := t.In(loc)
	for d := 0; ; d++ {
		c := time.Date(l.Year(), l.Month(), l.Day()+d, hour, 0, 0, 0, loc)
		if c.After(t) {
			return c.UTC()
		}
	}
}
