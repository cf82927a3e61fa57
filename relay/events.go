package relay

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/majorhq/major/supervisor"
)

// typed is an event body that knows its type.
type typed interface{ eventType() string }

// The compat events, exactly as shared/seeds/004 lists them: strict client
// decoders reject unknown keys, so each struct has only those.
type (
	textEvent struct {
		Type  string `json:"type"`
		Delta string `json:"delta"`
	}
	statusEvent struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	toolEvent struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	doneEvent struct {
		Type      string `json:"type"`
		SessionID string `json:"session_id"`
	}
	errorEvent struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

// The richer events of the per-session stream.
type (
	// cliEvent carries one CLI message unchanged.
	cliEvent struct {
		Type  string          `json:"type"`
		Event json.RawMessage `json:"event"`
	}
	// turnStartEvent opens a turn with the person's message.
	turnStartEvent struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

func (textEvent) eventType() string      { return "text" }
func (statusEvent) eventType() string    { return "status" }
func (toolEvent) eventType() string      { return "tool" }
func (doneEvent) eventType() string      { return "done" }
func (errorEvent) eventType() string     { return "error" }
func (cliEvent) eventType() string       { return "cli" }
func (turnStartEvent) eventType() string { return "turn_start" }

// translator turns one session's supervisor events into relay events. It
// keeps what the compat format needs across lines: which API messages had
// streamed text, the names of running tools, the turn's text so far.
type translator struct {
	sessionID string
	streamed  map[string]bool   // API message ids whose text came as deltas
	current   string            // API message id being streamed
	tools     map[string]string // tool_use_id -> tool name
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
		return []out{{body: turnStartEvent{Type: "turn_start", Message: ev.Text}, beginTurn: true}}
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
		if m.Message == nil {
			break
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
					out{body: toolEvent{Type: "tool", Name: b.Name, Input: input}})
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
				outs = append(outs, out{body: statusEvent{Type: "status", Message: "Tool finished: " + name}})
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
	done := out{body: doneEvent{Type: "done", SessionID: t.sessionID}, terminal: true}
	switch {
	case ev.Interrupted:
		return []out{{body: statusEvent{Type: "status", Message: "Interrupted"}}, done}
	case ev.Err != nil:
		return []out{{body: errorEvent{Type: "error", Message: turnErrorMessage(ev.Err)}, terminal: true}}
	case ev.Msg != nil && ev.Msg.IsError:
		return []out{{body: errorEvent{Type: "error", Message: resultErrorMessage(ev.Msg)}, terminal: true}}
	}
	return []out{done}
}

// turnErrorMessage is what a person reads when a turn broke.
func turnErrorMessage(err error) string {
	switch {
	case errors.Is(err, supervisor.ErrStalled):
		return "The assistant stopped responding and was restarted. Please send your message again."
	case errors.Is(err, supervisor.ErrClosed):
		return "The session was closed."
	case errors.Is(err, supervisor.ErrProcessExited):
		return "The assistant process exited unexpectedly; your next message continues the conversation. (" + oneLine(err.Error(), 300) + ")"
	}
	return oneLine(err.Error(), 500)
}

func resultErrorMessage(m *supervisor.Message) string {
	switch {
	case m.Result != "":
		return oneLine(m.Result, 500)
	case len(m.Errors) > 0:
		return oneLine(strings.Join(m.Errors, "; "), 500)
	case m.Subtype != "":
		return "The turn ended with an error (" + m.Subtype + ")."
	}
	return "The turn ended with an error."
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
