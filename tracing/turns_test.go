package tracing_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/tracing"
)

// recorder is a tracer whose ended spans the test reads.
func recorder(tb testing.TB) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	tb.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func cliMessage(typ string, blocks ...supervisor.ContentBlock) supervisor.Event {
	return supervisor.Event{Kind: supervisor.EventCLI, Msg: &supervisor.Message{Type: typ, Message: &supervisor.APIMessage{Role: typ, Content: blocks}}}
}

func TestTurnSpans(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	step := func(d time.Duration, ev supervisor.Event) supervisor.Event {
		ev.Time = at.Add(d)
		return ev
	}
	for _, tc := range []struct {
		name string
		// events of session "s" after its turn's start
		events  []supervisor.Event
		process string
		want    map[string]codes.Code // span name -> status
		outcome string
	}{
		{
			name:    "a tool call that fails, on a started process",
			process: supervisor.ProcessStart,
			events: []supervisor.Event{
				step(3*time.Second, cliMessage("system")),
				step(4*time.Second, cliMessage("assistant", supervisor.ContentBlock{Type: "tool_use", ID: "t1", Name: "Read", Input: json.RawMessage(`{"file_path":"x"}`)})),
				step(5*time.Second, cliMessage("user", supervisor.ContentBlock{Type: "tool_result", ToolUseID: "t1", IsError: true})),
				step(6*time.Second, supervisor.Event{Kind: supervisor.EventTurnEnd}),
			},
			want:    map[string]codes.Code{"turn": codes.Unset, "queue wait": codes.Unset, "claude start": codes.Unset, "tool Read": codes.Error},
			outcome: "success",
		},
		{
			name:    "interrupted while a tool runs, on a warm process",
			process: supervisor.ProcessWarm,
			events: []supervisor.Event{
				step(2*time.Second, cliMessage("assistant", supervisor.ContentBlock{Type: "tool_use", ID: "t2", Name: "Glob"})),
				step(3*time.Second, supervisor.Event{Kind: supervisor.EventTurnEnd, Interrupted: true}),
			},
			want:    map[string]codes.Code{"turn": codes.Unset, "queue wait": codes.Unset, "claude warm take": codes.Unset, "tool Glob": codes.Error},
			outcome: "interrupted",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, tp := recorder(t)
			turns := tracing.New(tracing.Config{Tracer: tp.Tracer("test")})
			turns.Observe("s", "petra", at, step(time.Second, supervisor.Event{Kind: supervisor.EventTurnStart, Turn: 1, Text: "secret words", Process: tc.process}))
			for _, ev := range tc.events {
				turns.Observe("s", "petra", time.Time{}, ev)
			}
			// The gateway reports the turn's last request after its end.
			turns.Model(tracing.ModelRequest{Session: "s", Model: "m", Status: 200, Start: at.Add(1500 * time.Millisecond), Duration: time.Second})
			spans := rec.Ended()
			got := map[string]codes.Code{}
			var root sdktrace.ReadOnlySpan
			for _, s := range spans {
				got[s.Name()] = s.Status().Code
				if s.Name() == "turn" {
					root = s
				}
				for _, a := range s.Attributes() {
					if a.Value.AsString() == "secret words" {
						t.Errorf("the message in span %q without Content", s.Name())
					}
				}
			}
			if root == nil || !root.StartTime().Equal(at) {
				t.Fatalf("no turn span from the message's acceptance: %v", got)
			}
			for _, s := range spans {
				if s.Name() != "turn" && s.Parent().SpanID() != root.SpanContext().SpanID() {
					t.Errorf("%q is not under the turn", s.Name())
				}
			}
			for name, code := range tc.want {
				if c, ok := got[name]; !ok || c != code {
					t.Errorf("span %q: %v (present %v), want %v", name, c, ok, code)
				}
			}
			if _, ok := got["model request"]; !ok {
				t.Error("no model request span")
			}
			for _, a := range root.Attributes() {
				if a.Key == "major.outcome" && a.Value.AsString() != tc.outcome {
					t.Errorf("outcome %s, want %s", a.Value.AsString(), tc.outcome)
				}
			}
		})
	}
}
