package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
)

// withKeys gives every spec without a key a random one and converts them,
// with the trace context of ctx's span in the tags of those without one.
// generated[i] reports whether spec i got its key here.
func withKeys(ctx context.Context, specs []TaskSpec) ([]*cronoqv1.TaskSpec, []string, []bool, error) {
	out := make([]*cronoqv1.TaskSpec, len(specs))
	keys := make([]string, len(specs))
	generated := make([]bool, len(specs))
	for i, s := range specs {
		if s.Key == "" {
			s.Key = newKey()
			generated[i] = true
		}
		p, err := specToProto(s)
		if err != nil {
			if len(specs) > 1 {
				return nil, nil, nil, fmt.Errorf("spec %d: %w", i, err)
			}
			return nil, nil, nil, err
		}
		injectTrace(ctx, p)
		out[i], keys[i] = p, s.Key
	}
	return out, keys, generated, nil
}

// Submit submits one task. A spec without a key gets a random one, and the
// submit is retried with that same key after an unknown outcome, a lost
// connection, or a node that is not (or has no) leader, moving through the
// addresses with backoff until ctx ends. Invalid, overloaded and not-found
// answers are returned at once. When ctx carries an OpenTelemetry span and
// the spec's tags have no traceparent, the span's context is added to them
// (TagTraceparent, TagTracestate): the task continues the caller's trace.
//
// Calls made while many others are in flight go out together (see
// WithSubmitConcurrency).
func (c *Client) Submit(ctx context.Context, spec TaskSpec) (Submitted, error) {
	const what = "submitting task"
	specs, keys, gen, err := withKeys(ctx, []TaskSpec{spec})
	if err != nil {
		return Submitted{}, fmt.Errorf("%s: %w", what, err)
	}
	if c.coalesce != nil {
		return c.coalesce.submit(ctx, what, specs[0], keys[0], gen[0])
	}
	return c.submitAlone(ctx, what, specs[0], keys[0], gen[0])
}

// submitAlone sends one Submit call.
func (c *Client) submitAlone(ctx context.Context, what string, spec *cronoqv1.TaskSpec, key string, gen bool) (Submitted, error) {
	resp, err := unary(ctx, c, what, idempotent, &cronoqv1.SubmitRequest{Spec: spec},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitRequest]) (*connect.Response[cronoqv1.SubmitResponse], error) {
			return ep.tasks.Submit
		})
	if err != nil {
		return Submitted{}, err
	}
	if resp.GetResult().GetId() == "" {
		return Submitted{}, fmt.Errorf("%s: node answered without a task id", what)
	}
	return submittedFromProto(resp.GetResult(), key, gen), nil
}

// SubmitBatch submits specs atomically: all are admitted or none, with one
// error for the whole. Keys and retries are as for Submit.
func (c *Client) SubmitBatch(ctx context.Context, specs []TaskSpec) ([]Submitted, error) {
	const what = "submitting batch"
	if len(specs) == 0 {
		return nil, nil
	}
	ps, keys, gen, err := withKeys(ctx, specs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := unary(ctx, c, what, idempotent, &cronoqv1.SubmitBatchRequest{Specs: ps},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.SubmitBatchRequest]) (*connect.Response[cronoqv1.SubmitBatchResponse], error) {
			return ep.tasks.SubmitBatch
		})
	if err != nil {
		return nil, err
	}
	if len(resp.GetResults()) != len(specs) {
		return nil, fmt.Errorf("%s: node answered %d results for %d specs", what, len(resp.GetResults()), len(specs))
	}
	out := make([]Submitted, len(specs))
	for i, r := range resp.GetResults() {
		out[i] = submittedFromProto(r, keys[i], gen[i])
	}
	return out, nil
}

// EnqueueMany submits specs each on its own: results and per-item errors come
// back in order (errs[i] is nil when spec i was admitted). The returned error
// is for the call as a whole. Keys and retries are as for Submit.
func (c *Client) EnqueueMany(ctx context.Context, specs []TaskSpec) ([]Submitted, []error, error) {
	const what = "enqueueing tasks"
	if len(specs) == 0 {
		return nil, nil, nil
	}
	ps, keys, gen, err := withKeys(ctx, specs)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := unary(ctx, c, what, idempotent, &cronoqv1.EnqueueManyRequest{Specs: ps},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.EnqueueManyRequest]) (*connect.Response[cronoqv1.EnqueueManyResponse], error) {
			return ep.tasks.EnqueueMany
		})
	if err != nil {
		return nil, nil, err
	}
	if len(resp.GetResults()) != len(specs) {
		return nil, nil, fmt.Errorf("%s: node answered %d results for %d specs", what, len(resp.GetResults()), len(specs))
	}
	subs := make([]Submitted, len(specs))
	errs := make([]error, len(specs))
	for i, r := range resp.GetResults() {
		if e := itemError(r.GetCode(), r.GetError()); e != nil {
			subs[i] = Submitted{Key: keys[i]}
			errs[i] = fmt.Errorf("spec %d: %w", i, e)
			continue
		}
		subs[i] = submittedFromProto(r.GetSubmitted(), keys[i], gen[i])
	}
	return subs, errs, nil
}

func (c *Client) get(ctx context.Context, what string, ref *cronoqv1.TaskRef, stale bool) (*Task, ReadMeta, error) {
	resp, err := unaryTo(ctx, c, what, read, stale, &cronoqv1.GetRequest{Ref: ref, Stale: stale},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.GetRequest]) (*connect.Response[cronoqv1.GetResponse], error) {
			return ep.tasks.Get
		})
	if err != nil {
		return nil, ReadMeta{}, err
	}
	if resp.GetTask() == nil {
		return nil, ReadMeta{}, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return taskFromProto(resp.GetTask()), readMetaFromProto(resp.GetMeta()), nil
}

// Get reads a task by id, linearizably (through the leader).
func (c *Client) Get(ctx context.Context, id string) (*Task, error) {
	t, _, err := c.get(ctx, "getting task "+id, &cronoqv1.TaskRef{Id: id}, false)
	return t, err
}

// GetByKey reads a task by idempotency key, linearizably.
func (c *Client) GetByKey(ctx context.Context, key string) (*Task, error) {
	t, _, err := c.get(ctx, "getting task by key "+key, &cronoqv1.TaskRef{Key: key}, false)
	return t, err
}

// GetStale reads a task by id from whichever node answers, without asking
// the leader; meta tells how fresh that node's replica is.
func (c *Client) GetStale(ctx context.Context, id string) (*Task, ReadMeta, error) {
	return c.get(ctx, "getting task "+id, &cronoqv1.TaskRef{Id: id}, true)
}

// Wait blocks until the task ends and returns it. It holds a Wait RPC open
// on a node and re-issues it after lost connections, leader changes and
// node-side timeouts, until ctx ends.
func (c *Client) Wait(ctx context.Context, id string) (*Task, error) {
	return c.wait(ctx, "waiting for task "+id, &cronoqv1.TaskRef{Id: id})
}

// WaitKey is Wait by idempotency key.
func (c *Client) WaitKey(ctx context.Context, key string) (*Task, error) {
	return c.wait(ctx, "waiting for task by key "+key, &cronoqv1.TaskRef{Key: key})
}

func (c *Client) wait(ctx context.Context, what string, ref *cronoqv1.TaskRef) (*Task, error) {
	for {
		poll := c.opts.waitPoll
		if dl, ok := ctx.Deadline(); ok {
			poll = max(min(poll, time.Until(dl)), time.Millisecond)
		}
		req := &cronoqv1.WaitRequest{Ref: ref, Timeout: durationToProto(poll)}
		var got *cronoqv1.Task
		start := time.Now()
		err := c.do(ctx, what, read, false, poll+c.opts.timeout, func(actx context.Context, ep *endpoint) (string, error) {
			resp, err := ep.tasks.Wait(actx, connect.NewRequest(req))
			if err != nil {
				return "", err
			}
			got = resp.Msg.GetTask()
			return resp.Header().Get(apierr.HeaderLeaderAddr), nil
		})
		if err != nil {
			return nil, waitError(ctx, what, err)
		}
		if t := taskFromProto(got); t != nil && t.Terminal() {
			return t, nil
		}
		// The node's hold ended before the task did: ask again. A node that
		// answers early is not asked in a tight loop.
		if time.Since(start) < poll/2 {
			if err := sleep(ctx, c.opts.backoffMin); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
}

func (c *Client) cancel(ctx context.Context, what string, ref *cronoqv1.TaskRef) (bool, error) {
	res, err := c.cancelTask(ctx, what, ref)
	return res.Cancelled, err
}

func (c *Client) cancelTask(ctx context.Context, what string, ref *cronoqv1.TaskRef) (CancelResult, error) {
	resp, err := unary(ctx, c, what, idempotent, &cronoqv1.CancelRequest{Ref: ref},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CancelRequest]) (*connect.Response[cronoqv1.CancelResponse], error) {
			return ep.tasks.Cancel
		})
	if err != nil {
		return CancelResult{}, err
	}
	return CancelResult{ID: resp.GetId(), Cancelled: resp.GetCancelled(), LastLease: resp.GetLastLease()}, nil
}

// CancelResult is what CancelTask answers.
type CancelResult struct {
	// ID is the task's id.
	ID string
	// Cancelled is true when this call cancelled the task, false when it
	// had already ended.
	Cancelled bool
	// LastLease is the highest lease ever granted to the task when the
	// cancel took effect (0: it never ran): no later lease is granted.
	LastLease uint64
}

// CancelTask is Cancel answering also the task's last lease.
func (c *Client) CancelTask(ctx context.Context, id string) (CancelResult, error) {
	return c.cancelTask(ctx, "cancelling task "+id, &cronoqv1.TaskRef{Id: id})
}

// Cancel cancels a task by id. cancelled is true when this call cancelled it,
// false when it had already ended. Cancel is idempotent and retried like a
// submit; after a retry, cancelled may be false although an earlier attempt
// of this same call did the cancelling.
func (c *Client) Cancel(ctx context.Context, id string) (cancelled bool, err error) {
	return c.cancel(ctx, "cancelling task "+id, &cronoqv1.TaskRef{Id: id})
}

// CancelKey cancels a task by idempotency key.
func (c *Client) CancelKey(ctx context.Context, key string) (cancelled bool, err error) {
	return c.cancel(ctx, "cancelling task by key "+key, &cronoqv1.TaskRef{Key: key})
}

// CancelTaskKey is CancelKey answering also the task's id and last lease.
func (c *Client) CancelTaskKey(ctx context.Context, key string) (CancelResult, error) {
	return c.cancelTask(ctx, "cancelling task by key "+key, &cronoqv1.TaskRef{Key: key})
}

// Delete removes an ended task now, rather than at the end of its
// retention: its record, its output and its key go, and an ordering lane it
// blocked (see Task.BlocksLane) runs on. It returns the task's id and
// whether this call deleted it. A live task is refused with an
// *InvalidError naming it (cancel it first), as are a member of a workflow
// (it goes with its workflow) and a task a live task depends on; an
// unknown task is ErrNotFound.
//
// Delete is idempotent and retried like a cancel: when an earlier attempt
// of this same call may have deleted the task and a later one finds it
// gone, deleted is false and there is no error (id is then ref.ID, "" for
// a ref by key).
func (c *Client) Delete(ctx context.Context, ref TaskRef) (id string, deleted bool, err error) {
	what := "deleting task " + ref.ID
	if ref.ID == "" {
		what = "deleting task by key " + ref.Key
	}
	req := &cronoqv1.DeleteRequest{Ref: &cronoqv1.TaskRef{Id: ref.ID, Key: ref.Key}}
	var resp *cronoqv1.DeleteResponse
	unsure := false // an attempt may have deleted it
	err = c.do(ctx, what, idempotent, false, c.opts.timeout, func(actx context.Context, ep *endpoint) (string, error) {
		r, err := ep.tasks.Delete(actx, connect.NewRequest(req))
		if err != nil {
			if classifyErr(decodeError(err)) == uncertain {
				unsure = true
			}
			return "", err
		}
		resp = r.Msg
		return r.Header().Get(apierr.HeaderLeaderAddr), nil
	})
	if err != nil {
		if unsure && errors.Is(err, ErrNotFound) {
			return ref.ID, false, nil
		}
		return "", false, err
	}
	return resp.GetId(), resp.GetDeleted(), nil
}

// RetryTask puts a task that ended failed, expired or cancelled back in the
// queue, and returns it as stored then: the same id and key, a new attempt
// budget (its attempts are counted from here; the ones before stay in
// Attempts and in its attempt number), its output and end cleared, a
// deadline that had passed dropped. An ordering lane it blocked runs it
// first; the tasks that depend on it and still wait for another dependency
// wait for its new end. Refused: a live or succeeded task
// (ErrNotRetryable); a member of a workflow, an external task, a task whose
// dependencies did not succeed, a task whose end released a task that
// depends on it (an *InvalidError naming it); an unknown task
// (ErrNotFound); a cluster with a server older than the release that
// brought retries.
//
// A retry is not repeated after an attempt whose outcome is unknown (a
// lost answer): the error then wraps ErrOutcomeUnknown, and a Get tells
// whether the task runs again.
func (c *Client) RetryTask(ctx context.Context, ref TaskRef) (*Task, error) {
	what := "retrying task " + ref.String()
	resp, err := unary(ctx, c, what, once, &cronoqv1.RetryRequest{Ref: &cronoqv1.TaskRef{Id: ref.ID, Key: ref.Key}},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.RetryRequest]) (*connect.Response[cronoqv1.RetryResponse], error) {
			return ep.tasks.Retry
		})
	if err != nil {
		return nil, err
	}
	return taskFromProto(resp.GetTask()), nil
}

// CancelMany cancels the live tasks f selects (as Cancel does each: a
// running attempt's worker is told to stop), in batches of a bounded size
// committed one after the other, and returns how many it cancelled. The
// tasks are those that match when the call reaches the leader; a task
// that stops matching before its batch is left alone. It is repeated like
// Cancel: after a lost answer the count is that of the last attempt.
func (c *Client) CancelMany(ctx context.Context, f CancelFilter) (int64, error) {
	const what = "cancelling tasks by filter"
	req, err := cancelFilterToProto(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := unary(ctx, c, what, idempotent, req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CancelManyRequest]) (*connect.Response[cronoqv1.CancelManyResponse], error) {
			return ep.tasks.CancelMany
		})
	if err != nil {
		return 0, err
	}
	return resp.GetCancelled(), nil
}

// List lists tasks filtered by opt, ordered by id (decreasing with
// ListOptions.NewestFirst). next is the cursor of the following page (pass
// it as ListOptions.After, with the same filters and order), "" after the
// last page.
func (c *Client) List(ctx context.Context, opt ListOptions) ([]*Task, string, error) {
	const what = "listing tasks"
	req, err := listToProto(opt)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	resp, err := unaryTo(ctx, c, what, read, opt.Stale, req,
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.ListRequest]) (*connect.Response[cronoqv1.ListResponse], error) {
			return ep.tasks.List
		})
	if err != nil {
		return nil, "", err
	}
	out := make([]*Task, 0, len(resp.GetTasks()))
	for _, t := range resp.GetTasks() {
		out = append(out, taskFromProto(t))
	}
	return out, resp.GetNext(), nil
}

// Counts returns the number of tasks per pool and status.
func (c *Client) Counts(ctx context.Context) (map[string]map[string]int64, error) {
	resp, err := unary(ctx, c, "counting tasks", read, &cronoqv1.CountsRequest{},
		func(ep *endpoint) func(context.Context, *connect.Request[cronoqv1.CountsRequest]) (*connect.Response[cronoqv1.CountsResponse], error) {
			return ep.tasks.Counts
		})
	if err != nil {
		return nil, err
	}
	return countsFromProto(resp.GetPools()), nil
}

// eventsBuffer is the channel capacity of Events.
const eventsBuffer = 64

// Events subscribes to status events of the given pools (all pools when
// none). Any node serves them, from its own replica, in log order, each
// once it is durable. The channel closes when ctx ends or the Client is
// closed. A lost stream is re-established through the addresses with
// backoff, resuming after the last event received (Event.Cursor). An event
// with Lagged set marks each gap: the node dropped events for a slow
// subscriber, or the stream was re-established on a node that no longer
// held (or never had) the events since. If the subscription fails in a
// way retrying cannot fix, a last event carries Err before the channel
// closes.
func (c *Client) Events(ctx context.Context, pools ...string) (<-chan Event, error) {
	return c.EventsAfter(ctx, 0, pools...)
}

// EventsAfter is Events starting after cursor (an Event.Cursor): with the
// events after it that the answering node still holds, after a Lagged
// marker when it no longer holds them all (a node holds a bounded history
// of the events it applied since it started), then the new ones. A cursor
// of 0 starts with the events applied from now on, as Events does.
func (c *Client) EventsAfter(ctx context.Context, cursor uint64, pools ...string) (<-chan Event, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("subscribing to events: %w", ErrClosed)
	}
	c.wg.Add(1)
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.base, cancel)
	ch := make(chan Event, eventsBuffer)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		defer cancel()
		defer stop()
		c.runEvents(ctx, cursor, append([]string(nil), pools...), ch)
	}()
	return ch, nil
}

// runEvents feeds ch, from the events after cursor, until ctx ends or a
// final error.
func (c *Client) runEvents(ctx context.Context, cursor uint64, pools []string, ch chan<- Event) {
	emit := func(ev Event) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// cursor is that of the last event delivered (or the one to start
	// after): a new stream resumes after it.
	var (
		gapMarked bool // a gap was marked and no event delivered since
		// unsure: the stream was lost after cursor, and the next one may
		// not resume after it (a node of an older release does not):
		// a gap is marked unless it does.
		unsure bool
	)
	lag := func() bool {
		if gapMarked {
			return true
		}
		gapMarked = true
		return emit(Event{Lagged: true})
	}
	for n := 0; ; {
		addr, err := c.pick(true)
		if err != nil {
			return
		}
		received := false
		stream, err := c.endpointFor(addr).tasks.Events(ctx, connect.NewRequest(&cronoqv1.EventsRequest{Pools: pools, AfterCursor: cursor}))
		if err == nil {
			for stream.Receive() {
				if !received {
					c.noteAttempt(addr, nil)
				}
				n, received = 0, true
				c.succeeded(addr)
				ev := eventFromProto(stream.Msg())
				if unsure && !ev.Lagged && ev.Cursor == 0 && !lag() {
					_ = stream.Close()
					return
				}
				unsure = false
				if ev.Lagged {
					if !lag() {
						_ = stream.Close()
						return
					}
					continue
				}
				gapMarked = false
				cursor = max(cursor, ev.Cursor)
				if !emit(ev) {
					_ = stream.Close()
					return
				}
			}
			err = stream.Err()
			_ = stream.Close()
			if err == nil {
				err = connect.NewError(connect.CodeUnavailable, errors.New("event stream ended"))
			}
		}
		if ctx.Err() != nil {
			return
		}
		err = decodeError(err)
		if !received {
			c.noteAttempt(addr, err)
		}
		if !resubscribable(err) {
			emit(Event{Err: fmt.Errorf("subscribing to events: %w", err)})
			return
		}
		// A node that refused the subscription had not started it; any
		// other end may have lost events: the next stream resumes after
		// the last one received, if any, else they are lost.
		if received || classify(ctx, err) != notExecuted {
			if cursor == 0 {
				if !lag() {
					return
				}
			} else {
				unsure = true
			}
		}
		hint := ""
		var ae *APIError
		if errors.As(err, &ae) && ae.Kind == apierr.KindNotLeader {
			hint = ae.LeaderAddr
		}
		c.failed(addr, hint, false)
		c.log.Debug("event stream lost, resubscribing", "addr", addr, "after_cursor", cursor, "error", err)
		n++
		wait, _ := c.checkReach(c.backoff(n), false)
		if sleep(ctx, wait) != nil {
			return
		}
	}
}

// deadlineSlack is how early a node may give up on a call before the
// caller's own deadline passes: the deadline travels in whole milliseconds
// and the two clocks fire independently.
const deadlineSlack = 100 * time.Millisecond

// waitError returns err, unless it is the node giving up because the
// caller's deadline is (all but) reached: then it waits for that deadline
// and returns the caller's own context error, so a wait that ran out of
// time always reports context.DeadlineExceeded.
func waitError(ctx context.Context, what string, err error) error {
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > deadlineSlack {
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeCanceled, connect.CodeDeadlineExceeded:
	default:
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	<-ctx.Done()
	return fmt.Errorf("%s: %w", what, ctx.Err())
}
