// Package webhook delivers the events of a durable subscription to an HTTP
// endpoint, and lets receivers check that a delivery came from cronoq.
//
// The wire format: the leader POSTs a batch of events, in cursor order, as
// one JSON object
//
//	{"subscription": "billing",
//	 "events": [{"task_id": "...", "pool": "etl", "kind": "report",
//	             "status": "succeeded", "attempt": 1,
//	             "at": "2026-12-02T10:00:00.123456789Z", "cursor": 1207959552,
//	             "message": "", "workflow": "", "step": ""}, ...]}
//
// with the headers
//
//	Content-Type: application/json
//	X-Cronoq-Signature: sha256=<hex of HMAC-SHA256(secret, body)>
//	X-Cronoq-Subscription: <the subscription's name>
//	X-Cronoq-Delivery: <an id of this attempt, new for every attempt>
//
// A delivery is recorded (the subscription's cursor acknowledged through
// the raft log) only after the endpoint answered 2xx; anything else, a
// redirect included, is a failure and the same events are sent again,
// with exponential backoff. Delivery is at least once: a receiver
// deduplicates by cursor (an event's cursor never changes, and cursors
// grow in log order).
//
// The package imports nothing of cronoq: a receiver written in Go can use
// VerifySignature without pulling in the server.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Header names of a delivery.
const (
	// HeaderSignature carries "sha256=" and the lowercase hex HMAC-SHA256
	// of the exact request body, keyed with the subscription's secret.
	HeaderSignature = "X-Cronoq-Signature"
	// HeaderSubscription carries the subscription's name.
	HeaderSubscription = "X-Cronoq-Subscription"
	// HeaderDelivery carries an id unique to one attempt: a retry of the
	// same events has a new one.
	HeaderDelivery = "X-Cronoq-Delivery"
)

// signaturePrefix names the signature's algorithm in HeaderSignature.
const signaturePrefix = "sha256="

// Payload is the body of a delivery.
type Payload struct {
	Subscription string  `json:"subscription"`
	Events       []Event `json:"events"`
}

// Event is one status event as delivered. For a workflow's own event
// TaskID is empty, Kind is the workflow's name, Workflow its id and
// WorkflowStatus its status.
type Event struct {
	TaskID         string    `json:"task_id"`
	Pool           string    `json:"pool"`
	Kind           string    `json:"kind"`
	Status         string    `json:"status"`
	Attempt        uint32    `json:"attempt"`
	At             time.Time `json:"at"`
	Cursor         uint64    `json:"cursor"`
	Message        string    `json:"message"`
	Workflow       string    `json:"workflow"`
	Step           string    `json:"step"`
	WorkflowStatus string    `json:"workflow_status,omitempty"`
}

// Sign returns the value of HeaderSignature for body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return signaturePrefix + hex.EncodeToString(m.Sum(nil))
}

// ErrBadSignature means a delivery's signature does not match its body
// under the secret: it was not sent by cronoq with that secret, or the body
// was altered.
var ErrBadSignature = errors.New("webhook signature does not match the body")

// VerifySignature checks header (the value of HeaderSignature) against
// body, the exact bytes of the request body, under secret. It returns nil
// when they match, ErrBadSignature when they do not, and a descriptive
// error when the header is missing or malformed. The comparison takes
// constant time.
//
// A receiver reads the whole body before parsing it:
//
//	body, err := io.ReadAll(r.Body)
//	if err != nil { ... }
//	if err := webhook.VerifySignature(secret, body, r.Header.Get(webhook.HeaderSignature)); err != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized)
//		return
//	}
//	var p webhook.Payload
//	if err := json.Unmarshal(body, &p); err != nil { ... }
func VerifySignature(secret, body []byte, header string) error {
	if header == "" {
		return fmt.Errorf("no %s header", HeaderSignature)
	}
	hexSum, ok := strings.CutPrefix(header, signaturePrefix)
	if !ok {
		return fmt.Errorf("%s header %q does not start with %q", HeaderSignature, truncate(header, 16), signaturePrefix)
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%s header is not %d bytes of hex after %q", HeaderSignature, sha256.Size, signaturePrefix)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return ErrBadSignature
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
