package main

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/client/clienttest"
	"github.com/cronoq/cronoq/cluster"
)

// testKey is a gossip key made of one repeated byte.
func testKey(b byte) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(b), 32)))
}

func TestKeyringArguments(t *testing.T) {
	// Refused before any node is asked.
	t.Setenv("CRONOQ_ADDR", closedAddr)
	short := base64.StdEncoding.EncodeToString([]byte("0123456789"))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"operator", "keyring"}, []string{"missing command after 'cronoq operator keyring'"}},
		{[]string{"operator", "keyring", "rotate"}, []string{`unknown command "operator keyring rotate"`}},
		{[]string{"operator", "keyring", "install"}, []string{"missing argument (usage: cronoq operator keyring install KEY)"}},
		{[]string{"operator", "keyring", "use"}, []string{"missing argument (usage: cronoq operator keyring use KEY)"}},
		{[]string{"operator", "keyring", "remove"}, []string{"missing argument (usage: cronoq operator keyring remove KEY)"}},
		{[]string{"operator", "keyring", "install", testKey('a'), testKey('b')}, []string{"unexpected argument", "keyring install -h"}},
		{[]string{"operator", "keyring", "install", "not-base64!"}, []string{"invalid KEY: not base64", "operator keyring generate"}},
		{[]string{"operator", "keyring", "use", short}, []string{"invalid KEY: 10 bytes: a key must be 16, 24 or 32 bytes"}},
		{[]string{"operator", "keyring", "remove", ""}, []string{"invalid KEY: empty key"}},
		{[]string{"operator", "keyring", "list", "extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"operator", "keyring", "list", "-o", "yaml"}, []string{"must be text or json"}},
		{[]string{"operator", "keyring", "generate", "extra"}, []string{`unexpected argument "extra"`}},
	} {
		r := runCLI(t, "", tc.args...)
		requireFailure(t, r, exitUsage, tc.want...)
	}
}

func TestKeyringGenerate(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "operator", "keyring", "generate")
	requireOK(t, r)
	key := strings.TrimSuffix(r.stdout, "\n")
	b, err := cluster.ParseGossipKey(key)
	require.NoError(t, err)
	require.Len(t, b, 32)

	r = runCLI(t, "", "operator", "keyring", "generate", "-o", "json")
	requireOK(t, r)
	var out struct {
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	_, err = cluster.ParseGossipKey(out.Key)
	require.NoError(t, err)
	require.NotEqual(t, key, out.Key)
}

func TestKeyringCommands(t *testing.T) {
	t.Parallel()
	a, b, c := testKey('a'), testKey('b'), testKey('c')
	f, addr := startFake(t, clienttest.WithNodeIDs("n1", "n2", "n3"), clienttest.WithGossipKeys(a))

	r := runCLI(t, "", "operator", "keyring", "list", "-addr", addr)
	requireOK(t, r)
	require.Equal(t, ""+
		"KEY                                           NODES  PRIMARY ON\n"+
		a+"  3/3    n1,n2,n3\n", r.stdout)

	r = runCLI(t, "", "operator", "keyring", "install", b, "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "key installed on 3 of 3 nodes\n", r.stdout)
	r = runCLI(t, "", "operator", "keyring", "list", "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{
		"num_nodes": 3,
		"keys": [{"key": "`+a+`", "nodes": 3, "primary_on": ["n1", "n2", "n3"]},
		         {"key": "`+b+`", "nodes": 3, "primary_on": []}],
		"nodes": [{"node": "n1", "primary": "`+a+`", "keys": ["`+a+`", "`+b+`"], "error": ""},
		          {"node": "n2", "primary": "`+a+`", "keys": ["`+a+`", "`+b+`"], "error": ""},
		          {"node": "n3", "primary": "`+a+`", "keys": ["`+a+`", "`+b+`"], "error": ""}]
	}`, r.stdout)

	// Refusals are explained as the node words them.
	r = runCLI(t, "", "operator", "keyring", "use", c, "-addr", addr)
	requireFailure(t, r, exitError, "cronoq: the key is not installed on every node (missing on n1, n2, n3): install it first")
	r = runCLI(t, "", "operator", "keyring", "remove", a, "-addr", addr)
	requireFailure(t, r, exitError, "the key is the primary key of n1, n2, n3")
	r = runCLI(t, "", "operator", "keyring", "remove", c, "-addr", addr)
	requireFailure(t, r, exitError, "cronoq: the key is not installed on any node")

	r = runCLI(t, "", "operator", "keyring", "use", b, "-addr", addr)
	requireOK(t, r)
	require.Equal(t, "key is now primary on 3 of 3 nodes\n", r.stdout)
	r = runCLI(t, "", "operator", "keyring", "remove", a, "-o", "json", "-addr", addr)
	requireOK(t, r)
	require.JSONEq(t, `{
		"num_nodes": 3,
		"keys": [{"key": "`+b+`", "nodes": 3, "primary_on": ["n1", "n2", "n3"]}],
		"nodes": [{"node": "n1", "primary": "`+b+`", "keys": ["`+b+`"], "error": ""},
		          {"node": "n2", "primary": "`+b+`", "keys": ["`+b+`"], "error": ""},
		          {"node": "n3", "primary": "`+b+`", "keys": ["`+b+`"], "error": ""}]
	}`, r.stdout)

	// A node that fails: the answer is printed, and the command exits 1
	// naming it.
	f.Node(2).SetGossipKeys()
	r = runCLI(t, "", "operator", "keyring", "install", c, "-addr", addr)
	require.Equal(t, exitError, r.code)
	require.Equal(t, "key installed on 2 of 3 nodes\n", r.stdout)
	require.Equal(t, "cronoq: failed on 1 of 3 nodes: n3: gossip encryption is not enabled\n", r.stderr)
	r = runCLI(t, "", "operator", "keyring", "list", "-addr", addr)
	require.Equal(t, exitError, r.code)
	require.Equal(t, ""+
		"KEY                                           NODES  PRIMARY ON\n"+
		b+"  2/3    n1,n2\n"+
		c+"  2/3    -\n", r.stdout)
	require.Equal(t, []string{b, c}, f.Node(0).GossipKeys())
	r = runCLI(t, "", "operator", "keyring", "use", c, "-addr", addr)
	requireFailure(t, r, exitError, "cronoq: cannot use the key: the keyring of every node must be read first, and n3: gossip encryption is not enabled")

	// Without encryption.
	_, plain := startFake(t)
	r = runCLI(t, "", "operator", "keyring", "list", "-addr", plain)
	requireFailure(t, r, exitError, "cronoq: gossip encryption is not enabled")
}

func TestAgentEncryptFlag(t *testing.T) {
	key := testKey('k')
	cfg, err := parseAgent(t, "-dev", "-encrypt", key)
	require.NoError(t, err)
	require.Equal(t, key, cfg.encrypt)
	raw, _ := base64.StdEncoding.DecodeString(key)
	require.Equal(t, [][]byte{raw}, cfg.clusterConfig("127.0.0.1:1", nil).GossipKeys)

	cfg, err = parseAgent(t, "-dev")
	require.NoError(t, err)
	require.Empty(t, cfg.clusterConfig("127.0.0.1:1", nil).GossipKeys, "no -encrypt: no encryption")

	cfg, err = parseAgent(t, "-config", writeFile(t, "agent.hcl", "dev = true\nencrypt = \""+key+"\"\n"))
	require.NoError(t, err)
	require.Equal(t, key, cfg.encrypt)

	for _, bad := range []string{"nope", base64.StdEncoding.EncodeToString([]byte("0123456789"))} {
		_, err := parseAgent(t, "-dev", "-encrypt", bad)
		var ue *usageError
		require.ErrorAs(t, err, &ue, bad)
		require.ErrorContains(t, err, "invalid -encrypt", bad)
	}
	_, err = parseAgent(t, "-config", writeFile(t, "agent.json", `{"dev": true, "encrypt": "nope"}`))
	require.ErrorContains(t, err, "invalid -encrypt")
}

func TestKeyringHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"operator", "-h"}, []string{"Usage: cronoq operator <command>", "  keyring ", "  raft "}},
		{[]string{"operator", "keyring", "-h"}, []string{"Usage: cronoq operator keyring <command>", "  list ", "  install ", "  use ", "  remove ", "  generate "}},
		{[]string{"operator", "keyring", "list", "-h"}, []string{"Usage: cronoq operator keyring list", "PRIMARY ON", `"primary_on"`, "  -addr ", "  -o "}},
		{[]string{"operator", "keyring", "install", "-h"}, []string{"Usage: cronoq operator keyring install KEY", "keyring use KEY"}},
		{[]string{"operator", "keyring", "use", "-h"}, []string{"Usage: cronoq operator keyring use KEY", "unless every node has KEY installed"}},
		{[]string{"operator", "keyring", "remove", "-h"}, []string{"Usage: cronoq operator keyring remove KEY", "primary key"}},
		{[]string{"operator", "keyring", "generate", "-h"}, []string{"Usage: cronoq operator keyring generate [-o json]", "32-byte", "-encrypt"}},
		{[]string{"agent", "-h"}, []string{"-encrypt KEY", "gossip.keyring", "  -encrypt KEY"}},
	} {
		r := runCLI(t, "", tc.args...)
		require.Equal(t, exitOK, r.code, "%v: %s", tc.args, r.stderr)
		for _, w := range tc.want {
			require.Contains(t, r.stdout, w, "%v", tc.args)
		}
	}
}
