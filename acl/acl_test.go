package acl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func mustParse(t *testing.T, rules string) *Policy {
	t.Helper()
	p, err := Parse(rules)
	require.NoError(t, err)
	return p
}

func TestParse(t *testing.T) {
	p := mustParse(t, `
pool "etl" { policy = "submit" }
pool "*" { policy = "read" }
pool "ml-*" { policy = "work" }
operator = "read"
acl = "write"
`)
	require.Equal(t, []PoolRule{{"etl", Submit}, {"*", Read}, {"ml-*", Work}}, p.Pools)
	require.Equal(t, Read, p.Operator)
	require.Equal(t, Write, p.ACL)

	empty := mustParse(t, "")
	require.Empty(t, empty.Pools)

	for _, bad := range []string{
		`pool "etl" { policy = "own" }`,
		`pool "e*l" { policy = "read" }`,
		`pool "etl" { policy = "read" }` + "\n" + `pool "etl" { policy = "write" }`,
		`operator = "submit"`,
		`acl = "work"`,
		`colour = "blue"`,
		`pool "etl" { }`,
		`pool { policy = "read" }`,
		`pool "etl" { policy = "read"`,
		`node "n1" { policy = "read" }`,
	} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
}

func TestAuthorizer(t *testing.T) {
	a := Compile("acc", "", []*Policy{
		mustParse(t, `pool "etl" { policy = "submit" }
pool "*" { policy = "read" }`),
		mustParse(t, `pool "etl" { policy = "work" }
pool "ml-*" { policy = "write" }
pool "ml-secret" { policy = "deny" }
operator = "read"`),
	})
	for _, tc := range []struct {
		pool string
		want Level
	}{
		{"etl", Work},          // the higher of two exact rules
		{"other", Read},        // "*"
		{"ml-a", Write},        // the prefix beats "*"
		{"ml-secret", None},    // deny beats the prefix
		{"etl-2", Read},        // exact "etl" does not match "etl-2"
		{"", Read},             // "*" matches every name
		{"ml-", Write},         // an empty rest matches the prefix
		{"m", Read},            // shorter than the prefix
		{"ml-secret-2", Write}, // exact deny does not extend
	} {
		require.Equal(t, tc.want, a.PoolLevel(tc.pool), tc.pool)
	}
	require.True(t, a.Pool("etl", Submit))
	require.True(t, a.Pool("etl", Read))
	require.False(t, a.Pool("etl", Write))
	require.True(t, a.AnyPool(Write))
	require.True(t, a.Operator(Read))
	require.False(t, a.Operator(Write))
	require.False(t, a.ACL(Read))

	// Deny among equally specific rules wins over a grant.
	d := Compile("d", "", []*Policy{mustParse(t, `pool "x" { policy = "write" }
operator = "write"`), mustParse(t, `pool "x" { policy = "deny" }
operator = "deny"`)})
	require.Equal(t, None, d.PoolLevel("x"))
	require.False(t, d.AnyPool(Read))
	require.False(t, d.Operator(Read))

	// Nothing allows nothing; management allows everything.
	var zero Authorizer
	require.False(t, zero.Pool("etl", Read))
	require.False(t, zero.AnyPool(Read))
	require.False(t, zero.Operator(Read))
	require.False(t, zero.ACL(Read))
	m := Manage("root", "")
	require.True(t, m.Pool("x", Write))
	require.True(t, m.Operator(Write))
	require.True(t, m.ACL(Write))
	require.True(t, m.Management())

	err := a.Denied("write on pool %q", "etl")
	require.EqualError(t, err, `permission denied: token acc lacks write on pool "etl"`)
	require.EqualError(t, zero.Denied("operator read"), "permission denied: anonymous caller lacks operator read")
}

func FuzzParse(f *testing.F) {
	f.Add(`pool "etl" { policy = "submit" }`)
	f.Add(`pool "*" { policy = "read" }` + "\noperator = \"read\"")
	f.Add(`acl = "write"`)
	f.Fuzz(func(t *testing.T, rules string) {
		p, err := Parse(rules)
		if err != nil {
			return
		}
		a := Compile("x", "", []*Policy{p})
		for _, r := range p.Pools {
			_ = a.PoolLevel(r.Pattern)
		}
	})
}
