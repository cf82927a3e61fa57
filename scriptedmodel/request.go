// Package scriptedmodel is a stand-in for the Anthropic Messages API that the
// real Claude Code CLI can talk to through ANTHROPIC_BASE_URL. Each reply is
// chosen by a Responder: tests script it per case, and the offline demo uses
// the directive script in script.go.
package scriptedmodel

import (
	"encoding/json"
	"strings"
)

// Request is the part of a Messages API request that responders look at.
type Request struct {
	Model    string          `json:"model"`
	System   json.RawMessage `json:"system,omitempty"`
	Messages []Message       `json:"messages"`
	Tools    []Tool          `json:"tools,omitempty"`
	Stream   bool            `json:"stream"`
	// Raw is the request body as received.
	Raw []byte `json:"-"`
}

// Tool is a tool definition offered to the model.
type Tool struct {
	Name string `json:"name"`
}

// Message is one conversation message; string content is normalised into a
// single text block.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// Block is a content block of any type the CLI sends.
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// Source is an image's or a document's data, and Title a
	// document's name.
	Source *Source `json:"source,omitempty"`
	Title  string  `json:"title,omitempty"`
}

// Source is where an image or document block's content is: base64 data
// of a media type (or a URL, or text, as the API also takes).
type Source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// UnmarshalJSON accepts content as a plain string or as a list of blocks.
func (m *Message) UnmarshalJSON(data []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	m.Role = raw.Role
	m.Content = nil
	if len(raw.Content) > 0 && raw.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(raw.Content, &s); err != nil {
			return err
		}
		m.Content = []Block{{Type: "text", Text: s}}
		return nil
	}
	if len(raw.Content) == 0 || string(raw.Content) == "null" {
		return nil
	}
	return json.Unmarshal(raw.Content, &m.Content)
}

// ResultText renders a tool_result block's content as plain text.
func (b Block) ResultText() string {
	if len(b.Content) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []Block
	if json.Unmarshal(b.Content, &parts) == nil {
		var sb strings.Builder
		for _, p := range parts {
			sb.WriteString(p.Text)
		}
		return sb.String()
	}
	return string(b.Content)
}

// LastUser returns the last user message, or an empty one.
func (r Request) LastUser() Message {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i]
		}
	}
	return Message{}
}

// ToolResults returns the tool_result blocks of the last user message: a
// non-empty slice means the CLI is reporting the outcome of a tool call.
func (r Request) ToolResults() []Block {
	var out []Block
	for _, b := range r.LastUser().Content {
		if b.Type == "tool_result" {
			out = append(out, b)
		}
	}
	return out
}

// UserTexts returns the text the person typed in every user message, in
// order, leaving out tool results and the CLI's own reminders.
func (r Request) UserTexts() []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		for _, b := range m.Content {
			if b.Type == "text" && !cliNote(b.Text) {
				out = append(out, b.Text)
			}
		}
	}
	return out
}

// LastUserText is the last text the person typed, or "": the last text
// block of the last user message, but for the CLI's own reminders and
// its notes on where it saved an image it was sent.
func (r Request) LastUserText() string {
	var last string
	for _, b := range r.LastUser().Content {
		if b.Type == "text" && !cliNote(b.Text) {
			last = b.Text
		}
	}
	return last
}

// cliNote reports whether a text block is one the CLI adds to a user
// message itself: a system reminder, or where it saved an image of the
// message ("[Image: source: /tmp/...]").
func cliNote(text string) bool {
	return strings.HasPrefix(text, "<system-reminder>") || strings.HasPrefix(text, "[Image: source: ")
}

// HasTool reports whether the request offers the named tool.
func (r Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}
