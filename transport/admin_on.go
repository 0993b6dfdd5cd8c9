//go:build jepsenfaults

package transport

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cronoq/cronoq/cluster"
)

// The admin API of the fault-injection builds (build tag jepsenfaults),
// mounted under /admin/ on the node's API address. The harness reads raft
// and FSM state with it, injects clock and disk faults, and triggers
// failpoints.

// adminBarrierTimeout bounds a follower's wait for the index it is asked to
// reach.
const adminBarrierTimeout = time.Minute

// mountAdmin registers the admin handlers of the node b on mux (a
// *cluster.Node; other backends have no faults to inject).
func mountAdmin(mux *http.ServeMux, b Backend) {
	node, ok := b.(*cluster.Node)
	if !ok {
		return
	}
	a := &adminAPI{node: node}
	mux.HandleFunc("GET /admin/raft", a.raft)
	mux.HandleFunc("POST /admin/barrier", a.barrier)
	mux.HandleFunc("GET /admin/fsm/hash", a.hash)
	mux.HandleFunc("GET /admin/clock", a.getClock)
	mux.HandleFunc("POST /admin/clock", a.setClock)
	mux.HandleFunc("GET /admin/disk", a.getDisk)
	mux.HandleFunc("POST /admin/disk", a.setDisk)
	mux.HandleFunc("POST /admin/failpoint/stale-insert", a.staleInsert)
}

type adminAPI struct{ node *cluster.Node }

// adminRaft is the body of GET /admin/raft. Epoch is the epoch of the
// node's replica (the latest engine epoch it applied); Ready tells whether
// this node's engine serves at that epoch.
type adminRaft struct {
	Node         string `json:"node"`
	State        string `json:"state"` // leader, follower, candidate or shutdown
	Term         uint64 `json:"term"`
	Leader       string `json:"leader"`
	AppliedIndex uint64 `json:"applied_index"` // raft's applied index
	Epoch        uint64 `json:"epoch"`
	CommitIndex  uint64 `json:"commit_index"`
	LastLogIndex uint64 `json:"last_log_index"`
	FSMIndex     uint64 `json:"fsm_index"` // index of the last entry the FSM applied
	Ready        bool   `json:"ready"`
}

// adminHash is the body of POST /admin/barrier and GET /admin/fsm/hash:
// the FSM's applied index and the hex SHA-256 of its snapshot encoding, both
// of one view.
type adminHash struct {
	AppliedIndex uint64 `json:"applied_index"`
	Hash         string `json:"hash"`
}

type adminClock struct {
	OffsetMS int64    `json:"offset_ms"`
	Rate     *float64 `json:"rate,omitempty"` // absent: 1
	Now      string   `json:"now,omitempty"`  // the clock's reading (answers only)
}

// adminDiskRequest is the body of POST /admin/disk.
type adminDiskRequest struct {
	FsyncDelayMS int64 `json:"fsync_delay_ms"`
	StallMS      int64 `json:"stall_ms"`
}

// adminDisk is the answer of /admin/disk: the settings in force and the
// counters of the raft store writes.
type adminDisk struct {
	FsyncDelayMS     int64  `json:"fsync_delay_ms"`
	StallRemainingMS int64  `json:"stall_remaining_ms"`
	Writes           uint64 `json:"writes"`
	DelayedWrites    uint64 `json:"delayed_writes"`
	StalledWrites    uint64 `json:"stalled_writes"`
	InjectedMS       int64  `json:"injected_ms"`
}

func (a *adminAPI) raft(w http.ResponseWriter, _ *http.Request) {
	stats := a.node.RaftStats()
	u := func(k string) uint64 {
		v, _ := strconv.ParseUint(stats[k], 10, 64)
		return v
	}
	st, _ := a.node.StaleRead()
	leader, _ := a.node.Leader()
	adminWriteJSON(w, http.StatusOK, adminRaft{
		Node:         a.node.ID(),
		State:        strings.ToLower(stats["state"]),
		Term:         u("term"),
		Leader:       leader,
		AppliedIndex: u("applied_index"),
		Epoch:        st.Epoch(),
		CommitIndex:  u("commit_index"),
		LastLogIndex: u("last_log_index"),
		FSMIndex:     st.AppliedIndex(),
		Ready:        a.node.Epoch() != 0,
	})
}

// barrier answers the FSM's index and hash once everything committed is
// applied here: on the leader after a raft barrier; on a follower once its
// applied index reaches the index in the body (the leader's commit index),
// or at once when the body names none.
func (a *adminAPI) barrier(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Index uint64 `json:"index"`
	}
	if err := adminReadJSON(r, &req); err != nil {
		adminWriteError(w, http.StatusBadRequest, err)
		return
	}
	ctx := r.Context()
	if a.node.IsLeader() {
		idx, sum, err := a.node.Barrier(ctx)
		if err != nil {
			adminWriteError(w, http.StatusServiceUnavailable, fmt.Errorf("barrier: %w", err))
			return
		}
		adminWriteJSON(w, http.StatusOK, adminHash{AppliedIndex: idx, Hash: hex.EncodeToString(sum[:])})
		return
	}
	if req.Index > 0 {
		ctx, cancel := context.WithTimeout(ctx, adminBarrierTimeout)
		defer cancel()
		if err := a.awaitApplied(ctx, req.Index); err != nil {
			adminWriteError(w, http.StatusGatewayTimeout, err)
			return
		}
	}
	a.hash(w, r)
}

// awaitApplied waits until the node's raft applied index reaches index.
func (a *adminAPI) awaitApplied(ctx context.Context, index uint64) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		_, meta := a.node.StaleRead()
		if meta.AppliedIndex >= index {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("applied index %d has not reached %d: %w", meta.AppliedIndex, index, ctx.Err())
		case <-t.C:
		}
	}
}

func (a *adminAPI) hash(w http.ResponseWriter, _ *http.Request) {
	idx, sum, err := a.node.Hash()
	if err != nil {
		adminWriteError(w, http.StatusInternalServerError, err)
		return
	}
	adminWriteJSON(w, http.StatusOK, adminHash{AppliedIndex: idx, Hash: hex.EncodeToString(sum[:])})
}

func (a *adminAPI) clockBody() adminClock {
	c := a.node.FaultClock()
	off, rate := c.Setting()
	return adminClock{OffsetMS: off.Milliseconds(), Rate: &rate, Now: c.Now().UTC().Format(time.RFC3339Nano)}
}

func (a *adminAPI) getClock(w http.ResponseWriter, _ *http.Request) {
	adminWriteJSON(w, http.StatusOK, a.clockBody())
}

// setClock sets the node's injected clock: {"offset_ms":N,"rate":r};
// {"offset_ms":0,"rate":1} (or {}) resets it.
func (a *adminAPI) setClock(w http.ResponseWriter, r *http.Request) {
	var req adminClock
	if err := adminReadJSON(r, &req); err != nil {
		adminWriteError(w, http.StatusBadRequest, err)
		return
	}
	rate := 1.0
	if req.Rate != nil {
		rate = *req.Rate
	}
	if err := a.node.FaultClock().Set(time.Duration(req.OffsetMS)*time.Millisecond, rate); err != nil {
		adminWriteError(w, http.StatusBadRequest, err)
		return
	}
	adminWriteJSON(w, http.StatusOK, a.clockBody())
}

func (a *adminAPI) diskBody() adminDisk {
	s := a.node.FaultDisk().Stats()
	return adminDisk{
		FsyncDelayMS:     s.Delay.Milliseconds(),
		StallRemainingMS: s.StallRemaining.Milliseconds(),
		Writes:           s.Writes,
		DelayedWrites:    s.Delayed,
		StalledWrites:    s.Stalled,
		InjectedMS:       s.Injected.Milliseconds(),
	}
}

func (a *adminAPI) getDisk(w http.ResponseWriter, _ *http.Request) {
	adminWriteJSON(w, http.StatusOK, a.diskBody())
}

// setDisk sets the raft store delays: {"fsync_delay_ms":N,"stall_ms":M};
// {} resets them.
func (a *adminAPI) setDisk(w http.ResponseWriter, r *http.Request) {
	var req adminDiskRequest
	if err := adminReadJSON(r, &req); err != nil {
		adminWriteError(w, http.StatusBadRequest, err)
		return
	}
	if req.FsyncDelayMS < 0 || req.StallMS < 0 {
		adminWriteError(w, http.StatusBadRequest, errors.New("fsync_delay_ms and stall_ms must not be negative"))
		return
	}
	a.node.FaultDisk().Set(time.Duration(req.FsyncDelayMS)*time.Millisecond, time.Duration(req.StallMS)*time.Millisecond)
	adminWriteJSON(w, http.StatusOK, a.diskBody())
}

// StaleProbeKind is the kind of the task the stale-insert failpoint tries to
// insert.
const StaleProbeKind = "stale-epoch-probe"

// adminStaleInsertRequest is the body of POST /admin/failpoint/stale-insert.
type adminStaleInsertRequest struct {
	Pool string `json:"pool"`
	Key  string `json:"key"`
}

// adminStaleInsert is the answer of the stale-insert failpoint: whether the
// FSM applied the batch and, if not, why.
type adminStaleInsert struct {
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"`
	ID      string `json:"id"`    // the task the batch inserts
	Epoch   uint64 `json:"epoch"` // the stale epoch the batch carries
}

// staleInsert is the stale-insert failpoint (leader only): it appends through
// raft a commit batch stamped with the epoch before the current one, holding
// the insert of a queued task of the pool and key in the body, as an engine
// deposed by this leader could have left in flight. A correct FSM refuses it
// as stale: {"applied":false,"error":...}. {"applied":true} means the task
// now exists although no client submitted it.
func (a *adminAPI) staleInsert(w http.ResponseWriter, r *http.Request) {
	var req adminStaleInsertRequest
	if err := adminReadJSON(r, &req); err != nil {
		adminWriteError(w, http.StatusBadRequest, err)
		return
	}
	if req.Pool == "" {
		adminWriteError(w, http.StatusBadRequest, errors.New("pool is required"))
		return
	}
	probe, err := a.node.ApplyStaleInsert(r.Context(), req.Pool, req.Key, StaleProbeKind)
	if err != nil {
		adminWriteError(w, http.StatusServiceUnavailable, fmt.Errorf("stale-insert: %w", err))
		return
	}
	out := adminStaleInsert{Applied: probe.Answer == nil, ID: probe.ID, Epoch: probe.Epoch}
	if probe.Answer != nil {
		out.Error = probe.Answer.Error()
	}
	adminWriteJSON(w, http.StatusOK, out)
}

// adminReadJSON decodes the request body into v; an empty body leaves v as it
// is.
func adminReadJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("decoding the request body: %w", err)
	}
	return nil
}

func adminWriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func adminWriteError(w http.ResponseWriter, code int, err error) {
	adminWriteJSON(w, code, map[string]string{"error": err.Error()})
}
