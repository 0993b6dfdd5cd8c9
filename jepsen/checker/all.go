package checker

import (
	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nodes"
)

// All runs every checker. registerHTML, when not empty, receives the
// porcupine visualization.
func All(ops []history.Op, leaders []nodes.LeaderSample, p Params, registerHTML string) ([]*Result, error) {
	reg, err := Register(ops, p, registerHTML)
	rs := []*Result{Queue(ops, p), reg, Cron(ops, p), Workflow(ops, p), Ordering(ops, p), Delivery(ops, p), FSM(ops, p), Vacuity(ops, leaders, p)}
	return rs, err
}
