package core

import (
	"testing"
	"time"

	"github.com/cronoq/cronoq/fsm"
)

// BenchmarkSubmitDispatchComplete measures one task's whole life in the
// core (without the FSM) with a large backlog queued.
func BenchmarkSubmitDispatchComplete(b *testing.B) {
	c, err := New(Config{Seed: 1, DefaultPool: PoolConfig{Bounds: Bounds{MaxPending: 1 << 30}}}, 1, t0)
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	req := ReqID(0)
	labels := [][]fsm.KV{nil, {{K: "gpu", V: "1"}}}
	for i := 0; i < 100_000; i++ {
		req++
		c.Submit(now, req, SubmitOne, []Spec{{Template: fsm.Template{Pool: "p", Kind: "k", Priority: fsm.Priority(i % 3), Labels: labels[i%2]}}})
	}
	_ = c.Ready()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Microsecond)
		req++
		c.Submit(now, req, SubmitOne, []Spec{{Template: fsm.Template{Pool: "p", Kind: "k", Labels: labels[i%2]}}})
		req++
		c.Poll(now, req, Offer{Worker: "w", Pool: "p", Labels: labels[1], Slots: 1})
		o := c.Ready()
		for _, d := range o.Dispatches {
			for _, g := range d.Grants {
				req++
				c.Complete(now, req, g.Lease, Outcome{Kind: OutcomeSuccess})
			}
		}
		// As the engine does once the actions are carried out.
		c.Recycle(&o)
		o = c.Ready()
		c.Recycle(&o)
	}
}
