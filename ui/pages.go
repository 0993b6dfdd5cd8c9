package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cronoq/cronoq/client"
)

// statusOrder is the order the task statuses are shown in.
var statusOrder = []string{
	client.StatusBlocked, client.StatusParked, client.StatusScheduled, client.StatusQueued,
	client.StatusRunning, client.StatusRetrying, client.StatusSucceeded, client.StatusFailed,
	client.StatusCancelled, client.StatusExpired,
}

// ---------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------

type clusterData struct {
	Health     client.Health
	HealthErr  string
	Members    []client.Member
	MembersErr string
	Peers      []client.Peer
	PeersErr   string
}

// clusterPage shows the node's view of the cluster: its health, the gossip
// members and the Raft peers. Each part that cannot be read says why; the
// others are shown.
func (c *Console) clusterPage(ctx context.Context, cl *client.Client, _ *http.Request, p *pageData) (string, error) {
	p.Title, p.Nav, p.Live = "Cluster", "cluster", "poll"
	d := &clusterData{}
	p.Data = d
	var err error
	if d.Health, err = cl.Health(ctx); err != nil {
		d.HealthErr = err.Error()
	}
	if d.Members, err = cl.Members(ctx); err != nil {
		d.MembersErr = err.Error()
	}
	slices.SortFunc(d.Members, func(a, b client.Member) int { return strings.Compare(a.Name, b.Name) })
	if d.Peers, err = cl.Peers(ctx); err != nil {
		d.PeersErr = err.Error()
	}
	slices.SortFunc(d.Peers, func(a, b client.Peer) int { return strings.Compare(a.ID, b.ID) })
	if d.HealthErr != "" && d.MembersErr != "" && d.PeersErr != "" {
		return "cluster", errors.New(d.HealthErr)
	}
	return "cluster", nil
}

// ---------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------

type poolsData struct {
	Statuses   []string
	Pools      []client.Pool
	Workers    []client.WorkerInfo
	WorkersErr string
}

func (c *Console) poolsPage(ctx context.Context, cl *client.Client, _ *http.Request, p *pageData) (string, error) {
	p.Title, p.Nav, p.Live = "Pools", "pools", "events"
	d := &poolsData{Statuses: statusOrder}
	p.Data = d
	pools, err := cl.ListPools(ctx)
	if err != nil {
		return "pools", err
	}
	slices.SortFunc(pools, func(a, b client.Pool) int { return strings.Compare(a.Name, b.Name) })
	d.Pools = pools
	if d.Workers, err = cl.ListWorkers(ctx, ""); err != nil {
		d.WorkersErr = err.Error()
	}
	slices.SortFunc(d.Workers, func(a, b client.WorkerInfo) int {
		return cmpOr(strings.Compare(a.Pool, b.Pool), strings.Compare(a.ID, b.ID))
	})
	return "pools", nil
}

func cmpOr(cs ...int) int {
	for _, c := range cs {
		if c != 0 {
			return c
		}
	}
	return 0
}

// poolAction pauses or resumes a pool.
func (c *Console) poolAction(ctx context.Context, cl *client.Client, r *http.Request) (string, string, error) {
	name := r.PathValue("name")
	var err error
	switch r.PathValue("action") {
	case "pause":
		_, err = cl.PausePool(ctx, name)
	case "resume":
		_, err = cl.ResumePool(ctx, name)
	default:
		return "", "", badRequest("unknown pool action %q (pause or resume)", r.PathValue("action"))
	}
	if err != nil {
		return "", "", err
	}
	return Prefix + "pools", "pool " + name + " " + r.PathValue("action") + "d", nil
}

// ---------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------

// defaultPageSize is the tasks (and workflows) of one page; maxPageSize
// caps what a page may ask for.
const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

type tasksFilter struct {
	Pool, Status, Kind, Key string
	Oldest                  bool
	Limit                   int
	After                   string
	// From and To bound the submission times as given (FromTime and
	// ToTime parsed; zero: no bound).
	From, To         string
	FromTime, ToTime time.Time
}

// query returns the filter as URL parameters, with after as the cursor.
func (f tasksFilter) query(after string) string {
	v := url.Values{}
	for k, s := range map[string]string{"pool": f.Pool, "status": f.Status, "kind": f.Kind, "key": f.Key, "after": after, "from": f.From, "to": f.To} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if f.Oldest {
		v.Set("order", "oldest")
	}
	if f.Limit != defaultPageSize {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v.Encode()
}

type tasksData struct {
	Filter   tasksFilter
	Statuses []string
	Tasks    []*client.Task
	// Next is the query of the next page ("" on the last); First that of
	// the first page.
	Next, First string
}

func parseTasksFilter(q url.Values) (tasksFilter, error) {
	f := tasksFilter{
		Pool: strings.TrimSpace(q.Get("pool")), Status: q.Get("status"), Kind: strings.TrimSpace(q.Get("kind")),
		Key: strings.TrimSpace(q.Get("key")), After: q.Get("after"), Limit: defaultPageSize,
	}
	switch q.Get("order") {
	case "", "newest":
	case "oldest":
		f.Oldest = true
	default:
		return f, badRequest("order %q: newest or oldest", q.Get("order"))
	}
	if f.Status != "" && !slices.Contains(statusOrder, f.Status) {
		return f, badRequest("status %q: one of %s", f.Status, strings.Join(statusOrder, ", "))
	}
	now := time.Now()
	var err error
	f.From, f.To = strings.TrimSpace(q.Get("from")), strings.TrimSpace(q.Get("to"))
	if f.FromTime, err = parseWhen(f.From, now); err != nil {
		return f, badRequest("from: %v", err)
	}
	if f.ToTime, err = parseWhen(f.To, now); err != nil {
		return f, badRequest("to: %v", err)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageSize {
			return f, badRequest("limit %q: a number from 1 to %d", s, maxPageSize)
		}
		f.Limit = n
	}
	return f, nil
}

// tasksPage lists tasks, newest first unless asked otherwise, from the
// node's own replica; a key names one task.
func (c *Console) tasksPage(ctx context.Context, cl *client.Client, r *http.Request, p *pageData) (string, error) {
	p.Title, p.Nav, p.Live = "Tasks", "tasks", "events"
	f, err := parseTasksFilter(r.URL.Query())
	d := &tasksData{Filter: f, Statuses: statusOrder}
	p.Data = d
	if err != nil {
		return "tasks", err
	}
	if f.Pool != "" {
		p.LivePools = []string{f.Pool}
	}
	d.First = f.query("")
	if f.Key != "" {
		t, err := cl.GetByKey(ctx, f.Key)
		if errors.Is(err, client.ErrNotFound) {
			return "tasks", nil
		}
		if err != nil {
			return "tasks", err
		}
		if (f.Pool == "" || t.Pool == f.Pool) && (f.Status == "" || t.Status == f.Status) && (f.Kind == "" || t.Kind == f.Kind) && f.within(t) {
			d.Tasks = []*client.Task{t}
		}
		return "tasks", nil
	}
	opt := client.ListOptions{NewestFirst: !f.Oldest, After: f.After, Limit: f.Limit, Stale: true}
	if !f.FromTime.IsZero() || !f.ToTime.IsZero() {
		opt.Limit = maxPageSize
	}
	if f.Pool != "" {
		opt.Pools = []string{f.Pool}
	}
	if f.Status != "" {
		opt.Statuses = []string{f.Status}
	}
	if f.Kind != "" {
		opt.Kinds = []string{f.Kind}
	}
	if f.FromTime.IsZero() && f.ToTime.IsZero() {
		tasks, next, err := cl.List(ctx, opt)
		if err != nil {
			return "tasks", err
		}
		d.Tasks = tasks
		if next != "" {
			d.Next = f.query(next)
		}
		return "tasks", nil
	}
	tasks, next, err := scanByTime(ctx, cl, opt, f)
	if err != nil {
		return "tasks", err
	}
	d.Tasks = tasks
	if next != "" {
		d.Next = f.query(next)
	}
	return "tasks", nil
}

// within reports whether t was submitted within the filter's bounds.
func (f tasksFilter) within(t *client.Task) bool {
	return (f.FromTime.IsZero() || !t.SubmittedAt.Before(f.FromTime)) && (f.ToTime.IsZero() || !t.SubmittedAt.After(f.ToTime))
}

// maxScan bounds the tasks read to fill one page filtered by time; the
// page then ends early, with a link that resumes the scan.
const maxScan = 20000

// timeSlack is how far out of order submission times may be in id order
// (ids are assigned in order by the leader, submission times read its
// clock, and a new leader's clock may be a little behind).
const timeSlack = time.Minute

// scanByTime lists the tasks of opt whose submission time is within the
// filter's bounds: the list API has no time filter, so it reads pages in
// id order and keeps the tasks in the bounds, stopping once the ids are
// past the bound the order goes towards (with timeSlack) or after maxScan
// tasks. next is the id to resume after, "" when the scan ended.
func scanByTime(ctx context.Context, cl *client.Client, opt client.ListOptions, f tasksFilter) ([]*client.Task, string, error) {
	past := func(t *client.Task) bool {
		if opt.NewestFirst {
			return !f.FromTime.IsZero() && t.SubmittedAt.Before(f.FromTime.Add(-timeSlack))
		}
		return !f.ToTime.IsZero() && t.SubmittedAt.After(f.ToTime.Add(timeSlack))
	}
	var out []*client.Task
	scanned := 0
	for {
		page, next, err := cl.List(ctx, opt)
		if err != nil {
			return nil, "", err
		}
		for _, t := range page {
			scanned++
			if past(t) {
				return out, "", nil
			}
			if f.within(t) {
				out = append(out, t)
			}
			if len(out) == f.Limit || scanned >= maxScan {
				return out, t.ID, nil
			}
		}
		if next == "" {
			return out, "", nil
		}
		opt.After = next
	}
}

// parseWhen reads a time bound: RFC 3339, a UTC date and time
// ("2006-01-02T15:04", as a browser's datetime-local input sends it,
// "2006-01-02 15:04:05", "2006-01-02"), or a duration back from now
// ("15m", "2h").
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (RFC 3339, UTC 2006-01-02 15:04:05) nor a duration back from now (15m)", s)
}

// leaderFirst reads id through the leader within leaderReadTimeout and,
// when the leader cannot be asked (no leader, or none within the time),
// from this node's replica with what is left of ctx; staleWhy is then why
// the leader could not be asked, and "" when it answered. An answer of the
// leader's (not found, permission denied) stands.
func leaderFirst[T any](ctx context.Context,
	leader func(context.Context, string) (T, error),
	replica func(context.Context, string) (T, client.ReadMeta, error),
	id string) (v T, staleWhy string, err error) {
	lctx, cancel := context.WithTimeout(ctx, leaderReadTimeout)
	v, err = leader(lctx, id)
	cancel()
	if err == nil || errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrPermissionDenied) {
		return v, "", err
	}
	if r, _, rerr := replica(ctx, id); rerr == nil {
		return r, err.Error(), nil
	}
	return v, "", err
}

type taskData struct {
	Task *client.Task
	// StaleWhy, when set, says that the task was read from the node's own
	// replica, and why the leader could not be asked.
	StaleWhy string
	Payload  bytesView
	Output   bytesView
}

// taskPage shows one task: as the leader has it, else as this node's
// replica does.
func (c *Console) taskPage(ctx context.Context, cl *client.Client, r *http.Request, p *pageData) (string, error) {
	id := r.PathValue("id")
	p.Title, p.Nav, p.Live, p.LiveTask = "Task "+id, "tasks", "events", id
	t, why, err := leaderFirst(ctx, cl.Get, cl.GetStale, id)
	if err != nil {
		return "task", err
	}
	p.Data = &taskData{Task: t, StaleWhy: why, Payload: viewBytes(t.Payload), Output: viewBytes(t.Output)}
	p.LivePools = []string{t.Pool}
	return "task", nil
}

// taskAction cancels or retries a task.
func (c *Console) taskAction(ctx context.Context, cl *client.Client, r *http.Request) (string, string, error) {
	id := r.PathValue("id")
	back := Prefix + "tasks/" + url.PathEscape(id)
	switch r.PathValue("action") {
	case "cancel":
		res, err := cl.CancelTask(ctx, id)
		if err != nil {
			return "", "", err
		}
		if !res.Cancelled {
			return back, "the task had already ended", nil
		}
		return back, "cancelled", nil
	case "retry":
		if _, err := cl.RetryTask(ctx, client.ByID(id)); err != nil {
			return "", "", err
		}
		return back, "retried", nil
	}
	return "", "", badRequest("unknown task action %q (cancel or retry)", r.PathValue("action"))
}

// ---------------------------------------------------------------------------
// Workflows
// ---------------------------------------------------------------------------

var workflowStatuses = []string{client.WorkflowRunning, client.WorkflowSucceeded, client.WorkflowFailed, client.WorkflowCancelled}

type workflowsData struct {
	Status    string
	Statuses  []string
	Workflows []*client.Workflow
	Next      string
}

// workflowsPage lists workflows in id order from the node's own replica.
func (c *Console) workflowsPage(ctx context.Context, cl *client.Client, r *http.Request, p *pageData) (string, error) {
	p.Title, p.Nav, p.Live = "Workflows", "workflows", "events"
	q := r.URL.Query()
	d := &workflowsData{Status: q.Get("status"), Statuses: workflowStatuses}
	p.Data = d
	if d.Status != "" && !slices.Contains(workflowStatuses, d.Status) {
		return "workflows", badRequest("status %q: one of %s", d.Status, strings.Join(workflowStatuses, ", "))
	}
	opt := client.WorkflowListOptions{After: q.Get("after"), Limit: defaultPageSize, Stale: true}
	if d.Status != "" {
		opt.Statuses = []string{d.Status}
	}
	wfs, next, err := cl.ListWorkflows(ctx, opt)
	if err != nil {
		return "workflows", err
	}
	d.Workflows = wfs
	if next != "" {
		v := url.Values{"after": {next}}
		if d.Status != "" {
			v.Set("status", d.Status)
		}
		d.Next = v.Encode()
	}
	return "workflows", nil
}

type workflowData struct {
	Workflow *client.Workflow
	Graph    graph
	// Steps names the members by id.
	Steps map[string]string
	// StaleWhy, when set, says that the workflow was read from the node's
	// own replica, and why the leader could not be asked.
	StaleWhy string
}

// workflowPage shows one workflow and its DAG: as the leader has it (a
// workflow just submitted through another node is shown, not "not found"),
// else as this node's replica does.
func (c *Console) workflowPage(ctx context.Context, cl *client.Client, r *http.Request, p *pageData) (string, error) {
	id := r.PathValue("id")
	p.Title, p.Nav, p.Live, p.LiveWorkflow = "Workflow "+id, "workflows", "events", id
	wf, why, err := leaderFirst(ctx, cl.GetWorkflow, cl.GetWorkflowStale, id)
	if err != nil {
		return "workflow", err
	}
	steps := make(map[string]string, len(wf.Tasks))
	for _, t := range wf.Tasks {
		steps[t.ID] = t.Step
	}
	p.Data = &workflowData{Workflow: wf, Graph: layout(wf.Tasks), Steps: steps, StaleWhy: why}
	return "workflow", nil
}

func (c *Console) workflowAction(ctx context.Context, cl *client.Client, r *http.Request) (string, string, error) {
	id := r.PathValue("id")
	if r.PathValue("action") != "cancel" {
		return "", "", badRequest("unknown workflow action %q (cancel)", r.PathValue("action"))
	}
	n, err := cl.CancelWorkflow(ctx, id)
	if err != nil {
		return "", "", err
	}
	return Prefix + "workflows/" + url.PathEscape(id), strconv.Itoa(n) + " members cancelled", nil
}

// ---------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------

func (c *Console) schedulesPage(ctx context.Context, cl *client.Client, _ *http.Request, p *pageData) (string, error) {
	p.Title, p.Nav, p.Live = "Recurring schedules", "schedules", "poll"
	scheds, err := cl.ListSchedules(ctx)
	if err != nil {
		return "schedules", err
	}
	slices.SortFunc(scheds, func(a, b client.Schedule) int { return strings.Compare(a.Name, b.Name) })
	p.Data = scheds
	return "schedules", nil
}

func (c *Console) scheduleAction(ctx context.Context, cl *client.Client, r *http.Request) (string, string, error) {
	name := r.PathValue("name")
	var pause bool
	switch r.PathValue("action") {
	case "pause":
		pause = true
	case "resume":
	default:
		return "", "", badRequest("unknown schedule action %q (pause or resume)", r.PathValue("action"))
	}
	if _, err := cl.PauseSchedule(ctx, name, pause); err != nil {
		return "", "", err
	}
	return Prefix + "schedules", "schedule " + name + " " + r.PathValue("action") + "d", nil
}
