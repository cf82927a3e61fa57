package relay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/majorhq/major/supervisor"
)

// The rule of a turn, as the supervisor keeps it and the relay checks it:
// a turn starts once and ends once, its end never comes before its start,
// and its events come between the two. A session follows the CLI's turn
// as its events arrive (cliTurn) and does not let a CLI that breaks the
// rule wedge the chat or give a client two endings or none:
//   - an end with no open turn, or one for another turn than the open
//     one, is ignored (and logged);
//   - a CLI message outside a turn is ignored (and logged): it belongs to
//     no client's message (one about the whole session, such as its rate
//     limits, is kept);
//   - a start while a turn is open first ends the open one as crashed;
//   - a message whose Send returned without its turn having started fails
//     (ErrNotStarted), and one whose turn started but whose Send failed
//     ends with that error;
//   - an interrupt of a turn the CLI no longer runs ends it.
// So every message gets its one done or error, and the session takes the
// next one.

// ErrNotStarted fails a message that the CLI took without starting its
// turn.
var ErrNotStarted = fmt.Errorf("%w: the assistant did not start the turn", ErrUnavailable)

// errLostTurn ends a turn the CLI forgot: it started another one, or it
// no longer runs one.
var errLostTurn = fmt.Errorf("%w: the assistant lost the turn", supervisor.ErrProcessExited)

// cliTurn is the CLI's turn as its events arrive, before any of them wait
// behind a turn-end hook. It is guarded by Session.mu.
type cliTurn struct {
	// open: a turn has started and not ended; number is the supervisor's
	// number of it (0: the CLI does not number its turns); ticket is the
	// message it runs.
	open   bool
	number int
	ticket *Ticket
}

// verdict is what a session does with an event of its CLI.
type verdict int

const (
	admit      verdict = iota
	ignore             // breaks the rule: logged and dropped
	closeFirst         // a start while a turn is open: end that one first
)

// check applies the turn rule to ev as it arrives.
func (t *cliTurn) check(ev supervisor.Event) verdict {
	switch ev.Kind {
	case supervisor.EventTurnStart:
		if t.open {
			return closeFirst
		}
	case supervisor.EventTurnEnd:
		if !t.open || (ev.Turn != 0 && t.number != 0 && ev.Turn != t.number) {
			return ignore
		}
	case supervisor.EventCLI:
		if !t.open && !sessionWide(ev.Msg) {
			return ignore
		}
	}
	return admit
}

// sessionWide reports whether m is about the session rather than a turn's
// answer (its rate limits, its settings), so it may come between turns.
func sessionWide(m *supervisor.Message) bool {
	return m != nil && (m.Type == "rate_limit_event" || (m.Type == "system" && m.Subtype != "api_retry"))
}

// lostEnd is the end of the open turn for a CLI that lost it; at is its
// time.
func (t *cliTurn) lostEnd(err error, interrupted bool, at time.Time) supervisor.Event {
	return supervisor.Event{Kind: supervisor.EventTurnEnd, Turn: t.number, Err: err, Interrupted: interrupted, Time: at}
}

// Publish implements supervisor.Sink: it checks the event against the
// turn rule, translates it, appends the results to the stream and keeps
// the history, all in one order. A turn's end waits for the turn-end
// hook, and the events after it wait too.
func (c *Session) Publish(ev supervisor.Event) {
	// The next waiting message starts once the lock is released.
	defer c.startQueued()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.cliTurn.check(ev) {
	case ignore:
		log := c.log.Warn()
		if ev.Kind == supervisor.EventCLI {
			log = c.log.Debug()
			if ev.Msg != nil {
				log = log.Str("cli_type", ev.Msg.Type)
			}
		}
		log.Str("event", eventName(ev.Kind)).Int("turn", ev.Turn).Int("open", c.cliTurn.number).Bool("open_turn", c.cliTurn.open).
			Msg("ignored a CLI event outside the turn rule")
		return
	case closeFirst:
		c.log.Warn().Int("turn", ev.Turn).Int("open", c.cliTurn.number).Msg("the CLI started a turn before the open one ended; ending that one")
		// The new start is not the next waiting message's: it takes the
		// session as a turn started directly.
		c.publishLocked(c.cliTurn.lostEnd(errLostTurn, false, ev.Time), false)
	}
	c.publishLocked(ev, true)
}

// publishLocked is Publish for an event the turn rule admitted; advance
// lets a turn's end make the next waiting message current. c.mu is held.
func (c *Session) publishLocked(ev supervisor.Event, advance bool) {
	switch ev.Kind {
	case supervisor.EventTurnStart:
		c.cliTurn = cliTurn{open: true, number: ev.Turn}
		c.cliTurns++
	case supervisor.EventTurnEnd:
		c.cliTurn = cliTurn{}
	}
	// A draft is decided as the person's message goes to the CLI, before
	// anything of its turn can run, even while the turn's events wait.
	c.draftHookLocked(ev)
	// The session is free for the next message as soon as the CLI's turn
	// ended, even while that turn's events wait.
	queueOnly := c.queueSeesLocked(ev, advance)
	if c.turns != nil {
		// As the events arrive, before any waits: their order and times
		// are the turn's own.
		accepted := ev.Time
		if t := c.cliTurn.ticket; ev.Kind == supervisor.EventTurnStart && t != nil {
			accepted = t.Accepted
		}
		c.turns.Observe(c.ID, c.Person, accepted, ev)
	}
	if queueOnly {
		return
	}
	if c.held.waiting() {
		c.held.add(heldEvent{ev: ev})
		return
	}
	if ev.Kind == supervisor.EventTurnEnd && c.onTurnEnd != nil {
		// Questions still open belong to the turn that just ended.
		c.asks.cancelUpTo(c, c.endedTurns+1)
		if c.onTurnEnd(ev) {
			c.held.wait()
			return
		}
	}
	c.applyLocked(ev)
}

func eventName(k supervisor.EventKind) string {
	switch k {
	case supervisor.EventCLI:
		return "cli"
	case supervisor.EventTurnStart:
		return "turn_start"
	case supervisor.EventTurnEnd:
		return "turn_end"
	case supervisor.EventNotice:
		return "notice"
	case supervisor.EventSlotWait:
		return "slot_wait"
	}
	return "unknown"
}

// sent settles t's message after the CLI's Send returned err, and returns
// the next message to send, if any: a message whose turn started is the
// turn's to end (ended here with err if Send failed after the start); one
// whose turn never started fails, with err or, if Send claimed success,
// ErrNotStarted.
func (c *Session) sent(t *Ticket, err error) *Ticket {
	c.mu.Lock()
	started := t.cliStarted
	lost := started && err != nil && c.cliTurn.open && c.cliTurn.ticket == t
	var end supervisor.Event
	if lost {
		end = c.cliTurn.lostEnd(err, false, time.Now())
	}
	c.mu.Unlock()
	switch {
	case lost:
		c.log.Warn().Err(err).Msg("the CLI failed a turn it had started without ending it; ending it")
		c.Publish(end)
		return nil
	case started:
		return nil
	case err == nil:
		c.log.Warn().Msg("the CLI took a message without starting its turn; failing it")
		err = ErrNotStarted
	}
	return c.startFailed(t, err)
}

// Interrupt stops the running turn from any client: pending questions and
// permission prompts are denied with an interrupt at once, then the CLI is
// interrupted in-band. A turn the CLI no longer runs (it lost it) ends
// here, interrupted.
func (c *Session) Interrupt(ctx context.Context) error {
	c.mu.Lock()
	c.asks.cancelUpTo(c, math.MaxInt)
	// The turn this interrupt is for: the one open now, if any.
	was := c.cliTurn
	c.mu.Unlock()
	err := c.cli.Interrupt(ctx)
	if !errors.Is(err, supervisor.ErrNotRunning) {
		return err
	}
	// The CLI runs no turn, and has published the end of every turn it
	// ran: the turn that was open, if it still is, is lost. A turn that
	// started meanwhile (the next message, dispatched as the one before
	// ended by itself) is not this interrupt's and runs.
	c.mu.Lock()
	lost := was.open && c.cliTurn.open && c.cliTurn.number == was.number && c.cliTurn.ticket == was.ticket
	var end supervisor.Event
	if lost {
		end = c.cliTurn.lostEnd(nil, true, time.Now())
	}
	c.mu.Unlock()
	if !lost {
		return err
	}
	c.log.Warn().Msg("interrupt of a turn the CLI no longer runs; ending it")
	c.Publish(end)
	return nil
}
