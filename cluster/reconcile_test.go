package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func voter(id, addr string) raft.Server {
	return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)}
}

func nonvoter(id, addr string) raft.Server {
	return raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)}
}

func alive(name, addr string) Member {
	return Member{Name: name, Status: StatusAlive, RaftAddr: addr}
}

func withStatus(m Member, s MemberStatus, since time.Time) Member {
	m.Status, m.Since = s, since
	return m
}

func TestPlanReconcile(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	base := func() reconcileInput {
		return reconcileInput{
			Self:              "n1",
			Servers:           []raft.Server{voter("n1", "a1"), voter("n2", "a2"), voter("n3", "a3")},
			Members:           []Member{alive("n1", "a1"), alive("n2", "a2"), alive("n3", "a3")},
			Tombstoned:        func(string) bool { return false },
			Now:               t0,
			LeaderApplied:     1000,
			DeadServerTimeout: time.Hour,
			Stabilization:     10 * time.Second,
			MinVoters:         3,
			MaxTrailingLogs:   250,
		}
	}
	for _, tc := range []struct {
		name   string
		modify func(in *reconcileInput)
		want   *reconcileAction
	}{
		{name: "in sync", modify: func(*reconcileInput) {}},
		{name: "new alive member is added as non-voter", modify: func(in *reconcileInput) {
			in.Members = append(in.Members, alive("n4", "a4"))
		}, want: &reconcileAction{Kind: actAddNonvoter, ID: "n4", Addr: "a4"}},
		{name: "tombstoned member is not added", modify: func(in *reconcileInput) {
			in.Members = append(in.Members, alive("n4", "a4"))
			in.Tombstoned = func(id string) bool { return id == "n4" }
		}},
		{name: "tombstoned server is removed", modify: func(in *reconcileInput) {
			in.Tombstoned = func(id string) bool { return id == "n3" }
		}, want: &reconcileAction{Kind: actRemove, ID: "n3"}},
		{name: "a tombstoned leader is not removed by itself", modify: func(in *reconcileInput) {
			in.Tombstoned = func(id string) bool { return id == "n1" }
		}},
		{name: "suspect member is added (not failed yet)", modify: func(in *reconcileInput) {
			in.Members = append(in.Members, withStatus(alive("n4", "a4"), StatusSuspect, t0))
		}, want: &reconcileAction{Kind: actAddNonvoter, ID: "n4", Addr: "a4"}},
		{name: "failed member is not added", modify: func(in *reconcileInput) {
			in.Members = append(in.Members, withStatus(alive("n4", "a4"), StatusFailed, t0))
		}},
		{name: "non-cronoq member is ignored", modify: func(in *reconcileInput) {
			in.Members = append(in.Members, Member{Name: "x", Status: StatusAlive})
		}},
		{name: "left member is removed at once", modify: func(in *reconcileInput) {
			in.Members[2] = withStatus(in.Members[2], StatusLeft, t0)
		}, want: &reconcileAction{Kind: actRemove, ID: "n3"}},
		{name: "changed address: stale entry removed first", modify: func(in *reconcileInput) {
			in.Members[2] = alive("n3", "a3-new")
		}, want: &reconcileAction{Kind: actRemove, ID: "n3"}},
		{name: "address taken over by a new id: old entry removed", modify: func(in *reconcileInput) {
			in.Members[2] = withStatus(in.Members[2], StatusFailed, t0)
			in.Members = append(in.Members, alive("n4", "a3"))
		}, want: &reconcileAction{Kind: actRemove, ID: "n3"}},
		{name: "two live nodes claim one address: nothing", modify: func(in *reconcileInput) {
			in.Members = append(in.Members, alive("n4", "a3"))
		}},
		{name: "failed voter kept before DeadServerTimeout", modify: func(in *reconcileInput) {
			in.Servers = append(in.Servers, voter("n4", "a4"))
			in.Members = append(in.Members, withStatus(alive("n4", "a4"), StatusFailed, t0.Add(-59*time.Minute)))
		}},
		{name: "failed voter removed after DeadServerTimeout", modify: func(in *reconcileInput) {
			in.Servers = append(in.Servers, voter("n4", "a4"))
			in.Members = append(in.Members, withStatus(alive("n4", "a4"), StatusFailed, t0.Add(-time.Hour)))
		}, want: &reconcileAction{Kind: actRemove, ID: "n4"}},
		{name: "failed voter kept below MinVoters", modify: func(in *reconcileInput) {
			in.Members[2] = withStatus(in.Members[2], StatusFailed, t0.Add(-2*time.Hour))
		}},
		{name: "failed non-voter removed even at MinVoters", modify: func(in *reconcileInput) {
			in.Servers = append(in.Servers, nonvoter("n4", "a4"))
			in.Members = append(in.Members, withStatus(alive("n4", "a4"), StatusFailed, t0.Add(-2*time.Hour)))
		}, want: &reconcileAction{Kind: actRemove, ID: "n4"}},
		{name: "the leader never removes itself", modify: func(in *reconcileInput) {
			in.MinVoters = 1
			in.Members[0] = withStatus(in.Members[0], StatusFailed, t0.Add(-2*time.Hour))
		}},
		{name: "a server unknown to gossip starts its clock now", modify: func(in *reconcileInput) {
			in.Servers = append(in.Servers, voter("n4", "a4"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.modify(&in)
			got, ok := planReconcile(in, newReconcileState())
			if tc.want == nil {
				require.False(t, ok, "unexpected %v %s: %s", got.Kind, got.ID, got.Reason)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.want.Kind, got.Kind, got.Reason)
			require.Equal(t, tc.want.ID, got.ID)
			require.Equal(t, tc.want.Addr, got.Addr)
			require.NotEmpty(t, got.Reason)
		})
	}
}

func TestPlanReconcilePromotionAndMissing(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	st := newReconcileState()
	in := reconcileInput{
		Self:              "n1",
		Servers:           []raft.Server{voter("n1", "a1"), voter("n2", "a2"), voter("n3", "a3"), nonvoter("n4", "a4")},
		Members:           []Member{alive("n1", "a1"), alive("n2", "a2"), alive("n3", "a3"), alive("n4", "a4")},
		Tombstoned:        func(string) bool { return false },
		Now:               t0,
		LeaderApplied:     1000,
		DeadServerTimeout: time.Minute,
		Stabilization:     10 * time.Second,
		MinVoters:         3,
		MaxTrailingLogs:   250,
	}
	plan := func(now time.Time) (reconcileAction, bool) {
		in.Now = now
		return planReconcile(in, st)
	}
	_, ok := plan(t0)
	require.False(t, ok, "not stable yet")
	_, ok = plan(t0.Add(9 * time.Second))
	require.False(t, ok, "not stable yet")
	_, ok = plan(t0.Add(10 * time.Second))
	require.False(t, ok, "stable but lagging: applied 0 of 1000")
	in.Members[3].Applied = 749
	_, ok = plan(t0.Add(11 * time.Second))
	require.False(t, ok, "751 behind")
	in.Members[3].Applied = 750
	a, ok := plan(t0.Add(11 * time.Second))
	require.True(t, ok)
	require.Equal(t, reconcileAction{Kind: actPromote, ID: "n4", Addr: "a4", Reason: a.Reason}, a)

	// Gone from gossip and back: the stabilization clock restarts.
	in.Members = in.Members[:3]
	_, ok = plan(t0.Add(12 * time.Second))
	require.False(t, ok)
	require.NotContains(t, st.nonvoterSince, "n4")
	require.Equal(t, t0.Add(12*time.Second), st.missingSince["n4"])
	in.Members = append(in.Members, Member{Name: "n4", Status: StatusAlive, RaftAddr: "a4", Applied: 1000})
	_, ok = plan(t0.Add(13 * time.Second))
	require.False(t, ok)
	require.NotContains(t, st.missingSince, "n4")
	a, ok = plan(t0.Add(23 * time.Second))
	require.True(t, ok)
	require.Equal(t, actPromote, a.Kind)

	// A voter unknown to gossip is removed DeadServerTimeout after this
	// leader first noticed, if enough voters remain.
	in.Servers = []raft.Server{voter("n1", "a1"), voter("n2", "a2"), voter("n3", "a3"), voter("n4", "a4")}
	in.Members = in.Members[:3]
	_, ok = plan(t0.Add(time.Hour))
	require.False(t, ok)
	_, ok = plan(t0.Add(time.Hour + 59*time.Second))
	require.False(t, ok)
	a, ok = plan(t0.Add(time.Hour + time.Minute))
	require.True(t, ok)
	require.Equal(t, actRemove, a.Kind)
	require.Equal(t, "n4", a.ID)
}
