package httpapi_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/terminal"
)

// newTerminals runs command (not the CLI) as every terminal.
func newTerminals(tb testing.TB, command []string, log zerolog.Logger) *terminal.Manager {
	tb.Helper()
	cmds, err := hooks.ListenCommands(hooks.CommandConfig{Socket: filepath.Join(tb.TempDir(), "hooks.sock"), Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmds.Close() })
	vaults, home := tb.TempDir(), tb.TempDir()
	return terminal.NewManager(terminal.Config{
		Launch: func(string, string, string, string) (terminal.Launch, error) {
			return terminal.Launch{Argv: command, Env: []string{"HOME=" + home, "PATH=/usr/bin:/bin"}}, nil
		},
		Dir:      func(string) string { return vaults },
		Commands: cmds, Grace: time.Minute, Logger: log,
	})
}

// dialTerminal opens session id's terminal with the subprotocols a
// browser offers, or answers the HTTP status it was refused with.
func (h *harness) dialTerminal(tb testing.TB, id, tok, person string) (*httpapitest.Terminal, int) {
	tb.Helper()
	return httpapitest.DialTerminal(tb, h.url, id, tok, person)
}

func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The terminal endpoint has the rules of every session endpoint (token
// and person, here as WebSocket subprotocols), and one writer has the
// conversation: no terminal while a turn runs, no app message while the
// terminal is open, and once it ends the next message resumes the
// terminal's conversation.
func TestTerminalAuthAndOneWriter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{terminals: []string{"/bin/cat"}})
	id := h.NewSession(t)

	for _, c := range []struct {
		name, token, person string
		want                int
	}{
		{"no token", "", "sebastian", 401},
		{"wrong token", "nope", "sebastian", 401},
		{"person not allowed", "only-petra", "sebastian", 403},
		{"bad person", token, "../petra", 400},
		{"other person's session", token, "petra", 404},
	} {
		if _, status := h.dialTerminal(t, id, c.token, c.person); status != c.want {
			t.Errorf("%s: status %d, want %d", c.name, status, c.want)
		}
	}
	if r := h.Request(t, "GET", "/api/claude/sessions/"+id+"/terminal", "sebastian", "", ""); r.StatusCode != 400 {
		t.Errorf("a plain GET: %d", r.StatusCode)
	}

	// A running turn keeps the terminal out.
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "long turn"}); code != 202 {
		t.Fatalf("message: %d", code)
	}
	if _, status := h.dialTerminal(t, id, token, "sebastian"); status != 409 {
		t.Fatalf("terminal during a turn: %d", status)
	}
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/interrupt", "sebastian", nil); code != 200 {
		t.Fatalf("interrupt: %d", code)
	}

	events, stop := h.Attach(t, id, "types=terminal_opened,terminal_closed")
	defer stop()
	term, status := h.dialTerminal(t, id, token, "sebastian")
	if status != 101 {
		t.Fatalf("open terminal: %d", status)
	}
	httpapitest.Until(t, events, "terminal_opened")
	term.Send(t, websocket.MessageBinary, []byte("typed in the terminal\r"))
	eventually(t, "the echo", func() bool { return strings.Contains(term.Screen(), "typed in the terminal") })
	term.Send(t, websocket.MessageText, []byte(`{"type":"resize","cols":132,"rows":43}`))

	// The app waits while the terminal has the conversation.
	code, body := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "from the app"})
	if code != 409 || !strings.Contains(body["error"].(string), "terminal") {
		t.Fatalf("app message while the terminal is open: %d %v", code, body)
	}
	if code, _ := h.ChatStream(t, "sebastian", "", httpapitest.JSONBody(map[string]any{"message": "from the phone", "session_id": id})); code != 409 {
		t.Fatalf("chat-stream while the terminal is open: %d", code)
	}

	// A second client takes the terminal over; the first is told.
	second, _ := h.dialTerminal(t, id, token, "sebastian")
	<-term.Closed()
	if term.Status() != 4000 {
		t.Fatalf("the replaced client's close status %d", term.Status())
	}
	eventually(t, "the scroll-back", func() bool { return strings.Contains(second.Screen(), "typed in the terminal") })

	// The client ends the terminal: the app has the
	// conversation back and resumes the terminal's.
	second.Send(t, websocket.MessageText, []byte(`{"type":"close"}`))
	<-second.Closed()
	if second.Status() != websocket.StatusNormalClosure {
		t.Fatalf("close status at the end %d", second.Status())
	}
	httpapitest.Until(t, events, "terminal_closed")
	if h.fakes.CLI(id).Resumed() == "" {
		t.Fatal("the session does not resume the terminal's conversation")
	}
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "back in the app"}); code != 202 {
		t.Fatalf("app message after the terminal: %d", code)
	}
}

// Clearing a session ends its terminal at once: the cleared conversation
// is not continued there, and its process does not hold a slot until the
// grace time is over.
func TestClearingASessionEndsItsTerminal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{terminals: []string{"/bin/cat"}})
	id := h.NewSession(t)
	term, status := h.dialTerminal(t, id, token, "sebastian")
	if status != 101 {
		t.Fatalf("open terminal: %d", status)
	}
	if h.terminals.Live() != 1 {
		t.Fatal("no terminal runs")
	}
	if code, out := h.Call(t, "POST", "/api/claude/clear", "sebastian", map[string]any{"session_id": id}); code != 200 || out["cleared"] != true {
		t.Fatalf("clear: %d %v", code, out)
	}
	eventually(t, "the terminal's end", func() bool { return h.terminals.Live() == 0 })
	select {
	case <-term.Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's client was not told of its end")
	}
}
