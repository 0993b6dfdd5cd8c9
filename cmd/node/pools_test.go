package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/client/clienttest"
)

// fullPool has every field set.
func fullPool() *client.Pool {
	return &client.Pool{
		Name:            "billing",
		Counts:          map[string]int64{client.StatusQueued: 12, client.StatusRunning: 4, client.StatusFailed: 2, client.StatusParked: 3},
		OldestQueuedAge: 90*time.Second + 1234567*time.Microsecond,
		Workers:         2,
		Slots:           8,
		Running:         4,
		Parked:          3,
		Paused:          true,
		Limits: client.PoolLimits{
			MaxRunning:         4,
			MaxPending:         100,
			MaxPendingPerClass: map[string]int64{client.PriorityHigh: 50, client.PriorityLow: 10},
			Overflow:           client.OverflowPark,
			Rate:               2.5,
			Burst:              5,
			KindRates:          []client.KindRate{{Kind: "fetch", Rate: 0.5}, {Kind: "send", Rate: 1, Burst: 2}},
			ConcurrencyLimit:   3,
			Ordering:           client.OrderingBlock,
			MaxAttempts:        7,
			Backoff:            &client.Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.1},
			LeaseGrace:         45 * time.Second,
		},
		Replicated:   true,
		BlockedLanes: []string{"customer-42", "customer-7"},
		Lanes:        6,
		Waiting:      5,
		DesiredSlots: 4,
	}
}

// defaultPool is a pool nobody set, with nothing queued.
func defaultPool() *client.Pool {
	return &client.Pool{
		Name:   "default",
		Counts: map[string]int64{client.StatusSucceeded: 1},
		Limits: client.PoolLimits{Overflow: client.OverflowReject, Ordering: client.OrderingContinue},
	}
}

func TestPoolGolden(t *testing.T) {
	t.Parallel()
	golden(t, "pools.json", renderJSON(t, []poolJSON{newPoolJSON(fullPool()), newPoolJSON(defaultPool())}))
	for name, p := range map[string]*client.Pool{"pool_full.txt": fullPool(), "pool_default.txt": defaultPool()} {
		var buf bytes.Buffer
		require.NoError(t, writePoolText(&buf, p))
		golden(t, name, buf.Bytes())
	}
	golden(t, "workers.json", renderJSON(t, []workerJSON{
		newWorkerJSON(client.WorkerInfo{ID: "w1", Pool: "billing", Labels: map[string]string{"zone": "eu"}, Slots: 4, Busy: 3,
			Node: "node-1", LastSeen: t0}),
		newWorkerJSON(client.WorkerInfo{ID: "w2", Pool: "billing", Slots: 4, Node: "node-1"}),
	}))
}

// TestPoolJSONShape checks the contract on the decoded objects,
// independently of the golden files.
func TestPoolJSONShape(t *testing.T) {
	t.Parallel()
	decode := func(v any) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(renderJSON(t, v), &m))
		return m
	}
	full := decode(newPoolJSON(fullPool()))
	for _, f := range []string{"pool", "counts", "oldest_queued_age_s", "workers", "slots", "running", "parked", "paused",
		"limits", "replicated", "blocked_lanes", "lanes", "waiting", "desired_slots"} {
		require.Contains(t, full, f)
	}
	require.Equal(t, 91.235, full["oldest_queued_age_s"], "seconds, to the millisecond")
	counts := full["counts"].(map[string]any)
	require.Len(t, counts, len(statuses), "every status")
	require.EqualValues(t, 12, counts["queued"])
	require.EqualValues(t, 0, counts["blocked"])
	limits := full["limits"].(map[string]any)
	require.Equal(t, map[string]any{"high": 50.0, "low": 10.0}, limits["max_pending_per_class"])
	require.Equal(t, []any{map[string]any{"kind": "fetch", "rate": 0.5, "burst": 0.0}, map[string]any{"kind": "send", "rate": 1.0, "burst": 2.0}},
		limits["kind_rates"])
	require.EqualValues(t, 3, limits["concurrency_key_limit"])
	require.Equal(t, map[string]any{"initial_s": 1.0, "max_s": 60.0, "jitter": 0.1}, limits["backoff"])
	require.EqualValues(t, 45, limits["lease_grace_s"])

	def := decode(newPoolJSON(defaultPool()))
	require.Contains(t, def, "oldest_queued_age_s")
	require.Nil(t, def["oldest_queued_age_s"], "null when nothing is queued")
	require.NotContains(t, def, "blocked_lanes")
	require.Equal(t, map[string]any{
		"max_running": 0.0, "max_pending": 0.0, "overflow": "reject", "rate": 0.0, "burst": 0.0,
		"concurrency_key_limit": 0.0, "ordering": "continue", "max_attempts": 0.0,
	}, def["limits"])

	// Queued tasks that are not a second old yet: 0, not null.
	fresh := defaultPool()
	fresh.Counts[client.StatusQueued] = 1
	require.Equal(t, 0.0, decode(newPoolJSON(fresh))["oldest_queued_age_s"])

	w := decode(newWorkerJSON(client.WorkerInfo{ID: "w"}))
	require.Equal(t, map[string]any{"id": "w", "pool": "", "labels": map[string]any{}, "slots": 0.0, "busy": 0.0, "node": "",
		"last_seen": nil}, w)
}

// startFrozenFake starts a fake cluster whose clock stays at fakeNow.
func startFrozenFake(t *testing.T, opts ...clienttest.Option) (*clienttest.Cluster, string) {
	t.Helper()
	return startFake(t, append([]clienttest.Option{clienttest.WithClock(func() time.Time { return fakeNow })}, opts...)...)
}

// queuedSince is a queued task of pool submitted d before fakeNow.
func queuedSince(id, pool string, d time.Duration) *cronoqv1.Task {
	at := timestamppb.New(fakeNow.Add(-d))
	return &cronoqv1.Task{Id: id, Template: &cronoqv1.TaskTemplate{Pool: pool, Kind: "k"}, Status: cronoqv1.Status_STATUS_QUEUED,
		SubmittedAt: at, RunAt: at}
}

func TestPools(t *testing.T) {
	t.Parallel()
	f, addr := startFrozenFake(t)
	r := runCLI(t, "", "pools", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "no pools\n", r.stdout)
	r = runCLI(t, "", "pools", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.Equal(t, "[]\n", r.stdout)

	f.PutTask(queuedSince("T1", "a", 90*time.Second))
	f.PutTask(queuedSince("T2", "a", 30*time.Second))
	f.PutTask(doneTask("T3", cronoqv1.Status_STATUS_SUCCEEDED, "", ""))
	r = runCLI(t, "", "pool", "pause", "b", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "pool b paused\n", r.stdout)

	r = runCLI(t, "", "pools", "-addr", addr, "-o", "json")
	requireOK(t, r)
	var pools []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pools))
	require.Len(t, pools, 3)
	require.Equal(t, "a", pools[0]["pool"])
	require.EqualValues(t, 90, pools[0]["oldest_queued_age_s"])
	require.EqualValues(t, 2, pools[0]["counts"].(map[string]any)["queued"])
	require.Equal(t, false, pools[0]["replicated"])
	require.Equal(t, "b", pools[1]["pool"])
	require.Nil(t, pools[1]["oldest_queued_age_s"])
	require.Equal(t, true, pools[1]["paused"])
	require.Equal(t, true, pools[1]["replicated"])
	require.Equal(t, "p", pools[2]["pool"])
	require.EqualValues(t, 1, pools[2]["counts"].(map[string]any)["succeeded"])

	r = runCLI(t, "", "pools", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"POOL  QUEUED  RUNNING  PARKED  WAITING  OLDEST QUEUED  WORKERS  SLOTS  DESIRED  PAUSED\n"+
		"a     2       0        0       0        1m30s          0        0      2        no\n"+
		"b     0       0        0       0        -              0        0      0        yes\n"+
		"p     0       0        0       0        -              0        0      0        no\n", r.stdout)

	r = runCLI(t, "", "pool", "show", "a", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{
		"pool": "a",
		"counts": {"blocked": 0, "scheduled": 0, "queued": 2, "parked": 0, "running": 0, "retrying": 0,
			"succeeded": 0, "failed": 0, "cancelled": 0, "expired": 0},
		"oldest_queued_age_s": 90, "workers": 0, "slots": 0, "running": 0, "parked": 0, "paused": false,
		"limits": {"max_running": 0, "max_pending": 0, "overflow": "reject", "rate": 0, "burst": 0,
			"concurrency_key_limit": 0, "ordering": "continue", "max_attempts": 0},
		"replicated": false, "lanes": 0, "waiting": 0, "desired_slots": 2
	}`, r.stdout)

	r = runCLI(t, "", "pool", "show", "-addr", addr, "a")
	requireOK(t, r)
	require.Contains(t, r.stdout, "pool:                  a\npaused:                no\ntasks:                 queued 2\noldest queued:         1m30s\n")

	r = runCLI(t, "", "pool", "resume", "b", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"pool": "b", "paused": false}`, r.stdout)
	r = runCLI(t, "", "pool", "pause", "b", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `{"pool": "b", "paused": true}`, r.stdout)
	r = runCLI(t, "", "pool", "resume", "b", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "pool b active\n", r.stdout)
}

func TestPoolSet(t *testing.T) {
	t.Parallel()
	f, addr := startFrozenFake(t)
	r := runCLI(t, "", "pool", "set", "p", "-addr", addr, "-o", "json",
		"-max-running", "4", "-max-pending", "100", "-max-pending-high", "50", "-max-pending-low", "10",
		"-overflow", "park", "-rate", "2.5", "-burst", "5", "-kind-rate", "send=1:2", "-kind-rate", "fetch=0.5",
		"-concurrency-key-limit", "3", "-ordering", "block", "-max-attempts", "7", "-backoff", "1s:1m:0.1",
		"-lease-grace", "45s")
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, true, m["replicated"])
	require.Equal(t, map[string]any{
		"max_running": 4.0, "max_pending": 100.0, "max_pending_per_class": map[string]any{"high": 50.0, "low": 10.0},
		"overflow": "park", "rate": 2.5, "burst": 5.0,
		"kind_rates":            []any{map[string]any{"kind": "fetch", "rate": 0.5, "burst": 0.0}, map[string]any{"kind": "send", "rate": 1.0, "burst": 2.0}},
		"concurrency_key_limit": 3.0, "ordering": "block", "max_attempts": 7.0,
		"backoff":       map[string]any{"initial_s": 1.0, "max_s": 60.0, "jitter": 0.1},
		"lease_grace_s": 45.0,
	}, m["limits"])
	req := f.Requests(cronoqv1connect.PoolServiceSetProcedure)[0].(*cronoqv1.SetPoolRequest)
	require.Equal(t, "p", req.GetPool())
	require.Equal(t, map[string]int64{"high": 50, "low": 10}, req.GetMaxPendingPerClass())
	require.Equal(t, 45*time.Second, req.GetLeaseGrace().AsDuration())

	// Only the flags given are sent; zero values are sent as given.
	r = runCLI(t, "", "pool", "set", "p", "-addr", addr, "-max-running", "0", "-backoff", "default", "-lease-grace", "0s",
		"-kind-rate", "send=0")
	requireOK(t, r)
	require.Contains(t, r.stdout, "max running:           none\n")
	require.Contains(t, r.stdout, "kind rates:            fetch 0.5/s\n")
	require.Contains(t, r.stdout, "backoff:               the cluster's default\n")
	require.Contains(t, r.stdout, "lease grace:           the cluster's default\n")
	require.Contains(t, r.stdout, "max pending:           100 (high 50, low 10)\n")
	req = f.Requests(cronoqv1connect.PoolServiceSetProcedure)[1].(*cronoqv1.SetPoolRequest)
	require.NotNil(t, req.MaxRunning)
	require.Zero(t, req.GetMaxRunning())
	require.NotNil(t, req.GetBackoff())
	require.NotNil(t, req.GetLeaseGrace())
	require.Nil(t, req.MaxPending)
	require.Nil(t, req.Overflow)
	require.Nil(t, req.Rate)
	require.Nil(t, req.Burst)
	require.Nil(t, req.ConcurrencyLimit)
	require.Nil(t, req.Ordering)
	require.Nil(t, req.MaxAttempts)
	require.Nil(t, req.Paused)
	require.Empty(t, req.GetMaxPendingPerClass())

	// Refusals by the cluster name the flag.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-rate", "0.0001"}, "invalid -rate: 0.0001: want 0 (none) or a rate in"},
		{[]string{"-kind-rate", "k=1e12"}, "invalid -kind-rate: 1e+12: want 0 (none)"},
		{[]string{"-burst", "99999999"}, "invalid -burst: burst 99999999: want 0 to"},
	} {
		r = runCLI(t, "", append([]string{"pool", "set", "p", "-addr", addr}, tc.args...)...)
		requireFailure(t, r, exitUsage, tc.want)
	}
	require.Len(t, f.Requests(cronoqv1connect.PoolServiceSetProcedure), 5)
}

func TestPoolRefusedPool(t *testing.T) {
	t.Parallel()
	_, addr := startFake(t, clienttest.WithPools("p"))
	for _, args := range [][]string{
		{"pool", "set", "nope", "-max-running", "1"},
		{"pool", "show", "nope"},
		{"pool", "pause", "nope"},
	} {
		r := runCLI(t, "", append(args, "-addr", addr)...)
		requireFailure(t, r, exitUsage, `invalid POOL: unknown pool "nope"`)
	}
}

func TestPoolLocalValidation(t *testing.T) {
	// A command that wrongly passed validation must not reach a node.
	t.Setenv("CRONOQ_ADDR", closedAddr)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"pools positional", []string{"pools", "x"}, []string{`unexpected argument "x"`}},
		{"pool nothing", []string{"pool"}, []string{"missing command after 'cronoq pool'"}},
		{"pool unknown", []string{"pool", "drain", "p"}, []string{`unknown command "pool drain"`}},
		{"show without pool", []string{"pool", "show"}, []string{"missing argument (usage: cronoq pool show POOL)"}},
		{"show empty pool", []string{"pool", "show", ""}, []string{"empty POOL"}},
		{"pause two pools", []string{"pool", "pause", "a", "b"}, []string{`unexpected argument "b"`}},
		{"set nothing", []string{"pool", "set", "p"}, []string{"nothing to change: give at least one setting flag"}},
		{"set only output", []string{"pool", "set", "p", "-o", "json"}, []string{"nothing to change"}},
		{"set without pool", []string{"pool", "set", "-max-running", "1"}, []string{"missing argument"}},
		{"set negative", []string{"pool", "set", "p", "-max-running", "-1"}, []string{"flag -max-running: must not be negative"}},
		{"set not a number", []string{"pool", "set", "p", "-max-pending", "lots"}, []string{"flag -max-pending: not an integer"}},
		{"set class", []string{"pool", "set", "p", "-max-pending-normal", "x"}, []string{"flag -max-pending-normal: not an integer"}},
		{"set overflow", []string{"pool", "set", "p", "-overflow", "drop"}, []string{"flag -overflow: must be one of reject, wait, park"}},
		{"set ordering", []string{"pool", "set", "p", "-ordering", "strict"}, []string{"flag -ordering: must be one of continue, block"}},
		{"set rate", []string{"pool", "set", "p", "-rate", "-1"}, []string{"flag -rate: must not be negative"}},
		{"set rate nan", []string{"pool", "set", "p", "-rate", "NaN"}, []string{"flag -rate: not a number"}},
		{"set kind rate", []string{"pool", "set", "p", "-kind-rate", "send"}, []string{"flag -kind-rate: want KIND=R[:BURST]"}},
		{"set kind rate empty kind", []string{"pool", "set", "p", "-kind-rate", "=1"}, []string{"flag -kind-rate: bad KIND"}},
		{"set kind rate bad rate", []string{"pool", "set", "p", "-kind-rate", "send=fast"}, []string{`flag -kind-rate: rate "fast" of kind "send": not a number`}},
		{"set kind rate bad burst", []string{"pool", "set", "p", "-kind-rate", "send=1:-2"}, []string{`burst "-2" of kind "send": must not be negative`}},
		{"set kind rate twice", []string{"pool", "set", "p", "-kind-rate", "send=1", "-kind-rate", "send=2"}, []string{`kind "send" given twice`}},
		{"set key limit", []string{"pool", "set", "p", "-concurrency-key-limit", "-3"}, []string{"flag -concurrency-key-limit: must not be negative"}},
		{"set max attempts", []string{"pool", "set", "p", "-max-attempts", "-1"}, []string{"flag -max-attempts: must be at least 0"}},
		{"set backoff", []string{"pool", "set", "p", "-backoff", "soon"}, []string{`flag -backoff: INITIAL "soon": want a positive duration`}},
		{"set backoff max", []string{"pool", "set", "p", "-backoff", "1m:1s"}, []string{`flag -backoff: MAX "1s": want a duration of at least INITIAL 1m0s`}},
		{"set backoff jitter", []string{"pool", "set", "p", "-backoff", "1s:1m:1"}, []string{`flag -backoff: JITTER "1": want a fraction in [0, 1)`}},
		{"set backoff parts", []string{"pool", "set", "p", "-backoff", "1s:2s:0.1:4"}, []string{"flag -backoff: want INITIAL[:MAX[:JITTER]]"}},
		{"set lease grace", []string{"pool", "set", "p", "-lease-grace", "-1s"}, []string{"flag -lease-grace: must not be negative"}},
		{"workers positional", []string{"workers", "p"}, []string{`unexpected argument "p"`}},
		{"workers empty pool", []string{"workers", "-pool", ""}, []string{"empty -pool"}},
		{"delete without id", []string{"delete"}, []string{"missing task ID (or -key KEY)"}},
		{"delete id and key", []string{"delete", "T1", "-key", "k"}, []string{"give a task ID or -key, not both"}},
		{"delete two ids", []string{"delete", "T1", "T2"}, []string{`unexpected argument "T2"`}},
		{"submit workflow keys", []string{"recurring", "add", "n", "-cron", "@daily", "-workflow", "x.json", "-ordering-key", "k"},
			[]string{"-workflow and -ordering-key exclude each other"}},
		{"list bad status", []string{"list", "-status", "parkd"}, []string{`unknown status "parkd": must be one of blocked, scheduled, queued, parked,`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireFailure(t, runCLI(t, "", tc.args...), exitUsage, tc.want...)
		})
	}
}

func TestWorkers(t *testing.T) {
	t.Parallel()
	f, addr := startFrozenFake(t)
	r := runCLI(t, "", "workers", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "no workers\n", r.stdout)

	cl, err := client.New(f.Addrs())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	for _, w := range []client.WorkerConfig{
		{Pool: "p", ID: "w1", Concurrency: 2, Labels: map[string]string{"zone": "eu", "gpu": "yes"}},
		{Pool: "q", ID: "w2", Concurrency: 1},
	} {
		w.Handlers = map[string]client.Handler{"k": client.HandlerFunc(func(context.Context, *client.Job) ([]byte, error) { return nil, nil })}
		worker, err := cl.NewWorker(w)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = worker.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
	}
	f.WaitUntil("both workers poll", func() bool { return len(f.Workers().Polls) >= 2 })

	r = runCLI(t, "", "workers", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.JSONEq(t, `[
		{"id": "w1", "pool": "p", "labels": {"gpu": "yes", "zone": "eu"}, "slots": 2, "busy": 0, "node": "node0",
		 "last_seen": "2030-01-02T12:00:00Z"},
		{"id": "w2", "pool": "q", "labels": {}, "slots": 1, "busy": 0, "node": "node0", "last_seen": "2030-01-02T12:00:00Z"}
	]`, r.stdout)

	r = runCLI(t, "", "workers", "-pool", "q", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"ID  POOL  SLOTS  BUSY  NODE   LAST SEEN             LABELS\n"+
		"w2  q     1      0     node0  2030-01-02T12:00:00Z  -\n", r.stdout)
	req := f.Requests(cronoqv1connect.PoolServiceWorkersProcedure)
	require.Equal(t, "q", req[len(req)-1].(*cronoqv1.ListWorkersRequest).GetPool())

	r = runCLI(t, "", "pool", "show", "p", "-addr", addr, "-o", "json")
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.EqualValues(t, 1, m["workers"])
	require.EqualValues(t, 2, m["slots"])
}

func TestDelete(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	f.PutTask(doneTask("T1", cronoqv1.Status_STATUS_FAILED, "", "boom"))
	f.PutTask(doneTask("T2", cronoqv1.Status_STATUS_SUCCEEDED, "", ""))
	f.PutTask(&cronoqv1.Task{Id: "T3", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, Status: cronoqv1.Status_STATUS_RUNNING})

	r := runCLI(t, "", "delete", "T1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"id": "T1", "deleted": true}`, r.stdout)
	require.Nil(t, f.Task("T1"))

	r = runCLI(t, "", "delete", "-key", "key-T2", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "task T2 deleted\n", r.stdout)
	require.Nil(t, f.Task("T2"))

	r = runCLI(t, "", "delete", "T1", "-addr", addr)
	requireFailure(t, r, exitError, "task T1 not found")
	r = runCLI(t, "", "delete", "-key", "nokey", "-addr", addr)
	requireFailure(t, r, exitError, `no task with key "nokey"`)

	r = runCLI(t, "", "delete", "T3", "-addr", addr)
	requireFailure(t, r, exitUsage, "task T3 is running: only an ended task can be deleted (cancel it first)")
	require.NotNil(t, f.Task("T3"))
}

func TestSubmitKeysAndParked(t *testing.T) {
	t.Parallel()
	f, addr := startFake(t)
	r := runCLI(t, "", "submit", "-pool", "p", "-kind", "k", "-ordering-key", "acct-1", "-concurrency-key", "tenant-2",
		"-addr", addr, "-o", "json")
	requireOK(t, r)
	tpl := f.Submits()[0].GetTemplate()
	require.Equal(t, "acct-1", tpl.GetOrderingKey())
	require.Equal(t, "tenant-2", tpl.GetConcurrencyKey())
	id := decodeObject(t, r.stdout)["id"].(string)

	r = runCLI(t, "", "status", id, "-addr", addr, "-o", "json")
	requireOK(t, r)
	m := decodeObject(t, r.stdout)
	require.Equal(t, "acct-1", m["ordering_key"])
	require.Equal(t, "tenant-2", m["concurrency_key"])
	require.NotContains(t, m, "blocks_lane")

	f.PutTask(&cronoqv1.Task{Id: "T9", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k", OrderingKey: "acct-1"},
		Status: cronoqv1.Status_STATUS_FAILED, BlocksLane: true})
	r = runCLI(t, "", "status", "T9", "-addr", addr, "-o", "json")
	requireOK(t, r)
	require.Equal(t, true, decodeObject(t, r.stdout)["blocks_lane"])
	r = runCLI(t, "", "status", "T9", "-addr", addr)
	requireOK(t, r)
	require.Contains(t, r.stdout, "blocks lane:  yes (its lane waits until it is retried or deleted: cronoq retry, cronoq delete)\n")

	f.PutTask(&cronoqv1.Task{Id: "T8", Template: &cronoqv1.TaskTemplate{Pool: "p", Kind: "k"}, Status: cronoqv1.Status_STATUS_PARKED})
	r = runCLI(t, "", "list", "-status", "parked", "-addr", addr, "-o", "json")
	requireOK(t, r)
	var list struct {
		Tasks []map[string]any `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list.Tasks, 1)
	require.Equal(t, "T8", list.Tasks[0]["id"])
	require.Equal(t, "parked", list.Tasks[0]["status"])

	r = runCLI(t, "", "recurring", "add", "n", "-cron", "@hourly", "-pool", "p", "-kind", "k", "-ordering-key", "nightly",
		"-concurrency-key", "db", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "nightly", f.Schedule("n").GetTask().GetOrderingKey())
	require.Equal(t, "db", f.Schedule("n").GetTask().GetConcurrencyKey())
}

func TestPoolCommandsHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		usage string
		flags []string
		about []string
	}{
		{[]string{"pools", "-h"}, "cronoq pools", []string{"-addr", "-o"}, []string{`"oldest_queued_age_s": SECONDS,  (null when no task is queued)`}},
		{[]string{"pool", "-h"}, "cronoq pool <command>", []string{"show", "set", "pause", "resume"}, nil},
		{[]string{"pool", "show", "-h"}, "cronoq pool show POOL", []string{"-addr", "-o"}, []string{"JSON output: the pool object."}},
		{[]string{"help", "pool", "set"}, "cronoq pool set POOL [flags]", []string{"-max-running", "-max-pending", "-max-pending-high",
			"-max-pending-normal", "-max-pending-low", "-overflow", "-rate", "-burst", "-kind-rate", "-concurrency-key-limit",
			"-ordering", "-max-attempts", "-backoff", "-lease-grace"}, []string{"JSON output: the pool object after the change."}},
		{[]string{"pool", "pause", "-h"}, "cronoq pool pause POOL", nil, []string{`{"pool": "...", "paused": true}`}},
		{[]string{"pool", "resume", "-h"}, "cronoq pool resume POOL", nil, []string{`{"pool": "...", "paused": false}`}},
		{[]string{"workers", "-h"}, "cronoq workers [-pool P]", []string{"-pool"}, []string{`"last_seen": RFC3339`}},
		{[]string{"delete", "-h"}, "cronoq delete ID", []string{"-key"}, []string{`{"id": "...", "deleted": true|false}`}},
		{[]string{"submit", "-h"}, "cronoq submit", []string{"-ordering-key", "-concurrency-key"}, nil},
		{[]string{"recurring", "add", "-h"}, "cronoq recurring add", []string{"-ordering-key", "-concurrency-key"}, nil},
		{[]string{"list", "-h"}, "cronoq list", nil, []string{"parked"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", tc.args...)
			requireOK(t, r)
			require.True(t, strings.HasPrefix(r.stdout, "Usage: "+tc.usage), "got %q", r.stdout)
			for _, f := range tc.flags {
				require.Regexp(t, `(?m)^  `+f+`( |$)`, r.stdout)
			}
			for _, a := range tc.about {
				require.Contains(t, r.stdout, a)
			}
		})
	}
}
