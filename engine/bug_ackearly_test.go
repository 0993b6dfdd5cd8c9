//go:build jepsenbug_ackearly

package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/engine"
	"github.com/cronoq/cronoq/engine/core"
	"github.com/cronoq/cronoq/engine/enginetest"
)

// With the early-ack fault a submit is acknowledged while its entry is not
// applied, and stays acknowledged when the entry is then lost.
func TestBugAckEarlyAcksBeforeDurable(t *testing.T) {
	h := setup(t, engine.Config{}, core.Config{})
	h.log.Pause()
	h.log.FailWait(2, enginetest.ErrLeadershipLost, false) // the entry is never applied
	out := make(chan submitResult, 1)
	h.submitAsync(h.ctx, 0, spec("early"), out)
	r := recv(t, out)
	require.NoError(t, r.err, "the submit is acknowledged")
	require.NotEmpty(t, r.id)
	_, ok := h.state.Get(r.id)
	require.False(t, ok, "acknowledged before its entry applied")

	h.log.Resume()
	<-h.eng.Done()
	require.ErrorIs(t, h.eng.Err(), enginetest.ErrLeadershipLost)
	_, ok = h.state.Get(r.id)
	require.False(t, ok, "an acknowledged task that never became durable")
}
