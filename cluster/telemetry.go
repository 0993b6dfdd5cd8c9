package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/fsm"
	"github.com/cronoq/cronoq/metrics"
)

// The node feeds its metrics (Config.Metrics) itself: the replicated state
// at scrape time, every leader change raft reports, the commits of its
// engine, and the status events of each term it leads.

// metricsBuffer is the room of a term's metrics subscription to status
// events.
const metricsBuffer = 8192

// metricsSource reads the node's replica at scrape time.
type metricsSource struct{ n *Node }

func (s metricsSource) TaskCounts(fn func(pool, status string, n int64)) {
	for _, pc := range s.n.state.Counts() {
		for _, st := range fsm.AllStatuses {
			fn(pc.Pool, st.String(), pc.ByStatus[st])
		}
	}
}

func (s metricsSource) Pools(fn func(pool string, oldestQueuedAge time.Duration)) {
	now := s.n.now()
	for _, pc := range s.n.state.Counts() {
		if pc.ByStatus[fsm.StatusQueued] == 0 {
			continue
		}
		if t, ok := s.n.state.OldestQueued(pc.Pool); ok {
			fn(pc.Pool, max(now.Sub(max(t.SubmittedAt, t.RunAt).Time()), 0))
		}
	}
}

func (s metricsSource) Engine() (metrics.EngineGauges, bool) {
	if !s.n.IsLeader() {
		return metrics.EngineGauges{}, false
	}
	eng, err := s.n.engine()
	if err != nil {
		return metrics.EngineGauges{}, false
	}
	st := eng.Stats()
	g := metrics.EngineGauges{
		Inbox: st.Inbox, Requests: st.Requests, Queued: st.Queued, QueuedBytes: st.QueuedBytes,
		InFlight: st.InFlight, Saturated: st.Saturated,
	}
	// The pools' signal is read on the engine's goroutine, between two
	// requests: a scrape goes without it when the engine's inbox does not
	// take the question in time.
	ctx, cancel := context.WithTimeout(context.Background(), desiredSlotsWait)
	defer cancel()
	if slots, err := eng.DesiredSlots(ctx); err == nil {
		g.DesiredSlots = make([]metrics.PoolSlots, len(slots))
		for i, p := range slots {
			g.DesiredSlots[i] = metrics.PoolSlots{Pool: p.Pool, Slots: p.Desired}
		}
	}
	return g, true
}

// desiredSlotsWait bounds how long a scrape waits for the engine to take
// its question about the pools.
const desiredSlotsWait = time.Second

func (s metricsSource) Subscriptions(fn func(name string, pending int64, stalled bool)) {
	for _, sub := range s.n.state.Subscriptions() {
		fn(sub.Name, int64(s.n.state.SubscriptionPending(sub.Name)), sub.Stalled)
	}
}

func (s metricsSource) Epoch() uint64        { return s.n.state.Epoch() }
func (s metricsSource) IsLeader() bool       { return s.n.IsLeader() }
func (s metricsSource) AppliedIndex() uint64 { return s.n.raft.AppliedIndex() }

// observeCommit is the engine's OnCommit when the node has metrics.
func observeCommit(m *metrics.Metrics, ci engine.CommitInfo) {
	m.ObserveCommit(metrics.Commit{Mutations: ci.Mutations, Bytes: ci.Bytes, Latency: ci.Latency, Failed: ci.Err != nil})
}

// leaderWatch follows the leader changes raft reports to this node: it
// calls onChange for each (none included) and counts the changes from one
// leader to another into the metrics (when m is not nil). Its observer
// blocks raft until both are done (a few nanoseconds), so that no change
// goes uncounted.
type leaderWatch struct {
	r   *raft.Raft
	obs *raft.Observer
	ch  chan raft.Observation
	wg  sync.WaitGroup
}

func watchLeader(r *raft.Raft, m *metrics.Metrics, onChange func()) *leaderWatch {
	w := &leaderWatch{r: r, ch: make(chan raft.Observation, 16)}
	w.obs = raft.NewObserver(w.ch, true, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(w.obs)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		var last raft.ServerID
		for o := range w.ch {
			onChange()
			id := o.Data.(raft.LeaderObservation).LeaderID
			if id == "" || id == last {
				continue
			}
			if last != "" && m != nil {
				m.LeaderChanged()
			}
			last = id
		}
	}()
	return w
}

// stop deregisters the observer, after which raft sends it nothing, and
// waits for the counting goroutine.
func (w *leaderWatch) stop() {
	w.r.DeregisterObserver(w.obs)
	close(w.ch)
	w.wg.Wait()
}

// termFeed feeds the status events of one term's engine to the metrics
// until the engine stops (which closes the subscription). The node starts
// one after establishing its leadership and waits for it on revoke.
type termFeed struct {
	done chan struct{}
}

func feedTerm(eng *engine.Engine, m *metrics.Metrics) *termFeed {
	f := &termFeed{done: make(chan struct{})}
	sub := eng.Subscribe(metricsBuffer)
	go func() {
		defer close(f.done)
		defer m.ResetAttempts()
		var lost uint64
		for ev := range sub.C() {
			if d := sub.Dropped(); d > lost {
				m.EventsLost(d - lost)
				lost = d
			}
			m.ObserveEvent(metrics.TaskEvent{
				TaskID:   ev.TaskID,
				Pool:     ev.Pool,
				Kind:     ev.Kind,
				Status:   ev.Status.String(),
				Terminal: ev.Status.Terminal(),
				Attempt:  ev.Attempt,
				At:       ev.At.Time(),
			})
		}
	}()
	return f
}

// wait returns once the feed has ended (its engine stopped).
func (f *termFeed) wait() { <-f.done }
