package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics counts requests and their durations by route (the pattern,
// never a session id), method and status: nothing that names a person.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	if reg == nil {
		return nil
	}
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "major_http_requests_total", Help: "HTTP requests answered, by route, method and status.",
		}, []string{"route", "method", "status"}),
		// Streams last as long as their turn: the buckets reach an hour.
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "major_http_request_duration_seconds", Help: "How long HTTP requests took, streams included, by route, method and status.",
			Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120, 600, 3600},
		}, []string{"route", "method", "status"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// routeOf is the route pattern of a request, or "unmatched".
func routeOf(c *gin.Context) string {
	if r := c.FullPath(); r != "" {
		return r
	}
	return "unmatched"
}

// accessLog writes one line per request when it ends: its method, route,
// status, bytes, duration, client, person and token name; never a header
// (they carry tokens), the query or a body.
func (s *Server) accessLog(c *gin.Context) {
	start := time.Now()
	c.Next()
	took := time.Since(start)
	route, status := routeOf(c), c.Writer.Status()
	if s.metrics != nil {
		labels := []string{route, methodLabel(c.Request.Method), strconv.Itoa(status)}
		s.metrics.requests.WithLabelValues(labels...).Inc()
		s.metrics.duration.WithLabelValues(labels...).Observe(took.Seconds())
	}
	ev := s.log.Info()
	if route == "/healthz" || route == "/readyz" || route == "/metrics" || route == "/app/*filepath" {
		// Probes and the client's files would drown the rest.
		ev = s.log.Debug()
	}
	ev.Str("method", c.Request.Method).Str("route", route).Int("status", status).
		Int("bytes", max(c.Writer.Size(), 0)).Int64("took_ms", took.Milliseconds()).
		Str("client", s.clientAddr(c.Request)).Str("person", personOf(c)).Str("token_name", c.GetString(tokenNameKey)).
		Msg("request")
}

// methodLabel is a request's method as a metric label: any method a
// client makes up counts as OTHER, so no client can grow the series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}
