package main

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/client"
)

const (
	cronoqPool    = "bench"
	cronoqKind    = "noop"
	cronoqWorkers = 4 // SDK workers the concurrency is split over

	// W4: the root spawns no-op children (no payload) and a continuation
	// that depends on every one of them.
	cronoqRootKind  = "fanout"
	cronoqChildKind = "fanout-child"
	cronoqThenKind  = "fanout-then"
)

// cronoqSys is a three-node cronoq cluster of bin/cronoq agents with the
// production settings (raft-boltdb fsync on every node).
type cronoqSys struct {
	env     *Env
	dir     string
	nodes   []*proc
	args    [][]string // each node's agent arguments, to restart it
	http    []string
	submit  []*client.Client
	next    uint64
	mu      sync.Mutex
	workers []*client.Client
	stopW   context.CancelFunc
	wg      sync.WaitGroup
	runErrs []error
	leases  sync.Map // lease -> seq, from grant to acknowledged completion

	// secureTLS: the nodes run with TLS and ACLs (system cronoq-secure),
	// made fresh in each cell's directory as sec.
	secureTLS bool
	sec       *cronoqSecurity

	// subscribe: one durable subscription is consumed for the whole cell
	// (system cronoq-sub), by sub.
	subscribe bool
	sub       *subConsumer

	// extraArgs are added to every agent's arguments, and logLevel (default
	// warn) is their -log-level.
	extraArgs []string
	logLevel  string
}

func (s *cronoqSys) Name() string {
	switch {
	case s.secureTLS:
		return "cronoq-secure"
	case s.subscribe:
		return "cronoq-sub"
	}
	return "cronoq"
}

// Subscription returns the consumer of the cell's subscription (nil
// unless the system is cronoq-sub).
func (s *cronoqSys) Subscription() *subConsumer { return s.sub }

func (s *cronoqSys) Batches() bool { return true }
func (s *cronoqSys) Copies() int   { return 3 }
func (s *cronoqSys) Durability() string {
	return "acknowledged once committed by raft: fsync'd (raft-boltdb) on a majority of the 3 nodes"
}
func (s *cronoqSys) Config() string {
	return fmt.Sprintf("3 × `bin/cronoq agent` on 127.0.0.1 with default (production) settings: raft-boltdb with fsync, the agent's default raft timings (heartbeat and election timeouts 500 ms, leader lease 250 ms); "+
		"Go SDK: %d workers × %d slots (no-op handler), completions sent as soon as the stream takes them (the default); submits with Submit / SubmitBatch (random idempotency key per task, as the SDK does; "+
		"the SDK's default coalescing sends at most 4 Submit calls per client at once and the submits made meanwhile together in one EnqueueMany call)",
		cronoqWorkers, s.env.opts.concurrency/cronoqWorkers) + s.secureConfig() + s.subConfig()
}

// subConfig describes the subscription of cronoq-sub, for the report.
func (s *cronoqSys) subConfig() string {
	if !s.subscribe {
		return ""
	}
	return fmt.Sprintf("; **one durable subscription** (`%s`: pool %s, status succeeded; ack timeout 30 s), created before the first submit, read for the whole cell by one SDK client "+
		"(`ReadSubscription`) that acks its last cursor every %d events or %s (`Ack`)", benchSub, cronoqPool, subAckEvery, subAckAfter)
}

// secureConfig describes the security settings, for the report.
func (s *cronoqSys) secureConfig() string {
	if !s.secureTLS {
		return "; no TLS (h2c), ACLs off"
	}
	return "; **TLS and ACLs on**: for each cell a CA, one server certificate (every node's) and a client certificate are made with `cronoq tls ca create` / " +
		"`cronoq tls cert create -server|-client` (ECDSA P-256) in the cell's directory, and a random management secret; every node runs with " +
		"`-tls-ca -tls-cert -tls-key -tls-verify-incoming -acl -acl-initial-management SECRET` (API over HTTPS with client certificates required, raft and forwarding over mutual TLS, " +
		"every call checked against the token's policies); every client of the benchmark (the submitting and worker SDK clients, health checks, profiler) connects with TLS 1.3, " +
		"presents the client certificate and the SDK clients carry the management token (`client.WithTLS`, `client.WithToken`; the workers' transport dials TLS with ALPN h2 itself, " +
		"to tap acks). Measuring starts once a call with the token has succeeded and one without it was refused"
}

// clientOptions are the options of every SDK client the benchmark makes
// (but the workers', see StartWorkers).
func (s *cronoqSys) clientOptions() []client.Option {
	if s.sec == nil {
		return nil
	}
	return s.sec.clientOptions()
}

// scheme and httpClient are those of the health checks and the profiler.
func (s *cronoqSys) scheme() string {
	if s.sec != nil {
		return "https://"
	}
	return "http://"
}

func (s *cronoqSys) httpClient(timeout time.Duration) *http.Client {
	if s.sec != nil {
		return s.sec.httpClient(timeout)
	}
	return &http.Client{Timeout: timeout}
}

// DebugClient is the HTTP client of the profiler.
func (s *cronoqSys) DebugClient() *http.Client { return s.httpClient(0) }

func (s *cronoqSys) ServerPIDs() []int {
	var pids []int
	for _, p := range s.nodes {
		pids = append(pids, p.pid)
	}
	return pids
}

func (s *cronoqSys) Start(ctx context.Context, dir string) error {
	s.dir = dir
	if s.secureTLS {
		sec, err := newCronoqSecurity(ctx, s.env.opts.cronoqBin, filepath.Join(dir, "tls"))
		if err != nil {
			return fmt.Errorf("making the certificates and the management secret: %w", err)
		}
		s.sec = sec
	}
	ports, err := freePorts(9)
	if err != nil {
		return err
	}
	var join []string
	for i := 0; i < 3; i++ {
		join = append(join, "-join", fmt.Sprintf("127.0.0.1:%d", ports[i*3+2]))
	}
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("n%d", i+1)
		httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[i*3])
		args := append([]string{"agent",
			"-node-id", id,
			"-data-dir", filepath.Join(dir, id),
			"-http-addr", httpAddr,
			"-raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[i*3+1]),
			"-gossip-addr", fmt.Sprintf("127.0.0.1:%d", ports[i*3+2]),
			"-bootstrap-expect", "3",
			"-log-level", cmp.Or(s.logLevel, "warn"),
		}, join...)
		if s.env.opts.profile > 0 {
			args = append(args, "-enable-debug")
		}
		if s.sec != nil {
			args = append(args, s.sec.agentArgs()...)
		}
		args = append(args, s.extraArgs...)
		p, err := s.env.procs.start("cronoq-"+id, logPath(dir, "cronoq-"+id), nil, nil, s.env.opts.cronoqBin, args...)
		if err != nil {
			return err
		}
		s.nodes = append(s.nodes, p)
		s.args = append(s.args, args)
		s.http = append(s.http, httpAddr)
	}
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		c, err := client.New(s.http, s.clientOptions()...)
		if err != nil {
			return err
		}
		s.submit = append(s.submit, c)
	}
	if s.sec != nil {
		if err := s.sec.waitToken(ctx, s.submit[0], s.http); err != nil {
			return err
		}
	}
	if s.subscribe {
		sub, err := startSubConsumer(ctx, s.http, s.clientOptions())
		if err != nil {
			return err
		}
		s.sub = sub
	}
	return nil
}

// stopNode stops node i (0-based) with SIGTERM, as an operator would; its
// data dir is kept.
func (s *cronoqSys) stopNode(i int) error {
	return s.env.procs.stop(s.nodes[i], syscall.SIGTERM, 30*time.Second)
}

// startNode starts node i again with the arguments it was first started
// with: it comes back with its data dir and rejoins.
func (s *cronoqSys) startNode(i int) error {
	id := fmt.Sprintf("n%d", i+1)
	p, err := s.env.procs.start("cronoq-"+id, logPath(s.dir, "cronoq-"+id), nil, nil, s.env.opts.cronoqBin, s.args[i]...)
	if err != nil {
		return err
	}
	s.nodes[i] = p
	return nil
}

// waitReady waits until every node answers /v1/health with a leader and the
// cluster's status is ok.
func (s *cronoqSys) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	hc := s.httpClient(time.Second)
	for {
		ready := 0
		for i, addr := range s.http {
			if done, err := s.nodes[i].exited(); done {
				return fmt.Errorf("cronoq node %d exited: %v: %s", i+1, err, tailFile(logPath(s.dir, s.nodes[i].name), 2000))
			}
			resp, err := hc.Get(s.scheme() + addr + "/v1/health")
			if err != nil {
				continue
			}
			var h struct {
				Leader string `json:"leader"`
				Status string `json:"status"`
			}
			err = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && h.Leader != "" && h.Status == "ok" {
				ready++
			}
		}
		if ready == len(s.http) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cronoq cluster not ready within 60s (%d of %d nodes report a leader and status ok); log: %s",
				ready, len(s.http), tailFile(logPath(s.dir, "cronoq-n1"), 1500))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DebugURLs are the base URLs of the nodes (the profiler is served with
// -enable-debug), named n1..n3 with the leader's name marked.
func (s *cronoqSys) DebugURLs() map[string]string {
	leader := ""
	hc := s.httpClient(time.Second)
	if resp, err := hc.Get(s.scheme() + s.http[0] + "/v1/health"); err == nil {
		var h struct {
			Leader string `json:"leader"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		leader = h.Leader
	}
	urls := make(map[string]string, len(s.http))
	for i, addr := range s.http {
		name := fmt.Sprintf("n%d", i+1)
		if leader == name {
			name += "-leader"
		}
		urls[name] = s.scheme() + addr
	}
	return urls
}

func (s *cronoqSys) pick() *client.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.submit[s.next%uint64(len(s.submit))]
}

// spec is the no-op task seq; with -w1-ordering-keys, it gets the ordering
// key seq mod that many.
func (s *cronoqSys) spec(seq int) client.TaskSpec {
	sp := client.TaskSpec{Template: client.Template{Pool: cronoqPool, Kind: cronoqKind, Payload: payload(seq)}}
	if n := s.env.opts.w1OrderingKeys; n > 0 {
		sp.OrderingKey = "lane-" + strconv.Itoa(seq%n)
	}
	return sp
}

func (s *cronoqSys) Enqueue(ctx context.Context, seq int) error {
	_, err := s.pick().Submit(ctx, s.spec(seq))
	return err
}

func (s *cronoqSys) EnqueueBatch(ctx context.Context, seqs []int) error {
	specs := make([]client.TaskSpec, len(seqs))
	for i, q := range seqs {
		specs[i] = s.spec(q)
	}
	_, err := s.pick().SubmitBatch(ctx, specs)
	return err
}

// StartWorkers runs SDK workers. A completion counts once the leader's
// CompleteAck for its lease reaches the worker: the node sends it only after
// the completion is committed. The SDK keeps acks to itself, so the worker
// stream's responses are read on their way in (see ackTap).
func (s *cronoqSys) StartWorkers(ctx context.Context, h Hooks) error {
	wctx, cancel := context.WithCancel(context.Background())
	s.stopW = cancel
	onAck := func(leases []uint64) {
		for _, l := range leases {
			if v, ok := s.leases.LoadAndDelete(l); ok {
				h.Done(v.(int))
			}
		}
	}
	handler := client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
		seq, err := seqOf(job.Task.Payload)
		if err != nil {
			return nil, client.Permanent(err)
		}
		h.Start(seq)
		s.leases.Store(job.Lease, seq)
		return nil, nil
	})
	handlers := map[string]client.Handler{
		cronoqKind:     handler,
		cronoqRootKind: client.HandlerFunc(s.fanOutRoot(h)),
		cronoqChildKind: client.HandlerFunc(func(context.Context, *client.Job) ([]byte, error) {
			if h.Child != nil {
				h.Child()
			}
			return nil, nil
		}),
		cronoqThenKind: client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
			if h.Then != nil {
				h.Then(job.Task.ID, len(job.Dependencies))
			}
			return nil, nil
		}),
	}
	per := s.env.opts.concurrency / cronoqWorkers
	for i := 0; i < cronoqWorkers; i++ {
		tr, err := h2cTransport()
		wopts := []client.Option(nil)
		if s.sec != nil {
			tr, err = s.sec.workerTransport()
			wopts = append(wopts, client.WithToken(s.sec.token))
		}
		if err != nil {
			cancel()
			return err
		}
		c, err := client.New(s.http, append(wopts, client.WithHTTPClient(&http.Client{Transport: &ackTap{base: tr, onAck: onAck}}))...)
		if err != nil {
			cancel()
			return err
		}
		s.workers = append(s.workers, c)
		w, err := c.NewWorker(client.WorkerConfig{
			Pool:        cronoqPool,
			Concurrency: per,
			Handlers:    handlers,
			ID:          fmt.Sprintf("bench-%d", i),
		})
		if err != nil {
			cancel()
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := w.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
				s.mu.Lock()
				s.runErrs = append(s.runErrs, err)
				s.mu.Unlock()
			}
		}()
	}
	return nil
}

// fanOutRoot is the handler of W4's root: it spawns the children its
// payload asks for and the continuation, all in its completion, which
// counts (Done) once acknowledged, as every completion does.
func (s *cronoqSys) fanOutRoot(h Hooks) func(context.Context, *client.Job) ([]byte, error) {
	return func(_ context.Context, job *client.Job) ([]byte, error) {
		seq, n, err := fanOutOf(job.Task.Payload)
		if err != nil {
			return nil, client.Permanent(err)
		}
		h.Start(seq)
		children := make([]client.Step, n)
		for i := range children {
			children[i] = client.Step{Task: client.TaskSpec{Template: client.Template{Pool: cronoqPool, Kind: cronoqChildKind}}}
		}
		job.Spawn(children...)
		job.Then(client.Step{Name: "then", Task: client.TaskSpec{Template: client.Template{Pool: cronoqPool, Kind: cronoqThenKind}}})
		s.leases.Store(job.Lease, seq)
		return nil, nil
	}
}

// SubmitFanOut submits W4's root task.
func (s *cronoqSys) SubmitFanOut(ctx context.Context, seq, children int) (string, error) {
	sub, err := s.pick().Submit(ctx, client.TaskSpec{Template: client.Template{Pool: cronoqPool, Kind: cronoqRootKind, Payload: fanOutPayload(seq, children)}})
	return sub.ID, err
}

// WaitSucceeded waits with Client.Wait until the task ends, and returns an
// error unless it succeeded.
func (s *cronoqSys) WaitSucceeded(ctx context.Context, id string) error {
	t, err := s.pick().Wait(ctx, id)
	if err != nil {
		return err
	}
	if t.Status != client.StatusSucceeded {
		return fmt.Errorf("task %s (%s) ended %s: %s", id, t.Kind, t.Status, t.Error)
	}
	return nil
}

func (s *cronoqSys) StopWorkers() error {
	if s.stopW == nil {
		return nil
	}
	s.stopW()
	s.stopW = nil
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	var err error
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		err = errors.New("cronoq workers did not stop within 30s")
	}
	for _, c := range s.workers {
		c.Close()
	}
	s.workers = nil
	s.mu.Lock()
	err = errors.Join(append([]error{err}, s.runErrs...)...)
	s.runErrs = nil
	s.mu.Unlock()
	return err
}

func (s *cronoqSys) Completed(ctx context.Context) (int64, error) {
	counts, err := s.submit[0].Counts(ctx)
	if err != nil {
		return 0, err
	}
	return counts[cronoqPool][client.StatusSucceeded], nil
}

func (s *cronoqSys) Stop() error {
	werr := s.StopWorkers()
	if s.sub != nil {
		s.sub.Stop()
		s.sub = nil
	}
	for _, c := range s.submit {
		c.Close()
	}
	s.submit = nil
	var wg sync.WaitGroup
	errs := make([]error, len(s.nodes))
	for i, p := range s.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.env.procs.stop(p, syscall.SIGTERM, 30*time.Second)
		}()
	}
	wg.Wait()
	s.nodes = nil
	return errors.Join(append(errs, werr)...)
}

// h2cTransport is the transport the SDK builds for itself: HTTP/2 without
// TLS, with pings.
func h2cTransport() (*http.Transport, error) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	return &http.Transport{
		DialContext:         d.DialContext,
		Protocols:           &p,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}, nil
}

// ackTap passes every request through and, on worker streams, reads the
// server's messages as the SDK reads them, reporting the leases of accepted
// completions (CompleteAck results without an error).
type ackTap struct {
	base  http.RoundTripper
	onAck func(leases []uint64)
}

func (t *ackTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, cronoqv1connect.WorkerServiceConnectProcedure) {
		return resp, err
	}
	resp.Body = &envelopeTap{rc: resp.Body, gzip: resp.Header.Get("Connect-Content-Encoding") == "gzip", onAck: t.onAck}
	return resp, nil
}

// envelopeTap parses the Connect streaming envelopes (1 flag byte, 4 length
// bytes, the message) of a response body as it is read.
type envelopeTap struct {
	rc    io.ReadCloser
	gzip  bool
	onAck func([]uint64)
	hdr   [5]byte
	nhdr  int
	msg   []byte
	want  int
	flags byte
}

func (e *envelopeTap) Read(p []byte) (int, error) {
	n, err := e.rc.Read(p)
	e.feed(p[:n])
	return n, err
}

func (e *envelopeTap) Close() error { return e.rc.Close() }

func (e *envelopeTap) feed(b []byte) {
	for len(b) > 0 {
		if e.nhdr < 5 {
			k := copy(e.hdr[e.nhdr:], b)
			e.nhdr += k
			b = b[k:]
			if e.nhdr == 5 {
				e.flags = e.hdr[0]
				e.want = int(binary.BigEndian.Uint32(e.hdr[1:]))
				e.msg = e.msg[:0]
				if e.want == 0 {
					e.message()
				}
			}
			continue
		}
		k := min(e.want-len(e.msg), len(b))
		e.msg = append(e.msg, b[:k]...)
		b = b[k:]
		if len(e.msg) == e.want {
			e.message()
		}
	}
}

func (e *envelopeTap) message() {
	defer func() { e.nhdr = 0 }()
	const (
		flagCompressed = 0x01
		flagEndStream  = 0x02
		// completeAckTag is the first byte of a ServerMessage holding a
		// CompleteAck: field 4, length-delimited.
		completeAckTag = 4<<3 | 2
	)
	if e.flags&flagEndStream != 0 {
		return
	}
	data := e.msg
	if e.flags&flagCompressed != 0 {
		if !e.gzip {
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		if data, err = io.ReadAll(zr); err != nil {
			return
		}
	}
	if len(data) == 0 || data[0] != completeAckTag {
		return
	}
	var m cronoqv1.ServerMessage
	if err := proto.Unmarshal(data, &m); err != nil {
		return
	}
	ack := m.GetCompleteAck()
	if ack == nil {
		return
	}
	var ok []uint64
	for _, r := range ack.GetResults() {
		if r.GetError() == "" && r.GetCode() == "" {
			ok = append(ok, r.GetLease())
		}
	}
	if len(ok) > 0 {
		e.onAck(ok)
	}
}
