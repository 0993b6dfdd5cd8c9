package main

import (
	"encoding/base64"
	"unicode/utf8"

	"github.com/cronoq/cronoq/client"
)

// The command line's face of a task template, shared by submit and
// recurring add: its flags, and its fields in the JSON of tasks and
// schedules.

// templateFlags are the flags describing a task template.
type templateFlags struct {
	tpl     client.Template
	payload string // as given: TEXT, @FILE or @-
}

func (c *cmd) templateFlags() *templateFlags {
	tf := &templateFlags{tpl: client.Template{Priority: client.PriorityNormal, Labels: map[string]string{}, Tags: map[string]string{}}}
	t := &tf.tpl
	c.fs.StringVar(&t.Pool, "pool", "", "`POOL` of the task (required)")
	c.fs.StringVar(&t.Kind, "kind", "", "`KIND` of the task, as workers know it (required)")
	c.fs.Var(enumValue{&t.Priority, []string{client.PriorityHigh, client.PriorityNormal, client.PriorityLow}},
		"priority", "priority `CLASS`: high, normal or low")
	c.fs.StringVar(&tf.payload, "payload", "", "payload: `TEXT` as is, @FILE the file's bytes, @- the standard input")
	c.fs.Var(durationValue{&t.Timeout, false}, "timeout", "per-attempt timeout (`DUR`, default: the kind's, else none)")
	c.fs.Var(intValue{&t.MaxAttempts, 1}, "max-attempts", "most attempts before the task fails (`N`, default: the kind's, else the pool's, else the cluster's)")
	c.fs.Var(kvValue{t.Labels}, "label", "capacity label `KEY=VALUE` the worker must offer (repeatable)")
	c.fs.Var(kvValue{t.Tags}, "tag", "tag `KEY=VALUE` carried to the worker (repeatable)")
	c.fs.StringVar(&t.OrderingKey, "ordering-key", "",
		"ordering `KEY`: the tasks of the pool with this key run one at a time, in submit order")
	c.fs.StringVar(&t.ConcurrencyKey, "concurrency-key", "",
		"concurrency `KEY`: the pool's concurrency key limit caps the running tasks with this key")
	return tf
}

// template returns the template the flags describe, with the payload read.
// It refuses a missing -pool or -kind; what their values must be, like
// everything else a template must hold, is the cluster's to check.
func (tf *templateFlags) template(c *cmd, s stdio) (client.Template, error) {
	t := tf.tpl
	switch {
	case t.Pool == "":
		return client.Template{}, c.usageErr("-pool is required")
	case t.Kind == "":
		return client.Template{}, c.usageErr("-kind is required")
	}
	if tf.payload != "" {
		var err error
		if t.Payload, err = readPayload(s, tf.payload); err != nil {
			return client.Template{}, err
		}
	}
	if len(t.Labels) == 0 {
		t.Labels = nil
	}
	if len(t.Tags) == 0 {
		t.Tags = nil
	}
	return t, nil
}

// templateJSON is a task template in the JSON output. Bytes that are not
// valid UTF-8 appear as payload_base64 instead of payload; ordering_key and
// concurrency_key appear only when set.
type templateJSON struct {
	Pool           string            `json:"pool"`
	Kind           string            `json:"kind"`
	Priority       string            `json:"priority"`
	Labels         map[string]string `json:"labels"`
	Tags           map[string]string `json:"tags"`
	Payload        *string           `json:"payload,omitempty"`
	PayloadBase64  *string           `json:"payload_base64,omitempty"`
	TimeoutMs      int64             `json:"timeout_ms"`
	MaxAttempts    int               `json:"max_attempts"`
	OrderingKey    string            `json:"ordering_key,omitempty"`
	ConcurrencyKey string            `json:"concurrency_key,omitempty"`
}

func newTemplateJSON(t *client.Template) templateJSON {
	j := templateJSON{
		Pool:        t.Pool,
		Kind:        t.Kind,
		Priority:    orDefault(t.Priority, client.PriorityNormal),
		Labels:      nonNil(t.Labels),
		Tags:        nonNil(t.Tags),
		TimeoutMs:   t.Timeout.Milliseconds(),
		MaxAttempts: t.MaxAttempts,

		OrderingKey:    t.OrderingKey,
		ConcurrencyKey: t.ConcurrencyKey,
	}
	j.Payload, j.PayloadBase64 = textOrBase64(t.Payload)
	return j
}

// textOrBase64 returns b as text when it is valid UTF-8, else as base64.
func textOrBase64(b []byte) (text, b64 *string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
