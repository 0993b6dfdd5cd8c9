package checker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nodes"
	"github.com/cronoq/cronoq/jepsen/workload"
)

func hashes(typ history.Type, hs map[string]history.NodeHash) []history.Op {
	h := &hb{}
	h.call("final", workload.FSMHash, nil, typ, &history.Value{Hashes: hs})
	return h.ops
}

func TestFSM(t *testing.T) {
	p := Params{Nodes: []string{"n1", "n2", "n3"}}
	same := map[string]history.NodeHash{"n1": {AppliedIndex: 9, Hash: "aa"}, "n2": {AppliedIndex: 9, Hash: "aa"}, "n3": {AppliedIndex: 9, Hash: "aa"}}
	require.Equal(t, Valid, FSM(hashes(history.OK, same), p).Valid)

	diff := map[string]history.NodeHash{"n1": {AppliedIndex: 9, Hash: "aa"}, "n2": {AppliedIndex: 9, Hash: "bb"}, "n3": {AppliedIndex: 9, Hash: "aa"}}
	r := FSM(hashes(history.OK, diff), p)
	require.Equal(t, Invalid, r.Valid)
	require.True(t, hasInvariant(r, "hash"))

	lagging := map[string]history.NodeHash{"n1": {AppliedIndex: 9, Hash: "aa"}, "n2": {AppliedIndex: 8, Hash: "bb"}, "n3": {Err: "timeout"}}
	require.Equal(t, Unknown, FSM(hashes(history.Info, lagging), p).Valid)

	require.Equal(t, Unknown, FSM(nil, p).Valid)
}

func TestVacuity(t *testing.T) {
	p := Params{FaultStart: 0, FaultEnd: 1 << 62, MinAckedSubmits: 2, MinFaultCompletions: 1, MinLeaderChanges: 1}
	leaders := []nodes.LeaderSample{{T: 1, Leader: "n1", Term: 2}, {T: 2, Leader: "n2", Term: 3}}
	h := clean()
	require.Equal(t, Valid, Vacuity(h.ops, leaders, p).Valid)

	// No leader change: inconclusive.
	require.Equal(t, Unknown, Vacuity(h.ops, leaders[:1], p).Valid)

	// Too little traffic: inconclusive.
	p2 := p
	p2.MinAckedSubmits = 100
	require.Equal(t, Unknown, Vacuity(h.ops, leaders, p2).Valid)

	// A cut link that let a packet through: inconclusive.
	h.call("nemesis", "probe", nil, history.Fail, nil)
	r := Vacuity(h.ops, leaders, p)
	require.Equal(t, Unknown, r.Valid)
	require.EqualValues(t, 1, r.Counts["partition_probe_failures"])
}

func TestCombine(t *testing.T) {
	v, u, i := &Result{Valid: Valid}, &Result{Valid: Unknown}, &Result{Valid: Invalid}
	require.Equal(t, Valid, Combine([]*Result{v, v}))
	require.Equal(t, Unknown, Combine([]*Result{v, u}))
	require.Equal(t, Invalid, Combine([]*Result{u, i, v}))
	require.Equal(t, 0, ExitCode(Valid))
	require.Equal(t, 1, ExitCode(Invalid))
	require.Equal(t, 2, ExitCode(Unknown))
}

func TestFSMReportsCrashedNodes(t *testing.T) {
	h := &hb{}
	h.add("harness", history.Info, workload.NodeCrash, &history.Value{Targets: []string{"n1"}, Detail: "exit status 2"})
	r := FSM(h.ops, Params{Nodes: []string{"n1"}})
	require.Equal(t, Invalid, r.Valid)
	require.True(t, hasInvariant(r, "crash"), "%+v", r.Anomalies)
}
