package fsm

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func insertParked(id, pool string) Mutation {
	m := insert(id, pool, "")
	m.Insert.Status = StatusParked
	return m
}

func admit(id string, st Status) Mutation {
	return Mutation{Admit: &Admit{ID: id, Status: st}}
}

// TestAdmit holds Admit to its precondition: a parked task becomes queued,
// scheduled or (with dependencies) blocked, and nothing else is admitted.
func TestAdmit(t *testing.T) {
	h := newHarness(t)
	h.ok(insertParked("a", "p"), insertParked("b", "p"), insert("q", "p", ""))
	require.Equal(t, int64(2), h.s.View().Counts()[0].ByStatus[StatusParked])

	h.ok(admit("a", StatusQueued))
	a := h.task("a")
	require.Equal(t, StatusQueued, a.Status)
	require.Equal(t, h.index, a.ModifyIndex)
	require.Equal(t, baseTime, a.UpdatedAt, "the batch time")

	for _, tc := range []struct {
		name string
		m    Mutation
		want string
	}{
		{"not parked", admit("q", StatusQueued), "task is queued, want parked"},
		{"admitted twice", admit("a", StatusQueued), "task is queued, want parked"},
		{"unknown", admit("zz", StatusQueued), "no such task"},
		{"to running", admit("b", StatusRunning), "want queued, scheduled or blocked"},
		{"blocked without dependencies", admit("b", StatusBlocked), "blocked without dependencies"},
	} {
		rej := h.reject(0, tc.m)
		require.Contains(t, rej.Reason, tc.want, tc.name)
	}
	h.ok(admit("b", StatusScheduled))
	require.Equal(t, StatusScheduled, h.task("b").Status)

	// With dependencies it may be admitted blocked.
	dep := insertParked("c", "p")
	dep.Insert.MakeFlow().DependsOn = []string{"q"}
	h.ok(dep, admit("c", StatusBlocked))
	require.Equal(t, StatusBlocked, h.task("c").Status)
	checkIndexes(t, h.s.View())
}

// TestPutPool holds pool settings to their checks, and reads to what was
// put last.
func TestPutPool(t *testing.T) {
	h := newHarness(t)
	h.ok(Mutation{PutPool: &Pool{Name: "b", MaxRunning: 2}}, Mutation{PutPool: goldenPool()})
	p, ok := h.s.PoolSettings("etl")
	require.True(t, ok)
	require.Equal(t, h.index, p.ModifyIndex)
	require.Equal(t, []string{"b", "etl"}, []string{h.s.Pools()[0].Name, h.s.Pools()[1].Name})

	changed := goldenPool()
	changed.Paused = false
	h.ok(Mutation{PutPool: changed})
	p, _ = h.s.PoolSettings("etl")
	require.False(t, p.Paused)
	before := p

	for _, tc := range []struct {
		name   string
		change func(*Pool)
		want   string
	}{
		{"no name", func(p *Pool) { p.Name = "" }, "name: must not be empty"},
		{"negative cap", func(p *Pool) { p.MaxRunning = -1 }, "max_running"},
		{"too many classes", func(p *Pool) { p.MaxPendingPerClass = make([]int64, 4) }, "max_pending_per_class"},
		{"unknown overflow", func(p *Pool) { p.Overflow = 3 }, "overflow: unknown policy 3"},
		{"negative rate", func(p *Pool) { p.Rate = -1 }, "rate"},
		{"kind rates out of order", func(p *Pool) { p.KindRates = []KindRate{{Kind: "b", Rate: 1}, {Kind: "a", Rate: 1}} }, "out of order"},
		{"kind rate of zero", func(p *Pool) { p.KindRates = []KindRate{{Kind: "a"}} }, "must be a positive number"},
		{"unknown ordering", func(p *Pool) { p.Ordering = 2 }, "ordering: unknown policy"},
		{"negative grace", func(p *Pool) { p.LeaseGrace = -time.Second }, "lease_grace"},
		{"kinds out of order", func(p *Pool) { p.Kinds = []KindSettings{{Kind: "b"}, {Kind: "a"}} }, "kinds[1].kind"},
		{"kind without a name", func(p *Pool) { p.Kinds = []KindSettings{{}} }, "kinds[0].kind: must not be empty"},
	} {
		bad := goldenPool()
		tc.change(bad)
		rej := h.reject(0, Mutation{PutPool: bad})
		require.Contains(t, rej.Reason, tc.want, tc.name)
	}
	p, _ = h.s.PoolSettings("etl")
	require.Same(t, before, p, "a refused change changes nothing")
}

// TestOldestQueued reads the queued task of a pool submitted first.
func TestOldestQueued(t *testing.T) {
	h := newHarness(t)
	_, ok := h.s.OldestQueued("p")
	require.False(t, ok)
	h.ok(insertScheduled("a", "p", baseTime+1), insert("b", "p", ""), insert("c", "p", ""), insert("d", "q", ""))
	task, ok := h.s.OldestQueued("p")
	require.True(t, ok)
	require.Equal(t, "b", task.ID)
	h.ok(start("b", 1, l1))
	task, _ = h.s.View().OldestQueued("p")
	require.Equal(t, "c", task.ID)
}

// TestListNewestFirstAndKinds pages through every combination of filters
// in both orders and compares with the tasks filtered and sorted by hand.
func TestListNewestFirstAndKinds(t *testing.T) {
	h := newHarness(t)
	var all []*Task
	pools, kinds := []string{"a", "b", "c"}, []string{"k1", "k2"}
	for i := 0; i < 60; i++ {
		m := insert(fmt.Sprintf("t%03d", i), pools[i%3], "")
		m.Insert.Kind = kinds[(i/3)%2]
		if i%4 == 0 {
			m.Insert.Status = StatusScheduled
			m.Insert.RunAt = baseTime + 1
		}
		h.ok(m)
		all = append(all, h.task(m.Insert.ID))
	}
	for _, q := range []ListQuery{
		{}, {Pools: []string{"a"}}, {Statuses: []Status{StatusQueued}}, {Kinds: []string{"k2"}},
		{Pools: []string{"b", "c"}, Kinds: []string{"k1"}}, {Statuses: []Status{StatusScheduled}, Kinds: []string{"k1", "k2"}},
	} {
		for _, desc := range []bool{false, true} {
			for _, limit := range []int{0, 1, 7, 100} {
				q := q
				q.Desc, q.Limit = desc, limit
				var want []string
				for _, task := range all {
					if (len(q.Pools) == 0 || slices.Contains(q.Pools, task.Pool)) &&
						(len(q.Statuses) == 0 || slices.Contains(q.Statuses, task.Status)) &&
						(len(q.Kinds) == 0 || slices.Contains(q.Kinds, task.Kind)) {
						want = append(want, task.ID)
					}
				}
				if desc {
					slices.Reverse(want)
				}
				var got []string
				for pages := 0; ; pages++ {
					require.Less(t, pages, 100)
					tasks, next := h.s.List(q)
					for _, task := range tasks {
						got = append(got, task.ID)
					}
					if limit > 0 {
						require.LessOrEqual(t, len(tasks), limit)
					}
					if next == "" {
						break
					}
					q.After = next
				}
				require.Equal(t, want, got, "%+v", q)
			}
		}
	}
}
