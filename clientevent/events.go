package clientevent

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/supervisor"
)

// Body is a client event: a JSON object whose first key, "type", is
// EventType.
type Body interface{ EventType() string }

// The events of shared/seeds/004. On the compat stream each has exactly
// the seed's keys (strict client decoders reject unknown ones): Compat
// cuts them down to those. On the events stream they carry more: a tool
// call's id, a retry's or failure's kind, HTTP status and retry-after, a
// turn's outcome, cost and duration.
type (
	// Text is a piece of the model's answer.
	Text struct {
		Type  string `json:"type"`
		Delta string `json:"delta"`
	}
	// Status is a line about what the assistant is doing.
	Status struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		// Set on the CLI's retries of a failed API call.
		Kind       string `json:"kind,omitempty"`
		Status     int    `json:"status,omitempty"`
		RetryAfter int    `json:"retry_after,omitempty"`
		Attempt    int    `json:"attempt,omitempty"`
		MaxRetries int    `json:"max_retries,omitempty"`
	}
	// Tool is a tool call of the model.
	Tool struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
		ID    string          `json:"id,omitempty"`
	}
	// Done ends a turn that did not fail.
	Done struct {
		Type      string `json:"type"`
		SessionID string `json:"session_id"`
		Summary
	}
	// Error ends a turn that failed, with a sentence for the person.
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		// Kind names what failed (Kind...); Status is the API's
		// HTTP status and RetryAfter the seconds to wait, when known.
		Kind       string `json:"kind,omitempty"`
		Status     int    `json:"status,omitempty"`
		RetryAfter int    `json:"retry_after,omitempty"`
		Summary
	}
)

// Summary is how a turn ended, on its done or error event.
type Summary struct {
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

// The seed's key sets, for Compat.
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

// Compat is the compat line of an event: body with only the seed's
// keys, or nil for a type the compat clients do not know.
func Compat(typ string, body []byte) []byte {
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
	b, err := Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// The richer events of the per-session stream.
type (
	// CLI carries one CLI message; Event is one whole JSON value, as the
	// CLI wrote it (so it can be written out as it is) but for the
	// server's paths, which the session's Redactor takes out of every
	// event. Withheld marks a message whose upstream error text was
	// replaced by the sentence the person reads (see AppendCLI).
	CLI struct {
		Type     string          `json:"type"`
		Withheld bool            `json:"withheld,omitempty"`
		Event    json.RawMessage `json:"event"`
	}
	// TurnStart opens a turn with the person's message. The CLI's
	// ids are for rewinding: its id of the message, and of the last entry
	// of the conversation before it. Attachments are the files the
	// message carried and Notes the notes attached to it (paths in the
	// person's folder).
	TurnStart struct {
		Type         string             `json:"type"`
		Message      string             `json:"message"`
		CLIMessageID string             `json:"cli_message_id,omitempty"`
		CLIParentID  string             `json:"cli_parent_id,omitempty"`
		Attachments  []attachments.File `json:"attachments,omitempty"`
		Notes        []string           `json:"notes,omitempty"`
	}
	// Settings is the session's settings after a change, by a
	// person or by the CLI (plan mode ends when a plan is approved).
	Settings struct {
		Type              string `json:"type"`
		Model             string `json:"model,omitempty"`
		PermissionMode    string `json:"permission_mode,omitempty"`
		MaxThinkingTokens int    `json:"max_thinking_tokens,omitempty"`
		Effort            string `json:"effort,omitempty"`
	}
	// RateLimit is the CLI's news about the account's rate-limit
	// window (rate_limit_event).
	RateLimit struct {
		Type string `json:"type"`
		// Status is allowed, allowed_warning or rejected.
		Status string `json:"status"`
		// Window is five_hour, seven_day, ...; ResetsAt its end (unix s).
		Window      string   `json:"window,omitempty"`
		ResetsAt    int64    `json:"resets_at,omitempty"`
		Utilization *float64 `json:"utilization,omitempty"`
	}
	// Refused is a message that never reached the model.
	Refused struct {
		Type    string `json:"type"`
		QueueID string `json:"queue_id,omitempty"`
		Message string `json:"message"`
		Kind    string `json:"kind"`
		Error   string `json:"error"`
	}
	// Steered is a message of the person's that went into the running
	// turn (sent with steer while the turn ran): the model has it from
	// this point of the turn on. QueueID is the message's id, as its
	// request was answered.
	Steered struct {
		Type    string `json:"type"`
		QueueID string `json:"queue_id,omitempty"`
		Message string `json:"message"`
	}
	// Rewound is a rewind of the session to before a message.
	Rewound struct {
		Type         string   `json:"type"`
		MessageID    string   `json:"message_id"`
		Turn         int      `json:"turn"`
		Files        []string `json:"files"`
		Conversation bool     `json:"conversation"`
		// Commit is the session's newest commit after the rewind (its
		// restore's, when the rewind committed one).
		Commit string `json:"commit,omitempty"`
	}
	// ToolResult is what a tool call (the tool event with the same
	// id) returned, as text.
	ToolResult struct {
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
func toolResult(b supervisor.ContentBlock, name string) ToolResult {
	e := ToolResult{Type: "tool_result", ID: b.ToolUseID, Name: name, IsError: b.IsError}
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

func (Text) EventType() string       { return "text" }
func (Status) EventType() string     { return "status" }
func (Tool) EventType() string       { return "tool" }
func (Done) EventType() string       { return "done" }
func (Error) EventType() string      { return "error" }
func (CLI) EventType() string        { return "cli" }
func (TurnStart) EventType() string  { return "turn_start" }
func (ToolResult) EventType() string { return "tool_result" }
func (Settings) EventType() string   { return "settings" }
func (RateLimit) EventType() string  { return "rate_limit" }
func (Refused) EventType() string    { return "refused" }
func (Rewound) EventType() string    { return "rewound" }
func (Steered) EventType() string    { return "steered" }

// Marshal encodes v as one line of JSON without escaping <, > and &, so
// text reads as the model wrote it.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
