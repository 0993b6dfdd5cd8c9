package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cronoq/cronoq/client"
)

// The cronoq-sub system is cronoq with one durable subscription, created
// before anything is submitted, and one consumer reading it through the
// SDK and acking as it goes, for the whole cell.
const (
	benchSub = "bench-succeeded"
	// subAckEvery and subAckAfter: the consumer acks its last cursor after
	// this many events, or this long after the last ack.
	subAckEvery = 500
	subAckAfter = 100 * time.Millisecond
)

// subConsumer reads the benchmark's subscription: it counts the events
// and acks them, the way an application that records every terminal
// status (billing, a downstream pipeline) does.
type subConsumer struct {
	cl     *client.Client
	cancel context.CancelFunc
	done   chan struct{}

	events atomic.Int64
	lastNs atomic.Int64 // Unix ns at which the last event was read
	acks   atomic.Int64

	mu  sync.Mutex
	err error // the first failure (the stream or an ack)
}

// startSubConsumer creates the subscription (succeeded tasks of the
// benchmark's pool) and starts reading it.
func startSubConsumer(ctx context.Context, addrs []string, opts []client.Option) (*subConsumer, error) {
	cl, err := client.New(addrs, opts...)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = cl.CreateSubscription(cctx, client.SubscriptionSpec{Name: benchSub, Pools: []string{cronoqPool},
		Statuses: []string{client.StatusSucceeded}})
	cancel()
	if err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("creating the subscription: %w", err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	ch, err := cl.ReadSubscription(rctx, benchSub, 0)
	if err != nil {
		rcancel()
		_ = cl.Close()
		return nil, fmt.Errorf("reading the subscription: %w", err)
	}
	s := &subConsumer{cl: cl, cancel: rcancel, done: make(chan struct{})}
	go s.run(rctx, ch)
	return s, nil
}

func (s *subConsumer) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Err returns the consumer's first failure.
func (s *subConsumer) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *subConsumer) run(ctx context.Context, ch <-chan client.Event) {
	defer close(s.done)
	var cursor, acked uint64
	n := 0
	lastAck := time.Now()
	t := time.NewTicker(subAckAfter)
	defer t.Stop()
	ack := func() {
		if cursor == acked {
			return
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.cl.Ack(actx, benchSub, cursor)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.fail(fmt.Errorf("acking cursor %d: %w", cursor, err))
			}
			return
		}
		acked, n, lastAck = cursor, 0, time.Now()
		s.acks.Add(1)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if time.Since(lastAck) >= subAckAfter {
				ack()
			}
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Err != nil {
				s.fail(ev.Err)
				return
			}
			if ev.Cursor <= cursor {
				continue // sent again: seen already
			}
			cursor = ev.Cursor
			s.events.Add(1)
			s.lastNs.Store(time.Now().UnixNano())
			if n++; n >= subAckEvery {
				ack()
			}
		}
	}
}

// Events returns the events read so far and when the last one was read.
func (s *subConsumer) Events() (int64, time.Time) {
	return s.events.Load(), time.Unix(0, s.lastNs.Load())
}

// Wait waits until n events were read, or ctx ends.
func (s *subConsumer) Wait(ctx context.Context, n int64) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.events.Load() < n {
		if err := s.Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d events read: %w", s.events.Load(), n, ctx.Err())
		case <-s.done:
			return errors.New("the subscription's reader stopped")
		case <-t.C:
		}
	}
	return nil
}

// Stop ends the reading and closes the client.
func (s *subConsumer) Stop() {
	s.cancel()
	<-s.done
	_ = s.cl.Close()
}

// subscribed is a system that consumes a subscription while it runs.
type subscribed interface {
	Subscription() *subConsumer
}

// renderSubAB is the run-by-run comparison of W1 on cronoq-sub with W1 on
// cronoq, with the events the subscription delivered, "" unless the
// report has pairs of them.
func renderSubAB(rep *Report) string {
	pairs := abPairsOf(rep, "w1", 0, "cronoq-sub")
	if len(pairs) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### A durable subscription — W1, cronoq-sub against cronoq run by run\n\n")
	w("| run | first | cronoq tasks/s | cronoq-sub tasks/s | ratio | events delivered/s | last event after last completion, ms | cronoq server CPU µs/task | cronoq-sub server CPU µs/task | ratio |\n")
	w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var pv, sv, rv, ev, lag, pc, sc, rc []float64
	for _, p := range pairs {
		pr, sr := p.plain.W1.Rate, p.secure.W1.Rate
		pcu := p.plain.ServerCPUs / float64(p.plain.W1.Tasks) * 1e6
		scu := p.secure.ServerCPUs / float64(p.secure.W1.Tasks) * 1e6
		w("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.run, p.first, fmtNum(jf(pr)), fmtNum(jf(sr)), fmtRatio(ratio(sr, pr)),
			fmtNum(jf(p.secure.W1.SubRate)), fmtNum(jf(p.secure.W1.SubLagMs)), fmtNum(jf(pcu)), fmtNum(jf(scu)), fmtRatio(ratio(scu, pcu)))
		pv, sv, rv = append(pv, pr), append(sv, sr), append(rv, ratio(sr, pr))
		ev, lag = append(ev, p.secure.W1.SubRate), append(lag, p.secure.W1.SubLagMs)
		pc, sc, rc = append(pc, pcu), append(sc, scu), append(rc, ratio(scu, pcu))
	}
	w("| **median** | | **%s** | **%s** | **%s** | **%s** | %s | %s | %s | %s |\n\n", fmtNum(jf(medianOf(pv))), fmtNum(jf(medianOf(sv))), fmtRatio(medianOf(rv)),
		fmtNum(jf(medianOf(ev))), fmtNum(jf(medianOf(lag))), fmtNum(jf(medianOf(pc))), fmtNum(jf(medianOf(sc))), fmtRatio(medianOf(rc)))
	w("cronoq-sub is cronoq with one durable subscription (the W1 pool's succeeded tasks: one event per task) read and acked by one SDK client all along. " +
		"Events delivered/s is the events the reader got during the burn-down over the time from the workers' start to the last one; " +
		"the ratio is cronoq-sub / cronoq of the same run (below 1 for tasks/s is the subscription's cost). \"first\" is the system that ran first in that run.\n\n")
	return b.String()
}
