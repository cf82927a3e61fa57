package relay

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/clientevent"
)

// RichMessage is one entry of a session's rich history: the person's message
// of a turn, or the assistant's answer with its tool calls and how the
// turn ended. The compat history (ChatMessage) is the same conversation in
// the seed's shape.
type RichMessage struct {
	// ID is stable for the life of the session: "turn-N-user" or
	// "turn-N-assistant".
	ID   string `json:"id"`
	Role string `json:"role"`
	Turn int    `json:"turn"`
	// Rewound marks a message the conversation was rewound to before.
	Rewound bool `json:"rewound,omitempty"`
	// Imported marks a message of a conversation imported when the
	// session was made (turn 0, id imported-N).
	Imported bool `json:"imported,omitempty"`
	// Terminal marks a message said in the session's terminal.
	Terminal bool `json:"terminal,omitempty"`
	// Attachments are the files the person's message carried, and Notes
	// the notes attached to it.
	Attachments []attachments.File `json:"attachments,omitempty"`
	Notes       []string           `json:"notes,omitempty"`
	// Content is the whole text: the person's message, or every text
	// the assistant wrote in the turn.
	Content string `json:"content"`
	// Parts are the assistant's texts and tool calls, in order, and the
	// person's messages that went into the turn while it ran (steered)
	// where they went in.
	Parts []RichPart `json:"parts,omitempty"`
	// Outcome is running, success, interrupted or error (assistant only).
	Outcome    string     `json:"outcome,omitempty"`
	Error      *TurnError `json:"error,omitempty"`
	CostUSD    *float64   `json:"cost_usd,omitempty"`
	DurationMS int64      `json:"duration_ms,omitempty"`
}

// RichPart is a text, a tool call with its result, or a message of the
// person's that went into the running turn (steered: Text is the
// message).
type RichPart struct {
	Type  string          `json:"type"` // text, tool or steered
	Text  string          `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// Result is the tool's result text (nil while it runs, or for a call
	// whose result was not recorded).
	Result    *string `json:"result,omitempty"`
	IsError   bool    `json:"is_error,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
}

// TurnError is why a turn failed, as its error event said.
type TurnError struct {
	Kind       string `json:"kind,omitempty"`
	Message    string `json:"message"`
	Status     int    `json:"status,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// Messages builds the rich history from the session's event log: the
// client-facing events, which compaction keeps.
func (c *Session) Messages() []RichMessage {
	var out []RichMessage
	cur := -1 // index of the assistant message of the turn being read
	for _, ev := range c.stream.Events(0) {
		switch ev.Type {
		case "turn_start", "text", "tool", "tool_result", "steered", "done", "error":
		case "imported":
			var e importedEvent
			if json.Unmarshal(ev.Line, &e) == nil {
				for _, m := range e.Messages {
					out = append(out, RichMessage{ID: "imported-" + strconv.Itoa(len(out)+1), Role: m.Role, Content: m.Content, Imported: true})
				}
			}
			continue
		case "terminal_turns":
			var e terminalTurnsEvent
			if json.Unmarshal(ev.Line, &e) == nil {
				for _, m := range e.Messages {
					out = append(out, RichMessage{ID: "terminal-" + strconv.Itoa(len(out)+1), Role: m.Role, Content: m.Content, Terminal: true})
				}
			}
			continue
		case "rewound":
			// The conversation went back to before that turn: what came
			// after stays readable, marked.
			var r clientevent.Rewound
			if json.Unmarshal(ev.Line, &r) == nil && r.Conversation {
				for i := range out {
					if out[i].Turn >= r.Turn {
						out[i].Rewound = true
					}
				}
			}
			continue
		default:
			continue
		}
		var e struct {
			Message    string          `json:"message"`
			Delta      string          `json:"delta"`
			ID         string          `json:"id"`
			Name       string          `json:"name"`
			Input      json.RawMessage `json:"input"`
			Content    string          `json:"content"`
			IsError    bool            `json:"is_error"`
			Truncated  bool            `json:"truncated"`
			Outcome    string          `json:"outcome"`
			CostUSD    *float64        `json:"cost_usd"`
			DurationMS int64           `json:"duration_ms"`
			Kind       string          `json:"kind"`
			Status     int             `json:"status"`
			RetryAfter int             `json:"retry_after"`
			// turn_start's
			Attachments []attachments.File `json:"attachments"`
			Notes       []string           `json:"notes"`
		}
		if json.Unmarshal(ev.Line, &e) != nil {
			continue
		}
		if ev.Type == "turn_start" {
			n := strconv.Itoa(ev.Turn)
			out = append(out,
				RichMessage{ID: "turn-" + n + "-user", Role: "user", Turn: ev.Turn, Content: e.Message, Attachments: e.Attachments, Notes: e.Notes},
				RichMessage{ID: "turn-" + n + "-assistant", Role: "assistant", Turn: ev.Turn, Outcome: "running"})
			cur = len(out) - 1
			continue
		}
		if cur < 0 || out[cur].Turn != ev.Turn || out[cur].Outcome != "running" {
			continue // not inside a turn
		}
		assistant := &out[cur]
		switch ev.Type {
		case "text":
			if n := len(assistant.Parts); n > 0 && assistant.Parts[n-1].Type == "text" {
				assistant.Parts[n-1].Text += e.Delta
			} else {
				assistant.Parts = append(assistant.Parts, RichPart{Type: "text", Text: e.Delta})
			}
		case "tool":
			assistant.Parts = append(assistant.Parts, RichPart{Type: "tool", ID: e.ID, Name: e.Name, Input: e.Input})
		case "steered":
			assistant.Parts = append(assistant.Parts, RichPart{Type: "steered", Text: e.Message})
		case "tool_result":
			for i := range assistant.Parts {
				p := &assistant.Parts[i]
				if p.Type == "tool" && p.ID != "" && p.ID == e.ID {
					result := e.Content
					p.Result, p.IsError, p.Truncated = &result, e.IsError, e.Truncated
					break
				}
			}
		case "done", "error":
			assistant.Outcome = e.Outcome
			if assistant.Outcome == "" {
				assistant.Outcome = "success" // logged before outcomes were recorded
			}
			if ev.Type == "error" {
				assistant.Outcome = "error"
				assistant.Error = &TurnError{Kind: e.Kind, Message: e.Message, Status: e.Status, RetryAfter: e.RetryAfter}
			}
			assistant.CostUSD, assistant.DurationMS = e.CostUSD, e.DurationMS
		}
	}
	for i := range out {
		// An imported or terminal answer has its text already, no parts.
		if out[i].Role != "assistant" || out[i].Imported || out[i].Terminal {
			continue
		}
		var sb strings.Builder
		for j := range out[i].Parts {
			p := &out[i].Parts[j]
			// Each event was redacted alone; a path the model wrote
			// across deltas is whole only in the text they make.
			p.Text = c.redact.Text(p.Text)
			if p.Type == "text" {
				sb.WriteString(p.Text)
			}
		}
		out[i].Content = sb.String()
	}
	if out == nil {
		out = []RichMessage{}
	}
	return out
}

// History returns a copy of the session's messages, as its clients may
// read them.
func (c *Session) History() []ChatMessage {
	h := c.lockHistory()
	defer c.mu.Unlock()
	out := make([]ChatMessage, len(h.messages))
	for i, m := range h.messages {
		// The text as a whole: a path the model wrote across deltas.
		out[i] = ChatMessage{Role: m.Role, Content: c.redact.Text(m.Content)}
	}
	return out
}

const answerHeadBytes = 1024

// chatHistory is the compat history, built from a session's events in
// order.
type chatHistory struct {
	messages []ChatMessage
	at       map[int]int     // turn → index of its user message in messages
	turnText strings.Builder // the assistant's text in the open turn
}

// observe takes the next event into the history; body as for
// Session.observe.
func (h *chatHistory) observe(ev *Event, body clientevent.Body) {
	switch {
	case ev.Type == "imported", ev.Type == "terminal_turns":
		// Both carry {messages: [{role, content}]}.
		var e importedEvent
		_ = json.Unmarshal(ev.Line, &e)
		for _, m := range e.Messages {
			h.messages = append(h.messages, ChatMessage{Role: m.Role, Content: m.Content})
		}
	case ev.Type == "rewound":
		e, ok := body.(clientevent.Rewound)
		if !ok {
			_ = json.Unmarshal(ev.Line, &e)
		}
		if at, ok := h.at[e.Turn]; ok && e.Conversation && at <= len(h.messages) {
			h.messages = h.messages[:at]
		}
	case ev.Type == "turn_start":
		e, ok := body.(clientevent.TurnStart)
		if !ok {
			_ = json.Unmarshal(ev.Line, &e)
		}
		if h.at == nil {
			h.at = map[int]int{}
		}
		h.at[ev.Turn] = len(h.messages)
		h.messages = append(h.messages, ChatMessage{Role: "user", Content: compatUserContent(e.Message, e.Attachments)})
		h.turnText.Reset()
	case ev.Type == "steered":
		h.observeSteered(ev, body)
	case ev.Type == "text":
		e, ok := body.(clientevent.Text)
		if !ok {
			_ = json.Unmarshal(ev.Line, &e)
		}
		h.turnText.WriteString(e.Delta)
	case ev.Terminal:
		if content := historyAnswer(h.turnText.String(), ev, body); content != "" {
			h.messages = append(h.messages, ChatMessage{Role: "assistant", Content: content})
		}
		h.turnText.Reset()
	}
}

// historyAnswer is the assistant's entry in the compat history for a turn
// that ended with ev (a done or error event; body as for observeLocked): the
// turn's text, and for a turn that did not complete, a marker saying so,
// so a partial answer never reads as a whole one.
func historyAnswer(text string, ev *Event, body clientevent.Body) string {
	var end struct {
		Message string `json:"message"`
		Outcome string `json:"outcome"`
	}
	switch b := body.(type) {
	case clientevent.Done:
		end.Outcome = b.Outcome
	case clientevent.Error:
		end.Message = b.Message
	default:
		_ = json.Unmarshal(ev.Line, &end)
	}
	var marker string
	switch {
	case ev.Type == "error":
		marker = "[Failed: " + end.Message + "]"
	case end.Outcome == "interrupted":
		marker = "[Interrupted]"
	default:
		return text
	}
	if text == "" {
		return marker
	}
	return text + "\n\n" + marker
}
