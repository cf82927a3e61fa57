package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
)

// The compat endpoints speak the seed clients' format (shared/seeds/004):
// NDJSON lines with exactly the seed's keys. The lines of the turn itself
// come encoded from the relay (relay.Event.Compat); the lines here are
// the ones only a compat stream has: waiting, pings, and the error that
// ends a stream cut short.
type (
	textLine struct {
		Type  string `json:"type"`
		Delta string `json:"delta"`
	}
	statusLine struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	errorLine struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

var pingLine = []byte(`{"type":"ping"}`)

// chatStream is the compat streaming endpoint of shared/seeds/004.
func (s *Server) chatStream(c *gin.Context) {
	chat, t, _, detach, ok := s.chatTicket(c, true)
	if !ok {
		return
	}
	defer detach()
	w := newLineWriter(c, s.cfg.WriteTimeout)
	// The headers go out at once: a proxy with an idle limit must not cut
	// a message that waits for its turn.
	if w.flush() != nil {
		return
	}
	ctx := c.Request.Context()
	status := func(msg string) error { return w.line(mustJSON(statusLine{Type: "status", Message: msg})) }
	ping := func() error { return w.line(pingLine) }
	err := s.awaitTurn(ctx, t, status, ping)
	if err == nil {
		var done bool
		done, err = s.followTurn(ctx, chat, t, func(ev *relay.Event) error {
			if ev.Compat == nil {
				return nil // not an event the compat clients know
			}
			if !ev.Terminal {
				return w.line(ev.Compat)
			}
			// The answer counts as delivered before its last line goes
			// out: a client that has read it may send the same words at
			// once, and that is a new message, not a resend of this one.
			// So a client that closes the connection after the line went
			// out is no sign of a lost answer (the apps all do so); a
			// client already gone gets nothing, however the write to its
			// closed connection turns out, and its resend gets this
			// answer.
			if ctx.Err() != nil {
				return ctx.Err()
			}
			chat.Delivered(t, true)
			if err := w.line(ev.Compat); err != nil {
				chat.Delivered(t, false)
				return err
			}
			return nil
		}, ping)
		if done {
			return
		}
	}
	if ctx.Err() != nil || w.err != nil {
		return // the client is gone
	}
	_ = w.line(mustJSON(errorLine{Type: "error", Message: s.clientText(c, streamEndMessage(err))}))
}

// streamEndMessage is what a compat client reads when its turn could not
// be streamed to the end: it never started, or the stream was cut.
func streamEndMessage(err error) string {
	switch {
	case errors.Is(err, relay.ErrSlow):
		return "This connection fell too far behind and was cut off; the answer continues in the session."
	case errors.Is(err, relay.ErrStreamClosed), errors.Is(err, supervisor.ErrClosed):
		return "The session was closed."
	case errors.Is(err, errShuttingDown), errors.Is(err, relay.ErrShutdown):
		return "The server is shutting down; send your message again shortly."
	case errors.Is(err, relay.ErrCancelled):
		return "Your message was cancelled before it ran."
	case errors.Is(err, relay.ErrNotSteered):
		return "The answer ended before your message reached the assistant; send it again if you still want it."
	case errors.Is(err, relay.ErrOverBudget):
		return err.Error()
	case errors.Is(err, supervisor.ErrNoSlot), errors.Is(err, relay.ErrUnavailable):
		return "The server is busy; send your message again shortly."
	}
	return "Your message could not be run: " + errText(err)
}

// chat is the compat non-streaming endpoint: the same turn, answered as one
// JSON object.
func (s *Server) chat(c *gin.Context) {
	chat, t, _, detach, ok := s.chatTicket(c, false)
	if !ok {
		return
	}
	defer detach()
	ctx := c.Request.Context()
	if err := s.awaitTurn(ctx, t, nil, nil); err != nil {
		if ctx.Err() == nil {
			s.fail(c, err)
		}
		return
	}
	var text strings.Builder
	var terminal *relay.Event
	done, err := s.followTurn(ctx, chat, t, func(ev *relay.Event) error {
		switch {
		case ev.Terminal:
			terminal = ev
		case ev.Type == "text":
			var t textLine
			if json.Unmarshal(ev.Compat, &t) == nil {
				text.WriteString(t.Delta)
			}
		}
		return nil
	}, nil)
	if !done {
		if ctx.Err() == nil {
			s.fail(c, &apiError{http.StatusServiceUnavailable, "the turn did not finish: " + errText(err)})
		}
		return
	}
	chat.Delivered(t, true)
	if terminal.Type == "error" {
		var e errorLine
		_ = json.Unmarshal(terminal.Compat, &e)
		c.JSON(http.StatusBadGateway, gin.H{"error": e.Message, "session_id": chat.ID})
		return
	}
	// Each text event was redacted alone; a path across two is whole here.
	c.JSON(http.StatusOK, gin.H{"session_id": chat.ID, "response": chat.ClientText(text.String()), "history": chat.History()})
}
