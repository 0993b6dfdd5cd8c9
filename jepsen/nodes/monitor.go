package nodes

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// LeaderSample is one line of leaders.jsonl: every node's raft status at one
// instant, and the leader they imply.
type LeaderSample struct {
	T      int64                 `json:"t"` // ns since the start of the run
	Nodes  map[string]NodeSample `json:"nodes"`
	Leader string                `json:"leader,omitempty"`
	Term   uint64                `json:"term,omitempty"`
}

// NodeSample is one node's answer (or why there was none).
type NodeSample struct {
	State        string `json:"state,omitempty"`
	Term         uint64 `json:"term,omitempty"`
	Leader       string `json:"leader,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	CommitIndex  uint64 `json:"commit_index,omitempty"`
	Epoch        uint64 `json:"epoch,omitempty"`
	Err          string `json:"err,omitempty"`
}

// Monitor polls every node's raft status and records it.
type Monitor struct {
	c     *Cluster
	start time.Time
	every time.Duration

	mu      sync.Mutex
	last    LeaderSample
	noAdmin bool
	f       *os.File
	w       *bufio.Writer
	samples []LeaderSample
}

// NewMonitor records samples into path every interval.
func NewMonitor(c *Cluster, path string, start time.Time, every time.Duration) (*Monitor, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating leaders log: %w", err)
	}
	return &Monitor{c: c, start: start, every: every, f: f, w: bufio.NewWriter(f)}, nil
}

// Run polls until ctx ends, then flushes the file.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		m.Poll(ctx)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			_ = m.w.Flush()
			_ = m.f.Sync()
			m.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

// Close closes the file.
func (m *Monitor) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.w.Flush()
	return m.f.Close()
}

// Poll takes one sample now and returns it.
func (m *Monitor) Poll(ctx context.Context) LeaderSample {
	s := LeaderSample{Nodes: make(map[string]NodeSample, len(m.c.Nodes))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	pctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	for _, n := range m.c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := m.sample(pctx, n)
			mu.Lock()
			s.Nodes[n.ID] = ns
			mu.Unlock()
		}()
	}
	wg.Wait()
	s.T = int64(time.Since(m.start))
	s.Leader, s.Term = LeaderOf(s.Nodes)
	m.mu.Lock()
	m.last = s
	m.samples = append(m.samples, s)
	if b, err := json.Marshal(s); err == nil {
		_, _ = m.w.Write(append(b, '\n'))
	}
	m.mu.Unlock()
	return s
}

func (m *Monitor) sample(ctx context.Context, n *Node) NodeSample {
	switch {
	case !n.Running():
		return NodeSample{State: "down"}
	case n.Paused():
		return NodeSample{State: "paused"}
	}
	m.mu.Lock()
	noAdmin := m.noAdmin
	m.mu.Unlock()
	if !noAdmin {
		st, err := m.c.Admin.Raft(ctx, n.HTTPAddr())
		if err == nil {
			return NodeSample{State: st.State, Term: st.Term, Leader: st.Leader, AppliedIndex: st.AppliedIndex, CommitIndex: st.CommitIndex, Epoch: st.Epoch}
		}
		if !errors.Is(err, ErrNoAdmin) {
			return NodeSample{Err: err.Error()}
		}
		m.mu.Lock()
		m.noAdmin = true
		m.mu.Unlock()
	}
	h, err := m.c.Admin.Health(ctx, n.HTTPAddr())
	if err != nil {
		return NodeSample{Err: err.Error()}
	}
	st := "follower"
	if h.Leader == n.ID && h.Leader != "" {
		st = "leader"
	}
	return NodeSample{State: st, Leader: h.Leader, Epoch: h.Epoch}
}

// LeaderOf picks the leader a sample implies: the node in state leader with
// the highest term (the lowest id on a tie).
func LeaderOf(nodes map[string]NodeSample) (string, uint64) {
	best, term := "", uint64(0)
	for id, ns := range nodes {
		if ns.State != "leader" {
			continue
		}
		if best == "" || ns.Term > term || (ns.Term == term && id < best) {
			best, term = id, ns.Term
		}
	}
	return best, term
}

// Last returns the latest sample.
func (m *Monitor) Last() LeaderSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// NoAdmin reports whether the admin API turned out to be missing.
func (m *Monitor) NoAdmin() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.noAdmin
}

// Leader returns the current leader as agreed by a fresh sample: a node that
// says it leads, is running and not paused, and that at least one other
// node names as leader too (or that is alone). Empty when there is none.
func (m *Monitor) Leader(ctx context.Context) string {
	s := m.Poll(ctx)
	return StableLeader(s)
}

// StableLeader is the leader of s that at least a majority of the answering
// nodes agree on.
func StableLeader(s LeaderSample) string {
	if s.Leader == "" {
		return ""
	}
	votes := 0
	for id, ns := range s.Nodes {
		if id == s.Leader || ns.Leader == s.Leader {
			votes++
		}
	}
	if votes*2 > len(s.Nodes) {
		return s.Leader
	}
	return ""
}

// WaitLeader polls until a stable leader exists or ctx ends.
func (m *Monitor) WaitLeader(ctx context.Context) (string, error) {
	for {
		if l := m.Leader(ctx); l != "" {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for a leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ReadLeaders parses a leaders.jsonl file.
func ReadLeaders(path string) ([]LeaderSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	var out []LeaderSample
	for sc.Scan() {
		var s LeaderSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("leaders log: %w", err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}
