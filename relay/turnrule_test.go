package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/supervisor"
)

// started waits until t's turn has started or never will, and returns
// why not.
func started(tb testing.TB, t *relay.Ticket) error {
	tb.Helper()
	select {
	case <-t.Started():
		return t.Err()
	case <-time.After(30 * time.Second):
		tb.Fatalf("the turn of %q neither started nor failed", t.Message)
		return nil
	}
}

// ended waits until the stream has the terminal event of turn, and
// returns it.
func ended(tb testing.TB, chat *relay.Session, turn int) *relay.Event {
	tb.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, ev := range chat.Stream().Events(0) {
			if ev.Turn == turn && ev.Terminal {
				return ev
			}
		}
	}
	tb.Fatalf("turn %d did not end", turn)
	return nil
}

// checkOneEnd fails the test unless every turn on chat's stream ended
// exactly once, n turns in all, with no text after its end, and no turn
// is open.
func checkOneEnd(tb testing.TB, chat *relay.Session, n int) {
	tb.Helper()
	ends := map[int]int{}
	turns := 0
	for _, ev := range chat.Stream().Events(0) {
		switch {
		case ev.Type == "turn_start":
			turns++
		case ev.Terminal:
			ends[ev.Turn]++
		case ev.Type == "text" && ends[ev.Turn] > 0:
			tb.Errorf("text after the end of turn %d: %s", ev.Turn, ev.Line)
		}
	}
	for turn := 1; turn <= turns; turn++ {
		if ends[turn] != 1 {
			tb.Errorf("turn %d ended %d times", turn, ends[turn])
		}
	}
	if turns != n || len(ends) != n || chat.Stream().TurnOpen() {
		tb.Errorf("%d turns started, %d ended (want %d), one open: %v", turns, len(ends), n, chat.Stream().TurnOpen())
	}
}

// TestTurnRuleHolds drives a chat with a fake CLI that breaks the rule of
// a turn in each way a lifecycle race can: an end with no start, an end
// published before its start, a message after the end, an end for another
// turn, a start that never ends, a message taken without a start, a
// failure after the start. Each time the client of every message gets
// exactly one done or error, the turn is interruptible, and the chat runs
// the next message.
func TestTurnRuleHolds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// first sends the first message and makes it end (or fail) as
		// the fault allows; it returns the message's ticket.
		first func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket
		// failed: the first message never ran (its ticket failed).
		failed bool
		// outcome is how the first turn ended ("" when it failed).
		outcome string
	}{
		{name: "an end with no start", outcome: "done", first: func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket {
			a := submit(t, sessions, chat, "a")
			started(t, a)
			f.Reply("answer a")
			ended(t, chat, a.Turn())
			// The turn's end again, and an unnumbered one.
			f.Emit(supervisor.Event{Kind: supervisor.EventTurnEnd, Turn: f.Turn(), Err: supervisor.ErrProcessExited})
			f.Emit(supervisor.Event{Kind: supervisor.EventTurnEnd})
			return a
		}},
		{name: "an end before its start", outcome: "interrupted", first: func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket {
			f.NextFault(relaytest.EndBeforeStart)
			a := submit(t, sessions, chat, "a")
			if err := started(t, a); err != nil {
				t.Fatalf("the message failed: %v", err)
			}
			interrupt(t, chat)
			return a
		}},
		{name: "a message after the end", outcome: "done", first: func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket {
			a := submit(t, sessions, chat, "a")
			started(t, a)
			f.Reply("answer a")
			ended(t, chat, a.Turn())
			f.Emit(relaytest.TextEvent("late words"))
			if h := chat.History(); len(h) != 2 || h[1].Content != "answer a" {
				t.Fatalf("history after a late message: %+v", h)
			}
			return a
		}},
		{name: "an end for another turn", outcome: "done", first: func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket {
			a := submit(t, sessions, chat, "a")
			started(t, a)
			f.Emit(supervisor.Event{Kind: supervisor.EventTurnEnd, Turn: f.Turn() + 5, Err: supervisor.ErrProcessExited})
			if !chat.Stream().TurnOpen() {
				t.Fatal("another turn's end ended the open one")
			}
			f.Reply("answer a")
			return a
		}},
		{name: "a start that never ends", outcome: "interrupted", first: func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket {
			f.NextFault(relaytest.Forgotten)
			a := submit(t, sessions, chat, "a")
			if err := started(t, a); err != nil {
				t.Fatalf("the message failed: %v", err)
			}
			interrupt(t, chat)
			return a
		}},
		{name: "a message taken without a start", failed: true, first: func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket {
			f.NextFault(relaytest.NoStart)
			a := submit(t, sessions, chat, "a")
			if err := started(t, a); !errors.Is(err, relay.ErrNotStarted) {
				t.Fatalf("the message that never started: %v, want ErrNotStarted", err)
			}
			return a
		}},
		{name: "a failure after the start", outcome: "error", first: func(t *testing.T, sessions *relay.Registry, chat *relay.Session, f *relaytest.CLI) *relay.Ticket {
			f.NextFault(relaytest.FailAfterStart)
			a := submit(t, sessions, chat, "a")
			if err := started(t, a); err != nil {
				t.Fatalf("the message failed: %v", err)
			}
			return a
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{})
			chat, err := sessions.GetOrCreate("", "sebastian")
			if err != nil {
				t.Fatal(err)
			}
			f := fakes.CLI(chat.ID)
			a := tc.first(t, sessions, chat, f)
			turns := 1
			if tc.failed {
				turns = 0
			} else if got := outcome(ended(t, chat, a.Turn())); got != tc.outcome {
				t.Fatalf("the first turn ended %s, want %s", got, tc.outcome)
			}

			// The chat takes the next message and runs it.
			b := submit(t, sessions, chat, "b")
			if err := started(t, b); err != nil {
				t.Fatalf("the next message: %v", err)
			}
			if !f.Reply("answer b") {
				t.Fatal("the next message did not reach the CLI")
			}
			if got := outcome(ended(t, chat, b.Turn())); got != "done" {
				t.Fatalf("the next turn ended %s", got)
			}
			checkOneEnd(t, chat, turns+1)
		})
	}
}

func submit(tb testing.TB, sessions *relay.Registry, chat *relay.Session, text string) *relay.Ticket {
	tb.Helper()
	t, err := sessions.Submit(chat, text, relay.SubmitOptions{Stream: true})
	if err != nil {
		tb.Fatalf("submit %q: %v", text, err)
	}
	return t
}

func interrupt(tb testing.TB, chat *relay.Session) {
	tb.Helper()
	if err := chat.Interrupt(context.Background()); err != nil {
		tb.Fatalf("interrupt: %v", err)
	}
}

// outcome is how a terminal event says its turn ended: done, interrupted
// or error.
func outcome(ev *relay.Event) string {
	if ev.Type == "error" {
		return "error"
	}
	if strings.Contains(string(ev.Line), `"outcome":"interrupted"`) {
		return "interrupted"
	}
	return "done"
}
