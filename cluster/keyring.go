package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Gossip encryption: memberlist encrypts every gossip message (UDP and TCP)
// with AES-GCM under the primary key of its keyring and tries every key of
// the ring to decrypt, so keys can be rotated without downtime: install the
// new key everywhere, make it primary everywhere, remove the old one.
//
// A node persists its keyring in its data dir (gossipKeyringFile), as
// Consul keeps serf/local.keyring: the file seeded from Config.GossipKeys on
// first start wins over the configuration on later starts, so that a node
// restarted after a rotation comes back with the keys the cluster uses.

// gossipKeyringFile is the name of the keyring file in the data dir: a JSON
// list of base64 keys, primary first.
const gossipKeyringFile = "gossip.keyring"

// GossipKeyring is a node's gossip encryption keyring, keys in base64.
type GossipKeyring struct {
	// Primary is the key the node encrypts with.
	Primary string
	// Keys are every key the node decrypts with, primary first.
	Keys []string
}

var (
	// ErrGossipEncryptionDisabled: the node runs gossip without encryption,
	// so it has no keyring to list or change.
	ErrGossipEncryptionDisabled = errors.New("gossip encryption is not enabled (start every node with an encryption key, -encrypt)")
	// ErrGossipKeyNotInstalled: the key is not in the node's keyring.
	ErrGossipKeyNotInstalled = errors.New("key is not installed in the gossip keyring")
	// ErrGossipKeyPrimary: the key is the node's primary key, which cannot
	// be removed.
	ErrGossipKeyPrimary = errors.New("key is the primary gossip key; make another key primary first")
)

// ParseGossipKey decodes a gossip encryption key: standard base64 of 16, 24
// or 32 bytes (AES-128, AES-192 or AES-256).
func ParseGossipKey(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty key")
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not base64 (generate a key with 'cronoq operator keyring generate')")
	}
	if err := memberlist.ValidateKey(b); err != nil {
		return nil, fmt.Errorf("%d bytes: a key must be 16, 24 or 32 bytes (AES-128, -192 or -256)", len(b))
	}
	return b, nil
}

// GenerateGossipKey returns a new random 32-byte key in base64.
func GenerateGossipKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating a gossip key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b[:]), nil
}

func encodeKey(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// readKeyringFile reads a keyring file; ok is false when it does not exist.
func readKeyringFile(path string) (keys [][]byte, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the gossip keyring: %w", err)
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, false, fmt.Errorf("reading the gossip keyring %s: not a JSON list of keys: %w", path, err)
	}
	if len(list) == 0 {
		return nil, false, fmt.Errorf("reading the gossip keyring %s: it holds no key", path)
	}
	for i, s := range list {
		k, err := ParseGossipKey(s)
		if err != nil {
			return nil, false, fmt.Errorf("reading the gossip keyring %s: key %d: %w", path, i, err)
		}
		keys = append(keys, k)
	}
	return keys, true, nil
}

// writeKeyringFile writes keys (primary first) to path atomically, readable
// by the owner only.
func writeKeyringFile(path string, keys [][]byte) error {
	list := make([]string, 0, len(keys))
	for _, k := range keys {
		list = append(list, encodeKey(k))
	}
	data, err := json.Marshal(list)
	if err != nil {
		return fmt.Errorf("encoding the gossip keyring: %w", err)
	}
	// writeFileAtomic creates the file through os.CreateTemp: mode 0600.
	if err := writeFileAtomic(path, append(data, '\n')); err != nil {
		return fmt.Errorf("writing the gossip keyring %s: %w", path, err)
	}
	return nil
}

// setupGossipEncryption opens the node's keyring (the data dir's file, else
// the configured keys, which then seed the file) and turns encryption on in
// mc when there is one. A dev node without a data dir keeps it in memory.
func (n *Node) setupGossipEncryption(mc *memberlist.Config) error {
	configured := n.cfg.GossipKeys
	var path string
	if !n.removeDataDir {
		path = filepath.Join(n.dataDir, gossipKeyringFile)
	}
	var keys [][]byte
	source := "configuration"
	if path != "" {
		stored, ok, err := readKeyringFile(path)
		if err != nil {
			return err
		}
		if ok {
			keys, source = stored, "keyring file"
			if len(configured) > 0 {
				inRing := slices.ContainsFunc(stored, func(k []byte) bool { return bytes.Equal(k, configured[0]) })
				n.logger.Info("the gossip keyring of the data dir wins over the configured encryption key",
					"keyring", path, "configured_key_in_keyring", inRing)
			}
		}
	}
	if keys == nil {
		if len(configured) == 0 {
			n.logger.Info("gossip encryption disabled")
			return nil
		}
		keys = configured
		if path != "" {
			if err := writeKeyringFile(path, keys); err != nil {
				return err
			}
		}
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return fmt.Errorf("creating the gossip keyring: %w", err)
	}
	n.keyring, n.keyringPath = kr, path
	mc.Keyring = kr
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	if path == "" {
		path = "(in memory)"
	}
	n.logger.Info("gossip encryption enabled", "source", source, "keys", len(kr.GetKeys()), "keyring", path)
	return nil
}

// GossipKeyring returns the node's gossip encryption keyring, or
// ErrGossipEncryptionDisabled.
func (n *Node) GossipKeyring() (GossipKeyring, error) {
	if n.keyring == nil {
		return GossipKeyring{}, ErrGossipEncryptionDisabled
	}
	n.keyringMu.Lock()
	defer n.keyringMu.Unlock()
	return n.keyringLocked(), nil
}

func (n *Node) keyringLocked() GossipKeyring {
	keys := n.keyring.GetKeys()
	out := GossipKeyring{Keys: make([]string, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, encodeKey(k))
	}
	if len(keys) > 0 {
		out.Primary = out.Keys[0]
	}
	return out
}

// InstallGossipKey adds key (base64) to the node's keyring, for decryption
// only, and persists the keyring. Installing a key already there changes
// nothing. It returns the keyring after the change.
func (n *Node) InstallGossipKey(key string) (GossipKeyring, error) {
	return n.changeKeyring("install", key, func(keys [][]byte, k []byte, idx int) ([][]byte, error) {
		if idx >= 0 {
			return nil, nil
		}
		return append(slices.Clone(keys), k), nil
	}, func(k []byte) error {
		return n.keyring.AddKey(k)
	})
}

// UseGossipKey makes key (base64), which must be installed
// (ErrGossipKeyNotInstalled otherwise), the node's primary key, and
// persists the keyring. It returns the keyring after the change.
func (n *Node) UseGossipKey(key string) (GossipKeyring, error) {
	return n.changeKeyring("use", key, func(keys [][]byte, k []byte, idx int) ([][]byte, error) {
		switch idx {
		case -1:
			return nil, ErrGossipKeyNotInstalled
		case 0:
			return nil, nil
		}
		out := [][]byte{k}
		for i, o := range keys {
			if i != idx {
				out = append(out, o)
			}
		}
		return out, nil
	}, func(k []byte) error {
		return n.keyring.UseKey(k)
	})
}

// RemoveGossipKey removes key (base64) from the node's keyring and
// persists the keyring. The primary key is refused (ErrGossipKeyPrimary);
// removing a key that is not installed changes nothing. It returns the
// keyring after the change.
func (n *Node) RemoveGossipKey(key string) (GossipKeyring, error) {
	return n.changeKeyring("remove", key, func(keys [][]byte, k []byte, idx int) ([][]byte, error) {
		switch idx {
		case -1:
			return nil, nil
		case 0:
			return nil, ErrGossipKeyPrimary
		}
		return slices.Delete(slices.Clone(keys), idx, idx+1), nil
	}, n.removeKeyLocked)
}

// removeKeyLocked removes k (not the primary) from the memberlist keyring.
//
// memberlist's Keyring.RemoveKey shifts the keys after k down in the very
// array that GetKeys handed to the goroutines decrypting packets, which
// read it without a lock. Removing the last key shifts nothing, so the keys
// after k are taken off from the end first and put back after k is gone.
// Only those keys are missing meanwhile, for a few microseconds; a packet
// encrypted with one of them in that window is dropped as if lost, and
// gossip's own retries cover it. In a rotation no node encrypts with them:
// they are not primary here, and a key becomes primary only once every
// node has it.
func (n *Node) removeKeyLocked(k []byte) error {
	keys := slices.Clone(n.keyring.GetKeys())
	idx := slices.IndexFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) })
	if idx <= 0 {
		return nil
	}
	tail := keys[idx+1:]
	for i := len(tail) - 1; i >= 0; i-- {
		if err := n.keyring.RemoveKey(tail[i]); err != nil {
			return err
		}
	}
	if err := n.keyring.RemoveKey(k); err != nil {
		return err
	}
	for _, t := range tail {
		if err := n.keyring.AddKey(t); err != nil {
			return err
		}
	}
	return nil
}

// changeKeyring applies keyring operation op: plan computes the new key
// list from the current one (nil: nothing to change), which is persisted
// first, then apply changes memberlist's keyring. Operations are
// serialized.
func (n *Node) changeKeyring(op, key string, plan func(keys [][]byte, k []byte, idx int) ([][]byte, error), apply func(k []byte) error) (GossipKeyring, error) {
	k, err := ParseGossipKey(key)
	if err != nil {
		return GossipKeyring{}, Invalid("key", "%v", err)
	}
	if n.keyring == nil {
		return GossipKeyring{}, ErrGossipEncryptionDisabled
	}
	select {
	case <-n.shutdownCh:
		return GossipKeyring{}, ErrShutdown
	default:
	}
	n.keyringMu.Lock()
	defer n.keyringMu.Unlock()
	keys := n.keyring.GetKeys()
	idx := slices.IndexFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) })
	next, err := plan(keys, k, idx)
	if err != nil {
		return GossipKeyring{}, err
	}
	if next == nil {
		return n.keyringLocked(), nil
	}
	if n.keyringPath != "" {
		if err := writeKeyringFile(n.keyringPath, next); err != nil {
			return GossipKeyring{}, err
		}
	}
	if err := apply(k); err != nil {
		// Cannot happen after plan's checks; the file already holds the
		// new list, which the next start uses.
		return GossipKeyring{}, fmt.Errorf("changing the gossip keyring: %w", err)
	}
	n.logger.Info("gossip keyring changed", "op", op, "keys", len(next), "persisted", n.keyringPath != "")
	return n.keyringLocked(), nil
}
