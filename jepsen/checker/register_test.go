package checker

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

const rk = "reg-0-1"

func regGet(h *hb, p string, status string, tok uint64, out string) {
	v := &history.Value{Key: rk, Found: ptr(true), Status: status, Token: tok, Output: out, Payload: workload.RegisterValue(rk)}
	h.call(p, workload.RegGet, &history.Value{Key: rk}, history.OK, v)
}

// regClean: submit, lease, reads, completion, read; with an unknown cancel
// that did not take effect and a concurrent stale-refused completion.
func regClean() *hb {
	h := &hb{}
	h.call("c6", workload.RegGet, &history.Value{Key: rk}, history.OK, &history.Value{Key: rk, Found: ptr(false)})
	h.call("c5", workload.RegSubmit, &history.Value{Key: rk, Payload: workload.RegisterValue(rk)}, history.OK, &history.Value{Key: rk, ID: "T"})
	regGet(h, "c6", "queued", 0, "")
	h.call("c5", workload.RegLease, &history.Value{Key: rk}, history.OK, &history.Value{Key: rk, Token: 7, Attempt: 1})
	h.invoke("c7", workload.RegCancel, &history.Value{Key: rk})
	regGet(h, "c6", "running", 7, "")
	h.complete("c7", workload.RegCancel, history.Info, nil)
	out := workload.RegisterResult(rk, 7)
	h.call("c5", workload.RegComplete, &history.Value{Key: rk, Token: 7, Output: out}, history.OK, &history.Value{Key: rk, Token: 7, Output: out})
	h.call("c6", workload.RegComplete, &history.Value{Key: rk, Token: 7, Output: out}, history.Fail, &history.Value{Key: rk, Code: "stale_lease"})
	regGet(h, "c6", "succeeded", 0, out)
	return h
}

func TestRegisterCleanHistoryIsLinearizable(t *testing.T) {
	h := regClean()
	html := filepath.Join(t.TempDir(), "register.html")
	r, err := Register(h.ops, Params{}, html)
	require.NoError(t, err)
	require.Equal(t, Valid, r.Valid, "%+v", r)
	require.FileExists(t, html)
}

func TestRegisterLeaseLossIsAllowed(t *testing.T) {
	h := &hb{}
	h.call("c5", workload.RegSubmit, &history.Value{Key: rk, Payload: workload.RegisterValue(rk)}, history.OK, &history.Value{Key: rk, ID: "T"})
	h.call("c5", workload.RegLease, &history.Value{Key: rk}, history.Info, nil)
	regGet(h, "c6", "failed", 0, "")
	r, err := Register(h.ops, Params{}, "")
	require.NoError(t, err)
	require.Equal(t, Valid, r.Valid, "%+v", r)
}

func TestRegisterAnomalies(t *testing.T) {
	out := workload.RegisterResult(rk, 7)
	tests := []struct {
		name  string
		build func(h *hb)
	}{
		{"stale read after completion", func(h *hb) { regGet(h, "c7", "running", 7, "") }},
		{"read of a task that was never submitted", func(h *hb) {
			h.call("c7", workload.RegGet, &history.Value{Key: "reg-9-9"}, history.OK,
				&history.Value{Key: "reg-9-9", Found: ptr(true), Status: "queued", Payload: workload.RegisterValue("reg-9-9")})
		}},
		{"not found after an acked submit", func(h *hb) {
			h.call("c7", workload.RegGet, &history.Value{Key: rk}, history.OK, &history.Value{Key: rk, Found: ptr(false)})
		}},
		{"completion accepted under a lease never granted", func(h *hb) {
			h.call("c7", workload.RegComplete, &history.Value{Key: rk, Token: 9, Output: "x"}, history.OK, nil)
		}},
		{"cancel acked after success", func(h *hb) {
			h.call("c7", workload.RegCancel, &history.Value{Key: rk}, history.OK, &history.Value{Key: rk, Found: ptr(true), Cancelled: ptr(true)})
		}},
		{"wrong output", func(h *hb) { regGet(h, "c7", "succeeded", 0, out+"x") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := regClean()
			tc.build(h)
			r, err := Register(h.ops, Params{}, "")
			require.NoError(t, err)
			require.Equal(t, Invalid, r.Valid, "%+v", r)
		})
	}
}
