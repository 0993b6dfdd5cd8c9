package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/fsm"
)

// The scenario commands of durable subscriptions:
//
//	subscribe name=S [pools=(P,...)] [statuses=(S,...)] [kinds=(K,...)]
//	    [ack-timeout=DUR] [max-deliveries=N] [webhook=URL secret=X]
//	unsubscribe name=S
//	deliver name=S [limit=N]   the scenario's consumer of S reads the
//	                           events after its cursor from the replicated
//	                           state and reports the send to the core (a
//	                           redelivery rewinds it; a new leader starts
//	                           it at the durable cursor)
//	ack name=S [cursor=I.N]    default: the last event delivered
//	subscription name=S        the record, the events held and the core's
//	                           delivery state
//
// Cursors print as INDEX.SEQ: the log index of the entry and the event's
// place in it.

func fmtCursor(c uint64) string {
	if c == 0 {
		return "-"
	}
	return fmt.Sprintf("%d.%d", fsm.CursorIndex(c), c&fsm.MaxCursorSeq)
}

func (h *harness) parseCursor(s string) uint64 {
	i, n, ok := strings.Cut(s, ".")
	require.True(h.t, ok, "cursor %q: want INDEX.SEQ", s)
	index, err := strconv.ParseUint(i, 10, 64)
	require.NoError(h.t, err)
	seq, err := strconv.Atoi(n)
	require.NoError(h.t, err)
	return fsm.MakeCursor(index, seq)
}

func fmtSubscriptionMutation(m fsm.Mutation) string {
	switch {
	case m.PutSubscription != nil:
		s := m.PutSubscription
		out := fmt.Sprintf("put-subscription %s ack-timeout=%s max-deliveries=%d", s.Name, s.AckTimeout, s.MaxDeliveries)
		if len(s.Pools) > 0 {
			out += " pools=(" + strings.Join(s.Pools, ",") + ")"
		}
		if len(s.Statuses) > 0 {
			var sts []string
			for _, st := range s.Statuses {
				sts = append(sts, st.String())
			}
			out += " statuses=(" + strings.Join(sts, ",") + ")"
		}
		if len(s.Kinds) > 0 {
			out += " kinds=(" + strings.Join(s.Kinds, ",") + ")"
		}
		if s.Webhook != "" {
			out += " webhook=" + s.Webhook
		}
		if s.Secret != "" {
			out += " secret=set"
		}
		return out
	case m.DelSubscription != nil:
		return "del-subscription " + m.DelSubscription.Name
	case m.AckSubscription != nil:
		return fmt.Sprintf("ack-subscription %s cursor=%s", m.AckSubscription.Name, fmtCursor(m.AckSubscription.Cursor))
	default:
		return fmt.Sprintf("stall-subscription %s reason=%q", m.StallSubscription.Name, m.StallSubscription.Reason)
	}
}

func (h *harness) fmtNotice(n Notice) string {
	switch n.Kind {
	case NoticeStalled:
		return "notice stalled " + n.Subject
	case NoticeRetentionCap:
		return fmt.Sprintf("notice retention-cap %s held-by=(%s)", h.name(n.Subject), strings.Join(n.Holders, ","))
	}
	return fmt.Sprintf("notice %d %s", n.Kind, n.Subject)
}

func (h *harness) subscriptionSpec(d *datadriven.TestData) SubscriptionSpec {
	var spec SubscriptionSpec
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "req":
		case "name":
			spec.Name = a.Vals[0]
		case "pools":
			spec.Pools = a.Vals
		case "kinds":
			spec.Kinds = a.Vals
		case "statuses":
			for _, v := range a.Vals {
				st, ok := fsm.ParseStatus(v)
				if !ok {
					st = 42
				}
				spec.Statuses = append(spec.Statuses, st)
			}
		case "ack-timeout":
			v, err := time.ParseDuration(a.Vals[0])
			require.NoError(h.t, err)
			spec.AckTimeout = v
		case "max-deliveries":
			n, err := strconv.Atoi(a.Vals[0])
			require.NoError(h.t, err)
			spec.MaxDeliveries = uint32(n)
		case "webhook":
			spec.Webhook = a.Vals[0]
		case "secret":
			spec.Secret = a.Vals[0]
		default:
			h.t.Fatalf("subscribe: unknown argument %q", a.Key)
		}
	}
	return spec
}

// consumer returns the cursor the consumer of subscription name reads
// after: where it stopped, or, when it starts, the durable cursor.
func (h *harness) consumer(name string) uint64 {
	if c, ok := h.consumers[name]; ok {
		return c
	}
	if sub, ok := h.state.Subscription(name); ok {
		return sub.Acked
	}
	return 0
}

// rewind moves the consumers back for the redeliveries of an output.
func (h *harness) rewind(rs []Redelivery) {
	for _, r := range rs {
		if c, ok := h.consumers[r.Subscription]; ok && c > r.From {
			h.consumers[r.Subscription] = r.From
		}
	}
}

func (h *harness) deliver(b *strings.Builder, d *datadriven.TestData) {
	var name string
	d.ScanArgs(h.t, "name", &name)
	limit := 0
	d.MaybeScanArgs(h.t, "limit", &limit)
	after := h.consumer(name)
	evs := h.state.SubscriptionEvents(name, after, limit)
	if len(evs) == 0 {
		fmt.Fprintf(b, "deliver %s after=%s: nothing\n", name, fmtCursor(after))
		return
	}
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("%s %s %s", fmtCursor(ev.Cursor), h.name(ev.TaskID), ev.Status))
	}
	fmt.Fprintf(b, "deliver %s after=%s: %s\n", name, fmtCursor(after), strings.Join(parts, ", "))
	last := evs[len(evs)-1].Cursor
	h.consumers[name] = last
	h.core.SubscriptionSent(h.now, name, after, last)
}

func (h *harness) ackCursor(d *datadriven.TestData, name string) uint64 {
	if d.HasArg("cursor") {
		var c string
		d.ScanArgs(h.t, "cursor", &c)
		return h.parseCursor(c)
	}
	return h.consumer(name)
}

func (h *harness) dumpSubscription(name string) string {
	var b strings.Builder
	rec, ok := h.state.Subscription(name)
	if !ok {
		b.WriteString("fsm: none\n")
	} else {
		fmt.Fprintf(&b, "fsm: acked=%s pending=%d", fmtCursor(rec.Acked), h.state.SubscriptionPending(name))
		if rec.Stalled {
			fmt.Fprintf(&b, " stalled at %s: %s", fmtAt(rec.StalledAt), rec.StallReason)
		}
		b.WriteByte('\n')
		for _, ev := range h.state.SubscriptionEvents(name, 0, 0) {
			fmt.Fprintf(&b, "  %s %s %s\n", fmtCursor(ev.Cursor), h.name(ev.TaskID), ev.Status)
		}
	}
	st, ok := h.core.Subscription(name)
	if !ok {
		b.WriteString("core: none")
		return b.String()
	}
	fmt.Fprintf(&b, "core: acked=%s sent-to=%s deliveries=%d due=%s stalled=%t",
		fmtCursor(st.Record.Acked), fmtCursor(st.SentTo), st.Deliveries, fmtTime(st.Due), st.Record.Stalled)
	return b.String()
}

// crossCheckSubscriptions compares the core's subscriptions with the
// FSM's.
func (h *harness) crossCheckSubscriptions(b *strings.Builder) {
	recs := h.state.Subscriptions()
	if len(recs) != len(h.core.subs) {
		fmt.Fprintf(b, "MISMATCH: %d subscriptions in the FSM, %d in the core\n", len(recs), len(h.core.subs))
	}
	for _, rec := range recs {
		s, ok := h.core.subs[rec.Name]
		switch {
		case !ok:
			fmt.Fprintf(b, "MISMATCH subscription %s: in the FSM, not in the core\n", rec.Name)
		case s.rec.Acked != rec.Acked || s.rec.Stalled != rec.Stalled:
			fmt.Fprintf(b, "MISMATCH subscription %s: core acked=%s stalled=%t, fsm acked=%s stalled=%t\n", rec.Name,
				fmtCursor(s.rec.Acked), s.rec.Stalled, fmtCursor(rec.Acked), rec.Stalled)
		}
	}
}
