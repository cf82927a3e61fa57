package relay

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/majorhq/major/supervisor"
)

// typed is an event body that knows its type.
type typed interface{ eventType() string }

// The events of shared/seeds/004. On the compat stream each has exactly
// the seed's keys (strict client decoders reject unknown ones): compatBody
// cuts them down to those. On the events stream they carry more: a tool
// call's id, a retry's or failure's kind, HTTP status and retry-after, a
// turn's outcome, cost and duration.
type (
	textEvent struct {
		Type  string `json:"type"`
		Delta string `json:"delta"`
	}
	statusEvent struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		// Set on the CLI's retries of a failed API call.
		Kind       string `json:"kind,omitempty"`
		Status     int    `json:"status,omitempty"`
		RetryAfter int    `json:"retry_after,omitempty"`
		Attempt    int    `json:"attempt,omitempty"`
		MaxRetries int    `json:"max_retries,omitempty"`
	}
	toolEvent struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
		ID    string          `json:"id,omitempty"`
	}
	doneEvent struct {
		Type      string `json:"type"`
		SessionID string `json:"session_id"`
		turnSummary
	}
	errorEvent struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		// Kind names what failed (see failure.go); Status is the API's
		// HTTP status and RetryAfter the seconds to wait, when known.
		Kind       string `json:"kind,omitempty"`
		Status     int    `json:"status,omitempty"`
		RetryAfter int    `json:"retry_after,omitempty"`
		turnSummary
	}
)

// turnSummary is how a turn ended, on its done or error event.
type turnSummary struct {
	// Outcome is success, interrupted or error.
	Outcome string `json:"outcome,omitempty"`
	// CostUSD is what the turn cost (all its API requests), when the CLI
	// said; SessionCostUSD what the session has cost so far.
	CostUSD        *float64 `json:"cost_usd,omitempty"`
	SessionCostUSD *float64 `json:"session_cost_usd,omitempty"`
	DurationMS     int64    `json:"duration_ms,omitempty"`
	// Usage is the turn's tokens, agent turns and API time, summed over
	// its requests.
	Usage *supervisor.Usage `json:"usage,omitempty"`
}

// The seed's key sets, for compatBody.
type (
	compatStatus struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	compatTool struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	compatDone struct {
		Type      string `json:"type"`
		SessionID string `json:"session_id"`
	}
	compatError struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

// compatBody is the compat line of an event: body with only the seed's
// keys, or nil for a type the compat clients do not know.
func compatBody(typ string, body []byte) []byte {
	var v any
	switch typ {
	case "text":
		return body
	case "status":
		v = &compatStatus{}
	case "tool":
		v = &compatTool{}
	case "done":
		v = &compatDone{}
	case "error":
		v = &compatError{}
	default:
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil
	}
	b, err := encodeJSON(v)
	if err != nil {
		return nil
	}
	return b
}

// The richer events of the per-session stream.
type (
	// cliEvent carries one CLI message unchanged; Event is one whole JSON
	// value, as the CLI wrote it (publishJSON writes it out as it is).
	cliEvent struct {
		Type  string          `json:"type"`
		Event json.RawMessage `json:"event"`
	}
	// turnStartEvent opens a turn with the person's message. The CLI's
	// ids are for rewinding: its id of the message, and of the last entry
	// of the conversation before it.
	turnStartEvent struct {
		Type         string `json:"type"`
		Message      string `json:"message"`
		CLIMessageID string `json:"cli_message_id,omitempty"`
		CLIParentID  string `json:"cli_parent_id,omitempty"`
	}
	// settingsEvent is the session's settings after a change, by a
	// person or by the CLI (plan mode ends when a plan is approved).
	settingsEvent struct {
		Type              string `json:"type"`
		Model             string `json:"model,omitempty"`
		PermissionMode    string `json:"permission_mode,omitempty"`
		MaxThinkingTokens int    `json:"max_thinking_tokens,omitempty"`
		Effort            string `json:"effort,omitempty"`
	}
	// rateLimitEvent is the CLI's news about the account's rate-limit
	// window (rate_limit_event).
	rateLimitEvent struct {
		Type string `json:"type"`
		// Status is allowed, allowed_warning or rejected.
		Status string `json:"status"`
		// Window is five_hour, seven_day, ...; ResetsAt its end (unix s).
		Window      string   `json:"window,omitempty"`
		ResetsAt    int64    `json:"resets_at,omitempty"`
		Utilization *float64 `json:"utilization,omitempty"`
	}
	// refusedEvent is a message that never reached the model.
	refusedEvent struct {
		Type    string `json:"type"`
		QueueID string `json:"queue_id,omitempty"`
		Message string `json:"message"`
		Kind    string `json:"kind"`
		Error   string `json:"error"`
	}
	// rewoundEvent is a rewind of the session to before a message.
	rewoundEvent struct {
		Type         string   `json:"type"`
		MessageID    string   `json:"message_id"`
		Turn         int      `json:"turn"`
		Files        []string `json:"files"`
		Conversation bool     `json:"conversation"`
	}
	// toolResultEvent is what a tool call (the tool event with the same
	// id) returned, as text.
	toolResultEvent struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		Name      string `json:"name"`
		Content   string `json:"content"`
		IsError   bool   `json:"is_error,omitempty"`
		Truncated bool   `json:"truncated,omitempty"`
	}
)

// maxToolResult bounds the text a tool_result event carries; the whole
// result stays in the cli event.
const maxToolResult = 64 << 10

// toolResult is the tool_result event of one tool_result block.
func toolResult(b supervisor.ContentBlock, name string) toolResultEvent {
	e := toolResultEvent{Type: "tool_result", ID: b.ToolUseID, Name: name, IsError: b.IsError}
	var text string
	if json.Unmarshal(b.Content, &text) != nil {
		var blocks []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(b.Content, &blocks)
		var parts []string
		for _, c := range blocks {
			if c.Type == "text" {
				parts = append(parts, c.Text)
			} else {
				parts = append(parts, "["+c.Type+"]")
			}
		}
		text = strings.Join(parts, "\n")
	}
	if len(text) > maxToolResult {
		cut := maxToolResult
		for cut > 0 && text[cut]&0xC0 == 0x80 {
			cut--
		}
		text, e.Truncated = text[:cut], true
	}
	e.Content = text
	return e
}

func (textEvent) eventType() string       { return "text" }
func (statusEvent) eventType() string     { return "status" }
func (toolEvent) eventType() string       { return "tool" }
func (doneEvent) eventType() string       { return "done" }
func (errorEvent) eventType() string      { return "error" }
func (cliEvent) eventType() string        { return "cli" }
func (turnStartEvent) eventType() string  { return "turn_start" }
func (toolResultEvent) eventType() string { return "tool_result" }
func (settingsEvent) eventType() string   { return "settings" }
func (rateLimitEvent) eventType() string  { return "rate_limit" }
func (refusedEvent) eventType() string    { return "refused" }
func (rewoundEvent) eventType() string    { return "rewound" }

// translator turns one session's supervisor events into relay events. It
// keeps what the compat format needs across lines: which API messages had
// streamed text, the names of running tools, the turn's text so far.
type translator struct {
	sessionID string
	streamed  map[string]bool     // API message ids whose text came as deltas
	current   string              // API message id being streamed
	tools     map[string]string   // tool_use_id -> tool name
	started   time.Time           // when the open turn started
	apiErr    *supervisor.Message // the CLI's message for a failed API call
	lastRetry *supervisor.Message // the CLI's last retry notice
	// lastEntry is the CLI's id of the conversation's last assistant
	// message, the entry a rewind of the next turn resumes at.
	lastEntry string
	// spent is what the session's turns cost in all.
	spent float64
}

func newTranslator(sessionID string) *translator {
	return &translator{sessionID: sessionID, streamed: map[string]bool{}, tools: map[string]string{}}
}

// out is one event to publish.
type out struct {
	body      typed
	beginTurn bool
	terminal  bool
}

func (t *translator) translate(ev supervisor.Event) []out {
	switch ev.Kind {
	case supervisor.EventTurnStart:
		clear(t.streamed)
		clear(t.tools)
		t.started, t.apiErr, t.lastRetry = ev.Time, nil, nil
		return []out{{body: turnStartEvent{Type: "turn_start", Message: ev.Text, CLIMessageID: ev.MessageID, CLIParentID: t.lastEntry},
			beginTurn: true}}
	case supervisor.EventNotice:
		return []out{{body: statusEvent{Type: "status", Message: ev.Text}}}
	case supervisor.EventTurnEnd:
		return t.turnEnd(ev)
	case supervisor.EventCLI:
		return t.cli(ev.Msg)
	}
	return nil
}

func (t *translator) cli(m *supervisor.Message) []out {
	outs := []out{{body: cliEvent{Type: "cli", Event: m.Raw}}}
	// Events of subagents (parent_tool_use_id set) stay in the cli stream.
	if m.ParentToolUseID != nil && *m.ParentToolUseID != "" {
		return outs
	}
	switch m.Type {
	case "rate_limit_event":
		if e, ok := rateLimit(m.RateLimitInfo); ok {
			outs = append(outs, out{body: e})
		}
	case "system":
		if m.Subtype == "api_retry" {
			t.lastRetry = m
			outs = append(outs, out{body: retryStatus(m)})
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
			outs = append(outs, out{body: textEvent{Type: "text", Delta: e.Delta.Text}})
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
		if m.UUID != "" {
			t.lastEntry = m.UUID
		}
		for _, b := range m.Message.Content {
			switch b.Type {
			case "text":
				// Text that did not stream (no partial messages for it).
				if !t.streamed[m.Message.ID] && b.Text != "" {
					outs = append(outs, out{body: textEvent{Type: "text", Delta: b.Text}})
				}
			case "tool_use":
				t.tools[b.ID] = b.Name
				input := b.Input
				if len(input) == 0 {
					input = json.RawMessage("{}")
				}
				outs = append(outs,
					out{body: statusEvent{Type: "status", Message: runningStatus(b.Name, input)}},
					out{body: toolEvent{Type: "tool", Name: b.Name, Input: input, ID: b.ID}})
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
					out{body: toolResult(b, name)},
					out{body: statusEvent{Type: "status", Message: "Tool finished: " + name}})
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
			msg += " " + oneLine(in.URL, 2048)
		}
	}
	return msg
}

func (t *translator) turnEnd(ev supervisor.Event) []out {
	sum := turnSummary{Outcome: "success"}
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
		return []out{{body: statusEvent{Type: "status", Message: "Interrupted"}},
			{body: doneEvent{Type: "done", SessionID: t.sessionID, turnSummary: sum}, terminal: true}}
	case ev.Err != nil:
		f = turnFailure(ev.Err)
	case ev.Msg != nil && ev.Msg.IsError:
		f = resultFailure(ev.Msg, t.apiErr, t.lastRetry, ev.Time)
	default:
		return []out{{body: doneEvent{Type: "done", SessionID: t.sessionID, turnSummary: sum}, terminal: true}}
	}
	sum.Outcome = "error"
	return []out{{body: f.event(sum), terminal: true}}
}

// rateLimit is the event for the CLI's rate_limit_info.
func rateLimit(info json.RawMessage) (rateLimitEvent, bool) {
	var in struct {
		Status        string   `json:"status"`
		ResetsAt      int64    `json:"resetsAt"`
		RateLimitType string   `json:"rateLimitType"`
		Utilization   *float64 `json:"utilization"`
	}
	if len(info) == 0 || json.Unmarshal(info, &in) != nil || in.Status == "" {
		return rateLimitEvent{}, false
	}
	return rateLimitEvent{Type: "rate_limit", Status: in.Status, Window: in.RateLimitType, ResetsAt: in.ResetsAt, Utilization: in.Utilization}, true
}

// oneLine folds s to one line of at most n bytes.
func oneLine(s string, n int) string {
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
