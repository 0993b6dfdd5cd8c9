package cron

import (
	"testing"

	"github.com/cronoq/cronoq/fsm"
)

func BenchmarkPlanLongOutage(b *testing.B) {
	e := mustParse(b, "* * * * * *", "America/New_York")
	cursor := utcAt(2026, 1, 1, 0, 0, 0)
	now := utcAt(2036, 1, 1, 0, 0, 0)
	for b.Loop() {
		Plan(e, cursor, now, fsm.CatchUpAll, MaxCatchUpLimit)
	}
}

func BenchmarkNextDaily(b *testing.B) {
	e := mustParse(b, "0 9 * * *", "America/New_York")
	after := utcAt(2026, 1, 1, 0, 0, 0)
	for b.Loop() {
		after = e.Next(after)
	}
}
