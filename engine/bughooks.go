package engine

import (
	"context"

	"github.com/cronoq/cronoq/engine/core"
)

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

// ackOnSend is the ack-on-send fault of the self-test builds
// (bug_ackonsend_on.go): it acks the events of subscription name up to
// upTo as they go out to a consumer, so that a consumer that never
// processes them (it crashes) never gets them again. It does nothing in
// release builds.
func (e *Engine) ackOnSend(ctx context.Context, name string, upTo uint64) error {
	if !bugAckOnSend {
		return nil
	}
	_, err := e.AckSubscription(ctx, name, upTo)
	return err
}
