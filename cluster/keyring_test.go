package cluster_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/cluster"
)

// newGossipKey returns a fresh key, base64 and raw.
func newGossipKey(t *testing.T) (string, []byte) {
	t.Helper()
	s, err := cluster.GenerateGossipKey()
	require.NoError(t, err)
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	require.Len(t, b, 32)
	return s, b
}

// readKeyringFile returns the keys of a node's gossip.keyring.
func readKeyringFile(t *testing.T, dataDir string) []string {
	t.Helper()
	path := filepath.Join(dataDir, "gossip.keyring")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "keyring file mode")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var keys []string
	require.NoError(t, json.Unmarshal(b, &keys), "%s", b)
	return keys
}

// memberNames returns the names of the members n sees with status.
func memberNames(n *cluster.Node, status cluster.MemberStatus) []string {
	var out []string
	for _, m := range n.Members() {
		if m.Status == status {
			out = append(out, m.Name)
		}
	}
	return out
}

// awaitJoinFailures waits until n's join loop has failed at least times
// attempts in a row: it tried its join list and was turned away.
func awaitJoinFailures(t *testing.T, n *cluster.Node, times int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, l := range n.Health().Loops {
			if l.Name == "join" && l.Failures >= times {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "%s: join did not fail %d times", n.ID(), times)
}

// TestGossipEncryptionMembership: nodes with one key form a cluster; a node
// with another key, or none, joins none of them (nor they it).
func TestGossipEncryptionMembership(t *testing.T) {
	c := newTestCluster(t)
	keyA, rawA := newGossipKey(t)
	_, rawB := newGossipKey(t)
	names := []string{"n1", "n2", "n3"}
	cfgs := make([]cluster.Config, len(names))
	var join []string
	for i, name := range names {
		cfgs[i] = c.config(name)
		cfgs[i].BootstrapExpect = len(names)
		cfgs[i].GossipKeys = [][]byte{rawA}
		join = append(join, cfgs[i].GossipAddr)
	}
	var nodes []*cluster.Node
	for i := range cfgs {
		cfgs[i].Join = join
		nodes = append(nodes, c.start(cfgs[i]))
	}
	c.leader()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if len(memberNames(n, cluster.StatusAlive)) != 3 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for _, n := range nodes {
		kr, err := n.GossipKeyring()
		require.NoError(t, err)
		require.Equal(t, cluster.GossipKeyring{Primary: keyA, Keys: []string{keyA}}, kr)
		require.Equal(t, []string{keyA}, readKeyringFile(t, n.DataDir()), "seeded from the configuration")
	}

	// A node with another key and a node without encryption try to join.
	wrong := c.config("wrong")
	wrong.GossipKeys = [][]byte{rawB}
	wrong.Join = join
	plain := c.config("plain")
	plain.Join = join
	outsiders := []*cluster.Node{c.start(wrong), c.start(plain)}
	for _, o := range outsiders {
		awaitJoinFailures(t, o, 3)
	}
	for _, o := range outsiders {
		require.Equal(t, []string{o.ID()}, memberNames(o, cluster.StatusAlive), "%s sees only itself", o.ID())
		require.Len(t, o.Members(), 1, "%s: %v", o.ID(), o.Members())
	}
	for _, n := range nodes {
		for _, m := range n.Members() {
			require.Contains(t, names, m.Name, "%s lists %s", n.ID(), m.Name)
		}
	}
	_, err := outsiders[1].GossipKeyring()
	require.ErrorIs(t, err, cluster.ErrGossipEncryptionDisabled)
	_, err = outsiders[1].InstallGossipKey(keyA)
	require.ErrorIs(t, err, cluster.ErrGossipEncryptionDisabled)
	_, err = os.Stat(filepath.Join(outsiders[1].DataDir(), "gossip.keyring"))
	require.ErrorIs(t, err, os.ErrNotExist, "no keyring file without encryption")
}

// TestGossipKeyringOperations runs the keyring operations on one node and
// checks its keyring file after each, then restarts it: the file wins over
// the configured key.
func TestGossipKeyringOperations(t *testing.T) {
	c := newTestCluster(t)
	keyA, rawA := newGossipKey(t)
	keyB, rawB := newGossipKey(t)
	keyC, _ := newGossipKey(t)
	keyD, _ := newGossipKey(t)
	cfg := c.config("solo")
	cfg.BootstrapExpect = 1
	cfg.GossipKeys = [][]byte{rawA}
	n := c.start(cfg)
	dir := n.DataDir()

	ring := func(primary string, keys ...string) cluster.GossipKeyring {
		return cluster.GossipKeyring{Primary: primary, Keys: keys}
	}
	check := func(want cluster.GossipKeyring, got cluster.GossipKeyring, err error) {
		t.Helper()
		require.NoError(t, err)
		require.Equal(t, want, got)
		now, err := n.GossipKeyring()
		require.NoError(t, err)
		require.Equal(t, want, now)
		require.Equal(t, want.Keys, readKeyringFile(t, dir))
	}

	got, err := n.InstallGossipKey(keyB)
	check(ring(keyA, keyA, keyB), got, err)
	got, err = n.InstallGossipKey(keyB)
	check(ring(keyA, keyA, keyB), got, err) // again: no change

	// Refusals change nothing.
	_, err = n.UseGossipKey(keyC)
	require.ErrorIs(t, err, cluster.ErrGossipKeyNotInstalled)
	_, err = n.RemoveGossipKey(keyA)
	require.ErrorIs(t, err, cluster.ErrGossipKeyPrimary)
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString([]byte("short"))} {
		_, err = n.InstallGossipKey(bad)
		var ie *cluster.InvalidError
		require.ErrorAs(t, err, &ie, "%q", bad)
		require.Equal(t, "key", ie.Field)
	}
	got, err = n.GossipKeyring()
	check(ring(keyA, keyA, keyB), got, err)

	got, err = n.UseGossipKey(keyB)
	check(ring(keyB, keyB, keyA), got, err)
	// A key in the middle of the ring goes; the others keep their order.
	got, err = n.InstallGossipKey(keyC)
	check(ring(keyB, keyB, keyA, keyC), got, err)
	got, err = n.InstallGossipKey(keyD)
	check(ring(keyB, keyB, keyA, keyC, keyD), got, err)
	got, err = n.RemoveGossipKey(keyC)
	check(ring(keyB, keyB, keyA, keyD), got, err)
	got, err = n.RemoveGossipKey(keyD)
	check(ring(keyB, keyB, keyA), got, err)
	got, err = n.RemoveGossipKey(keyA)
	check(ring(keyB, keyB), got, err)
	got, err = n.RemoveGossipKey(keyA)
	check(ring(keyB, keyB), got, err) // not installed: no change

	// Restarted with the old key configured, the node keeps its file's.
	c.stop("solo")
	n = c.restart("solo")
	got, err = n.GossipKeyring()
	check(ring(keyB, keyB), got, err)
	c.leader()

	// Without any key configured, the file still turns encryption on.
	c.stop("solo")
	cfg.GossipKeys = nil
	n = c.start(cfg)
	got, err = n.GossipKeyring()
	check(ring(keyB, keyB), got, err)
	c.stop("solo")

	// A damaged keyring file stops the node from starting.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gossip.keyring"), []byte(`["`+keyB+`", "xx"]`), 0o600))
	bad, err := cluster.New(cfg)
	require.NoError(t, err)
	err = bad.Start(context.Background())
	require.ErrorContains(t, err, "gossip keyring")
	require.ErrorContains(t, err, "key 1")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gossip.keyring"), []byte(`[]`), 0o600))
	bad, err = cluster.New(cfg)
	require.NoError(t, err)
	require.ErrorContains(t, bad.Start(context.Background()), "holds no key")

	// Keys of the wrong size are refused by Validate.
	cfg.GossipKeys = [][]byte{rawB, rawB[:20]}
	_, err = cluster.New(cfg)
	var ce *cluster.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "GossipKeys[1]", ce.Field)
}

// TestGossipKeyringDevInMemory: a dev node without a data dir keeps its
// keyring in memory.
func TestGossipKeyringDevInMemory(t *testing.T) {
	c := newTestCluster(t)
	keyA, rawA := newGossipKey(t)
	keyB, _ := newGossipKey(t)
	cfg := c.config("dev")
	cfg.DataDir, cfg.Dev = "", true
	cfg.GossipKeys = [][]byte{rawA}
	n := c.start(cfg)
	got, err := n.InstallGossipKey(keyB)
	require.NoError(t, err)
	require.Equal(t, cluster.GossipKeyring{Primary: keyA, Keys: []string{keyA, keyB}}, got)
	_, err = os.Stat(filepath.Join(n.DataDir(), "gossip.keyring"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
