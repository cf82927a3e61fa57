package clitest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/supervisor"
)

// Recorder is a supervisor.Sink for tests: it keeps every event of a
// session and signals each turn's end.
type Recorder struct {
	mu     sync.Mutex
	events []supervisor.Event
	ends   chan supervisor.Event
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{ends: make(chan supervisor.Event, 64)} }

// Publish implements supervisor.Sink.
func (r *Recorder) Publish(ev supervisor.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if ev.Kind == supervisor.EventTurnEnd {
		r.ends <- ev
	}
}

// WaitEnd waits for the next turn end, failing the test after within.
func (r *Recorder) WaitEnd(tb testing.TB, within time.Duration) supervisor.Event {
	tb.Helper()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case ev := <-r.ends:
		return ev
	case <-t.C:
		tb.Fatalf("turn did not end within %s", within)
		return supervisor.Event{}
	}
}

// Turn sends text, waits for the turn to end without error and returns the
// text the model streamed in it.
func (r *Recorder) Turn(tb testing.TB, s *supervisor.CLI, text string) string {
	tb.Helper()
	if err := s.Send(context.Background(), text); err != nil {
		tb.Fatalf("send %q: %v", text, err)
	}
	if ev := r.WaitEnd(tb, 90*time.Second); ev.Err != nil {
		tb.Fatalf("turn %q ended with %v", text, ev.Err)
	}
	return r.Text()
}

// Text joins the text deltas the CLI streamed since the last turn start.
func (r *Recorder) Text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sb strings.Builder
	for _, ev := range r.events {
		if ev.Kind == supervisor.EventTurnStart {
			sb.Reset()
		}
		if ev.Kind == supervisor.EventCLI && ev.Msg.Type == "stream_event" && ev.Msg.Event != nil &&
			ev.Msg.Event.Delta != nil && ev.Msg.Event.Delta.Type == "text_delta" {
			sb.WriteString(ev.Msg.Event.Delta.Text)
		}
	}
	return sb.String()
}

// Count is the number of events for which pred holds.
func (r *Recorder) Count(pred func(supervisor.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if pred(ev) {
			n++
		}
	}
	return n
}

// Events returns a copy of every event so far.
func (r *Recorder) Events() []supervisor.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]supervisor.Event(nil), r.events...)
}

// Notices returns the texts of the notices published so far.
func (r *Recorder) Notices() []string {
	var out []string
	for _, ev := range r.Events() {
		if ev.Kind == supervisor.EventNotice {
			out = append(out, ev.Text)
		}
	}
	return out
}
