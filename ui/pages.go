package ui

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

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
}

// query returns the filter as URL parameters, with after as the cursor.
func (f tasksFilter) query(after string) string {
	v := url.Values{}
	for k, s := range map[string]string{"pool": f.Pool, "status": f.Status, "kind": f.Kind, "key": f.Key, "after": after} {
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
		if (f.Pool == "" || t.Pool == f.Pool) && (f.Status == "" || t.Status == f.Status) && (f.Kind == "" || t.Kind == f.Kind) {
			d.Tasks = []*client.Task{t}
		}
		return "tasks", nil
	}
	opt := client.ListOptions{NewestFirst: !f.Oldest, After: f.After, Limit: f.Limit, Stale: true}
	if f.Pool != "" {
		opt.Pools = []string{f.Pool}
	}
	if f.Status != "" {
		opt.Statuses = []string{f.Status}
	}
	if f.Kind != "" {
		opt.Kinds = []string{f.Kind}
	}
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

type taskData struct {
	Task *client.Task
	// Stale says the task was read from the node's own replica because the
	// leader could not be asked.
	Stale    bool
	StaleWhy string
	Payload  bytesView
	Output   bytesView
}

// taskPage shows one task: as the leader has it, else as this node's
// replica does.
func (c *Console) taskPage(ctx context.Context, cl *client.Client, r *http.Request, p *pageData) (string, error) {
	id := r.PathValue("id")
	p.Title, p.Nav, p.Live, p.LiveTask = "Task "+id, "tasks", "events", id
	t, err := cl.Get(ctx, id)
	d := &taskData{}
	if err != nil && !errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrPermissionDenied) {
		if st, _, serr := cl.GetStale(ctx, id); serr == nil {
			t, d.Stale, d.StaleWhy, err = st, true, err.Error(), nil
		}
	}
	if err != nil {
		return "task", err
	}
	d.Task = t
	d.Payload = viewBytes(t.Payload)
	d.Output = viewBytes(t.Output)
	p.Data = d
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
}

func (c *Console) workflowPage(ctx context.Context, cl *client.Client, r *http.Request, p *pageData) (string, error) {
	id := r.PathValue("id")
	p.Title, p.Nav, p.Live, p.LiveWorkflow = "Workflow "+id, "workflows", "events", id
	wf, _, err := cl.GetWorkflowStale(ctx, id)
	if err != nil {
		return "workflow", err
	}
	steps := make(map[string]string, len(wf.Tasks))
	for _, t := range wf.Tasks {
		steps[t.ID] = t.Step
	}
	p.Data = &workflowData{Workflow: wf, Graph: layout(wf.Tasks), Steps: steps}
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
