package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	"github.com/cronoq/cronoq/api/cronoqv1/cronoqv1connect"
	"github.com/cronoq/cronoq/cluster"
	"github.com/cronoq/cronoq/internal/tlsutil"
)

// forwarder holds the connections to other nodes' APIs: one pooled h2c
// client whose connections leave from this node's own IP, or with TLS an
// HTTPS client that presents the node's certificate and accepts only a
// server certificate of the CA.
type forwarder struct {
	tr     *http.Transport
	httpc  *http.Client
	limit  int
	scheme string // "http://" or "https://"
	dialer *net.Dialer

	mu        sync.Mutex
	endpoints map[string]*endpoint
}

// endpoint is the generated clients for one node's API address.
type endpoint struct {
	tasks     cronoqv1connect.TaskServiceClient
	workflows cronoqv1connect.WorkflowServiceClient
	schedules cronoqv1connect.ScheduleServiceClient
	pools     cronoqv1connect.PoolServiceClient
	operator  cronoqv1connect.OperatorServiceClient
	acl       cronoqv1connect.AclServiceClient
	workers   cronoqv1connect.WorkerServiceClient

	subscriptions cronoqv1connect.SubscriptionServiceClient
}

// newForwarder returns a forwarder dialing from the IP of selfAddr (no
// binding when that is not a specific IP).
func newForwarder(selfAddr string, readLimit int) (*forwarder, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	if ip := hostIP(selfAddr); ip.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: ip.AsSlice(), Zone: ip.Zone()}
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		DialContext:         d.DialContext,
		Protocols:           &p,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}
	return &forwarder{
		tr:        tr,
		httpc:     &http.Client{Transport: tr},
		limit:     readLimit,
		scheme:    "http://",
		dialer:    d,
		endpoints: make(map[string]*endpoint),
	}, nil
}

// useTLS makes the forwarder speak HTTPS (HTTP/2) with the certificates of
// r: it presents the node's certificate and accepts only a server
// certificate of the CA. The configuration is built at each dial, so that
// a reload applies to the next connection. It must be called before the
// forwarder is used.
func (f *forwarder) useTLS(r *tlsutil.Reloader) {
	var p http.Protocols
	p.SetHTTP2(true)
	f.tr.Protocols = &p
	f.scheme = "https://"
	d := f.dialer
	f.tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := r.PeerClientConfig()
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, &tlsDialError{addr: addr, err: err}
		}
		return tc, nil
	}
}

// tlsDialError is a failed TLS handshake with another node: nothing was
// sent to it.
type tlsDialError struct {
	addr string
	err  error
}

func (e *tlsDialError) Error() string {
	return fmt.Sprintf("TLS handshake with %s: %v", e.addr, e.err)
}

func (e *tlsDialError) Unwrap() error { return e.err }

func (f *forwarder) endpoint(addr string) *endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ep, ok := f.endpoints[addr]; ok {
		return ep
	}
	base := f.scheme + addr
	opts := []connect.ClientOption{connect.WithSendMaxBytes(f.limit)}
	ep := &endpoint{
		tasks:     cronoqv1connect.NewTaskServiceClient(f.httpc, base, opts...),
		workflows: cronoqv1connect.NewWorkflowServiceClient(f.httpc, base, opts...),
		schedules: cronoqv1connect.NewScheduleServiceClient(f.httpc, base, opts...),
		pools:     cronoqv1connect.NewPoolServiceClient(f.httpc, base, opts...),
		operator:  cronoqv1connect.NewOperatorServiceClient(f.httpc, base, opts...),
		acl:       cronoqv1connect.NewAclServiceClient(f.httpc, base, opts...),
		workers:   cronoqv1connect.NewWorkerServiceClient(f.httpc, base, opts...),

		subscriptions: cronoqv1connect.NewSubscriptionServiceClient(f.httpc, base, opts...),
	}
	f.endpoints[addr] = ep
	return ep
}

func (f *forwarder) close() { f.tr.CloseIdleConnections() }

// callKind says how a call may be re-sent after a failure in transit.
type callKind int

const (
	// readCall calls may be re-sent freely.
	readCall callKind = iota
	// writeCall calls are never re-sent once they may have reached the leader.
	writeCall
	// handoverCall calls are writes whose effect is the election of
	// another leader (a leadership transfer): a forward of one is not
	// abandoned when this node learns of that leader, which may happen
	// before the old leader's answer arrives.
	handoverCall
)

// forwarded reports whether the request came from another node.
func forwarded(h http.Header) bool { return h.Get(HeaderForwarded) != "" }

// route serves a call that needs the leader: locally when this node is the
// ready leader (local returns a *cluster.NotLeaderError or cluster.ErrStopped
// when it turns out it cannot serve, with nothing done), otherwise by
// forwarding it to the leader with remote; a forwarded answer names the
// leader in the apierr.HeaderLeader and apierr.HeaderLeaderAddr headers.
// While no leader is known it holds and re-checks with jitter until the hold
// timeout.
func route[Req, Res any](ctx context.Context, s *Server, kind callKind, req *connect.Request[Req],
	local func(context.Context) (*Res, error),
	remote func(*endpoint) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	if s.stopping() {
		return nil, apierr.ShuttingDown()
	}
	procedure := req.Spec().Procedure
	hold := time.NewTimer(holdFor(ctx, s.cfg.HoldTimeout))
	defer hold.Stop()
	var (
		last error // why the last round could not serve
		// unreachable: the last round's forward to the leader could not
		// connect (lastID at lastAddr): if the hold runs out so, the
		// answer is that no leader can be reached, not a hint naming it.
		unreachable      bool
		lastID, lastAddr string
	)
	for {
		unreachable = false
		// Taken before looking, so that a change after the look ends the
		// pause below at once.
		changed := s.routingChanged()
		if _, err := s.node.Leading(); err == nil {
			res, err := local(ctx)
			if err == nil {
				return connect.NewResponse(res), nil
			}
			if !notServed(err) || ctx.Err() != nil || errors.Is(err, cluster.ErrDiskFull) {
				return nil, s.apiError(err)
			}
			last = err
		} else if errors.Is(err, cluster.ErrDiskFull) {
			// This node leads with a full disk: no other node will serve
			// until it hands leadership over or space is freed.
			return nil, s.apiError(err)
		}
		id, addr := s.node.Leader()
		switch {
		case forwarded(req.Header()) && id != s.node.ID():
			// One hop at most: the node that forwarded re-routes. (A call
			// forwarded to this node while it leads but does not serve
			// yet is held here, below, until it serves.)
			if last != nil {
				return nil, s.apiError(last)
			}
			return nil, s.leaderHint(id, addr)
		case id != "" && id != s.node.ID() && addr != "":
			s.m.Forwarded(procedure)
			fwd := connect.NewRequest(req.Msg)
			fwd.Header().Set(HeaderForwarded, s.node.ID())
			if tok := tokenSecret(req.Header()); tok != "" {
				// The leader checks the call again, against its replica.
				fwd.Header().Set(HeaderToken, tok)
			}
			fctx, stopWatch := ctx, func() string { return "" }
			if kind != handoverCall {
				fctx, stopWatch = s.watchForward(ctx, id)
			}
			resp, err := remote(s.fwd.endpoint(addr))(fctx, fwd)
			moved := stopWatch()
			if err == nil {
				// Name the leader so that the client sends its next calls
				// there instead of through this node.
				out := connect.NewResponse(resp.Msg)
				out.Header().Set(apierr.HeaderLeader, id)
				out.Header().Set(apierr.HeaderLeaderAddr, addr)
				return out, nil
			}
			if ctx.Err() != nil {
				return nil, s.apiError(ctx.Err())
			}
			if moved != "" {
				// Another leader was elected while the call was with the
				// old one (cut off, or it would have answered): route it
				// there at once. A write that may have reached the old
				// leader is answered outcome_unknown, for the caller to
				// retry with its idempotency key.
				s.log.Debug("forwarded call abandoned: new leader", "procedure", procedure, "old_leader", id, "leader", moved)
				if kind != readCall && !neverSent(err) {
					return nil, apierr.OutcomeUnknown(fmt.Sprintf(
						"forwarding to leader %s at %s: abandoned when %s was elected", id, addr, moved))
				}
				continue
			}
			final, again := forwardOutcome(kind, id, addr, err)
			if final != nil {
				if apierr.Kind(final) == apierr.KindOutcomeUnknown {
					s.log.Debug("forwarded write lost in transit", "procedure", procedure, "leader", id, "error", err)
				}
				return nil, final
			}
			s.log.Debug("forwarded call not taken, routing again", "procedure", procedure, "leader", id, "error", err)
			last = again
			unreachable, lastID, lastAddr = neverSent(err), id, addr
		default:
			// No leader known, this node leads but does not serve yet, or
			// the leader's address is not known yet.
			last = s.leaderHint(id, addr)
		}
		if !pauseUntil(ctx, hold.C, s.baseCtx.Done(), changed) {
			if ctx.Err() != nil {
				return nil, s.apiError(ctx.Err())
			}
			if s.stopping() {
				return nil, apierr.ShuttingDown()
			}
			if unreachable {
				return nil, apierr.New(apierr.KindNoLeader, fmt.Sprintf(
					"no leader reachable: %s at %s, the last leader known, does not answer", lastID, lastAddr))
			}
			return nil, s.apiError(last)
		}
	}
}

// routingNotifier is a Backend that tells when the routing of calls that
// need the leader may have changed (a *cluster.Node does).
type routingNotifier interface {
	RoutingChanged() <-chan struct{}
}

// routingChanged returns the backend's RoutingChanged, or nil when it has
// none (route then re-checks on its timer only).
func (s *Server) routingChanged() <-chan struct{} {
	if rn, ok := s.node.(routingNotifier); ok {
		return rn.RoutingChanged()
	}
	return nil
}

// forwardLeaderCheck is how often a call forwarded to the leader checks
// whether another leader has been elected meanwhile.
const forwardLeaderCheck = 25 * time.Millisecond

// watchForward returns the context of a call forwarded to leader id: ctx,
// cancelled as soon as this node knows another leader. stop ends the watch
// and returns that leader's id ("" when none was elected meanwhile).
func (s *Server) watchForward(ctx context.Context, id string) (context.Context, func() (moved string)) {
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var newID string // written by the watcher before cancel, read after it exits
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(forwardLeaderCheck)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-fctx.Done():
				return
			case <-tick.C:
				if lid, _ := s.node.Leader(); lid != "" && lid != id {
					newID = lid
					cancel()
					return
				}
			}
		}
	}()
	return fctx, func() string {
		close(done)
		<-exited
		cancel()
		return newID
	}
}

// holdSlack is how long before the caller's deadline a held call is
// answered with why it could not be served, so that the answer arrives
// before the caller gives up.
const holdSlack = 200 * time.Millisecond

// holdFor is how long route holds a call: the hold timeout, or until
// holdSlack before ctx's deadline if that comes first (at least a
// millisecond).
func holdFor(ctx context.Context, timeout time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl)-holdSlack)
	}
	return max(timeout, time.Millisecond)
}

// forwardOutcome decides what a failed forward to leader id at addr means:
// an answer for the caller (final), or a reason to route again (again, also
// the answer if the hold runs out). The leader's own refusals of calls it
// did not take (not_leader, no_leader, shutting_down) are routed again; its
// other answers are relayed. A failure in transit routes a read again, and a
// write only if the connection was never made: a write that may have
// reached the leader is answered outcome_unknown, for the caller to retry
// with its idempotency key.
func forwardOutcome(kind callKind, id, addr string, err error) (final, again error) {
	if connect.IsWireError(err) {
		switch apierr.Kind(err) {
		case apierr.KindNotLeader, apierr.KindNoLeader, apierr.KindShuttingDown:
			return nil, apierr.Relay(err)
		}
		return apierr.Relay(err), nil
	}
	if kind != readCall && !neverSent(err) {
		return apierr.OutcomeUnknown(fmt.Sprintf("forwarding to leader %s at %s: %v", id, addr, err)), nil
	}
	return nil, apierr.NotLeader(id, addr)
}

// neverSent reports whether a failed call surely never reached the other
// node: the connection (or its TLS handshake) could not be made.
func neverSent(err error) bool {
	var op *net.OpError
	var te *tlsDialError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &te)
}

// pause waits 25 to 100 ms before routing again; false when the hold ran
// out or ctx or stop ended first.
func pause(ctx context.Context, hold <-chan time.Time, stop <-chan struct{}) bool {
	return pauseUntil(ctx, hold, stop, nil)
}

// pauseUntil is pause that also ends, with true, when changed is closed
// (a change of the leader or of this node's readiness; nil: none).
func pauseUntil(ctx context.Context, hold <-chan time.Time, stop, changed <-chan struct{}) bool {
	t := time.NewTimer(25*time.Millisecond + rand.N(75*time.Millisecond))
	defer t.Stop()
	select {
	case <-changed:
		return true
	case <-t.C:
		return true
	case <-hold:
		return false
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
