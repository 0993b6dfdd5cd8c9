package fsm

import (
	"container/heap"
	"slices"
	"strings"

	"github.com/google/btree"
)

// Reader reads the replicated state. A *State reads the latest applied
// entry; a *View one point of the log. Records it returns are shared and
// must not be modified.
type Reader interface {
	Epoch() uint64
	AppliedIndex() uint64
	Get(id string) (*Task, bool)
	GetByKey(key string) (*Task, bool)
	List(q ListQuery) (tasks []*Task, next string)
	Counts() []PoolCounts
	Schedule(name string) (*Schedule, bool)
	Schedules() []*Schedule
	Workflow(id string) (*Workflow, bool)
	WorkflowByKey(key string) (*Workflow, bool)
	WorkflowTasks(id string) []*Task
	ListWorkflows(q WorkflowQuery) (workflows []*Workflow, next string)
	// PoolSettings returns the replicated settings of a pool, if an
	// operator set any; Pools lists every pool that has settings.
	PoolSettings(name string) (*Pool, bool)
	Pools() []*Pool
	// OldestQueued returns the queued task of pool submitted first.
	OldestQueued(pool string) (*Task, bool)
}

var (
	_ Reader = (*State)(nil)
	_ Reader = (*View)(nil)
)

// ListQuery selects tasks for List.
type ListQuery struct {
	Pools    []string // empty = every pool
	Statuses []Status // empty = every status
	Kinds    []string // empty = every kind
	After    string   // return only ids after this one (exclusive cursor; before it with Desc)
	Limit    int      // at most this many tasks; <= 0 = no limit
	Desc     bool     // newest first: in decreasing id order
}

// match reports whether t passes the filters the indexes do not apply.
func (q *ListQuery) match(t *Task) bool {
	return len(q.Kinds) == 0 || slices.Contains(q.Kinds, t.Kind)
}

// past reports whether id comes after the cursor in the query's order.
func (q *ListQuery) past(id string) bool {
	if q.After == "" {
		return true
	}
	if q.Desc {
		return id < q.After
	}
	return id > q.After
}

// WorkflowQuery selects workflows for ListWorkflows.
type WorkflowQuery struct {
	Statuses []WorkflowStatus // empty = every status
	After    string           // return only ids after this one (exclusive cursor)
	Limit    int              // at most this many workflows; <= 0 = no limit
}

// PoolCounts is the number of tasks of one pool in each status.
type PoolCounts struct {
	Pool     string
	ByStatus [numStatuses]int64 // index = Status
}

// listChunk is how many index entries a List cursor reads at a time.
const listChunk = 256

// ---------------------------------------------------------------------------
// Reads on tables (the caller holds the lock, or owns an immutable clone).
// ---------------------------------------------------------------------------

func (t *tables) get(id string) (*Task, bool) {
	p := probe(id)
	r, ok := t.tasks.Get(p)
	unprobe(p)
	return r, ok
}

func (t *tables) has(id string) bool {
	p := probe(id)
	ok := t.tasks.Has(p)
	unprobe(p)
	return ok
}

func (t *tables) getByKey(key string) (*Task, bool) {
	k, ok := t.keys.Get(keyItem{key: key})
	if !ok {
		return nil, false
	}
	return t.get(k.id)
}

func (t *tables) schedule(name string) (*Schedule, bool) {
	it, ok := t.scheds.Get(schedItem{name: name})
	return it.s, ok
}

func (t *tables) schedules() []*Schedule {
	out := make([]*Schedule, 0, t.scheds.Len())
	t.scheds.Ascend(func(it schedItem) bool {
		out = append(out, it.s)
		return true
	})
	return out
}

func (t *tables) poolSettings(name string) (*Pool, bool) {
	it, ok := t.settings.Get(poolItem{name: name})
	return it.p, ok
}

func (t *tables) poolList() []*Pool {
	out := make([]*Pool, 0, t.settings.Len())
	t.settings.Ascend(func(it poolItem) bool {
		out = append(out, it.p)
		return true
	})
	return out
}

// oldestQueued is the first queued task of pool in id (submit) order.
func (t *tables) oldestQueued(pool string) (*Task, bool) {
	p := t.pools[pool]
	if p == nil || p.byStatus[StatusQueued] == nil {
		return nil, false
	}
	return p.byStatus[StatusQueued].Min()
}

func (t *tables) tombstoned(nodeID string) bool {
	return t.tombs.Has(Tombstone{NodeID: nodeID})
}

func (t *tables) tombstones() []Tombstone {
	out := make([]Tombstone, 0, t.tombs.Len())
	t.tombs.Ascend(func(tb Tombstone) bool {
		out = append(out, tb)
		return true
	})
	return out
}

func (t *tables) workflow(id string) (*Workflow, bool) {
	it, ok := t.wfs.Get(wfItem{id: id})
	return it.w, ok
}

func (t *tables) workflowByKey(key string) (*Workflow, bool) {
	k, ok := t.wfKeys.Get(keyItem{key: key})
	if !ok {
		return nil, false
	}
	return t.workflow(k.id)
}

// workflowTasks returns the members of workflow id in id order.
func (t *tables) workflowTasks(id string) []*Task {
	var out []*Task
	t.members.AscendGreaterOrEqual(memberItem{wf: id}, func(mi memberItem) bool {
		if mi.wf != id {
			return false
		}
		task, _ := t.get(mi.id)
		out = append(out, task)
		return true
	})
	return out
}

func (t *tables) listWorkflows(q WorkflowQuery) ([]*Workflow, string) {
	var out []*Workflow
	t.wfs.AscendGreaterOrEqual(wfItem{id: q.After}, func(it wfItem) bool {
		if it.id == q.After {
			return true
		}
		if len(q.Statuses) > 0 && !slices.Contains(q.Statuses, it.w.Status) {
			return true
		}
		out = append(out, it.w)
		return q.Limit <= 0 || len(out) <= q.Limit
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
		return out, out[len(out)-1].ID
	}
	return out, ""
}

// countsList returns the counts of every pool, in pool order.
func (t *tables) countsList() []PoolCounts {
	out := make([]PoolCounts, 0, len(t.pools))
	for name, p := range t.pools {
		out = append(out, PoolCounts{Pool: name, ByStatus: p.counts})
	}
	slices.SortFunc(out, func(a, b PoolCounts) int { return strings.Compare(a.Pool, b.Pool) })
	return out
}

func (t *tables) list(q ListQuery) ([]*Task, string) {
	want := q.Limit + 1 // one more than returned, to know whether more remain
	if q.Limit <= 0 {
		want = -1
	}
	var out []*Task
	if len(q.Pools) == 0 && len(q.Statuses) == 0 {
		visit := func(r *Task) bool {
			if !q.past(r.ID) || !q.match(r) {
				return true
			}
			out = append(out, r)
			return len(out) != want
		}
		after := &Task{ID: q.After}
		switch {
		case !q.Desc:
			t.tasks.AscendGreaterOrEqual(after, visit)
		case q.After == "":
			t.tasks.Descend(visit)
		default:
			t.tasks.DescendLessOrEqual(after, visit)
		}
	} else {
		out = t.listMerge(q, want)
	}
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
		return out, out[len(out)-1].ID
	}
	return out, ""
}

// listMerge merges, in id order, the (pool, status) ranges of the pool index
// that q selects, skipping ranges that hold no task.
func (t *tables) listMerge(q ListQuery, want int) []*Task {
	statuses := AllStatuses
	if len(q.Statuses) > 0 {
		statuses = nil
		for _, st := range q.Statuses {
			if st != StatusUnknown && st < numStatuses && !slices.Contains(statuses, st) {
				statuses = append(statuses, st)
			}
		}
	}
	var counts []PoolCounts
	if len(q.Pools) == 0 {
		counts = t.countsList()
	} else {
		for _, p := range q.Pools {
			if pi, ok := t.pools[p]; ok && !slices.ContainsFunc(counts, func(c PoolCounts) bool { return c.Pool == p }) {
				counts = append(counts, PoolCounts{Pool: p, ByStatus: pi.counts})
			}
		}
	}
	chunk := listChunk
	if want > 0 && want < chunk {
		chunk = want
	}
	var h cursorHeap
	for _, pc := range counts {
		for _, st := range statuses {
			if pc.ByStatus[st] == 0 {
				continue
			}
			c := &cursor{idx: t.pools[pc.Pool].byStatus[st], after: q.After, desc: q.Desc}
			if c.fill(chunk) {
				h.cs = append(h.cs, c)
			}
		}
	}
	h.desc = q.Desc
	heap.Init(&h)
	var out []*Task
	for len(h.cs) > 0 && len(out) != want {
		c := h.cs[0]
		if task := c.buf[c.pos]; q.match(task) {
			out = append(out, task)
		}
		if c.next(chunk) {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	return out
}

// cursor walks the tasks of one (pool, status) in id order (decreasing
// with desc), reading them a chunk at a time.
type cursor struct {
	idx   *btree.BTreeG[*Task]
	probe *Task   // a record with the id after only, to look it up in idx
	after string  // last id read from the index (exclusive bound of the next fill)
	desc  bool    // newest first
	buf   []*Task // tasks read and not yet consumed start at buf[pos]
	pos   int
	ended bool // the range has no entries after buf
}

// fill reads up to n more entries after c.after; it reports whether any
// were found.
func (c *cursor) fill(n int) bool {
	c.buf, c.pos = c.buf[:0], 0
	if c.ended {
		return false
	}
	visit := func(t *Task) bool {
		if c.after != "" && t.ID == c.after {
			return true
		}
		c.buf = append(c.buf, t)
		return len(c.buf) < n
	}
	if c.probe == nil {
		c.probe = &Task{}
	}
	c.probe.ID = c.after
	switch {
	case !c.desc:
		c.idx.AscendGreaterOrEqual(c.probe, visit)
	case c.after == "":
		c.idx.Descend(visit)
	default:
		c.idx.DescendLessOrEqual(c.probe, visit)
	}
	if len(c.buf) < n {
		c.ended = true
	}
	if len(c.buf) > 0 {
		c.after = c.buf[len(c.buf)-1].ID
	}
	return len(c.buf) > 0
}

// next consumes the head; it reports whether the cursor has another.
func (c *cursor) next(n int) bool {
	c.pos++
	if c.pos < len(c.buf) {
		return true
	}
	return c.fill(n)
}

// cursorHeap orders cursors by the id of their head (the largest first
// with desc).
type cursorHeap struct {
	cs   []*cursor
	desc bool
}

func (h cursorHeap) Len() int { return len(h.cs) }
func (h cursorHeap) Less(i, j int) bool {
	a, b := h.cs[i].buf[h.cs[i].pos].ID, h.cs[j].buf[h.cs[j].pos].ID
	if h.desc {
		return a > b
	}
	return a < b
}
func (h cursorHeap) Swap(i, j int) { h.cs[i], h.cs[j] = h.cs[j], h.cs[i] }
func (h *cursorHeap) Push(x any)   { h.cs = append(h.cs, x.(*cursor)) }
func (h *cursorHeap) Pop() any {
	old := h.cs
	c := old[len(old)-1]
	h.cs = old[:len(old)-1]
	return c
}

// ---------------------------------------------------------------------------
// Reads on State
// ---------------------------------------------------------------------------

// Epoch returns the current engine epoch (0 before the first bump).
func (s *State) Epoch() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.epoch
}

// EpochTerm returns the log term of the entry that set the current epoch.
func (s *State) EpochTerm() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.epochTerm
}

// AppliedIndex returns the log index of the last entry that was applied
// (entries rejected with an error do not count).
func (s *State) AppliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.applied
}

// Get returns the task with the given id.
func (s *State) Get(id string) (*Task, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.get(id)
}

// GetByKey returns the task that holds the given idempotency key.
func (s *State) GetByKey(key string) (*Task, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.getByKey(key)
}

// List returns, in id order, the tasks in any of q.Pools with any of
// q.Statuses whose id is after q.After, at most q.Limit of them. next is the
// cursor for the following page, or "" when no more tasks match.
func (s *State) List(q ListQuery) (tasks []*Task, next string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.list(q)
}

// Counts returns the number of tasks per pool and status, sorted by pool.
// Pools without tasks are left out.
func (s *State) Counts() []PoolCounts {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.countsList()
}

// Schedule returns the schedule with the given name.
func (s *State) Schedule(name string) (*Schedule, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.schedule(name)
}

// Schedules returns every schedule in name order.
func (s *State) Schedules() []*Schedule {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.schedules()
}

// Workflow returns the workflow with the given id.
func (s *State) Workflow(id string) (*Workflow, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.workflow(id)
}

// WorkflowByKey returns the workflow that holds the given idempotency key.
func (s *State) WorkflowByKey(key string) (*Workflow, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.workflowByKey(key)
}

// WorkflowTasks returns the members of workflow id, in id order.
func (s *State) WorkflowTasks(id string) []*Task {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.workflowTasks(id)
}

// ListWorkflows returns, in id order, the workflows with any of q.Statuses
// whose id is after q.After, at most q.Limit of them. next is the cursor
// for the following page, or "" when no more match.
func (s *State) ListWorkflows(q WorkflowQuery) (workflows []*Workflow, next string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.listWorkflows(q)
}

// PoolSettings returns the replicated settings of pool name, if any.
func (s *State) PoolSettings(name string) (*Pool, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.poolSettings(name)
}

// Pools returns the replicated settings of every pool that has them, by
// name.
func (s *State) Pools() []*Pool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.poolList()
}

// OldestQueued returns the queued task of pool submitted first.
func (s *State) OldestQueued(pool string) (*Task, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.oldestQueued(pool)
}

// Tombstoned reports whether nodeID was removed from the cluster on purpose.
func (s *State) Tombstoned(nodeID string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.tombstoned(nodeID)
}

// Tombstones returns every tombstone in node id order.
func (s *State) Tombstones() []Tombstone {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.t.tombstones()
}

// View returns an immutable view of the current state in O(1): entries
// applied later do not show in it. Taking a view makes the next writes copy
// the tree nodes they touch.
func (s *State) View() *View {
	s.mu.Lock() // cloning a B-tree writes to it
	defer s.mu.Unlock()
	return &View{t: s.t.clone()}
}

// ---------------------------------------------------------------------------
// View
// ---------------------------------------------------------------------------

// View is an immutable copy of the state at one point of the log. It is safe
// for concurrent use and stays valid while the State moves on.
type View struct {
	t *tables
}

// Epoch returns the engine epoch of the view.
func (v *View) Epoch() uint64 { return v.t.epoch }

// EpochTerm returns the log term of the entry that set the view's epoch.
func (v *View) EpochTerm() uint64 { return v.t.epochTerm }

// AppliedIndex returns the log index of the last entry applied in the view.
func (v *View) AppliedIndex() uint64 { return v.t.applied }

// Get returns the task with the given id.
func (v *View) Get(id string) (*Task, bool) { return v.t.get(id) }

// GetByKey returns the task that holds the given idempotency key.
func (v *View) GetByKey(key string) (*Task, bool) { return v.t.getByKey(key) }

// List is State.List on the view.
func (v *View) List(q ListQuery) (tasks []*Task, next string) { return v.t.list(q) }

// Counts returns the number of tasks per pool and status, sorted by pool.
func (v *View) Counts() []PoolCounts { return v.t.countsList() }

// Schedule returns the schedule with the given name.
func (v *View) Schedule(name string) (*Schedule, bool) { return v.t.schedule(name) }

// Schedules returns every schedule in name order.
func (v *View) Schedules() []*Schedule { return v.t.schedules() }

// Workflow returns the workflow with the given id.
func (v *View) Workflow(id string) (*Workflow, bool) { return v.t.workflow(id) }

// WorkflowByKey returns the workflow that holds the given idempotency key.
func (v *View) WorkflowByKey(key string) (*Workflow, bool) { return v.t.workflowByKey(key) }

// WorkflowTasks returns the members of workflow id, in id order.
func (v *View) WorkflowTasks(id string) []*Task { return v.t.workflowTasks(id) }

// ListWorkflows is State.ListWorkflows on the view.
func (v *View) ListWorkflows(q WorkflowQuery) (workflows []*Workflow, next string) {
	return v.t.listWorkflows(q)
}

// Tombstoned reports whether nodeID was removed from the cluster on purpose.
func (v *View) PoolSettings(name string) (*Pool, bool) { return v.t.poolSettings(name) }

func (v *View) Pools() []*Pool { return v.t.poolList() }

func (v *View) OldestQueued(pool string) (*Task, bool) { return v.t.oldestQueued(pool) }

// EachPool calls fn for the settings of every pool that has them, by name.
func (v *View) EachPool(fn func(*Pool) bool) {
	v.t.settings.Ascend(func(it poolItem) bool { return fn(it.p) })
}

func (v *View) Tombstoned(nodeID string) bool { return v.t.tombstoned(nodeID) }

// Tombstones returns every tombstone in node id order.
func (v *View) Tombstones() []Tombstone { return v.t.tombstones() }

// Len returns the number of tasks in the view.
func (v *View) Len() int { return v.t.tasks.Len() }

// EachTask calls fn for every task in id order until fn returns false.
func (v *View) EachTask(fn func(*Task) bool) {
	v.t.tasks.Ascend(fn)
}

// EachWorkflow calls fn for every workflow in id order until fn returns
// false.
func (v *View) EachWorkflow(fn func(*Workflow) bool) {
	v.t.wfs.Ascend(func(it wfItem) bool { return fn(it.w) })
}

// EachSchedule calls fn for every schedule in name order until fn returns
// false.
func (v *View) EachSchedule(fn func(*Schedule) bool) {
	v.t.scheds.Ascend(func(it schedItem) bool { return fn(it.s) })
}
