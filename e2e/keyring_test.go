package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// keyringOutJSON is the output of the `operator keyring` commands.
type keyringOutJSON struct {
	NumNodes int `json:"num_nodes"`
	Keys     []struct {
		Key       string   `json:"key"`
		Nodes     int      `json:"nodes"`
		PrimaryOn []string `json:"primary_on"`
	} `json:"keys"`
	Nodes []struct {
		Node    string   `json:"node"`
		Primary string   `json:"primary"`
		Keys    []string `json:"keys"`
		Error   string   `json:"error"`
	} `json:"nodes"`
}

// requireKeyring checks that every node holds exactly keys, the first one
// primary.
func requireKeyring(t *testing.T, c *cluster, out keyringOutJSON, keys ...string) {
	t.Helper()
	require.Equal(t, len(c.nodes), out.NumNodes)
	require.Len(t, out.Nodes, len(c.nodes))
	for i, n := range out.Nodes {
		require.Equal(t, c.nodes[i].id, n.Node)
		require.Empty(t, n.Error)
		require.Equal(t, keys[0], n.Primary, n.Node)
		require.Equal(t, keys, n.Keys, n.Node)
	}
	require.Len(t, out.Keys, len(keys))
	for i, k := range out.Keys {
		require.Equal(t, keys[i], k.Key)
		require.Equal(t, len(c.nodes), k.Nodes)
		if i == 0 {
			require.Len(t, k.PrimaryOn, len(c.nodes))
		} else {
			require.Empty(t, k.PrimaryOn)
		}
	}
}

// TestGossipKeyRotation runs a cluster with -encrypt, rotates its gossip key
// with the CLI, and restarts a node with its original -encrypt: it comes
// back with the rotated keyring kept in its data dir.
func TestGossipKeyRotation(t *testing.T) {
	t.Parallel()
	gen := func() string {
		var out struct {
			Key string `json:"key"`
		}
		require.NoError(t, json.Unmarshal([]byte(cliRaw(t, nil, "operator", "keyring", "generate", "-o", "json").ok(t)), &out))
		return out.Key
	}
	oldKey, newKey := gen(), gen()
	c := newCluster(t, withAgentFlags("-encrypt", oldKey))
	for _, n := range c.nodes {
		require.Contains(t, n.proc.logText(), "gossip encryption enabled")
	}

	requireKeyring(t, c, decodeStrict[keyringOutJSON](t, c.cli(t, "operator", "keyring", "list", "-o", "json").ok(t)), oldKey)
	require.Equal(t, "key installed on 3 of 3 nodes\n", c.cli(t, "operator", "keyring", "install", newKey).ok(t))
	requireOneLineError(t, c.cli(t, "operator", "keyring", "remove", oldKey), "primary key of node1, node2, node3")
	require.Equal(t, "key is now primary on 3 of 3 nodes\n", c.cli(t, "operator", "keyring", "use", newKey).ok(t))
	requireKeyring(t, c, decodeStrict[keyringOutJSON](t, c.cli(t, "operator", "keyring", "list", "-o", "json").ok(t)), newKey, oldKey)
	requireKeyring(t, c, decodeStrict[keyringOutJSON](t, c.cli(t, "operator", "keyring", "remove", oldKey, "-o", "json").ok(t)), newKey)
	for _, n := range c.nodes {
		b, err := os.ReadFile(filepath.Join(n.dataDir, "gossip.keyring"))
		require.NoError(t, err)
		require.JSONEq(t, `["`+newKey+`"]`, string(b), n.id)
	}
	text := c.cli(t, "operator", "keyring", "list").ok(t)
	require.Regexp(t, `^KEY +NODES +PRIMARY ON\n`+regexp.QuoteMeta(newKey)+` +3/3 +node1,node2,node3\n$`, text)

	// node3 restarts with its original -encrypt: the data dir's keyring
	// wins, and it rejoins the others.
	n3 := c.node("node3")
	require.Equal(t, 0, c.terminate(n3, 30*time.Second))
	c.restart(n3)
	eventually(t, 30*time.Second, func() (bool, string) {
		members := decodeStrict[[]memberJSON](t, cliAt(t, n3.httpAddr, "members", "-o", "json").ok(t))
		var alive []string
		for _, m := range members {
			if m.Status == "alive" {
				alive = append(alive, m.Name)
			}
		}
		slices.Sort(alive)
		return slices.Equal(alive, []string{"node1", "node2", "node3"}), fmt.Sprintf("node3 sees alive %v", alive)
	})
	c.waitStable(30 * time.Second)
	require.Contains(t, n3.proc.logText(), "the gossip keyring of the data dir wins over the configured encryption key")
	requireKeyring(t, c, decodeStrict[keyringOutJSON](t, cliAt(t, n3.httpAddr, "operator", "keyring", "list", "-o", "json").ok(t)), newKey)
}
