package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/cronoq/cronoq/client"
)

func init() {
	register("retry", command{Summary: "Retry a task that ended failed, expired or cancelled", Run: runRetry})
}

func runRetry(ctx context.Context, s stdio, args []string) error {
	c := newCmd("retry", "cronoq retry ID | cronoq retry -key KEY", `
Put a task that ended failed, expired or cancelled back in the queue: the
same id and key, a new attempt budget (its attempts are counted from the
retry; "attempt" goes on counting every attempt started, and "attempts"
keeps the history of the earlier ones), its output cleared. A deadline that
has passed is dropped; one still ahead is kept. An ordering lane the task
blocked runs it first, then the tasks queued behind it.

Refused: a live or succeeded task; a member of a workflow (its workflow has
ended with it); an external task; a task whose dependencies did not succeed
(retry them first); a task whose end released a task that depends on it; a
cluster with a server that does not know retries yet (upgrade every server
first). The tasks that depend on it and still wait for another dependency
wait for its new end; those its end cancelled stay cancelled. A retry whose answer was lost is not repeated:
'cronoq status' tells whether the task runs again.

JSON output: the task object.`)
	cf := c.clientFlags()
	var key string
	c.fs.StringVar(&key, "key", "", "find the task by its idempotency `KEY`")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	// A refusal of the task (a workflow member, an external task, a
	// dependency) names it: say just that.
	id, ref, err := taskTarget(c, key)
	if err != nil {
		return err
	}
	t, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (*client.Task, error) {
		return cl.RetryTask(ctx, ref)
	})
	if err != nil {
		var ae *client.APIError
		if errors.Is(err, client.ErrNotRetryable) && errors.As(err, &ae) {
			return errors.New(ae.Message)
		}
		return notFound(err, "task", id, key)
	}
	if t == nil {
		return fmt.Errorf("retrying task %s: the node answered no task", ref)
	}
	return showTask(s, cf, t)
}
