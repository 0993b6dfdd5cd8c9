package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// fakePipeline hands out responses on an unbuffered channel, as
// raft.NetworkTransport's pipeline does with its default MaxRPCsInFlight.
type fakePipeline struct {
	done   chan raft.AppendFuture
	closed chan struct{}
}

func (p *fakePipeline) AppendEntries(*raft.AppendEntriesRequest, *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	return nil, nil
}
func (p *fakePipeline) Consumer() <-chan raft.AppendFuture { return p.done }
func (p *fakePipeline) Close() error                       { close(p.closed); return nil }

type fakeFuture struct {
	raft.AppendFuture
	i int
}

// Once raft stops reading a pipeline's responses (it does at the first
// refused entry), the transport can still hand over the next ones: it
// never blocks, and the pipeline closes.
func TestDrainedPipeline(t *testing.T) {
	inner := &fakePipeline{done: make(chan raft.AppendFuture), closed: make(chan struct{})}
	p := newDrainedPipeline(inner)

	// Responses arrive in order while raft reads them.
	for i := range 3 {
		inner.done <- fakeFuture{i: i}
		require.Equal(t, i, (<-p.Consumer()).(fakeFuture).i)
	}
	// raft stops reading; the transport's decoder goes on.
	for i := range 5 {
		select {
		case inner.done <- fakeFuture{i: 3 + i}:
		case <-time.After(10 * time.Second):
			t.Fatalf("response %d not taken: the transport's decoder would block", 3+i)
		}
	}
	// The queued responses are still there, in order.
	require.Equal(t, 3, (<-p.Consumer()).(fakeFuture).i)
	require.NoError(t, p.Close())
	<-inner.closed
	require.NoError(t, p.Close(), "a second close is harmless")
}
