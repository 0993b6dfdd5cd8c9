package engine

import "github.com/cronoq/cronoq/engine/core"

// ackEarly is the early-ack fault of the fault-injection harness's self-test
// builds (bug_ackearly_on.go): it answers the submits of g at once, before
// g's entry is durable, and keeps the rest of g's held actions. It does
// nothing in release builds.
func (e *Engine) ackEarly(g *group) {
	if !bugAckEarly {
		return
	}
	l := &e.loop
	held := g.held[:0]
	for _, a := range g.held {
		if r := l.reqs[a.Req]; a.Kind == core.ActReply && r != nil && r.op == opSubmit {
			e.perform(a)
			continue
		}
		held = append(held, a)
	}
	clear(g.held[len(held):])
	g.held = held
}
