package transport_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/internal/testcluster"
	"github.com/cronoq/cronoq/transport"
)

func operatorClient(t *testing.T, n *testNode) cronoqv1connect.OperatorServiceClient {
	return cronoqv1connect.NewOperatorServiceClient(h2c(t), "http://"+n.Addr())
}

func gossipKey(t *testing.T) (string, []byte) {
	t.Helper()
	s, err := cluster.GenerateGossipKey()
	require.NoError(t, err)
	b, err := cluster.ParseGossipKey(s)
	require.NoError(t, err)
	return s, b
}

// keyringOf is the keyring answer as node -> keys (primary first), or
// "error: ..." for a node that failed.
func keyringOf(t *testing.T, r *cronoqv1.KeyringResponse) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, n := range r.GetNodes() {
		if n.GetError() != "" {
			out[n.GetNode()] = []string{"error: " + n.GetError()}
			continue
		}
		require.Equal(t, n.GetKeys()[0], n.GetPrimary(), "%s: primary first", n.GetNode())
		out[n.GetNode()] = n.GetKeys()
	}
	return out
}

// everywhere is the keyring answer of nodes n1..n3 all holding keys.
func everywhere(keys ...string) map[string][]string {
	return map[string][]string{"n1": keys, "n2": keys, "n3": keys}
}

// memberWatch records, while it runs, every member a node sees as failed
// or left.
type memberWatch struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	bad  []string
}

func watchMembers(nodes []*testNode) *memberWatch {
	w := &memberWatch{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			for _, n := range nodes {
				for _, m := range n.Node.Members() {
					if m.Status == cluster.StatusFailed || m.Status == cluster.StatusLeft {
						w.mu.Lock()
						w.bad = append(w.bad, fmt.Sprintf("%s saw %s %s", n.ID, m.Name, m.Status))
						w.mu.Unlock()
					}
				}
			}
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// saw reports whether the watch recorded what.
func (w *memberWatch) saw(what string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.bad, what)
}

func (w *memberWatch) done() []string {
	close(w.stop)
	w.wg.Wait()
	return w.bad
}

// since is when each node saw each member become alive: a member marked
// failed (or suspect, in memberlist's own state, then refuted by a rejoin)
// and back would have a later time.
func since(nodes []*testNode) map[string]time.Time {
	out := map[string]time.Time{}
	for _, n := range nodes {
		for _, m := range n.Node.Members() {
			out[n.ID+"/"+m.Name+"/"+string(m.Status)] = m.Since
		}
	}
	return out
}

func awaitAllAlive(t *testing.T, nodes []*testNode) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			alive := 0
			for _, m := range n.Node.Members() {
				if m.Status == cluster.StatusAlive {
					alive++
				}
			}
			if alive != len(nodes) {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "not every node sees every other alive")
}

// TestKeyringRotation rotates the gossip key of a running cluster through
// the API of different nodes: install, use, remove. No member is ever
// marked failed, a node restarted afterwards comes back with the new
// keyring from its data dir, and a node with the old key can no longer join.
func TestKeyringRotation(t *testing.T) {
	keyA, rawA := gossipKey(t)
	keyB, _ := gossipKey(t)
	keyC, _ := gossipKey(t)
	keyD, _ := gossipKey(t)
	c := testcluster.New(t, 3, testcluster.Configure(func(_ int, cfg *cluster.Config) {
		cfg.GossipKeys = [][]byte{rawA}
	}))
	c.Leader()
	nodes := c.Live()
	awaitAllAlive(t, nodes)
	before := since(nodes)
	watch := watchMembers(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op1, op2, op3 := operatorClient(t, nodes[0]), operatorClient(t, nodes[1]), operatorClient(t, nodes[2])

	list, err := op1.KeyringList(ctx, connect.NewRequest(&cronoqv1.KeyringListRequest{}))
	require.NoError(t, err)
	require.EqualValues(t, 3, list.Msg.GetNumNodes())
	require.Equal(t, everywhere(keyA), keyringOf(t, list.Msg))
	require.Len(t, list.Msg.GetKeys(), 1)
	require.Equal(t, keyA, list.Msg.GetKeys()[0].GetKey())
	require.EqualValues(t, 3, list.Msg.GetKeys()[0].GetNodes())
	require.Equal(t, []string{"n1", "n2", "n3"}, list.Msg.GetKeys()[0].GetPrimaryOn())

	res, err := op2.KeyringInstall(ctx, connect.NewRequest(&cronoqv1.KeyringInstallRequest{Key: keyB}))
	require.NoError(t, err)
	require.Equal(t, everywhere(keyA, keyB), keyringOf(t, res.Msg))

	// A call carrying the forwarded header is done by its node alone: this
	// is how the node asked reaches the others.
	local := connect.NewRequest(&cronoqv1.KeyringInstallRequest{Key: keyC})
	local.Header().Set(transport.HeaderForwarded, "test")
	res, err = op1.KeyringInstall(ctx, local)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"n1": {keyA, keyB, keyC}}, keyringOf(t, res.Msg))
	list, err = op3.KeyringList(ctx, connect.NewRequest(&cronoqv1.KeyringListRequest{}))
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"n1": {keyA, keyB, keyC}, "n2": {keyA, keyB}, "n3": {keyA, keyB}}, keyringOf(t, list.Msg))
	require.Equal(t, []*cronoqv1.KeyringKey{
		{Key: keyA, Nodes: 3, PrimaryOn: []string{"n1", "n2", "n3"}},
		{Key: keyB, Nodes: 3},
		{Key: keyC, Nodes: 1},
	}, keysOf(list.Msg))

	// A key some node lacks cannot become primary.
	_, err = op3.KeyringUse(ctx, connect.NewRequest(&cronoqv1.KeyringUseRequest{Key: keyC}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "not installed on every node (missing on n2, n3)")
	res, err = op3.KeyringRemove(ctx, connect.NewRequest(&cronoqv1.KeyringRemoveRequest{Key: keyC}))
	require.NoError(t, err)
	require.Equal(t, everywhere(keyA, keyB), keyringOf(t, res.Msg))

	res, err = op3.KeyringUse(ctx, connect.NewRequest(&cronoqv1.KeyringUseRequest{Key: keyB}))
	require.NoError(t, err)
	require.Equal(t, everywhere(keyB, keyA), keyringOf(t, res.Msg))

	// The primary key cannot be removed; an invalid or unknown key is
	// refused.
	_, err = op1.KeyringRemove(ctx, connect.NewRequest(&cronoqv1.KeyringRemoveRequest{Key: keyB}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "the key is the primary key of n1, n2, n3")
	for _, bad := range []string{"", "%%%", "c2hvcnQ="} {
		_, err = op1.KeyringInstall(ctx, connect.NewRequest(&cronoqv1.KeyringInstallRequest{Key: bad}))
		require.Equal(t, apierr.KindInvalid, apierr.Kind(err), "%q: %v", bad, err)
		field, _ := apierr.Field(err)
		require.Equal(t, "key", field)
	}

	res, err = op1.KeyringRemove(ctx, connect.NewRequest(&cronoqv1.KeyringRemoveRequest{Key: keyA}))
	require.NoError(t, err)
	require.Equal(t, everywhere(keyB), keyringOf(t, res.Msg))
	_, err = op1.KeyringRemove(ctx, connect.NewRequest(&cronoqv1.KeyringRemoveRequest{Key: keyA}))
	require.Equal(t, apierr.KindNotFound, apierr.Kind(err), "%v", err)

	// Gossip went on through the rotation: no member was ever failed, and
	// none became alive again since.
	require.Empty(t, watch.done())
	require.Equal(t, before, since(nodes))
	c.Leader()

	// Restarted with its configured key (the old one), n3 comes back with
	// the new keyring of its data dir and rejoins. The same watch sees it
	// fail meanwhile.
	watch = watchMembers(nodes[:2])
	c.Stop("n3")
	require.Eventually(t, func() bool { return watch.saw("n1 saw n3 failed") && watch.saw("n2 saw n3 failed") },
		20*time.Second, 10*time.Millisecond)
	watch.done()
	n3 := c.Restart("n3")
	kr, err := n3.Node.GossipKeyring()
	require.NoError(t, err)
	require.Equal(t, cluster.GossipKeyring{Primary: keyB, Keys: []string{keyB}}, kr)
	awaitAllAlive(t, c.Live())
	list, err = operatorClient(t, n3).KeyringList(ctx, connect.NewRequest(&cronoqv1.KeyringListRequest{}))
	require.NoError(t, err)
	require.Equal(t, everywhere(keyB), keyringOf(t, list.Msg))

	// A node with the old key can no longer join.
	old := c.Config("old")
	old.GossipKeys = [][]byte{rawA}
	old.Join = []string{nodes[0].Addrs.Gossip}
	outsider := c.Start(old)
	require.Eventually(t, func() bool {
		for _, l := range outsider.Node.Health().Loops {
			if l.Name == "join" && l.Failures >= 3 {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	require.Len(t, outsider.Node.Members(), 1)
	for _, n := range []*testNode{nodes[0], nodes[1], n3} {
		for _, m := range n.Node.Members() {
			require.NotEqual(t, "old", m.Name, "%s knows the outsider", n.ID)
		}
	}

	// A member whose API does not answer fails alone, and nothing can be
	// made primary while its keyring cannot be read.
	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	require.NoError(t, nodes[1].Server.Stop(stopCtx))
	stopCancel()
	res, err = op1.KeyringInstall(ctx, connect.NewRequest(&cronoqv1.KeyringInstallRequest{Key: keyD}))
	require.NoError(t, err)
	got := keyringOf(t, res.Msg)
	require.Equal(t, []string{keyB, keyD}, got["n1"])
	require.Equal(t, []string{keyB, keyD}, got["n3"])
	require.Len(t, got["n2"], 1)
	require.Contains(t, got["n2"][0], "error: ")
	_, err = op1.KeyringUse(ctx, connect.NewRequest(&cronoqv1.KeyringUseRequest{Key: keyD}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "the keyring of every node must be read first, and n2: ")
}

func keysOf(r *cronoqv1.KeyringResponse) []*cronoqv1.KeyringKey {
	var out []*cronoqv1.KeyringKey
	for _, k := range r.GetKeys() {
		out = append(out, &cronoqv1.KeyringKey{Key: k.GetKey(), Nodes: k.GetNodes(), PrimaryOn: k.GetPrimaryOn()})
	}
	return out
}

// TestKeyringWithoutEncryption: a cluster without gossip encryption says
// so.
func TestKeyringWithoutEncryption(t *testing.T) {
	c := testcluster.New(t, 1)
	c.Leader()
	op := operatorClient(t, c.Live()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key, _ := gossipKey(t)
	_, err := op.KeyringList(ctx, connect.NewRequest(&cronoqv1.KeyringListRequest{}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "gossip encryption is not enabled")
	_, err = op.KeyringInstall(ctx, connect.NewRequest(&cronoqv1.KeyringInstallRequest{Key: key}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "gossip encryption is not enabled")
}
