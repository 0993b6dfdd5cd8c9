package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/client/clienttest"
)

func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	// Three nodes, n2 leads; the CLI knows only n1.
	f, addr := startFake(t, clienttest.WithNodeIDs("n1", "n2", "n3"), clienttest.WithLeader(1))
	f.Node(0).SetMember(func(m *cronoqv1.Member) {
		m.Addr, m.RaftAddr, m.HttpAddr, m.Version = "127.0.0.1:8652", "127.0.0.1:8651", "127.0.0.1:8650", "v1"
	})
	f.Node(1).SetMember(func(m *cronoqv1.Member) {
		m.Addr, m.Status, m.RaftAddr, m.HttpAddr = "127.0.0.2:8652", "failed", "127.0.0.2:8651", "127.0.0.2:8650"
	})
	f.Node(2).SetMember(func(m *cronoqv1.Member) {
		m.Addr, m.Status, m.RaftAddr, m.HttpAddr, m.Version = "127.0.0.3:8652", "left", "127.0.0.3:8651", "127.0.0.3:8650", "v2"
	})
	f.Node(0).SetHealth("degraded", "retention sweep failing")

	r := runCLI(t, "", "members", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `[
		{"name": "n1", "addr": "127.0.0.1:8652", "status": "alive", "raft_addr": "127.0.0.1:8651", "http_addr": "127.0.0.1:8650", "version": "v1"},
		{"name": "n2", "addr": "127.0.0.2:8652", "status": "failed", "raft_addr": "127.0.0.2:8651", "http_addr": "127.0.0.2:8650", "version": ""},
		{"name": "n3", "addr": "127.0.0.3:8652", "status": "left", "raft_addr": "127.0.0.3:8651", "http_addr": "127.0.0.3:8650", "version": "v2"}
	]`, r.stdout)
	r = runCLI(t, "", "members", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"NAME  ADDR            STATUS  RAFT ADDR       HTTP ADDR       VERSION\n"+
		"n1    127.0.0.1:8652  alive   127.0.0.1:8651  127.0.0.1:8650  v1\n"+
		"n2    127.0.0.2:8652  failed  127.0.0.2:8651  127.0.0.2:8650  -\n"+
		"n3    127.0.0.3:8652  left    127.0.0.3:8651  127.0.0.3:8650  v2\n", r.stdout)

	r = runCLI(t, "", "operator", "raft", "list-peers", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `[
		{"id": "n1", "address": "127.0.0.1:8651", "voter": true, "leader": false},
		{"id": "n2", "address": "127.0.0.2:8651", "voter": true, "leader": true},
		{"id": "n3", "address": "127.0.0.3:8651", "voter": true, "leader": false}
	]`, r.stdout)
	r = runCLI(t, "", "operator", "raft", "list-peers", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"ID  ADDRESS         VOTER  LEADER\n"+
		"n1  127.0.0.1:8651  true   false\n"+
		"n2  127.0.0.2:8651  true   true\n"+
		"n3  127.0.0.3:8651  true   false\n", r.stdout)

	r = runCLI(t, "", "operator", "raft", "remove-peer", "-id", "n1", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"removed": "n1"}`, r.stdout)
	r = runCLI(t, "", "operator", "raft", "remove-peer", "n1", "-addr", addr)
	requireFailure(t, r, exitError, "no server n1 in the Raft configuration")

	// Without -id, leadership goes to the other voter.
	r = runCLI(t, "", "operator", "raft", "transfer-leadership", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"leader": "n3"}`, r.stdout)
	r = runCLI(t, "", "operator", "raft", "transfer-leadership", "-id", "n2", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "leader is now n2\n", r.stdout)
	// A server out of the configuration is not found.
	r = runCLI(t, "", "operator", "raft", "transfer-leadership", "-id", "n1", "-addr", addr)
	requireFailure(t, r, exitError, "no server n1 in the Raft configuration")

	// Two changes of leader since the start: epoch 3.
	r = runCLI(t, "", "health", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{"node": "n1", "leader": "n2", "epoch": 3, "status": "degraded", "reasons": ["retention sweep failing"]}`, r.stdout)
	r = runCLI(t, "", "health", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "node:   n1\nleader: n2\nepoch:  3\nstatus: degraded\nreason: retention sweep failing\n", r.stdout)
}

func TestUnreachableCluster(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "status", "T1", "-addr", closedAddr, "-rpc-timeout", "200ms")
	requireFailure(t, r, exitError, "no answer within -rpc-timeout 200ms", "connection refused")
	r = runCLI(t, "", "health", "-addr", closedAddr+",127.0.0.1:2")
	requireFailure(t, r, exitError, "checking health", "127.0.0.1:1", "127.0.0.1:2")
	require.False(t, strings.Contains(r.stderr, "\n\n"))
}
