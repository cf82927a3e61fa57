package relay

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Metrics counts what the relay does, served in Prometheus' text format.
// Written out by hand: a handful of counters, gauges and one histogram do
// not need a client library.
type Metrics struct {
	turns      atomic.Int64
	turnErrors atomic.Int64
	interrupts atomic.Int64
	dropped    atomic.Int64

	mu      sync.Mutex
	buckets []float64 // upper bounds, seconds
	counts  []int64   // per bucket, cumulative at render
	sum     float64
	count   int64

	sessions func() (sessions, subscribers int)
	live     func() int
	waiting  func() int
}

// turnBuckets are the turn duration histogram's bounds, in seconds: turns
// run from a second to many minutes.
var turnBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

func newMetrics() *Metrics {
	return &Metrics{buckets: turnBuckets, counts: make([]int64, len(turnBuckets))}
}

func (m *Metrics) turnEnded(d time.Duration, failed, interrupted bool) {
	m.turns.Add(1)
	if failed {
		m.turnErrors.Add(1)
	}
	if interrupted {
		m.interrupts.Add(1)
	}
	sec := d.Seconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sum += sec
	m.count++
	if i := sort.SearchFloat64s(m.buckets, sec); i < len(m.buckets) {
		m.counts[i]++
	}
}

// ServeHTTP writes the metrics.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.write(w)
}

func (m *Metrics) write(w io.Writer) {
	sessions, subs := 0, 0
	if m.sessions != nil {
		sessions, subs = m.sessions()
	}
	live, waiting := 0, 0
	if m.live != nil {
		live = m.live()
	}
	if m.waiting != nil {
		waiting = m.waiting()
	}
	metric := func(name, kind, help string, v any) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, kind, name, v)
	}
	metric("major_sessions", "gauge", "Chat sessions held by the server.", sessions)
	metric("major_claude_processes", "gauge", "Live claude CLI processes.", live)
	metric("major_claude_waiting_processes", "gauge", "Claude CLI processes started ahead, ready for a new chat (counted in major_claude_processes too).", waiting)
	metric("major_subscribers", "gauge", "Clients attached to session streams.", subs)
	metric("major_turns_total", "counter", "Turns ended.", m.turns.Load())
	metric("major_turn_errors_total", "counter", "Turns that ended with an error.", m.turnErrors.Load())
	metric("major_turn_interrupts_total", "counter", "Turns that were interrupted.", m.interrupts.Load())
	metric("major_dropped_subscribers_total", "counter", "Clients cut off for falling behind.", m.dropped.Load())

	m.mu.Lock()
	defer m.mu.Unlock()
	const h = "major_turn_duration_seconds"
	fmt.Fprintf(w, "# HELP %s Turn duration.\n# TYPE %s histogram\n", h, h)
	var cum int64
	for i, b := range m.buckets {
		cum += m.counts[i]
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", h, b, cum)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", h, m.count, h, m.sum, h, m.count)
}
