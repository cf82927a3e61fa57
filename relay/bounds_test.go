package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/supervisor"
)

// boundedSession is a stored session whose stream keeps cli events within
// limits made small.
func boundedSession(tb testing.TB, limits outputLimits) *Session {
	tb.Helper()
	st := newStore(tb)
	c, err := storedRegistry(tb, st, RegistryConfig{}).GetOrCreate("", "sebastian")
	if err != nil {
		tb.Fatal(err)
	}
	c.stream.limits = limits
	return c
}

// padded is a CLI message of about size bytes, as anything in the sandbox
// can write onto the CLI's output.
func padded(tb testing.TB, n, size int) supervisor.Event {
	tb.Helper()
	return cliLine(tb, fmt.Sprintf(`{"type":"system","subtype":"note","n":%d,"pad":%q}`, n, strings.Repeat("a", size)))
}

// cliOf is what the events of turn hold of cli events: how many kept
// whole, and whether one marks the rest omitted.
func cliOf(events []*Event, turn int) (kept int, omitted bool) {
	for _, ev := range events {
		switch {
		case ev.Type != "cli" || ev.Turn != turn:
		case bytes.Contains(ev.Line, []byte(`"omitted":true`)):
			omitted = true
		default:
			kept++
		}
	}
	return kept, omitted
}

// The cli events of one turn (and of the time after it) are kept up to
// their bound: past it one event marks the rest omitted, and the rest is
// kept neither in memory nor in the log, while the events made of the
// same messages (the text) still are. The next turn has its own room.
func TestTurnCLIEventsKeptWithinTheirBound(t *testing.T) {
	t.Parallel()
	c := boundedSession(t, outputLimits{turnCLI: 8 << 10, sessionCLI: 1 << 20, turn: 1 << 20})
	var answer strings.Builder
	turn := func(n int) {
		evs := []supervisor.Event{{Kind: supervisor.EventTurnStart, Text: fmt.Sprint("turn ", n), Time: time.Now()}}
		for i := range 20 {
			evs = append(evs, padded(t, i, 1<<10))
			piece := fmt.Sprintf("piece %d of %d. ", i, n)
			answer.WriteString(piece)
			evs = append(evs, delta(t, piece))
		}
		evs = append(evs, supervisor.Event{Kind: supervisor.EventTurnEnd, Time: time.Now()})
		// Between turns too, the sandbox may write (the CLI's system
		// messages may come then).
		for i := range 20 {
			evs = append(evs, padded(t, 100+i, 1<<10))
		}
		publishAll(c, evs)
	}
	turn(1)
	turn(2)
	events := c.stream.Events(0)
	for n := 1; n <= 2; n++ {
		kept, omitted := cliOf(events, n)
		// Each note is about 1 KiB, each delta's cli event less.
		if !omitted || kept < 4 || kept > 16 {
			t.Errorf("turn %d: %d cli events kept, omitted %v; want the first 8 KiB of them and a marker", n, kept, omitted)
		}
	}
	if got := textOf(events); got != answer.String() {
		t.Errorf("the text is %q, want %q", got, answer.String())
	}
	logged, err := c.elog.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) != len(events) {
		t.Errorf("the log holds %d events, memory %d", len(logged), len(events))
	}
}

// Past the session's bound, a turn's end drops the cli events of the
// turns before it, from the log at once and from memory at the next tidy,
// so a session keeps at most its bound of them, in memory and in its log,
// however many turns the sandbox fills; every other event stays. The same
// holds for a session whose events left memory between its turns.
func TestSessionCLIEventsKeptWithinTheirBound(t *testing.T) {
	t.Parallel()
	for _, evicted := range []bool{false, true} {
		t.Run(fmt.Sprintf("evicted between turns %v", evicted), func(t *testing.T) {
			t.Parallel()
			limits := outputLimits{turnCLI: 8 << 10, sessionCLI: 20 << 10, turn: 1 << 20}
			c := boundedSession(t, limits)
			const turns = 8
			// check reads the cli events' bytes in the log and in memory,
			// without loading the events evicted.
			check := func(when string) {
				t.Helper()
				logged, err := c.elog.Records()
				if err != nil {
					t.Fatal(err)
				}
				var onDisk int64
				for _, r := range logged {
					if r.Type == "cli" {
						onDisk += int64(len(r.Line))
					}
				}
				c.stream.mu.Lock()
				inMemory := cliBytes(c.stream.events)
				c.stream.mu.Unlock()
				if inMemory > limits.sessionCLI || onDisk > limits.sessionCLI {
					t.Fatalf("%s the session holds %d bytes of cli events in memory, %d in its log; want at most %d",
						when, inMemory, onDisk, limits.sessionCLI)
				}
			}
			for n := 1; n <= turns; n++ {
				evs := []supervisor.Event{{Kind: supervisor.EventTurnStart, Text: fmt.Sprint("turn ", n), Time: time.Now()}}
				for i := range 7 {
					evs = append(evs, padded(t, i, 1<<10))
				}
				publishAll(c, evs)
				check(fmt.Sprint("during turn ", n))
				c.Publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Time: time.Now()})
				// The compaction the end asked for is done once the log
				// is read back; then the eviction, if any, and the tidy
				// the sweep makes every minute.
				check(fmt.Sprint("at the end of turn ", n))
				if evicted && !c.evict() {
					t.Fatalf("after turn %d the idle session was not evicted", n)
				}
				c.stream.tidy()
				check(fmt.Sprint("after turn ", n))
			}
			events := c.stream.Events(0)
			for n := 1; n <= turns; n++ {
				kept, omitted := cliOf(events, n)
				switch {
				case omitted:
					t.Errorf("turn %d: its cli events were omitted: it had its room", n)
				case n == turns && kept != 7:
					t.Errorf("the last turn keeps %d cli events, want its 7", kept)
				}
			}
			if kept, _ := cliOf(events, 1); kept > 0 {
				t.Errorf("the first turn still keeps %d cli events", kept)
			}
			// A turn without an answer is the person's message alone.
			if got := len(c.History()); got != turns {
				t.Errorf("the history has %d messages, want the %d turns'", got, turns)
			}
			logged, err := c.elog.Records()
			if err != nil {
				t.Fatal(err)
			}
			if len(logged) != len(events) {
				t.Errorf("the log holds %d events, memory %d", len(logged), len(events))
			}
		})
	}
}

// cliBytes is the bytes of the cli events in events.
func cliBytes(events []*Event) int64 {
	var n int64
	for _, ev := range events {
		if ev.Type == "cli" {
			n += int64(len(ev.Line))
		}
	}
	return n
}

// stoppable is a CLI that runs no process, whose Interrupt ends the turn
// open on its Sink as interrupted, as the CLI does.
type stoppable struct {
	*supervisor.CLI
	sink        supervisor.Sink
	interrupted chan struct{}
	calls       atomic.Int32
}

func (s *stoppable) Interrupt(ctx context.Context) error {
	if s.calls.Add(1) == 1 {
		defer close(s.interrupted)
	}
	s.sink.Publish(supervisor.Event{Kind: supervisor.EventTurnEnd, Interrupted: true, Time: time.Now()})
	return nil
}

// A turn whose output (its text, tools, statuses) would pass its bound is
// cut there: one status tells the person, the rest of its output is not
// kept, the turn is interrupted and ends as interrupted. Between turns
// the same bound holds, with nothing to interrupt. The next turn has its
// own room.
func TestTurnOutputPastItsBoundIsCut(t *testing.T) {
	t.Parallel()
	var cli *stoppable
	s, err := NewRegistry(RegistryConfig{Logger: zerolog.Nop(), Launcher: LauncherFunc(func(p SessionParams) CLI {
		cli = &stoppable{CLI: supervisor.NewCLI(supervisor.CLIConfig{ID: p.ID, Person: p.Person, Sink: p.Sink}), sink: p.Sink,
			interrupted: make(chan struct{})}
		return cli
	})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := s.GetOrCreate("", "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	c.stream.limits = outputLimits{turnCLI: 1 << 20, sessionCLI: 4 << 20, turn: limit}

	c.Publish(supervisor.Event{Kind: supervisor.EventTurnStart, Text: "write a lot", Time: time.Now()})
	piece := strings.Repeat("x", 1<<10)
	for range 2 * limit / len(piece) {
		c.Publish(delta(t, piece))
	}
	select {
	case <-cli.interrupted:
	case <-time.After(time.Minute): // never, unless the cut is missing
		t.Fatal("the turn was not interrupted")
	}
	// Between turns: each line makes a rate_limit event, if the turn
	// before was not cut.
	rateLimits := func() {
		for i := range 2 * limit / 100 {
			c.Publish(cliLine(t, fmt.Sprintf(`{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":%d,"rateLimitType":"five_hour"}}`, i)))
		}
	}
	rateLimits()
	answer := func(message, text string) {
		publishAll(c, []supervisor.Event{
			{Kind: supervisor.EventTurnStart, Text: message, Time: time.Now()},
			delta(t, text),
			{Kind: supervisor.EventTurnEnd, Time: time.Now()},
		})
	}
	answer("and now?", "a short answer")
	rateLimits()
	answer("again?", "another answer")

	events := c.stream.Events(0)
	cuts := map[int]int{}
	kept := map[int]int{}
	var text int
	var ends []string
	for _, ev := range events {
		switch {
		case ev.Type == "status" && strings.Contains(string(ev.Line), "more than one turn may show"):
			cuts[ev.Turn]++
		case ev.Type == "rate_limit":
			kept[ev.Turn] += len(ev.Line)
		case ev.Type == "text" && ev.Turn == 1:
			text += len(ev.delta())
		case ev.Terminal:
			var end struct{ Outcome string }
			_ = json.Unmarshal(ev.Line, &end)
			ends = append(ends, end.Outcome)
		}
	}
	if cuts[1] != 1 || cuts[2] != 1 || len(cuts) != 2 {
		t.Errorf("statuses of a cut, by turn: %v; want one for the first turn, one for the time after the second", cuts)
	}
	if text == 0 || text > limit {
		t.Errorf("the cut turn shows %d bytes of text, want some and at most %d", text, limit)
	}
	if kept[1] != 0 || kept[2] == 0 || kept[2] > limit || len(kept) != 1 {
		t.Errorf("bytes of rate_limit events kept between the turns, by turn: %v; want none after the cut turn, some after the next, within the bound", kept)
	}
	if n := cli.calls.Load(); n != 1 {
		t.Errorf("the CLI was interrupted %d times, want once", n)
	}
	if strings.Join(ends, " ") != "interrupted success success" {
		t.Errorf("the turns ended %v, want interrupted, then success twice", ends)
	}
	if h := c.History(); len(h) != 6 || h[3].Content != "a short answer" || h[5].Content != "another answer" {
		t.Errorf("history %+v", h)
	}
}
