package transport

import (
	"context"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// A follower whose leader does not answer holds the call, and when the
// hold runs out says that no leader can be reached, instead of sending the
// caller to the dead node.
func TestHeldCallAnswersNoLeaderWhenLeaderDead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())

	b := newFakeBackend()
	b.leading, b.leader, b.leaderAddr = false, "n2", dead
	tasks, _ := serveFake(t, b)

	_, err = tasks.Submit(context.Background(), connect.NewRequest(&cronoqv1.SubmitRequest{Spec: spec("p")}))
	require.Equal(t, apierr.KindNoLeader, apierr.Kind(err), "%v", err)
	id, addr := apierr.Leader(err)
	require.Empty(t, id+addr, "no hint to the dead node")
	require.Contains(t, err.Error(), "no leader reachable: n2 at "+dead)

	// A caller's deadline shorter than the hold is answered before it
	// passes, with why.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond+holdSlack)
	defer cancel()
	b.mu.Lock()
	b.leader, b.leaderAddr = "", ""
	b.mu.Unlock()
	_, err = tasks.Get(ctx, connect.NewRequest(&cronoqv1.GetRequest{Ref: &cronoqv1.TaskRef{Id: "x"}}))
	require.NoError(t, ctx.Err(), "answered before the deadline")
	require.Equal(t, apierr.KindNoLeader, apierr.Kind(err), "%v", err)
}
