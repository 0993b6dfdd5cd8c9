//go:build jepsenbug_ackonsend

package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
)

// With the ack-on-send fault, events sent to a consumer are acked (and
// dropped from the state) before the consumer acks anything.
func TestBugAckOnSendAcksWithoutConsumer(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	_, err := h.eng.CreateSubscription(h.ctx, core.SubscriptionSpec{Name: "s", Pools: []string{"p"}})
	require.NoError(t, err)
	subs, _, err := submitted(h.eng.Submit(h.ctx, core.SubmitOne, []core.Spec{spec("k")}))
	require.NoError(t, err)
	require.Len(t, subs, 1)
	evs := h.state.SubscriptionEvents("s", 0, 0)
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1].Cursor

	require.NoError(t, h.eng.SubscriptionSent(h.ctx, "s", 0, last))
	rec, ok := h.state.Subscription("s")
	require.True(t, ok)
	require.Equal(t, last, rec.Acked, "acked on send, with no ack from the consumer")
	require.Empty(t, h.state.SubscriptionEvents("s", 0, 0), "a consumer that reconnects gets nothing again")
}
