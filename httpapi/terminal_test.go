package httpapi_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/majorhq/major/hooks"
	"github.com/majorhq/major/httpapi"
	"github.com/majorhq/major/httpapi/httpapitest"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/terminal"
)

// newTerminals runs command (not the CLI) as every terminal, each in a
// slot of pool if there is one.
func newTerminals(tb testing.TB, command []string, pool *supervisor.Pool, log zerolog.Logger) *terminal.Manager {
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
		Commands: cmds, Pool: pool, Grace: time.Minute, Logger: log,
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
	// The upgrade is answered before the terminal starts.
	eventually(t, "the terminal to run", func() bool { return h.terminals.Live() == 1 })
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

// dialRaw opens session id's terminal with exactly the subprotocols and
// headers given, and answers the HTTP status (101 when it opened).
func (h *harness) dialRaw(tb testing.TB, id string, protocols []string, header http.Header) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(h.url, "http") + "/api/claude/sessions/" + id + "/terminal"
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: protocols, HTTPHeader: header})
	if err == nil {
		_ = ws.CloseNow()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		tb.Fatalf("dial the terminal: %v", err)
	}
	return resp.StatusCode
}

// Every check of a terminal request (token, person, session, the page's
// origin, the subprotocol, the handshake) is made before the terminal
// starts: a refused request leaves no process, no terminal_opened for the
// session's clients, and the chat takes its next message at once.
func TestARefusedTerminalLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	const allowed = "https://notes.example"
	h := newHarness(t, harnessOpts{terminals: []string{"/bin/cat"}, cors: []string{allowed}, reply: scriptedReply})
	browser := func(tok, person string) []string {
		return []string{httpapi.TerminalProtocol, "bearer." + base64.RawURLEncoding.EncodeToString([]byte(tok)), "person." + person}
	}
	from := func(origin string) http.Header { return http.Header{"Origin": {origin}} }
	headers := http.Header{"Authorization": {"Bearer " + token}, "X-Notes-Person": {"sebastian"}}

	for _, c := range []struct {
		name      string
		protocols []string
		header    http.Header
		want      int
	}{
		{"a page of another origin", browser(token, "sebastian"), from("https://evil.example"), http.StatusForbidden},
		{"an allowed host under another scheme", browser(token, "sebastian"), from("http://notes.example"), http.StatusForbidden},
		{"an origin that is no URL", browser(token, "sebastian"), from("null"), http.StatusForbidden},
		{"no token", []string{httpapi.TerminalProtocol, "person.sebastian"}, from(allowed), http.StatusUnauthorized},
		{"a wrong token", browser("nope", "sebastian"), from(allowed), http.StatusUnauthorized},
		{"a person the token may not be", browser("only-petra", "sebastian"), from(allowed), http.StatusForbidden},
		{"another person's session", browser(token, "petra"), from(allowed), http.StatusNotFound},
		{"without the terminal's subprotocol", nil, headers, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := h.NewSession(t)
			if status := h.dialRaw(t, id, c.protocols, c.header); status != c.want {
				t.Errorf("status %d, want %d", status, c.want)
			}
			h.assertNothingLeft(t, id, c.name)
		})
	}

	t.Run("a broken handshake", func(t *testing.T) {
		id := h.NewSession(t)
		req, _ := http.NewRequest("GET", h.url+"/api/claude/sessions/"+id+"/terminal", nil)
		req.Header = headers.Clone()
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Protocol", httpapi.TerminalProtocol) // and no Sec-WebSocket-Key
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
		h.assertNothingLeft(t, id, "handshake")
	})

	// The same requests done right open the terminal: from the server's
	// own origin, from an allowed one, and with headers instead of the
	// browser's subprotocols.
	id := h.NewSession(t)
	for _, c := range []struct {
		name      string
		protocols []string
		header    http.Header
	}{
		{"the server's own origin", browser(token, "sebastian"), from(h.url)},
		{"an allowed origin", browser(token, "sebastian"), from(allowed)},
		{"headers", []string{httpapi.TerminalProtocol}, headers},
	} {
		if status := h.dialRaw(t, id, c.protocols, c.header); status != http.StatusSwitchingProtocols {
			t.Errorf("%s: status %d, want 101", c.name, status)
		}
	}
}

// assertNothingLeft checks that no terminal runs for session id, none was
// announced to its clients and the chat runs a message at once.
func (h *harness) assertNothingLeft(tb testing.TB, id, marker string) {
	tb.Helper()
	if pid := h.terminals.Pid(id); pid != 0 {
		tb.Errorf("the session's terminal runs (pid %d)", pid)
	}
	chat, err := h.sessions.Get(id, "sebastian")
	if err != nil {
		tb.Fatal(err)
	}
	for _, ev := range chat.Stream().Events(0) {
		if ev.Type == "terminal_opened" {
			tb.Errorf("the session's clients saw %s", ev.Line)
		}
	}
	msg := "[[say " + marker + "]]"
	if code, out := h.Call(tb, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": msg}); code != http.StatusAccepted {
		tb.Fatalf("a message after the refusal: %d %v", code, out)
	}
	eventually(tb, "the message's turn", func() bool { return h.timesSent(msg) == 1 })
}

// What only the terminal's start finds out, after the upgrade (here: no
// process slot frees up in time), closes the connection with 4000 + the
// HTTP status it stands for, and leaves the chat free.
func TestATerminalThatCannotStartClosesItsConnection(t *testing.T) {
	t.Parallel()
	pool := supervisor.NewPool(supervisor.PoolConfig{Max: 1, SlotWait: 50 * time.Millisecond})
	t.Cleanup(pool.Close)
	release, err := pool.Hold(context.Background(), "petra")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	h := newHarness(t, harnessOpts{terminals: []string{"/bin/cat"}, terminalPool: pool, reply: scriptedReply})
	id := h.NewSession(t)

	term, status := h.dialTerminal(t, id, token, "sebastian")
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("open terminal: %d", status)
	}
	select {
	case <-term.Closed():
	case <-time.After(30 * time.Second):
		t.Fatal("the connection stays open without a terminal")
	}
	if term.Status() != 4000+http.StatusServiceUnavailable {
		t.Fatalf("close status %d, want 4503", term.Status())
	}
	if code, out := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[say free]]"}); code != http.StatusAccepted {
		t.Fatalf("a message after the failed start: %d %v", code, out)
	}
}
