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
//   - Tasks may depend on others (by id, by key, or by key on earlier specs
//     of the same batch): they are blocked until their dependencies end,
//     released in the same change as the last one's end, and, under the
//     dependency policy succeeded, cancelled ("dependency <step or id>
//     <status>") with their own dependents when a dependency ends without
//     success. Grants carry what the dependencies ended with. External
//     tasks are never granted: TaskService.Complete ends them.
//   - Workflows are submitted, read, waited for, cancelled and listed as on
//     a node: their steps go in at once, their status follows their
//     members', and their start and end are events (for subscribers of
//     every pool). A successful completion may spawn children and a
//     continuation, inserted with it in the task's workflow (created when
//     it has none); a completion refused as stale inserts nothing.
//   - Get, Wait, Cancel, Delete (ended tasks only), Retry (failed, expired
//     or cancelled tasks, with a new attempt budget), CancelMany, List,
//     Counts and Events work as on a node, tasks keep the history of their
//     last ten attempts, schedules fire at the times of their cron
//     expression (a task, or a whole workflow), and the operator calls see
//     the fake nodes as the Raft configuration.
//   - PoolService describes pools (counts by status, the age of the oldest
//     queued task, connected workers and their slots, settings) and lists
//     the connected workers. Settings changed with Set are checked as a
//     node checks them (invalid answers name the field) and kept; of them
//     paused is applied (a paused pool's tasks are not granted to its
//     workers), and so are the default max attempts and backoff of the
//     pool's tasks. The fake has no ordering lanes, concurrency keys, rate
//     limits or parking of its own: the limits are reported, not enforced
//     (SetPendingLimit bounds a pool's pending tasks).
//   - SetKind and GetKind keep the settings of a kind of a pool, checked
//     as a node checks them (a schema is compiled as a node compiles it,
//     refusing references to other documents). They apply as on a node: a
//     payload that fails the kind's payload schema is refused on field
//     payload, naming the failing JSON path; a successful attempt whose
//     output fails the output schema fails the task for good; the kind's
//     timeout, max attempts and backoff are the defaults of its tasks,
//     ahead of the pool's.
//   - The gossip keyring calls (KeyringList, KeyringInstall, KeyringUse,
//     KeyringRemove) work on a keyring per node, every node an alive
//     gossip member, with a real node's refusals, once WithGossipKeys turns
//     the fake encryption on; Node.SetGossipKeys scripts one node's ring.
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
// DelayHeartbeatAcks, ScriptEvents, SetPendingLimit, WithGrantOutputBudget
// to leave dependency outputs out of grants, WithMaxPageBytes to cut lists
// and workflow members into small pages) and methods to set it up and
// look inside it (AddTask, PutTask, Finish, AddWorkflow, FireSchedule,
// Task, Tasks, Workflow, WorkflowByKey, Workflows, Calls, Requests,
// Submits, Workers, Accepted, Node.Requests). WaitUntil and WaitFor wait
// for a condition on that state without sleeping: the condition is checked
// again at every change.
package clienttest
