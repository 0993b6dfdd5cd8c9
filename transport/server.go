// Package transport is the network API of a cronoq node: the ConnectRPC
// services of the schema in proto/ (tasks, workflows, schedules, workers,
// operators), `GET /v1/health`, `GET /metrics` and the web console under
// /ui/ (Config.Console), on one HTTP address that
// speaks HTTP/1.1 and unencrypted HTTP/2 (h2c, which the worker stream
// needs), or, with Config.TLS, HTTPS with HTTP/2 and HTTP/1.1 chosen
// through ALPN.
//
// Any node serves any call. Calls that need the leader are served locally
// when this node is the ready leader and otherwise forwarded, server-side, to
// the leader's API address over a pooled h2c client that dials from this
// node's own IP. A forwarded request carries the Cronoq-Forwarded header and
// is never forwarded again (one hop at most): a node that receives one and
// does not lead answers not_leader (one that leads but does not serve yet
// holds it until it does). While no leader is known a call is held and
// re-routed, as soon as the leader the node knows or its readiness changes
// and otherwise with jitter, for up to Config.HoldTimeout, then answered
// no_leader. A write whose forwarded request failed in transit is answered
// outcome_unknown, never re-sent: the SDK retries it with the same
// idempotency key. Reads that ask for staleness are served from the local
// replica with the metadata of how stale it may be.
//
// The streams are served by any node too. The event stream comes from the
// node's own replica (see cluster.EventHub): an event is sent once the node
// has applied it. The worker stream and the backup streams need the
// leader: a follower relays them to it over the same forwarding client
// (see relay.go), and ends a relayed worker stream with UNAVAILABLE when
// the leader changes, so that the worker connects again.
package transport

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/internal/tlsutil"
	"github.com/cronoq/cronoq/metrics"
)

// Defaults of Config.
const (
	DefaultHoldTimeout = 5 * time.Second
	// DefaultHeartbeatWindow, DefaultMaxPayload and DefaultMaxOutput are the
	// engine's defaults.
	DefaultHeartbeatWindow = 10 * time.Second
	DefaultMaxPayload      = 1 << 20
	DefaultMaxOutput       = 1 << 20
	// DefaultMaxRequestBytes bounds an API request (a batch of specs with
	// their payloads); it is raised to fit at least two payloads of the
	// configured maximum.
	DefaultMaxRequestBytes = 64 << 20
	// messageOverhead is the room left around a payload or an output for
	// the rest of a message.
	messageOverhead = 1 << 20
	// maxListBytes bounds the tasks of one list page (at least one task is
	// always returned).
	maxListBytes = 32 << 20
	// defaultListLimit is the page size of a list that asks for none;
	// maxListLimit caps the page size asked for.
	defaultListLimit = 1000
	maxListLimit     = 10000
)

// HeaderForwarded marks a request forwarded by another node (its value is
// that node's id). A node that does not lead answers such a request with
// not_leader instead of forwarding it again; a gossip keyring call carrying
// it is done by the receiving node on itself only (see keyring.go).
const HeaderForwarded = "Cronoq-Forwarded"

// Config configures a Server.
type Config struct {
	// Backend is the node the server fronts (a *cluster.Node). Required.
	Backend Backend
	// Listener serves the API. When nil, Start listens on Addr.
	Listener net.Listener
	// Addr is the address to listen on when Listener is nil. Default: the
	// node's advertised HTTP address.
	Addr string
	// Logger (default: none).
	Logger hclog.Logger
	// Metrics of the node (default: a fresh set). Served on /metrics.
	Metrics *metrics.Metrics
	// Hooks carry the engine's aborts to the worker streams: give the node's
	// engine configuration their Abort (see NewHooks). Without them, aborts
	// do not reach workers.
	Hooks *Hooks
	// HoldTimeout is how long a call is held while no leader is known
	// (default 5s).
	HoldTimeout time.Duration
	// HeartbeatWindow is announced to workers; it must be the engine's
	// (default: the engine's default).
	HeartbeatWindow time.Duration
	// MaxPayload and MaxOutput are the engine's limits (defaults: the
	// engine's). Read limits are set above them so that the engine's own,
	// clear errors are what callers see.
	MaxPayload int
	MaxOutput  int
	// MaxRequestBytes bounds one API request (default 64 MiB, at least two
	// maximal payloads).
	MaxRequestBytes int
	// ACLs makes every call carry a token whose policies allow it (see
	// package acl); off, every call is allowed.
	ACLs bool
	// EnableDebug serves Go's profiler under /debug/pprof/ (as Consul's and
	// Nomad's enable_debug do). Off by default.
	EnableDebug bool
	// TLS, when set, serves HTTPS with the node's certificate and forwards
	// calls to the leader over HTTPS, presenting that certificate and
	// verifying the leader's against the CA (see tlsutil.Reloader). A
	// client certificate, when given, must be one of the CA's.
	TLS *tlsutil.Reloader
	// TLSVerifyIncoming requires every client of the API (health and
	// metrics included) to present a certificate of the CA.
	TLSVerifyIncoming bool
	// TracerProvider, when set, traces the tasks whose tags carry a W3C
	// traceparent: spans of their submit, dispatches and completions and
	// of the commits of each (see tracing.go). Nil (the default) traces
	// nothing.
	TracerProvider trace.TracerProvider
	// Console, when set, serves the web console under /ui/ (see package
	// ui). Its pages need no token to load; the API calls they make carry
	// the token the user entered in them.
	Console http.Handler
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Hooks == nil {
		c.Hooks = NewHooks(c.Metrics)
	}
	if c.HoldTimeout <= 0 {
		c.HoldTimeout = DefaultHoldTimeout
	}
	if c.HeartbeatWindow <= 0 {
		c.HeartbeatWindow = DefaultHeartbeatWindow
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	c.MaxRequestBytes = max(c.MaxRequestBytes, 2*c.MaxPayload+messageOverhead)
	return c
}

// Server is the API server of one node. Its lifecycle is New, Start, Stop
// (Drain first for a graceful stop); Done and Err tell when and why it
// stopped serving.
type Server struct {
	cfg  Config
	node Backend
	log  hclog.Logger
	m    *metrics.Metrics

	http    *http.Server
	ln      net.Listener
	fwd     *forwarder
	acl     *aclChecker
	workers *registry
	// grantDepOutputs is the budget of inline dependency outputs of one
	// Grants message (grantDependencyOutputs; tests lower it).
	grantDepOutputs int
	// tr makes the spans of traced tasks; nil when tracing is off.
	tr *tracing

	baseCtx    context.Context
	cancelBase context.CancelFunc

	mu       sync.Mutex
	started  bool
	draining atomic.Bool
	closed   atomic.Bool
	done     chan struct{}
	serveErr error

	wg sync.WaitGroup // the serve loop
}

// New returns a server for cfg. It does not listen yet.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("creating API server: Config.Backend is required")
	}
	if cfg.Listener == nil && cfg.Addr == "" {
		return nil, errors.New("creating API server: Config.Listener or Config.Addr is required")
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		node:    cfg.Backend,
		log:     cfg.Logger,
		m:       cfg.Metrics,
		workers: cfg.Hooks.workers,
		done:    make(chan struct{}),

		grantDepOutputs: grantDependencyOutputs,
		tr:              newTracing(cfg.TracerProvider, cfg.Backend.ID()),
	}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	if s.m != nil {
		s.m.SetWorkerSource(s.workers.gauges)
	}
	fwd, err := newForwarder(cfg.Addr, cfg.MaxRequestBytes)
	if err != nil {
		return nil, fmt.Errorf("creating API server: %w", err)
	}
	if cfg.TLS != nil {
		fwd.useTLS(cfg.TLS)
	}
	s.fwd = fwd
	s.acl = &aclChecker{enabled: cfg.ACLs, state: cfg.Backend.ACLs(), stop: s.baseCtx.Done(), cache: make(map[string]cachedAuthz)}

	// Responses are compressed only when large enough to gain from it:
	// most answers are a few hundred bytes, and resetting a compressor for
	// each of them cost more CPU than the bytes it saved on loopback or LAN.
	const compressMinBytes = 4 << 10
	common := []connect.HandlerOption{
		connect.WithReadMaxBytes(cfg.MaxRequestBytes),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(&rpcMetrics{m: s.m}, requestStreamErrors{}, &aclInterceptor{s.acl}),
	}
	workerOpts := []connect.HandlerOption{
		// One message carries at most one output above the batching
		// threshold: leave room for it plus the rest of the message, so an
		// output just over the limit reaches the engine (which fails the
		// attempt with a clear error) rather than breaking the stream.
		connect.WithReadMaxBytes(2*cfg.MaxOutput + messageOverhead),
		// Worker streams are not compressed: grants carry payloads that
		// are rarely compressible enough to pay for a gzip pass per
		// message (which cost a tenth of the leader's CPU under load).
		// Compressed messages from a worker are still read.
		connect.WithCompressMinBytes(math.MaxInt),
		connect.WithInterceptors(&rpcMetrics{m: s.m}, requestStreamErrors{}, &aclInterceptor{s.acl}),
	}
	mux := http.NewServeMux()
	mux.Handle(cronoqv1connect.NewTaskServiceHandler(&taskService{s}, common...))
	mux.Handle(cronoqv1connect.NewWorkflowServiceHandler(&workflowService{s}, common...))
	mux.Handle(cronoqv1connect.NewScheduleServiceHandler(&scheduleService{s}, common...))
	mux.Handle(cronoqv1connect.NewPoolServiceHandler(&poolService{s}, common...))
	mux.Handle(cronoqv1connect.NewWorkerServiceHandler(&workerService{s}, workerOpts...))
	mux.Handle(cronoqv1connect.NewOperatorServiceHandler(&operatorService{s}, common...))
	mux.Handle(cronoqv1connect.NewAclServiceHandler(&aclService{s}, common...))
	mux.Handle(cronoqv1connect.NewSubscriptionServiceHandler(&subscriptionService{s}, common...))
	mux.HandleFunc("GET /v1/health", s.serveHealth)
	mux.Handle("GET /metrics", s.m.Handler())
	if cfg.EnableDebug {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if cfg.Console != nil {
		mux.Handle("/ui/", cfg.Console)
		mux.Handle("GET /ui", cfg.Console)
	}
	mountAdmin(mux, cfg.Backend)
	s.mountClock(mux)

	var p http.Protocols
	p.SetHTTP1(true)
	if cfg.TLS != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	s.http = &http.Server{
		Handler:           withInterrupt(mux),
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxConcurrentStreams,
			// Detect dead peers holding streams open.
			SendPingTimeout: 15 * time.Second,
			PingTimeout:     10 * time.Second,
		},
	}
	return s, nil
}

// Addr returns the address the server listens on (once started).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return s.cfg.Addr
	}
	return s.ln.Addr().String()
}

// Metrics returns the metrics the server records into and serves.
func (s *Server) Metrics() *metrics.Metrics { return s.m }

// Start listens (unless a listener was given) and serves until Shutdown.
// It may be called once. ctx bounds nothing after Start returns.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("API server already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errors.New("API server shut down")
	}
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", s.cfg.Addr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", s.cfg.Addr, err)
		}
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS.ServerConfig(s.cfg.TLSVerifyIncoming))
	}
	s.ln = ln
	s.started = true
	s.log.Info("serving the API", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil, "tls_verify_incoming", s.cfg.TLS != nil && s.cfg.TLSVerifyIncoming)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.http.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			s.log.Error("API server stopped", "error", err)
		}
		s.mu.Lock()
		s.serveErr = err
		s.mu.Unlock()
		close(s.done)
	}()
	return nil
}

// Done is closed when the server stopped serving (after Stop, or on a
// listener failure; see Err).
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns the error that stopped the server, nil after Stop.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serveErr
}

// Drain makes the server answer new API calls with shutting_down (health
// and metrics are still served) while calls in progress go on. It is the
// first step of a graceful stop: the node then hands off its leadership and
// stops, and Stop closes the server.
func (s *Server) Drain() {
	if !s.draining.Swap(true) {
		s.log.Info("draining: new calls are refused")
	}
}

func (s *Server) stopping() bool { return s.draining.Load() || s.closed.Load() }

// Stop stops the server: long calls and streams in progress end with
// shutting_down, the listener closes, and it waits (up to ctx) for handlers
// to return before closing every connection. It joins the server's
// goroutines. It is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.Drain()
	if s.closed.Swap(true) {
		s.wg.Wait()
		return nil
	}
	s.cancelBase()
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	var err error
	if started {
		if err = s.http.Shutdown(ctx); err != nil {
			err = errors.Join(fmt.Errorf("shutting down the API server: %w", err), s.http.Close())
		}
	} else {
		close(s.done)
	}
	s.wg.Wait()
	s.fwd.close()
	s.log.Info("API server stopped")
	return err
}

// ---------------------------------------------------------------------------
// Health
// ---------------------------------------------------------------------------

// healthJSON is the body of GET /v1/health: the fields of `cronoq health`
// plus details.
type healthJSON struct {
	Node           string     `json:"node"`
	Leader         string     `json:"leader"`
	Epoch          uint64     `json:"epoch"`
	Status         string     `json:"status"`
	Reasons        []string   `json:"reasons,omitempty"`
	LeaderHTTPAddr string     `json:"leader_http_addr,omitempty"`
	RaftState      string     `json:"raft_state"`
	Ready          bool       `json:"ready"`
	AppliedIndex   uint64     `json:"applied_index"`
	ShuttingDown   bool       `json:"shutting_down,omitempty"`
	Loops          []loopJSON `json:"loops"`
}

// loopJSON is one background loop of the node in GET /v1/health.
type loopJSON struct {
	Name          string  `json:"name"`
	Degraded      bool    `json:"degraded"`
	Failures      int     `json:"consecutive_failures"`
	FailuresTotal uint64  `json:"failures_total"`
	Runs          uint64  `json:"runs"`
	LastError     string  `json:"last_error,omitempty"`
	LastSuccess   string  `json:"last_success,omitempty"` // RFC3339, UTC
	BackoffSecs   float64 `json:"backoff_seconds,omitempty"`
}

func loopsJSON(loops []cluster.LoopStatus) []loopJSON {
	out := make([]loopJSON, 0, len(loops))
	for _, l := range loops {
		j := loopJSON{
			Name: l.Name, Degraded: l.Degraded, Failures: l.Failures, FailuresTotal: l.FailuresTotal,
			Runs: l.Runs, LastError: l.LastError, BackoffSecs: l.Backoff.Seconds(),
		}
		if !l.LastSuccess.IsZero() {
			j.LastSuccess = l.LastSuccess.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, j)
	}
	return out
}

// health is the node's health, degraded while the server drains.
func (s *Server) health() cluster.Health {
	h := s.node.Health()
	if s.stopping() {
		h.Status = cluster.HealthDegraded
		h.Reasons = append(h.Reasons, "node shutting down")
	}
	return h
}

// serveHealth answers 200 when the node is part of a cluster with a leader
// (also when degraded), 503 otherwise (also while this node has won an
// election but does not serve yet, and when it failed).
func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	h := s.health()
	body := healthJSON{
		Node: h.Node, Leader: h.Leader, Epoch: h.Epoch, Status: h.Status, Reasons: h.Reasons,
		LeaderHTTPAddr: h.LeaderHTTPAddr, RaftState: h.RaftState, Ready: h.Ready,
		AppliedIndex: h.AppliedIndex, ShuttingDown: s.stopping(), Loops: loopsJSON(h.Loops),
	}
	code := http.StatusOK
	if h.Leader == "" || h.Leader == h.Node && !h.Ready || h.Status == cluster.HealthFailed {
		// No leader, this node leads but does not serve yet, or it stopped
		// applying the log.
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(body)
}

// ---------------------------------------------------------------------------
// Interrupting streams
// ---------------------------------------------------------------------------

type interruptKey struct{}

// withInterrupt lets a handler interrupt its own request: it records the
// request body in the context, so that closing it unblocks a Receive
// pending on a bidirectional stream (the handler can then return).
func withInterrupt(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r = r.WithContext(context.WithValue(r.Context(), interruptKey{}, r.Body))
		}
		h.ServeHTTP(w, r)
	})
}

// interrupt closes the body of the request of ctx, if recorded.
func interrupt(ctx context.Context) {
	if c, ok := ctx.Value(interruptKey{}).(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

// ---------------------------------------------------------------------------
// Call metrics
// ---------------------------------------------------------------------------

// rpcMetrics counts the calls served, by procedure and result code, and
// times the unary ones.
type rpcMetrics struct{ m *metrics.Metrics }

func codeLabel(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

func (r *rpcMetrics) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		r.m.RPCDuration(req.Spec().Procedure, time.Since(start))
		r.m.RPC(req.Spec().Procedure, codeLabel(err))
		return resp, err
	}
}

func (r *rpcMetrics) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r *rpcMetrics) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		r.m.RPC(conn.Spec().Procedure, codeLabel(err))
		return err
	}
}

// hostIP returns the IP of a host:port address when it is a specific one
// (a zero value for names and unspecified addresses).
func hostIP(addr string) netip.Addr {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.IsUnspecified() {
		return netip.Addr{}
	}
	return ip
}
