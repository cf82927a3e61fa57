package clientevent

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/majorhq/major/supervisor"
)

// Translator turns one session's supervisor events into client events, in
// order. It keeps what that needs across lines: which API messages had
// streamed text, the names of running tools, the turn's failed API call and
// retries, the conversation's last entry and what the session has spent.
// It is not safe for concurrent use: its session calls it under its lock.
type Translator struct {
	sessionID string
	streamed  map[string]bool     // API message ids whose text came as deltas
	current   string              // API message id being streamed
	tools     map[string]string   // tool_use_id -> tool name
	started   time.Time           // when the open turn started
	apiErr    *supervisor.Message // the CLI's message for a failed API call
	lastRetry *supervisor.Message // the CLI's last retry notice
	// result is the turn's result as its cli event went out, at resultAt:
	// the turn's end names its failure as that event did.
	result   *supervisor.Message
	resultAt time.Time
	// lastEntry is the CLI's id of the conversation's last assistant
	// message, the entry a rewind of the next turn resumes at.
	lastEntry string
	// spent is what the session's turns cost in all.
	spent float64
}

// NewTranslator starts the translation of session sessionID's events;
// Restore carries on one that ran before.
func NewTranslator(sessionID string) *Translator {
	return &Translator{sessionID: sessionID, streamed: map[string]bool{}, tools: map[string]string{}}
}

// Restore carries on a session: what its turns cost in all, and the
// CLI's id of its conversation's last entry.
func (t *Translator) Restore(spentUSD float64, lastEntry string) {
	t.spent, t.lastEntry = spentUSD, lastEntry
}

// Spent is what the session's turns cost in all, in USD.
func (t *Translator) Spent() float64 { return t.spent }

// LastEntry is the CLI's id of the conversation's last assistant message:
// the entry a turn resumed there continues from.
func (t *Translator) LastEntry() string { return t.lastEntry }

// RewindTo makes entry the conversation's last entry, after a rewind to
// before a message.
func (t *Translator) RewindTo(entry string) { t.lastEntry = entry }

// Out is one client event to publish: BeginTurn opens a turn with it,
// Terminal ends the turn with it.
type Out struct {
	Body      Body
	BeginTurn bool
	Terminal  bool
	// Withheld is the upstream error text taken out of Body, for the
	// log only.
	Withheld []string
}

// Translate is the client events of one supervisor event, in order. Every
// CLI message is a cli event first; messages of subagents stay there.
func (t *Translator) Translate(ev supervisor.Event) []Out {
	switch ev.Kind {
	case supervisor.EventTurnStart:
		clear(t.streamed)
		clear(t.tools)
		t.started, t.apiErr, t.lastRetry, t.result = ev.Time, nil, nil, nil
		return []Out{{Body: TurnStart{Type: "turn_start", Message: ev.Text, CLIMessageID: ev.MessageID, CLIParentID: t.lastEntry},
			BeginTurn: true}}
	case supervisor.EventNotice:
		return []Out{{Body: Status{Type: "status", Message: ev.Text}}}
	case supervisor.EventSteered:
		return []Out{{Body: Steered{Type: "steered", QueueID: ev.MessageID, Message: ev.Text}}}
	case supervisor.EventSteerDropped:
		return []Out{{Body: Refused{Type: "refused", QueueID: ev.MessageID, Message: ev.Text, Kind: KindTurnEnded,
			Error: "The turn ended before your message reached the assistant; send it again if you still want it."}}}
	case supervisor.EventTurnEnd:
		return t.turnEnd(ev)
	case supervisor.EventCLI:
		return t.cli(ev.Msg, ev.Time)
	}
	return nil
}

func (t *Translator) cli(m *supervisor.Message, at time.Time) []Out {
	cli := Out{Body: CLI{Type: "cli", Event: m.Raw}}
	if m.Type == "result" {
		t.result, t.resultAt = m, at
	}
	if sentence, ok := upstreamSentence(m, t.apiErr, t.lastRetry, at); ok {
		if raw, texts := withhold(m, sentence); len(texts) > 0 {
			cli = Out{Body: CLI{Type: "cli", Withheld: true, Event: raw}, Withheld: texts}
		}
	}
	outs := []Out{cli}
	// Events of subagents (parent_tool_use_id set) stay in the cli stream.
	if m.ParentToolUseID != nil && *m.ParentToolUseID != "" {
		return outs
	}
	switch m.Type {
	case "rate_limit_event":
		if e, ok := rateLimit(m.RateLimitInfo); ok {
			outs = append(outs, Out{Body: e})
		}
	case "system":
		if m.Subtype == "api_retry" {
			t.lastRetry = m
			outs = append(outs, Out{Body: retryStatus(m)})
		}
	case "stream_event":
		e := m.Event
		if e == nil {
			break
		}
		switch {
		case e.Type == "message_start" && e.Message != nil:
			t.current = e.Message.ID
		case e.Type == "content_block_delta" && e.Delta != nil && e.Delta.Type == "text_delta" && e.Delta.Text != "":
			t.streamed[t.current] = true
			outs = append(outs, Out{Body: Text{Type: "text", Delta: e.Delta.Text}})
		}
	case "assistant":
		if m.IsAPIErrorMessage {
			// Made up by the CLI for a failed API call, not the model's
			// words: its text names internal addresses. The turn's error
			// event says what happened.
			t.apiErr = m
			break
		}
		if m.Message == nil {
			break
		}
		if supervisor.IsEntryID(m.UUID) {
			t.lastEntry = m.UUID
		}
		for _, b := range m.Message.Content {
			switch b.Type {
			case "text":
				// Text that did not stream (no partial messages for it).
				if !t.streamed[m.Message.ID] && b.Text != "" {
					outs = append(outs, Out{Body: Text{Type: "text", Delta: b.Text}})
				}
			case "tool_use":
				t.tools[b.ID] = b.Name
				input := b.Input
				if len(input) == 0 {
					input = json.RawMessage("{}")
				}
				outs = append(outs,
					Out{Body: Status{Type: "status", Message: runningStatus(b.Name, input)}},
					Out{Body: Tool{Type: "tool", Name: b.Name, Input: input, ID: b.ID}})
			}
		}
	case "user":
		if m.Message == nil {
			break
		}
		for _, b := range m.Message.Content {
			if b.Type != "tool_result" {
				continue
			}
			if name, ok := t.tools[b.ToolUseID]; ok {
				delete(t.tools, b.ToolUseID)
				outs = append(outs,
					Out{Body: toolResult(b, name)},
					Out{Body: Status{Type: "status", Message: "Tool finished: " + name}})
			}
		}
	}
	return outs
}

// runningStatus is "Running tool: X", with the URL for WebFetch.
func runningStatus(name string, input json.RawMessage) string {
	msg := "Running tool: " + name
	if name == "WebFetch" {
		var in struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(input, &in) == nil && in.URL != "" {
			msg += " " + OneLine(in.URL, 2048)
		}
	}
	return msg
}

func (t *Translator) turnEnd(ev supervisor.Event) []Out {
	// The turn's messages are not needed past its end: an idle session
	// keeps none of them.
	defer func() { t.apiErr, t.lastRetry, t.result = nil, nil, nil }()
	sum := Summary{Outcome: "success"}
	if !t.started.IsZero() && !ev.Time.Before(t.started) {
		sum.DurationMS = ev.Time.Sub(t.started).Milliseconds()
	}
	if u := ev.Usage; u != nil {
		t.spent += u.CostUSD
		cost, spent := u.CostUSD, t.spent
		sum.CostUSD, sum.SessionCostUSD, sum.Usage = &cost, &spent, u
	}
	var f failure
	switch {
	case ev.Interrupted:
		sum.Outcome = "interrupted"
		return []Out{{Body: Status{Type: "status", Message: "Interrupted"}},
			{Body: Done{Type: "done", SessionID: t.sessionID, Summary: sum}, Terminal: true}}
	case ev.Err != nil:
		f = turnFailure(ev.Err)
	case ev.Msg != nil && ev.Msg.IsError:
		at := ev.Time
		if ev.Msg == t.result {
			at = t.resultAt
		}
		f = resultFailure(ev.Msg, t.apiErr, t.lastRetry, at)
	default:
		return []Out{{Body: Done{Type: "done", SessionID: t.sessionID, Summary: sum}, Terminal: true}}
	}
	sum.Outcome = "error"
	return []Out{{Body: f.event(sum), Terminal: true}}
}

// rateLimit is the event for the CLI's rate_limit_info.
func rateLimit(info json.RawMessage) (RateLimit, bool) {
	var in struct {
		Status        string   `json:"status"`
		ResetsAt      int64    `json:"resetsAt"`
		RateLimitType string   `json:"rateLimitType"`
		Utilization   *float64 `json:"utilization"`
	}
	if len(info) == 0 || json.Unmarshal(info, &in) != nil || in.Status == "" {
		return RateLimit{}, false
	}
	return RateLimit{Type: "rate_limit", Status: in.Status, Window: in.RateLimitType, ResetsAt: in.ResetsAt, Utilization: in.Utilization}, true
}

// OneLine folds s to one line of at most n bytes.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
