package engine

import "github.com/cronoq/cronoq/engine/core"

// ackEarly is the early-ack fault of the fault-injection harness's self-test
// builds (bug_ackearly_on.go): it answers the submits of s at once, before
// s's entry is durable, and keeps the rest of s's held actions. It does
// nothing in release builds.
func (e *Engine) ackEarly(s *pendingStep) {
	if !bugAckEarly {
		return
	}
	kept := s.out.Replies[:0]
	for _, r := range s.out.Replies {
		if _, submit := r.Value.(*core.SubmitResult); submit {
			e.answer(r.Req, r.Value, r.Err)
			continue
		}
		kept = append(kept, r)
	}
	clear(s.out.Replies[len(kept):])
	s.out.Replies = kept
}
