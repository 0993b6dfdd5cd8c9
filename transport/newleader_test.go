package transport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
)

// blackhole accepts connections and never answers, as a leader cut off by
// a partition looks to a node that had connected to it.
func blackhole(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	first := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if len(conns) == 0 {
				close(first)
			}
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), first
}

// A call a follower forwarded to a leader that was then cut off is
// abandoned as soon as the follower knows a new leader: a read is routed
// there at once, a write is answered outcome_unknown and the SDK sends it
// again (with its key), through the follower to the new leader. Both
// succeed within 2 s of the election, not after the client's attempt
// timeout.
func TestForwardAbandonedForNewLeader(t *testing.T) {
	for _, write := range []bool{false, true} {
		name := map[bool]string{false: "read", true: "write"}[write]
		t.Run(name, func(t *testing.T) {
			newLeader := newFakeBackend()
			newLeader.submit = func(_ cluster.SubmitMode, specs []cluster.Spec) (*cluster.SubmitResult, error) {
				res := &cluster.SubmitResult{Tasks: make([]cluster.Submitted, len(specs))}
				for i := range specs {
					res.Tasks[i] = cluster.Submitted{ID: "from-new-leader"}
				}
				return res, nil
			}
			startFake(t, newLeader, nil)

			follower := newFakeBackend()
			oldLeader, reached := blackhole(t)
			follower.leading, follower.leader, follower.leaderAddr = false, "n2", oldLeader
			hc, base := startFake(t, follower, func(s *Server) { s.cfg.HoldTimeout = 10 * time.Second })

			elected := make(chan time.Time, 1)
			go func() {
				// The election, once the follower's forward hangs with
				// the old leader.
				select {
				case <-reached:
				case <-t.Context().Done():
					return
				}
				follower.mu.Lock()
				follower.leader, follower.leaderAddr = "n3", newLeader.addr
				follower.mu.Unlock()
				elected <- time.Now()
			}()

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if write {
				cl, err := client.New([]string{follower.addr}, client.WithTimeout(10*time.Second))
				require.NoError(t, err)
				defer cl.Close()
				sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{Pool: "p", Kind: "k"}})
				require.NoError(t, err)
				require.Equal(t, "from-new-leader", sub.ID)
			} else {
				tasks := cronoqv1connect.NewTaskServiceClient(hc, base)
				_, err := tasks.Get(ctx, connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "t1"}}))
				// The new leader answered: it has no such task.
				require.Equal(t, apierr.KindNotFound, apierr.Kind(err), "%v", err)
			}
			took := time.Since(<-elected)
			require.Less(t, took, 2*time.Second, "served %s after the new leader's election", took)
			if write {
				newLeader.mu.Lock()
				defer newLeader.mu.Unlock()
				require.Equal(t, []string{"submit"}, newLeader.calls, "served by the new leader")
			}
		})
	}
}

// A leadership transfer forwarded by a follower is not abandoned when the
// follower learns of the leader it elected before the old leader's answer
// arrives: that election is the call's effect, and its answer says so,
// not "outcome unknown".
func TestForwardedTransferNotAbandoned(t *testing.T) {
	follower := newFakeBackend()
	leader := newFakeBackend()
	leader.transfer = func(string) (string, error) {
		// The follower hears of the new leader first, then the answer
		// comes, later than the forward's leader checks.
		follower.mu.Lock()
		follower.leader, follower.leaderAddr = "n3", "127.0.0.9:8650"
		follower.mu.Unlock()
		time.Sleep(10 * forwardLeaderCheck)
		return "n3", nil
	}
	startFake(t, leader, nil)
	follower.leading, follower.leader, follower.leaderAddr = false, "n2", leader.addr
	hc, base := startFake(t, follower, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op := cronoqv1connect.NewOperatorServiceClient(hc, base)
	resp, err := op.TransferLeadership(ctx, connect.NewRequest(&cronoqv1.TransferLeadershipRequest{}))
	require.NoError(t, err)
	require.Equal(t, "n3", resp.Msg.Leader)
}
