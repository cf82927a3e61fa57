package relay

import (
	"bytes"
	"fmt"

	"github.com/majorhq/major/clientevent"
)

// What the CLI's output may put in a session's log. Anything in the
// person's sandbox can write lines onto the CLI's output (its stdout is
// open to every process there), and the relay takes them as the CLI's:
// these bounds keep what it keeps of them, in memory and in the log,
// whatever is written. A real answer stays far below them (README,
// Reliability).
const (
	// MaxTurnCLIBytes bounds the raw cli events kept of one turn (and of
	// the time until the next one). Past it, one cli event marked
	// omitted stands for the rest, which are not kept; the events made
	// of them still are.
	MaxTurnCLIBytes = 8 << 20
	// MaxSessionCLIBytes bounds the raw cli events of a session's turns
	// that a compaction has not dropped: past it, a turn's cli events are
	// omitted as past MaxTurnCLIBytes. A turn's end that leaves less
	// than a turn's room has the cli events of all the turns before it
	// dropped (a compaction), from the log at once and from memory at the
	// next tidy.
	MaxSessionCLIBytes = 32 << 20
	// MaxTurnBytes bounds the other events of one turn (its text, tools,
	// results, statuses). The output that would take a turn past it is
	// not shown: a status says so, the rest of the turn's output is
	// dropped and the turn is interrupted.
	MaxTurnBytes = 32 << 20
)

// outputLimits are a stream's bounds; tests make them small.
type outputLimits struct {
	turnCLI, sessionCLI, turn int64
}

var defaultLimits = outputLimits{turnCLI: MaxTurnCLIBytes, sessionCLI: MaxSessionCLIBytes, turn: MaxTurnBytes}

// turnTally is what the stream's last turn (and the time after it) holds:
// the bytes of its cli events and of its other events, and whether a cli
// event of it was omitted.
type turnTally struct {
	cli, other int64
	omitted    bool
}

// omittedCLI stands for the cli events of a turn past the bounds.
var omittedCLI = []byte(`{"type":"cli","omitted":true,"event":{}}`)

// countLocked adds ev to the tallies. s.mu is held.
func (s *Stream) countLocked(ev *Event) {
	n := int64(len(ev.Line))
	if ev.Type != "cli" {
		s.tally.other += n
		return
	}
	s.tally.cli += n
	s.cliBytes += n
	if s.cliTurns == nil {
		s.cliTurns = map[int]int64{}
	}
	s.cliTurns[ev.Turn] += n
}

// boundLocked is what an event of the CLI's output of type typ and body
// becomes within the bounds: body itself, the omitted marker for the
// first cli event past them (nil for the next ones: not kept), or full
// for an other event that would take the turn past its bound (not
// kept). s.mu is held.
func (s *Stream) boundLocked(typ string, body []byte) (kept []byte, full bool) {
	n := int64(len(body))
	switch {
	case typ != "cli":
		return body, s.tally.other+n > s.limits.turn
	case s.tally.omitted:
		return nil, false
	case s.tally.cli+n <= s.limits.turnCLI && s.cliBytes+n <= s.limits.sessionCLI:
		return body, false
	}
	s.tally.omitted = true
	return omittedCLI, false
}

// turnFull reports whether the last turn's events other than cli events
// have reached their bound.
func (s *Stream) turnFull() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tally.other >= s.limits.turn
}

// cliOver reports whether the session's cli events leave less than a
// turn's room.
func (s *Stream) cliOver() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cliBytes > s.limits.sessionCLI-s.limits.turnCLI
}

// tallyLocked counts again what events (all the stream's, on disk or
// in memory) hold: the cli events' bytes, per turn, and the last turn's
// tally. s.mu is held.
func (s *Stream) tallyLocked(events []*Event) {
	s.cliBytes, s.cliTurns = 0, nil
	for _, ev := range events {
		if ev.Type == "cli" {
			s.countLocked(ev)
		}
	}
	s.tally = turnTally{}
	for i := len(events) - 1; i >= 0 && events[i].Turn == s.turn; i-- {
		ev := events[i]
		if ev.Type != "cli" {
			s.tally.other += int64(len(ev.Line))
			continue
		}
		s.tally.cli += int64(len(ev.Line))
		if bytes.HasSuffix(ev.Line, omittedCLI[1:]) {
			s.tally.omitted = true
		}
	}
}

// trimmedLocked takes the cli events of turns up to turn out of the
// count: a tidy dropped them from memory, and a compaction drops them
// from disk (or did, for a stream whose events are on disk only). s.mu
// is held.
func (s *Stream) trimmedLocked(turn int) {
	for t, n := range s.cliTurns {
		if t <= turn {
			s.cliBytes -= n
			delete(s.cliTurns, t)
		}
	}
}

// cutLocked ends what the turn being published shows, once its output
// reached MaxTurnBytes: a status tells the person, the rest of the turn's
// output (until the next turn) is dropped, and the CLI's turn, if it is
// the one still running, is interrupted. c.mu is held.
func (c *Session) cutLocked() {
	turn := c.stream.lastTurn()
	if c.cutTurn == turn {
		return
	}
	c.cutTurn = turn
	// The CLI's open turn is the one published only if every turn it
	// started has been: otherwise this one ended already, and its end
	// waits behind a turn-end hook.
	running := c.cliTurn.open && c.shownTurns == c.cliTurns
	c.log.Warn().Int("turn", turn).Int64("limit_bytes", c.stream.limits.turn).Bool("interrupted", running).
		Msg("the turn's output passed its bound: the rest of it is dropped")
	msg := fmt.Sprintf("This answer passed %d MiB, more than one turn may show: the rest of it is left out", c.stream.limits.turn>>20)
	if running {
		msg += ", and the turn was stopped"
	}
	c.flushTextLocked()
	status := clientevent.Status{Type: "status", Message: msg + "."}
	if e := c.stream.publishJSON(status, false, false); e != nil {
		c.observeLocked(e, status)
	}
	if running {
		c.drafts.mu.Lock()
		c.stopTurnLocked("of a turn whose output passed its bound")
		c.drafts.mu.Unlock()
	}
}

// wasCutLocked reports whether the turn being published was cut: its
// output is dropped. c.mu is held.
func (c *Session) wasCutLocked() bool {
	return c.cutTurn != 0 && c.cutTurn == c.stream.lastTurn()
}
