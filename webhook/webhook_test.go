package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestVerifySignature(t *testing.T) {
	secret := []byte("s3cret")
	body := []byte(`{"subscription":"billing","events":[]}`)
	sig := Sign(secret, body)
	require.True(t, strings.HasPrefix(sig, "sha256="))
	require.Len(t, sig, len("sha256=")+64)
	require.NoError(t, VerifySignature(secret, body, sig))

	require.ErrorIs(t, VerifySignature(secret, append([]byte(nil), append(body, ' ')...), sig), ErrBadSignature, "altered body")
	require.ErrorIs(t, VerifySignature([]byte("other"), body, sig), ErrBadSignature, "other secret")
	require.ErrorContains(t, VerifySignature(secret, body, ""), "no X-Cronoq-Signature header")
	require.ErrorContains(t, VerifySignature(secret, body, "sha1="+sig[7:]), `does not start with "sha256="`)
	require.ErrorContains(t, VerifySignature(secret, body, "sha256=zz"), "not 32 bytes of hex")
	require.ErrorContains(t, VerifySignature(secret, body, sig[:len(sig)-2]), "not 32 bytes of hex")
	require.ErrorIs(t, VerifySignature(secret, body, sig[:7]+strings.ToUpper(sig[7:])), nil, "hex is case-insensitive")
}

func TestSignKnownAnswer(t *testing.T) {
	// echo -n 'hello' | openssl dgst -sha256 -hmac key
	require.Equal(t, "sha256=9307b3b915efb5171ff14d8cb55fbcc798c6c0ef1456d66ded1a6aa723a58b7b",
		Sign([]byte("key"), []byte("hello")))
}

func TestValidateURL(t *testing.T) {
	require.NoError(t, ValidateURL("https://hooks.example.com/cronoq"))
	require.NoError(t, ValidateURL("http://127.0.0.1:9000/x?k=v"))
	require.ErrorContains(t, ValidateURL("ftp://example.com"), "scheme must be http or https")
	require.ErrorContains(t, ValidateURL("/relative"), "scheme must be http or https")
	require.ErrorContains(t, ValidateURL("http://"), "no host")
	require.Error(t, ValidateURL("http://[::1"))
}

func TestBackoffDoublesCappedAndJittered(t *testing.T) {
	d := New(Config{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}, newFakeSource())
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		for range 50 {
			b := d.backoff(i + 1)
			require.GreaterOrEqual(t, b, w/2, "failure %d", i+1)
			require.LessOrEqual(t, b, w, "failure %d", i+1)
		}
	}
	require.LessOrEqual(t, d.backoff(1000), time.Second)
}

func TestEncodeSplitsAtMaxBytes(t *testing.T) {
	evs := make([]Event, 10)
	for i := range evs {
		evs[i] = Event{TaskID: fmt.Sprintf("t%d", i), Cursor: uint64(i + 1), Message: strings.Repeat("x", 100)}
	}
	body, n, err := encode("s", evs, 1<<20)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	var p Payload
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, "s", p.Subscription)
	require.Len(t, p.Events, 10)

	body, n, err = encode("s", evs, 700)
	require.NoError(t, err)
	require.Less(t, n, 10)
	require.GreaterOrEqual(t, n, 1)
	require.LessOrEqual(t, len(body), 700)

	// One event larger than the cap still goes, alone.
	_, n, err = encode("s", evs, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// fakeSource is a subscription store: events are appended by the test,
// acks are checked against what the receiver accepted with a 2xx.
type fakeSource struct {
	mu       sync.Mutex
	subs     map[string]*fakeSub
	accepted func(name string) uint64 // highest cursor the receiver answered 2xx for
	// ackFail, when > 0, fails that many acks (outcome unknown: half of
	// them are applied anyway).
	ackFail   int
	ackCalls  int
	early     []string // acks of cursors the receiver had not accepted
	listFails int
	// stallAfter, when > 0, stalls a subscription once its head was sent
	// that many times without an ack, as the engine does.
	stallAfter int
	changed    chan struct{}
	quiet      bool // emit does not signal a change (Notify or polls must)
}

type fakeSub struct {
	Subscription
	events    []Event
	headSends int
	sends     int
	stalls    int
}

func newFakeSource() *fakeSource {
	return &fakeSource{subs: map[string]*fakeSub{}, changed: make(chan struct{})}
}

// change closes the current change channel; f.mu is held.
func (f *fakeSource) change() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeSource) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeSource) add(s Subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s.Name] = &fakeSub{Subscription: s}
	f.change()
}

func (f *fakeSource) remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, name)
	f.change()
}

func (f *fakeSource) setURL(name, url string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[name].URL = url
	f.change()
}

// emit stores n new events for name, with cursors as the log makes them
// (index << 24 | seq), and returns their cursors.
func (f *fakeSource) emit(name string, index uint64, n int) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.subs[name]
	var cs []uint64
	for i := range n {
		c := index<<24 | uint64(i)
		cs = append(cs, c)
		s.events = append(s.events, Event{TaskID: fmt.Sprintf("task-%d-%d", index, i), Pool: "p", Kind: "k",
			Status: "succeeded", Attempt: 1, At: time.Unix(0, int64(c)).UTC(), Cursor: c})
	}
	if f.quiet {
		return cs
	}
	f.change()
	return cs
}

func (f *fakeSource) acked(name string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.subs[name]; ok {
		return s.Acked
	}
	return 0
}

func (f *fakeSource) Webhooks() ([]Subscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listFails > 0 {
		f.listFails--
		return nil, errors.New("state unavailable")
	}
	var out []Subscription
	for _, s := range f.subs {
		out = append(out, s.Subscription)
	}
	return out, nil
}

func (f *fakeSource) Lookup(name string) (Subscription, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.subs[name]
	if !ok {
		return Subscription{}, false
	}
	return s.Subscription, true
}

func (f *fakeSource) Events(name string, after uint64, maxN int) ([]Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.subs[name]
	if !ok {
		return nil, errors.New("no such subscription")
	}
	var out []Event
	for _, e := range s.events {
		if e.Cursor > after && len(out) < maxN {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeSource) Ack(_ context.Context, name string, cursor uint64) error {
	var acc uint64
	if f.accepted != nil {
		acc = f.accepted(name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ackCalls++
	if cursor > acc {
		f.early = append(f.early, fmt.Sprintf("%s: ack of cursor %d, receiver accepted up to %d", name, cursor, acc))
	}
	s, ok := f.subs[name]
	if !ok {
		return errors.New("no such subscription")
	}
	if f.ackFail > 0 {
		f.ackFail--
		if f.ackFail%2 == 0 {
			s.Acked = max(s.Acked, cursor) // applied, but the answer was lost
		}
		return errors.New("outcome unknown: leadership lost")
	}
	if cursor > s.Acked {
		s.Acked = cursor
		s.headSends, s.Stalled = 0, false
		f.change()
	}
	return nil
}

func (f *fakeSource) Sent(_ context.Context, name string, after, upTo uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.subs[name]
	if !ok {
		return errors.New("no such subscription")
	}
	if upTo <= after {
		return nil
	}
	s.sends++
	if after <= s.Acked {
		s.headSends++
	}
	if f.stallAfter > 0 && s.headSends >= f.stallAfter && !s.Stalled {
		s.Stalled = true
		s.stalls++
		f.change()
	}
	return nil
}

// mode is how the receiver answers one request.
type mode int

const (
	answerOK mode = iota
	answer500
	answerTimeout  // answers only after the client gave up
	answerHangup   // closes the connection without an answer
	answerRedirect // 302 to a handler that would accept
	answer400
)

// receiver is the in-test endpoint: it answers by script, checks every
// request, and keeps what it accepted.
type receiver struct {
	t       *testing.T
	secrets map[string]string
	script  func(n int) mode // by request number, from 0
	srv     *httptest.Server

	mu         sync.Mutex
	requests   int
	badSig     []string
	ids        map[string]bool
	dupIDs     int
	accepted   map[string][]uint64 // every cursor answered 2xx, in arrival order
	maxAcc     map[string]uint64
	modes      map[mode]int
	redirected int
}

func newReceiver(t *testing.T, secrets map[string]string, script func(n int) mode) *receiver {
	r := &receiver{t: t, secrets: secrets, script: script, ids: map[string]bool{},
		accepted: map[string][]uint64{}, maxAcc: map[string]uint64{}, modes: map[mode]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", r.serve)
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.redirected++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) url() string { return r.srv.URL + "/hook" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	name := req.Header.Get(HeaderSubscription)
	r.mu.Lock()
	n := r.requests
	r.requests++
	if err := VerifySignature([]byte(r.secrets[name]), body, req.Header.Get(HeaderSignature)); err != nil {
		r.badSig = append(r.badSig, fmt.Sprintf("request %d (%s): %v", n, name, err))
	}
	id := req.Header.Get(HeaderDelivery)
	if id == "" || r.ids[id] {
		r.dupIDs++
	}
	r.ids[id] = true
	m := r.script(n)
	r.modes[m]++
	r.mu.Unlock()
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("request %d: %s with Content-Type %q", n, req.Method, req.Header.Get("Content-Type"))
	}
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil || p.Subscription != name {
		r.t.Errorf("request %d: body %q: %v", n, body, err)
		return
	}
	switch m {
	case answer500:
		http.Error(w, "internal trouble", http.StatusInternalServerError)
	case answer400:
		http.Error(w, "no", http.StatusBadRequest)
	case answerTimeout:
		<-req.Context().Done() // the client gave up
	case answerHangup:
		hj, ok := w.(http.Hijacker)
		if !ok {
			r.t.Errorf("cannot hijack")
			return
		}
		c, _, err := hj.Hijack()
		if err == nil {
			_ = c.Close()
		}
	case answerRedirect:
		http.Redirect(w, req, "/elsewhere", http.StatusFound)
	default:
		r.mu.Lock()
		for _, e := range p.Events {
			r.accepted[name] = append(r.accepted[name], e.Cursor)
			r.maxAcc[name] = max(r.maxAcc[name], e.Cursor)
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}
}

func (r *receiver) acceptedMax(name string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxAcc[name]
}

// firstSeen returns the cursors accepted for name, each once, in the order
// they were first accepted.
func (r *receiver) firstSeen(name string) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[uint64]bool{}
	var out []uint64
	for _, c := range r.accepted[name] {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

func (r *receiver) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.badSig, "every signature verifies")
	require.Zero(t, r.dupIDs, "every attempt has its own delivery id")
}

func testConfig() Config {
	return Config{Timeout: 150 * time.Millisecond, MinBackoff: 2 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Poll: 20 * time.Millisecond, BatchSize: 7}
}

// hostile answers 500s, time-outs, hang-ups, redirects and 400s for most
// requests, and accepts one in four.
func hostile(n int) mode {
	return []mode{answer500, answerTimeout, answerOK, answerHangup, answer500, answerRedirect, answerOK, answer400}[n%8]
}

// TestDeliversEverythingInOrderThroughFailures: a receiver that fails,
// times out, hangs up, redirects and refuses most requests still gets every
// event, in cursor order, each signature verifies, and no cursor is
// acknowledged before the receiver accepted it.
func TestDeliversEverythingInOrderThroughFailures(t *testing.T) {
	src := newFakeSource()
	rcv := newReceiver(t, map[string]string{"a": "secret-a", "b": "secret-b"}, hostile)
	src.accepted = rcv.acceptedMax
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "secret-a"})
	src.add(Subscription{Name: "b", URL: rcv.url(), Secret: "secret-b"})
	var delivered, okAttempts, failedAttempts atomic.Int64
	cfg := testConfig()
	cfg.Delivered = func(_ string, n int) { delivered.Add(int64(n)) }
	cfg.Observe = func(a Attempt) {
		if a.Err == nil {
			okAttempts.Add(1)
		} else {
			failedAttempts.Add(1)
		}
	}
	d := New(cfg, src)
	require.NoError(t, d.Start(context.Background()))
	defer d.Stop()

	var want = map[string][]uint64{}
	for i := range 6 {
		for _, name := range []string{"a", "b"} {
			want[name] = append(want[name], src.emit(name, uint64(10+i), 5)...)
		}
		d.Notify()
	}
	for _, name := range []string{"a", "b"} {
		require.Eventually(t, func() bool { return src.acked(name) == want[name][len(want[name])-1] },
			20*time.Second, 10*time.Millisecond, "subscription %s acknowledged to its last event", name)
		require.Equal(t, want[name], rcv.firstSeen(name), "every event of %s arrived, in cursor order", name)
	}
	d.Stop()
	rcv.check(t)
	src.mu.Lock()
	require.Empty(t, src.early, "nothing acknowledged before a 2xx")
	src.mu.Unlock()
	rcv.mu.Lock()
	for _, m := range []mode{answer500, answerTimeout, answerHangup, answerRedirect, answer400} {
		require.Positive(t, rcv.modes[m], "mode %d exercised", m)
	}
	require.Zero(t, rcv.redirected, "redirects are not followed")
	require.Equal(t, int64(rcv.requests), okAttempts.Load()+failedAttempts.Load(), "every attempt observed")
	rcv.mu.Unlock()
	require.Equal(t, int64(60), delivered.Load(), "each event counted delivered once")
}

// TestResumesFromDurableCursorAfterLeaderChange: a deliverer stopped mid
// way (the term ends) and a new one started (the next leader) together
// deliver every event; the second starts from the durable cursor.
func TestResumesFromDurableCursorAfterLeaderChange(t *testing.T) {
	src := newFakeSource()
	var (
		mu         sync.Mutex
		secondTerm bool
	)
	rcv := newReceiver(t, map[string]string{"a": "k"}, func(n int) mode {
		mu.Lock()
		defer mu.Unlock()
		// The first term gets two batches through (of 7 events), then
		// only 500s; the second one a 500 in three.
		if n%3 == 1 || !secondTerm && n > 2 {
			return answer500
		}
		return answerOK
	})
	src.accepted = rcv.acceptedMax
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "k"})
	all := src.emit("a", 5, 20)

	d1 := New(testConfig(), src)
	require.NoError(t, d1.Start(context.Background()))
	require.Eventually(t, func() bool { return src.acked("a") == all[13] }, 10*time.Second, 5*time.Millisecond)
	d1.Stop()
	mu.Lock()
	secondTerm = true
	mu.Unlock()
	d1.Stop() // idempotent
	mid := src.acked("a")
	require.Less(t, mid, all[len(all)-1], "the first term did not deliver everything")

	all = append(all, src.emit("a", 6, 10)...)
	d2 := New(testConfig(), src)
	require.NoError(t, d2.Start(context.Background()))
	defer d2.Stop()
	require.Eventually(t, func() bool { return src.acked("a") == all[len(all)-1] }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, all, rcv.firstSeen("a"))
	// The second term sent nothing at or below the durable cursor it
	// found: every accepted cursor after the first term's is above it.
	rcv.mu.Lock()
	acc := append([]uint64(nil), rcv.accepted["a"]...)
	rcv.mu.Unlock()
	var second []uint64
	for i, c := range acc {
		if c == mid {
			second = acc[i+1:]
		}
	}
	require.NotEmpty(t, second)
	for _, c := range second {
		require.Greater(t, c, mid)
	}
	rcv.check(t)
	require.ErrorIs(t, d2.Start(context.Background()), ErrStarted)
}

// TestAckFailuresResendNothingLost: when the ack's outcome is unknown the
// deliverer retries it before moving on; a new term resends from the
// durable cursor, so the receiver may see events twice but misses none.
func TestAckFailuresResendNothingLost(t *testing.T) {
	src := newFakeSource()
	rcv := newReceiver(t, map[string]string{"a": "k"}, func(int) mode { return answerOK })
	src.accepted = rcv.acceptedMax
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "k"})
	src.ackFail = 5
	all := src.emit("a", 3, 30)
	d := New(testConfig(), src)
	require.NoError(t, d.Start(context.Background()))
	defer d.Stop()
	require.Eventually(t, func() bool { return src.acked("a") == all[len(all)-1] }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, all, rcv.firstSeen("a"))
	src.mu.Lock()
	require.Greater(t, src.ackCalls, 5)
	require.Empty(t, src.early)
	src.mu.Unlock()
}

// TestStallsAfterFailuresAndRecovers: a receiver down for good has every
// attempt reported as a send, so that the subscription stalls; delivery
// goes on, the events are delivered when it comes back, and the status
// turns healthy.
func TestStallsAfterFailuresAndRecovers(t *testing.T) {
	src := newFakeSource()
	var (
		mu   sync.Mutex
		down = true
	)
	rcv := newReceiver(t, map[string]string{"a": "k"}, func(int) mode {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return answer500
		}
		return answerOK
	})
	src.accepted = rcv.acceptedMax
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "k"})
	src.stallAfter = 4
	all := src.emit("a", 2, 3)
	d := New(testConfig(), src)
	require.NoError(t, d.Start(context.Background()))
	defer d.Stop()
	require.Eventually(t, func() bool {
		st := d.Status()
		return len(st) == 1 && st[0].Failures >= 6 && st[0].Stalled
	}, 10*time.Second, 5*time.Millisecond)
	st := d.Status()[0]
	require.Contains(t, st.LastError, "500 Internal Server Error")
	require.Contains(t, st.LastError, "internal trouble")
	require.Zero(t, src.acked("a"))
	require.Contains(t, st.LastError, "posting 3 events")
	src.mu.Lock()
	require.Equal(t, 1, src.subs["a"].stalls)
	require.GreaterOrEqual(t, src.subs["a"].sends, 6, "every attempt is reported")
	src.mu.Unlock()

	mu.Lock()
	down = false
	mu.Unlock()
	require.Eventually(t, func() bool { return src.acked("a") == all[2] }, 10*time.Second, 5*time.Millisecond)
	st = d.Status()[0]
	require.Zero(t, st.Failures)
	require.Empty(t, st.LastError)
	require.False(t, st.Stalled)
	require.Equal(t, uint64(3), st.Delivered)
	require.Equal(t, all[2], st.Cursor)
	require.False(t, st.LastOK.IsZero())
	require.Equal(t, all, rcv.firstSeen("a"))
}

// TestFollowsSubscriptionChanges: a removed subscription's delivery stops,
// a new address is used from the change on, and a listing failure changes
// nothing.
func TestFollowsSubscriptionChanges(t *testing.T) {
	src := newFakeSource()
	ok := func(int) mode { return answerOK }
	r1 := newReceiver(t, map[string]string{"a": "k"}, ok)
	r2 := newReceiver(t, map[string]string{"a": "k"}, ok)
	src.add(Subscription{Name: "a", URL: r1.url(), Secret: "k"})
	src.add(Subscription{Name: "gone", URL: r1.url(), Secret: "k"})
	src.accepted = func(name string) uint64 { return max(r1.acceptedMax(name), r2.acceptedMax(name)) }
	first := src.emit("a", 1, 2)
	d := New(testConfig(), src)
	require.NoError(t, d.Start(context.Background()))
	defer d.Stop()
	require.Eventually(t, func() bool { return src.acked("a") == first[1] }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return len(d.Status()) == 2 }, 5*time.Second, 5*time.Millisecond)

	src.mu.Lock()
	src.listFails = 3
	src.mu.Unlock()
	src.remove("gone")
	src.setURL("a", r2.url())
	second := src.emit("a", 2, 2)
	d.Notify()
	require.Eventually(t, func() bool { return src.acked("a") == second[1] }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, second, r2.firstSeen("a"))
	require.Equal(t, first, r1.firstSeen("a"))
	st := d.Status()
	require.Len(t, st, 1)
	require.Equal(t, r2.url(), st[0].URL)
}

// TestRequestTimeoutBoundsEachAttempt: a receiver that never answers costs
// each attempt the configured timeout, not more, and the error says so.
func TestRequestTimeoutBoundsEachAttempt(t *testing.T) {
	src := newFakeSource()
	rcv := newReceiver(t, map[string]string{"a": "k"}, func(int) mode { return answerTimeout })
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "k"})
	src.emit("a", 1, 1)
	var (
		mu   sync.Mutex
		took []time.Duration
	)
	cfg := testConfig()
	cfg.Timeout = 100 * time.Millisecond
	cfg.Observe = func(a Attempt) {
		mu.Lock()
		defer mu.Unlock()
		took = append(took, a.Duration)
	}
	d := New(cfg, src)
	require.NoError(t, d.Start(context.Background()))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(took) >= 3
	}, 10*time.Second, 5*time.Millisecond)
	st := d.Status()[0]
	d.Stop()
	require.Contains(t, st.LastError, "no answer within 100ms")
	mu.Lock()
	defer mu.Unlock()
	for _, d := range took {
		require.Less(t, d, 2*time.Second)
	}
	require.Zero(t, src.acked("a"))
}

// TestErrorsHideURLCredentials: the user information and query of a
// webhook URL stay out of errors.
func TestErrorsHideURLCredentials(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	src := newFakeSource()
	src.add(Subscription{Name: "a", URL: "http://user:pw@" + addr + "/hook?token=tok", Secret: "k"})
	src.emit("a", 1, 1)
	d := New(testConfig(), src)
	require.NoError(t, d.Start(context.Background()))
	require.Eventually(t, func() bool { st := d.Status(); return len(st) == 1 && st[0].Failures > 0 }, 5*time.Second, 5*time.Millisecond)
	st := d.Status()[0]
	d.Stop()
	require.NotContains(t, st.LastError, "pw")
	require.NotContains(t, st.LastError, "tok")
	require.Contains(t, st.LastError, addr)
}

// TestStopEndsARequestInFlight: stopping while a request waits for its
// answer returns at once (goleak checks that nothing is left).
func TestStopEndsARequestInFlight(t *testing.T) {
	src := newFakeSource()
	rcv := newReceiver(t, map[string]string{"a": "k"}, func(int) mode { return answerTimeout })
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "k"})
	src.emit("a", 1, 1)
	cfg := testConfig()
	cfg.Timeout = time.Minute
	d := New(cfg, src)
	require.NoError(t, d.Start(context.Background()))
	require.Eventually(t, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return rcv.requests > 0
	}, 5*time.Second, 5*time.Millisecond)
	t0 := time.Now()
	d.Stop()
	require.Less(t, time.Since(t0), 5*time.Second)
	New(cfg, src).Stop() // never started
}

// TestWakesOnChangeAndNotify: with polls far apart, a change of the source
// or a Notify has the waiting subscription send at once.
func TestWakesOnChangeAndNotify(t *testing.T) {
	src := newFakeSource()
	rcv := newReceiver(t, map[string]string{"a": "k"}, func(int) mode { return answerOK })
	src.accepted = rcv.acceptedMax
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "k"})
	cfg := testConfig()
	cfg.Poll = time.Hour
	d := New(cfg, src)
	require.NoError(t, d.Start(context.Background()))
	defer d.Stop()
	require.Eventually(t, func() bool { return len(d.Status()) == 1 }, 5*time.Second, 5*time.Millisecond)

	first := src.emit("a", 1, 2) // signals a change
	require.Eventually(t, func() bool { return src.acked("a") == first[1] }, 5*time.Second, 5*time.Millisecond)

	src.mu.Lock()
	src.quiet = true
	src.mu.Unlock()
	second := src.emit("a", 2, 2)
	d.Notify()
	require.Eventually(t, func() bool { return src.acked("a") == second[1] }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, append(first, second...), rcv.firstSeen("a"))
}

// fakeLoop records what a subscription's delivery reports.
type fakeLoop struct {
	mu                         sync.Mutex
	ok, failed, reset, removed int
	errs                       []string
}

func (l *fakeLoop) Injected() error { return nil }
func (l *fakeLoop) Succeeded()      { l.mu.Lock(); l.ok++; l.mu.Unlock() }
func (l *fakeLoop) Failed(err error) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed++
	l.errs = append(l.errs, err.Error())
	return time.Millisecond
}
func (l *fakeLoop) Reset()  { l.mu.Lock(); l.reset++; l.mu.Unlock() }
func (l *fakeLoop) Remove() { l.mu.Lock(); l.removed++; l.mu.Unlock() }

func (l *fakeLoop) counts() (ok, failed, reset, removed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.failed, l.reset, l.removed
}

// TestReportsToItsLoop: each round's outcome goes to the subscription's
// loop, whose Failed decides the backoff (a MaxBackoff of an hour would
// otherwise stall the test); stopping resets the loop, removing the
// subscription removes it.
func TestReportsToItsLoop(t *testing.T) {
	src := newFakeSource()
	rcv := newReceiver(t, map[string]string{"a": "k", "b": "k"}, func(n int) mode {
		if n < 4 {
			return answer500
		}
		return answerOK
	})
	src.accepted = rcv.acceptedMax
	src.add(Subscription{Name: "a", URL: rcv.url(), Secret: "k"})
	src.add(Subscription{Name: "b", URL: rcv.url(), Secret: "k"})
	all := src.emit("a", 1, 3)
	loops := map[string]*fakeLoop{"a": {}, "b": {}}
	cfg := testConfig()
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	cfg.Loop = func(sub string) Loop { return loops[sub] }
	d := New(cfg, src)
	require.NoError(t, d.Start(context.Background()))
	require.Eventually(t, func() bool { return src.acked("a") == all[2] }, 10*time.Second, 5*time.Millisecond)
	ok, failed, _, _ := loops["a"].counts()
	require.Equal(t, 4, failed)
	require.Positive(t, ok)
	loops["a"].mu.Lock()
	require.Contains(t, loops["a"].errs[0], "answered 500")
	loops["a"].mu.Unlock()

	src.remove("b")
	require.Eventually(t, func() bool { _, _, _, removed := loops["b"].counts(); return removed == 1 }, 5*time.Second, 5*time.Millisecond)
	d.Stop()
	_, _, reset, removed := loops["a"].counts()
	require.Equal(t, 1, reset, "the term's end resets the loop")
	require.Zero(t, removed)
}
