package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cronoq/cronoq/client"
)

// sseKeepAlive is how often an idle event stream sends a comment, so that
// proxies and the browser keep it open.
const sseKeepAlive = 15 * time.Second

// eventJSON is an event as the console's script reads it.
type eventJSON struct {
	TaskID         string `json:"task_id,omitempty"`
	Pool           string `json:"pool,omitempty"`
	Kind           string `json:"kind,omitempty"`
	Status         string `json:"status,omitempty"`
	Attempt        int    `json:"attempt,omitempty"`
	Message        string `json:"message,omitempty"`
	At             string `json:"at,omitempty"`
	Workflow       string `json:"workflow,omitempty"`
	Step           string `json:"step,omitempty"`
	WorkflowStatus string `json:"workflow_status,omitempty"`
	Cursor         uint64 `json:"cursor,omitempty"`
}

// serveEvents streams the status events of the pools named by the pool
// parameters (every pool, and the workflows' events, when none) as
// Server-Sent Events: each a JSON eventJSON with its cursor as the event's
// id; a gap in the stream (events dropped) is an event named "lagged", and
// an error that ends it one named "failed". The parameter task or workflow
// keeps the events of one task or one workflow. The stream starts after
// the cursor of the parameter after, or of the Last-Event-ID header that
// a browser sends when it reconnects (with the events after it that the
// node still holds), else with the events from now on. It is the SDK's
// event subscription of the node's own API, with the caller's token, and
// lasts until the browser leaves or the node stops.
func (c *Console) serveEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after uint64
	for _, s := range []string{q.Get("after"), r.Header.Get("Last-Event-ID")} {
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad cursor %q: a number", s), http.StatusBadRequest)
			return
		}
		after = max(after, n)
	}
	task, workflow := q.Get("task"), q.Get("workflow")
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported on this connection", http.StatusInternalServerError)
		return
	}
	cl, err := c.clientFor(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	ctx := r.Context()
	events, err := cl.EventsAfter(ctx, after, q["pool"]...)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// Tell the browser it is connected, and how soon to reconnect.
	_, _ = fmt.Fprint(w, "retry: 1000\nevent: ready\ndata: {}\n\n")
	flusher.Flush()

	tick := time.NewTicker(sseKeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case ev, ok := <-events:
			if !ok {
				return
			}
			var werr error
			switch {
			case ev.Err != nil:
				b, _ := json.Marshal(map[string]string{"error": ev.Err.Error()})
				_, _ = fmt.Fprintf(w, "event: failed\ndata: %s\n\n", b)
				flusher.Flush()
				return
			case ev.Lagged:
				_, werr = fmt.Fprint(w, "event: lagged\ndata: {}\n\n")
			case task != "" && ev.TaskID != task, workflow != "" && ev.Workflow != workflow:
				continue
			default:
				b, err := json.Marshal(toEventJSON(ev))
				if err != nil {
					c.log.Error("encoding an event for the console", "error", err)
					return
				}
				_, werr = fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ev.Cursor, b)
			}
			if werr != nil {
				return
			}
		}
		flusher.Flush()
	}
}

func toEventJSON(ev client.Event) eventJSON {
	j := eventJSON{
		TaskID: ev.TaskID, Pool: ev.Pool, Kind: ev.Kind, Status: ev.Status, Attempt: ev.Attempt,
		Message: ev.Message, Workflow: ev.Workflow, Step: ev.Step, WorkflowStatus: ev.WorkflowStatus, Cursor: ev.Cursor,
	}
	if !ev.At.IsZero() {
		j.At = ev.At.UTC().Format(time.RFC3339Nano)
	}
	return j
}
