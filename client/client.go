// Package client is the Go SDK of cronoq: submit, inspect, wait for,
// cancel and delete tasks and workflows (tasks that depend on one another),
// complete external tasks, manage recurring schedules, inspect and tune
// pools and their workers, follow status events, read durable subscriptions
// to them (delivered at least once, acked by the reader), operate the
// cluster, and run workers, whose handlers see their dependencies' results
// and may spawn more tasks.
//
// A Client talks ConnectRPC over unencrypted HTTP/2 (h2c) to any node of the
// cluster, or over HTTPS (HTTP/2) with WithTLS. It keeps the list of addresses it was given and the leader hint
// nodes answer with (a refusal naming the leader, or an answer a follower
// forwarded from it): a call that needs the leader goes there, a node that
// does not answer is skipped for the next one, with jittered backoff between
// rounds. Calls that are safe to repeat (reads, submits, which always carry an
// idempotency key, cancels, deletes, schedule and pool changes) are retried
// until their ctx ends; others only when the node refused them before doing
// anything. With WithFailFast, a call gives up early when no address accepts
// a connection at all (ErrUnreachable); WithUnreachableNotice tells a
// program that keeps waiting why nothing happens.
//
// # Handlers
//
// A Worker runs each attempt with the Handler of its task's kind. What the
// handler returns ends the attempt: output and nil succeed; a plain error
// or Retryable fails it retryably (retried per the task's retry policy);
// Permanent fails the task; Cancel (or an error wrapping ErrCancelAttempt)
// ends the task cancelled. A panic is recovered and reported as a
// retryable failure whose error is the panic value and an excerpt of the
// stack from the panicking call (PanicError); the worker keeps running.
// See Handler and docs/workers.md.
//
// # Tracing
//
// A task whose tags carry a W3C traceparent (TagTraceparent) continues
// that trace. Submit, SubmitBatch, EnqueueMany and SubmitWorkflow add the
// OpenTelemetry span of their ctx to the tags of the specs without one; a
// Worker makes a span of each attempt of a traced task with
// WorkerConfig.TracerProvider (the global provider by default), a child of
// the node's dispatch span, hands it to the handler in its ctx, and sends
// its context back with the completion; the children a handler spawns
// continue it. See docs/tracing.md.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/api/apierr"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/internal/tlsutil"
)

// Defaults.
const (
	// DefaultTimeout bounds one attempt of a unary call.
	DefaultTimeout = 10 * time.Second
	// DefaultWaitPoll is how long one Wait RPC asks the node to hold before
	// answering with the task as it is; Wait then asks again.
	DefaultWaitPoll   = 30 * time.Second
	defaultBackoffMin = 50 * time.Millisecond
	defaultBackoffMax = 2 * time.Second
)

// Client is a connection to a cronoq cluster. It is safe for concurrent use.
type Client struct {
	opts    options
	httpc   *http.Client
	ownedTr *http.Transport
	tls     *tls.Config // the transport's, when WithTLS
	log     hclog.Logger

	mu        sync.Mutex
	addrs     []string
	next      int    // index into addrs of the next address to try
	preferred string // leader hint or last address that answered
	leader    string // leader address named by a forwarded answer; calls for the leader go there
	badHint   string // last leader address named by answers that could not be reached
	endpoints map[string]*endpoint
	closed    bool
	reach     reachability

	// coalesce merges concurrent Submit calls (nil: every Submit alone).
	coalesce *coalescer

	// base is cancelled by Close; background goroutines (Events, coalesced
	// submits) derive from it and are joined by Close through wg.
	base       context.Context
	cancelBase context.CancelFunc
	wg         sync.WaitGroup
}

// endpoint holds the generated clients for one node address.
type endpoint struct {
	addr      string
	tasks     cronoqv1connect.TaskServiceClient
	schedules cronoqv1connect.ScheduleServiceClient
	workflows cronoqv1connect.WorkflowServiceClient
	workers   cronoqv1connect.WorkerServiceClient
	operator  cronoqv1connect.OperatorServiceClient
	pools     cronoqv1connect.PoolServiceClient
	acl       cronoqv1connect.AclServiceClient

	subscriptions cronoqv1connect.SubscriptionServiceClient
}

type options struct {
	tls        *TLSConfig
	localAddr  string
	logger     hclog.Logger
	httpClient *http.Client
	timeout    time.Duration
	waitPoll   time.Duration
	backoffMin time.Duration
	backoffMax time.Duration
	submitConc int
	token      string

	failFast     time.Duration
	noticeAfter  time.Duration
	noticeRepeat time.Duration
	notice       func(*UnreachableError)
}

// Option configures New.
type Option func(*options)

// WithLocalAddr makes every connection dial from the source address ip (for
// instance "127.0.0.7"). It cannot be combined with WithHTTPClient.
func WithLocalAddr(ip string) Option { return func(o *options) { o.localAddr = ip } }

// TLSConfig is the TLS configuration of a Client (WithTLS): the CA that
// verifies the nodes' certificates and the client certificate to present.
// Every field is optional.
type TLSConfig struct {
	// CAFile is a PEM file of the CA (or CAs) that signed the nodes'
	// certificates; CAPool gives them directly (one or the other). Without
	// either, the system's roots are used.
	CAFile string
	CAPool *x509.CertPool
	// CertFile and KeyFile are the client certificate and its key, PEM
	// (both or neither); Certificate gives them directly (one or the
	// other). Nodes started
	// with -tls-verify-incoming require one signed by their CA.
	CertFile, KeyFile string
	Certificate       *tls.Certificate
	// ServerName is the name the nodes' certificates must carry (default:
	// the host of the address dialled). tlsutil.ServerName
	// ("server.cronoq") is in every server certificate cronoq makes.
	ServerName string
}

// config builds the tls.Config of c.
func (c TLSConfig) config() (*tls.Config, error) {
	cfg, err := tlsutil.ClientConfig(tlsutil.ClientFiles{
		CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName,
	})
	if err != nil {
		return nil, err
	}
	if c.CAPool != nil {
		if cfg.RootCAs != nil {
			return nil, errors.New("give the CA as a file or as a pool, not both")
		}
		cfg.RootCAs = c.CAPool
	}
	if c.Certificate != nil {
		if len(cfg.Certificates) > 0 {
			return nil, errors.New("give the client certificate as files or as a value, not both")
		}
		cfg.Certificates = []tls.Certificate{*c.Certificate}
	}
	return cfg, nil
}

// WithTLS makes the Client dial the nodes with HTTPS (HTTP/2), verifying
// their certificates and presenting a client certificate as cfg says. It
// cannot be combined with WithHTTPClient.
func WithTLS(cfg TLSConfig) Option { return func(o *options) { o.tls = &cfg } }

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithHTTPClient replaces the HTTP client. It must speak HTTP/2 to http://
// URLs (h2c), or the worker stream cannot work.
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// WithTimeout bounds each attempt of a unary call (default DefaultTimeout);
// the call as a whole, retries included, is bounded by its ctx. A submit
// parked by a "wait" overflow policy longer than this is re-sent (safely,
// with the same key).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithWaitPoll sets how long one Wait RPC may be held by a node (default
// DefaultWaitPoll).
func WithWaitPoll(d time.Duration) Option { return func(o *options) { o.waitPoll = d } }

// WithSubmitConcurrency sets how many Submit calls of the Client go out on
// their own at once (default DefaultSubmitConcurrency). Submits made while
// that many are in flight wait, and go out together in one EnqueueMany call
// as soon as one returns: each is still admitted or refused on its own,
// under its own key, and returns its own result. Under a light load no
// submit ever waits; under a heavy one the node handles one call per batch
// instead of one per task. n <= 0 sends every Submit on its own.
func WithSubmitConcurrency(n int) Option { return func(o *options) { o.submitConc = n } }

// WithBackoff sets the jittered exponential backoff between retry rounds
// (default 50ms doubling up to 2s).
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = min, max }
}

// New returns a Client for the nodes at addrs ("host:port" of the HTTP API;
// any subset of the cluster will do). It does not connect yet.
func New(addrs []string, opts ...Option) (*Client, error) {
	o := options{
		timeout:    DefaultTimeout,
		waitPoll:   DefaultWaitPoll,
		backoffMin: defaultBackoffMin,
		backoffMax: defaultBackoffMax,
		submitConc: DefaultSubmitConcurrency,
	}
	for _, opt := range opts {
		opt(&o)
	}
	var clean []string
	for _, a := range addrs {
		a = normalizeAddr(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("creating client: address %q: %w", a, err)
		}
		if !slices.Contains(clean, a) {
			clean = append(clean, a)
		}
	}
	switch {
	case len(clean) == 0:
		return nil, errors.New("creating client: no addresses")
	case o.timeout <= 0:
		return nil, errors.New("creating client: timeout must be positive")
	case o.waitPoll <= 0:
		return nil, errors.New("creating client: wait poll must be positive")
	case o.backoffMin <= 0 || o.backoffMax < o.backoffMin:
		return nil, errors.New("creating client: backoff needs 0 < min <= max")
	case o.localAddr != "" && o.httpClient != nil:
		return nil, errors.New("creating client: WithLocalAddr and WithHTTPClient exclude each other")
	case o.tls != nil && o.httpClient != nil:
		return nil, errors.New("creating client: WithTLS and WithHTTPClient exclude each other")
	case o.failFast < 0 || o.noticeAfter < 0 || o.noticeRepeat < 0:
		return nil, errors.New("creating client: fail-fast and notice periods must not be negative")
	}
	c := &Client{
		opts:      o,
		addrs:     clean,
		endpoints: make(map[string]*endpoint),
		log:       o.logger,
	}
	if c.log == nil {
		c.log = hclog.NewNullLogger()
	}
	if o.httpClient != nil {
		c.httpc = o.httpClient
	} else {
		var tlsCfg *tls.Config
		if o.tls != nil {
			var err error
			if tlsCfg, err = o.tls.config(); err != nil {
				return nil, fmt.Errorf("creating client: %w", err)
			}
			c.tls = tlsCfg
		}
		tr, err := newTransport(o.localAddr, tlsCfg)
		if err != nil {
			return nil, fmt.Errorf("creating client: %w", err)
		}
		c.ownedTr = tr
		c.httpc = &http.Client{Transport: tr}
	}
	c.base, c.cancelBase = context.WithCancel(context.Background())
	if o.submitConc > 0 {
		c.coalesce = &coalescer{c: c, limit: o.submitConc}
	}
	return c, nil
}

// newTransport builds a transport that speaks HTTP/2 with prior knowledge
// (the worker stream needs it): over plain TCP (h2c), or with tlsCfg over
// TLS (see dialTLS), dialing from localIP when set. HTTP/2 pings detect
// dead connections so long waits and worker streams do not hang on a
// silent peer.
func newTransport(localIP string, tlsCfg *tls.Config) (*http.Transport, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	if localIP != "" {
		ip := net.ParseIP(localIP)
		if ip == nil {
			return nil, fmt.Errorf("local address %q is not an IP", localIP)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	dial := d.DialContext
	if tlsCfg != nil {
		dial = dialTLS(d, tlsCfg)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{
		DialContext:         dial,
		Protocols:           &p,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}, nil
}

func normalizeAddr(a string) string {
	a = strings.TrimSpace(a)
	a = strings.TrimPrefix(a, "http://")
	return strings.TrimSuffix(a, "/")
}

// Close stops the Client's background subscriptions (Events), waits for
// them, and closes idle connections. Stop Workers (cancel their Run ctx)
// before closing their Client. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if already {
		return nil
	}
	c.cancelBase()
	c.wg.Wait()
	if c.ownedTr != nil {
		c.ownedTr.CloseIdleConnections()
	}
	return nil
}

// endpointFor returns (creating once) the generated clients for addr.
func (c *Client) endpointFor(addr string) *endpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ep, ok := c.endpoints[addr]; ok {
		return ep
	}
	// Over TLS too: the dialer adds it beneath HTTP/2 (see dialTLS).
	base := "http://" + addr
	var opts []connect.ClientOption
	if c.opts.token != "" {
		opts = append(opts, connect.WithInterceptors(tokenInterceptor(c.opts.token)))
	}
	ep := &endpoint{
		addr:      addr,
		tasks:     cronoqv1connect.NewTaskServiceClient(c.httpc, base, opts...),
		schedules: cronoqv1connect.NewScheduleServiceClient(c.httpc, base, opts...),
		workflows: cronoqv1connect.NewWorkflowServiceClient(c.httpc, base, opts...),
		workers:   cronoqv1connect.NewWorkerServiceClient(c.httpc, base, opts...),
		operator:  cronoqv1connect.NewOperatorServiceClient(c.httpc, base, opts...),
		pools:     cronoqv1connect.NewPoolServiceClient(c.httpc, base, opts...),
		acl:       cronoqv1connect.NewAclServiceClient(c.httpc, base, opts...),

		subscriptions: cronoqv1connect.NewSubscriptionServiceClient(c.httpc, base, opts...),
	}
	c.endpoints[addr] = ep
	return ep
}

// pick returns the address the next attempt should go to: the leader that
// forwarded answers named, unless any node may serve the call (anyNode);
// else the leader hint (or the last address that answered), else the next
// one of the list.
func (c *Client) pick(anyNode bool) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", ErrClosed
	}
	if !anyNode && c.leader != "" {
		return c.leader, nil
	}
	if c.preferred != "" {
		return c.preferred, nil
	}
	return c.addrs[c.next%len(c.addrs)], nil
}

// succeeded records that addr answered.
func (c *Client) succeeded(addr string) { c.succeededVia(addr, "") }

// succeededVia records that addr answered, with an answer it forwarded from
// the leader at leader (empty: addr answered itself). Later calls for the
// leader go straight there, unless that address could not be reached the
// last time it was named; calls that any node serves stay with the address
// that answered before.
func (c *Client) succeededVia(addr, leader string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr != c.leader || c.preferred == "" {
		c.preferred = addr
	}
	if addr == c.badHint {
		c.badHint = ""
	}
	leader = normalizeAddr(leader)
	if leader != "" && leader != addr && leader != c.badHint {
		c.leader = leader
	}
}

// failed records that addr did not serve the call; hint is the leader
// address it named, if any. It moves on to the hint, or to the address after
// addr in the list. unreachable says that addr did not answer at all: a
// leader address named by forwarded answers that cannot be reached is not
// followed again until it answers.
func (c *Client) failed(addr, hint string, unreachable bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr == c.leader {
		c.leader = ""
		if unreachable {
			c.badHint = addr
		}
	}
	hint = normalizeAddr(hint)
	if hint != "" && hint != addr {
		c.preferred = hint
		return
	}
	if c.preferred == addr {
		c.preferred = ""
	}
	if i := slices.Index(c.addrs, addr); i >= 0 {
		c.next = (i + 1) % len(c.addrs)
	} else {
		c.next = (c.next + 1) % len(c.addrs)
	}
}

// answered reports whether err is an answer of the node (an API error), as
// opposed to a failure to reach it or to hear back.
func answered(err error) bool {
	var ae *APIError
	return errors.As(err, &ae)
}

// backoff returns the jittered delay before retry round n (n >= 1):
// exponential from the minimum, capped, uniformly in [d/2, d].
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.backoffMin
	for i := 1; i < n && d < c.opts.backoffMax; i++ {
		d *= 2
	}
	d = min(d, c.opts.backoffMax)
	half := d / 2
	return half + mrand.N(half+1)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryPolicy says which failed attempts a call may repeat.
type retryPolicy int

const (
	// idempotent calls are repeated after any transient failure.
	idempotent retryPolicy = iota
	// once calls are repeated only when the node refused them unexecuted.
	once
	// read calls are repeated like idempotent ones and change nothing, so
	// that no failure of theirs leaves an outcome unknown.
	read
)

// attemptFunc runs one attempt against ep within ctx. On success it returns
// the leader address the answer named (apierr.HeaderLeaderAddr, set when
// the node forwarded the call to the leader), or "".
type attemptFunc func(ctx context.Context, ep *endpoint) (leader string, err error)

// do runs fn against the cluster with routing and retries, and returns the
// decoded error of the last attempt (wrapped with what) when it gives up.
// Each attempt is bounded by timeout (0: only by ctx). anyNode says that any
// node serves the call itself (a stale read): it is not sent to the leader
// on purpose.
func (c *Client) do(ctx context.Context, what string, policy retryPolicy, anyNode bool, timeout time.Duration, fn attemptFunc) error {
	var (
		lastErr  error
		unsure   bool // some attempt may have taken effect
		lastHint string
	)
	for n := 0; ; n++ {
		addr, err := c.pick(anyNode)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			actx, cancel = context.WithTimeout(ctx, timeout)
		}
		leader, err := fn(actx, c.endpointFor(addr))
		err = decodeError(err)
		cancel()
		c.noteAttempt(addr, err)
		if err == nil {
			c.succeededVia(addr, leader)
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			// The caller gave up, possibly while this attempt was in flight:
			// unless the node certainly did not run it, it may have run.
			if classifyErr(err) != notExecuted && policy != read {
				unsure = true
			}
			return c.gaveUp(ctx, what, lastErr, unsure)
		}
		v := classify(ctx, err)
		if v == final || (v == uncertain && policy == once) {
			if v == uncertain {
				return fmt.Errorf("%s: %w: %w", what, ErrOutcomeUnknown, described(err))
			}
			return fmt.Errorf("%s: %w", what, described(err))
		}
		if v == uncertain && policy != read {
			unsure = true
		}
		hint := ""
		var ae *APIError
		if errors.As(err, &ae) && ae.Kind == apierr.KindNotLeader {
			hint = normalizeAddr(ae.LeaderAddr)
		}
		c.failed(addr, hint, !answered(err))
		c.log.Debug("call failed, retrying", "call", what, "addr", addr, "error", err, "leader_hint", hint)
		// A fresh leader hint is followed at once; anything else waits.
		var wait time.Duration
		if hint == "" || hint == lastHint {
			wait = c.backoff(n + 1)
		}
		lastHint = hint
		wait, uerr := c.checkReach(wait, true)
		if uerr != nil {
			if unsure {
				return fmt.Errorf("%s: %w: %w", what, ErrOutcomeUnknown, uerr)
			}
			return fmt.Errorf("%s: %w", what, uerr)
		}
		if err := sleep(ctx, wait); err != nil {
			return c.gaveUp(ctx, what, lastErr, unsure)
		}
	}
}

// gaveUp is the error of a call whose ctx ended while retrying: the ctx
// error, ErrOutcomeUnknown when an attempt may have taken effect, and the
// last attempt's error (errors.Is sees it too: ErrNoLeader says why).
func (c *Client) gaveUp(ctx context.Context, what string, last error, unsure bool) error {
	if unsure {
		return fmt.Errorf("%s: %w: %w (last error: %w)", what, ctx.Err(), ErrOutcomeUnknown, described(last))
	}
	return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), described(last))
}

// unary runs a unary RPC with routing and retries. call picks the method of
// the endpoint; req is re-sent as is by every attempt.
func unary[Req, Res any](ctx context.Context, c *Client, what string, policy retryPolicy, req *Req,
	call func(ep *endpoint) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	return unaryTo(ctx, c, what, policy, false, req, call)
}

// unaryTo is unary for a call that any node serves itself when anyNode is
// set (a stale read).
func unaryTo[Req, Res any](ctx context.Context, c *Client, what string, policy retryPolicy, anyNode bool, req *Req,
	call func(ep *endpoint) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	var out *Res
	err := c.do(ctx, what, policy, anyNode, c.opts.timeout, func(actx context.Context, ep *endpoint) (string, error) {
		resp, err := call(ep)(actx, connect.NewRequest(req))
		if err != nil {
			return "", err
		}
		out = resp.Msg
		return resp.Header().Get(apierr.HeaderLeaderAddr), nil
	})
	return out, err
}

// newKey returns a random 128-bit idempotency key in hex.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
