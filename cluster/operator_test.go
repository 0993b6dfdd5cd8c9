package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
)

// TestTransferLeadershipWithoutOtherVoter: a lone voter refuses to hand its
// leadership to "any voter" as invalid, before its engine stops: it keeps
// serving in the same epoch.
func TestTransferLeadershipWithoutOtherVoter(t *testing.T) {
	c := newTestCluster(t)
	c.formCluster("n1")
	n := c.leader()
	epoch := n.Epoch()
	require.NotZero(t, epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := n.TransferLeadership(ctx, "")
	var ie *cluster.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "id", ie.Field)
	require.Equal(t, epoch, n.Epoch(), "the leadership was re-established")
	_, err = n.Leading()
	require.NoError(t, err)
}
