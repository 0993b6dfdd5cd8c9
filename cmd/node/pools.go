package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronoq/cronoq/client"
)

// The pools, pool and workers commands: what the leader says of pools and
// the workers serving them, and the settings of a pool.

func init() {
	register("pools", command{Summary: "List the pools: tasks by status, workers, limits", Run: runPools})
	register("pool", command{Summary: "Show and change a pool: show, set, pause, resume", Run: runPool})
	register("workers", command{Summary: "List the workers connected to the leader", Run: runWorkers})
}

// poolCommands are the subcommands of `cronoq pool`.
var poolCommands = map[string]command{
	"show":   {Summary: "Show a pool: its tasks, workers and settings", Run: runPoolShow},
	"set":    {Summary: "Change the settings of a pool", Run: runPoolSet},
	"pause":  {Summary: "Pause a pool (it accepts tasks but dispatches none until resumed)", Run: runPoolPause},
	"resume": {Summary: "Resume a paused pool", Run: runPoolResume},
}

func runPool(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq pool", poolCommands, args)
}

// poolObjectHelp describes the pool object, for the help of the commands
// that print it.
const poolObjectHelp = `The pool object:

  {"pool": "NAME",
   "counts": {"queued": N, "running": N, ...},  (every status, 0 included)
   "oldest_queued_age_s": SECONDS,  (null when no task is queued)
   "workers": N, "slots": N,  (connected workers, the attempts they can run)
   "running": N, "parked": N, "paused": false,
   "limits": {"max_running": N, "max_pending": N,
              "max_pending_per_class": {"high": N, ...},  (when any)
              "overflow": "reject|wait|park", "rate": R, "burst": N,
              "kind_rates": [{"kind", "rate", "burst"}...],  (when any)
              "concurrency_key_limit": N, "ordering": "continue|block",
              "max_attempts": N,
              "backoff": {"initial_s", "max_s", "jitter"},  (when set)
              "lease_grace_s": SECONDS},  (when set)
   "replicated": true|false,  (settings set by an operator)
   "blocked_lanes": ["ORDERING KEY"...],  (when any)
   "lanes": N, "waiting": N,
   "desired_slots": N}  (the autoscaling signal: running and ready queued
                         tasks, at most max_running)

Zero limits mean none; max_attempts 0 means the cluster's default.`

func runPools(ctx context.Context, s stdio, args []string) error {
	c := newCmd("pools", "cronoq pools", `
List the pools the leader knows (those with tasks, settings or workers, and
those of the agent's fixed list) with their tasks by status, the age of their
oldest queued task, their workers and their settings, and the slots each could
use now (DESIRED: running and ready queued tasks, at most max_running), the
signal to scale its workers by (docs/operations.md#autoscaling-workers).

JSON output: [pool object...]

`+poolObjectHelp)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	pools, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]client.Pool, error) { return cl.ListPools(ctx) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		out := make([]poolJSON, 0, len(pools))
		for i := range pools {
			out = append(out, newPoolJSON(&pools[i]))
		}
		return writeJSON(s.Stdout, out)
	}
	if len(pools) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no pools")
		return err
	}
	tb := newTable(s.Stdout, "POOL", "QUEUED", "RUNNING", "PARKED", "WAITING", "OLDEST QUEUED", "WORKERS", "SLOTS", "DESIRED", "PAUSED")
	for _, p := range pools {
		tb.row(p.Name, count(p.Counts[client.StatusQueued]), count(p.Running), count(p.Parked), count(p.Waiting),
			ageText(&p), count(p.Workers), count(p.Slots), count(p.DesiredSlots), yesNo(p.Paused))
	}
	return tb.flush()
}

func runPoolShow(ctx context.Context, s stdio, args []string) error {
	c := newCmd("pool show", "cronoq pool show POOL", `
Show a pool: its tasks by status, the age of its oldest queued task, its
workers, its ordering lanes and its settings. A pool without tasks or
settings is shown with the settings it would get.

JSON output: the pool object.

`+poolObjectHelp)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	name, err := poolArg(c)
	if err != nil {
		return err
	}
	p, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Pool, error) { return cl.GetPool(ctx, name) })
	if err != nil {
		return err
	}
	return showPool(s, cf, p)
}

// poolArg reads the POOL argument and words the cluster's refusal of it.
func poolArg(c *cmd) (string, error) {
	name := c.args[0]
	if name == "" {
		return "", c.usageErr("empty POOL")
	}
	c.explain = explainPoolField
	return name, nil
}

// explainPoolField words the refusal of a field of a pool change for the
// flags of `pool set` that do not share its name.
func explainPoolField(field, reason string) string {
	var name string
	switch {
	case field == "pool":
		return "invalid POOL: " + reason
	case field == "rate" && strings.HasPrefix(reason, "burst "):
		// The node checks the burst with the rate.
		name = "-burst"
	case field == "max_pending_per_class":
		name = "-max-pending-high/-normal/-low"
	case field == "concurrency_limit":
		name = "-concurrency-key-limit"
	case strings.HasPrefix(field, "kind_rates"):
		name = "-kind-rate"
	case strings.HasPrefix(field, "backoff"):
		name = "-backoff"
	default:
		return ""
	}
	return fmt.Sprintf("invalid %s: %s", name, reason)
}

func showPool(s stdio, cf *clientFlags, p *client.Pool) error {
	if cf.out.json() {
		return writeJSON(s.Stdout, newPoolJSON(p))
	}
	return writePoolText(s.Stdout, p)
}

func runPoolSet(ctx context.Context, s stdio, args []string) error {
	c := newCmd("pool set", "cronoq pool set POOL [flags]", `
Change the settings of a pool: only the flags given change, the others keep
their values. The change is replicated: every node keeps it and every later
leader applies it. A bad value is refused and nothing changes.

Zero limits mean none: -max-running 0 lifts the cap on running attempts,
-max-pending 0 the pending bound, -rate 0 the rate limit. -max-attempts 0,
-backoff default and -lease-grace 0 restore the cluster's defaults.

-overflow is what a submit beyond the pending bound does: reject it (reject),
hold it until there is room (wait), or accept the task as parked, to be
queued when there is room (park).

-kind-rate KIND=R[:BURST] (repeatable) limits the dispatches of the tasks of
one kind to R per second, in bursts of up to BURST; a rate of 0 removes the
kind's limit. -concurrency-key-limit caps the running tasks of one
concurrency key (submit -concurrency-key; 0 means 1). -ordering is what an
ordering lane (submit -ordering-key) does when a task ends without
succeeding: run on (continue), or wait until that task is deleted (block).

-backoff INITIAL[:MAX[:JITTER]] is the retry backoff of the pool's tasks
that set none: INITIAL doubled at each failed attempt, capped at MAX, spread
by +-JITTER (a fraction in [0, 1)); for example 1s:5m:0.2.

JSON output: the pool object after the change.

`+poolObjectHelp)
	cf := c.clientFlags()
	var ch client.PoolChange
	var (
		maxRunning, maxPending, burst, keyLimit int64
		perClass                                [3]int64
		overflow, ordering                      string
		rate                                    float64
		kindRates                               []client.KindRate
		maxAttempts                             int
		backoff                                 client.Backoff
		leaseGrace                              time.Duration
	)
	c.fs.Var(int64Value{&maxRunning}, "max-running", "cap the attempts running at once across the pool's workers at `N` (0 = no cap)")
	c.fs.Var(int64Value{&maxPending}, "max-pending", "bound the pending tasks (blocked, scheduled, queued, retrying) at `N` (0 = no bound)")
	classes := []string{client.PriorityHigh, client.PriorityNormal, client.PriorityLow}
	for i, cl := range classes {
		c.fs.Var(int64Value{&perClass[i]}, "max-pending-"+cl, "bound the pending tasks of priority "+cl+" at `N` (0 = no bound)")
	}
	c.fs.Var(enumValue{&overflow, []string{client.OverflowReject, client.OverflowWait, client.OverflowPark}}, "overflow",
		"what a submit beyond the pending bound does (`POLICY`): reject, wait or park")
	c.fs.Var(floatValue{&rate}, "rate", "dispatch at most `R` tasks per second (0 = no limit)")
	c.fs.Var(int64Value{&burst}, "burst", "with -rate, dispatch bursts of up to `N` tasks")
	c.fs.Var(kindRateList{&kindRates}, "kind-rate", "limit the tasks of a kind: `KIND=R[:BURST]` per second (repeatable; R 0 removes the limit)")
	c.fs.Var(int64Value{&keyLimit}, "concurrency-key-limit", "run at most `N` tasks of one concurrency key at once (0 = 1)")
	c.fs.Var(enumValue{&ordering, []string{client.OrderingContinue, client.OrderingBlock}}, "ordering",
		"what a lane does when a task ends without succeeding (`POLICY`): continue or block")
	c.fs.Var(intValue{&maxAttempts, 0}, "max-attempts", "default attempts of the pool's tasks (`N`, 0 = the cluster's)")
	c.fs.Var(backoffValue{&backoff}, "backoff", "default retry backoff of the pool's tasks: `INITIAL[:MAX[:JITTER]]`, or default")
	c.fs.Var(durationValue{&leaseGrace, false}, "lease-grace", "how long running attempts have to report to a new leader (`DUR`, 0 = the cluster's)")
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	name, err := poolArg(c)
	if err != nil {
		return err
	}
	n := 0
	c.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "addr", "o", "rpc-timeout":
			return
		}
		n++
		switch f.Name {
		case "max-running":
			ch.MaxRunning = &maxRunning
		case "max-pending":
			ch.MaxPending = &maxPending
		case "overflow":
			ch.Overflow = &overflow
		case "rate":
			ch.Rate = &rate
		case "burst":
			ch.Burst = &burst
		case "kind-rate":
			ch.KindRates = kindRates
		case "concurrency-key-limit":
			ch.ConcurrencyLimit = &keyLimit
		case "ordering":
			ch.Ordering = &ordering
		case "max-attempts":
			ch.MaxAttempts = &maxAttempts
		case "backoff":
			ch.Backoff = &backoff
		case "lease-grace":
			ch.LeaseGrace = &leaseGrace
		}
		for i, cl := range classes {
			if f.Name == "max-pending-"+cl {
				if ch.MaxPendingPerClass == nil {
					ch.MaxPendingPerClass = map[string]int64{}
				}
				ch.MaxPendingPerClass[cl] = perClass[i]
			}
		}
	})
	if n == 0 {
		return c.usageErr("nothing to change: give at least one setting flag")
	}
	p, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Pool, error) { return cl.SetPool(ctx, name, ch) })
	if err != nil {
		return err
	}
	return showPool(s, cf, p)
}

func runPoolPause(ctx context.Context, s stdio, args []string) error {
	return pausePool(ctx, s, args, true)
}

func runPoolResume(ctx context.Context, s stdio, args []string) error {
	return pausePool(ctx, s, args, false)
}

func pausePool(ctx context.Context, s stdio, args []string, pause bool) error {
	name, about := "resume", `
Resume a paused pool: its queued tasks are dispatched again.

JSON output: {"pool": "...", "paused": false}`
	if pause {
		name, about = "pause", `
Pause a pool: it still accepts tasks, but dispatches none to its workers until
resumed; attempts already running go on. The pause is replicated, like the
settings of 'cronoq pool set'.

JSON output: {"pool": "...", "paused": true}`
	}
	c := newCmd("pool "+name, "cronoq pool "+name+" POOL", about)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	pool, err := poolArg(c)
	if err != nil {
		return err
	}
	p, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Pool, error) {
		if pause {
			return cl.PausePool(ctx, pool)
		}
		return cl.ResumePool(ctx, pool)
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			Pool   string `json:"pool"`
			Paused bool   `json:"paused"`
		}{p.Name, p.Paused})
	}
	state := "active"
	if p.Paused {
		state = "paused"
	}
	_, err = fmt.Fprintf(s.Stdout, "pool %s %s\n", p.Name, state)
	return err
}

func runWorkers(ctx context.Context, s stdio, args []string) error {
	c := newCmd("workers", "cronoq workers [-pool P]", `
List the workers connected to the leader, of one pool or of every pool: the
capacity labels they offer, the attempts they can run at once ("slots", free
and busy) and run ("busy"), the node they are connected to, and when they
were last heard from.

JSON output: [{"id", "pool", "labels": {...}, "slots", "busy", "node",
"last_seen": RFC3339}...]`)
	cf := c.clientFlags()
	var pool string
	c.fs.StringVar(&pool, "pool", "", "only the workers of this `POOL`")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	if c.set("pool") && pool == "" {
		return c.usageErr("empty -pool")
	}
	workers, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]client.WorkerInfo, error) {
		return cl.ListWorkers(ctx, pool)
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		out := make([]workerJSON, 0, len(workers))
		for _, w := range workers {
			out = append(out, newWorkerJSON(w))
		}
		return writeJSON(s.Stdout, out)
	}
	if len(workers) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no workers")
		return err
	}
	tb := newTable(s.Stdout, "ID", "POOL", "SLOTS", "BUSY", "NODE", "LAST SEEN", "LABELS")
	for _, w := range workers {
		tb.row(w.ID, w.Pool, count(w.Slots), count(w.Busy), w.Node, textTime(w.LastSeen), textKVs(w.Labels))
	}
	return tb.flush()
}

// ---------------------------------------------------------------------------
// JSON

// poolJSON is the pool object (see poolObjectHelp).
type poolJSON struct {
	Pool   string           `json:"pool"`
	Counts map[string]int64 `json:"counts"`
	// OldestQueuedAgeS is null when no task is queued.
	OldestQueuedAgeS *float64       `json:"oldest_queued_age_s"`
	Workers          int64          `json:"workers"`
	Slots            int64          `json:"slots"`
	Running          int64          `json:"running"`
	Parked           int64          `json:"parked"`
	Paused           bool           `json:"paused"`
	Limits           poolLimitsJSON `json:"limits"`
	Replicated       bool           `json:"replicated"`
	BlockedLanes     []string       `json:"blocked_lanes,omitempty"`
	Lanes            int64          `json:"lanes"`
	Waiting          int64          `json:"waiting"`
	DesiredSlots     int64          `json:"desired_slots"`
}

type poolLimitsJSON struct {
	MaxRunning          int64            `json:"max_running"`
	MaxPending          int64            `json:"max_pending"`
	MaxPendingPerClass  map[string]int64 `json:"max_pending_per_class,omitempty"`
	Overflow            string           `json:"overflow"`
	Rate                float64          `json:"rate"`
	Burst               int64            `json:"burst"`
	KindRates           []kindRateJSON   `json:"kind_rates,omitempty"`
	ConcurrencyKeyLimit int64            `json:"concurrency_key_limit"`
	Ordering            string           `json:"ordering"`
	MaxAttempts         int              `json:"max_attempts"`
	Backoff             *backoffJSON     `json:"backoff,omitempty"`
	LeaseGraceS         float64          `json:"lease_grace_s,omitempty"`
}

type kindRateJSON struct {
	Kind  string  `json:"kind"`
	Rate  float64 `json:"rate"`
	Burst int64   `json:"burst"`
}

type backoffJSON struct {
	InitialS float64 `json:"initial_s"`
	MaxS     float64 `json:"max_s"`
	Jitter   float64 `json:"jitter"`
}

// seconds is d in seconds, to the millisecond.
func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// oldestQueued is the age of the pool's oldest queued task, false when none
// is queued.
func oldestQueued(p *client.Pool) (time.Duration, bool) {
	return p.OldestQueuedAge, p.OldestQueuedAge > 0 || p.Counts[client.StatusQueued] > 0
}

func newPoolJSON(p *client.Pool) poolJSON {
	counts := make(map[string]int64, len(statuses))
	for _, st := range statuses {
		counts[st] = 0
	}
	maps.Copy(counts, p.Counts)
	j := poolJSON{
		Pool:         p.Name,
		Counts:       counts,
		Workers:      p.Workers,
		Slots:        p.Slots,
		Running:      p.Running,
		Parked:       p.Parked,
		Paused:       p.Paused,
		Replicated:   p.Replicated,
		BlockedLanes: p.BlockedLanes,
		Lanes:        p.Lanes,
		Waiting:      p.Waiting,
		DesiredSlots: p.DesiredSlots,
	}
	if age, ok := oldestQueued(p); ok {
		j.OldestQueuedAgeS = new(seconds(age))
	}
	l := p.Limits
	j.Limits = poolLimitsJSON{
		MaxRunning:          l.MaxRunning,
		MaxPending:          l.MaxPending,
		MaxPendingPerClass:  l.MaxPendingPerClass,
		Overflow:            l.Overflow,
		Rate:                l.Rate,
		Burst:               l.Burst,
		ConcurrencyKeyLimit: l.ConcurrencyLimit,
		Ordering:            l.Ordering,
		MaxAttempts:         l.MaxAttempts,
		LeaseGraceS:         seconds(l.LeaseGrace),
	}
	for _, kr := range l.KindRates {
		j.Limits.KindRates = append(j.Limits.KindRates, kindRateJSON(kr))
	}
	if b := l.Backoff; b != nil && *b != (client.Backoff{}) {
		j.Limits.Backoff = &backoffJSON{InitialS: seconds(b.Initial), MaxS: seconds(b.Max), Jitter: b.Jitter}
	}
	return j
}

// workerJSON is one worker of `workers -o json`.
type workerJSON struct {
	ID       string            `json:"id"`
	Pool     string            `json:"pool"`
	Labels   map[string]string `json:"labels"`
	Slots    int64             `json:"slots"`
	Busy     int64             `json:"busy"`
	Node     string            `json:"node"`
	LastSeen *string           `json:"last_seen"`
}

func newWorkerJSON(w client.WorkerInfo) workerJSON {
	return workerJSON{
		ID:       w.ID,
		Pool:     w.Pool,
		Labels:   nonNil(w.Labels),
		Slots:    w.Slots,
		Busy:     w.Busy,
		Node:     w.Node,
		LastSeen: jsonTime(w.LastSeen),
	}
}

// ---------------------------------------------------------------------------
// Text

func count(n int64) string { return strconv.FormatInt(n, 10) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// ageText is the age of the pool's oldest queued task, to the second ("-"
// when none is queued).
func ageText(p *client.Pool) string {
	age, ok := oldestQueued(p)
	if !ok {
		return "-"
	}
	return age.Round(time.Second).String()
}

// writePoolText writes a pool as "field: value" lines.
func writePoolText(w io.Writer, p *client.Pool) error {
	l := p.Limits
	var counts []string
	for _, st := range statuses {
		if n := p.Counts[st]; n > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", st, n))
		}
	}
	for _, st := range slices.Sorted(maps.Keys(p.Counts)) {
		if n := p.Counts[st]; n > 0 && !slices.Contains(statuses, st) {
			counts = append(counts, fmt.Sprintf("%s %d", st, n))
		}
	}
	lanes := count(p.Lanes)
	if len(p.BlockedLanes) > 0 {
		lanes += " (blocked: " + strings.Join(p.BlockedLanes, ", ") + ")"
	}
	fields := []struct{ name, value string }{
		{"pool", p.Name},
		{"paused", yesNo(p.Paused)},
		{"tasks", orDefault(strings.Join(counts, ", "), "none")},
		{"oldest queued", ageText(p)},
		{"running", count(p.Running)},
		{"parked", count(p.Parked)},
		{"waiting", count(p.Waiting)},
		{"lanes", lanes},
		{"workers", fmt.Sprintf("%d (%d slots)", p.Workers, p.Slots)},
		{"desired slots", count(p.DesiredSlots)},
		{"settings", settingsText(p.Replicated)},
		{"max running", limitText(l.MaxRunning)},
		{"max pending", maxPendingText(l)},
		{"overflow", dash(l.Overflow)},
		{"rate", rateText(l.Rate, l.Burst)},
		{"kind rates", kindRatesText(l.KindRates)},
		{"concurrency key limit", keyLimitText(l.ConcurrencyLimit)},
		{"ordering", dash(l.Ordering)},
		{"max attempts", defaultText(l.MaxAttempts == 0, strconv.Itoa(l.MaxAttempts))},
		{"backoff", backoffText(l.Backoff)},
		{"lease grace", defaultText(l.LeaseGrace == 0, l.LeaseGrace.String())},
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s:\t%s\n", f.name, oneLine(f.value))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// settingsText says where a pool's settings come from.
func settingsText(replicated bool) string {
	if replicated {
		return "set by an operator"
	}
	return "the agent's defaults"
}

func limitText(n int64) string {
	if n == 0 {
		return "none"
	}
	return count(n)
}

func defaultText(isDefault bool, s string) string {
	if isDefault {
		return "the cluster's default"
	}
	return s
}

func keyLimitText(n int64) string {
	if n == 0 {
		return "1 (default)"
	}
	return count(n)
}

func maxPendingText(l client.PoolLimits) string {
	s := limitText(l.MaxPending)
	var per []string
	for _, cl := range []string{client.PriorityHigh, client.PriorityNormal, client.PriorityLow} {
		if n := l.MaxPendingPerClass[cl]; n > 0 {
			per = append(per, fmt.Sprintf("%s %d", cl, n))
		}
	}
	if len(per) > 0 {
		s += " (" + strings.Join(per, ", ") + ")"
	}
	return s
}

func rateText(rate float64, burst int64) string {
	if rate == 0 {
		return "none"
	}
	s := strconv.FormatFloat(rate, 'g', -1, 64) + "/s"
	if burst > 0 {
		s += fmt.Sprintf(" (burst %d)", burst)
	}
	return s
}

func kindRatesText(rates []client.KindRate) string {
	if len(rates) == 0 {
		return "none"
	}
	out := make([]string, len(rates))
	for i, kr := range rates {
		out[i] = kr.Kind + " " + rateText(kr.Rate, kr.Burst)
	}
	return strings.Join(out, ", ")
}

func backoffText(b *client.Backoff) string {
	if b == nil || *b == (client.Backoff{}) {
		return "the cluster's default"
	}
	s := b.Initial.String() + " doubling"
	if b.Max > 0 {
		s += " up to " + b.Max.String()
	}
	if b.Jitter > 0 {
		s += ", +-" + strconv.FormatFloat(b.Jitter*100, 'g', -1, 64) + "%"
	}
	return s
}

// ---------------------------------------------------------------------------
// Flags

// int64Value is a non-negative int64 flag.
type int64Value struct{ n *int64 }

func (v int64Value) String() string {
	if v.n == nil || *v.n == 0 {
		return ""
	}
	return strconv.FormatInt(*v.n, 10)
}

func (v int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	if n < 0 {
		return errors.New("must not be negative")
	}
	*v.n = n
	return nil
}

// floatValue is a non-negative, finite number flag.
type floatValue struct{ f *float64 }

func (v floatValue) String() string {
	if v.f == nil || *v.f == 0 {
		return ""
	}
	return strconv.FormatFloat(*v.f, 'g', -1, 64)
}

func (v floatValue) Set(s string) error {
	f, err := parseRate(s)
	if err != nil {
		return err
	}
	*v.f = f
	return nil
}

// parseRate parses a non-negative, finite number.
func parseRate(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, errors.New("not a number")
	case f < 0:
		return 0, errors.New("must not be negative")
	}
	return f, nil
}

// kindRateList is the repeatable -kind-rate KIND=R[:BURST] flag.
type kindRateList struct{ list *[]client.KindRate }

func (v kindRateList) String() string {
	if v.list == nil {
		return ""
	}
	out := make([]string, len(*v.list))
	for i, kr := range *v.list {
		out[i] = fmt.Sprintf("%s=%s:%d", kr.Kind, strconv.FormatFloat(kr.Rate, 'g', -1, 64), kr.Burst)
	}
	return strings.Join(out, ",")
}

func (v kindRateList) Set(s string) error {
	kind, spec, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return errors.New("want KIND=R[:BURST]")
	case strings.TrimSpace(kind) == "" || kind != strings.TrimSpace(kind):
		return errors.New("bad KIND: empty or surrounded by spaces")
	}
	for _, kr := range *v.list {
		if kr.Kind == kind {
			return fmt.Errorf("kind %q given twice", kind)
		}
	}
	rs, bs, hasBurst := strings.Cut(spec, ":")
	rate, err := parseRate(rs)
	if err != nil {
		return fmt.Errorf("rate %q of kind %q: %w", rs, kind, err)
	}
	kr := client.KindRate{Kind: kind, Rate: rate}
	if hasBurst {
		if err := (int64Value{&kr.Burst}).Set(bs); err != nil {
			return fmt.Errorf("burst %q of kind %q: %w", bs, kind, err)
		}
	}
	*v.list = append(*v.list, kr)
	return nil
}

// backoffValue is the -backoff INITIAL[:MAX[:JITTER]] flag; "default" is
// the empty backoff, which restores the cluster's.
type backoffValue struct{ b *client.Backoff }

func (v backoffValue) String() string {
	if v.b == nil || *v.b == (client.Backoff{}) {
		return ""
	}
	s := v.b.Initial.String()
	if v.b.Max > 0 || v.b.Jitter > 0 {
		s += ":" + v.b.Max.String()
	}
	if v.b.Jitter > 0 {
		s += ":" + strconv.FormatFloat(v.b.Jitter, 'g', -1, 64)
	}
	return s
}

func (v backoffValue) Set(s string) error {
	if s == "default" {
		*v.b = client.Backoff{}
		return nil
	}
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return errors.New("want INITIAL[:MAX[:JITTER]] (example: 1s:5m:0.2) or default")
	}
	var b client.Backoff
	var err error
	if b.Initial, err = time.ParseDuration(parts[0]); err != nil || b.Initial <= 0 {
		return fmt.Errorf("INITIAL %q: want a positive duration (example: 1s)", parts[0])
	}
	if len(parts) > 1 && parts[1] != "" {
		if b.Max, err = time.ParseDuration(parts[1]); err != nil || b.Max < b.Initial {
			return fmt.Errorf("MAX %q: want a duration of at least INITIAL %s", parts[1], b.Initial)
		}
	}
	if len(parts) > 2 {
		b.Jitter, err = strconv.ParseFloat(parts[2], 64)
		if err != nil || !(b.Jitter >= 0 && b.Jitter < 1) {
			return fmt.Errorf("JITTER %q: want a fraction in [0, 1)", parts[2])
		}
	}
	*v.b = b
	return nil
}
