package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"
)

// ErrUnreachable: no address of the Client accepted a connection (refused,
// not resolvable, or no route) for the WithFailFast period. The error is an
// *UnreachableError naming each address and why.
var ErrUnreachable = errors.New("no node reachable")

// UnreachableError says that none of the Client's addresses accepted a
// connection. errors.Is(err, ErrUnreachable) holds for it.
type UnreachableError struct {
	// Addrs are the addresses tried, in the Client's order; Errs the dial
	// error of each (same index).
	Addrs []string
	Errs  []error
	// For is how long no address has accepted a connection.
	For time.Duration
}

func (e *UnreachableError) Error() string {
	parts := make([]string, len(e.Addrs))
	for i, a := range e.Addrs {
		parts[i] = a + ": " + DescribeDialError(e.Errs[i])
	}
	return "no node reachable at " + strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrUnreachable) true.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// WithFailFast makes calls fail with an *UnreachableError once no address
// has accepted a connection for d (every address refused it, did not
// resolve, or refused the TLS session), instead of retrying until their
// ctx ends. An answer of any
// node, even an error, starts the period again. Default: off.
func WithFailFast(d time.Duration) Option { return func(o *options) { o.failFast = d } }

// WithUnreachableNotice calls fn when no address has accepted a
// connection for d, and again every repeat (0: once) while that lasts; the
// calls go on retrying. fn runs on the goroutine of a call, and must not
// block. It lets a program that waits say why nothing happens.
func WithUnreachableNotice(d, repeat time.Duration, fn func(*UnreachableError)) Option {
	return func(o *options) { o.noticeAfter, o.noticeRepeat, o.notice = d, repeat, fn }
}

// reachability is what the Client knows of its addresses' connectivity,
// guarded by Client.mu.
type reachability struct {
	down      map[string]error // address -> its last dial error, since the last answer
	since     time.Time        // first dial error since the last answer
	noticedAt time.Time        // last notice of this outage (zero: none yet)
}

// isDialError reports whether err is a failure to connect at all: no
// connection, or a TLS session that either side refused (a remote alert
// such as a missing client certificate, or a node certificate this client
// does not trust). The request never left, and trying the same address
// again changes nothing until its address or certificates do.
func isDialError(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && (oe.Op == "dial" || oe.Op == "remote error") {
		return true
	}
	var cve *tls.CertificateVerificationError
	return errors.As(err, &cve)
}

// DescribeDialError words a failure to connect for people: "connection
// refused", "cannot resolve host example.invalid: no such host", ... Any
// other error is returned as its text.
func DescribeDialError(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		why := dnsErr.Err
		if dnsErr.IsNotFound {
			why = "no such host"
		}
		return fmt.Sprintf("cannot resolve host %s: %s", dnsErr.Name, why)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (nothing listens there)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "connection timed out"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// noteAttempt records what an attempt against addr says of connectivity:
// a dial error marks addr down, an answer (nil or an API error) marks the
// cluster reachable. Other failures say nothing.
func (c *Client) noteAttempt(addr string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil || answered(err):
		c.reach = reachability{}
	case isDialError(err):
		if c.reach.down == nil {
			c.reach.down = make(map[string]error)
			c.reach.since = time.Now()
		}
		c.reach.down[addr] = err
	}
}

// outageLocked returns the error describing that no address of the list
// accepts connections, and since when; nil when some address has not
// failed to connect since the last answer. c.mu is held.
func (c *Client) outageLocked() (*UnreachableError, time.Time) {
	if len(c.reach.down) == 0 {
		return nil, time.Time{}
	}
	ue := &UnreachableError{For: time.Since(c.reach.since)}
	for _, a := range c.addrs {
		err, ok := c.reach.down[a]
		if !ok {
			return nil, time.Time{}
		}
		ue.Addrs = append(ue.Addrs, a)
		ue.Errs = append(ue.Errs, err)
	}
	return ue, c.reach.since
}

// checkReach is called by a retry loop after a failed attempt, before it
// waits wait: it returns an *UnreachableError when the call should fail
// fast, else the wait to use (shortened so that the fail-fast period is
// checked when it ends), and gives the notice when it is due.
func (c *Client) checkReach(wait time.Duration, failFast bool) (time.Duration, error) {
	c.mu.Lock()
	ue, since := c.outageLocked()
	var notify *UnreachableError
	if ue != nil && c.opts.notice != nil && ue.For >= c.opts.noticeAfter {
		last := c.reach.noticedAt
		if last.IsZero() || (c.opts.noticeRepeat > 0 && time.Since(last) >= c.opts.noticeRepeat) {
			c.reach.noticedAt = time.Now()
			notify = ue
		}
	}
	noticed := !c.reach.noticedAt.IsZero()
	c.mu.Unlock()
	if notify != nil {
		c.opts.notice(notify)
	}
	if ue == nil {
		return wait, nil
	}
	if failFast && c.opts.failFast > 0 {
		if ue.For >= c.opts.failFast {
			return 0, ue
		}
		wait = min(wait, time.Until(since.Add(c.opts.failFast)))
	}
	if c.opts.notice != nil && !noticed {
		wait = max(min(wait, time.Until(since.Add(c.opts.noticeAfter))), 0)
	}
	return wait, nil
}
