package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// sinkLog records what an event sink receives.
type sinkLog struct {
	indexes []uint64
	events  []Event
}

func (l *sinkLog) sink(index uint64, evs []Event) {
	l.indexes = append(l.indexes, index)
	l.events = append(l.events, evs...) // evs is reused after the call
}

// brief is the part of an event a test compares.
type brief struct {
	task    string
	status  Status
	attempt uint32
	msg     string
	wf      string
	wfs     WorkflowStatus
}

func briefs(evs []Event) []brief {
	if len(evs) == 0 {
		return nil
	}
	out := make([]brief, len(evs))
	for i, e := range evs {
		out[i] = brief{e.TaskID, e.Status, e.Attempt, e.Message, e.Workflow, e.WorkflowStatus}
	}
	return out
}

func TestEventsFollowStatusChanges(t *testing.T) {
	a, b := taskID(1), taskID(2)
	withErr := func(m Mutation, msg string) Mutation {
		switch {
		case m.Retry != nil:
			m.Retry.Error = msg
		case m.Finish != nil:
			m.Finish.Error = msg
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		setup [][]Mutation
		batch []Mutation
		want  []brief
	}{{
		name:  "insert queued and scheduled",
		batch: []Mutation{insert(a, "p", ""), insertScheduled(b, "p", baseTime+100)},
		want:  []brief{{task: a, status: StatusQueued}, {task: b, status: StatusScheduled}},
	}, {
		name:  "ready",
		setup: [][]Mutation{{insertScheduled(a, "p", baseTime+100)}},
		batch: []Mutation{ready(a)},
		want:  []brief{{task: a, status: StatusQueued}},
	}, {
		name:  "start, retry with its error, start again, fail",
		setup: [][]Mutation{{insert(a, "p", "")}},
		batch: []Mutation{
			start(a, 1, 1), withErr(retry(a, 1, 0), "boom"),
			start(a, 2, 2), withErr(finish(a, 2, StatusFailed), "boom again"),
		},
		want: []brief{
			{task: a, status: StatusRunning, attempt: 1},
			{task: a, status: StatusQueued, attempt: 1, msg: "boom"},
			{task: a, status: StatusRunning, attempt: 2},
			{task: a, status: StatusFailed, attempt: 2, msg: "boom again"},
		},
	}, {
		name:  "a purge and a schedule change are no status change",
		setup: [][]Mutation{{insert(a, "p", "")}, {finish(a, 0, StatusCancelled)}},
		batch: []Mutation{purge(a), putSchedule("nightly")},
	}, {
		name:  "workflow start, member, unblock and end",
		setup: [][]Mutation{{putWorkflow("wf1", ""), insertInto(a, "", "wf1")}},
		batch: []Mutation{
			insertBlockedInto(b, "wf1", a), finish(a, 0, StatusCancelled),
			unblock(b, baseTime), finish(b, 0, StatusCancelled), endWorkflow("wf1", WorkflowCancelled),
		},
		want: []brief{
			{task: b, status: StatusBlocked, wf: "wf1"},
			{task: a, status: StatusCancelled, wf: "wf1"},
			{task: b, status: StatusQueued, wf: "wf1"},
			{task: b, status: StatusCancelled, wf: "wf1"},
			{wf: "wf1", wfs: WorkflowCancelled},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var log sinkLog
			h.s.SetEventSink(log.sink)
			for _, ms := range tc.setup {
				h.ok(ms...)
			}
			log = sinkLog{}
			h.ok(tc.batch...)
			require.Equal(t, tc.want, briefs(log.events))
			if len(tc.want) == 0 {
				require.Empty(t, log.indexes, "no events, no call")
				return
			}
			require.Equal(t, []uint64{h.index}, log.indexes)
			for i, e := range log.events {
				require.Equal(t, MakeCursor(h.index, i), e.Cursor)
				require.Equal(t, h.index, CursorIndex(e.Cursor))
				require.Less(t, e.Cursor, EndCursor(h.index))
				require.Greater(t, e.Cursor, EndCursor(h.index-1))
			}
		})
	}
}

func TestEventsOfARejectedBatchAreDropped(t *testing.T) {
	h := newHarness(t)
	var log sinkLog
	h.s.SetEventSink(log.sink)
	a, b := taskID(1), taskID(2)
	h.reject(1, insert(a, "p", ""), start(b, 1, 1))
	require.Empty(t, log.events)
	h.ok(insert(b, "p", ""))
	require.Equal(t, []brief{{task: b, status: StatusQueued}}, briefs(log.events))
	require.Equal(t, MakeCursor(h.index, 0), log.events[0].Cursor)
}

func TestEventsCarryTheTask(t *testing.T) {
	h := newHarness(t)
	var log sinkLog
	h.s.SetEventSink(log.sink)
	a := taskID(1)
	h.ok(putWorkflow("wf1", ""), insertInto(a, "", "wf1"))
	require.Len(t, log.events, 2)
	wf, ev := log.events[0], log.events[1]
	w, ok := h.s.Workflow("wf1")
	require.True(t, ok)
	require.Equal(t, Event{Cursor: MakeCursor(h.index, 0), Kind: "name-wf1", Workflow: "wf1",
		WorkflowStatus: WorkflowRunning, At: w.UpdatedAt}, wf)
	task := h.task(a)
	require.Equal(t, Event{
		Cursor: MakeCursor(h.index, 1), TaskID: a, Pool: task.Pool, Kind: task.Kind, Status: StatusQueued,
		At: task.UpdatedAt, Workflow: "wf1", Step: task.Step(),
	}, ev)
}

// insertBlockedInto inserts a member of workflow wf blocked on deps.
func insertBlockedInto(id, wf string, deps ...string) Mutation {
	m := insertInto(id, "", wf)
	m.Insert.Status = StatusBlocked
	m.Insert.MakeFlow().DependsOn = deps
	return m
}

func TestCursorOrder(t *testing.T) {
	require.Less(t, MakeCursor(7, MaxCursorSeq), MakeCursor(8, 0))
	require.Equal(t, uint64(7), CursorIndex(EndCursor(7)))
	require.Equal(t, EndCursor(7), MakeCursor(7, MaxCursorSeq))
}
