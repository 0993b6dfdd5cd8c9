package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// webhookMetrics are the series of the webhook deliveries this node runs
// while it leads.
type webhookMetrics struct {
	attempts  *prometheus.CounterVec
	delivered *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
}

func newWebhookMetrics() *webhookMetrics {
	return &webhookMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "webhook_deliveries_total",
			Help: "Webhook requests the leader sent, by subscription and result: ok (2xx), http_error (another answer), transport_error (no answer: refused, reset, timed out)."},
			[]string{"subscription", "result"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "webhook_events_delivered_total",
			Help: "Events the leader delivered to a webhook and acknowledged through the log, by subscription."},
			[]string{"subscription"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "webhook_delivery_seconds",
			Help:    "Duration of webhook requests, from sending to the answer's headers (or the failure), by subscription.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}},
			[]string{"subscription"}),
	}
}

func (w *webhookMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{w.attempts, w.delivered, w.seconds}
}

// WebhookAttempt records one webhook request of subscription sub: its
// result (ok, http_error, transport_error) and how long it took.
func (m *Metrics) WebhookAttempt(sub, result string, took time.Duration) {
	m.webhook.attempts.WithLabelValues(sub, result).Inc()
	m.webhook.seconds.WithLabelValues(sub).Observe(took.Seconds())
}

// WebhookDelivered records events of subscription sub delivered to its
// webhook and acknowledged.
func (m *Metrics) WebhookDelivered(sub string, events int) {
	m.webhook.delivered.WithLabelValues(sub).Add(float64(events))
}
