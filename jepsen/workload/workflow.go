package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/jepsen/history"
)

// WorkflowPool is the pool of every workflow member.
const WorkflowPool = "wf"

// WorkflowMaxAttempts is the attempts a workflow member allows.
const WorkflowMaxAttempts = 3

// Workflow operation names.
const (
	WfSubmit       = "wf-submit"
	WfCancel       = "wf-cancel"
	FinalWorkflows = "final-workflows"
)

// What a member does when it runs, carried as the last field of its
// payload (wf|<workflow key>|<step>|<mode>).
const (
	ModeOK    = "ok"
	ModeFail  = "fail"  // a permanent failure
	ModeSpawn = "spawn" // success with two children and a continuation
)

// MsgWorkflowCancelled is the error of a member that a workflow cancel
// ended.
const MsgWorkflowCancelled = "workflow cancelled"

// wfStep is one step of a generated workflow.
type wfStep struct {
	name   string
	deps   []string
	policy string // "" or client.DependencyPolicyDone
	mode   string
}

// Workflows is the workflow workload: a submitter of random small graphs
// (chains, diamonds, fan-ins, random DAGs) whose steps succeed, fail for
// good, or spawn children with a continuation; some steps run under policy
// done. A canceller cancels some workflows while they run. Every submit
// goes to a random node, retrying an unknown outcome with the same key.
type Workflows struct {
	env       *Env
	submitter Process
	canceller Process
	// Interval is the mean pause between two submits.
	Interval time.Duration
	// CancelRate is the share of acked workflows cancelled soon after.
	CancelRate float64

	stopped atomic.Bool
	doomed  atomic.Int64
	cancelC chan pendingCancel

	mu    sync.Mutex
	keys  []string
	acked map[string]string // key -> workflow id
}

type pendingCancel struct {
	id, key string
	at      time.Time
}

// NewWorkflows returns the workload: submitter submits, canceller cancels.
func NewWorkflows(env *Env, submitter, canceller Process) *Workflows {
	return &Workflows{env: env, submitter: submitter, canceller: canceller, Interval: 500 * time.Millisecond, CancelRate: 0.15,
		cancelC: make(chan pendingCancel, 64), acked: map[string]string{}}
}

// StopSubmitting ends the submit loop (cancels in flight go on until Run's
// ctx ends).
func (w *Workflows) StopSubmitting() { w.stopped.Store(true) }

// Doom makes the next n submits workflows whose first step fails for good,
// with dependents under both policies.
func (w *Workflows) Doom(n int) { w.doomed.Add(int64(n)) }

// Keys returns every key submitted so far.
func (w *Workflows) Keys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.keys...)
}

// AckedIDs returns the ids of the acknowledged workflows.
func (w *Workflows) AckedIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.acked))
	for _, id := range w.acked {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Run submits and cancels until ctx ends.
func (w *Workflows) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		w.submitLoop(ctx, w.env.Rand())
	}()
	go func() {
		defer wg.Done()
		w.cancelLoop(ctx, w.env.Rand())
	}()
	wg.Wait()
}

func (w *Workflows) node(r *rand.Rand) Node { return w.env.Nodes[r.IntN(len(w.env.Nodes))] }

func (w *Workflows) submitLoop(ctx context.Context, r *rand.Rand) {
	for seq := 1; ctx.Err() == nil && !w.stopped.Load(); seq++ {
		key := fmt.Sprintf("wf-%s-%d", w.submitter.Name, seq)
		var name string
		var steps []wfStep
		if w.doomed.Load() > 0 {
			w.doomed.Add(-1)
			name, steps = "doomed", doomedShape()
		} else {
			name, steps = randomShape(r)
		}
		id, ok := w.submit(ctx, r, key, name, steps)
		if ok && r.Float64() < w.CancelRate {
			delay := time.Duration(r.Int64N(int64(2 * time.Second)))
			select {
			case w.cancelC <- pendingCancel{id: id, key: key, at: time.Now().Add(delay)}:
			default:
			}
		}
		jitter := time.Duration(r.Int64N(int64(w.Interval)))
		if !sleepCtx(ctx, w.Interval/2+jitter) {
			return
		}
	}
}

// submit sends the workflow up to four times (the first attempt and three
// retries after unknown outcomes) with the same key, each to a random node.
func (w *Workflows) submit(ctx context.Context, r *rand.Rand, key, name string, steps []wfStep) (string, bool) {
	spec := client.WorkflowSpec{Name: name, Key: key}
	for _, st := range steps {
		spec.Steps = append(spec.Steps, client.Step{
			Name: st.name,
			Task: client.TaskSpec{
				Template:         client.Template{Pool: WorkflowPool, Kind: "wf-" + name, Payload: []byte(StepPayload(key, st.name, st.mode)), MaxAttempts: WorkflowMaxAttempts},
				DependencyPolicy: st.policy,
			},
			DependsOn: st.deps,
		})
	}
	shape := describeShape(name, steps)
	w.mu.Lock()
	w.keys = append(w.keys, key)
	w.mu.Unlock()
	for attempt := 0; attempt < 4 && ctx.Err() == nil; attempt++ {
		n := w.node(r)
		c, err := w.env.Client(w.submitter.IP, n)
		if err != nil {
			return "", false
		}
		done := w.env.Rec.Invoke(w.submitter.Name, WfSubmit, n.ID, &history.Value{Pool: WorkflowPool, Key: key, Shape: shape})
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		sub, err := c.SubmitWorkflow(actx, spec)
		cancel()
		switch t := Outcome(err); t {
		case history.OK:
			done(t, &history.Value{Pool: WorkflowPool, Key: key, Workflow: sub.ID, Steps: sub.Tasks, Duplicate: sub.Duplicate}, nil)
			w.mu.Lock()
			w.acked[key] = sub.ID
			w.mu.Unlock()
			return sub.ID, true
		case history.Fail:
			done(t, &history.Value{Pool: WorkflowPool, Key: key}, err)
			return "", false
		default:
			done(t, &history.Value{Pool: WorkflowPool, Key: key}, err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return "", false
			}
		}
	}
	return "", false
}

func (w *Workflows) cancelLoop(ctx context.Context, r *rand.Rand) {
	for {
		var pc pendingCancel
		select {
		case <-ctx.Done():
			return
		case pc = <-w.cancelC:
		}
		if !sleepCtx(ctx, time.Until(pc.at)) {
			return
		}
		w.cancel(ctx, w.node(r), pc.id, pc.key)
	}
}

func (w *Workflows) cancel(ctx context.Context, n Node, id, key string) {
	c, err := w.env.Client(w.canceller.IP, n)
	if err != nil {
		return
	}
	done := w.env.Rec.Invoke(w.canceller.Name, WfCancel, n.ID, &history.Value{Pool: WorkflowPool, Workflow: id, Key: key})
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	count, err := c.CancelWorkflow(actx, id)
	cancel()
	switch {
	case err == nil:
		done(history.OK, &history.Value{Pool: WorkflowPool, Workflow: id, Key: key, Count: count}, nil)
	case errors.Is(err, client.ErrNotFound):
		done(history.Fail, &history.Value{Pool: WorkflowPool, Workflow: id, Key: key, Code: "not_found"}, err)
	default:
		done(Outcome(err), &history.Value{Pool: WorkflowPool, Workflow: id, Key: key}, err)
	}
}

// StepPayload is the payload of a workflow member: what it does is its
// last field.
func StepPayload(key, step, mode string) string {
	return "wf|" + key + "|" + step + "|" + mode
}

// StepMode is what the member with payload p does.
func StepMode(p string) string {
	if i := strings.LastIndexByte(p, '|'); i >= 0 {
		return p[i+1:]
	}
	return ModeOK
}

// stepKey is the workflow key a member's payload names.
func stepKey(p string) string {
	parts := strings.Split(p, "|")
	if len(parts) == 4 {
		return parts[1]
	}
	return ""
}

// randomShape draws a small graph: a chain, a diamond, a fan-in or a
// random DAG of 3 to 5 steps, each step succeeding, failing for good or
// spawning, some dependents under policy done.
func randomShape(r *rand.Rand) (string, []wfStep) {
	var name string
	var steps []wfStep
	switch r.IntN(4) {
	case 0:
		name = "chain"
		steps = []wfStep{{name: "s0"}, {name: "s1", deps: []string{"s0"}}, {name: "s2", deps: []string{"s1"}}}
	case 1:
		name = "diamond"
		steps = []wfStep{{name: "s0"}, {name: "s1", deps: []string{"s0"}}, {name: "s2", deps: []string{"s0"}}, {name: "s3", deps: []string{"s1", "s2"}}}
	case 2:
		name = "fanin"
		steps = []wfStep{{name: "s0"}, {name: "s1"}, {name: "s2"}, {name: "s3", deps: []string{"s0", "s1", "s2"}}}
	default:
		name = "dag"
		n := 3 + r.IntN(3)
		for i := range n {
			st := wfStep{name: fmt.Sprintf("s%d", i)}
			if i > 0 {
				k := min(i, r.IntN(3))
				for _, j := range r.Perm(i)[:k] {
					st.deps = append(st.deps, fmt.Sprintf("s%d", j))
				}
				sort.Strings(st.deps)
			}
			steps = append(steps, st)
		}
	}
	for i := range steps {
		x := r.Float64()
		switch {
		case x < 0.12:
			steps[i].mode = ModeFail
		case x < 0.27:
			steps[i].mode = ModeSpawn
		default:
			steps[i].mode = ModeOK
		}
		if len(steps[i].deps) > 0 && r.Float64() < 0.25 {
			steps[i].policy = client.DependencyPolicyDone
		}
	}
	return name, steps
}

// doomedShape is a workflow whose first step fails for good: under policy
// succeeded its dependents (and theirs) must end cancelled without
// running; the step under policy done runs.
func doomedShape() []wfStep {
	return []wfStep{
		{name: "s0", mode: ModeFail},
		{name: "s1", deps: []string{"s0"}, mode: ModeOK},
		{name: "s2", deps: []string{"s1"}, mode: ModeOK},
		{name: "s3", deps: []string{"s0"}, mode: ModeOK, policy: client.DependencyPolicyDone},
	}
}

func describeShape(name string, steps []wfStep) string {
	parts := make([]string, len(steps))
	for i, st := range steps {
		s := st.name
		if len(st.deps) > 0 {
			s += "<" + strings.Join(st.deps, ",")
		}
		if st.policy != "" {
			s += "/" + st.policy
		}
		parts[i] = s + ":" + st.mode
	}
	return name + " " + strings.Join(parts, " ")
}

// WorkflowBehavior is the workflow workers' mix: short attempts doing
// what the payload says; 5% of the attempts outlive their lease (30% of
// the spawning ones, so that spawns are refused with their stale
// completion); 5% of the succeeding ones fail retryably first. A spawn
// adds two children (the second sometimes depending on the first; each
// failing for good 10% of the time) and a continuation; children spawn
// nothing.
func WorkflowBehavior(ttl time.Duration) func(r *rand.Rand, g Grant) Behavior {
	return func(r *rand.Rand, g Grant) Behavior {
		b := Behavior{Exec: time.Duration(r.IntN(300)) * time.Millisecond, Outcome: "success"}
		mode := StepMode(g.Payload)
		outlive := 0.05
		switch mode {
		case ModeFail:
			b.Outcome = "permanent"
		case ModeSpawn:
			outlive = 0.3
			key := stepKey(g.Payload)
			prefix := fmt.Sprintf("%s.%d.", g.Step, g.Token)
			childMode := func() string {
				if r.Float64() < 0.1 {
					return ModeFail
				}
				return ModeOK
			}
			a := ChildStep{Name: prefix + "a", Payload: StepPayload(key, prefix+"a", childMode())}
			c := ChildStep{Name: prefix + "b", Payload: StepPayload(key, prefix+"b", childMode())}
			if r.Float64() < 0.3 {
				c.DependsOn = []string{a.Name}
			}
			b.Children = []ChildStep{a, c}
			b.Then = &ChildStep{Name: prefix + "then", Payload: StepPayload(key, prefix+"then", ModeOK)}
		default:
			if r.Float64() < 0.05 {
				b.Outcome = "retryable"
			}
		}
		if r.Float64() < outlive {
			b.Outlive = true
			b.Exec = ttl + 1500*time.Millisecond + time.Duration(r.IntN(1000))*time.Millisecond
		}
		return b
	}
}

// ReadWorkflows reads, through the leader, every workflow (listed, and
// every acknowledged one) with its members, and the workflow each
// submitted key names, and records them. It retries each read until ctx
// ends.
func ReadWorkflows(ctx context.Context, env *Env, ip string, keys, acked []string) error {
	c, err := env.ClientAll(ip)
	if err != nil {
		return err
	}
	done := env.Rec.Invoke("final", FinalWorkflows, "", &history.Value{Pool: WorkflowPool})
	fail := func(err error) error {
		done(history.Info, nil, err)
		return err
	}
	seen := map[string]bool{}
	var ids []string
	after := ""
	for {
		var page []*client.Workflow
		var next string
		err := retry(ctx, func(actx context.Context) error {
			var e error
			page, next, e = c.ListWorkflows(actx, client.WorkflowListOptions{After: after, Limit: 500})
			return e
		})
		if err != nil {
			return fail(fmt.Errorf("listing workflows: %w", err))
		}
		for _, wf := range page {
			if !seen[wf.ID] {
				seen[wf.ID] = true
				ids = append(ids, wf.ID)
			}
		}
		if next == "" || len(page) == 0 {
			break
		}
		after = next
	}
	for _, id := range acked {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	states := make([]*history.WorkflowState, len(ids))
	err = parallel(len(ids), finalReaders, func(i int) error {
		var wf *client.Workflow
		err := retry(ctx, func(actx context.Context) error {
			var e error
			wf, e = c.GetWorkflow(actx, ids[i])
			if errors.Is(e, client.ErrNotFound) {
				wf, e = nil, nil
			}
			return e
		})
		if err != nil {
			return fmt.Errorf("reading workflow %s: %w", ids[i], err)
		}
		if wf == nil {
			return nil
		}
		ws := &history.WorkflowState{ID: wf.ID, Name: wf.Name, Key: wf.Key, Status: wf.Status, Parent: wf.Parent}
		for _, t := range wf.Tasks {
			ws.Members = append(ws.Members, TaskState(t))
		}
		states[i] = ws
		return nil
	})
	if err != nil {
		return fail(err)
	}
	var out []history.WorkflowState
	for _, ws := range states {
		if ws != nil {
			out = append(out, *ws)
		}
	}
	named := make([]string, len(keys))
	err = parallel(len(keys), finalReaders, func(i int) error {
		var wf *client.Workflow
		err := retry(ctx, func(actx context.Context) error {
			var e error
			wf, e = c.GetWorkflowByKey(actx, keys[i])
			if errors.Is(e, client.ErrNotFound) {
				wf, e = nil, nil
			}
			return e
		})
		if err != nil {
			return fmt.Errorf("reading workflow by key %s: %w", keys[i], err)
		}
		if wf != nil {
			named[i] = wf.ID
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	byKey := make(map[string]string, len(keys))
	for i, key := range keys {
		byKey[key] = named[i]
	}
	done(history.OK, &history.Value{Pool: WorkflowPool, Workflows: out, WorkflowKeys: byKey}, nil)
	return nil
}

// finalReaders is how many final reads of the workflows run at once.
const finalReaders = 8

// parallel runs fn(0..n-1) on up to k goroutines and returns the first
// error.
func parallel(n, k int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range min(k, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
