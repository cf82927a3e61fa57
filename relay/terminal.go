package relay

import (
	"errors"
	"time"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/supervisor"
)

// One writer per conversation: while the conversation is open in a
// terminal (the interactive claude on the same CLI conversation), the
// session's own CLI is stopped and app messages are refused; once the
// terminal closes, the next message resumes the conversation with what
// happened in the terminal.

// ErrTerminalOpen refuses an app message while the conversation is open in
// a terminal.
var ErrTerminalOpen = errors.New("this conversation is open in the terminal; close the terminal to continue it here")

// terminalEvent is terminal_opened or terminal_closed on the events stream
// (never on the compat stream: it belongs to no turn).
type terminalEvent struct {
	Type string `json:"type"`
}

func (e terminalEvent) EventType() string { return e.Type }

// OpenTerminal hands the conversation to a terminal: it refuses while a
// turn runs or messages wait (supervisor.ErrBusy) and when a terminal has
// it already (ErrTerminalOpen), then stops the session's idle CLI and
// returns the CLI conversation id the terminal resumes ("" before the
// first turn). Attached clients see terminal_opened.
func (c *Session) OpenTerminal() (cliSessionID string, err error) {
	c.mu.Lock()
	if err := c.terminalRefusedLocked(); err != nil {
		c.mu.Unlock()
		return "", err
	}
	c.terminal = true
	c.stream.publishJSON(terminalEvent{Type: "terminal_opened"}, false, false)
	c.mu.Unlock()
	// No turn can start now, so the CLI stays stopped until the terminal
	// closes.
	c.cli.StopIfIdle()
	return c.cli.CLISessionID(), nil
}

// CanOpenTerminal reports what OpenTerminal would refuse now (nil: it
// would hand the conversation over), changing nothing: a terminal's
// client is refused before its connection is upgraded.
func (c *Session) CanOpenTerminal() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.terminalRefusedLocked()
}

// terminalRefusedLocked is the one-writer rule for a terminal: none while
// a terminal has the conversation, a turn runs, messages wait or a rewind
// or fork holds the session. c.mu is held.
func (c *Session) terminalRefusedLocked() error {
	switch {
	case c.terminal:
		return ErrTerminalOpen
	case c.queue.current != nil, len(c.queue.waiting) > 0, c.queue.holder != "", c.held.waiting(), c.cli.State() != supervisor.StateIdle:
		return supervisor.ErrBusy
	}
	return nil
}

// CloseTerminal gives the conversation back to the app: the next message
// resumes cliSessionID (the terminal's conversation; "" keeps the
// session's). Attached clients see terminal_closed.
func (c *Session) CloseTerminal(cliSessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.terminal {
		return
	}
	c.terminal = false
	c.cli.Resume(cliSessionID)
	c.lastActivity = time.Now()
	c.stream.publishJSON(terminalEvent{Type: "terminal_closed"}, false, false)
	if c.ctx.Err() == nil {
		// Not cleared meanwhile: the session keeps the conversation.
		c.persistLocked()
	}
}

// terminalTurnsEvent shows the turns said in a terminal of the session,
// once it closed (events stream only: it belongs to no turn).
type terminalTurnsEvent struct {
	Type     string                     `json:"type"`
	Messages []attachments.HistoryEntry `json:"messages"`
}

func (terminalTurnsEvent) EventType() string { return "terminal_turns" }

// LastEntry is the CLI's id of the conversation's last assistant entry
// the app knows ("" before the first answer).
func (c *Session) LastEntry() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tr.LastEntry()
}

// TerminalTurns shows the messages said in the session's terminal to its
// clients and in both histories (a terminal_turns event, without the
// server's paths), and takes last, the terminal's newest entry, as the
// conversation's last: the next message follows it, and the terminal's
// next turns are read from there.
func (c *Session) TerminalTurns(msgs []attachments.HistoryEntry, last string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	shown := make([]attachments.HistoryEntry, len(msgs))
	for i, m := range msgs {
		shown[i] = attachments.HistoryEntry{Role: m.Role, Content: c.redact.Text(m.Content)}
	}
	if e := c.stream.publishJSON(terminalTurnsEvent{Type: "terminal_turns", Messages: shown}, false, false); e != nil {
		c.observeLocked(e, nil)
	}
	if last != "" {
		c.tr.RewindTo(last)
	}
	c.persistLocked()
}

// TerminalOpen reports whether a terminal has the conversation.
func (c *Session) TerminalOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.terminal
}

// Notice publishes something the person should know (a status) to the
// session's clients.
func (c *Session) Notice(text string) {
	c.Publish(supervisor.Event{Kind: supervisor.EventNotice, Text: text, Time: time.Now()})
}
