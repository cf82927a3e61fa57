package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/majorhq/major/clientevent"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/usage"
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

// heldEvent is one event waiting behind a turn's end hook: a CLI event, or
// the publication of one a request of the CLI made (publish).
type heldEvent struct {
	ev      supervisor.Event
	publish func()
}

// heldEvents keeps a session's events in order while a turn's end hook
// runs: from the turn's end until finishTurn has published it, every
// event waits here, and is published after it in the order it came. It
// is guarded by Session.mu.
type heldEvents struct {
	ending bool
	events []heldEvent
}

// waiting reports whether a turn's end hook runs: events wait.
func (h *heldEvents) waiting() bool { return h.ending }

// wait makes the events from now on wait, for a turn's end hook.
func (h *heldEvents) wait() { h.ending = true }

// add keeps one event until the hook is done.
func (h *heldEvents) add(e heldEvent) { h.events = append(h.events, e) }

// release ends the wait and returns the events kept, in order.
func (h *heldEvents) release() []heldEvent {
	held := h.events
	h.ending, h.events = false, nil
	return held
}

// publishInOrderLocked publishes an event that a request of the CLI made (a
// question, a draft, their answers) in the order of the turn it belongs
// to: while the turn before waits for its end hook, it waits behind that
// end and the new turn's start, as the CLI's own events do. then, if not
// nil, gets the published event. c.mu is held.
func (c *Session) publishInOrderLocked(body clientevent.Body, then func(*Event)) {
	publish := func() {
		c.flushTextLocked()
		e := c.stream.publishJSON(body, false, false)
		if then != nil {
			then(e)
		}
	}
	if c.held.waiting() {
		c.held.add(heldEvent{publish: publish})
		return
	}
	publish()
}

// turnEnding is what a turn-end hook found: a status for the person, and
// what the turn changed in their notes (nil: nothing).
type turnEnding struct {
	status  string
	changes clientevent.Body
}

// finishTurn runs the turn-end hook for end (a turn-end event), publishes
// its status, its changes and then end, and then the events held
// meanwhile; a turn end among them runs the hook again. It runs in its
// own goroutine, owned by Sessions. While it holds c.mu it publishes in
// order itself, so ending is cleared then.
func (c *Session) finishTurn(end supervisor.Event, hook func() turnEnding) {
	for {
		ending := hook()
		c.mu.Lock()
		held := c.held.release()
		if ending.status != "" {
			c.applyLocked(supervisor.Event{Kind: supervisor.EventNotice, Text: ending.status, Time: time.Now()})
		}
		if ending.changes != nil {
			c.flushTextLocked()
			if e := c.stream.publishJSON(ending.changes, false, false); e != nil {
				c.observeLocked(e, ending.changes)
			}
		}
		c.applyLocked(end)
		next := -1
		for i, h := range held {
			if h.publish != nil {
				h.publish()
				continue
			}
			if h.ev.Kind == supervisor.EventTurnEnd {
				next = i
				break
			}
			c.applyLocked(h.ev)
		}
		if next < 0 {
			c.mu.Unlock()
			return
		}
		c.held.wait()
		end = held[next].ev
		for _, h := range held[next+1:] {
			c.held.add(h)
		}
		c.mu.Unlock()
	}
}

// applyLocked publishes one supervisor event. c.mu is held.
func (c *Session) applyLocked(ev supervisor.Event) {
	if ev.Kind == supervisor.EventCLI && (c.wasCutLocked() || c.stream.turnFull()) {
		// The turn's output passed its bound: the rest of it is dropped.
		c.cutLocked()
		return
	}
	var took time.Duration
	var failed bool
	if ev.Kind == supervisor.EventTurnEnd {
		ev = c.endShownLocked(ev)
		// Questions still open belong to the turn that just ended; the
		// next turn's may be open already.
		c.endedTurns = min(c.endedTurns+1, c.cliTurns)
		c.asks.cancelUpTo(c, c.endedTurns)
		// Counted before the terminal event goes out, so a client that saw
		// the turn end also sees it in the metrics.
		took = ev.Time.Sub(c.turnStarted)
		failed = ev.Err != nil || (ev.Msg != nil && ev.Msg.IsError && !ev.Interrupted)
		c.metrics.turnEnded(took, failed, ev.Interrupted)
		if c.stopping && (ev.Interrupted || errors.Is(ev.Err, supervisor.ErrClosed)) {
			// The server's shutdown ended the turn, not the person.
			ev.Interrupted, ev.Err = false, clientevent.ErrServerStopped
		}
	}
	// Text held back for the next delta goes out before anything else:
	// no delta follows it.
	if ev.Kind != supervisor.EventCLI || ev.Msg == nil || ev.Msg.Type != "stream_event" {
		c.flushTextLocked()
	}
	var started, published *Event
	for _, o := range c.hold.Apply(c.viewDraftLocked(ev, c.tr.Translate(ev))) {
		if f, ok := o.Body.(clientevent.Error); ok && ev.Kind == supervisor.EventTurnEnd && c.refused != nil {
			// The gateway refused a model request for a spent budget: the
			// CLI saw an API error, the person reads which budget.
			f.Message, f.Kind, f.Status, f.RetryAfter = c.refused.Error(), clientevent.KindBudget, 0, 0
			o.Body = f
		}
		if start, ok := o.Body.(clientevent.TurnStart); ok {
			o.Body = c.withAttachedLocked(start)
		}
		if len(o.Withheld) > 0 {
			c.log.Warn().Str("cli_type", ev.Msg.Type).Str("cli_subtype", ev.Msg.Subtype).Strs("upstream", o.Withheld).
				Msg("upstream error text withheld from clients")
		}
		var ended *TurnEnded
		if o.Terminal {
			// Read before the event is observed: that starts the next
			// turn's text.
			te := c.turnEndedLocked(o.Body)
			ended = &te
		}
		var e *Event
		if ev.Kind == supervisor.EventCLI {
			var full bool
			if e, full = c.stream.publishOutput(o.Body); full {
				c.cutLocked()
				break
			}
		} else {
			e = c.stream.publishJSON(o.Body, o.BeginTurn, o.Terminal)
		}
		if e != nil {
			c.observeLocked(e, o.Body)
			if ended != nil {
				c.notify.TurnEnded(*ended)
			}
		}
		if rl, ok := o.Body.(clientevent.RateLimit); ok && rl.Status == "rejected" {
			c.rateLimitedLocked(rl)
		}
		if f, ok := o.Body.(clientevent.Error); ok && ev.Msg != nil {
			// The person got a sentence; the CLI's own words (which name
			// internal addresses) are for the operator.
			c.log.Warn().Str("kind", f.Kind).Int("status", f.Status).Str("cli_result", clientevent.OneLine(ev.Msg.Result, 2000)).
				Strs("cli_errors", ev.Msg.Errors).Msg("turn failed")
		}
		if o.BeginTurn {
			started = e
		}
		published = e
	}
	c.steerSees(ev, published)
	switch ev.Kind {
	case supervisor.EventTurnStart:
		c.shownTurns++
		c.startTicketLocked(started, ev.Text, ev.Time)
	case supervisor.EventTurnEnd:
		c.endTicketLocked(ev.Time)
	}
	if ev.Kind == supervisor.EventTurnStart {
		c.announceDraftLocked()
	}
	if ev.Kind == supervisor.EventTurnStart || ev.Kind == supervisor.EventTurnEnd {
		c.lastActivity = ev.Time
	}
	if ev.Kind == supervisor.EventCLI && ev.Msg != nil && ev.Msg.Type == "system" {
		c.noteReportedLocked(ev.Msg)
	}
	switch ev.Kind {
	case supervisor.EventTurnStart:
		c.turnStarted = ev.Time
		c.refused = nil
	case supervisor.EventTurnEnd:
		c.refused = nil
		switch {
		case c.meteredMode:
			d := usage.Day{Messages: 1}
			if ev.Usage != nil {
				d.AgentTurns, d.DurationMS = ev.Usage.NumTurns, ev.Usage.DurationMS
			}
			c.ledger.Add(c.Person, ev.Time, d)
		case ev.Usage != nil:
			c.ledger.Record(c.Person, ev.Time, ev.Usage)
		}
		if ev.Msg != nil && !ev.Msg.IsError {
			// The process the turn ran on took the fork or rewind.
			c.fork, c.resumeAt = false, ""
		}
		outcome := "done"
		switch {
		case ev.Interrupted:
			outcome = "interrupted"
		case failed:
			outcome = "error"
		}
		c.log.Info().Str("person", c.Person).Str("outcome", outcome).Dur("took_ms", took).AnErr("error", ev.Err).Msg("turn ended")
		c.persistLocked()
	}
}

// flushTextLocked publishes the text held back for the next delta, if any.
// c.mu is held.
func (c *Session) flushTextLocked() {
	if t, ok := c.hold.Flush(); ok {
		if e := c.stream.publishJSON(t, false, false); e != nil {
			c.observeLocked(e, t)
		}
	}
}

// observeLocked keeps the history and title from the session's own events; the
// same code rebuilds them from the log after a restart. body is the event
// as published, or nil for a logged event, which is then decoded from its
// line. c.mu is held.
func (c *Session) observeLocked(ev *Event, body clientevent.Body) {
	if ev.Type == "turn_start" && c.title == "" {
		e, ok := body.(clientevent.TurnStart)
		if !ok {
			_ = json.Unmarshal(ev.Line, &e)
		}
		c.title = clientevent.OneLine(e.Message, 80)
	}
	switch ev.Type {
	case "title":
		// The person's own title (SetTitle), from the log after a restart.
		if e, ok := body.(titleEvent); ok {
			c.title = e.Title
		} else if json.Unmarshal(ev.Line, &e) == nil && e.Title != "" {
			c.title = e.Title
		}
	case "turn_start":
		c.answerHead.Reset()
	case "text":
		// The head of the turn's answer, for a notification of its end.
		if c.answerHead.Len() < answerHeadBytes {
			t, ok := body.(clientevent.Text)
			if !ok {
				_ = json.Unmarshal(ev.Line, &t)
			}
			c.answerHead.WriteString(t.Delta)
		}
	case "imported":
		// What the first message carries to the model.
		var e importedEvent
		_ = json.Unmarshal(ev.Line, &e)
		c.imported = e.Messages
	case "changes", "rewound":
		c.noteCommitLocked(ev, body)
	}
	if c.hist != nil {
		c.hist.observe(ev, body)
	}
}

// answerHeadBytes bounds Session.answerHead.
