package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/internal/testcluster"
)

// While a server of log format 5 is in the cluster, the leader refuses to
// create a subscription (log format 6); once every server understands it,
// the subscription is created and every server holds it.
func TestSubscriptionsNeedEveryServerOnFormat6(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Configure(func(i int, cfg *cluster.Config) {
		if i == 2 {
			cfg.LogVersion = 5
		}
	}))
	c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	create := func() error {
		l, _ := c.Leader()
		_, err := l.Node.CreateSubscription(ctx, cluster.SubscriptionSpec{Name: "s"})
		return err
	}
	err := create()
	var ve *cluster.VersionError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, uint16(6), ve.Need)
	require.Equal(t, uint16(5), ve.Have)

	c.Stop("n3")
	cfg := c.Node("n3").Config
	cfg.LogVersion = 0
	c.Start(cfg)
	require.Eventually(t, func() bool { return create() == nil }, 30*time.Second, 50*time.Millisecond)
	c.Converged()
	for _, n := range c.Live() {
		sub, ok := n.Node.Subscriptions().Subscription("s")
		require.True(t, ok, n.ID)
		require.Equal(t, cluster.DefaultAckTimeout, sub.AckTimeout, n.ID)
		require.EqualValues(t, cluster.DefaultMaxDeliveries, sub.MaxDeliveries, n.ID)
	}
}
