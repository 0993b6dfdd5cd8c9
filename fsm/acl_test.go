package fsm

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/require"
)

func aclToken(accessor, secret string, policies ...string) *ACLToken {
	h := sha256.Sum256([]byte(secret))
	return &ACLToken{Accessor: accessor, SecretHash: h[:], Policies: policies, CreatedAt: baseTime}
}

func TestACLRecords(t *testing.T) {
	h := newHarness(t)
	require.Zero(t, h.s.ACLBootstrapIndex())

	boot := aclToken("root", "s0")
	boot.Management, boot.Bootstrap = true, true
	h.ok(Mutation{PutACLToken: boot})
	require.Equal(t, uint64(2), h.s.ACLBootstrapIndex())

	// A second bootstrap is refused, and the batch with it changes nothing.
	again := aclToken("root2", "s9")
	again.Management, again.Bootstrap = true, true
	before := h.s.Hash()
	h.reject(1, Mutation{PutACLPolicy: &ACLPolicy{Name: "x", Rules: "operator = \"read\""}}, Mutation{PutACLToken: again})
	require.Equal(t, before, h.s.Hash())
	_, ok := h.s.ACLPolicy("x")
	require.False(t, ok, "rolled back")

	h.ok(Mutation{PutACLPolicy: &ACLPolicy{Name: "etl", Rules: `pool "etl" { policy = "submit" }`}},
		Mutation{PutACLToken: aclToken("a1", "s1", "etl")})
	tk, ok := h.s.ACLTokenBySecret(sha256.Sum256([]byte("s1")))
	require.True(t, ok)
	require.Equal(t, "a1", tk.Accessor)
	require.Equal(t, uint64(4), tk.CreateIndex)

	// Updating a policy keeps its create index.
	h.ok(Mutation{PutACLPolicy: &ACLPolicy{Name: "etl", Rules: `pool "etl" { policy = "work" }`}})
	p, _ := h.s.ACLPolicy("etl")
	require.Equal(t, uint64(4), p.CreateIndex)
	require.Equal(t, uint64(5), p.ModifyIndex)

	// A secret in use by another token is refused.
	h.reject(0, Mutation{PutACLToken: aclToken("a2", "s1")})
	// Bad records are refused.
	h.reject(0, Mutation{PutACLToken: &ACLToken{Accessor: "a3", SecretHash: []byte{1}}})
	h.reject(0, Mutation{PutACLToken: aclToken("a3", "s3", "b", "a")})
	h.reject(0, Mutation{PutACLPolicy: &ACLPolicy{}})
	h.reject(0, Mutation{DelACL: &DelACL{}})
	h.reject(0, Mutation{DelACL: &DelACL{Policy: "nope"}})
	h.reject(0, Mutation{DelACL: &DelACL{Token: "nope"}})

	// Deleting the token frees its secret; deleting the bootstrap token
	// does not allow a second bootstrap.
	h.ok(Mutation{DelACL: &DelACL{Token: "a1"}}, Mutation{DelACL: &DelACL{Token: "root"}}, Mutation{DelACL: &DelACL{Policy: "etl"}})
	_, ok = h.s.ACLTokenBySecret(sha256.Sum256([]byte("s1")))
	require.False(t, ok)
	require.Empty(t, h.s.ACLTokens())
	require.Empty(t, h.s.ACLPolicies())
	require.Equal(t, uint64(2), h.s.ACLBootstrapIndex())
	h.reject(0, Mutation{PutACLToken: again})

	// The ACL state survives a snapshot, bootstrap index included.
	restored := New()
	snap := snapshotBytes(t, h.s)
	require.NoError(t, restored.Restore(bytes.NewReader(snap)))
	require.Equal(t, uint64(2), restored.ACLBootstrapIndex())
	require.Equal(t, h.s.Hash(), restored.Hash())

	// A view keeps the ACL state of its point of the log.
	v := h.s.View()
	h.ok(Mutation{PutACLToken: aclToken("a4", "s4")})
	_, ok = v.ACLToken("a4")
	require.False(t, ok)
	_, ok = h.s.ACLToken("a4")
	require.True(t, ok)
}
