package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ClockGauges are the leader's clock check, as last measured.
type ClockGauges struct {
	// Skew is the leader's clock minus the median of the other voters'
	// readings (positive: the leader is ahead).
	Skew time.Duration
	// Held: recurring fires and lease expiries wait for the clock.
	Held bool
}

// ClockSource returns the clock check's gauges while this node leads and
// checks its clock (false otherwise: no series are exported).
type ClockSource func() (ClockGauges, bool)

// SetClockSource sets where the clock gauges are read at scrape time.
func (m *Metrics) SetClockSource(s ClockSource) { m.clockS.Store(&s) }

var (
	descClockSkew = prometheus.NewDesc(Namespace+"_clock_skew_seconds",
		"The leader's clock minus the median of the other voters' clocks, as last measured by this node while it leads (positive: the leader is ahead).", nil, nil)
	descClockHold = prometheus.NewDesc(Namespace+"_clock_hold",
		"1 while this leader's clock disagrees with a majority of the voters' (or stepped and is not confirmed yet) and recurring fires and lease expiries wait, else 0.", nil, nil)
)

// clockCollector reads the clock gauges at scrape time.
type clockCollector struct{ m *Metrics }

// Describe implements prometheus.Collector.
func (c clockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descClockSkew
	ch <- descClockHold
}

// Collect implements prometheus.Collector.
func (c clockCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.clockS.Load()
	if s == nil {
		return
	}
	g, ok := (*s)()
	if !ok {
		return
	}
	held := 0.0
	if g.Held {
		held = 1
	}
	ch <- prometheus.MustNewConstMetric(descClockSkew, prometheus.GaugeValue, g.Skew.Seconds())
	ch <- prometheus.MustNewConstMetric(descClockHold, prometheus.GaugeValue, held)
}
