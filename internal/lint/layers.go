package lint

// Layers is the shape of docs/architecture.md as import rules: each layer
// imports only the floors below it, and the API server reads the
// replicated state without touching its write paths.
//
//	cmd/node ──► transport ──► cluster ──► engine ──► engine/core ──► fsm
//	   └──► client ──► api       (jepsen: client and api only)
//	   └──► ui ──► client        (the web console: the SDK's client of its own node)
//	metrics: a leaf that cluster and transport feed
//	webhook: a leaf (its wire format, signatures and deliverer) the cluster runs
//	internal/tlsutil: a leaf that cluster, transport and client use
//	internal/tracectx: a leaf (trace-context tags) that transport and client use
//	internal/units: a leaf (sizes in words) that engine/core and the SDK's fake use
//	internal/loophealth: a leaf that the engine's driver, cluster and
//	transport run their background loops with
var Layers = []Layer{
	// The replicated state imports nothing of cronoq.
	{Pkg: "fsm/..."},
	// The deterministic core (with its cron package): the state's types.
	{Pkg: "engine/core/...", May: []string{"fsm", "internal/units"}},
	// The driver and its in-memory log.
	{Pkg: "engine/...", May: []string{"fsm", "engine/core/...", "internal/loophealth/..."}},
	// The cluster: raft, gossip, the leader's terms.
	{Pkg: "cluster/...", May: []string{"fsm", "engine/...", "metrics", "internal/tlsutil", "internal/loophealth/...", "webhook"}},
	// The API server reaches the engine only through the cluster, and of
	// the state it reads only.
	{Pkg: "transport/...", May: []string{"acl", "api/...", "cluster", "fsm", "metrics", "internal/tlsutil", "internal/loophealth/...", "internal/tracectx"}, Names: map[string][]string{
		"fsm": {
			"Reader", "Task", "Schedule", "Template", "KV", "Backoff", "Instant", "InstantOf",
			"Status", "Status*", "AllStatuses", "Priority", "Priority*", "Overlap*", "CatchUp*",
			"ListQuery", "PoolCounts",
			"Workflow", "WorkflowStatus", "WorkflowQuery", "StepTemplate", "DepPolicy", "DepSucceeded", "DepDone",
			"Keys", "KindSettings", "Overflow*", "Ordering*", "Parse*",
			"ACLToken", "ACLPolicy", "DelACL", "AnonymousPolicy", "Attempt",
			"Subscription", "Event",
		},
	}},
	// The wire contract stands alone.
	{Pkg: "api/..."},
	// The SDK and what is built on it only.
	{Pkg: "client/...", May: []string{"api/...", "internal/tlsutil", "internal/tracectx", "internal/units"}},
	{Pkg: "execworker/...", May: []string{"client"}},
	{Pkg: "jepsen/...", May: []string{"api/...", "client"}},
	// The web console reaches the cluster through the SDK only, as any
	// client does; the API server mounts it as a plain http.Handler.
	{Pkg: "ui/...", May: []string{"api/...", "client"}},
	// Leaves that others feed or ask.
	{Pkg: "metrics/..."},
	{Pkg: "acl/..."},
	// Webhook delivery imports nothing of cronoq, so that receivers can
	// check signatures with it alone.
	{Pkg: "webhook/..."},
	// TLS configurations and certificates: a leaf of the standard library.
	{Pkg: "internal/tlsutil"},
	// The trace-context tags and carrier the SDK and the server share.
	{Pkg: "internal/tracectx"},
	// Sizes in words, for the engine's refusals and its test fake's.
	{Pkg: "internal/units"},
	// Health and backoff of background loops, and its test clock.
	{Pkg: "internal/loophealth/...", May: []string{"internal/loophealth"}},
	{Pkg: "internal/lint"},
	// gRPC-Go stubs over the API's messages, for tests only.
	{Pkg: "internal/grpcstubs", May: []string{"api/..."}},
	// The composition root and the test harness may wire anything.
	{Pkg: "cmd/...", May: []string{"..."}},
	{Pkg: "internal/testcluster", May: []string{"..."}},
}
