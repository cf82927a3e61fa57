package relay

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/google/uuid"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
)

// A message sent with steer while a turn runs goes into that turn instead
// of waiting behind it: the CLI hands it to the model at the turn's next
// request (supervisor.CLI.Steer). The session shows it where it went in
// (a steered event), and its ticket follows the rest of that turn to the
// turn's one end. With no turn running it is an ordinary message.

// ErrNotSteered ends a message given to a turn that ended before the
// message reached the model (interrupted, failed).
var ErrNotSteered = errors.New("the turn ended before your message reached the assistant; send it again if you still want it")

// Steer gives text to chat's running turn, or, with no turn running,
// hands it over as Submit does; steered says which. A steered message's
// ticket starts when the message went in: its turn is the running one,
// from that point on. A message over a budget is refused as Admit does.
func (s *Registry) Steer(c *Session, text string, o SubmitOptions) (t *Ticket, steered bool, err error) {
	s.mu.Lock()
	down := s.shutdown
	s.mu.Unlock()
	if down {
		return nil, false, ErrShutdown
	}
	c.mu.Lock()
	if c.terminal {
		c.mu.Unlock()
		return nil, false, ErrTerminalOpen
	}
	if o.Stream {
		// A client sending its steer again after a dropped connection
		// follows the one on its way.
		for _, p := range c.steers {
			if p.Message == text && p.stream && p.err == nil {
				c.mu.Unlock()
				return p, true, nil
			}
		}
	}
	running := c.queue.current != nil
	c.mu.Unlock()
	if !running {
		t, err := s.Submit(c, text, o)
		return t, false, err
	}
	if err := s.Admit(c, text); err != nil {
		if !o.Stream {
			return nil, false, err
		}
		// A stream says so in its own way, as for a message that
		// was refused as it was about to start.
		t = newTicket(text, s.cfg.Now())
		t.err = err
		close(t.started)
		return t, true, nil
	}
	t = newTicket(text, s.cfg.Now())
	// The message's id in the conversation is its ticket's: the steered
	// event names it as the request's answer did.
	t.ID = uuid.NewString()
	t.stream, t.opened = o.Stream, o.Opened
	c.mu.Lock()
	c.steers = append(c.steers, t)
	c.mu.Unlock()
	if err := c.cli.Steer(c.ctx, t.ID, text); err != nil {
		c.mu.Lock()
		c.steers = slices.DeleteFunc(c.steers, func(p *Ticket) bool { return p == t })
		c.mu.Unlock()
		if errors.Is(err, supervisor.ErrNotRunning) {
			// The turn ended (or is stopping) meanwhile: the message
			// is an ordinary one.
			t, err := s.Submit(c, text, o)
			return t, false, err
		}
		return nil, false, err
	}
	return t, true, nil
}

// steerSees follows the messages given to the running turn through the
// session's events: ev as applied, published the last event it made (nil
// if none). c.mu is held.
func (c *Session) steerSees(ev supervisor.Event, published *Event) {
	switch ev.Kind {
	case supervisor.EventSteered, supervisor.EventSteerDropped:
		i := slices.IndexFunc(c.steers, func(t *Ticket) bool { return t.ID == ev.MessageID })
		if i < 0 {
			return
		}
		t := c.steers[i]
		if isClosed(t.started) {
			return
		}
		if ev.Kind == supervisor.EventSteerDropped || published == nil {
			c.steers = slices.Delete(c.steers, i, i+1)
			t.err = ErrNotSteered
			close(t.started)
			return
		}
		// Its answer is the rest of the turn, from its steered event on.
		t.turn, t.startSeq = published.Turn, published.Seq-1
		close(t.started)
	case supervisor.EventTurnEnd:
		// The messages that went into the turn end with it; a client
		// that sends one again without having read its end gets that end
		// (resend). One still on its way belongs to the CLI's next turn,
		// given while this end waited for its hook: the CLI drops a
		// turn's own before the turn ends (EventSteerDropped).
		q := &c.queue
		kept := c.steers[:0]
		for _, t := range c.steers {
			if !isClosed(t.started) {
				kept = append(kept, t)
				continue
			}
			t.ended = ev.Time
			q.recent = append(q.recent, t)
		}
		if len(q.recent) > recentTurns {
			q.recent = q.recent[len(q.recent)-recentTurns:]
		}
		clear(c.steers[len(kept):])
		c.steers = kept
	}
}

// observeSteered keeps a steered message in the compat history: a user
// message before the answer of the turn it went into. body as for
// observe. c.mu is held.
func (h *chatHistory) observeSteered(ev *Event, body clientevent.Body) {
	e, ok := body.(clientevent.Steered)
	if !ok {
		_ = json.Unmarshal(ev.Line, &e)
	}
	h.messages = append(h.messages, ChatMessage{Role: "user", Content: e.Message})
}
