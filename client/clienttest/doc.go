// Package clienttest is an in-process fake of a cronoq cluster, for testing
// code that uses the Go SDK (package client), workers and handlers
// included, without starting real nodes.
//
// A Cluster is a few fake nodes serving the cronoq API (ConnectRPC over
// h2c) on 127.0.0.1, one of which leads. They share one in-memory state that
// behaves like a real cluster's:
//
//   - Submit, SubmitBatch and EnqueueMany validate specs as a node does
//     (invalid answers name the field), resolve defaults, and honour
//     idempotency keys (the same key gives the same task, as a duplicate).
//   - Tasks are scheduled until their run-at time, queued, granted to the
//     workers of their pool that poll for them (labels permitting, high
//     priority first), and end as their attempts complete: succeeded,
//     failed, or retried with backoff until their max attempts are used up.
//     Deadlines expire tasks; leases without heartbeats are lost; attempts
//     time out.
//   - Get, Wait, Cancel, List, Counts and Events work as on a node,
//     schedules fire at the times of their cron expression, and the operator
//     calls see the fake nodes as the Raft configuration.
//
// Followers answer the calls that need the leader with not_leader naming
// the leader's address, or serve them as forwarded (WithForwarding).
//
// Start a cluster with NewCluster, which closes it when the test ends, and
// give its Addrs to client.New:
//
//	c := clienttest.NewCluster(t, clienttest.WithNodes(3))
//	cl, err := client.New(c.Addrs())
//
// Besides the API, a Cluster has knobs to script what real clusters do
// rarely (RefuseCalls, LoseAnswers, Hold, SetLeader, Node.DropConns,
// DropWorkerStreams, DropStreamOnCompletion, RefuseHeartbeats,
// DelayHeartbeatAcks, ScriptEvents, SetPendingLimit) and methods to look
// inside it (Task, Tasks, Calls, Requests, Submits, Workers, Accepted,
// Node.Requests). WaitUntil and WaitFor wait for a condition on that state
// without sleeping: the condition is checked again at every change.
package clienttest
