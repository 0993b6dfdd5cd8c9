package history

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRecorderRoundTripAndPairs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	r, err := NewRecorder(path, time.Now())
	require.NoError(t, err)
	done := r.Invoke("c1", "submit", "n1", &Value{Key: "k"})
	r.Add(Op{Process: "w1", Type: OK, F: "grant", Value: &Value{Token: 7}})
	done(OK, &Value{Key: "k", ID: "A"}, nil)
	r.Invoke("c1", "submit", "n2", &Value{Key: "k2"}) // never completes
	require.NoError(t, r.Close())

	ops, err := Read(path)
	require.NoError(t, err)
	require.Len(t, ops, 4)
	for i, op := range ops {
		require.EqualValues(t, i, op.Index)
		if i > 0 {
			require.GreaterOrEqual(t, op.Time, ops[i-1].Time)
		}
	}
	ps := Pairs(ops)
	require.Len(t, ps, 3)
	require.Equal(t, "submit", ps[0].F())
	require.Equal(t, OK, ps[0].Type())
	require.Equal(t, "A", ps[0].Value().ID)
	require.Equal(t, "n1", ps[0].Node())
	require.Nil(t, ps[1].Invoke, "a lone grant")
	require.EqualValues(t, 7, ps[1].Value().Token)
	require.Equal(t, Info, ps[2].Type(), "an op that never completed has an unknown outcome")
	require.EqualValues(t, -1, ps[2].End())
}
