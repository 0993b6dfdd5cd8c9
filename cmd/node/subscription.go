package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cronoq/cronoq/client"
)

func init() {
	register("subscription", command{Summary: "Manage durable subscriptions to task events: create, list, rm", Run: runSubscription})
	register("events", command{Summary: "Follow task status events, or the events of a durable subscription (acking them)", Run: runEvents})
}

// subscriptionCommands are the subcommands of `cronoq subscription`.
var subscriptionCommands = map[string]command{
	"create": {Summary: "Create a durable subscription", Run: runSubscriptionCreate},
	"list":   {Summary: "List the durable subscriptions", Run: runSubscriptionList},
	"rm":     {Summary: "Remove a durable subscription and the events it holds", Run: runSubscriptionRm},
}

func runSubscription(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq subscription", subscriptionCommands, args)
}

// subscriptionJSON is a subscription in the CLI's JSON output. Unset
// instants are null.
type subscriptionJSON struct {
	Name          string   `json:"name"`
	Pools         []string `json:"pools"`
	Statuses      []string `json:"statuses"`
	Kinds         []string `json:"kinds"`
	Webhook       string   `json:"webhook"`
	HasSecret     bool     `json:"has_secret"`
	AckTimeout    string   `json:"ack_timeout"`
	MaxDeliveries int      `json:"max_deliveries"`
	Acked         uint64   `json:"acked"`
	Pending       int      `json:"pending"`
	Stalled       bool     `json:"stalled"`
	StallReason   string   `json:"stall_reason"`
	StalledAt     *string  `json:"stalled_at"`
	CreatedAt     *string  `json:"created_at"`
}

func newSubscriptionJSON(s *client.Subscription) subscriptionJSON {
	return subscriptionJSON{
		Name: s.Name, Pools: nonNilSlice(s.Pools), Statuses: nonNilSlice(s.Statuses), Kinds: nonNilSlice(s.Kinds),
		Webhook: s.Webhook, HasSecret: s.HasSecret, AckTimeout: s.AckTimeout.String(), MaxDeliveries: s.MaxDeliveries,
		Acked: s.Acked, Pending: s.Pending, Stalled: s.Stalled, StallReason: s.StallReason,
		StalledAt: jsonTime(s.StalledAt), CreatedAt: jsonTime(s.CreatedAt),
	}
}

func runSubscriptionCreate(ctx context.Context, s stdio, args []string) error {
	c := newCmd("subscription create", "cronoq subscription create NAME [-pool P]... [-status S]... [-kind K]... [-webhook URL -secret S] [-ack-timeout D] [-max-deliveries N]", `
Create the durable subscription NAME: from now on, every task status event
of its pools, statuses and kinds (each unset: any) is kept by the cluster,
in log order, until a consumer acks it ('cronoq events -subscription NAME'
reads and acks) or the subscription is removed. Retention keeps an ended
task until every subscription holding its events acked them (at most the
agents' -retention-cap).

Events sent to a consumer and not acked within -ack-timeout are sent again;
once the first unacked one went out -max-deliveries times, the subscription
stalls: it keeps its events, 'cronoq health' says degraded naming it, and the
next ack clears it. With -webhook, the leader posts the events to URL,
signed with -secret.

Creating a subscription that exists with the same settings shows it; with
other settings it is refused (remove it first).

Creating or removing one needs write on each of its pools (on "*" without
-pool); reading and acking it, read.

JSON output: {"name", "pools", "statuses", "kinds", "webhook", "has_secret",
"ack_timeout", "max_deliveries", "acked", "pending", "stalled",
"stall_reason", "stalled_at", "created_at"}`)
	cf := c.clientFlags()
	var spec client.SubscriptionSpec
	c.fs.Var(listValue{&spec.Pools}, "pool", "only events of tasks of `POOL` (repeatable, or comma-separated)")
	c.fs.Var(statusList{list: &spec.Statuses}, "status", "only events into `STATUS` (repeatable, or comma-separated)")
	c.fs.Var(listValue{&spec.Kinds}, "kind", "only events of tasks of `KIND` (repeatable, or comma-separated)")
	c.fs.StringVar(&spec.Webhook, "webhook", "", "post the events to `URL` (http or https)")
	c.fs.StringVar(&spec.Secret, "secret", "", "sign the webhook's posts with `SECRET`")
	c.fs.Var(durationValue{&spec.AckTimeout, true}, "ack-timeout", "send unacked events again after `DUR` (default 30s)")
	c.fs.Var(intValue{&spec.MaxDeliveries, 1}, "max-deliveries", "stall after sending the first unacked event `N` times (default 10)")
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	spec.Name = c.args[0]
	switch {
	case spec.Name == "":
		return c.usageErr("empty subscription NAME")
	case spec.Secret != "" && spec.Webhook == "":
		return c.usageErr("-secret needs -webhook")
	}
	sub, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Subscription, error) {
		return cl.CreateSubscription(ctx, spec)
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, newSubscriptionJSON(sub))
	}
	return writeSubscriptionText(s.Stdout, sub)
}

// writeSubscriptionText shows one subscription for people.
func writeSubscriptionText(w io.Writer, sub *client.Subscription) error {
	hook := dash(sub.Webhook)
	if sub.HasSecret {
		hook += " (signed)"
	}
	stalled := "no"
	if sub.Stalled {
		stalled = fmt.Sprintf("since %s: %s", textTime(sub.StalledAt), sub.StallReason)
	}
	_, err := fmt.Fprintf(w, "Name:            %s\nPools:           %s\nStatuses:        %s\nKinds:           %s\n"+
		"Webhook:         %s\nAck timeout:     %s\nMax deliveries:  %d\nAcked:           %d\nPending:         %d\n"+
		"Stalled:         %s\nCreated:         %s\n",
		sub.Name, anyOf(sub.Pools), anyOf(sub.Statuses), anyOf(sub.Kinds), hook, sub.AckTimeout, sub.MaxDeliveries,
		sub.Acked, sub.Pending, stalled, textTime(sub.CreatedAt))
	return err
}

// anyOf lists a filter for people: "any" when empty.
func anyOf(xs []string) string {
	if len(xs) == 0 {
		return "any"
	}
	return strings.Join(xs, ",")
}

func runSubscriptionList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("subscription list", "cronoq subscription list", `
List the durable subscriptions the caller may read, by name: their filter,
how many events each holds (pending, not acked) and whether it stalled.

JSON output: [{"name", "pools", "statuses", "kinds", "webhook", "has_secret",
"ack_timeout", "max_deliveries", "acked", "pending", "stalled",
"stall_reason", "stalled_at", "created_at"}...]`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	subs, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]*client.Subscription, error) {
		return cl.ListSubscriptions(ctx)
	})
	if err != nil {
		return err
	}
	if cf.out.json() {
		out := make([]subscriptionJSON, 0, len(subs))
		for _, sub := range subs {
			out = append(out, newSubscriptionJSON(sub))
		}
		return writeJSON(s.Stdout, out)
	}
	if len(subs) == 0 {
		_, err := fmt.Fprintln(s.Stdout, "no subscriptions")
		return err
	}
	tb := newTable(s.Stdout, "NAME", "POOLS", "STATUSES", "KINDS", "PENDING", "ACKED", "STALLED", "WEBHOOK")
	for _, sub := range subs {
		stalled := "no"
		if sub.Stalled {
			stalled = "yes"
		}
		tb.row(sub.Name, anyOf(sub.Pools), anyOf(sub.Statuses), anyOf(sub.Kinds), strconv.Itoa(sub.Pending),
			strconv.FormatUint(sub.Acked, 10), stalled, dash(sub.Webhook))
	}
	return tb.flush()
}

func runSubscriptionRm(ctx context.Context, s stdio, args []string) error {
	c := newCmd("subscription rm", "cronoq subscription rm NAME", `
Remove a durable subscription and the events it holds (acked or not).
"removed" is false when there was no subscription of that name.

JSON output: {"name": "...", "removed": true|false}`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	return removeNamed(ctx, s, c, cf, "subscription", (*client.Client).RemoveSubscription)
}

// eventJSON is one line of `events -o json`. A workflow's own event has
// no task_id and names the workflow.
type eventJSON struct {
	TaskID   string  `json:"task_id"`
	Pool     string  `json:"pool"`
	Kind     string  `json:"kind"`
	Status   string  `json:"status"`
	Attempt  int     `json:"attempt"`
	At       *string `json:"at"`
	Cursor   uint64  `json:"cursor"`
	Message  string  `json:"message,omitempty"`
	Workflow string  `json:"workflow,omitempty"`
	Step     string  `json:"step,omitempty"`
}

func newEventJSON(ev *client.Event) eventJSON {
	status := ev.Status
	if ev.TaskID == "" && ev.WorkflowStatus != "" {
		status = ev.WorkflowStatus
	}
	return eventJSON{
		TaskID: ev.TaskID, Pool: ev.Pool, Kind: ev.Kind, Status: status, Attempt: ev.Attempt,
		At: jsonTime(ev.At), Cursor: ev.Cursor, Message: ev.Message, Workflow: ev.Workflow, Step: ev.Step,
	}
}

// writeEventText writes one event on one line for people.
func writeEventText(w io.Writer, ev *client.Event) error {
	var b strings.Builder
	b.WriteString(textTime(ev.At))
	if ev.TaskID == "" {
		fmt.Fprintf(&b, "  workflow %s  %s  %s", ev.Workflow, ev.Kind, ev.WorkflowStatus)
	} else {
		fmt.Fprintf(&b, "  %s  %s/%s  %s", ev.TaskID, ev.Pool, ev.Kind, ev.Status)
		if ev.Attempt > 0 {
			fmt.Fprintf(&b, "  attempt=%d", ev.Attempt)
		}
		if ev.Workflow != "" {
			fmt.Fprintf(&b, "  workflow=%s", ev.Workflow)
		}
	}
	if ev.Cursor != 0 {
		fmt.Fprintf(&b, "  cursor=%d", ev.Cursor)
	}
	if ev.Message != "" {
		fmt.Fprintf(&b, "  %q", ev.Message)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

func runEvents(ctx context.Context, s stdio, args []string) error {
	c := newCmd("events", "cronoq events [-pool P]... | cronoq events -subscription NAME [-after CURSOR]", `
Follow status events as they happen, until interrupted (or -n events).

Without -subscription: every task's status changes (of the -pool pools; all
pools, and the workflows' own events, without), from now on. A line on
stderr says when events were missed (a slow reader, a new leader).

With -subscription NAME: the events the durable subscription holds, in log
order, from its acked cursor (or -after CURSOR) on, then the later ones;
each printed batch is acked once printed, so an event is printed at least
once: one printed again after an interruption, or after a failure to ack
within the subscription's ack timeout, was not acked.

Text output: one line per event. JSON output (-o json): one object per line,
{"task_id", "pool", "kind", "status", "attempt", "at", "cursor"} (and
"message", "workflow", "step" when set).`)
	cf := c.addrFlags()
	var (
		pools []string
		sub   string
		after uint64
		limit int
	)
	c.fs.Var(listValue{&pools}, "pool", "only events of tasks of `POOL` (repeatable, or comma-separated)")
	c.fs.StringVar(&sub, "subscription", "", "read (and ack) the durable subscription `NAME`")
	c.fs.Var(cursorValue{&after}, "after", "with -subscription, start after `CURSOR` (default: its acked cursor)")
	c.fs.Var(intValue{&limit, 1}, "n", "stop after `N` events")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	switch {
	case sub != "" && len(pools) > 0:
		return c.usageErr("-subscription and -pool exclude each other (the subscription's filter applies)")
	case sub == "" && c.set("after"):
		return c.usageErr("-after needs -subscription")
	}
	cf.waiting(s)
	cl, err := cf.connect(nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var evs <-chan client.Event
	if sub != "" {
		evs, err = cl.ReadSubscription(rctx, sub, after)
	} else {
		evs, err = cl.Events(rctx, pools...)
	}
	if err != nil {
		return cf.callError(ctx, c, err)
	}
	enc := json.NewEncoder(s.Stdout)
	enc.SetEscapeHTML(false)
	printed := 0
	show := func(ev *client.Event) error {
		if cf.out.json() {
			if err := enc.Encode(newEventJSON(ev)); err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
		} else if err := writeEventText(s.Stdout, ev); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
		printed++
		return nil
	}
	for {
		var ev client.Event
		var ok bool
		select {
		case ev, ok = <-evs:
		case <-ctx.Done():
			return nil
		}
		if !ok {
			return nil // interrupted
		}
		// Print what is there, then ack it in one call.
		var last uint64
		for more := true; more; {
			switch {
			case ev.Err != nil:
				return cf.callError(ctx, c, ev.Err)
			case ev.Lagged:
				fmt.Fprintln(s.Stderr, "cronoq: events were missed here (a slow reader, or the stream was re-established)")
			default:
				if err := show(&ev); err != nil {
					return err
				}
				last = max(last, ev.Cursor)
			}
			if limit > 0 && printed >= limit {
				break
			}
			select {
			case ev, more = <-evs:
				if !more {
					return nil
				}
			default:
				more = false
			}
		}
		if sub != "" && last != 0 {
			actx, acancel := context.WithTimeout(ctx, cf.rpcTimeout)
			_, err := cl.Ack(actx, sub, last)
			acancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return cf.callError(ctx, c, fmt.Errorf("acking up to cursor %d: %w", last, err))
			}
		}
		if limit > 0 && printed >= limit {
			return nil
		}
	}
}

// cursorValue is a cursor flag (an unsigned integer).
type cursorValue struct{ c *uint64 }

func (v cursorValue) String() string {
	if v.c == nil || *v.c == 0 {
		return ""
	}
	return strconv.FormatUint(*v.c, 10)
}

func (v cursorValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return errors.New("not a cursor (an unsigned integer)")
	}
	*v.c = n
	return nil
}
