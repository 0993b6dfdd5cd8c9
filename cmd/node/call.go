package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/client"
)

// The client commands talk to the cluster through these: connect with the
// client flags, bound each call by -rpc-timeout, and explain errors for
// people.

// How soon a command gives up when no address accepts a connection, and
// how soon a command that waits says so (then again every noticeRepeat).
const (
	failFast     = time.Second
	noticeAfter  = 2 * time.Second
	noticeRepeat = 30 * time.Second
)

// waiting marks the command as one that waits (for a task, events or
// work): when no address accepts a connection it says so on s.Stderr after
// noticeAfter and keeps trying, where other commands fail after failFast.
func (cf *clientFlags) waiting(s stdio) { cf.waits, cf.stderr = true, s.Stderr }

// connect validates the client flags and returns a Client for them.
func (cf *clientFlags) connect(logger hclog.Logger) (*client.Client, error) {
	addrs, err := cf.validate()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{}
	switch {
	case !cf.waits:
		opts = append(opts, client.WithFailFast(failFast))
	case cf.stderr != nil:
		w := cf.stderr
		opts = append(opts, client.WithUnreachableNotice(noticeAfter, noticeRepeat, func(ue *client.UnreachableError) {
			fmt.Fprintf(w, "cronoq: %v; still trying (Ctrl-C to stop)\n", ue)
		}))
	}
	if cf.token != "" {
		opts = append(opts, client.WithToken(cf.token))
	}
	if logger != nil {
		opts = append(opts, client.WithLogger(logger))
	}
	tlsCfg, err := cf.tls.config()
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, client.WithTLS(*tlsCfg))
	}
	cl, err := client.New(addrs, opts...)
	if err != nil {
		return nil, usagef("invalid -addr: %v", err)
	}
	return cl, nil
}

// call runs fn with a context bounded by -rpc-timeout and explains its
// error (see callError).
func call[T any](ctx context.Context, c *cmd, cf *clientFlags, fn func(ctx context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, cf.rpcTimeout)
	defer cancel()
	v, err := fn(cctx)
	if err != nil {
		return v, cf.callError(ctx, c, err)
	}
	return v, nil
}

// dial connects, runs fn as call does, and closes the connection: the
// whole of a command that makes one call.
func dial[T any](ctx context.Context, c *cmd, cf *clientFlags, fn func(ctx context.Context, cl *client.Client) (T, error)) (T, error) {
	cl, err := cf.connect(nil)
	if err != nil {
		var zero T
		return zero, err
	}
	defer cl.Close()
	return call(ctx, c, cf, func(ctx context.Context) (T, error) { return fn(ctx, cl) })
}

// callError explains an error of the SDK for people: refused input is a
// usage error naming the command's flag for the field when it has one, an
// expired -rpc-timeout and an interrupt are named as such.
func (cf *clientFlags) callError(parent context.Context, c *cmd, err error) error {
	var inv *client.InvalidError
	switch {
	case errors.As(err, &inv):
		if c != nil && c.explain != nil {
			if msg := c.explain(inv.Field, inv.Reason); msg != "" {
				return &usageError{msg: msg}
			}
		}
		if name := flagFor(c, inv.Field); name != "" {
			return &usageError{msg: fmt.Sprintf("invalid -%s: %s", name, inv.Reason)}
		}
		return &usageError{msg: err.Error()}
	case parent.Err() != nil:
		return fmt.Errorf("interrupted: %w", err)
	case errors.Is(err, client.ErrNoLeader):
		// An earlier attempt may have taken effect before the leader was
		// lost: say so, or a caller would take the call as not done.
		unknown := ""
		if errors.Is(err, client.ErrOutcomeUnknown) {
			unknown = ": outcome unknown, an earlier attempt may have taken effect"
		}
		return fmt.Errorf("%w%s: the cluster has no leader: too few of its servers can reach each other "+
			"to elect one (see 'cronoq health' and 'cronoq members')%s", noLeaderError{err}, unknown, gaveUpAfter(err, cf.rpcTimeout))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer within -rpc-timeout %s: %w", cf.rpcTimeout, err)
	}
	return err
}

// flagFor is the flag of c that sets the request field named by the
// cluster ("run_at", "task.pool", "specs[0].kind", "depends_on[1].key"), or
// "" when none does.
func flagFor(c *cmd, field string) string {
	if c == nil || field == "" {
		return ""
	}
	// depends_on[i].id and depends_on[i].key are the i-th -depends-on.
	if i := strings.Index(field, "depends_on["); i >= 0 {
		field = field[:i] + "depends_on"
	}
	if i := strings.LastIndexByte(field, '.'); i >= 0 && !strings.Contains(field[i:], "[") {
		field = field[i+1:]
	}
	name := strings.ReplaceAll(field, "_", "-")
	if c.fs.Lookup(name) == nil {
		return ""
	}
	return name
}

// noLeaderError is a call that failed for want of a leader; its text is
// what was being done.
type noLeaderError struct{ err error }

func (e noLeaderError) Error() string {
	what, _, _ := strings.Cut(e.err.Error(), ": ")
	return what
}

func (e noLeaderError) Unwrap() error { return e.err }

// gaveUpAfter says that the call gave up after -rpc-timeout, when it did.
func gaveUpAfter(err error, rpcTimeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("; gave up after -rpc-timeout %s", rpcTimeout)
	}
	return ""
}
