package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// hashicorp/raft's pipelined replication deadlocks when a follower refuses
// an entry (a full or failing disk) while another request is in flight:
// pipelineDecode stops reading the pipeline's responses at the refusal
// (replication.go, pipelineDecode), the transport's decoder then waits
// forever to hand over the next response (net_transport.go,
// decodeResponses: doneCh is unbuffered with the default MaxRPCsInFlight),
// and the next send waits forever for the decoder (netPipeline,
// AppendEntries), so pipelineReplicate never returns: the leader replicates
// nothing more to that follower, whose heartbeats still arrive, and raft's
// Shutdown waits for it forever. Turning pipelining off
// (MaxRPCsInFlight 1) avoids it but changes when a removed server hears of
// its removal, so the pipeline's responses are drained instead: they are
// always read from the transport and queued for raft, which takes them as
// long as it wants them.

// pipelineTransport is the raft transport with drained pipelines.
type pipelineTransport struct {
	*raft.NetworkTransport
}

// AppendEntriesPipeline returns the transport's pipeline, drained.
func (t pipelineTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newDrainedPipeline(p), nil
}

// drainedPipeline reads the responses of a pipeline as they come and hands
// them to raft in order. Its goroutine ends when raft closes the pipeline
// (pipelineReplicate always does).
type drainedPipeline struct {
	raft.AppendPipeline
	out  chan raft.AppendFuture
	stop chan struct{}
	done chan struct{}

	once     sync.Once
	closeErr error
}

func newDrainedPipeline(p raft.AppendPipeline) *drainedPipeline {
	d := &drainedPipeline{
		AppendPipeline: p,
		out:            make(chan raft.AppendFuture),
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
	}
	go d.forward(p.Consumer())
	return d
}

// Consumer returns the responses, in the order of the requests.
func (d *drainedPipeline) Consumer() <-chan raft.AppendFuture { return d.out }

// Close closes the pipeline and waits for its goroutine.
func (d *drainedPipeline) Close() error {
	d.once.Do(func() {
		d.closeErr = d.AppendPipeline.Close()
		close(d.stop)
	})
	<-d.done
	return d.closeErr
}

func (d *drainedPipeline) forward(in <-chan raft.AppendFuture) {
	defer close(d.done)
	var queue []raft.AppendFuture
	for {
		var (
			out  chan raft.AppendFuture
			head raft.AppendFuture
		)
		if len(queue) > 0 {
			out, head = d.out, queue[0]
		}
		select {
		case f := <-in:
			queue = append(queue, f)
		case out <- head:
			queue[0] = nil
			queue = queue[1:]
		case <-d.stop:
			return
		}
	}
}
