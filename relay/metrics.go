package relay

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics counts what the relay does: sessions, processes, subscribers
// and turns, for the whole server (no person, session or text). It is a
// prometheus.Collector, registered with the server's registry beside the
// runtime's and the HTTP API's series; ServeHTTP serves it alone.
type Metrics struct {
	turns, turnErrors, interrupts, dropped prometheus.Counter
	turnDuration                           prometheus.Histogram
	collectors                             []prometheus.Collector

	sessions func() (sessions, subscribers int)
	live     func() int
	waiting  func() int
}

var _ prometheus.Collector = (*Metrics)(nil)

// turnBuckets are the turn duration histogram's bounds, in seconds: turns
// run from a second to many minutes.
var turnBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

func newMetrics() *Metrics {
	m := &Metrics{
		turns:        prometheus.NewCounter(prometheus.CounterOpts{Name: "major_turns_total", Help: "Turns ended."}),
		turnErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "major_turn_errors_total", Help: "Turns that ended with an error."}),
		interrupts:   prometheus.NewCounter(prometheus.CounterOpts{Name: "major_turn_interrupts_total", Help: "Turns that were interrupted."}),
		dropped:      prometheus.NewCounter(prometheus.CounterOpts{Name: "major_dropped_subscribers_total", Help: "Clients cut off for falling behind."}),
		turnDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "major_turn_duration_seconds", Help: "Turn duration.", Buckets: turnBuckets}),
	}
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v)
	}
	m.collectors = []prometheus.Collector{
		gauge("major_sessions", "Chat sessions held by the server.", func() float64 {
			n, _ := m.counts()
			return float64(n)
		}),
		gauge("major_claude_processes", "Live claude CLI processes.", func() float64 { return call(m.live) }),
		gauge("major_claude_waiting_processes", "Claude CLI processes started ahead, ready for a new chat (counted in major_claude_processes too).", func() float64 { return call(m.waiting) }),
		gauge("major_subscribers", "Clients attached to session streams.", func() float64 {
			_, n := m.counts()
			return float64(n)
		}),
		m.turns, m.turnErrors, m.interrupts, m.dropped, m.turnDuration,
	}
	return m
}

func call(f func() int) float64 {
	if f == nil {
		return 0
	}
	return float64(f())
}

func (m *Metrics) counts() (sessions, subscribers int) {
	if m.sessions == nil {
		return 0, 0
	}
	return m.sessions()
}

func (m *Metrics) turnEnded(d time.Duration, failed, interrupted bool) {
	m.turns.Inc()
	if failed {
		m.turnErrors.Inc()
	}
	if interrupted {
		m.interrupts.Inc()
	}
	m.turnDuration.Observe(d.Seconds())
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// ServeHTTP serves the relay's series alone, in Prometheus' text format.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r == nil {
		r, _ = http.NewRequest(http.MethodGet, "/metrics", nil)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
