package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// lineWriter writes NDJSON lines to one client, flushing each, with a
// deadline per line so a client that stops reading cannot hold a handler
// forever.
type lineWriter struct {
	w       gin.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
	err     error
}

func newLineWriter(c *gin.Context, timeout time.Duration) *lineWriter {
	return &lineWriter{w: c.Writer, rc: http.NewResponseController(c.Writer), timeout: timeout}
}

func (l *lineWriter) start() {
	if l.started {
		return
	}
	l.started = true
	h := l.w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	l.w.WriteHeader(http.StatusOK)
}

// line writes b and a newline, and flushes.
func (l *lineWriter) line(b []byte) error {
	if l.err != nil {
		return l.err
	}
	l.start()
	_ = l.rc.SetWriteDeadline(time.Now().Add(l.timeout))
	if _, err := l.w.Write(b); err != nil {
		l.err = err
		return err
	}
	if _, err := l.w.Write([]byte{'\n'}); err != nil {
		l.err = err
		return err
	}
	return l.flush()
}

// flush sends the headers (if nothing was written yet) and buffered lines.
func (l *lineWriter) flush() error {
	l.start()
	if err := l.rc.Flush(); err != nil {
		l.err = err
	}
	return l.err
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
