package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cronoq/cronoq/cluster"
)

// ClockPath serves the node's engine clock to the leader's clock check
// (cluster.ClockReader): {"node":ID,"unix_nano":N}. Nodes read it from
// each other; it is not part of the client API.
const ClockPath = "/v1/internal/clock"

// clockReading is the answer of ClockPath.
type clockReading struct {
	Node     string `json:"node"`
	UnixNano int64  `json:"unix_nano"`
}

// clockBackend is what a backend offers to the clock check (*cluster.Node
// does; the handlers' fakes need not).
type clockBackend interface {
	EngineClock() time.Time
	SetClockReader(cluster.ClockReader)
}

// mountClock serves ClockPath and gives the node a reader of the other
// nodes' clocks through the forwarder's client, when the backend takes
// part in the clock check.
func (s *Server) mountClock(mux *http.ServeMux) {
	cb, ok := s.node.(clockBackend)
	if !ok {
		return
	}
	mux.HandleFunc("GET "+ClockPath, func(w http.ResponseWriter, _ *http.Request) {
		r := clockReading{Node: s.node.ID(), UnixNano: cb.EngineClock().UnixNano()}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(r)
	})
	cb.SetClockReader(s.fwd.readClock)
}

// readClock reads the engine clock of the node at addr (its API address).
func (f *forwarder) readClock(ctx context.Context, addr string) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.scheme+addr+ClockPath, nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the clock of %s: %w", addr, err)
	}
	resp, err := f.httpc.Do(req)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the clock of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, fmt.Errorf("reading the clock of %s: %s", addr, resp.Status)
	}
	var r clockReading
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&r); err != nil {
		return time.Time{}, fmt.Errorf("reading the clock of %s: decoding the answer: %w", addr, err)
	}
	return time.Unix(0, r.UnixNano), nil
}
