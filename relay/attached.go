package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/clientevent"
)

// What a message carries besides its text (files, attached notes) goes
// with it from the request to the CLI: the session keeps it on the
// message's ticket while the message waits, shows the files and notes in
// the turn's start and in both histories, and hands the content blocks to
// the CLI with the text. A conversation imported into a new session is
// an event of its own at the start of the log and goes to the model with
// the session's first message.

// Attached is what a message carries besides its text.
type Attached struct {
	// Files are the uploaded files and Notes the attached notes, as the
	// turn's start and the histories show them.
	Files []attachments.File
	Notes []string
	// Content is the blocks the model reads before the text, and their
	// digest: a resend of the same text joins a message only if it
	// carries the same content.
	Content attachments.Content
}

// importedEvent is a conversation imported into a new session, the first
// event of its log.
type importedEvent struct {
	Type     string                     `json:"type"`
	Messages []attachments.HistoryEntry `json:"messages"`
}

func (importedEvent) EventType() string { return "imported" }

// CreateWithHistory makes a new session of the person's that continues an
// earlier conversation (attachments.CheckHistory has accepted it): both
// histories show it first, and the model gets it with the session's first
// message. No history is a plain new session.
func (r *Registry) CreateWithHistory(person string, history []attachments.HistoryEntry) (*Session, error) {
	c, err := r.create(person)
	if err != nil || len(history) == 0 {
		return c, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.stream.publishJSON(importedEvent{Type: "imported", Messages: history}, false, false); e != nil {
		c.observeLocked(e, nil)
	}
	c.persistLocked()
	return c, nil
}

// startingTicketLocked is the message whose turn starts next on the
// stream: the first one sent whose turn has not started. c.mu is held.
func (c *Session) startingTicketLocked() *Ticket {
	for _, t := range c.queue.sent {
		if t.turn == 0 && !isClosed(t.started) {
			return t
		}
	}
	return nil
}

// withAttachedLocked adds the files and notes of the message whose turn
// starts to its turn_start. c.mu is held.
func (c *Session) withAttachedLocked(start clientevent.TurnStart) clientevent.TurnStart {
	if t := c.startingTicketLocked(); t != nil {
		start.Attachments, start.Notes = t.attached.Files, t.attached.Notes
	}
	return start
}

// blocksLocked is the content blocks t's message goes to the model with:
// an imported conversation first, while the CLI has no conversation of
// the session yet, then the message's own. c.mu is held.
func (c *Session) blocksLocked(t *Ticket) []json.RawMessage {
	var blocks []json.RawMessage
	if len(c.imported) > 0 && c.cli.CLISessionID() == "" {
		blocks = append(blocks, attachments.HistoryBlock(c.imported))
	}
	return append(blocks, t.attached.Content.Blocks...)
}

// sendTicket starts t's turn: Send with the content blocks it carries.
func (r *Registry) sendTicket(ctx context.Context, c *Session, t *Ticket) error {
	c.mu.Lock()
	blocks := c.blocksLocked(t)
	c.mu.Unlock()
	if len(t.attached.Files) > 0 && r.cfg.Wrote != nil {
		r.cfg.Wrote(c.ID)
	}
	if len(blocks) == 0 {
		return r.Send(ctx, c, t.Message)
	}
	return r.sendContent(ctx, c, t.Message, blocks)
}

// compatUserContent is the person's message as the compat history shows
// it: the text, then a line per attached file.
func compatUserContent(text string, files []attachments.File) string {
	if len(files) == 0 {
		return text
	}
	var sb strings.Builder
	sb.WriteString(text)
	for i, f := range files {
		if i > 0 || text != "" {
			sb.WriteString("\n")
		}
		fmt.Fprintf(&sb, "[attached: %s]", f.Name)
	}
	return sb.String()
}
