package supervisor

import (
	"encoding/json"
	"fmt"
)

// Message is one line the CLI wrote, decoded once. The typed fields are the
// ones the supervisor and the relay act on; Raw is the line unchanged, so
// unknown types and fields pass through to clients as the CLI sent them.
type Message struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype,omitempty"`
	SessionID string `json:"session_id,omitempty"`

	// control_request / control_cancel_request
	RequestID string          `json:"request_id,omitempty"`
	Request   *ControlRequest `json:"request,omitempty"`
	// control_response
	Response *ControlResponse `json:"response,omitempty"`

	// stream_event
	Event *StreamEvent `json:"event,omitempty"`
	// assistant / user
	Message         *APIMessage `json:"message,omitempty"`
	ParentToolUseID *string     `json:"parent_tool_use_id,omitempty"`

	// result
	IsError        bool     `json:"is_error,omitempty"`
	Result         string   `json:"result,omitempty"`
	TerminalReason string   `json:"terminal_reason,omitempty"`
	Errors         []string `json:"errors,omitempty"`
	TotalCostUSD   *float64 `json:"total_cost_usd,omitempty"`
	DurationMS     int64    `json:"duration_ms,omitempty"`
	DurationAPIMS  int64    `json:"duration_api_ms,omitempty"`
	NumTurns       int      `json:"num_turns,omitempty"`
	// ModelUsage is what the process used per model since it started
	// (the CLI's total, not the turn's).
	ModelUsage map[string]ModelUsage `json:"modelUsage,omitempty"`

	// system/init and system/status: the model and permission mode the
	// CLI runs with now.
	Model          string `json:"model,omitempty"`
	PermissionMode string `json:"permissionMode,omitempty"`
	// UUID identifies an entry of the conversation (assistant and user
	// messages); --resume-session-at takes one.
	UUID string `json:"uuid,omitempty"`
	// rate_limit_event
	RateLimitInfo json.RawMessage `json:"rate_limit_info,omitempty"`
	// command_lifecycle: what became of the user message with the id
	// CommandUUID (queued, started: handed to the model, completed,
	// cancelled, ...).
	CommandUUID string `json:"command_uuid,omitempty"`
	State       string `json:"state,omitempty"`

	// A failed API call: the result and the assistant message the CLI
	// makes up for it carry the HTTP status and the API's error type; the
	// CLI's error class ("rate_limit", "authentication_failed", ...) is in
	// Error, a connection failure in APIError.
	IsAPIErrorMessage bool   `json:"is_api_error_message,omitempty"`
	APIErrorStatus    *int   `json:"api_error_status,omitempty"`
	APIErrorType      string `json:"api_error_type,omitempty"`
	APIError          string `json:"api_error,omitempty"`
	Error             string `json:"error,omitempty"`

	// system/api_retry: the CLI waits RetryDelayMS and tries again.
	Attempt      int   `json:"attempt,omitempty"`
	MaxRetries   int   `json:"max_retries,omitempty"`
	RetryDelayMS int64 `json:"retry_delay_ms,omitempty"`
	ErrorStatus  *int  `json:"error_status,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// DecodeMessage decodes one line of the CLI's output. Raw keeps line.
//
// A field of an unexpected JSON type (a newer CLI, a bug) does not lose the
// line: the fields that do decode are kept, so a result still ends its
// turn and the line still reaches clients unchanged.
func DecodeMessage(line []byte) (*Message, error) {
	var m Message
	if err := json.Unmarshal(line, &m); err != nil {
		var fields map[string]json.RawMessage
		if json.Unmarshal(line, &fields) != nil {
			return nil, fmt.Errorf("decode cli message: %w", err)
		}
		m = Message{}
		for key, raw := range fields {
			// Each field alone; one that does not fit stays zero.
			_ = json.Unmarshal(objectOf(key, raw), &m)
		}
	}
	if m.Type == "" {
		return nil, fmt.Errorf("decode cli message: no type")
	}
	m.Raw = line
	return &m, nil
}

// ModelUsage is one model's usage as the CLI's result reports it.
type ModelUsage struct {
	InputTokens              int64   `json:"inputTokens"`
	OutputTokens             int64   `json:"outputTokens"`
	CacheReadInputTokens     int64   `json:"cacheReadInputTokens"`
	CacheCreationInputTokens int64   `json:"cacheCreationInputTokens"`
	WebSearchRequests        int64   `json:"webSearchRequests"`
	CostUSD                  float64 `json:"costUSD"`
}

// objectOf wraps one field back into an object: {"key":raw}.
func objectOf(key string, raw json.RawMessage) []byte {
	k, _ := json.Marshal(key)
	b := make([]byte, 0, len(k)+len(raw)+3)
	b = append(append(append(append(b, '{'), k...), ':'), raw...)
	return append(b, '}')
}

// StreamEvent is the raw API streaming event inside a stream_event line.
type StreamEvent struct {
	Type         string        `json:"type"`
	Index        int           `json:"index"`
	Delta        *StreamDelta  `json:"delta,omitempty"`
	ContentBlock *ContentBlock `json:"content_block,omitempty"`
	Message      *APIMessage   `json:"message,omitempty"`
}

// StreamDelta is the delta of a content_block_delta event.
type StreamDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text,omitempty"`
	PartialJSON string `json:"partial_json,omitempty"`
}

// APIMessage is an assistant or user message. Content given as a plain
// string is turned into one text block.
type APIMessage struct {
	ID      string         `json:"id,omitempty"`
	Role    string         `json:"role"`
	Content []ContentBlock `json:"content"`
}

// UnmarshalJSON accepts content as a string or as a list of blocks.
func (m *APIMessage) UnmarshalJSON(data []byte) error {
	var raw struct {
		ID      string          `json:"id"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	m.ID, m.Role, m.Content = raw.ID, raw.Role, nil
	switch {
	case len(raw.Content) == 0 || string(raw.Content) == "null":
		return nil
	case raw.Content[0] == '"':
		var s string
		if err := json.Unmarshal(raw.Content, &s); err != nil {
			return err
		}
		m.Content = []ContentBlock{{Type: "text", Text: s}}
		return nil
	default:
		return json.Unmarshal(raw.Content, &m.Content)
	}
}

// ContentBlock is one block of a message: text, thinking, tool_use or
// tool_result.
type ContentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
}

// ControlRequest is the body of a control request from the CLI. Only the
// fields for the subtypes the supervisor handles are typed; Raw has all.
type ControlRequest struct {
	Subtype string `json:"subtype"`

	// can_use_tool
	ToolName       string          `json:"tool_name,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	ToolUseID      string          `json:"tool_use_id,omitempty"`
	DecisionReason json.RawMessage `json:"decision_reason,omitempty"`
	BlockedPath    string          `json:"blocked_path,omitempty"`
	Title          string          `json:"title,omitempty"`
	Description    string          `json:"description,omitempty"`
	Suggestions    json.RawMessage `json:"permission_suggestions,omitempty"`

	// hook_callback
	CallbackID string          `json:"callback_id,omitempty"`
	HookInput  json.RawMessage `json:"-"`

	// mcp_message
	ServerName string          `json:"server_name,omitempty"`
	MCPMessage json.RawMessage `json:"message,omitempty"`
}

// UnmarshalJSON decodes the request; a hook_callback's input is kept raw in
// HookInput because its shape depends on the hook event.
func (r *ControlRequest) UnmarshalJSON(data []byte) error {
	type plain ControlRequest
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*r = ControlRequest(p)
	if r.Subtype == "hook_callback" {
		r.HookInput, r.Input = r.Input, nil
	}
	return nil
}

// ControlResponse is the body of a control_response.
type ControlResponse struct {
	Subtype   string          `json:"subtype"`
	RequestID string          `json:"request_id"`
	Response  json.RawMessage `json:"response,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// HookInput is the common part of a hook callback's input.
type HookInput struct {
	SessionID     string          `json:"session_id"`
	Cwd           string          `json:"cwd"`
	HookEventName string          `json:"hook_event_name"`
	ToolName      string          `json:"tool_name"`
	ToolInput     json.RawMessage `json:"tool_input"`
	ToolUseID     string          `json:"tool_use_id"`
}
