package workload

// Operation names of the delivery workload.
const (
	// SubCreate creates a subscription (its filter in the value).
	SubCreate = "sub-create"
	// SubRead is a lone ok: what one message of a consumer's read stream
	// delivered (session, node, events).
	SubRead = "sub-read"
	// SubDrop is a lone ok: a consumer discards the events of a read it
	// has not processed and closes its stream, as a consumer that crashes
	// does; they must come again.
	SubDrop = "sub-drop"
	// SubAck acknowledges a cursor; its value lists the events processed
	// since the last acknowledged ack, which the ack covers.
	SubAck = "sub-ack"
	// SubFinal is the consumer's catch-up after the drain: ok when the
	// subscription had nothing left to deliver (value: its durable
	// cursor), info when it did not get there.
	SubFinal = "sub-final"
)

// SubSpec is a subscription of the delivery workload.
type SubSpec struct {
	Name     string
	Pools    []string
	Statuses []string // empty: every status
}

// The subscriptions of the delivery workload, both on the queue pool (its
// tasks succeed, fail, are retried and cancelled): one for the terminal
// statuses, one for every status.
var (
	SubTerminal = SubSpec{Name: "jd-terminal", Pools: []string{QueuePool},
		Statuses: []string{"succeeded", "failed", "cancelled", "expired"}}
	SubEvery = SubSpec{Name: "jd-every", Pools: []string{QueuePool}}
)

// DeliverySubs lists the delivery workload's subscriptions.
var DeliverySubs = []SubSpec{SubTerminal, SubEvery}

// TerminalStatus reports whether a status name is terminal.
func TerminalStatus(s string) bool {
	switch s {
	case "succeeded", "failed", "cancelled", "expired":
		return true
	}
	return false
}
