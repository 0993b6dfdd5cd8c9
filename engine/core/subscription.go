package core

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// Durable subscriptions (log format 6).
//
// The replicated state keeps the task events a subscription's filter takes
// (see fsm.Subscription); the core decides, with the time it is given,
// what happens to the events sent to a consumer and not acked. Its driver
// reports each send (SubscriptionSent) and each ack (AckSubscription).
// Cumulative acks make the first unacked event (the head) the one to
// watch: when AckTimeout passes after a send without the head being
// acked, the core tells the consumers to send again from the acked cursor
// (a Redelivery); once the head went out MaxDeliveries times without an
// ack, it marks the subscription stalled through the log instead, and
// sends nothing again until an ack clears the stall. Progress (an ack past
// the head) starts the count and the timeout afresh. What was sent and
// when is not logged: a new leader starts counting from the durable cursor.
//
// Retention waits for the subscriptions: the purge of an ended task that a
// subscription still holds an event of (Holds) is put off, and looked at
// again every Config.HoldRecheck, until Config.RetentionCap after its end;
// then it goes ahead, and a Notice says so.

// Defaults of a subscription.
const (
	DefaultAckTimeout    = 30 * time.Second
	DefaultMaxDeliveries = 10
)

// SubscriptionSpec creates a subscription. Zero AckTimeout and
// MaxDeliveries take the defaults.
type SubscriptionSpec struct {
	Name          string
	Pools         []string
	Statuses      []fsm.Status
	Kinds         []string
	Webhook       string
	Secret        string
	AckTimeout    time.Duration
	MaxDeliveries uint32
}

// Redelivery tells the consumers of a subscription to send its events
// again from the first one after cursor From (the acked cursor). It takes
// effect at once.
type Redelivery struct {
	Subscription string
	From         uint64
	Deliveries   uint32 // times the first unacked event went out so far
}

// NoticeKind says what a Notice reports.
type NoticeKind uint8

const (
	// NoticeStalled: a subscription stalled (Subject), for Detail.
	NoticeStalled NoticeKind = iota + 1
	// NoticeRetentionCap: the purge of task Subject went ahead at the
	// retention cap while the subscriptions Holders still held an event
	// of it.
	NoticeRetentionCap
)

// Notice reports a decision of the core for logs and metrics. It takes
// effect at once.
type Notice struct {
	Kind    NoticeKind
	Subject string
	Holders []string
	Detail  string
}

// Holds tells the core which subscriptions still hold an event of a task
// (implemented by *fsm.State).
type Holds interface {
	SubscriptionsHolding(taskID string) []string
}

// SetHolds gives the core what retention waits for (nil: nothing).
func (c *Core) SetHolds(h Holds) { c.holds = h }

// subscription is what the core knows of one subscription: its record as
// far as the core's mutations went, and what was sent to its consumers in
// this term (never logged).
type subscription struct {
	rec        *fsm.Subscription
	sentTo     uint64      // highest cursor sent in this round
	deliveries uint32      // times the head went out
	due        fsm.Instant // when the sent, unacked events go out again (0: not armed)
	gen        uint64      // validates its timer
}

// SubscriptionSource is the replicated state subscriptions are recovered
// from (implemented by *fsm.View).
type SubscriptionSource interface {
	Subscriptions() []*fsm.Subscription
}

func (c *Core) recoverSubscriptions(src SubscriptionSource) {
	for _, rec := range src.Subscriptions() {
		c.subs[rec.Name] = &subscription{rec: rec.Clone()}
	}
}

// normalize sorts and dedups the filter of spec and fills the defaults,
// refusing what the state would.
func (spec *SubscriptionSpec) normalize() error {
	if err := fsm.CheckSubscriptionName(spec.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	for i, p := range spec.Pools {
		if p == "" {
			return Invalid(fmt.Sprintf("pools[%d]", i), "must not be empty")
		}
	}
	for i, k := range spec.Kinds {
		if k == "" {
			return Invalid(fmt.Sprintf("kinds[%d]", i), "must not be empty")
		}
	}
	for i, st := range spec.Statuses {
		if !st.Valid() {
			return Invalid(fmt.Sprintf("statuses[%d]", i), "unknown status %d", st)
		}
	}
	spec.Pools = sortedSet(spec.Pools)
	spec.Kinds = sortedSet(spec.Kinds)
	spec.Statuses = sortedSet(spec.Statuses)
	switch {
	case spec.AckTimeout < 0:
		return Invalid("ack_timeout", "must not be negative")
	case spec.AckTimeout == 0:
		spec.AckTimeout = DefaultAckTimeout
	}
	if spec.MaxDeliveries == 0 {
		spec.MaxDeliveries = DefaultMaxDeliveries
	}
	if spec.Webhook != "" {
		u, err := url.Parse(spec.Webhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Invalid("webhook", "%q is not an http or https URL", spec.Webhook)
		}
	} else if spec.Secret != "" {
		return Invalid("secret", "a secret goes with a webhook")
	}
	return nil
}

func sortedSet[T interface{ ~string | ~uint8 }](xs []T) []T {
	if len(xs) == 0 {
		return nil
	}
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// sameSettings reports whether rec was created with spec.
func sameSettings(rec *fsm.Subscription, spec *SubscriptionSpec) bool {
	return slices.Equal(rec.Pools, spec.Pools) && slices.Equal(rec.Statuses, spec.Statuses) &&
		slices.Equal(rec.Kinds, spec.Kinds) && rec.Webhook == spec.Webhook && rec.Secret == spec.Secret &&
		rec.AckTimeout == spec.AckTimeout && rec.MaxDeliveries == spec.MaxDeliveries
}

// CreateSubscription creates a subscription; its events are kept from the
// entry that creates it on. The reply (held) is the fsm.Subscription as
// recorded. Creating one that exists with the same settings answers it
// unchanged; with other settings it is refused (remove it first).
func (c *Core) CreateSubscription(now time.Time, req ReqID, spec SubscriptionSpec) {
	c.begin(now)
	defer c.serve()
	if err := c.requireVersion("subscriptions", 6); err != nil {
		c.fail(req, err)
		return
	}
	if err := spec.normalize(); err != nil {
		c.fail(req, err)
		return
	}
	if s, ok := c.subs[spec.Name]; ok {
		if !sameSettings(s.rec, &spec) {
			c.fail(req, Invalid("name", "subscription %q exists with other settings (remove it first)", spec.Name))
			return
		}
		c.reply(req, *s.rec)
		return
	}
	rec := &fsm.Subscription{
		Name: spec.Name, Pools: spec.Pools, Statuses: spec.Statuses, Kinds: spec.Kinds,
		Webhook: spec.Webhook, Secret: spec.Secret, AckTimeout: spec.AckTimeout, MaxDeliveries: spec.MaxDeliveries,
		CreatedAt: c.now,
	}
	c.mutate(fsm.Mutation{PutSubscription: rec.Clone()})
	c.subs[spec.Name] = &subscription{rec: rec}
	c.reply(req, *rec)
}

// RemoveSubscription removes a subscription and the events it holds. The
// reply (held) is true, or false when there was none.
func (c *Core) RemoveSubscription(now time.Time, req ReqID, name string) {
	c.begin(now)
	defer c.serve()
	if _, ok := c.subs[name]; !ok {
		c.reply(req, false)
		return
	}
	c.mutate(fsm.Mutation{DelSubscription: &fsm.DelSubscription{Name: name}})
	delete(c.subs, name)
	c.reply(req, true)
}

// AckSubscription acks the events of subscription name up to cursor
// (inclusive). The reply (held) is the acked cursor (a uint64): cursor, or
// the subscription's when that is later (an ack of an old cursor changes
// nothing); ErrNotFound without the subscription. The driver checks that
// cursor is not past the last event of the log.
func (c *Core) AckSubscription(now time.Time, req ReqID, name string, cursor uint64) {
	c.begin(now)
	defer c.serve()
	s, ok := c.subs[name]
	if !ok {
		c.fail(req, fmt.Errorf("subscription %q: %w", name, ErrNotFound))
		return
	}
	if cursor <= s.rec.Acked {
		c.reply(req, s.rec.Acked)
		return
	}
	c.mutate(fsm.Mutation{AckSubscription: &fsm.AckSubscription{Name: name, Cursor: cursor}})
	rec := s.rec.Clone()
	rec.Acked = cursor
	rec.Stalled, rec.StallReason, rec.StalledAt = false, "", 0
	s.rec = rec
	s.sentTo = max(s.sentTo, cursor)
	// Progress: the new head went out once if it was sent, and the
	// timeout starts afresh.
	s.deliveries = 0
	s.disarm()
	if s.sentTo > cursor {
		s.deliveries = 1
		c.armRedelivery(s)
	}
	c.reply(req, cursor)
}

// SubscriptionSent records that the events of subscription name after
// cursor after, up to cursor upTo (inclusive), went out to a consumer. A
// send that holds the head counts as one delivery of it.
func (c *Core) SubscriptionSent(now time.Time, name string, after, upTo uint64) {
	c.begin(now)
	defer c.serve()
	s, ok := c.subs[name]
	if !ok || upTo <= after || upTo <= s.rec.Acked {
		return
	}
	if after <= s.rec.Acked {
		s.deliveries++
	}
	s.sentTo = max(s.sentTo, upTo)
	if s.due == 0 {
		c.armRedelivery(s)
	}
}

// armRedelivery sets s's timer to its ack timeout from now.
func (c *Core) armRedelivery(s *subscription) {
	s.gen++
	s.due = c.now.Add(s.rec.AckTimeout)
	c.timers.push(timer{when: s.due, kind: tmRedeliver, id: s.rec.Name, gen: s.gen})
}

// disarm drops s's timer.
func (s *subscription) disarm() {
	s.gen++
	s.due = 0
}

// redeliver runs when the ack timeout of s passed: the events sent and not
// acked go out again, or, once the head went out MaxDeliveries times, the
// subscription stalls.
func (c *Core) redeliver(s *subscription) {
	s.disarm()
	if s.sentTo <= s.rec.Acked || s.rec.Stalled {
		return // all acked, or nothing goes out again until an ack
	}
	if s.deliveries >= s.rec.MaxDeliveries {
		reason := fmt.Sprintf("the events after cursor %d were sent %d times without an ack within %s",
			s.rec.Acked, s.deliveries, s.rec.AckTimeout)
		c.mutate(fsm.Mutation{StallSubscription: &fsm.StallSubscription{Name: s.rec.Name, Reason: reason, At: c.now}})
		rec := s.rec.Clone()
		rec.Stalled, rec.StallReason, rec.StalledAt = true, reason, c.now
		s.rec = rec
		c.out.Notices = append(c.out.Notices, Notice{Kind: NoticeStalled, Subject: rec.Name, Detail: reason})
		return
	}
	s.sentTo = s.rec.Acked
	c.out.Redeliveries = append(c.out.Redeliveries, Redelivery{Subscription: s.rec.Name, From: s.rec.Acked, Deliveries: s.deliveries})
}

// SubscriptionState is the delivery state of one subscription, as the
// core has it.
type SubscriptionState struct {
	Record     fsm.Subscription
	SentTo     uint64    // highest cursor sent in this round (0: none)
	Deliveries uint32    // times the first unacked event went out
	Due        time.Time // when the unacked events go out again (zero: not armed)
}

// Subscription returns the state of subscription name.
func (c *Core) Subscription(name string) (SubscriptionState, bool) {
	s, ok := c.subs[name]
	if !ok {
		return SubscriptionState{}, false
	}
	return SubscriptionState{Record: *s.rec, SentTo: s.sentTo, Deliveries: s.deliveries, Due: s.due.Time()}, true
}

// retained reports whether the purge p, of tasks ids that ended at ended,
// waits for the subscriptions: it is then put off until the next recheck
// (or the retention cap). At the cap it goes ahead with a Notice.
func (c *Core) retained(p purgeItem, ended fsm.Instant, ids ...string) bool {
	if c.holds == nil || len(c.subs) == 0 {
		return false
	}
	var holders []string
	for _, id := range ids {
		holders = append(holders, c.holds.SubscriptionsHolding(id)...)
	}
	if len(holders) == 0 {
		return false
	}
	capAt := ended.Add(c.cfg.RetentionCap)
	if c.now < capAt {
		c.purges.ReplaceOrInsert(purgeItem{at: min(c.now.Add(c.cfg.HoldRecheck), capAt), id: p.id, wf: p.wf})
		return true
	}
	slices.Sort(holders)
	holders = slices.Compact(holders)
	c.out.Notices = append(c.out.Notices, Notice{
		Kind: NoticeRetentionCap, Subject: p.id, Holders: holders,
		Detail: fmt.Sprintf("purged at the retention cap (%s after it ended) with events not acked by %s", c.cfg.RetentionCap, strings.Join(holders, ", ")),
	})
	return false
}
