package nodes

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/cronoq/cronoq/client"
)

// RaftStatus is GET /admin/raft.
type RaftStatus struct {
	Node         string `json:"node"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	Leader       string `json:"leader"`
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	Epoch        uint64 `json:"epoch"`
}

// FSMHash is the answer of /admin/barrier and /admin/fsm/hash.
type FSMHash struct {
	AppliedIndex uint64 `json:"applied_index"`
	Hash         string `json:"hash"`
}

// Health is GET /v1/health (the fallback when the admin API is missing).
type Health struct {
	Node   string `json:"node"`
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"`
	Status string `json:"status"`
}

// ErrNoAdmin means the node answered 404 for the admin API: the binary was
// built without the jepsenfaults tag.
var ErrNoAdmin = errors.New("admin API not available (binary built without -tags jepsenfaults?)")

// Admin is a client of the nodes' admin API. Its connections leave from
// 127.0.0.1, which no partition ever names.
type Admin struct {
	httpc  *http.Client
	scheme string // "http" or "https"
	token  string
}

// NewAdmin returns an admin client with a short per-request timeout.
func NewAdmin() *Admin { return NewAdminTLS(nil, "") }

// NewAdminTLS returns an admin client that, when cfg is set, speaks HTTPS
// with cfg (the admin API is served on the node's API listener, which then
// wants the client certificate of cfg), and sends token (when set) as the
// ACL token of every request.
func NewAdminTLS(cfg *tls.Config, token string) *Admin {
	d := &net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 2, IdleConnTimeout: 5 * time.Second}
	a := &Admin{httpc: &http.Client{Transport: tr, Timeout: 3 * time.Second}, scheme: "http", token: token}
	if cfg != nil {
		tr.TLSClientConfig = cfg.Clone()
		tr.TLSHandshakeTimeout = 2 * time.Second
		a.scheme = "https"
	}
	return a
}

// newRequest builds a request for path on the node at addr.
func (a *Admin) newRequest(ctx context.Context, method, addr, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.scheme+"://"+addr+path, body)
	if err != nil {
		return nil, err
	}
	if a.token != "" {
		req.Header.Set(client.HeaderToken, a.token)
	}
	return req, nil
}

func (a *Admin) do(ctx context.Context, method, addr, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := a.newRequest(ctx, method, addr, path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s on %s: %w", method, path, addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusNotFound && len(path) > 7 && path[:7] == "/admin/" {
		return fmt.Errorf("%s %s on %s: %w", method, path, addr, ErrNoAdmin)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s on %s: HTTP %d: %s", method, path, addr, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s on %s: decoding %q: %w", method, path, addr, b, err)
		}
	}
	return nil
}

// Raft returns the node's raft status.
func (a *Admin) Raft(ctx context.Context, addr string) (RaftStatus, error) {
	var st RaftStatus
	err := a.do(ctx, http.MethodGet, addr, "/admin/raft", nil, &st)
	return st, err
}

// Health returns GET /v1/health.
func (a *Admin) Health(ctx context.Context, addr string) (Health, error) {
	var h Health
	req, err := a.newRequest(ctx, http.MethodGet, addr, "/v1/health", nil)
	if err != nil {
		return h, err
	}
	resp, err := a.httpc.Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("health of %s: HTTP %d: %w", addr, resp.StatusCode, err)
	}
	return h, nil
}

// Barrier runs a barrier on the node (a leader: raft Barrier; a follower:
// waits until its applied index reaches index when index > 0).
func (a *Admin) Barrier(ctx context.Context, addr string, index uint64) (FSMHash, error) {
	var h FSMHash
	var body any
	if index > 0 {
		body = map[string]uint64{"index": index}
	}
	err := a.do(ctx, http.MethodPost, addr, "/admin/barrier", body, &h)
	return h, err
}

// Hash returns the node's FSM hash and applied index, without a barrier.
func (a *Admin) Hash(ctx context.Context, addr string) (FSMHash, error) {
	var h FSMHash
	err := a.do(ctx, http.MethodGet, addr, "/admin/fsm/hash", nil, &h)
	return h, err
}

// Clock sets the node's injected clock: a wall offset and a rate.
func (a *Admin) Clock(ctx context.Context, addr string, offset time.Duration, rate float64) error {
	return a.do(ctx, http.MethodPost, addr, "/admin/clock", map[string]any{"offset_ms": offset.Milliseconds(), "rate": rate}, nil)
}

// Disk sets the node's disk faults: a delay per log write and a one-time
// stall; zero values reset.
func (a *Admin) Disk(ctx context.Context, addr string, fsyncDelay, stall time.Duration) error {
	body := map[string]int64{}
	if fsyncDelay > 0 {
		body["fsync_delay_ms"] = fsyncDelay.Milliseconds()
	}
	if stall > 0 {
		body["stall_ms"] = stall.Milliseconds()
	}
	return a.do(ctx, http.MethodPost, addr, "/admin/disk", body, nil)
}

// Failpoint triggers the named failpoint of the node's admin API
// (POST /admin/failpoint/NAME with body) and decodes its JSON answer into
// out (unless nil). ErrNoAdmin when the build has no such failpoint.
func (a *Admin) Failpoint(ctx context.Context, addr, name string, body, out any) error {
	return a.do(ctx, http.MethodPost, addr, "/admin/failpoint/"+name, body, out)
}

// StaleInsert is the answer of the stale-insert failpoint: whether the FSM
// applied the batch of the stale epoch, and if not, why.
type StaleInsert struct {
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"`
	ID      string `json:"id,omitempty"`
	Epoch   uint64 `json:"epoch"`
}
