// Package tracing makes one OpenTelemetry trace of each turn: its root
// span from the moment the message was accepted to the turn's end, with
// spans for the wait in the queue (or for a process slot), the CLI's
// start or the warm process taken, each tool call and each model request
// (reported by the model gateway). Message text and tool input go into
// spans only when asked (Config.Content); otherwise only their sizes.
//
// It follows what happened from the session core's events and the
// gateway's records, with their own times, so nothing on a turn's path
// waits for it.
package tracing

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/majorhq/major/supervisor"
)

// Config configures Turns.
type Config struct {
	Tracer trace.Tracer
	// Content puts the person's message and the tools' input in spans.
	Content bool
}

// Turns makes the traces of the turns of every session.
type Turns struct {
	cfg  Config
	mu   sync.Mutex
	open map[string]*turn // by session
	// ended is each session's last ended turn: the gateway reports a
	// request when its answer is through, which can be after the turn
	// that made it has ended.
	ended map[string]endedTurn
}

type endedTurn struct {
	ctx context.Context
	at  time.Time
}

// turn is a turn's trace while the turn runs.
type turn struct {
	ctx  context.Context // holds the root span
	root trace.Span
	// process is the span of the CLI's start or the warm process's
	// first answer, until the turn's first CLI message.
	process trace.Span
	tools   map[string]trace.Span // by tool_use id
}

// New makes Turns.
func New(cfg Config) *Turns {
	return &Turns{cfg: cfg, open: map[string]*turn{}, ended: map[string]endedTurn{}}
}

// Observe follows one event of a session's turn (relay.TurnObserver).
func (t *Turns) Observe(session, person string, accepted time.Time, ev supervisor.Event) {
	at := ev.Time
	if at.IsZero() {
		at = time.Now()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Kind {
	case supervisor.EventTurnStart:
		if old := t.open[session]; old != nil {
			old.end(at, "lost", nil)
		}
		t.open[session] = t.start(session, person, accepted, at, ev)
	case supervisor.EventCLI:
		if tr := t.open[session]; tr != nil {
			t.cli(tr, at, ev.Msg)
		}
	case supervisor.EventTurnEnd:
		if tr := t.open[session]; tr != nil {
			outcome := "success"
			switch {
			case ev.Interrupted:
				outcome = "interrupted"
			case ev.Err != nil || (ev.Msg != nil && ev.Msg.IsError):
				outcome = "error"
			}
			if ev.Usage != nil {
				tr.root.SetAttributes(attribute.Float64("major.cost_usd", ev.Usage.CostUSD),
					attribute.Int64("gen_ai.usage.input_tokens", ev.Usage.InputTokens),
					attribute.Int64("gen_ai.usage.output_tokens", ev.Usage.OutputTokens),
					attribute.Int("major.agent_turns", ev.Usage.NumTurns))
			}
			tr.end(at, outcome, ev.Err)
			delete(t.open, session)
			t.ended[session] = endedTurn{ctx: tr.ctx, at: at}
		}
	}
}

func (t *Turns) start(session, person string, accepted, at time.Time, ev supervisor.Event) *turn {
	attrs := []attribute.KeyValue{attribute.String("session.id", session), attribute.String("user.id", person),
		attribute.Int("major.turn", ev.Turn), attribute.Int("major.message_bytes", len(ev.Text)),
		attribute.String("major.process", ev.Process)}
	if t.cfg.Content {
		attrs = append(attrs, attribute.String("major.message", ev.Text))
	}
	ctx, root := t.cfg.Tracer.Start(context.Background(), "turn", trace.WithTimestamp(accepted),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	_, wait := t.cfg.Tracer.Start(ctx, "queue wait", trace.WithTimestamp(accepted))
	wait.End(trace.WithTimestamp(at))
	tr := &turn{ctx: ctx, root: root, tools: map[string]trace.Span{}}
	switch ev.Process {
	case supervisor.ProcessStart:
		_, tr.process = t.cfg.Tracer.Start(ctx, "claude start", trace.WithTimestamp(at))
	case supervisor.ProcessWarm:
		_, tr.process = t.cfg.Tracer.Start(ctx, "claude warm take", trace.WithTimestamp(at))
	}
	return tr
}

// cli follows a CLI message: the first ends the process's span; tool
// calls open a span each, their results end it.
func (t *Turns) cli(tr *turn, at time.Time, msg *supervisor.Message) {
	if tr.process != nil {
		tr.process.End(trace.WithTimestamp(at))
		tr.process = nil
	}
	if msg == nil || msg.Message == nil {
		return
	}
	for _, b := range msg.Message.Content {
		switch b.Type {
		case "tool_use":
			if _, open := tr.tools[b.ID]; open || b.ID == "" {
				continue
			}
			attrs := []attribute.KeyValue{attribute.String("gen_ai.tool.name", b.Name), attribute.String("gen_ai.tool.call.id", b.ID),
				attribute.Int("major.input_bytes", len(b.Input))}
			if t.cfg.Content {
				attrs = append(attrs, attribute.String("major.input", compact(b.Input)))
			}
			_, span := t.cfg.Tracer.Start(tr.ctx, "tool "+b.Name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
			tr.tools[b.ID] = span
		case "tool_result":
			span, ok := tr.tools[b.ToolUseID]
			if !ok {
				continue
			}
			if b.IsError {
				span.SetStatus(codes.Error, "the tool failed")
			}
			span.End(trace.WithTimestamp(at))
			delete(tr.tools, b.ToolUseID)
		}
	}
}

func (tr *turn) end(at time.Time, outcome string, err error) {
	if tr.process != nil {
		tr.process.End(trace.WithTimestamp(at))
	}
	for _, span := range tr.tools {
		span.SetStatus(codes.Error, "the turn ended first")
		span.End(trace.WithTimestamp(at))
	}
	tr.root.SetAttributes(attribute.String("major.outcome", outcome))
	if outcome == "error" || outcome == "lost" {
		msg := outcome
		if err != nil {
			msg = err.Error()
		}
		tr.root.SetStatus(codes.Error, msg)
	}
	tr.root.End(trace.WithTimestamp(at))
}

func compact(raw json.RawMessage) string {
	if len(raw) > 4096 {
		return string(raw[:4096]) + "..."
	}
	return string(raw)
}

// ModelRequest is one request the model gateway passed to the API.
type ModelRequest struct {
	Session, Person, Model string
	Status                 int
	Start                  time.Time
	Duration               time.Duration
	InputTokens            int64
	OutputTokens           int64
	CostUSD                float64
}

// Model adds a model request's span to its session's open turn (or a
// trace of its own, for a request outside a turn).
func (t *Turns) Model(r ModelRequest) {
	t.mu.Lock()
	ctx := context.Background()
	if tr := t.open[r.Session]; tr != nil {
		ctx = tr.ctx
	} else if e, ok := t.ended[r.Session]; ok && !r.Start.After(e.at) {
		ctx = e.ctx
	}
	t.mu.Unlock()
	_, span := t.cfg.Tracer.Start(ctx, "model request", trace.WithTimestamp(r.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.request.model", r.Model), attribute.Int("http.response.status_code", r.Status),
			attribute.Int64("gen_ai.usage.input_tokens", r.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", r.OutputTokens),
			attribute.Float64("major.cost_usd", r.CostUSD), attribute.String("session.id", r.Session)))
	if r.Status == 0 || r.Status >= 400 {
		span.SetStatus(codes.Error, "the model request failed")
	}
	span.End(trace.WithTimestamp(r.Start.Add(r.Duration)))
}

// Close ends the traces of turns still open (the server stops).
func (t *Turns) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s, tr := range t.open {
		tr.end(time.Now(), "lost", nil)
		delete(t.open, s)
	}
	clear(t.ended)
}
