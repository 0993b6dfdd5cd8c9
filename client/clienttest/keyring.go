package clienttest

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// WithGossipKeys turns on the fake gossip encryption: every node starts
// with keys (standard base64 of 16, 24 or 32 bytes), the first one primary.
// The keyring calls then work as on a real cluster, every node being an
// alive gossip member; without this option they answer failed_precondition
// as a cluster without encryption does.
func WithGossipKeys(keys ...string) Option {
	return func(c *config) { c.gossipKeys = append([]string(nil), keys...) }
}

// SetGossipKeys replaces the node's gossip keyring (primary first), for
// instance to play a node that missed an install; no key turns its
// encryption off.
func (n *Node) SetGossipKeys(keys ...string) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.gossipKeys = append([]string(nil), keys...)
	if len(keys) == 0 {
		n.gossipKeys = nil
	}
}

// GossipKeys returns the node's gossip keyring, primary first.
func (n *Node) GossipKeys() []string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return append([]string(nil), n.gossipKeys...)
}

// checkGossipKey checks a key as a node does.
func checkGossipKey(key string) error {
	if key == "" {
		return errors.New("empty key")
	}
	b, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return errors.New("not base64")
	}
	if l := len(b); l != 16 && l != 24 && l != 32 {
		return fmt.Errorf("%d bytes: a key must be 16, 24 or 32 bytes (AES-128, -192 or -256)", l)
	}
	return nil
}

var errNoEncryption = connect.NewError(connect.CodeFailedPrecondition, errors.New("gossip encryption is not enabled"))

func (o *operatorService) KeyringList(ctx context.Context, req *connect.Request[cronoqv1.KeyringListRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return unary(ctx, o.n, req, anyNode, func(*served) (*cronoqv1.KeyringResponse, error) {
		return o.n.c.keyringLocked(o.n, "", nil)
	})
}

func (o *operatorService) KeyringInstall(ctx context.Context, req *connect.Request[cronoqv1.KeyringInstallRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return unary(ctx, o.n, req, anyNode, func(*served) (*cronoqv1.KeyringResponse, error) {
		return o.n.c.keyringLocked(o.n, req.Msg.GetKey(), func(keys []string, key string) ([]string, error) {
			if slices.Contains(keys, key) {
				return keys, nil
			}
			return append(keys, key), nil
		})
	})
}

func (o *operatorService) KeyringUse(ctx context.Context, req *connect.Request[cronoqv1.KeyringUseRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return unary(ctx, o.n, req, anyNode, func(*served) (*cronoqv1.KeyringResponse, error) {
		if err := o.n.c.unreadLocked(o.n, "use", req.Msg.GetKey()); err != nil {
			return nil, err
		}
		var missing []string
		for _, n := range o.n.c.nodes {
			if !slices.Contains(n.gossipKeys, req.Msg.GetKey()) {
				missing = append(missing, n.id)
			}
		}
		if len(missing) > 0 && checkGossipKey(req.Msg.GetKey()) == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("the key is not installed on every node (missing on %s): install it first", strings.Join(missing, ", ")))
		}
		return o.n.c.keyringLocked(o.n, req.Msg.GetKey(), func(keys []string, key string) ([]string, error) {
			return append([]string{key}, slices.DeleteFunc(keys, func(k string) bool { return k == key })...), nil
		})
	})
}

func (o *operatorService) KeyringRemove(ctx context.Context, req *connect.Request[cronoqv1.KeyringRemoveRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return unary(ctx, o.n, req, anyNode, func(*served) (*cronoqv1.KeyringResponse, error) {
		key := req.Msg.GetKey()
		if err := o.n.c.unreadLocked(o.n, "remove", key); err != nil {
			return nil, err
		}
		if checkGossipKey(key) == nil && o.n.gossipKeys != nil {
			var primary []string
			held := false
			for _, n := range o.n.c.nodes {
				if len(n.gossipKeys) > 0 && n.gossipKeys[0] == key {
					primary = append(primary, n.id)
				}
				held = held || slices.Contains(n.gossipKeys, key)
			}
			switch {
			case len(primary) > 0:
				return nil, connect.NewError(connect.CodeFailedPrecondition,
					fmt.Errorf("the key is the primary key of %s: make another key primary (use) before removing it", strings.Join(primary, ", ")))
			case !held:
				return nil, apierr.NotFound("the key is not installed on any node")
			}
		}
		return o.n.c.keyringLocked(o.n, key, func(keys []string, key string) ([]string, error) {
			return slices.DeleteFunc(keys, func(k string) bool { return k == key }), nil
		})
	})
}

// unreadLocked refuses a use or remove of a valid key, asked of a node with
// encryption, while some node's keyring cannot be read (it has no
// encryption), as a node does.
func (c *Cluster) unreadLocked(asked *Node, op, key string) error {
	if checkGossipKey(key) != nil || asked.gossipKeys == nil {
		return nil // refused as invalid or not enabled by keyringLocked
	}
	var unread []string
	for _, n := range c.nodes {
		if n.gossipKeys == nil {
			unread = append(unread, n.id+": "+errNoEncryption.Message())
		}
	}
	if len(unread) == 0 {
		return nil
	}
	slices.Sort(unread)
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
		"cannot %s the key: the keyring of every node must be read first, and %s", op, strings.Join(unread, "; ")))
}

// keyringLocked applies change (nil: a list) to every node's keyring, as
// asked of node asked, and answers as a node does.
func (c *Cluster) keyringLocked(asked *Node, key string, change func(keys []string, key string) ([]string, error)) (*cronoqv1.KeyringResponse, error) {
	if change != nil {
		if err := checkGossipKey(key); err != nil {
			return nil, apierr.Invalid("key", err.Error())
		}
	}
	if asked.gossipKeys == nil {
		return nil, errNoEncryption
	}
	out := &cronoqv1.KeyringResponse{NumNodes: int32(len(c.nodes))}
	byKey := map[string]*cronoqv1.KeyringKey{}
	for _, n := range c.nodes {
		r := &cronoqv1.KeyringNode{Node: n.id}
		out.Nodes = append(out.Nodes, r)
		if n.gossipKeys == nil {
			r.Error = errNoEncryption.Message()
			continue
		}
		if change != nil {
			keys, err := change(slices.Clone(n.gossipKeys), key)
			if err != nil {
				r.Error = err.Error()
				continue
			}
			n.gossipKeys = keys
		}
		r.Primary, r.Keys = n.gossipKeys[0], slices.Clone(n.gossipKeys)
		for _, k := range n.gossipKeys {
			kk := byKey[k]
			if kk == nil {
				kk = &cronoqv1.KeyringKey{Key: k}
				byKey[k] = kk
				out.Keys = append(out.Keys, kk)
			}
			kk.Nodes++
			if k == r.Primary {
				kk.PrimaryOn = append(kk.PrimaryOn, n.id)
			}
		}
	}
	slices.SortFunc(out.Nodes, func(a, b *cronoqv1.KeyringNode) int { return strings.Compare(a.Node, b.Node) })
	for _, k := range out.Keys {
		slices.Sort(k.PrimaryOn)
	}
	slices.SortFunc(out.Keys, func(a, b *cronoqv1.KeyringKey) int {
		return cmp.Or(
			cmp.Compare(len(b.PrimaryOn), len(a.PrimaryOn)),
			cmp.Compare(b.Nodes, a.Nodes),
			strings.Compare(a.Key, b.Key))
	})
	return out, nil
}
