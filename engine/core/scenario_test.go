package core

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// TestScenarios runs the data-driven scenarios of testdata/. Regenerate the
// expected output with `go test ./engine/core -run TestScenarios -rewrite`
// and review the diff: the files are the specification.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newHarness(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

// TestScenariosDeterministic replays every scenario twice and requires
// byte-identical log entries and actions.
func TestScenariosDeterministic(t *testing.T) {
	files, err := filepath.Glob("testdata/*")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			var traces [2]string
			for i := range traces {
				h := newHarness(t)
				h.trace = &strings.Builder{}
				datadriven.RunTestFromString(t, string(data), func(t *testing.T, d *datadriven.TestData) string {
					h.run(t, d)
					return d.Expected
				})
				traces[i] = h.trace.String()
			}
			require.NotEmpty(t, traces[0])
			require.Equal(t, traces[0], traces[1])
		})
	}
}

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	t          testing.TB
	cfg        Config
	now        time.Time
	state      *fsm.State
	core       *Core
	epoch      uint64
	index      uint64
	autocommit bool
	pending    []Output // produced, not committed yet

	ids      map[string]string // real id -> t1 (tasks) or w1 (workflows)
	idsRev   map[string]string
	tasks    int // task names handed out
	wfs      int // workflow names handed out
	reqs     map[string]ReqID
	reqNames map[ReqID]string
	reqCmds  map[ReqID]string // the command that made each request
	nextReq  ReqID
	grants   map[string]uint64 // task -> last granted lease
	// consumers holds, per subscription, the cursor after which the
	// scenario's consumer reads next (see deliver).
	consumers map[string]uint64

	trace *strings.Builder // raw entries and actions, for the determinism test
	quiet bool             // print counts instead of every mutation and action
}

// summarize prints how many mutations and actions of each kind o holds.
func (h *harness) summarize(b *strings.Builder, o Output) {
	counts := map[string]int{}
	for _, m := range o.Mutations {
		kind, _, _ := strings.Cut(h.fmtMutation(m), " ")
		counts["mut "+kind]++
	}
	for _, line := range h.actions(o) {
		when, rest, _ := strings.Cut(line, " ")
		kind, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		counts[when+" "+kind]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "%s x%d\n", k, counts[k])
	}
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t}
}

func (h *harness) reset(cfg Config, autocommit bool) {
	h.cfg = cfg
	h.now = t0
	h.state = fsm.New()
	h.epoch = 1
	h.index = 0
	h.autocommit = autocommit
	h.pending = nil
	h.ids = map[string]string{}
	h.idsRev = map[string]string{}
	h.tasks, h.wfs = 0, 0
	h.reqs = map[string]ReqID{}
	h.reqNames = map[ReqID]string{}
	h.reqCmds = map[ReqID]string{}
	h.nextReq = 0
	h.grants = map[string]uint64{}
	h.consumers = map[string]uint64{}
	h.applyEntry(mustEncode(fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: 1, Leader: "n1", Time: fsm.InstantOf(t0)})))
	c, err := New(cfg, 1, t0)
	require.NoError(h.t, err)
	c.SetHolds(h.state)
	h.core = c
}

func mustEncode(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func (h *harness) applyEntry(data []byte) any {
	h.index++
	if h.trace != nil {
		fmt.Fprintf(h.trace, "entry %d %x\n", h.index, data)
	}
	return h.state.Apply(h.index, 1, data)
}

// ---------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------

func (h *harness) name(id string) string {
	if id == "" {
		return "-"
	}
	if n, ok := h.ids[id]; ok {
		return n
	}
	h.tasks++
	n := fmt.Sprintf("t%d", h.tasks)
	h.ids[id] = n
	h.idsRev[n] = id
	return n
}

// subst replaces the real ids in s (in messages) by their names.
func (h *harness) subst(s string) string {
	if !strings.Contains(s, "01") {
		return s
	}
	for id, n := range h.ids {
		s = strings.ReplaceAll(s, id, n)
	}
	return s
}

// wfName names a workflow id: w1, w2, ...
func (h *harness) wfName(id string) string {
	if id == "" {
		return "-"
	}
	if n, ok := h.ids[id]; ok {
		return n
	}
	h.wfs++
	n := fmt.Sprintf("w%d", h.wfs)
	h.ids[id] = n
	h.idsRev[n] = id
	return n
}

func (h *harness) names(ids []string) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = h.name(id)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

func (h *harness) realID(n string) string {
	if id, ok := h.idsRev[n]; ok {
		return id
	}
	return n // unknown names are passed through (to test not-found)
}

func (h *harness) req(d *datadriven.TestData) ReqID {
	var n string
	if d.HasArg("req") {
		d.ScanArgs(h.t, "req", &n)
		if r, ok := h.reqs[n]; ok {
			return r
		}
	}
	h.nextReq++
	if n == "" {
		n = fmt.Sprintf("r%d", h.nextReq)
	}
	h.reqs[n] = h.nextReq
	h.reqNames[h.nextReq] = n
	h.reqCmds[h.nextReq] = d.Cmd
	return h.nextReq
}

func (h *harness) reqName(r ReqID) string {
	if n, ok := h.reqNames[r]; ok {
		return n
	}
	return fmt.Sprintf("req%d", r)
}

func fmtLease(l uint64) string {
	if l == 0 {
		return "-"
	}
	return fmt.Sprintf("%d.%d", l>>32, l&(1<<32-1))
}

func (h *harness) parseLease(s string) uint64 {
	if strings.HasPrefix(s, "t") {
		l, ok := h.grants[h.realID(s)]
		require.True(h.t, ok, "no grant for %s", s)
		return l
	}
	e, c, ok := strings.Cut(s, ".")
	require.True(h.t, ok, "lease %q: want EPOCH.N or a task name", s)
	ep, err := strconv.ParseUint(e, 10, 32)
	require.NoError(h.t, err)
	n, err := strconv.ParseUint(c, 10, 32)
	require.NoError(h.t, err)
	return ep<<32 | n
}

func fmtAt(at fsm.Instant) string {
	if at == 0 {
		return "-"
	}
	return fmtTime(at.Time())
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(t0)
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}

// parseTime reads "+5s" (relative to the current time), "@1m" (relative to
// t0) or an RFC 3339 instant.
func (h *harness) parseTime(s string) time.Time {
	switch {
	case strings.HasPrefix(s, "+"), strings.HasPrefix(s, "-"):
		d, err := time.ParseDuration(s)
		require.NoError(h.t, err)
		return h.now.Add(d)
	case strings.HasPrefix(s, "@"):
		d, err := time.ParseDuration(s[1:])
		require.NoError(h.t, err)
		return t0.Add(d)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(h.t, err)
	return tm
}

func parseKVs(vals []string) []fsm.KV {
	var out []fsm.KV
	for _, v := range vals {
		if v == "" {
			continue
		}
		k, val, _ := strings.Cut(v, "=")
		out = append(out, fsm.KV{K: k, V: val})
	}
	return out
}

func fmtKVs(kvs []fsm.KV) string {
	var parts []string
	for _, kv := range kvs {
		parts = append(parts, kv.K+"="+kv.V)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// ---------------------------------------------------------------------------
// Formatting outputs
// ---------------------------------------------------------------------------

func (h *harness) fmtMutation(m fsm.Mutation) string {
	switch {
	case m.Insert != nil:
		t := m.Insert
		var b strings.Builder
		fmt.Fprintf(&b, "insert %s %s/%s %s run-at=%s", h.name(t.ID), t.Pool, t.Kind, t.Status, fmtAt(t.RunAt))
		if t.Key != "" {
			fmt.Fprintf(&b, " key=%s", t.Key)
		}
		if t.Priority != fsm.PriorityNormal {
			fmt.Fprintf(&b, " prio=%s", t.Priority)
		}
		if len(t.Labels) > 0 {
			fmt.Fprintf(&b, " labels=%s", fmtKVs(t.Labels))
		}
		if len(t.Tags) > 0 {
			fmt.Fprintf(&b, " tags=%s", fmtKVs(t.Tags))
		}
		if t.Deadline != 0 {
			fmt.Fprintf(&b, " deadline=%s", fmtAt(t.Deadline))
		}
		if t.Timeout != 0 {
			fmt.Fprintf(&b, " timeout=%s", t.Timeout)
		}
		fmt.Fprintf(&b, " attempts=%d", t.MaxAttempts)
		if t.Backoff != h.core.cfg.Backoff {
			fmt.Fprintf(&b, " backoff=%s/%s/%g", t.Backoff.Initial, t.Backoff.Max, t.Backoff.Jitter)
		}
		if len(t.Payload) > 0 {
			fmt.Fprintf(&b, " payload=%s", fmtBytes(t.Payload))
		}
		if t.Schedule != "" {
			fmt.Fprintf(&b, " schedule=%s slot=%s", t.Schedule, fmtAt(t.Slot))
		}
		if len(t.DependsOn()) > 0 {
			fmt.Fprintf(&b, " deps=%s", h.names(t.DependsOn()))
		}
		if t.DepPolicy() != fsm.DepSucceeded {
			fmt.Fprintf(&b, " policy=%s", t.DepPolicy())
		}
		if t.External() {
			b.WriteString(" external")
		}
		if t.Workflow() != "" {
			fmt.Fprintf(&b, " wf=%s", h.wfName(t.Workflow()))
		}
		if t.Step() != "" {
			fmt.Fprintf(&b, " step=%s", t.Step())
		}
		if t.Parent() != "" {
			fmt.Fprintf(&b, " parent=%s", h.name(t.Parent()))
		}
		if k := t.OrderingKey(); k != "" {
			fmt.Fprintf(&b, " okey=%s", k)
		}
		if k := t.ConcurrencyKey(); k != "" {
			fmt.Fprintf(&b, " ckey=%s", k)
		}
		return b.String()
	case m.Admit != nil:
		return fmt.Sprintf("admit %s %s", h.name(m.Admit.ID), m.Admit.Status)
	case m.PutPool != nil:
		return "put-pool " + fmtPoolRecord(m.PutPool)
	case m.PutACLPolicy != nil:
		return fmt.Sprintf("put-acl-policy %s rules=%q", m.PutACLPolicy.Name, m.PutACLPolicy.Rules)
	case m.PutACLToken != nil:
		return "put-acl-token " + fmtACLToken(*m.PutACLToken)
	case m.DelACL != nil:
		if m.DelACL.Policy != "" {
			return "del-acl policy=" + m.DelACL.Policy
		}
		return "del-acl token=" + m.DelACL.Token
	case m.Unblock != nil:
		return fmt.Sprintf("unblock %s", h.name(m.Unblock.ID))
	case m.PutWorkflow != nil:
		w := m.PutWorkflow
		s := fmt.Sprintf("put-workflow %s name=%q", h.wfName(w.ID), w.Name)
		if w.Key != "" {
			s += " key=" + w.Key
		}
		if w.Schedule != "" {
			s += fmt.Sprintf(" schedule=%s slot=%s", w.Schedule, fmtAt(w.Slot))
		}
		if w.Parent != "" {
			s += " parent=" + h.name(w.Parent)
		}
		return s
	case m.EndWorkflow != nil:
		return fmt.Sprintf("end-workflow %s %s", h.wfName(m.EndWorkflow.ID), m.EndWorkflow.Status)
	case m.PurgeWorkflow != nil:
		return fmt.Sprintf("purge-workflow %s", h.wfName(m.PurgeWorkflow.ID))
	case m.Ready != nil:
		return fmt.Sprintf("ready %s", h.name(m.Ready.ID))
	case m.Start != nil:
		s := m.Start
		return fmt.Sprintf("start %s attempt=%d lease=%s worker=%s", h.name(s.ID), s.Attempt, fmtLease(s.Lease), s.Worker)
	case m.Retry != nil:
		r := m.Retry
		return fmt.Sprintf("retry %s lease=%s retry-at=%s err=%q", h.name(r.ID), fmtLease(r.Lease), fmtAt(r.RetryAt), r.Error)
	case m.Finish != nil:
		f := m.Finish
		s := fmt.Sprintf("finish %s %s lease=%s", h.name(f.ID), f.Status, fmtLease(f.Lease))
		if len(f.Output) > 0 {
			s += " output=" + fmtBytes(f.Output)
		}
		if f.Error != "" {
			s += fmt.Sprintf(" err=%q", f.Error)
		}
		if f.Workflow != "" {
			s += " joins=" + h.wfName(f.Workflow)
		}
		if f.BlocksLane {
			s += " blocks-lane"
		}
		return s
	case m.Purge != nil:
		return fmt.Sprintf("purge %s", h.name(m.Purge.ID))
	case m.Requeue != nil:
		return fmt.Sprintf("requeue %s deadline=%s", h.name(m.Requeue.ID), fmtAt(m.Requeue.Deadline))
	case m.PutSchedule != nil:
		s := m.PutSchedule
		out := fmt.Sprintf("put-schedule %s cron=%q tz=%q %s/%s overlap=%d catch-up=%d limit=%d paused=%t created=%s fires=%d skipped=%d last-task=%s",
			s.Name, s.Cron, s.TZ, s.Pool, s.Kind, s.Overlap, s.CatchUp, s.CatchUpLimit, s.Paused, fmtAt(s.CreatedAt), s.Fires, s.Skipped, h.name(s.LastTask))
		if s.Backoff != (fsm.Backoff{}) {
			out += fmt.Sprintf(" backoff=%s/%s/%g", s.Backoff.Initial, s.Backoff.Max, s.Backoff.Jitter)
		}
		if len(s.Steps) > 0 {
			var steps []string
			for _, st := range s.Steps {
				one := st.Name + ":" + st.Pool + "/" + st.Kind
				if len(st.DependsOn) > 0 {
					one += "<-" + strings.Join(st.DependsOn, "+")
				}
				steps = append(steps, one)
			}
			out += fmt.Sprintf(" workflow=%q steps=(%s)", s.Workflow, strings.Join(steps, " "))
		}
		return out
	case m.DelSchedule != nil:
		return fmt.Sprintf("del-schedule %s", m.DelSchedule.Name)
	case m.PauseSchedule != nil:
		return fmt.Sprintf("pause-schedule %s paused=%t", m.PauseSchedule.Name, m.PauseSchedule.Paused)
	case m.Fire != nil:
		f := m.Fire
		if f.Workflow != "" {
			return fmt.Sprintf("fire %s slot=%s skipped=%d workflow=%s", f.Name, fmtAt(f.Slot), f.Skipped, h.wfName(f.Workflow))
		}
		return fmt.Sprintf("fire %s slot=%s skipped=%d task=%s", f.Name, fmtAt(f.Slot), f.Skipped, h.name(f.TaskID))
	case m.Tombstone != nil:
		return fmt.Sprintf("tombstone %s", m.Tombstone.NodeID)
	case m.PutSubscription != nil, m.DelSubscription != nil, m.AckSubscription != nil, m.StallSubscription != nil:
		return fmtSubscriptionMutation(m)
	}
	return "empty mutation"
}

func fmtBytes(b []byte) string {
	if len(b) > 32 {
		return fmt.Sprintf("%dB", len(b))
	}
	return strconv.Quote(string(b))
}

func fmtErr(err error) string {
	var ie *InvalidError
	switch {
	case errors.As(err, &ie):
		return fmt.Sprintf("invalid(%s: %s)", ie.Field, ie.Reason)
	case errors.Is(err, ErrOverloaded):
		return "overloaded"
	case errors.Is(err, ErrNotFound):
		return "not-found"
	case errors.Is(err, ErrStaleLease):
		return "stale-lease"
	case errors.Is(err, ErrShuttingDown):
		return "shutting-down"
	case errors.Is(err, ErrNotWaiting):
		return "not-waiting(" + err.Error() + ")"
	case errors.Is(err, ErrNotRetryable):
		return "not-retryable(" + err.Error() + ")"
	}
	var ve *VersionError
	if errors.As(err, &ve) {
		return fmt.Sprintf("needs-version(%d, have %d)", ve.Need, ve.Have)
	}
	return "error(" + err.Error() + ")"
}

func (h *harness) fmtSub(s Submitted) string {
	if s.ID == "" {
		return "-"
	}
	if s.Duplicate {
		return h.name(s.ID) + "(dup)"
	}
	return h.name(s.ID)
}

func (h *harness) fmtSubmitted(res *SubmitResult) string {
	var parts []string
	for i, sub := range res.Tasks {
		if res.Errs != nil && res.Errs[i] != nil {
			parts = append(parts, fmtErr(res.Errs[i]))
		} else {
			parts = append(parts, h.fmtSub(sub))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (h *harness) fmtReply(r Reply) string {
	name := h.reqName(r.Req)
	if r.Err != nil {
		return fmt.Sprintf("reply %s %s", name, fmtErr(r.Err))
	}
	s := "reply " + name
	switch v := r.Value.(type) {
	case *SubmitResult:
		return s + " " + h.fmtSubmitted(v)
	case Cancelled:
		s += " task=" + h.name(v.ID)
		if v.Cancelled {
			s += " cancelled"
		}
		return s
	case string:
		if h.reqCmds[r.Req] == "attach-workflow" {
			return s + " workflow=" + h.wfName(v)
		}
		return s + " task=" + h.name(v)
	case *WorkflowSubmitted:
		s += " workflow=" + h.wfName(v.ID)
		if v.Duplicate {
			s += "(dup)"
		}
		var parts []string
		for _, st := range v.Tasks {
			parts = append(parts, st.Step+"="+h.name(st.ID))
		}
		return s + " [" + strings.Join(parts, " ") + "]"
	case CancelledWorkflow:
		return fmt.Sprintf("%s workflow=%s cancelled=%d", s, h.wfName(v.ID), v.Cancelled)
	case PoolInfo:
		return s + " " + fmtPoolInfo(v)
	case Deleted:
		return fmt.Sprintf("%s task=%s deleted=%t", s, h.name(v.ID), v.Deleted)
	case Retried:
		return fmt.Sprintf("%s task=%s retried", s, h.name(v.ID))
	case CancelledMany:
		return fmt.Sprintf("%s cancelled=%d", s, v.Cancelled)
	case fsm.KindSettings:
		return s + " " + fmtKind(v)
	case fsm.ACLToken:
		return s + " " + fmtACLToken(v)
	case fsm.ACLPolicy:
		return s + " policy " + v.Name
	case fsm.Subscription:
		return s + " subscription " + v.Name
	case uint64:
		return s + " acked=" + fmtCursor(v)
	case fsm.Instant:
		if v != 0 {
			return s + " next-fire=" + fmtAt(v)
		}
	case bool:
		switch cmd := h.reqCmds[r.Req]; {
		case v && cmd == "acl-delete":
			return s + " deleted"
		case v && (cmd == "schedule-rm" || cmd == "unsubscribe"):
			return s + " removed"
		case v:
			return s + " paused"
		}
	case nil:
	default:
		return fmt.Sprintf("%s %T(%v)", s, v, v)
	}
	return s + " ok"
}

func (h *harness) fmtDispatch(d Dispatch) string {
	if d.Err != nil {
		return fmt.Sprintf("dispatch %s %s", h.reqName(d.Req), fmtErr(d.Err))
	}
	var parts []string
	for _, g := range d.Grants {
		parts = append(parts, fmt.Sprintf("%s lease=%s attempt=%d", h.name(g.ID), fmtLease(g.Lease), g.Attempt))
		h.grants[g.ID] = g.Lease
	}
	return fmt.Sprintf("dispatch %s [%s]", h.reqName(d.Req), strings.Join(parts, ", "))
}

func (h *harness) fmtEvent(e Event) string {
	if e.TaskID == "" {
		return fmt.Sprintf("event workflow %s %s", h.wfName(e.Workflow), e.WorkflowStatus)
	}
	s := fmt.Sprintf("event %s %s", h.name(e.TaskID), e.Status)
	if e.Attempt > 0 {
		s += fmt.Sprintf(" attempt=%d", e.Attempt)
	}
	if e.Message != "" {
		s += fmt.Sprintf(" %q", e.Message)
	}
	return s
}

func fmtAbort(a Abort) string {
	return fmt.Sprintf("abort worker=%s lease=%s reason=%q", a.Worker, fmtLease(a.Lease), a.Reason)
}

// actions lists the actions of o, prefixed by when they take effect: held
// ones (replies, dispatches, events) and immediate ones (aborts).
func (h *harness) actions(o Output) []string {
	var out []string
	for _, r := range o.Replies {
		out = append(out, "held "+h.fmtReply(r))
	}
	for _, d := range o.Dispatches {
		out = append(out, "held "+h.fmtDispatch(d))
	}
	for _, e := range o.Events {
		out = append(out, "held "+h.fmtEvent(e))
	}
	for _, a := range o.Aborts {
		out = append(out, "now  "+fmtAbort(a))
	}
	for _, r := range o.Redeliveries {
		out = append(out, fmt.Sprintf("now  redeliver %s from=%s deliveries=%d", r.Subscription, fmtCursor(r.From), r.Deliveries))
	}
	for _, n := range o.Notices {
		out = append(out, "now  "+h.fmtNotice(n))
	}
	return out
}

// collect takes the core's output, prints it, and commits it when
// autocommit is on.
func (h *harness) collect(b *strings.Builder) {
	o := h.core.Ready()
	h.rewind(o.Redeliveries)
	if h.quiet {
		h.summarize(b, o)
	}
	for _, m := range o.Mutations {
		if h.quiet {
			break
		}
		fmt.Fprintf(b, "mut  %s\n", h.subst(h.fmtMutation(m)))
	}
	lines := h.actions(o)
	if !h.quiet {
		for _, line := range lines {
			fmt.Fprintln(b, h.subst(line))
		}
	}
	if h.trace != nil {
		data := mustEncode(fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: h.epoch, Mutations: o.Mutations}))
		fmt.Fprintf(h.trace, "output %x\nactions %q\n", data, lines)
	}
	if o.Empty() {
		return
	}
	h.pending = append(h.pending, o)
	if h.autocommit {
		h.commit(b, false)
	}
}

// commit applies every pending output as one batch and checks that the core
// and the FSM agree.
func (h *harness) commit(b *strings.Builder, verbose bool) {
	var muts []fsm.Mutation
	held := 0
	for _, o := range h.pending {
		muts = append(muts, o.Mutations...)
		held += len(o.Replies) + len(o.Dispatches) + len(o.Events)
	}
	h.pending = nil
	if len(muts) > 0 {
		data := mustEncode(fsm.EncodeCommitBatch(&fsm.CommitBatch{Epoch: h.epoch, Time: fsm.InstantOf(h.now), Mutations: muts}))
		if res := h.applyEntry(data); res != nil {
			fmt.Fprintf(b, "COMMIT FAILED: %v\n", res)
			return
		}
	}
	if verbose {
		fmt.Fprintf(b, "committed %d mutations, released %d actions\n", len(muts), held)
	}
	h.crossCheck(b)
}

// crossCheck compares the core's task table with the FSM's (only when
// nothing is pending, i.e. they must agree).
func (h *harness) crossCheck(b *strings.Builder) {
	if len(h.pending) > 0 {
		return
	}
	seen := 0
	h.state.View().EachTask(func(rec *fsm.Task) bool {
		seen++
		t, ok := h.core.tasks[rec.ID]
		switch {
		case !ok:
			fmt.Fprintf(b, "MISMATCH %s: in the FSM, not in the core\n", h.name(rec.ID))
		case t.run == nil && t.status != fsm.StatusSucceeded:
			fmt.Fprintf(b, "MISMATCH %s: the core dropped the run of a task that is %s\n", h.name(rec.ID), t.status)
		case t.status != rec.Status || t.attempt != rec.Attempt || t.currentLease() != rec.Lease || (t.run != nil && t.runAt != rec.RunAt):
			// A task that succeeded keeps no run-at in the core.
			runAt := rec.RunAt
			if t.run != nil {
				runAt = t.runAt
			}
			fmt.Fprintf(b, "MISMATCH %s: core %s/%d/%s/%s, fsm %s/%d/%s/%s\n", h.name(rec.ID),
				t.status, t.attempt, fmtLease(t.currentLease()), fmtAt(runAt), rec.Status, rec.Attempt, fmtLease(rec.Lease), fmtAt(rec.RunAt))
		}
		return true
	})
	if seen != len(h.core.tasks) {
		fmt.Fprintf(b, "MISMATCH: %d tasks in the FSM, %d in the core\n", seen, len(h.core.tasks))
	}
	for name, s := range h.core.schedules {
		rec, ok := h.state.Schedule(name)
		if !ok {
			fmt.Fprintf(b, "MISMATCH schedule %s: not in the FSM\n", name)
			continue
		}
		if rec.LastFire != s.rec.LastFire || rec.Fires != s.rec.Fires || rec.Skipped != s.rec.Skipped || rec.Paused != s.rec.Paused || rec.LastTask != s.rec.LastTask {
			fmt.Fprintf(b, "MISMATCH schedule %s\n", name)
		}
	}
	if n := len(h.state.Schedules()); n != len(h.core.schedules) {
		fmt.Fprintf(b, "MISMATCH: %d schedules in the FSM, %d in the core\n", n, len(h.core.schedules))
	}
	wfs := 0
	h.state.View().EachWorkflow(func(rec *fsm.Workflow) bool {
		wfs++
		w, ok := h.core.workflows[rec.ID]
		switch {
		case !ok:
			fmt.Fprintf(b, "MISMATCH workflow %s: in the FSM, not in the core\n", h.wfName(rec.ID))
		case w.rec.Status != rec.Status:
			fmt.Fprintf(b, "MISMATCH workflow %s: core %s, fsm %s\n", h.wfName(rec.ID), w.rec.Status, rec.Status)
		case len(w.members) != len(h.state.WorkflowTasks(rec.ID)):
			fmt.Fprintf(b, "MISMATCH workflow %s: core %d members, fsm %d\n", h.wfName(rec.ID), len(w.members), len(h.state.WorkflowTasks(rec.ID)))
		}
		return true
	})
	if wfs != len(h.core.workflows) {
		fmt.Fprintf(b, "MISMATCH: %d workflows in the FSM, %d in the core\n", wfs, len(h.core.workflows))
	}
	h.crossCheckSubscriptions(b)
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.t = t
	if h.core == nil && d.Cmd != "config" {
		h.reset(Config{Seed: 1}, true)
	}
	var b strings.Builder
	h.quiet = d.HasArg("quiet")
	switch d.Cmd {
	case "config":
		h.config(d)
		return "ok"
	case "submit":
		spec := h.spec(d.CmdArgs)
		h.core.Submit(h.now, h.req(d), SubmitOne, []Spec{spec})
	case "batch", "many":
		var specs []Spec
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			_, args, err := datadriven.ParseLine("spec " + line)
			require.NoError(t, err)
			specs = append(specs, h.spec(args))
		}
		mode := SubmitBatch
		if d.Cmd == "many" {
			mode = SubmitMany
		}
		h.core.Submit(h.now, h.req(d), mode, specs)
	case "bulk":
		var n int
		d.ScanArgs(t, "n", &n)
		spec := h.spec(d.CmdArgs)
		specs := make([]Spec, n)
		for i := range specs {
			specs[i] = spec
		}
		h.core.Submit(h.now, h.req(d), SubmitMany, specs)
	case "poll":
		o := Offer{Pool: "p"}
		d.ScanArgs(t, "worker", &o.Worker)
		d.MaybeScanArgs(t, "pool", &o.Pool)
		o.Slots = 1
		d.MaybeScanArgs(t, "slots", &o.Slots)
		if a, ok := d.Arg("labels"); ok {
			o.Labels = parseKVs(a.Vals)
		}
		h.core.Poll(h.now, h.req(d), o)
	case "cancel-poll":
		h.core.Detach(h.req(d))
	case "heartbeat":
		var s string
		d.ScanArgs(t, "lease", &s)
		if err := h.core.Heartbeat(h.now, h.parseLease(s)); err != nil {
			fmt.Fprintf(&b, "heartbeat: %s\n", fmtErr(err))
		}
	case "complete":
		var s string
		d.ScanArgs(t, "lease", &s)
		o := h.outcome(d)
		if strings.TrimSpace(d.Input) != "" {
			// Children, one per line: "child [NAME] ARGS", "then [NAME] ARGS".
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				cmd, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
				st := h.step(rest)
				switch cmd {
				case "child":
					o.Children = append(o.Children, st)
				case "then":
					o.Then = &st
				default:
					t.Fatalf("unknown child line %q", line)
				}
			}
		}
		h.core.Complete(h.now, h.req(d), h.parseLease(s), o)
	case "complete-all":
		// Completes every attempt granted so far that still runs, in id order.
		var ids []string
		for id, l := range h.grants {
			if t, ok := h.core.leases[l]; ok && t.id == id {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			h.core.Complete(h.now, h.req(d), h.grants[id], Outcome{Kind: OutcomeSuccess})
		}
	case "cancel":
		h.core.Cancel(h.now, h.req(d), h.ref(d))
	case "workflow":
		ws := WorkflowSpec{Steps: h.steps(d.Input)}
		d.MaybeScanArgs(t, "name", &ws.Name)
		d.MaybeScanArgs(t, "key", &ws.Key)
		h.core.SubmitWorkflow(h.now, h.req(d), ws)
	case "cancel-workflow":
		h.core.CancelWorkflow(h.now, h.req(d), h.wfRef(d))
	case "attach-workflow":
		h.core.AttachWorkflow(h.now, h.req(d), h.wfRef(d))
	case "complete-external":
		h.core.CompleteExternal(h.now, h.req(d), h.ref(d), h.outcome(d))
	case "workflows":
		return h.dumpWorkflows()
	case "attach":
		h.core.Attach(h.now, h.req(d), h.ref(d))
	case "detach":
		h.core.Detach(h.req(d))
	case "tick":
		if len(d.CmdArgs) > 0 && d.CmdArgs[0].Key != "quiet" {
			arg := d.CmdArgs[0].Key
			if arg == "wake" {
				w, ok := h.core.NextWake()
				require.True(t, ok, "no timer pending")
				if w.After(h.now) {
					h.now = w
				}
			} else {
				h.now = h.parseTime(arg)
			}
		}
		fmt.Fprintf(&b, "now %s\n", fmtTime(h.now))
		h.core.Tick(h.now)
	case "clock-hold":
		// clock-hold on|off [t]: the driver stops or starts trusting its
		// clock, at t when given.
		if len(d.CmdArgs) > 1 {
			h.now = h.parseTime(d.CmdArgs[1].Key)
		}
		fmt.Fprintf(&b, "now %s\n", fmtTime(h.now))
		h.core.SetClockHold(h.now, d.CmdArgs[0].Key == "on")
	case "advance":
		// Moves the clock without telling the core (no leader meanwhile).
		h.now = h.parseTime(d.CmdArgs[0].Key)
		return "now " + fmtTime(h.now)
	case "wake":
		if w, ok := h.core.NextWake(); ok {
			return "next wake " + fmtTime(w)
		}
		return "no timer"
	case "schedule-add":
		h.core.AddSchedule(h.now, h.req(d), h.scheduleSpec(d))
	case "schedule-rm":
		var n string
		d.ScanArgs(t, "name", &n)
		h.core.RemoveSchedule(h.now, h.req(d), n)
	case "schedule-pause", "schedule-resume":
		var n string
		d.ScanArgs(t, "name", &n)
		h.core.PauseSchedule(h.now, h.req(d), n, d.Cmd == "schedule-pause")
	case "shutdown":
		h.core.Shutdown(h.now)
	case "log-version":
		// What every server of the cluster understands.
		var v int
		d.ScanArgs(t, "v", &v)
		h.core.SetLogVersion(uint16(v))
		return "ok"
	case "commit":
		h.collect(&b)
		h.commit(&b, true)
		return b.String()
	case "recover":
		h.recover(&b)
		return b.String()
	case "state":
		return h.dumpState()
	case "task":
		var n string
		d.ScanArgs(t, "id", &n)
		return h.dumpTask(n)
	case "schedules":
		return h.dumpSchedules()
	case "stats":
		s := h.core.Stats()
		out := fmt.Sprintf("pending=%d queued=%d running=%d parked=%d polls=%d leases=%d waiters=%d tasks=%d schedules=%d workflows=%d",
			s.Pending, s.Queued, s.Running, s.Parked, s.Polls, s.Leases, s.Waiters, s.Tasks, s.Schedules, s.Workflows)
		if s.ParkedTasks > 0 {
			out += fmt.Sprintf(" parked-tasks=%d", s.ParkedTasks)
		}
		if s.ClockHeld {
			out += fmt.Sprintf(" clock-held held-timers=%d", s.HeldTimers)
		}
		return out
	case "set-pool":
		h.core.SetPool(h.now, h.req(d), h.poolChange(d.CmdArgs))
	case "acl-bootstrap", "acl-token":
		var tok fsm.ACLToken
		var secret string
		d.ScanArgs(t, "accessor", &tok.Accessor)
		d.ScanArgs(t, "secret", &secret)
		sum := sha256.Sum256([]byte(secret))
		tok.SecretHash = sum[:]
		if d.HasArg("policies") {
			var ps string
			d.ScanArgs(t, "policies", &ps)
			tok.Policies = strings.Split(ps, ",")
		}
		if d.Cmd == "acl-bootstrap" {
			h.core.ACLBootstrap(h.now, h.req(d), tok)
		} else {
			h.core.PutACLToken(h.now, h.req(d), tok)
		}
	case "acl-policy":
		var p fsm.ACLPolicy
		d.ScanArgs(t, "name", &p.Name)
		p.Rules = strings.TrimSpace(d.Input)
		h.core.PutACLPolicy(h.now, h.req(d), p)
	case "acl-delete":
		var del fsm.DelACL
		d.MaybeScanArgs(t, "policy", &del.Policy)
		d.MaybeScanArgs(t, "token", &del.Token)
		h.core.DeleteACL(h.now, h.req(d), del)
	case "pools":
		var lines []string
		for _, pi := range h.core.Pools() {
			lines = append(lines, fmtPoolInfo(pi))
		}
		return strings.Join(lines, "\n")
	case "desired-slots":
		var lines []string
		infos := h.core.Pools()
		for i, ps := range h.core.DesiredSlotsByPool() {
			require.Equal(t, ps.Desired, infos[i].DesiredSlots, "pool %s: Pools and DesiredSlotsByPool disagree", ps.Pool)
			lines = append(lines, fmt.Sprintf("pool %s desired=%d", ps.Pool, ps.Desired))
		}
		return strings.Join(lines, "\n")
	case "delete":
		h.core.Delete(h.now, h.req(d), h.ref(d))
	case "retry":
		h.core.Retry(h.now, h.req(d), h.ref(d))
	case "cancel-many":
		// What the engine does: the matching ids, then batches of them,
		// each committed before the next.
		return h.cancelMany(t, d)
	case "cancel-tasks":
		// CancelTasks on the tasks named by ids=(...), with the filter.
		a, ok := d.Arg("ids")
		require.True(t, ok, "ids=(...) is required")
		var ids []string
		for _, n := range a.Vals {
			ids = append(ids, h.realID(n))
		}
		h.core.CancelTasks(h.now, h.req(d), ids, h.taskFilter(t, d))
	case "attempts":
		var n string
		d.ScanArgs(t, "id", &n)
		return h.dumpAttempts(n)
	case "set-kind":
		ch := KindChange{Pool: "p"}
		d.MaybeScanArgs(t, "pool", &ch.Pool)
		d.ScanArgs(t, "kind", &ch.Kind)
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "timeout":
				v, err := time.ParseDuration(a.Vals[0])
				require.NoError(t, err)
				ch.Timeout = &v
			case "max-attempts":
				n, err := strconv.Atoi(a.Vals[0])
				require.NoError(t, err)
				v := uint32(n)
				ch.MaxAttempts = &v
			}
		}
		// Schemas, one per line of the input: "payload DOC", "output DOC";
		// an empty DOC removes the schema.
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			which, doc, _ := strings.Cut(strings.TrimSpace(line), " ")
			b := []byte(strings.TrimSpace(doc))
			switch which {
			case "payload":
				ch.PayloadSchema = &b
			case "output":
				ch.OutputSchema = &b
			case "":
			default:
				t.Fatalf("unknown schema line %q", line)
			}
		}
		h.core.SetKind(h.now, h.req(d), ch)
	case "subscribe":
		h.core.CreateSubscription(h.now, h.req(d), h.subscriptionSpec(d))
	case "unsubscribe":
		var n string
		d.ScanArgs(t, "name", &n)
		h.core.RemoveSubscription(h.now, h.req(d), n)
	case "ack":
		var n string
		d.ScanArgs(t, "name", &n)
		h.core.AckSubscription(h.now, h.req(d), n, h.ackCursor(d, n))
	case "deliver":
		h.deliver(&b, d)
	case "subscription":
		var n string
		d.ScanArgs(t, "name", &n)
		return h.dumpSubscription(n)
	case "kind":
		var pool, kind string
		d.ScanArgs(t, "pool", &pool)
		d.ScanArgs(t, "kind", &kind)
		ks, err := h.core.Kind(pool, kind)
		if err != nil {
			return fmtErr(err)
		}
		return fmtKind(ks)
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	h.collect(&b)
	if b.Len() == 0 {
		return "ok"
	}
	return b.String()
}

func (h *harness) config(d *datadriven.TestData) {
	cfg := Config{Seed: 1}
	autocommit := true
	var overflow *OverflowPolicy
	for _, a := range d.CmdArgs {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		dur := func() time.Duration {
			x, err := time.ParseDuration(v)
			require.NoError(h.t, err)
			return x
		}
		num := func() int {
			x, err := strconv.Atoi(v)
			require.NoError(h.t, err)
			return x
		}
		switch a.Key {
		case "heartbeat":
			cfg.HeartbeatWindow = dur()
		case "grace":
			cfg.LeaseGrace = dur()
		case "max-attempts":
			cfg.MaxAttempts = uint32(num())
		case "backoff":
			cfg.Backoff = h.backoff(a.Vals)
		case "retention":
			cfg.Retention = dur()
		case "retention-cap":
			cfg.RetentionCap = dur()
		case "hold-recheck":
			cfg.HoldRecheck = dur()
		case "max-payload":
			cfg.MaxPayload = num()
		case "max-output":
			cfg.MaxOutput = num()
		case "max-kind":
			cfg.MaxKindLen = num()
		case "overflow":
			o, ok := fsm.ParseOverflow(v)
			require.True(h.t, ok, "overflow %q", v)
			overflow = &o
		case "fixed-pools":
			cfg.FixedPools = true
		case "seed":
			cfg.Seed = uint64(num())
		case "autocommit":
			autocommit = v != "false"
		default:
			h.t.Fatalf("unknown config %q", a.Key)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		cmd, args, err := datadriven.ParseLine(line)
		require.NoError(h.t, err)
		name := ""
		if len(args) > 0 && len(args[0].Vals) == 0 {
			name = args[0].Key
			args = args[1:]
		}
		pc, hasOverflow := h.poolConfig(args)
		switch cmd {
		case "global":
			cfg.Global = pc.Bounds
		case "default-pool":
			cfg.DefaultPool = pc
			if !hasOverflow && overflow != nil {
				cfg.DefaultPool.Overflow = *overflow
			}
		case "pool":
			if cfg.Pools == nil {
				cfg.Pools = map[string]PoolConfig{}
			}
			if !hasOverflow && overflow != nil {
				pc.Overflow = *overflow
			}
			cfg.Pools[name] = pc
		default:
			h.t.Fatalf("unknown config line %q", line)
		}
	}
	if overflow != nil {
		cfg.DefaultPool.Overflow = *overflow
	}
	h.reset(cfg, autocommit)
}

// poolConfig parses the settings of a pool line, as set-pool writes them
// (see poolChange), into a pool's configuration; it reports whether the
// line sets the overflow policy.
func (h *harness) poolConfig(args []datadriven.CmdArg) (PoolConfig, bool) {
	ch := h.poolChange(args)
	pc, err := applyChange(PoolConfig{}, ch)
	require.NoError(h.t, err)
	return pc, ch.Overflow != nil
}

// poolChange parses the arguments of set-pool: the pool name, then the
// settings to change, as in poolConfig (kind-rate=(KIND,0,0) removes).
func (h *harness) poolChange(args []datadriven.CmdArg) PoolChange {
	ch := PoolChange{Pool: "p"}
	for _, a := range args {
		if len(a.Vals) == 0 {
			ch.Pool = a.Key
			continue
		}
		v := a.Vals[0]
		num := func() *int {
			n, err := strconv.Atoi(v)
			require.NoError(h.t, err)
			return &n
		}
		switch a.Key {
		case "req", "quiet":
		case "pending":
			ch.MaxPending = num()
		case "running":
			ch.MaxRunning = num()
		case "overflow":
			o, ok := fsm.ParseOverflow(v)
			if !ok {
				o = 9
			}
			ch.Overflow = &o
		case "rate":
			r, err := strconv.ParseFloat(v, 64)
			require.NoError(h.t, err)
			ch.Rate = &r
		case "burst":
			ch.Burst = num()
		case "conc":
			ch.ConcurrencyLimit = num()
		case "ordering":
			o, ok := fsm.ParseOrderingPolicy(v)
			if !ok {
				o = 9
			}
			ch.Ordering = &o
		case "max-attempts":
			n := uint32(*num())
			ch.MaxAttempts = &n
		case "backoff":
			bo := h.backoff(a.Vals)
			ch.Backoff = &bo
		case "grace":
			d, err := time.ParseDuration(v)
			require.NoError(h.t, err)
			ch.LeaseGrace = &d
		case "paused":
			b := v == "true"
			ch.Paused = &b
		case "kind-rate":
			require.Len(h.t, a.Vals, 3, "kind-rate=(kind,rate,burst)")
			r, err := strconv.ParseFloat(a.Vals[1], 64)
			require.NoError(h.t, err)
			b, err := strconv.Atoi(a.Vals[2])
			require.NoError(h.t, err)
			if ch.KindRates == nil {
				ch.KindRates = map[string]Rate{}
			}
			ch.KindRates[a.Vals[0]] = Rate{Per: r, Burst: b}
		default:
			p, ok := fsm.ParsePriority(a.Key)
			require.True(h.t, ok, "unknown pool setting %q", a.Key)
			if ch.MaxPendingPerClass == nil {
				ch.MaxPendingPerClass = map[fsm.Priority]int{}
			}
			ch.MaxPendingPerClass[p] = *num()
		}
	}
	return ch
}

// fmtPoolRecord prints the replicated settings of a pool, the ones set.
func fmtPoolRecord(p *fsm.Pool) string {
	var b strings.Builder
	b.WriteString(p.Name)
	if p.MaxRunning != 0 {
		fmt.Fprintf(&b, " running=%d", p.MaxRunning)
	}
	if p.MaxPending != 0 {
		fmt.Fprintf(&b, " pending=%d", p.MaxPending)
	}
	if len(p.MaxPendingPerClass) > 0 {
		fmt.Fprintf(&b, " per-class=%v", p.MaxPendingPerClass)
	}
	fmt.Fprintf(&b, " overflow=%s", p.Overflow)
	if p.Rate != 0 {
		fmt.Fprintf(&b, " rate=%g burst=%d", p.Rate, p.Burst)
	}
	for _, kr := range p.KindRates {
		fmt.Fprintf(&b, " kind-rate=(%s,%g,%d)", kr.Kind, kr.Rate, kr.Burst)
	}
	if p.ConcurrencyLimit != 0 {
		fmt.Fprintf(&b, " conc=%d", p.ConcurrencyLimit)
	}
	fmt.Fprintf(&b, " ordering=%s", p.Ordering)
	for _, k := range p.Kinds {
		fmt.Fprintf(&b, " [%s]", fmtKind(k))
	}
	if p.MaxAttempts != 0 {
		fmt.Fprintf(&b, " max-attempts=%d", p.MaxAttempts)
	}
	if p.Backoff != (fsm.Backoff{}) {
		fmt.Fprintf(&b, " backoff=%s/%s/%g", p.Backoff.Initial, p.Backoff.Max, p.Backoff.Jitter)
	}
	if p.LeaseGrace != 0 {
		fmt.Fprintf(&b, " grace=%s", p.LeaseGrace)
	}
	if p.Paused {
		b.WriteString(" paused")
	}
	return b.String()
}

// fmtKind prints the settings of a kind.
func fmtKind(k fsm.KindSettings) string {
	s := "kind " + k.Kind
	if len(k.PayloadSchema) > 0 {
		s += " payload-schema=" + string(k.PayloadSchema)
	}
	if len(k.OutputSchema) > 0 {
		s += " output-schema=" + string(k.OutputSchema)
	}
	if k.Timeout != 0 {
		s += " timeout=" + k.Timeout.String()
	}
	if k.MaxAttempts != 0 {
		s += fmt.Sprintf(" max-attempts=%d", k.MaxAttempts)
	}
	return s
}

// fmtPoolInfo prints what the core says of a pool.
func fmtPoolInfo(pi PoolInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pool %s pending=%d queued=%d waiting=%d running=%d parked=%d lanes=%d",
		pi.Pool, pi.Pending, pi.Queued, pi.Waiting, pi.Running, pi.Parked, pi.Lanes)
	if len(pi.Blocked) > 0 {
		fmt.Fprintf(&b, " blocked=(%s)", strings.Join(pi.Blocked, ","))
	}
	if pi.Polls > 0 {
		fmt.Fprintf(&b, " polls=%d slots=%d", pi.Polls, pi.PollSlots)
	}
	if pi.Config.Paused {
		b.WriteString(" paused")
	}
	if pi.Replicated {
		b.WriteString(" replicated")
	}
	return b.String()
}

func (h *harness) backoff(vals []string) fsm.Backoff {
	require.Len(h.t, vals, 3, "backoff=(initial,max,jitter)")
	i, err := time.ParseDuration(vals[0])
	require.NoError(h.t, err)
	m, err := time.ParseDuration(vals[1])
	require.NoError(h.t, err)
	j, err := strconv.ParseFloat(vals[2], 64)
	require.NoError(h.t, err)
	return fsm.Backoff{Initial: i, Max: m, Jitter: j}
}

func (h *harness) spec(args []datadriven.CmdArg) Spec {
	s := Spec{Template: fsm.Template{Pool: "p", Kind: "k", Priority: fsm.PriorityNormal}}
	for _, a := range args {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		dur := func() time.Duration {
			x, err := time.ParseDuration(v)
			require.NoError(h.t, err)
			return x
		}
		switch a.Key {
		case "req", "quiet", "n":
		case "pool":
			s.Pool = v
		case "kind":
			s.Kind = v
		case "kind-len":
			n, _ := strconv.Atoi(v)
			s.Kind = strings.Repeat("k", n)
		case "key":
			s.Key = v
		case "priority", "prio":
			p, ok := fsm.ParsePriority(v)
			if !ok {
				n, _ := strconv.Atoi(v)
				p = fsm.Priority(n)
			}
			s.Priority = p
		case "payload":
			s.Payload = []byte(v)
		case "payload-size":
			n, _ := strconv.Atoi(v)
			s.Payload = make([]byte, n)
		case "labels":
			s.Labels = parseKVs(a.Vals)
		case "tags":
			s.Tags = parseKVs(a.Vals)
		case "run-at":
			s.RunAt = fsm.InstantOf(h.parseTime(v))
		case "delay":
			s.Delay = dur()
		case "deadline":
			s.Deadline = fsm.InstantOf(h.parseTime(v))
		case "timeout":
			s.Timeout = dur()
		case "max-attempts":
			n, _ := strconv.Atoi(v)
			s.MaxAttempts = uint32(n)
		case "backoff":
			s.Backoff = h.backoff(a.Vals)
		case "deps":
			for _, v := range a.Vals {
				if k, ok := strings.CutPrefix(v, "key:"); ok {
					s.DependsOn = append(s.DependsOn, TaskRef{Key: k})
				} else {
					s.DependsOn = append(s.DependsOn, TaskRef{ID: h.realID(v)})
				}
			}
		case "policy":
			p, ok := fsm.ParseDepPolicy(v)
			if !ok {
				p = 9
			}
			s.DepPolicy = p
		case "external":
			s.External = true
		case "okey":
			if s.Keys == nil {
				s.Keys = &fsm.Keys{}
			}
			s.Keys.Ordering = v
		case "ckey":
			if s.Keys == nil {
				s.Keys = &fsm.Keys{}
			}
			s.Keys.Concurrency = v
		case "after", "name":
			// read by step
		default:
			h.t.Fatalf("unknown spec field %q", a.Key)
		}
	}
	return s
}

// step parses "[NAME] ARGS": a step's name (a first word without '=') and
// its spec, with after=(a,b) naming the steps it depends on.
func (h *harness) step(line string) StepSpec {
	_, args, err := datadriven.ParseLine("step " + line)
	require.NoError(h.t, err)
	var st StepSpec
	if len(args) > 0 && len(args[0].Vals) == 0 && args[0].Key != "external" {
		st.Name = args[0].Key
		args = args[1:]
	}
	for _, a := range args {
		switch a.Key {
		case "after":
			st.DependsOnSteps = append(st.DependsOnSteps, a.Vals...)
		case "name":
			st.Name = strings.Join(a.Vals, ",")
		}
	}
	st.Spec = h.spec(args)
	return st
}

// steps parses one step per line.
func (h *harness) steps(input string) []StepSpec {
	var out []StepSpec
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, h.step(line))
		}
	}
	return out
}

func (h *harness) wfRef(d *datadriven.TestData) WorkflowRef {
	var r WorkflowRef
	var s string
	if d.MaybeScanArgs(h.t, "id", &s) {
		r.ID = h.realID(s)
	}
	d.MaybeScanArgs(h.t, "key", &r.Key)
	return r
}

func (h *harness) scheduleSpec(d *datadriven.TestData) ScheduleSpec {
	var sp ScheduleSpec
	var rest []datadriven.CmdArg
	for _, a := range d.CmdArgs {
		v := ""
		if len(a.Vals) > 0 {
			v = strings.Join(a.Vals, ",")
		}
		switch a.Key {
		case "name":
			sp.Name = v
		case "cron":
			sp.Cron = v
		case "tz":
			sp.TZ = v
		case "overlap":
			sp.Overlap = map[string]fsm.Overlap{"skip": fsm.OverlapSkip, "allow": fsm.OverlapAllow, "bad": 9}[v]
		case "catch-up":
			sp.CatchUp = map[string]fsm.CatchUp{"once": fsm.CatchUpOnce, "skip": fsm.CatchUpSkip, "all": fsm.CatchUpAll}[v]
		case "limit":
			n, _ := strconv.Atoi(v)
			sp.CatchUpLimit = uint32(n)
		case "paused":
			sp.Paused = true
		case "workflow":
			sp.Workflow = v
		default:
			rest = append(rest, a)
		}
	}
	if strings.TrimSpace(d.Input) != "" {
		for _, st := range h.steps(d.Input) {
			sp.Steps = append(sp.Steps, fsm.StepTemplate{
				Name: st.Name, Template: st.Template, DependsOn: st.DependsOnSteps,
				DepPolicy: st.DepPolicy, External: st.External,
			})
		}
		if len(rest) > 0 {
			sp.Task = h.spec(rest).Template // to see it refused
		}
		return sp
	}
	sp.Task = h.spec(rest).Template
	return sp
}

func (h *harness) outcome(d *datadriven.TestData) Outcome {
	var o Outcome
	kind := "success"
	d.MaybeScanArgs(h.t, "outcome", &kind)
	switch kind {
	case "success":
		o.Kind = OutcomeSuccess
	case "retry":
		o.Kind = OutcomeRetryable
	case "fail":
		o.Kind = OutcomePermanent
	case "cancel":
		o.Kind = OutcomeCancelled
	default:
		h.t.Fatalf("unknown outcome %q", kind)
	}
	var s string
	if d.MaybeScanArgs(h.t, "output", &s) {
		o.Output = []byte(s)
	}
	var n int
	if d.MaybeScanArgs(h.t, "output-size", &n) {
		o.Output = make([]byte, n)
	}
	if a, ok := d.Arg("message"); ok {
		o.Message = strings.Join(a.Vals, ", ")
	}
	if d.MaybeScanArgs(h.t, "message-size", &n) {
		// n bytes of two-byte characters (one more byte when n is odd).
		o.Message = strings.Repeat("é", (n+1)/2)
	}
	if d.MaybeScanArgs(h.t, "retry-after", &s) {
		x, err := time.ParseDuration(s)
		require.NoError(h.t, err)
		o.RetryAfter = x
	}
	return o
}

func (h *harness) ref(d *datadriven.TestData) TaskRef {
	var r TaskRef
	var s string
	if d.MaybeScanArgs(h.t, "id", &s) {
		r.ID = h.realID(s)
	}
	d.MaybeScanArgs(h.t, "key", &r.Key)
	return r
}

func (h *harness) recover(b *strings.Builder) {
	dropped := 0
	for _, o := range h.pending {
		dropped += len(o.Mutations)
	}
	if dropped > 0 {
		fmt.Fprintf(b, "dropped %d uncommitted mutations\n", dropped)
	}
	h.pending = nil
	_ = h.core.Ready()
	h.epoch++
	res := h.applyEntry(mustEncode(fsm.EncodeEpochBump(&fsm.EpochBump{Epoch: h.epoch, Leader: "n" + strconv.FormatUint(h.epoch, 10), Time: fsm.InstantOf(h.now)})))
	require.Equal(h.t, h.epoch, res)
	c, err := Recover(h.cfg, h.state.View(), h.epoch, h.now)
	require.NoError(h.t, err)
	c.SetHolds(h.state)
	h.core = c
	// The consumers reconnect to the new leader: they read from the
	// durable cursor.
	clear(h.consumers)
	out := c.Ready()
	require.True(h.t, out.Empty(), "recover produced output")
	s := c.Stats()
	fmt.Fprintf(b, "epoch %d: pending=%d queued=%d running=%d tasks=%d schedules=%d", h.epoch, s.Pending, s.Queued, s.Running, s.Tasks, s.Schedules)
	if s.Workflows > 0 {
		fmt.Fprintf(b, " workflows=%d", s.Workflows)
	}
	if s.Subscriptions > 0 {
		fmt.Fprintf(b, " subscriptions=%d", s.Subscriptions)
	}
	b.WriteByte('\n')
	h.crossCheck(b)
}

func (h *harness) dumpState() string {
	var b strings.Builder
	h.state.View().EachTask(func(t *fsm.Task) bool {
		fmt.Fprintf(&b, "%s %s %s/%s attempt=%d", h.name(t.ID), t.Status, t.Pool, t.Kind, t.Attempt)
		if t.Lease != 0 {
			fmt.Fprintf(&b, " lease=%s worker=%s", fmtLease(t.Lease), t.Worker)
		}
		if t.Key != "" {
			fmt.Fprintf(&b, " key=%s", t.Key)
		}
		if len(t.Output) > 0 {
			fmt.Fprintf(&b, " output=%s", fmtBytes(t.Output))
		}
		if t.Error != "" {
			fmt.Fprintf(&b, " err=%q", t.Error)
		}
		if len(t.DependsOn()) > 0 {
			fmt.Fprintf(&b, " deps=%s", h.names(t.DependsOn()))
		}
		if t.Workflow() != "" {
			fmt.Fprintf(&b, " wf=%s", h.wfName(t.Workflow()))
		}
		if t.Step() != "" {
			fmt.Fprintf(&b, " step=%s", t.Step())
		}
		if t.AttemptBase != 0 {
			fmt.Fprintf(&b, " base=%d", t.AttemptBase)
		}
		b.WriteByte('\n')
		return true
	})
	if b.Len() == 0 {
		return "empty"
	}
	return b.String()
}

// dumpAttempts shows the attempt history of task n, oldest first.
func (h *harness) dumpAttempts(n string) string {
	t, ok := h.state.Get(h.realID(n))
	if !ok {
		return "not found"
	}
	if len(t.Attempts) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, a := range t.Attempts {
		fmt.Fprintf(&b, "attempt=%d worker=%s lease=%s epoch=%d started=%s finished=%s %s",
			a.Attempt, a.Worker, fmtLease(a.Lease), a.Epoch(), fmtAt(a.StartedAt), fmtAt(a.FinishedAt), a.Outcome)
		if a.Error != "" {
			if r := []rune(a.Error); len(r) > 48 {
				fmt.Fprintf(&b, " err=%q...%q (%d bytes, valid UTF-8: %t)",
					string(r[:8]), string(r[len(r)-16:]), len(a.Error), utf8.ValidString(a.Error))
			} else {
				fmt.Fprintf(&b, " err=%q", a.Error)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// cancelMany cancels what a filter selects as the engine does: Matching,
// then CancelTasks on batches of batch= ids (default 500), each batch
// collected and committed before the next.
func (h *harness) cancelMany(t *testing.T, d *datadriven.TestData) string {
	f := h.taskFilter(t, d)
	batch := 500
	d.MaybeScanArgs(t, "batch", &batch)
	var b strings.Builder
	ids, err := h.core.Matching(f)
	if err != nil {
		return "matching: " + fmtErr(err) + "\n"
	}
	fmt.Fprintf(&b, "matching %d\n", len(ids))
	for k := 1; len(ids) > 0; k++ {
		n := min(batch, len(ids))
		fmt.Fprintf(&b, "batch %d: %d ids\n", k, n)
		h.core.CancelTasks(h.now, h.req(d), ids[:n], f)
		ids = ids[n:]
		h.collect(&b)
		if !h.autocommit {
			h.commit(&b, true)
		}
	}
	return b.String()
}

// taskFilter reads pool= (default p), status= and kind= (lists).
func (h *harness) taskFilter(t *testing.T, d *datadriven.TestData) TaskFilter {
	f := TaskFilter{Pool: "p"}
	d.MaybeScanArgs(t, "pool", &f.Pool)
	if a, ok := d.Arg("status"); ok {
		for _, v := range a.Vals {
			st, ok := fsm.ParseStatus(v)
			require.True(t, ok, "status %q", v)
			f.Statuses = append(f.Statuses, st)
		}
	}
	if a, ok := d.Arg("kind"); ok {
		f.Kinds = a.Vals
	}
	return f
}

func (h *harness) dumpTask(n string) string {
	t, ok := h.state.Get(h.realID(n))
	if !ok {
		return "not found"
	}
	return fmt.Sprintf("%s %s pool=%s kind=%s key=%q prio=%s payload=%s labels=%s tags=%s\n"+
		"run-at=%s deadline=%s timeout=%s max-attempts=%d backoff=%s/%s/%g\n"+
		"attempt=%d lease=%s last-lease=%s worker=%q error=%q output=%s\n"+
		"submitted=%s started=%s updated=%s finished=%s schedule=%q slot=%s",
		n, t.Status, t.Pool, t.Kind, t.Key, t.Priority, fmtBytes(t.Payload), fmtKVs(t.Labels), fmtKVs(t.Tags),
		fmtAt(t.RunAt), fmtAt(t.Deadline), t.Timeout, t.MaxAttempts,
		t.Backoff.Initial, t.Backoff.Max, t.Backoff.Jitter,
		t.Attempt, fmtLease(t.Lease), fmtLease(t.LastLease), t.Worker, t.Error, fmtBytes(t.Output),
		fmtAt(t.SubmittedAt), fmtAt(t.StartedAt), fmtAt(t.UpdatedAt), fmtAt(t.FinishedAt), t.Schedule, fmtAt(t.Slot))
}

func (h *harness) dumpSchedules() string {
	var b strings.Builder
	scheds := h.state.Schedules()
	sort.Slice(scheds, func(i, j int) bool { return scheds[i].Name < scheds[j].Name })
	for _, s := range scheds {
		fmt.Fprintf(&b, "%s cron=%q tz=%q paused=%t created=%s last-fire=%s last-task=%s fires=%d skipped=%d\n",
			s.Name, s.Cron, s.TZ, s.Paused, fmtAt(s.CreatedAt), fmtAt(s.LastFire), h.name(s.LastTask), s.Fires, s.Skipped)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

func (h *harness) dumpWorkflows() string {
	var b strings.Builder
	h.state.View().EachWorkflow(func(w *fsm.Workflow) bool {
		fmt.Fprintf(&b, "%s %s name=%q", h.wfName(w.ID), w.Status, w.Name)
		if w.Key != "" {
			fmt.Fprintf(&b, " key=%s", w.Key)
		}
		if w.Parent != "" {
			fmt.Fprintf(&b, " parent=%s", h.name(w.Parent))
		}
		fmt.Fprintf(&b, " submitted=%s finished=%s members=", fmtAt(w.SubmittedAt), fmtAt(w.FinishedAt))
		var parts []string
		for _, t := range h.state.WorkflowTasks(w.ID) {
			p := h.name(t.ID)
			if t.Step() != "" {
				p = t.Step() + "=" + p
			}
			parts = append(parts, p+":"+t.Status.String())
		}
		b.WriteString("(" + strings.Join(parts, " ") + ")\n")
		return true
	})
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// fmtACLToken shows a token: its accessor, the start of its secret's hash,
// its policies and flags.
func fmtACLToken(t fsm.ACLToken) string {
	s := fmt.Sprintf("%s hash=%x", t.Accessor, t.SecretHash[:4])
	if len(t.Policies) > 0 {
		s += " policies=" + strings.Join(t.Policies, ",")
	}
	if t.Management {
		s += " management"
	}
	if t.Bootstrap {
		s += " bootstrap"
	}
	return s
}
