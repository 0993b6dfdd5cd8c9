package webhook

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Subscription is a subscription with a webhook, as the replicated state
// holds it.
type Subscription struct {
	Name   string
	URL    string
	Secret string
	// Acked is the durable cursor: every event up to it is delivered.
	Acked uint64
	// Stalled: its first undelivered event went out as many times as the
	// subscription allows without being delivered (the state says so; a
	// delivery clears it). Delivery goes on.
	Stalled bool
}

// Source is what the deliverer reads and writes: the replicated state of
// the node that leads, and its log.
type Source interface {
	// Webhooks lists the subscriptions that have a webhook.
	Webhooks() ([]Subscription, error)
	// Lookup returns the subscription named name (false once removed).
	Lookup(name string) (Subscription, bool)
	// Events returns, in cursor order, up to max stored events of the
	// subscription whose cursor is above after.
	Events(name string, after uint64, max int) ([]Event, error)
	// Sent reports that the events of the subscription after cursor
	// after, up to upTo, are about to go out: the subscription counts the
	// attempts at its first undelivered event, and stalls after as many
	// as it allows. An error (the term ended) fails the attempt.
	Sent(ctx context.Context, name string, after, upTo uint64) error
	// Ack records through the log that every event of the subscription up
	// to cursor is delivered, and returns once the entry is applied. An
	// error may leave the outcome unknown: the deliverer sends again from
	// the durable cursor, so a receiver may see events twice, never miss
	// one.
	Ack(ctx context.Context, name string, cursor uint64) error
	// Changed returns a channel closed at the next change of the
	// subscriptions or of the events they hold (nil: none, the deliverer
	// polls).
	Changed() <-chan struct{}
}

// Loop reports the health of one subscription's delivery and decides its
// backoff (a node's *loophealth.Loop implements it). A round succeeds when
// its events are delivered and acked, and fails at the first step that
// fails (reading the events, reporting the send, the request, the ack).
type Loop interface {
	// Injected returns an error to fail the round with instead of making
	// it (a test's fault hook; nil: go on).
	Injected() error
	Succeeded()
	// Failed records a failed round and returns the wait before the next.
	Failed(err error) time.Duration
	// Reset ends a run of failures without a success: the delivery stops
	// on this node (its term ended).
	Reset()
	// Remove drops the loop: its subscription is gone.
	Remove()
}

// Attempt describes one POST, for metrics.
type Attempt struct {
	Subscription string
	Events       int
	Bytes        int
	// Status is the HTTP status answered (0: none, see Err).
	Status   int
	Err      error // nil when the endpoint answered 2xx
	Duration time.Duration
}

// Defaults of Config.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultBatchSize  = 100
	DefaultMaxBytes   = 1 << 20
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = time.Minute
	DefaultPoll       = time.Second
)

// Config configures a Deliverer. Zero fields take the defaults.
type Config struct {
	// Client sends the requests (a client of its own by default). Its
	// redirects are never followed: a 3xx is a failed delivery.
	Client *http.Client
	// Timeout bounds one request, from dialing to the end of the answer's
	// headers (10s). A request that takes longer failed.
	Timeout time.Duration
	// BatchSize caps the events of one delivery (100).
	BatchSize int
	// MaxBytes caps the body of one delivery (1 MiB); a single event
	// larger than it still goes alone.
	MaxBytes int
	// MinBackoff and MaxBackoff bound the wait after a failed delivery:
	// it doubles with each failure in a row from MinBackoff (500ms) up to
	// MaxBackoff (1m), and is jittered to between half and all of it.
	MinBackoff, MaxBackoff time.Duration
	// Poll is how often a subscription with nothing to send looks for new
	// events without being woken by Notify (1s).
	Poll time.Duration
	// Logger receives the deliverer's logs (none by default).
	Logger hclog.Logger
	// Now is the clock of the status (time.Now when nil).
	Now func() time.Time
	// Observe, when set, sees every attempt. It must not block.
	Observe func(Attempt)
	// Delivered, when set, sees every delivery once acknowledged: the
	// subscription and its number of events. It must not block.
	Delivered func(subscription string, events int)
	// Loop, when set, returns the loop that reports the health of a
	// subscription's delivery; its Failed decides the backoff instead of
	// MinBackoff and MaxBackoff.
	Loop func(subscription string) Loop
}

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	if c.Client == nil {
		c.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	cl := *c.Client
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cl.Timeout = 0 // each request has its own deadline
	c.Client = &cl
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// ValidateURL checks a webhook's address: an absolute http or https URL
// with a host.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("webhook URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("webhook URL %q: no host", raw)
	}
	return nil
}

// Status is the state of one subscription's delivery on this leader.
type Status struct {
	Name string
	URL  string
	// Cursor is the last cursor this deliverer had acknowledged (or found
	// acknowledged when it started).
	Cursor uint64
	// Delivered counts the events delivered and acknowledged on this
	// leader; Batches the deliveries.
	Delivered, Batches uint64
	// Failures counts the failures in a row (0: healthy); LastError is
	// the last one's while Failures > 0.
	Failures  int
	LastError string
	LastOK    time.Time // last acknowledged delivery (zero: none yet)
	Stalled   bool      // the state marks the subscription stalled
}

// Deliverer runs one goroutine per webhook subscription while its node
// leads: each sends the subscription's stored events after its durable
// cursor, in order, and acknowledges them through the log after a 2xx.
// Its lifecycle is New, Start, Stop; the cluster makes one per term of
// leadership, so a new leader resumes from the durable cursor.
type Deliverer struct {
	cfg    Config
	src    Source
	logger hclog.Logger

	wake chan struct{}

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	subs    map[string]*worker
}

// New returns a deliverer of src's webhook subscriptions.
func New(cfg Config, src Source) *Deliverer {
	cfg = cfg.WithDefaults()
	return &Deliverer{cfg: cfg, src: src, logger: cfg.Logger, wake: make(chan struct{}, 1), subs: map[string]*worker{}}
}

// ErrStarted means Start was called twice.
var ErrStarted = errors.New("webhook deliverer already started")

// Start runs the deliverer until Stop or the end of ctx.
func (d *Deliverer) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return ErrStarted
	}
	d.started = true
	ctx, d.cancel = context.WithCancel(ctx)
	d.done = make(chan struct{})
	go d.manage(ctx)
	return nil
}

// Stop ends every delivery and waits for its goroutines. It is
// idempotent; a deliverer never started stops at once.
func (d *Deliverer) Stop() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Notify tells the deliverer that events may have been stored (it never
// blocks): subscriptions waiting for events look at once instead of at
// their next poll.
func (d *Deliverer) Notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Status returns the state of each subscription's delivery, by name.
func (d *Deliverer) Status() []Status {
	d.mu.Lock()
	out := make([]Status, 0, len(d.subs))
	for _, w := range d.subs {
		out = append(out, w.status())
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// manage keeps one worker per webhook subscription: it starts the new
// ones, stops those removed or whose address or secret changed, and
// passes the source's changes and Notify's wake-ups on.
func (d *Deliverer) manage(ctx context.Context) {
	defer close(d.done)
	defer d.stopAll()
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		changed := d.src.Changed() // taken before reading: no change is missed
		d.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			continue
		case <-d.wake:
		case <-changed:
		}
		d.mu.Lock()
		for _, w := range d.subs {
			w.notify()
		}
		d.mu.Unlock()
	}
}

func (d *Deliverer) reconcile(ctx context.Context) {
	subs, err := d.src.Webhooks()
	if err != nil {
		d.logger.Warn("listing webhook subscriptions", "error", err)
		return
	}
	want := make(map[string]Subscription, len(subs))
	for _, s := range subs {
		want[s.Name] = s
	}
	d.mu.Lock()
	var stop []*worker
	for name, w := range d.subs {
		if s, ok := want[name]; !ok || s.URL != w.sub.URL || s.Secret != w.sub.Secret || w.exited() {
			stop = append(stop, w)
			delete(d.subs, name)
		}
	}
	d.mu.Unlock()
	for _, w := range stop {
		w.stop()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, s := range want {
		if _, ok := d.subs[name]; ok || ctx.Err() != nil {
			continue
		}
		w := newWorker(d, s)
		d.subs[name] = w
		w.start(ctx)
	}
}

func (d *Deliverer) stopAll() {
	d.mu.Lock()
	ws := make([]*worker, 0, len(d.subs))
	for _, w := range d.subs {
		ws = append(ws, w)
	}
	d.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
}

// worker delivers one subscription.
type worker struct {
	d    *Deliverer
	sub  Subscription // as it was when the worker started
	wake chan struct{}

	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	st Status
}

func newWorker(d *Deliverer, s Subscription) *worker {
	return &worker{d: d, sub: s, wake: make(chan struct{}, 1),
		st: Status{Name: s.Name, URL: s.URL, Cursor: s.Acked}}
}

func (w *worker) start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
}

func (w *worker) stop() {
	w.cancel()
	<-w.done
}

// exited reports whether the worker returned by itself (it saw its
// subscription removed or changed).
func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *worker) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st
}

// run delivers until ctx ends: the events after the cursor, a batch at a
// time, each acknowledged through the log after a 2xx before the next is
// sent.
func (w *worker) run(ctx context.Context) {
	d := w.d
	name := w.sub.Name
	log := d.logger.With("subscription", name)
	cursor := w.sub.Acked
	var loop Loop
	if d.cfg.Loop != nil {
		loop = d.cfg.Loop(name)
	}
	defer func() {
		if loop == nil {
			return
		}
		if _, ok := d.src.Lookup(name); ok {
			loop.Reset()
		} else {
			loop.Remove()
		}
	}()
	failures := 0 // in a row
	failed := func(what string, err error) bool {
		failures++
		err = fmt.Errorf("%s: %w", what, err)
		w.mu.Lock()
		w.st.Failures, w.st.LastError = failures, err.Error()
		w.mu.Unlock()
		log.Warn("webhook delivery failed", "failures", failures, "error", err)
		wait := d.backoff(failures)
		if loop != nil {
			wait = loop.Failed(err)
		}
		return sleepCtx(ctx, wait)
	}
	for ctx.Err() == nil {
		// Resume from the durable cursor when it is ahead (acknowledged
		// by a consumer of the subscription's stream).
		s, ok := d.src.Lookup(name)
		if !ok || s.URL != w.sub.URL || s.Secret != w.sub.Secret {
			// Removed or changed: nothing more goes to the old address;
			// the manager starts a worker for the new one.
			return
		}
		cursor = max(cursor, s.Acked)
		w.mu.Lock()
		if s.Stalled && !w.st.Stalled {
			log.Error("webhook subscription stalled: its events are kept until delivered or the subscription is removed",
				"failures", failures, "last_error", w.st.LastError)
		}
		w.st.Stalled = s.Stalled
		w.mu.Unlock()
		evs, err := d.src.Events(name, cursor, d.cfg.BatchSize)
		if err != nil {
			if !failed("reading the subscription's events", err) {
				return
			}
			continue
		}
		if len(evs) == 0 {
			w.idle(ctx)
			continue
		}
		if loop != nil {
			if err := loop.Injected(); err != nil {
				if !failed("injected", err) {
					return
				}
				continue
			}
		}
		body, n, err := encode(name, evs, d.cfg.MaxBytes)
		if err != nil {
			if !failed("encoding the events", err) {
				return
			}
			continue
		}
		evs = evs[:n]
		if err := d.src.Sent(ctx, name, cursor, evs[n-1].Cursor); err != nil {
			if ctx.Err() != nil || !failed("reporting the send", err) {
				return
			}
			continue
		}
		if err := w.post(ctx, body, n); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failed(fmt.Sprintf("posting %d events to %s", n, redact(w.sub.URL)), err) {
				return
			}
			continue
		}
		last := evs[n-1].Cursor
		// Delivered: record it. Until the ack is applied nothing else is
		// sent; if it cannot be, the next leader sends these events again.
		for {
			err := d.src.Ack(ctx, name, last)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if !failed(fmt.Sprintf("acknowledging cursor %d", last), err) {
				return
			}
		}
		cursor = last
		failures = 0
		w.mu.Lock()
		w.st.Cursor = last
		w.st.Delivered += uint64(n)
		w.st.Batches++
		w.st.Failures, w.st.LastError = 0, ""
		w.st.LastOK = d.cfg.Now()
		w.mu.Unlock()
		if loop != nil {
			loop.Succeeded()
		}
		if d.cfg.Delivered != nil {
			d.cfg.Delivered(name, n)
		}
	}
}

// idle waits for a wake-up or the next poll.
func (w *worker) idle(ctx context.Context) {
	t := time.NewTimer(w.d.cfg.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-w.wake:
	case <-t.C:
	}
}

// maxErrorBody bounds what of a refusal's body goes into the error.
const maxErrorBody = 256

// maxDrainBody bounds what of an answer is read to reuse the connection.
const maxDrainBody = 64 << 10

// post sends one delivery and reports nil only for a 2xx answer.
func (w *worker) post(ctx context.Context, body []byte, events int) error {
	d := w.d
	rctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, w.sub.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cronoq-webhook/1")
	req.Header.Set(HeaderSignature, Sign([]byte(w.sub.Secret), body))
	req.Header.Set(HeaderSubscription, w.sub.Name)
	req.Header.Set(HeaderDelivery, deliveryID())
	t0 := time.Now()
	resp, err := d.cfg.Client.Do(req)
	a := Attempt{Subscription: w.sub.Name, Events: events, Bytes: len(body)}
	if err == nil {
		a.Status = resp.StatusCode
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			err = fmt.Errorf("answered %s: %q", resp.Status, bytes.TrimSpace(snippet))
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBody))
		_ = resp.Body.Close()
	} else {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact(ue.URL) // no credentials in logs and health
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", d.cfg.Timeout, err)
		}
	}
	a.Duration, a.Err = time.Since(t0), err
	if d.cfg.Observe != nil {
		d.cfg.Observe(a)
	}
	return err
}

// encode builds the body of a delivery of the longest prefix of evs that
// fits in maxBytes (at least one event), and returns it with the number
// of events it holds.
func encode(name string, evs []Event, maxBytes int) ([]byte, int, error) {
	n := len(evs)
	for {
		body, err := json.Marshal(Payload{Subscription: name, Events: evs[:n]})
		if err != nil {
			return nil, 0, err
		}
		if len(body) <= maxBytes || n == 1 {
			return body, n, nil
		}
		// Shrink in proportion, at least by one.
		n = min(n-1, max(1, n*maxBytes/len(body)))
	}
}

// backoff is the wait after the failures-th failure in a row: MinBackoff
// doubled per failure, capped at MaxBackoff, jittered to [d/2, d).
func (d *Deliverer) backoff(failures int) time.Duration {
	b := d.cfg.MinBackoff
	for i := 1; i < failures && b < d.cfg.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, d.cfg.MaxBackoff)
	half := b / 2
	return half + rand.N(b-half+1)
}

// deliveryID returns a new random id for one attempt.
func deliveryID() string {
	var b [16]byte
	_, _ = cryptorand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// redact drops the user information and query of a URL for logs.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
