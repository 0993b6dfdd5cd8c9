package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/cluster"
)

// keyringCommands are the subcommands of `cronoq operator keyring`.
var keyringCommands = map[string]command{
	"list":     {Summary: "List the gossip encryption keys of every node", Run: runKeyringList},
	"install":  {Summary: "Install a gossip key on every node (for decryption)", Run: runKeyringInstall},
	"use":      {Summary: "Make an installed gossip key the one every node encrypts with", Run: runKeyringUse},
	"remove":   {Summary: "Remove a gossip key from every node", Run: runKeyringRemove},
	"generate": {Summary: "Print a new random gossip encryption key", Run: runKeyringGenerate},
}

func runKeyring(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq operator keyring", keyringCommands, args)
}

// keyringJSON is the JSON output of the keyring commands.
type keyringJSON struct {
	NumNodes int               `json:"num_nodes"`
	Keys     []keyringKeyJSON  `json:"keys"`
	Nodes    []keyringNodeJSON `json:"nodes"`
}

type keyringKeyJSON struct {
	Key       string   `json:"key"`
	Nodes     int      `json:"nodes"`
	PrimaryOn []string `json:"primary_on"`
}

type keyringNodeJSON struct {
	Node    string   `json:"node"`
	Primary string   `json:"primary"`
	Keys    []string `json:"keys"`
	Error   string   `json:"error"`
}

func newKeyringJSON(k client.Keyring) keyringJSON {
	out := keyringJSON{NumNodes: k.NumNodes, Keys: []keyringKeyJSON{}, Nodes: []keyringNodeJSON{}}
	for _, kk := range k.Keys {
		out.Keys = append(out.Keys, keyringKeyJSON{Key: kk.Key, Nodes: kk.Nodes, PrimaryOn: nonNilSlice(kk.PrimaryOn)})
	}
	for _, n := range k.Nodes {
		out.Nodes = append(out.Nodes, keyringNodeJSON{Node: n.Node, Primary: n.Primary, Keys: nonNilSlice(n.Keys), Error: n.Error})
	}
	return out
}

const keyringJSONHelp = `JSON output: {"num_nodes": N, "keys": [{"key", "nodes": N, "primary_on":
["NODE"...]}...], "nodes": [{"node", "primary", "keys": [...], "error"}...]}
with the keyrings after the change; "error" is empty on the nodes that did it.
The command exits 1, after printing, when some node failed.`

func runKeyringList(ctx context.Context, s stdio, args []string) error {
	c := newCmd("operator keyring list", "cronoq operator keyring list", `
List the gossip encryption keys installed on the alive nodes: each key with
how many nodes hold it and the nodes that encrypt with it (PRIMARY ON). A
rotation is complete when one key is left, held and primary everywhere.

`+keyringJSONHelp)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	k, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.Keyring, error) { return cl.KeyringList(ctx) })
	if err != nil {
		return keyringCallError(err)
	}
	return printKeyring(s.Stdout, cf, k, "")
}

func runKeyringInstall(ctx context.Context, s stdio, args []string) error {
	return keyringChange(ctx, s, args, "install", `
Install gossip encryption key KEY on every alive node. The nodes decrypt with
it from then on but still encrypt with their primary key: make it primary
with 'cronoq operator keyring use KEY' once it is installed everywhere.
Installing a key that is already installed changes nothing.

`, func(ctx context.Context, cl *client.Client, key string) (client.Keyring, error) {
		return cl.KeyringInstall(ctx, key)
	}, "key installed on %d of %d nodes")
}

func runKeyringUse(ctx context.Context, s stdio, args []string) error {
	return keyringChange(ctx, s, args, "use", `
Make gossip encryption key KEY the primary key of every alive node: the key
they encrypt with. It is refused unless every node has KEY installed (a node
without it could not read the others). The previous key stays installed, so
the nodes that did not switch yet are still understood; remove it once every
node uses KEY.

`, func(ctx context.Context, cl *client.Client, key string) (client.Keyring, error) {
		return cl.KeyringUse(ctx, key)
	}, "key is now primary on %d of %d nodes")
}

func runKeyringRemove(ctx context.Context, s stdio, args []string) error {
	return keyringChange(ctx, s, args, "remove", `
Remove gossip encryption key KEY from every alive node. It is refused while
KEY is some node's primary key (make another key primary first), and when no
node holds it.

`, func(ctx context.Context, cl *client.Client, key string) (client.Keyring, error) {
		return cl.KeyringRemove(ctx, key)
	}, "key removed from %d of %d nodes")
}

// keyringChange runs `operator keyring install|use|remove KEY`.
func keyringChange(ctx context.Context, s stdio, args []string, name, about string,
	fn func(context.Context, *client.Client, string) (client.Keyring, error), done string) error {
	c := newCmd("operator keyring "+name, "cronoq operator keyring "+name+" KEY", about+keyringJSONHelp)
	cf := c.clientFlags()
	if err := c.parse(s, args, 1); err != nil {
		return err
	}
	key := c.args[0]
	if _, err := cluster.ParseGossipKey(key); err != nil {
		return c.usageErr("invalid KEY: %v", err)
	}
	k, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.Keyring, error) { return fn(ctx, cl, key) })
	if err != nil {
		return keyringCallError(err)
	}
	return printKeyring(s.Stdout, cf, k, done)
}

// printKeyring prints the answer of a keyring call: with done (a format of
// the nodes that did it and the nodes asked), one line; otherwise the keys.
// It returns an error naming the nodes that failed.
func printKeyring(w io.Writer, cf *clientFlags, k client.Keyring, done string) error {
	failed := k.Failed()
	var err error
	switch {
	case cf.out.json():
		err = writeJSON(w, newKeyringJSON(k))
	case done != "":
		_, err = fmt.Fprintf(w, done+"\n", len(k.Nodes)-len(failed), k.NumNodes)
	default:
		tb := newTable(w, "KEY", "NODES", "PRIMARY ON")
		for _, kk := range k.Keys {
			tb.row(kk.Key, fmt.Sprintf("%d/%d", kk.Nodes, k.NumNodes), strings.Join(kk.PrimaryOn, ","))
		}
		err = tb.flush()
	}
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		msgs := make([]string, 0, len(failed))
		for _, n := range failed {
			msgs = append(msgs, n.Node+": "+n.Error)
		}
		return fmt.Errorf("failed on %d of %d nodes: %s", len(failed), k.NumNodes, strings.Join(msgs, "; "))
	}
	return nil
}

// keyringCallError words a refusal of a keyring call (no encryption, key
// not installed everywhere, primary key, key not found) as the node did.
func keyringCallError(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) && (ae.Code == connect.CodeFailedPrecondition || errors.Is(err, client.ErrNotFound)) {
		return errors.New(ae.Message)
	}
	return err
}

func runKeyringGenerate(_ context.Context, s stdio, args []string) error {
	c := newCmd("operator keyring generate", "cronoq operator keyring generate [-o json]", `
Print a new random 32-byte gossip encryption key (AES-256), in base64, for
the agent's -encrypt or for 'cronoq operator keyring install'. It contacts no
node.

JSON output: {"key": "KEY"}`)
	out := c.outputFlag()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	key, err := cluster.GenerateGossipKey()
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(s.Stdout, struct {
			Key string `json:"key"`
		}{key})
	}
	_, err = fmt.Fprintln(s.Stdout, key)
	return err
}
