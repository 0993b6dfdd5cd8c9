package client

import (
	"context"

	"connectrpc.com/connect"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// Keyring is the gossip encryption keyring of the cluster, as the alive
// nodes answered a keyring call: each node's keys after the operation (or
// its error), and each key with the nodes that hold it. Keys are standard
// base64 of 16, 24 or 32 bytes.
//
// A keyring call that failed on some nodes still answers: check Failed.
type Keyring struct {
	// NumNodes is how many nodes were asked: the alive gossip members.
	NumNodes int
	// Keys are the keys the nodes that answered hold, the ones primary on
	// most nodes first.
	Keys []KeyringKey
	// Nodes are the nodes asked, sorted by name.
	Nodes []KeyringNode
}

// KeyringKey is one key over the nodes that answered.
type KeyringKey struct {
	Key string
	// Nodes is how many nodes hold it.
	Nodes int
	// PrimaryOn names the nodes that encrypt with it, sorted.
	PrimaryOn []string
}

// KeyringNode is one node's keyring, or why the operation failed there.
type KeyringNode struct {
	Node string
	// Error is empty when the node did the operation.
	Error   string
	Primary string
	// Keys are the keys the node decrypts with, primary first.
	Keys []string
}

// Failed returns the nodes on which the operation failed.
func (k Keyring) Failed() []KeyringNode {
	var out []KeyringNode
	for _, n := range k.Nodes {
		if n.Error != "" {
			out = append(out, n)
		}
	}
	return out
}

// KeyringList lists the gossip keyring of every alive node. Without gossip
// encryption it fails with a failed_precondition *APIError.
func (c *Client) KeyringList(ctx context.Context) (Keyring, error) {
	resp, err := unaryTo(ctx, c, "listing the gossip keyring", read, true, &cronoqv1.KeyringListRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.KeyringListRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
			return ep.operator.KeyringList
		})
	return keyringFromProto(resp), err
}

// KeyringInstall installs key on every alive node, for decryption; it does
// not encrypt with it until KeyringUse.
func (c *Client) KeyringInstall(ctx context.Context, key string) (Keyring, error) {
	resp, err := unaryTo(ctx, c, "installing a gossip key", idempotent, true, &cronoqv1.KeyringInstallRequest{Key: key},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.KeyringInstallRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
			return ep.operator.KeyringInstall
		})
	return keyringFromProto(resp), err
}

// KeyringUse makes key, which must be installed on every alive node, the
// key every node encrypts with.
func (c *Client) KeyringUse(ctx context.Context, key string) (Keyring, error) {
	resp, err := unaryTo(ctx, c, "using a gossip key", idempotent, true, &cronoqv1.KeyringUseRequest{Key: key},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.KeyringUseRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
			return ep.operator.KeyringUse
		})
	return keyringFromProto(resp), err
}

// KeyringRemove removes key from every alive node. A key that is some
// node's primary key is refused; one that no node holds is not found. It is
// retried only when a node refused it unexecuted.
func (c *Client) KeyringRemove(ctx context.Context, key string) (Keyring, error) {
	resp, err := unaryTo(ctx, c, "removing a gossip key", once, true, &cronoqv1.KeyringRemoveRequest{Key: key},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.KeyringRemoveRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
			return ep.operator.KeyringRemove
		})
	return keyringFromProto(resp), err
}

func keyringFromProto(p *cronoqv1.KeyringResponse) Keyring {
	if p == nil {
		return Keyring{}
	}
	out := Keyring{NumNodes: int(p.GetNumNodes())}
	for _, k := range p.GetKeys() {
		out.Keys = append(out.Keys, KeyringKey{Key: k.GetKey(), Nodes: int(k.GetNodes()), PrimaryOn: k.GetPrimaryOn()})
	}
	for _, n := range p.GetNodes() {
		out.Nodes = append(out.Nodes, KeyringNode{Node: n.GetNode(), Error: n.GetError(), Primary: n.GetPrimary(), Keys: n.GetKeys()})
	}
	return out
}
