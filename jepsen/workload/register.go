package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"

	"github.com/cronoq/cronoq/jepsen/history"
)

// Register operation names.
const (
	RegSubmit   = "reg-submit"
	RegGet      = "reg-get"
	RegLease    = "reg-lease"
	RegComplete = "reg-complete"
	RegCancel   = "reg-cancel"
)

// RegisterPrefix starts the key (and pool) of every register task.
const RegisterPrefix = "reg-"

// Register is the per-task register workload: each task (its own key and
// pool, one attempt) is a small state machine driven by several clients
// at once: submit, get, lease, complete, cancel. Its history is checked for
// linearizability.
type Register struct {
	env   *Env
	procs []Process
	slots []*regSlot

	mu    sync.Mutex
	keys  []string
	httpc map[string]*http.Client
}

type regSlot struct {
	mu     sync.Mutex
	k      int
	gen    int
	key    string
	belief string // "", submitted, pending, leased, terminal
	held   *heldLease
}

type heldLease struct {
	token  uint64
	key    string
	stream *connect.BidiStreamForClient[cronoqv1.WorkerMessage, cronoqv1.ServerMessage]
	node   string
	cancel context.CancelFunc
	acks   chan ackResult
	done   chan struct{}
}

// NewRegister returns the register workload over n task slots.
func NewRegister(env *Env, procs []Process, n int) *Register {
	r := &Register{env: env, procs: procs, httpc: make(map[string]*http.Client)}
	for k := range n {
		r.slots = append(r.slots, &regSlot{k: k})
	}
	return r
}

// Keys returns every register key used so far.
func (r *Register) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func (r *Register) client(ip string) *http.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.httpc[ip]; ok {
		return c
	}
	c := r.env.httpClient(ip)
	r.httpc[ip] = c
	return c
}

// Run runs the clients until ctx ends.
func (r *Register) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range r.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := r.env.Rand()
			for ctx.Err() == nil {
				r.step(ctx, p, rng)
				if !sleepCtx(ctx, time.Duration(40+rng.IntN(100))*time.Millisecond) {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range r.slots {
		s.mu.Lock()
		if s.held != nil {
			s.held.close()
			s.held = nil
		}
		s.mu.Unlock()
	}
}

func (r *Register) step(ctx context.Context, p Process, rng *rand.Rand) {
	s := r.slots[rng.IntN(len(r.slots))]
	s.mu.Lock()
	belief, key, held := s.belief, s.key, s.held
	x := rng.Float64()
	op := RegGet
	switch belief {
	case "", "terminal":
		if belief == "" || x < 0.8 {
			s.gen++
			s.key = fmt.Sprintf("%s%d-%d", RegisterPrefix, s.k, s.gen)
			s.belief = "submitted"
			if s.held != nil {
				s.held.close()
				s.held = nil
			}
			key = s.key
			op = RegSubmit
			r.mu.Lock()
			r.keys = append(r.keys, key)
			r.mu.Unlock()
		}
	case "submitted", "pending":
		switch {
		case x < 0.35:
			op = RegLease
		case x < 0.42:
			op = RegCancel
		}
	case "leased":
		switch {
		case x < 0.45 && held != nil:
			op = RegComplete
		case x < 0.5:
			op = RegCancel
		}
	}
	if op == RegComplete {
		// The lease goes with this completion; others see it no more.
		s.held = nil
	}
	s.mu.Unlock()
	n := r.env.Nodes[rng.IntN(len(r.env.Nodes))]
	switch op {
	case RegSubmit:
		r.submit(ctx, p, n, s, key)
	case RegGet:
		r.get(ctx, p, n, s, key)
	case RegLease:
		r.lease(ctx, p, n, s, key)
	case RegComplete:
		r.complete(ctx, p, n, s, held)
	case RegCancel:
		r.cancel(ctx, p, n, s, key)
	}
}

func (s *regSlot) setBelief(key, b string) {
	s.mu.Lock()
	if s.key == key {
		s.belief = b
	}
	s.mu.Unlock()
}

// RegisterValue is the payload a register task is submitted with.
func RegisterValue(key string) string { return "v-" + key }

func (r *Register) submit(ctx context.Context, p Process, n Node, s *regSlot, key string) {
	c, err := r.env.Client(p.IP, n)
	if err != nil {
		return
	}
	v := RegisterValue(key)
	done := r.env.Rec.Invoke(p.Name, RegSubmit, n.ID, &history.Value{Key: key, Pool: key, Payload: v})
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	sub, err := c.Submit(actx, client.TaskSpec{Template: client.Template{Pool: key, Kind: "reg", Payload: []byte(v), MaxAttempts: 1}, Key: key})
	cancel()
	t := Outcome(err)
	switch t {
	case history.OK:
		done(t, &history.Value{Key: key, ID: sub.ID, Duplicate: sub.Duplicate}, nil)
		s.setBelief(key, "pending")
	default:
		done(t, &history.Value{Key: key}, err)
	}
}

// taskValue is what a read of t records.
func taskValue(key string, t *client.Task) *history.Value {
	return &history.Value{Key: key, ID: t.ID, Found: boolp(true), Status: t.Status, Token: t.Lease, Attempt: t.Attempt,
		Output: string(t.Output), Payload: string(t.Payload)}
}

func (r *Register) get(ctx context.Context, p Process, n Node, s *regSlot, key string) {
	// A fresh client: the read goes to n, not to a leader n named before.
	c, err := r.env.ReadClient(p.IP, n)
	if err != nil {
		return
	}
	defer c.Close()
	done := r.env.Rec.Invoke(p.Name, RegGet, n.ID, &history.Value{Key: key})
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	t, err := c.GetByKey(actx, key)
	cancel()
	switch {
	case err == nil:
		done(history.OK, taskValue(key, t), nil)
		switch t.Status {
		case client.StatusQueued, client.StatusScheduled, client.StatusRetrying:
			s.setBelief(key, "pending")
		case client.StatusRunning:
			s.setBelief(key, "leased")
		default:
			if t.Terminal() {
				s.setBelief(key, "terminal")
			}
		}
	case errors.Is(err, client.ErrNotFound):
		done(history.OK, &history.Value{Key: key, Found: boolp(false)}, nil)
	default:
		done(history.Info, &history.Value{Key: key}, err)
	}
}

func (r *Register) cancel(ctx context.Context, p Process, n Node, s *regSlot, key string) {
	c, err := r.env.Client(p.IP, n)
	if err != nil {
		return
	}
	done := r.env.Rec.Invoke(p.Name, RegCancel, n.ID, &history.Value{Key: key})
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	cancelled, err := c.CancelKey(actx, key)
	cancel()
	switch {
	case err == nil:
		done(history.OK, &history.Value{Key: key, Cancelled: boolp(cancelled), Found: boolp(true)}, nil)
		s.setBelief(key, "terminal")
	case errors.Is(err, client.ErrNotFound):
		done(history.OK, &history.Value{Key: key, Found: boolp(false)}, nil)
	default:
		done(Outcome(err), &history.Value{Key: key}, err)
	}
}

// openStream connects a worker stream for pool key on n (following one
// leader hint) and waits for the welcome.
func (r *Register) openStream(ctx context.Context, p Process, n Node, key string) (*heldLease, <-chan *cronoqv1.ServerMessage, error) {
	addr := n.Addr
	var lastErr error
	for try := 0; try < 2; try++ {
		sctx, cancel := context.WithCancel(ctx)
		stream := cronoqv1connect.NewWorkerServiceClient(r.client(p.IP), "http://"+addr).Connect(sctx)
		node, _ := r.env.NodeByAddr(addr)
		h := &heldLease{key: key, stream: stream, node: node.ID, cancel: cancel, acks: make(chan ackResult, 4), done: make(chan struct{})}
		msgs := make(chan *cronoqv1.ServerMessage, 16)
		errc := make(chan error, 1)
		go func() {
			defer close(h.done)
			defer close(msgs)
			for {
				m, err := stream.Receive()
				if err != nil {
					errc <- err
					return
				}
				if ca := m.GetCompleteAck(); ca != nil {
					for _, res := range ca.GetResults() {
						select {
						case h.acks <- ackResult{code: res.GetCode(), msg: res.GetError()}:
						default:
						}
					}
					continue
				}
				select {
				case msgs <- m:
				default:
				}
			}
		}()
		err := stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Hello{Hello: &cronoqv1.Hello{Worker: p.Name + "-" + key, Pool: key}}})
		if err == nil {
			t := time.NewTimer(2500 * time.Millisecond)
			select {
			case m, ok := <-msgs:
				t.Stop()
				if ok && m.GetWelcome() != nil {
					return h, msgs, nil
				}
				err = errors.New("stream ended before the welcome")
				select {
				case e := <-errc:
					err = e
				case <-time.After(100 * time.Millisecond):
				}
			case <-t.C:
				err = errNoWelcome
			}
		}
		h.close()
		lastErr = err
		hint := leaderHint(err)
		if hint == "" || hint == addr {
			break
		}
		addr = hint
	}
	return nil, nil, lastErr
}

func (h *heldLease) close() {
	h.cancel()
	_ = h.stream.CloseRequest()
}

func (r *Register) lease(ctx context.Context, p Process, n Node, s *regSlot, key string) {
	done := r.env.Rec.Invoke(p.Name, RegLease, n.ID, &history.Value{Key: key, Pool: key})
	h, msgs, err := r.openStream(ctx, p, n, key)
	if err != nil {
		// No poll was sent: nothing can have been leased.
		done(history.Fail, &history.Value{Key: key, Code: errorKind(err)}, err)
		return
	}
	if err := h.stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Poll{Poll: &cronoqv1.Poll{Slots: 1}}}); err != nil {
		h.close()
		done(history.Info, &history.Value{Key: key}, err)
		return
	}
	t := time.NewTimer(1500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				h.close()
				done(history.Info, &history.Value{Key: key}, errors.New("stream ended while polling"))
				return
			}
			gs := m.GetGrants().GetGrants()
			if len(gs) == 0 {
				continue
			}
			g := gs[0]
			h.token = g.GetLease()
			done(history.OK, &history.Value{Key: key, ID: g.GetTask().GetId(), Token: g.GetLease(), Attempt: int(g.GetAttempt())}, nil)
			s.mu.Lock()
			if s.key == key {
				if s.held != nil {
					s.held.close()
				}
				s.held = h
				s.belief = "leased"
				s.mu.Unlock()
				go r.keepAlive(h, msgs)
				return
			}
			s.mu.Unlock()
			h.close()
			return
		case <-t.C:
			h.close()
			done(history.Info, &history.Value{Key: key}, errors.New("no grant within 1.5s"))
			return
		case <-ctx.Done():
			h.close()
			done(history.Info, &history.Value{Key: key}, ctx.Err())
			return
		}
	}
}

// keepAlive heartbeats a held lease until its stream ends (at most 20s).
func (r *Register) keepAlive(h *heldLease, msgs <-chan *cronoqv1.ServerMessage) {
	tick := time.NewTicker(max(r.env.TTL/3, 100*time.Millisecond))
	defer tick.Stop()
	limit := time.NewTimer(20 * time.Second)
	defer limit.Stop()
	for {
		select {
		case _, ok := <-msgs:
			if !ok {
				return
			}
		case <-tick.C:
			if err := h.stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Heartbeat{Heartbeat: &cronoqv1.Heartbeat{Leases: []uint64{h.token}}}}); err != nil {
				return
			}
		case <-limit.C:
			h.close()
			return
		case <-h.done:
			return
		}
	}
}

// RegisterResult is the output a register completion reports.
func RegisterResult(key string, token uint64) string { return fmt.Sprintf("out-%s-%d", key, token) }

func (r *Register) complete(ctx context.Context, p Process, n Node, s *regSlot, h *heldLease) {
	out := RegisterResult(h.key, h.token)
	done := r.env.Rec.Invoke(p.Name, RegComplete, h.node, &history.Value{Key: h.key, Token: h.token, Output: out})
	defer h.close()
	send := func(hh *heldLease) (ackResult, error) {
		err := hh.stream.Send(&cronoqv1.WorkerMessage{Msg: &cronoqv1.WorkerMessage_Complete{Complete: &cronoqv1.Complete{
			Completions: []*cronoqv1.Completion{{Lease: h.token, Outcome: cronoqv1.OutcomeKind_OUTCOME_SUCCESS, Output: []byte(out)}},
		}}})
		if err != nil {
			return ackResult{}, err
		}
		t := time.NewTimer(3 * time.Second)
		defer t.Stop()
		select {
		case a := <-hh.acks:
			return a, nil
		case <-hh.done:
			select {
			case a := <-hh.acks:
				return a, nil
			default:
			}
			return ackResult{}, errors.New("stream ended before the acknowledgement")
		case <-t.C:
			return ackResult{}, errors.New("no acknowledgement within 3s")
		}
	}
	var a ackResult
	var err error
	select {
	case <-h.done:
		// The lease's stream is gone: deliver on a new one.
		nh, _, oerr := r.openStream(ctx, p, n, h.key)
		if oerr != nil {
			done(history.Fail, &history.Value{Key: h.key, Token: h.token, Code: "not_sent"}, oerr)
			return
		}
		defer nh.close()
		a, err = send(nh)
	default:
		a, err = send(h)
	}
	switch {
	case err != nil:
		done(history.Info, &history.Value{Key: h.key, Token: h.token}, err)
	case a.code == "" && a.msg == "":
		done(history.OK, &history.Value{Key: h.key, Token: h.token, Output: out}, nil)
		s.setBelief(h.key, "terminal")
	case a.code == "stale_lease" || a.code == "not_found":
		done(history.Fail, &history.Value{Key: h.key, Token: h.token, Code: a.code}, fmt.Errorf("%s: %s", a.code, a.msg))
	default:
		done(history.Info, &history.Value{Key: h.key, Token: h.token, Code: a.code}, fmt.Errorf("%s: %s", a.code, a.msg))
	}
}

// FinalReads reads every register key through the leader, recording the
// reads as ordinary register gets of process "final".
func (r *Register) FinalReads(ctx context.Context, ip string) {
	c, err := r.env.ClientAll(ip)
	if err != nil {
		return
	}
	for _, key := range r.Keys() {
		done := r.env.Rec.Invoke("final", RegGet, "", &history.Value{Key: key})
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t, err := c.GetByKey(actx, key)
		cancel()
		switch {
		case err == nil:
			done(history.OK, taskValue(key, t), nil)
		case errors.Is(err, client.ErrNotFound):
			done(history.OK, &history.Value{Key: key, Found: boolp(false)}, nil)
		default:
			done(history.Info, &history.Value{Key: key}, err)
		}
	}
}

// IsRegisterKey reports whether key belongs to the register workload.
func IsRegisterKey(key string) bool { return strings.HasPrefix(key, RegisterPrefix) }
